"""Named reducers: the `(old, new) -> merged` functions a schema field can name by string.

EvoFabric declares how a field merges with a string (`Annotated[list[Msg], "append_messages"]`)
that refers to a function registered with `@StateUpdater.register(name)`. Keeping that
registry lets a state declared for EvoFabric compile here unchanged. Names are resolved once,
when a schema is compiled, so a typo fails at import time and nothing is looked up per write.

The registry is process-global, like EvoFabric's: a name means one function everywhere. That
is why registering a name twice is an error rather than a silent replacement -- two modules
that picked the same name would otherwise change each other's state semantics depending on
import order.
"""

from __future__ import annotations

import inspect
import operator
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import immutables

from .._errors import InvalidDeclaration, UnknownUpdater
from .._vector import Vector

Reducer = Callable[[Any, Any], Any]
"""`(old, new) -> merged`: pure, returns the field's new value."""

R = TypeVar("R", bound=Reducer)


def overwrite(old: Any, new: Any) -> Any:
    """The new value replaces the old one (a field with no reducer behaves this way)."""
    return new


def append_messages(old: Any, new: Any) -> Any:
    """Append `new` (a list, tuple or Vector of messages, or one message) to `old`, dropping
    each message whose id is already present.

    A message's id is its attribute `id` (EvoFabric's messages: `msg_id`) or, for a mapping,
    its key `"id"` (or `"msg_id"`); a message with no id (None or absent) is always appended.
    Ids are checked against `old` and against the messages appended before it in the same
    call, so a batch cannot duplicate itself either.
    The result has `old`'s kind: a Vector stays a Vector (in O(appended) amortised, see
    `_IdIndex`), a tuple a tuple, anything else becomes a list.
    """
    items = new if isinstance(new, list | tuple | Vector) else (new,)
    held = held_vector(old)
    if held is not None:
        seen = _ids_of_vector.get(held)
        kept, seen = _unseen(items, seen)
        merged = held.extend(kept)
        _ids_of_vector.put(merged, seen)
        return merged
    seen = _index(old)
    kept, _ = _unseen(items, seen)
    if isinstance(old, tuple):
        return (*old, *kept)
    return [*old, *kept]


def held_vector(value: Any) -> Vector[Any] | None:
    """The Vector a field holds, whether handed in as it is or, for a Vector of mutable items
    (`list[dict]`), inside the commit's read-only view of it (whose `vector` it is). A
    reducer reads ids from it without copying, and extends it into the result."""
    if isinstance(value, Vector):
        return value
    inner = getattr(value, "vector", None)
    return inner if isinstance(inner, Vector) else None


def _message_id(message: Any) -> Any:
    """A message's id: `id`, or EvoFabric's `msg_id` (an attribute, or a mapping's key)."""
    if isinstance(message, Mapping):
        found = message.get("id")
        return message.get("msg_id") if found is None else found
    found = getattr(message, "id", None)
    return getattr(message, "msg_id", None) if found is None else found


def _index(messages: Iterable[Any]) -> immutables.Map[Any, bool]:
    ids = immutables.Map[Any, bool]().mutate()
    for message in messages:
        found = _message_id(message)
        if found is not None:
            ids[found] = True
    return ids.finish()


def _unseen(
    items: Sequence[Any], seen: immutables.Map[Any, bool]
) -> tuple[list[Any], immutables.Map[Any, bool]]:
    kept: list[Any] = []
    ids = seen.mutate()
    for message in items:
        found = _message_id(message)
        if found is None:
            kept.append(message)
        elif found not in ids:
            ids[found] = True
            kept.append(message)
    return kept, ids.finish()


class _IdIndex:
    """The message ids held by recently produced Vectors, so a de-duplicating append costs
    O(appended) instead of a scan of the whole history.

    A Vector is immutable, so the ids it holds are a fixed fact about that object: caching
    them by identity cannot change any result, only skip recomputing it. Each entry keeps its
    Vector alive (so `id()` cannot be reused while cached) and holds a persistent map, so the
    index of a history and of the history-plus-one-message share almost all their storage. A
    miss (a Vector never produced here, or evicted) rebuilds the index in one O(n) pass. The
    bound keeps memory flat; the most recent histories are the ones appended to next.
    """

    __slots__ = ("_entries", "_limit", "_lock")

    def __init__(self, limit: int) -> None:
        self._entries: dict[int, tuple[Vector[Any], immutables.Map[Any, bool]]] = {}
        self._limit = limit
        self._lock = threading.Lock()

    def get(self, vector: Vector[Any]) -> immutables.Map[Any, bool]:
        with self._lock:
            entry = self._entries.get(id(vector))
        if entry is not None and entry[0] is vector:
            return entry[1]
        return _index(vector)

    def put(self, vector: Vector[Any], ids: immutables.Map[Any, bool]) -> None:
        with self._lock:
            entries = self._entries
            entries.pop(id(vector), None)
            entries[id(vector)] = (vector, ids)
            while len(entries) > self._limit:
                del entries[next(iter(entries))]


_ids_of_vector = _IdIndex(limit=256)

_APPENDING: frozenset[Any] = frozenset({operator.add, append_messages})


def is_appending(reducer: Reducer) -> bool:
    """Whether `reducer` only ever appends to a sequence: fields it reduces may be held as a
    Vector, so that an append costs O(appended) instead of copying the whole list."""
    return any(reducer is known for known in _APPENDING)


class StateUpdater:
    """The registry of named reducers (EvoFabric's `StateUpdater`).

    ```python
    @StateUpdater.register("max")
    def keep_max(old: int, new: int) -> int:
        return max(old, new)

    class Scores(BaseModel):
        best: Annotated[int, "max"] = 0
    ```
    `"overwrite"` and `"append_messages"` are built in. A name can be registered once per
    process; a schema naming an unknown updater is an `InvalidDeclaration` listing the names
    that exist.
    """

    _reducers: ClassVar[dict[str, Reducer]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __new__(cls) -> StateUpdater:
        raise InvalidDeclaration(
            "StateUpdater",
            "is a registry, not something to instantiate",
            "Use @StateUpdater.register('name') and StateUpdater.get('name').",
        )

    @classmethod
    def register(cls, name: str) -> Callable[[R], R]:
        """Decorator registering an `(old, new) -> merged` function under `name`."""
        owner = f"@StateUpdater.register({name!r})"
        if not isinstance(name, str) or not name:
            raise InvalidDeclaration(
                owner, "the updater name must be a non-empty string", "Pass a name like 'max'."
            )

        def decorate(function: R) -> R:
            check_reducer(owner, function)
            with cls._lock:
                earlier = cls._reducers.get(name)
                if earlier is not None:
                    raise InvalidDeclaration(
                        owner,
                        f"the name {name!r} is already registered to {_describe(earlier)}; "
                        f"now {_describe(function)} claims it too",
                        "Updater names are process-wide: pick another name for one of them.",
                    )
                cls._reducers[name] = function
            return function

        return decorate

    @classmethod
    def get(cls, name: str) -> Reducer:
        """The reducer registered under `name`; `UnknownUpdater` (listing the known names) if
        none."""
        found = cls._reducers.get(name)
        if found is None:
            raise UnknownUpdater(name, cls.names())
        return found

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every registered name, sorted."""
        return tuple(sorted(cls._reducers))


def check_reducer(owner: str, function: Any) -> None:
    """Refuse, as an InvalidDeclaration against `owner`, anything not callable as (old, new)."""
    if not callable(function):
        raise InvalidDeclaration(
            owner,
            f"a reducer must be callable as reducer(old, new), got {function!r}",
            "Decorate a function taking (old, new) and returning the merged value.",
        )
    try:
        inspect.signature(function).bind(None, None)
    except TypeError:
        raise InvalidDeclaration(
            owner,
            f"reducer {_describe(function)} cannot be called as reducer(old, new)",
            "Give it exactly two positional parameters: the old value and the new one.",
        ) from None
    except ValueError:  # no signature available (some builtins): trust it
        pass


def describe_reducer(function: Reducer) -> str:
    """A readable name for a reducer: its updater name when registered (`append_messages`),
    else where it lives (`operator.add`, `mymodule.keep_max`)."""
    for name, registered in StateUpdater._reducers.items():
        if registered is function:
            return name
    return _describe(function)


def _describe(function: Any) -> str:
    module = getattr(function, "__module__", None) or ""
    name = getattr(function, "__qualname__", None) or repr(function)
    if module.startswith("_") and not module.startswith("__"):
        module = module[1:]  # operator.add lives in `_operator`
    return f"{module}.{name}" if module else name


StateUpdater.register("overwrite")(overwrite)
StateUpdater.register("append_messages")(append_messages)
