"""Commands: how hooks, tools and actions say what should change.

Nothing outside the kernel writes state. Code returns a `StateCommand` -- a `MutationBatch`
patch of typed key updates, scheduled actions and effects -- and the loop commits it. Building
a command needs no kernel: the key and spec classes carry their own types, so a wrong update
type fails right where it is written, and the registry check happens at submission.

Besides a key's own update type, two ops every key accepts live here: `CLEAR` returns a key to
its default, and `Overwrite(value)` replaces a schema field's value whatever its reducer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, TypeVar

from .._errors import StateError, StateValidationError
from .declared_types import copy_of, describe
from .keys import StateKey, key_info
from .specs import Effect, EffectSpec, ScheduledAction, ScheduledActionSpec, spec_info

V = TypeVar("V")
U = TypeVar("U")
P = TypeVar("P")


class _Clear:
    """The op that returns a key to its default (the key then holds no value)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "CLEAR"

    def __reduce__(self) -> str:
        return "CLEAR"


CLEAR: Final = _Clear()
"""The marker a `MutationBatch.clear(K)` op carries as its update.

`batch.ops` lists `(K, CLEAR)`, and the commit resets `K` to its default (the key then holds
no value)."""

Op = tuple[type[StateKey[Any, Any]], Any]
"""One mutation: the key class and its update (or CLEAR)."""


class MutationBatch:
    """An ordered list of `(key, update)` ops, with an optional `base_revision`.

    It is a command's `patch`. Ops are kept in the order written. An update is type-checked
    against the key's declared `Update` type when it is added, and a mutable update is
    copied then, so changing the object afterwards cannot reach committed state.

    - `batch.ops`: the ops, in order.
    - `batch.base_revision`: the expected revision, or None.
    - `len(batch)`, `iter(batch)`: the number of ops, and the ops.

    See [concepts: commands](concepts.md#commands).
    """

    __slots__ = ("base_revision", "ops")

    def __init__(self, *, base_revision: int | None = None) -> None:
        self.ops: list[Op] = []
        self.base_revision = base_revision

    def update(self, key: type[StateKey[V, U]], update: U) -> MutationBatch:
        """Append the op `(key, update)` and return the batch.

        `update` is checked against `key`'s `Update` type here (parameterised types against
        their origin class). A wrong type raises `StateValidationError`. A mutable update is
        copied.
        """
        self.ops.append((key, _checked(key, update)))
        return self

    def clear(self, key: type[StateKey[Any, Any]]) -> MutationBatch:
        """Append an op that returns `key` to its default, and return the batch.

        The key then holds no value.
        """
        key_info(key)
        self.ops.append((key, CLEAR))
        return self

    @property
    def touched_keys(self) -> tuple[type[StateKey[Any, Any]], ...]:
        """Each key the ops touch, once, in first-touch order."""
        return tuple(dict.fromkeys(key for key, _ in self.ops))

    def extend(self, other: MutationBatch) -> MutationBatch:
        """Append `other`'s ops and return the batch.

        Raises `StateError` if the two batches carry different `base_revision`s.
        """
        self.base_revision = _joined_revision(self.base_revision, other.base_revision)
        self.ops.extend(other.ops)
        return self

    def is_empty(self) -> bool:
        """Whether there are no ops."""
        return not self.ops

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __repr__(self) -> str:
        ops = ", ".join(f"{key_info(k).name}={u!r}" for k, u in self.ops)
        revision = f", base_revision={self.base_revision}" if self.base_revision is not None else ""
        return f"MutationBatch([{ops}]{revision})"


class StateCommand:
    """Everything one hook, tool or action asks for: a patch, scheduled actions, effects.

    It holds a `patch` (a `MutationBatch`), `scheduled_actions` and `effects`. The builder
    methods return the command, so calls can be chained. Building a command needs no kernel.

    `StateCommand(base_revision=n)` commits only while the live revision is still `n`
    (optimistic concurrency for commands built outside a phase); otherwise the commit raises
    `RevisionConflict`.

    The registry check happens when a command is submitted or returned from a hook, before
    anything of that round commits. An unregistered key raises `UnknownStateKey`. An action
    or effect that nobody handles raises `UnknownActionHandler` or `UnknownEffectHandler`.
    See [concepts: commands](concepts.md#commands).
    """

    __slots__ = ("effects", "patch", "scheduled_actions")

    def __init__(self, *, base_revision: int | None = None) -> None:
        patch = self.patch = _new_batch(MutationBatch)  # skips an __init__ call: hot path
        patch.ops = []
        patch.base_revision = base_revision
        self.scheduled_actions: list[ScheduledAction] = []
        self.effects: list[Effect] = []

    @property
    def base_revision(self) -> int | None:
        """The revision the command expects, or None.

        With one, the command commits only while the live revision still equals it.
        Otherwise the commit raises `RevisionConflict`.
        """
        return self.patch.base_revision

    def update(self, key: type[StateKey[V, U]], update: U) -> StateCommand:
        """Append the op `(key, update)` to `patch` and return the command.

        The type check happens here, as in `MutationBatch.update`: a wrong type raises
        `StateValidationError`, and a mutable update is copied.
        """
        try:  # (an attribute read, cheaper than getattr's call: the common case is hot)
            taken_as_is = key.__statekernel_key__.taken_as_is  # type: ignore[union-attr]
        except AttributeError:  # not a declared key class: `_checked` explains
            taken_as_is = ()
        if isinstance(update, taken_as_is):  # the common case
            self.patch.ops.append((key, update))
            return self
        self.patch.ops.append((key, _checked(key, update)))
        return self

    def clear(self, key: type[StateKey[Any, Any]]) -> StateCommand:
        """Append to `patch` an op that returns `key` to its default; return the command."""
        self.patch.clear(key)
        return self

    def schedule(self, action: type[ScheduledActionSpec[P]], payload: P) -> StateCommand:
        """Schedule runtime-owned work for `action.phase`, and return the command.

        The payload type is checked here (`StateValidationError`).
        """
        self.scheduled_actions.append(
            ScheduledAction(action, _payload(action, payload, ScheduledActionSpec))
        )
        return self

    def emit(self, effect: type[EffectSpec[P]], payload: P) -> StateCommand:
        """Add a terminal side effect, dispatched after the commit; return the command.

        The payload type is checked here (`StateValidationError`).
        """
        self.effects.append(Effect(effect, _payload(effect, payload, EffectSpec)))
        return self

    def extend(self, other: StateCommand) -> StateCommand:
        """Append everything `other` asks for after what this command already holds.

        Returns the command. Raises `StateError` if the two carry different
        `base_revision`s.
        """
        self.patch.extend(other.patch)
        self.scheduled_actions.extend(other.scheduled_actions)
        self.effects.extend(other.effects)
        return self

    def is_empty(self) -> bool:
        """True when there are no ops, actions or effects."""
        return not (self.patch.ops or self.scheduled_actions or self.effects)

    def __repr__(self) -> str:
        parts = [repr(self.patch)]
        if self.scheduled_actions:
            parts.append(f"actions={[a.spec.key for a in self.scheduled_actions]}")
        if self.effects:
            parts.append(f"effects={[e.spec.key for e in self.effects]}")
        return f"StateCommand({', '.join(parts)})"


_new_batch = object.__new__


def _checked(key: type[StateKey[Any, Any]], update: Any) -> Any:
    """The update, type-checked against the key's declaration (and copied if mutable)."""
    info = getattr(key, "__statekernel_key__", None)
    if info is None or not isinstance(key, type):
        info = key_info(key)  # raises the explanatory error
    classes = info.update_classes
    if classes is not None and not isinstance(update, classes):
        raise StateValidationError(info.name, describe(info.update_type), update)
    if info.copy_updates:
        return copy_of(update, info.name, "update")
    return update


def _payload(spec: type[Any], payload: Any, expected: type) -> Any:
    info = spec_info(spec, expected)
    if info.payload_classes is not None and not isinstance(payload, info.payload_classes):
        raise StateValidationError(
            info.name, describe(info.payload_type), payload, what=f"{info.kind} payload"
        )
    if info.copy_payload:
        return copy_of(payload, info.name, f"{info.kind} payload")
    return payload


def _joined_revision(mine: int | None, theirs: int | None) -> int | None:
    if mine is None or theirs is None or mine == theirs:
        return theirs if mine is None else mine
    raise StateError(
        f"cannot join commands built against different revisions ({mine} and {theirs}); "
        f"build both against the same snapshot, or submit them separately."
    )


class Overwrite:
    """Update marker: replace a reducer field's value instead of merging into it.

    `Overwrite(value)` in `schema.command(field=Overwrite(value))`, for example
    `schema.command(messages=Overwrite([summary]))`, or inside a node's partial dict,
    replaces the field's value whatever its reducer (LangGraph's `Overwrite`). The value is
    checked against the field's declared type like any update; the commit journals the
    value it leaves (not the marker), so replay and history see a replace.
    See [schema: replacing a reducer field](schema.md#replacing-a-reducer-field).
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Overwrite({self.value!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is Overwrite and other.value == self.value

    __hash__ = None  # type: ignore[assignment]
