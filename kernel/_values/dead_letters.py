"""Dead letters: scheduled actions that failed, kept for a look and a retry.

By default an action handler that raises fails its phase (`HookFailed`), like any hook. An
action whose spec says `on_failure = "dead_letter"` fails alone instead (Awaken's
`FailedScheduledActions`): the phase goes on, the other actions run, and the failure is
committed as a `DeadLetter` to the reserved thread key `DeadLetters`. So it is in the
snapshot (`snapshot.get(DeadLetters)`), in the journal like any commit, and saved with the
thread: `run.retry(letter)` in this run or any later one schedules the action again. The
letter stays until the retried action has run (in one commit with what it did, or with its
next letter), so a retry that never reaches its phase, in a run that ends or crashes first,
loses nothing.

A letter keeps the payload as the JSON the journal would hold, so that it survives a
restart and a retry decodes it with the spec's payload type as it is declared then. An
action saved with a suspended run whose payload no longer decodes when the run resumes is
dead-lettered the same way, with the bytes as they were.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .._errors import StateError, cause_text
from .codec import CODEC_ERRORS, dec_hook, enc_hook
from .keys import KeyScope, StateKey
from .phases import Phase
from .specs import ScheduledAction, ScheduledActionSpec, spec_info
from .vector import Vector

_encode = msgspec.json.Encoder(enc_hook=enc_hook).encode


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True, tag="dead_letter"):
    """One failed scheduled action: which, with what payload, why, where and how often.

    A frozen record, held by the thread key `DeadLetters`. Retry one with `run.retry`.
    See [concepts: dead letters](concepts.md#dead-letters).
    """

    id: str
    """Unique within the thread."""
    action: str
    """The action spec's key."""
    payload: str | None
    """The payload as JSON text, or None when it could not be encoded: such a letter can be
    read but not retried."""
    error: str
    """`"ExceptionType: message"` of what failed: what the handler raised, its wrong result,
    or the rejection of its command's commit."""
    phase: Phase
    """The `Phase` the action ran in."""
    attempt: int
    """1 for the first failure; it grows by one per retry."""
    run_id: str | None
    """The id of the run the action failed in, or None."""


class Retried(msgspec.Struct, frozen=True, tag="retried"):
    """The update that takes a letter out of `DeadLetters` when it is retried."""

    id: str


class DeadLetters(StateKey[Vector[DeadLetter], DeadLetter | Retried]):
    """The thread's dead letters, oldest first (reserved: the kernel registers it).

    The reserved thread key `"statekernel.dead_letters"`, registered by every kernel, holds
    a `Vector` of `DeadLetter`s: read it as `run.snapshot.get(DeadLetters)`. It is journaled
    and saved like any thread key. A letter stays until its retried action has run.
    See [concepts: dead letters](concepts.md#dead-letters).
    """

    key = "statekernel.dead_letters"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[DeadLetter], update: DeadLetter | Retried) -> Vector[DeadLetter]:
        if type(update) is DeadLetter:
            return value.append(update)
        return Vector(letter for letter in value if letter.id != update.id)


def payload_text(payload: Any) -> str | None:
    """A payload as a letter keeps it: its JSON text, or None if it does not encode."""
    try:
        return _encode(payload).decode()
    except CODEC_ERRORS:
        return None


def letter_for(
    action: str,
    attempt: int,
    payload: str | None,
    error: BaseException | str,
    *,
    phase: Phase,
    revision: int,
    run_id: str | None,
) -> DeadLetter:
    """The letter for a failed `action`, to be committed as `revision`."""
    return DeadLetter(
        id=f"dl-{revision}",
        action=action,
        payload=payload,
        error=error if isinstance(error, str) else cause_text(error),
        phase=phase,
        attempt=attempt,
        run_id=run_id,
    )


def retried(letter: DeadLetter, spec: type[ScheduledActionSpec[Any]]) -> ScheduledAction:
    """The action a letter holds, scheduled anew (its next attempt)."""
    if letter.payload is None:
        raise StateError(
            f"dead letter {letter.id!r} ({letter.action!r}) cannot be retried: its payload "
            f"could not be encoded when it failed, so it was not kept. Schedule the action "
            f"again with a new payload."
        )
    payload_type = spec_info(spec, ScheduledActionSpec).payload_type
    try:
        payload = msgspec.json.decode(letter.payload, type=payload_type, dec_hook=dec_hook)
    except CODEC_ERRORS as error:
        raise StateError(
            f"dead letter {letter.id!r} ({letter.action!r}) cannot be retried: its payload no "
            f"longer decodes as {spec.__qualname__}'s payload ({cause_text(error)}). Schedule "
            f"the action again with a payload of today's type."
        ) from error
    return ScheduledAction(spec, payload, attempt=letter.attempt + 1, retries=letter.id)
