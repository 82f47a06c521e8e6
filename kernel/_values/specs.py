"""Scheduled actions and effects: what a command asks for besides state changes.

A scheduled action is runtime-owned work (inject a context message, start a sub-task) that
runs in the convergence loop of one phase and answers with a command of its own. An effect
is a terminal side effect (audit log, notification) dispatched after its command commits;
it cannot change state. Both are declared like keys: the spec class is the token, and its
payload type is checked when a command is built.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Literal, TypeVar

import attrs

from .._errors import InvalidDeclaration
from . import declared_types as _declared_types
from .phases import Phase
from .token import DeclaredToken, TokenFamily, declared_info

P = TypeVar("P")

FailurePolicy = Literal["raise", "dead_letter"]
FAILURE_POLICIES: tuple[FailurePolicy, ...] = ("raise", "dead_letter")


@attrs.frozen
class SpecInfo:
    """What the kernel derived from an action or effect declaration."""

    name: str
    kind: str
    payload_type: Any
    payload_classes: tuple[type, ...] | None
    copy_payload: bool


class _Spec(DeclaredToken, Generic[P]):
    key: ClassVar[str]
    __statekernel_spec__: ClassVar[SpecInfo | None] = None

    @classmethod
    def _declare(cls, name: str, args: tuple[Any, ...]) -> SpecInfo | None:
        (payload_type,) = args
        if _declared_types.is_unresolved(payload_type):
            return None
        cls._check(cls.__qualname__)
        return SpecInfo(
            name=name,
            kind=cls._family.kind.split()[0],
            payload_type=payload_type,
            payload_classes=_declared_types.runtime_classes(payload_type),
            copy_payload=not _declared_types.is_immutable(payload_type),
        )

    @classmethod
    def _check(cls, owner: str) -> None:
        """Hook for subclasses to check extra declaration fields."""


def _spec_family(kind: str, base: str) -> TokenFamily:
    return TokenFamily(
        kind=f"{kind} spec",
        attribute="__statekernel_spec__",
        arity=1,
        binds=f"{base}[Payload]",
        example=f"class MySpec({base}[Payload]): key = 'my_spec'",
        usage=(
            "Pass the class: cmd.schedule({name}, payload)"
            if kind == "action"
            else "Pass the class: cmd.emit({name}, payload)"
        ),
    )


class ScheduledActionSpec(_Spec[P]):
    """Declare an action: subclass as `ScheduledActionSpec[Payload]`, set `key` and `phase`.

    ```python
    from statekernel import EffectSpec, Phase, ScheduledActionSpec


    class AddNote(ScheduledActionSpec[str]):  # ScheduledActionSpec[Payload]
        key = "notes.add"
        phase = Phase.BEFORE_INFERENCE
    ```

    An action is runtime-owned work that runs in the convergence loop of `phase`. Its
    handler, registered with `registrar.register_action`, returns a command of its own.
    Scheduled before `phase`, the action waits for that phase; scheduled during it, it runs
    in the same phase's next round. Schedule one with `cmd.schedule(Action, payload)`.

    The class is the token: creating an instance raises `TypeError` (`InvalidDeclaration`).
    A bad `key`, `phase` or `on_failure` raises `InvalidDeclaration` when the class is
    created. See [concepts: the phase loop](concepts.md#the-phase-loop).
    """

    _family = _spec_family("action", "ScheduledActionSpec")
    phase: ClassVar[Phase]
    """Required. The `Phase` whose convergence loop runs the action."""
    on_failure: ClassVar[FailurePolicy] = "raise"
    """What a failure of the handler does: `"raise"` (the default) or `"dead_letter"`.

    A failure is the handler raising, returning the wrong type, or its command being
    rejected. `"raise"` fails the phase with `HookFailed`. `"dead_letter"` commits a
    `DeadLetter` to `DeadLetters` instead (journaled with source `"dead_letter:<key>"`),
    logs the failure at WARNING, and the phase goes on with the other actions; nothing of
    the failed action lands (its profile writes are dropped). An action saved with a
    suspended run whose payload no longer decodes on resume is dead-lettered the same way.
    Any other value raises `InvalidDeclaration`.
    See [concepts: dead letters](concepts.md#dead-letters)."""

    @classmethod
    def _check(cls, owner: str) -> None:
        phase = getattr(cls, "phase", None)
        if not isinstance(phase, Phase):
            raise InvalidDeclaration(
                owner,
                f"`phase` must be a kernel.Phase, got {phase!r}",
                "Set phase = Phase.<the phase whose convergence loop runs this action>.",
            )
        if cls.on_failure not in FAILURE_POLICIES:
            raise InvalidDeclaration(
                owner,
                f"`on_failure` must be one of {', '.join(map(repr, FAILURE_POLICIES))}, got "
                f"{cls.on_failure!r}",
                'Set on_failure = "dead_letter" to keep failures as dead letters, or leave '
                "it out to fail the phase.",
            )


class EffectSpec(_Spec[P]):
    """Declare an effect: subclass as `EffectSpec[Payload]` and set `key`.

    ```python
    class Audit(EffectSpec[str]):  # EffectSpec[Payload]
        key = "audit"
    ```

    An effect is a terminal side effect, emitted with `cmd.emit(Effect, payload)` and
    dispatched to its handler (`registrar.register_effect`) after its command commits, with
    the post-commit snapshot. A failing handler is logged and counted in
    `PhaseReport.effects_failed`. It never rolls anything back. The class is the token.
    See [concepts: the phase loop](concepts.md#the-phase-loop).
    """

    _family = _spec_family("effect", "EffectSpec")


def spec_info(spec: Any, expected: type[_Spec[Any]]) -> SpecInfo:
    """The derived facts of a concrete spec class, or a clear error for anything else."""
    info: SpecInfo = declared_info(spec, expected)
    return info


@attrs.frozen
class ScheduledAction:
    """One scheduled action inside a command: the spec and its payload. A retry of a dead
    letter also carries the letter's id (`retries`, taken out of the thread's letters when
    the action runs) and which `attempt` this is (1 for a first run)."""

    spec: type[ScheduledActionSpec[Any]]
    payload: Any
    attempt: int = 1
    retries: str | None = None


@attrs.frozen
class Effect:
    """One effect inside a command: the spec and its payload."""

    spec: type[EffectSpec[Any]]
    payload: Any
