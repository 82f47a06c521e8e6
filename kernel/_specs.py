"""Scheduled actions and effects: what a command asks for besides state changes.

A scheduled action is runtime-owned work (inject a context message, start a sub-task) that
runs in the convergence loop of one phase and answers with a command of its own. An effect
is a terminal side effect (audit log, notification) dispatched after its command commits;
it cannot change state. Both are declared like keys: the spec class is the token, and its
payload type is checked when a command is built.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

import attrs

from . import _declared_types
from ._errors import InvalidDeclaration
from ._phases import Phase

P = TypeVar("P")


@attrs.frozen
class SpecInfo:
    """What the kernel derived from an action or effect declaration."""

    name: str
    kind: str
    payload_type: Any
    payload_classes: tuple[type, ...] | None
    copy_payload: bool


class _Spec(Generic[P]):
    key: ClassVar[str]
    __statekernel_spec__: ClassVar[SpecInfo | None] = None
    _kind: ClassVar[str] = "spec"
    _generic_base: ClassVar[type]

    def __new__(cls, *args: Any, **kwargs: Any) -> _Spec[P]:
        raise TypeError(
            f"{cls.__name__} is an {cls._kind} spec: pass the class itself, e.g. "
            f"cmd.schedule({cls.__name__}, payload) / cmd.emit({cls.__name__}, payload)."
        )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("key", getattr(cls, "key", None))
        if name is None:
            cls.__statekernel_spec__ = None
            return
        if not isinstance(name, str) or not name:
            raise InvalidDeclaration(
                cls.__qualname__,
                f"`key` must be a non-empty string, got {name!r}",
                "Set key = 'some_name'.",
            )
        args = _declared_types.generic_args(cls, cls._generic_base) or (Any,)
        payload_type = args[0]
        if _declared_types.is_unresolved(payload_type):
            cls.__statekernel_spec__ = None
            return
        cls._check(cls.__qualname__)
        cls.__statekernel_spec__ = SpecInfo(
            name=name,
            kind=cls._kind,
            payload_type=payload_type,
            payload_classes=_declared_types.runtime_classes(payload_type),
            copy_payload=not _declared_types.is_immutable(payload_type),
        )

    @classmethod
    def _check(cls, owner: str) -> None:
        """Hook for subclasses to check extra declaration fields."""


class ScheduledActionSpec(_Spec[P]):
    """Declare an action: subclass as `ScheduledActionSpec[Payload]`, set `key` and `phase`.

    The action runs in the convergence loop of `phase`: scheduled earlier, it waits for that
    phase; scheduled during it, it runs in the same phase's next round.
    """

    phase: ClassVar[Phase]
    _kind = "action"

    @classmethod
    def _check(cls, owner: str) -> None:
        phase = getattr(cls, "phase", None)
        if not isinstance(phase, Phase):
            raise InvalidDeclaration(
                owner,
                f"`phase` must be a kernel.Phase, got {phase!r}",
                "Set phase = Phase.<the phase whose convergence loop runs this action>.",
            )


class EffectSpec(_Spec[P]):
    """Declare an effect: subclass as `EffectSpec[Payload]` and set `key`."""

    _kind = "effect"


ScheduledActionSpec._generic_base = ScheduledActionSpec
EffectSpec._generic_base = EffectSpec


def spec_info(spec: Any, expected: type) -> SpecInfo:
    """The derived facts of a concrete spec class, or a clear error for anything else."""
    info: SpecInfo = _declared_types.declaration_of(
        spec,
        expected,
        "__statekernel_spec__",
        kind=expected.__name__,
        binds=f"{expected.__name__}[Payload]",
        example=f"class MySpec({expected.__name__}[Payload]): key = 'my_spec'",
    )
    return info


@attrs.frozen
class ScheduledAction:
    """One scheduled action inside a command: the spec and its payload."""

    spec: type[ScheduledActionSpec[Any]]
    payload: Any

    @property
    def phase(self) -> Phase:
        return self.spec.phase


@attrs.frozen
class Effect:
    """One effect inside a command: the spec and its payload."""

    spec: type[EffectSpec[Any]]
    payload: Any
