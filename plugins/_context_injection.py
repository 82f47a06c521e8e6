"""Context injection: plugins add keyed context messages; the loop places them in the request.

Writing into the prompt directly would make every plugin fight over one string. Here a
plugin schedules `AddContextMessage` with a `ContextMessage` (a key, a band, an order, the
content, optionally a cooldown and an expiry). The action's handler, run by the loop, writes
it to a thread-scoped store and records when its key may be injected again; a request
transform places the stored messages into each inference request. Because everything goes
through the commit loop, injection is keyed (a key is replaced, never duplicated), ordered
the same way every time, throttled, and cleaned up by key or by expiry.

Where messages go (bands, then `order`, then `key` within a band):

    [system band] [session band] <the thread's history> [conversation band] [suffix_system band]

Conversation-band messages go after the whole history, not before the last user message:
they are then the newest thing the model reads, and they can never land between an
assistant's tool call and its tool results, which many model APIs refuse. The thread's
history itself is never changed: placed messages exist only in the request.

Steps. Cooldowns and expiry count the steps of the thread (every STEP_START, across runs),
kept in `ContextStep`; the store and the throttle are thread keys, so they carry over to the
thread's next run too.

When the actions run. Both actions are declared for BEFORE_INFERENCE, so they run in that
phase's convergence loop, after its hooks and before the model is called. Scheduled at
RUN_START, STEP_START or BEFORE_INFERENCE they take effect in the current step's request;
scheduled later in a step (AFTER_INFERENCE, tool phases, a tool's command, STEP_END) they
wait for the next step's; scheduled at RUN_END they never run. Adds and removals keep the
order they were scheduled in, because they run in the same loop.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Literal

import msgspec

from statekernel import (
    InferenceRequest,
    KeyScope,
    MergeStrategy,
    Message,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScheduledActionSpec,
    Snapshot,
    StateCommand,
    StateKey,
)

__all__ = [
    "BANDS",
    "AddContextMessage",
    "Band",
    "ContextEntry",
    "ContextInjection",
    "ContextMessage",
    "ContextMessages",
    "ContextStep",
    "ContextThrottle",
    "RemoveContextMessage",
    "ThrottleMark",
    "add_context",
    "remove_context",
]

Band = Literal["system", "session", "conversation", "suffix_system"]
BANDS: tuple[Band, ...] = ("system", "session", "conversation", "suffix_system")
"""The bands in the order they appear in a request."""

_RANK: dict[str, int] = {band: rank for rank, band in enumerate(BANDS)}
_AFTER_HISTORY = _RANK["conversation"]


class ContextMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One piece of context a plugin wants the model to see.

    `key` identifies it: adding a message with a key already stored replaces that message.
    `cooldown_steps=n`: once injected, further adds of this key are ignored for n steps
    (a reminder scheduled every step then shows up every n steps). `expires_after_steps=n`:
    the message is placed into the requests of n steps, starting with the step it is
    injected in, and then removed.
    """

    key: str
    content: str
    band: Band = "system"
    order: int = 0
    role: Literal["system", "user", "assistant"] = "system"
    cooldown_steps: int | None = None
    expires_after_steps: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"ContextMessage.key must be a non-empty string, got {self.key!r}")
        if self.band not in _RANK:
            raise ValueError(
                f"ContextMessage {self.key!r}: band must be one of {', '.join(BANDS)}; "
                f"got {self.band!r}"
            )
        if self.role not in ("system", "user", "assistant"):
            raise ValueError(
                f"ContextMessage {self.key!r}: role must be 'system', 'user' or 'assistant'; "
                f"got {self.role!r}"
            )
        for name in ("cooldown_steps", "expires_after_steps"):
            steps = getattr(self, name)
            if steps is not None and (type(steps) is not int or steps < 1):
                raise ValueError(
                    f"ContextMessage {self.key!r}: {name} must be a positive int or None; "
                    f"got {steps!r}"
                )


class ContextEntry(msgspec.Struct, frozen=True):
    """A stored message: when it was injected (context step) and when it expires."""

    message: ContextMessage
    added_at: int
    expires_at: int | None = None


class ThrottleMark(msgspec.Struct, frozen=True):
    """Adds of `key` are ignored until the context step reaches `until`."""

    key: str
    until: int


class _Put(msgspec.Struct, frozen=True, tag=True):
    entry: ContextEntry


class _Remove(msgspec.Struct, frozen=True, tag=True):
    keys: frozenset[str]


class _Expire(msgspec.Struct, frozen=True, tag=True):
    now: int


class _Mark(msgspec.Struct, frozen=True, tag=True):
    mark: ThrottleMark


class _Prune(msgspec.Struct, frozen=True, tag=True):
    now: int


def _place(entry: ContextEntry) -> tuple[int, int, str]:
    message = entry.message
    return (_RANK[message.band], message.order, message.key)


class ContextMessages(StateKey[tuple[ContextEntry, ...], _Put | _Remove | _Expire]):
    """The thread's context messages, kept sorted by (band, order, key).

    Write it with `add_context` / `AddContextMessage` (throttled) and `remove_context` /
    `RemoveContextMessage`; the update types are internal.
    """

    key = "context.messages"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(
        value: tuple[ContextEntry, ...], update: _Put | _Remove | _Expire
    ) -> tuple[ContextEntry, ...]:
        if isinstance(update, _Put):
            key = update.entry.message.key
            kept = [entry for entry in value if entry.message.key != key]
            bisect.insort(kept, update.entry, key=_place)
            return tuple(kept)
        if isinstance(update, _Remove):
            return tuple(entry for entry in value if entry.message.key not in update.keys)
        now = update.now
        return tuple(entry for entry in value if entry.expires_at is None or entry.expires_at > now)


class ContextThrottle(StateKey[tuple[ThrottleMark, ...], _Mark | _Prune]):
    """Keys whose cooldown is running, one mark per key (a new mark replaces the old)."""

    key = "context.throttle"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: tuple[ThrottleMark, ...], update: _Mark | _Prune) -> tuple[ThrottleMark, ...]:
        if isinstance(update, _Prune):
            return tuple(mark for mark in value if mark.until > update.now)
        new = update.mark
        return (*(mark for mark in value if mark.key != new.key), new)


class ContextStep(StateKey[int, int]):
    """The thread's step count as context injection sees it: +1 at every STEP_START."""

    key = "context.step"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class AddContextMessage(ScheduledActionSpec[ContextMessage]):
    """Inject a context message, unless its key is in cooldown."""

    key = "context.add"
    phase = Phase.BEFORE_INFERENCE


class RemoveContextMessage(ScheduledActionSpec[str]):
    """Remove the context message with this key (nothing happens if there is none)."""

    key = "context.remove"
    phase = Phase.BEFORE_INFERENCE


def add_context(message: ContextMessage) -> StateCommand:
    """A command that schedules `AddContextMessage(message)`; extend yours with it."""
    return StateCommand().schedule(AddContextMessage, message)


def remove_context(*keys: str) -> StateCommand:
    """A command that removes the messages with these keys when it commits.

    Unlike `RemoveContextMessage`, this needs no action round: the removal is part of the
    command it is in. The keys' cooldowns keep running.
    """
    return StateCommand().update(ContextMessages, _Remove(frozenset(keys)))


class ContextInjection(Plugin):
    """Registers the context keys and actions, the step clock and the request transform."""

    id = "context"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(ContextMessages)
        registrar.register_key(ContextThrottle)
        registrar.register_key(ContextStep)
        registrar.register_action(AddContextMessage, self.add)
        registrar.register_action(RemoveContextMessage, self.remove)
        registrar.register_phase_hook(Phase.STEP_START, self.tick)
        registrar.register_request_transform(self.place)

    def add(self, message: ContextMessage, ctx: PhaseContext) -> StateCommand | None:
        """Store `message` and start its cooldown -- or do nothing while it is throttled."""
        snapshot = ctx.snapshot
        now = snapshot.get(ContextStep)
        for mark in snapshot.get(ContextThrottle):
            if mark.key == message.key and now < mark.until:
                return None
        expires = message.expires_after_steps
        entry = ContextEntry(message, now, None if expires is None else now + expires)
        command = StateCommand().update(ContextMessages, _Put(entry))
        if message.cooldown_steps is not None:
            command.update(
                ContextThrottle, _Mark(ThrottleMark(message.key, now + message.cooldown_steps))
            )
        return command

    def remove(self, key: str, ctx: PhaseContext) -> StateCommand | None:
        if not any(entry.message.key == key for entry in ctx.snapshot.get(ContextMessages)):
            return None
        return remove_context(key)

    def tick(self, ctx: PhaseContext) -> StateCommand:
        """Advance the step clock; drop what expires and cooldowns that ran out at it."""
        snapshot = ctx.snapshot
        now = snapshot.get(ContextStep) + 1
        command = StateCommand().update(ContextStep, 1)
        if any(_expired(entry, now) for entry in snapshot.get(ContextMessages)):
            command.update(ContextMessages, _Expire(now))
        if any(mark.until <= now for mark in snapshot.get(ContextThrottle)):
            command.update(ContextThrottle, _Prune(now))
        return command

    def place(self, request: InferenceRequest, snapshot: Snapshot) -> InferenceRequest:
        """The request with the stored messages placed in their bands."""
        entries = snapshot.get(ContextMessages)
        if not entries:
            return request
        now = snapshot.get(ContextStep)
        live = [entry for entry in entries if not _expired(entry, now)]
        split = bisect.bisect_left(live, _AFTER_HISTORY, key=lambda e: _RANK[e.message.band])
        return request.replace(
            messages=(*_messages(live[:split]), *request.messages, *_messages(live[split:]))
        )


def _expired(entry: ContextEntry, now: int) -> bool:
    return entry.expires_at is not None and entry.expires_at <= now


def _messages(entries: Iterable[ContextEntry]) -> tuple[Message, ...]:
    return tuple(
        Message(entry.message.role, entry.message.content, id=f"context:{entry.message.key}")
        for entry in entries
    )
