"""Typed state keys: the declaration every piece of kernel state starts from.

A key is a class, and the class itself is the token a user passes around
(`snapshot.get(StepCounter)`, `cmd.update(StepCounter, 1)`). Everything the kernel needs to
know about it -- the value and update types, whether values must be copied to stay frozen,
the default -- is worked out once, when the class statement runs, so that a mistake in a
declaration fails at import time rather than in the middle of a run.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import attrs

from .._errors import InvalidDeclaration
from . import declared_types as _declared_types
from .token import DeclaredToken, TokenFamily, declared_info

V = TypeVar("V")
U = TypeVar("U")


RESERVED_PREFIX = "statekernel."
"""Key strings the kernel and its Agent facade keep for themselves."""

RESERVED_PLUGIN_ID = "statekernel"
"""The id of the Agent facade's own plugin: the only one that may use RESERVED_PREFIX."""


class KeyScope(enum.Enum):
    """How long a key's value lives: one run, or a whole thread across runs.

    See [concepts: scopes](concepts.md#scopes) and [state layers](state-layers.md#choosing).
    """

    RUN = "run"
    """The key is reset to its default at every `start_run`."""
    THREAD = "thread"
    """The key keeps its value across the runs of one thread."""


_BEHAVIOUR = ("claims_key", "rebases")
"""The attributes that say what a `MergeStrategy` does, set once per member."""


class MergeStrategy(enum.Enum):
    """What happens when several writers of one key race: hooks of one phase, or kernels
    (in any processes) saving one thread.

    Each member carries its behaviour in two read-only attributes, which the phase's merge
    and a save's rebase read alike, so that a strategy means the same in a process and
    across processes:

    - `claims_key`: whether two hooks of one phase writing the key conflict, so that one
      write is kept and the other hooks re-run, one at a time, on a fresh snapshot.
    - `rebases`: whether a save overtaken by another kernel's save of the thread may land
      after it, its update ops replayed on the newer value (see
      [durability](durability.md#saves-that-merge-what-commutes)).

    One fact decides both, whether two writers' updates may both stand, so a strategy
    that claims its key never rebases and one that does not claim it always does.

    See [concepts: merge](concepts.md#merge-commutative-and-exclusive).
    """

    EXCLUSIVE = "exclusive"
    """The default. Only one hook's write can be applied against a given snapshot: one write
    is kept and the other hooks are re-run on a fresh snapshot. A save overtaken by another
    kernel's is a `RevisionConflict`."""
    COMMUTATIVE = "commutative"
    """The ops are concatenated in registration order, and a save overtaken by another
    kernel's replays them after it. Declare it only when the order of updates (`apply`
    calls) cannot change the result (check with `assert_commutative`)."""

    claims_key: bool
    """Whether two hooks of one phase writing a key of this strategy conflict (the later
    one re-runs on a fresh snapshot). Read-only."""
    rebases: bool
    """Whether a save overtaken by another kernel's save of the thread may rebase: replay
    its updates of a key of this strategy on the newer value. Read-only."""

    def __init__(self, value: str) -> None:
        # Attributes, not properties: the merge reads `claims_key` for every op of a phase.
        commutes = {"exclusive": False, "commutative": True}[value]
        self.claims_key, self.rebases = not commutes, commutes

    def __setattr__(self, name: str, value: object) -> None:
        if name in _BEHAVIOUR and name in vars(self):
            raise AttributeError(f"MergeStrategy.{self.name}.{name} is read-only")
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if name in _BEHAVIOUR:
            raise AttributeError(f"MergeStrategy.{self.name}.{name} is read-only")
        super().__delattr__(name)


@attrs.frozen
class StateKeyOptions:
    """Per-registration overrides of a key's class defaults.

    `StateKeyOptions(scope=None, persistent=True, retain_on_uninstall=True)` is passed as
    `registrar.register_key(K, options)`; it overrides the key's class defaults for one
    kernel.

    - `scope`: a `KeyScope`; `None` keeps the class's scope.
    - `persistent`: `False` keeps a thread key in the kernel's memory only, never in a
      ThreadStore.
    - `retain_on_uninstall`: `False` means that a kernel without the plugin that registers
      this thread key drops it from the thread when it saves (its next save with a commit),
      instead of carrying it over untouched, so the plugin, added back later, starts it from
      its default. The drop is journaled as a clear. (Kernels learn of such keys from the
      thread's snapshot, which a kernel that registers one writes at its first save that
      can.)

    See [agent: runs and threads](agent.md#runs-and-threads-without-the-facade).
    """

    scope: KeyScope | None = None
    persistent: bool = True
    retain_on_uninstall: bool = True


@attrs.frozen
class KeyInfo:
    """What the kernel derived from a key declaration, cached on the key class."""

    name: str
    value_type: Any
    update_type: Any
    update_classes: tuple[type, ...] | None
    copy_values: bool
    copy_items: bool
    """The value is a Vector of mutable items: a commit copies only the items apply reads."""
    copy_updates: bool
    make_default: Callable[[], Any]
    has_validate: bool
    taken_as_is: tuple[type, ...] = attrs.field(init=False)
    """The classes of an update a command takes as it is, neither checked further nor
    copied: the update classes (any class when there are none); none when updates are
    copied. One `isinstance` then decides a command's common case."""

    @taken_as_is.default
    def _taken_as_is(self) -> tuple[type, ...]:
        if self.copy_updates:
            return ()
        return (object,) if self.update_classes is None else self.update_classes


class StateKey(DeclaredToken, Generic[V, U]):
    """Base class of typed state keys: subclass as `StateKey[Value, Update]`.

    ```python
    from statekernel import KeyScope, MergeStrategy, StateKey


    class StepCounter(StateKey[int, int]):  # StateKey[Value, Update]
        key = "step_counter"
        merge = MergeStrategy.COMMUTATIVE
        scope = KeyScope.RUN

        @staticmethod
        def apply(value: int, update: int) -> int:
            return value + update
    ```

    You pass the class itself as the token (`snapshot.get(K)`, `cmd.update(K, u)`).
    Creating an instance raises `InvalidDeclaration` (also a `TypeError`), as it does for
    every declared token: specs and `ProfileKey` too.

    Class attributes to set:

    - `key`: required. A unique, non-empty string.
    - `merge`: a `MergeStrategy`. Default: `EXCLUSIVE`.
    - `scope`: a `KeyScope`. Default: `RUN`.
    - `default` / `default_factory`: the value when the key holds none. Without either, the
      default is `Value()`. A type with no zero value (`int | None`, a `Literal`, an enum, a
      model with required fields) must declare one.
    - `apply(value, update)`: a pure static method that returns the new value. Without one,
      the update replaces the value.
    - `validate(value)`: optional static method; raise in it to refuse a value.

    The declaration is checked when the class statement runs. A bad `key`, `merge` or
    `scope`, an `apply`/`validate` with the wrong arity, or a missing default raises
    `InvalidDeclaration`. A subclass without `key`, or with unbound type variables, is an
    abstract base for other keys (for example a generic stage key): it can be subclassed but
    not registered.

    See [concepts: state keys](concepts.md#state-keys).
    """

    _family = TokenFamily(
        kind="state key",
        attribute="__statekernel_key__",
        arity=2,
        binds="StateKey[Value, Update]",
        example="class MyKey(StateKey[Value, Update]): key = 'my_key'",
        usage="Pass the class: snapshot.get({name}), cmd.update({name}, ...)",
    )
    key: ClassVar[str]
    """Required. The key string: unique in a kernel and non-empty."""
    merge: ClassVar[MergeStrategy] = MergeStrategy.EXCLUSIVE
    """What happens when several hooks of one phase write this key. Default: `EXCLUSIVE`."""
    scope: ClassVar[KeyScope] = KeyScope.RUN
    """How long the value lives: `KeyScope.RUN` (the default) or `KeyScope.THREAD`."""
    __statekernel_key__: ClassVar[KeyInfo | None] = None

    @staticmethod
    def apply(value: V, update: U) -> V:
        """Return the new value from the current value and one update.

        Declare it as a pure static method. This base version replaces the value with the
        update, the behaviour of keys that declare no `apply`. If it raises, the whole commit
        is rejected (`CommitRejected`).
        """
        return update  # type: ignore[return-value]

    @staticmethod
    def validate(value: V) -> None:
        """Refuse a value by raising; this base version accepts every value.

        Optional static method. It runs on every committed value, and again before a thread
        store saves a persistent value that changed since the run last saved it.
        """

    @classmethod
    def _declare(cls, name: str, args: tuple[Any, ...]) -> KeyInfo | None:
        owner = cls.__qualname__
        if not isinstance(cls.merge, MergeStrategy):
            raise InvalidDeclaration(
                owner, f"`merge` must be a MergeStrategy, got {cls.merge!r}", _MERGE_FIX
            )
        if not isinstance(cls.scope, KeyScope):
            raise InvalidDeclaration(
                owner,
                f"`scope` must be a KeyScope, got {cls.scope!r}",
                "Use KeyScope.RUN or KeyScope.THREAD.",
            )
        _check_callable(cls, "apply", 2)
        _check_callable(cls, "validate", 1)
        value_type, update_type = args
        if _declared_types.is_unresolved(value_type) or _declared_types.is_unresolved(update_type):
            return None
        return KeyInfo(
            name=name,
            value_type=value_type,
            update_type=update_type,
            update_classes=_declared_types.runtime_classes(update_type),
            copy_values=not _declared_types.is_immutable(value_type),
            copy_items=_declared_types.is_vector_of_mutables(value_type),
            copy_updates=not _declared_types.is_immutable(update_type),
            make_default=_declared_types.default_maker(cls, value_type),
            has_validate=cls.validate is not StateKey.validate,
        )


def key_info(key: Any) -> KeyInfo:
    """The derived facts of a registrable key class, or a clear error for anything else.

    Returns what the kernel derived from the key declaration when the class was created:

    - `name`: the key string.
    - `value_type`, `update_type`: the declared types.
    - `update_classes`: the runtime classes an update may be (None: any).
    - `make_default()`: a fresh default value.
    - `copy_values`: whether values are deep-copied on read.
    - `copy_items`: the value is a `Vector` of mutable items: only the items read are copied.
    - `copy_updates`: whether an update is copied when a command takes it (a mutable type).
    - `has_validate`: whether the key declares a `validate`.

    An abstract key (no `key` string, or unbound type variables) or a class that is not a
    key raises `InvalidDeclaration` saying which.
    """
    info: KeyInfo = declared_info(key, StateKey)
    return info


_MERGE_FIX = "Use MergeStrategy.EXCLUSIVE (the default) or MergeStrategy.COMMUTATIVE."


def _check_callable(cls: type, attribute: str, arity: int) -> None:
    function = getattr(cls, attribute)
    try:
        inspect.signature(function).bind(*range(arity))
    except TypeError:
        params = ", ".join(["value", "update"][:arity])
        raise InvalidDeclaration(
            cls.__qualname__,
            f"`{attribute}` must be callable as {attribute}({params})",
            f"Declare it as a @staticmethod taking {arity} argument(s).",
        ) from None
    except ValueError:  # no signature available (a builtin): trust it
        pass
