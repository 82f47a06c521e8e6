"""The two message reducers: EvoFabric's keep-first `append_messages` and LangGraph's
`add_messages` (replace by id, `RemoveMessage`, remove-all, ids for messages without one).

Histories grow long, and most updates only append, so both reducers keep the append path
at O(appended): a history is held as a `Vector`, and the ids it holds (each with its
position) are an `_IdIndex` entry cached by the Vector's identity, so asking "is this id
already here?" costs no scan. Only what changes messages already held (a replace, a remove)
rebuilds the history, in O(n).

A message's id is its `id` (EvoFabric's messages: `msg_id`), as an attribute or, for a
mapping, a key. Messages of any kind work: `Message`, dicts, pydantic models, attrs classes
and dataclasses (a new id is set on a copy); a message of another kind without an id is
appended and can never be replaced or removed. (A schema field under `add_messages` does
not take pydantic messages: `_schema.compile` says why.)

The index assumes what the kernel guarantees: a history's messages are never changed in
place (the commit hands `apply` copies of mutable items). A caller of these functions on its
own Vectors of dicts must not mutate the dicts either.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import immutables
import msgspec

from .._values.messages import REMOVE_ALL_MESSAGES, RemoveMessage
from .._values.vector import Vector

Positions = immutables.Map[Any, int]
"""A history's ids, each with the position of its message."""


def append_messages(old: Any, new: Any) -> Any:
    """EvoFabric's message reducer: append `new` to `old`, dropping repeated ids.

    `new` is a list, tuple or Vector of messages, or one message. Each message whose id
    (`id`, or EvoFabric's `msg_id`) is already present is dropped: the first one stays, as
    in EvoFabric. Ids are checked against `old` and against the messages appended before it
    in the same call, so a batch cannot duplicate itself either. The result has `old`'s
    kind: a Vector stays a Vector (in O(appended) amortised), a tuple a tuple, anything else
    becomes a list.

    Registered as the reducer `"append_messages"`: use it as
    `Annotated[list[Message], append_messages]` or by name. See
    [schema: messages](schema.md#messages).
    """
    items = new if isinstance(new, list | tuple | Vector) else (new,)
    history = _history(old)
    positions = _ids_of_vector.get(history)
    kept: list[Any] = []
    ids = positions.mutate()
    for message in items:
        found = message_id(message)
        if found is None:
            kept.append(message)
        elif found not in ids:
            ids[found] = len(history) + len(kept)
            kept.append(message)
    merged = history.extend(kept)
    _ids_of_vector.put(merged, ids.finish())
    return _like(old, merged)


def add_messages(old: Any, new: Any) -> Any:
    """LangGraph's message reducer: append `new` to `old`, replacing messages by id.

    A message whose id is already present replaces that message where it stands. `new` is
    one message or a list of them; in it, `RemoveMessage(id)` removes that message (an id
    the history does not hold is refused: the commit fails with `CommitRejected`), and
    `RemoveMessage(REMOVE_ALL_MESSAGES)` drops the whole history before the messages after
    it. A message without an id gets one, made from its position (`"msg-12"`), so the same
    update always yields the same history: replay and forks depend on that. Plain appends
    cost O(appended), on a `Vector` history; a replace or a remove rebuilds the history,
    O(n). The result has `old`'s kind, as with `append_messages`.

    Registered as the reducer `"add_messages"`: use it as
    `Annotated[list[Message], add_messages]` or by name. See
    [schema: messages](schema.md#messages).
    """
    items = list(new) if isinstance(new, list | tuple | Vector) else [new]
    if isinstance(new, RemoveMessage):
        items = [new]
    history = _history(old)
    cut = _last_remove_all(items)
    if cut is not None:
        history, items = Vector(), items[cut + 1 :]
    positions = _ids_of_vector.get(history)
    if not any(_rewrites(message, positions) for message in items):
        return _like(old, _appended(history, positions, items))
    return _like(old, _rewritten(history, positions, items))


def message_id(message: Any) -> Any:
    """A message's id: `id`, or EvoFabric's `msg_id` (an attribute, or a mapping's key)."""
    found = getattr(message, "id", None)  # a record: the common case, and the quick one
    if found is not None:
        return found
    if isinstance(message, Mapping):
        found = message.get("id")
        return message.get("msg_id") if found is None else found
    return getattr(message, "msg_id", None)


def held_vector(value: Any) -> Vector[Any] | None:
    """The Vector a field holds, whether handed in as it is or, for a Vector of mutable items
    (`list[dict]`), inside the commit's read-only view of it (whose `vector` it is). A
    reducer reads ids from it without copying, and extends it into the result."""
    if isinstance(value, Vector):
        return value
    inner = getattr(value, "vector", None)
    return inner if isinstance(inner, Vector) else None


# -- add_messages, step by step ---------------------------------------------------------


def _last_remove_all(items: Sequence[Any]) -> int | None:
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if isinstance(item, RemoveMessage) and item.id == REMOVE_ALL_MESSAGES:
            return index
    return None


def _rewrites(message: Any, positions: Positions) -> bool:
    """Whether `message` changes what the history holds (a remove, or a replace by id)."""
    return isinstance(message, RemoveMessage) or message_id(message) in positions


def _appended(history: Vector[Any], positions: Positions, items: list[Any]) -> Vector[Any]:
    """The history with `items` appended, each id-less one given an id: O(appended). A later
    item with an id an earlier one of the same update has replaces it, as with any replace."""
    ids = positions.mutate()
    named = _named(items)
    kept: list[Any] = []
    for message in items:
        found = message_id(message)
        if found is None:
            message, found = _with_new_id(message, ids, named, len(history) + len(kept))
        earlier = ids.get(found) if found is not None else None
        if earlier is not None and earlier >= len(history):
            kept[earlier - len(history)] = message
            continue
        if found is not None:
            ids[found] = len(history) + len(kept)
        kept.append(message)
    merged = history.extend(kept)
    _ids_of_vector.put(merged, ids.finish())
    return merged


def _rewritten(history: Vector[Any], positions: Positions, items: list[Any]) -> Vector[Any]:
    """The history after replaces and removes, as LangGraph does them (a replace after a
    remove of the same id, in one update, keeps the message): O(n) list work, plus an O(n)
    re-index only when something was removed (a replace moves no message)."""
    merged = history.tolist()
    ids = positions.mutate()
    named = _named(items)
    removed: set[Any] = set()
    for message in items:
        if isinstance(message, RemoveMessage):
            if message.id not in ids:
                raise ValueError(
                    f"RemoveMessage({message.id!r}): the history holds no message with that "
                    f"id, so there is nothing to remove. Remove the ids the state holds "
                    f"(read them from the history you were given)"
                )
            removed.add(message.id)
            continue
        found = message_id(message)
        if found is None:
            message, found = _with_new_id(message, ids, named, len(merged))
        at = ids.get(found) if found is not None else None
        if at is not None:
            merged[at] = message
            removed.discard(found)
            continue
        if found is not None:
            ids[found] = len(merged)
        merged.append(message)
    if not removed:
        result = Vector(merged)
        _ids_of_vector.put(result, ids.finish())
        return result
    gone = sorted(ids[found] for found in removed)
    kept: list[Any] = []
    start = 0
    for position in gone:
        kept.extend(merged[start:position])
        start = position + 1
    kept.extend(merged[start:])
    result = Vector(kept)
    _ids_of_vector.put(result, _index(result))
    return result


def _named(items: list[Any]) -> set[Any]:
    """The ids the messages of an update carry themselves: a made id must not be one."""
    return {message_id(m) for m in items if not isinstance(m, RemoveMessage)} - {None}


def _with_new_id(message: Any, taken: Any, named: set[Any], position: int) -> tuple[Any, Any]:
    """`message` with an id neither the history nor the update holds, made from its
    position (or, for a kind whose id cannot be set, as it is, still without one)."""
    candidate, extra = f"msg-{position}", 0
    while candidate in taken or candidate in named:
        extra += 1
        candidate = f"msg-{position}-{extra}"
    changed = _set_id(message, candidate)
    return (changed, candidate) if changed is not None else (message, None)


def _set_id(message: Any, new_id: str) -> Any:
    field = "msg_id" if _has(message, "msg_id") and not _has(message, "id") else "id"
    if isinstance(message, msgspec.Struct):
        if field not in message.__struct_fields__:
            return None
        return msgspec.structs.replace(message, **{field: new_id})
    if isinstance(message, Mapping):
        return {**message, field: new_id}
    if attrs.has(type(message)):
        return attrs.evolve(message, **{field: new_id}) if _has(message, field) else None
    if dataclasses.is_dataclass(message) and not isinstance(message, type):
        return dataclasses.replace(message, **{field: new_id}) if _has(message, field) else None
    copy_model = getattr(message, "model_copy", None)  # a pydantic model
    if copy_model is not None and field in getattr(type(message), "model_fields", {}):
        return copy_model(update={field: new_id})
    return None


def _has(message: Any, name: str) -> bool:
    if isinstance(message, Mapping):
        return name in message
    return hasattr(message, name)


# -- the histories' id index ------------------------------------------------------------


def _history(old: Any) -> Vector[Any]:
    held = held_vector(old)
    return held if held is not None else Vector(old)


def _like(old: Any, merged: Vector[Any]) -> Any:
    """`merged` in `old`'s kind: a Vector (or the commit's view of one) stays a Vector."""
    if held_vector(old) is not None:
        return merged
    if isinstance(old, tuple):
        return merged.totuple()
    return merged.tolist()


def _index(messages: Iterable[Any]) -> Positions:
    ids: dict[Any, int] = {}
    for position, message in enumerate(messages):
        found = message_id(message)
        if found is not None:
            ids[found] = position  # the last message of an id, as LangGraph finds it
    return immutables.Map(ids)


class _IdIndex:
    """The message ids held by recently produced Vectors, with their positions, so that
    "is this id here?" costs O(1) instead of a scan of the whole history.

    A Vector is immutable, so the ids it holds are a fixed fact about that object: caching
    them by identity cannot change any result, only skip recomputing it. Each entry keeps its
    Vector alive (so `id()` cannot be reused while cached) and holds a persistent map, so the
    index of a history and of the history-plus-one-message share almost all their storage. A
    miss (a Vector never produced here, or evicted) rebuilds the index in one O(n) pass. The
    bound keeps memory flat, evicting the entry used longest ago: the histories in use (the
    live one, a snapshot a fork or re-run starts from) stay.
    """

    __slots__ = ("_entries", "_limit", "_lock")

    def __init__(self, limit: int) -> None:
        self._entries: dict[int, tuple[Vector[Any], Positions]] = {}
        self._limit = limit
        self._lock = threading.Lock()

    def get(self, vector: Vector[Any]) -> Positions:
        """The ids `vector` holds; a hit becomes the most recent entry, and a miss is
        indexed (O(n)) and kept, so a history read again is not indexed again."""
        with self._lock:
            entry = self._entries.pop(id(vector), None)
            if entry is not None and entry[0] is vector:
                self._entries[id(vector)] = entry
                return entry[1]
        ids = _index(vector)
        self.put(vector, ids)
        return ids

    def put(self, vector: Vector[Any], ids: Positions) -> None:
        with self._lock:
            entries = self._entries
            entries.pop(id(vector), None)
            entries[id(vector)] = (vector, ids)
            while len(entries) > self._limit:
                del entries[next(iter(entries))]


_ids_of_vector = _IdIndex(limit=256)
