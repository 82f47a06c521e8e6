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
    """How long a key's value lives: one run, or a whole thread across runs."""

    RUN = "run"
    THREAD = "thread"


class MergeStrategy(enum.Enum):
    """What happens when several hooks of one phase write the same key.

    COMMUTATIVE: their ops are concatenated in registration order (declare it only when the
    order of `apply` calls cannot change the result). EXCLUSIVE: only one hook's write can be
    applied against a given snapshot; the others are re-run on a fresh one.
    """

    EXCLUSIVE = "exclusive"
    COMMUTATIVE = "commutative"


@attrs.frozen
class StateKeyOptions:
    """Per-registration overrides of a key's class defaults.

    `scope=None` keeps the class's scope. `persistent=False` keeps a thread key in the
    kernel's memory only, never in a ThreadStore. `retain_on_uninstall=False`: when a kernel
    without the plugin that registers this thread key saves a commit to the thread, the key
    is dropped rather than carried over untouched, so the plugin, added back later, starts
    it afresh. (Kernels learn of such keys from the thread's snapshot, which a kernel that
    registers one writes at its first save that can.)
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


class StateKey(DeclaredToken, Generic[V, U]):
    """Base class of typed state keys: subclass as `StateKey[Value, Update]`.

    Set `key` (a unique string), optionally `merge`, `scope`, `default` or
    `default_factory`, and a pure static `apply(value, update) -> new value`. Without an
    `apply` the update replaces the value. An optional static `validate(value)` may raise to
    refuse a value; it runs on every committed value.

    A subclass that leaves `key` unset, or whose types are still type variables, is an
    abstract base for other keys (for example a generic stage key) and cannot be registered.
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
    merge: ClassVar[MergeStrategy] = MergeStrategy.EXCLUSIVE
    scope: ClassVar[KeyScope] = KeyScope.RUN
    __statekernel_key__: ClassVar[KeyInfo | None] = None

    @staticmethod
    def apply(value: V, update: U) -> V:
        """Replace the value with the update (the behaviour of keys that declare no apply)."""
        return update  # type: ignore[return-value]

    @staticmethod
    def validate(value: V) -> None:
        """Accept every value; override and raise to refuse one."""

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
    """The derived facts of a registrable key class, or a clear error for anything else."""
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
