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
history itself is not changed: placed messages exist only in the request, unless a message
asks for `visibility="transcript"`; then the first request that holds it hands it to the
Agent (`InferenceRequest.transcript`) to record in the history, where users see it and the
model reads it from then on.

Steps. Cooldowns and expiry count the steps of the thread (every STEP_START, across runs),
kept in `ContextStep`; the store and the throttle are thread keys, so they carry over to the
thread's next run too, except what is ephemeral: a RUN_START hook removes the ephemeral
messages of earlier runs and their cooldowns. An AFTER_INFERENCE hook removes emit-once
messages once a request held them, and marks the transcript messages it held as recorded.

When the actions run. All three actions are declared for BEFORE_INFERENCE, so they run in that
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
    "LIFETIMES",
    "VISIBILITIES",
    "AddContextMessage",
    "Band",
    "ContextEntry",
    "ContextInjection",
    "ContextMessage",
    "ContextMessages",
    "ContextStep",
    "ContextThrottle",
    "Lifetime",
    "RemoveContextMessage",
    "RemoveContextPrefix",
    "ThrottleMark",
    "Visibility",
    "add_context",
    "clear_context",
    "remove_context",
    "remove_context_prefix",
]

Band = Literal["system", "session", "conversation", "suffix_system"]
"""The band type of a `ContextMessage`: `"system"`, `"session"`, `"conversation"` or
`"suffix_system"`, which says where in a request the message goes.

See [where messages go](howto-context-injection.md#where-messages-go)."""
BANDS: tuple[Band, ...] = ("system", "session", "conversation", "suffix_system")
"""The bands in the order they appear in a request.

See [where messages go](howto-context-injection.md#where-messages-go)."""

Lifetime = Literal["persistent", "ephemeral"]
"""The lifetime type of a `ContextMessage`: `"persistent"` (kept in the thread until removed
or expired) or `"ephemeral"` (removed, with its cooldown, when the next run starts)."""
LIFETIMES: tuple[Lifetime, ...] = ("persistent", "ephemeral")
"""Both lifetimes. Where a message is kept: in the thread (saved), or for the current run
only."""

Visibility = Literal["model", "transcript"]
"""The visibility type of a `ContextMessage`: `"model"` (placed into requests only) or
`"transcript"` (also recorded in the thread's history).

See [visibility](howto-context-injection.md#visibility-model-only-or-the-transcript-too)."""
VISIBILITIES: tuple[Visibility, ...] = ("model", "transcript")
"""Both visibilities. Who sees a message: the model only, or the model and the thread's
transcript (history).

See [visibility](howto-context-injection.md#visibility-model-only-or-the-transcript-too)."""

_RANK: dict[str, int] = {band: rank for rank, band in enumerate(BANDS)}
_ID_PREFIX = "context:"  # of placed messages, and of transcript copies (`<key>@<step>`)
_AFTER_HISTORY = _RANK["conversation"]


class ContextMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One piece of context a plugin wants the model to see.

    `ContextMessage(*, key, content, band="system", order=0, role="system",
    cooldown_steps=None, expires_after_steps=None, emit_once=False, lifetime=None,
    reinject_on_change=False, visibility="model")`: one keyed piece of context.

    `key` identifies it: adding a message with a key already stored replaces that message.
    `cooldown_steps=n`: once injected, further adds of this key are ignored for n steps
    (a reminder scheduled every step then shows up every n steps); with
    `reinject_on_change=True`, an add whose content differs from what was injected goes in
    anyway and starts the cooldown again. `expires_after_steps=n`: the message is placed
    into the requests of n steps, starting with the step it is injected in, and then
    removed. `emit_once=True`: it is placed into exactly one request, the next, and then
    removed (consumed after emit). `lifetime`: `"persistent"` keeps it in the thread (saved,
    there in later runs), `"ephemeral"` for the current run only; None takes the plugin's
    `default_lifetime`.

    `band` is where in the request it goes (`Band`, default `"system"`), `order` sorts it
    within its band (then its key does), and `role` (`"system"`, `"user"` or `"assistant"`)
    is the role of the message placed.

    `visibility="model"` (the default): the message exists only in requests; the thread's
    history never holds it. `visibility="transcript"`: the first request that holds it also
    records it in the history (the Agent appends it before the model's answer), so users
    see it in `RunResult.messages` and the event stream; from then on the model reads it
    there, at that place, and the band no longer places it (it reaches the history through
    `InferenceRequest.transcript`). Adding it again with the role and content of the newest
    copy of its key in the history records nothing new (also after it expired or was
    removed); a changed content is recorded again.

    An empty key, an unknown band, role, lifetime or visibility, a flag that is not a bool,
    or a step count that is not a positive int raises `ValueError`.

    See [the message](howto-context-injection.md#the-message) and
    [lifecycles](howto-context-injection.md#lifecycles).
    """

    key: str
    content: str
    band: Band = "system"
    order: int = 0
    role: Literal["system", "user", "assistant"] = "system"
    cooldown_steps: int | None = None
    expires_after_steps: int | None = None
    emit_once: bool = False
    lifetime: Lifetime | None = None
    reinject_on_change: bool = False
    visibility: Visibility = "model"

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"ContextMessage.key must be a non-empty string, got {self.key!r}")
        if self.band not in _RANK:
            raise ValueError(
                f"ContextMessage {self.key!r}: band must be one of {', '.join(BANDS)}; "
                f"got {self.band!r}"
            )
        if self.lifetime is not None and self.lifetime not in LIFETIMES:
            raise ValueError(
                f"ContextMessage {self.key!r}: lifetime must be 'persistent', 'ephemeral' or "
                f"None; got {self.lifetime!r}"
            )
        if self.visibility not in VISIBILITIES:
            raise ValueError(
                f"ContextMessage {self.key!r}: visibility must be 'model' or 'transcript'; "
                f"got {self.visibility!r}"
            )
        for name in ("emit_once", "reinject_on_change"):
            if type(getattr(self, name)) is not bool:
                raise ValueError(
                    f"ContextMessage {self.key!r}: {name} must be True or False; "
                    f"got {getattr(self, name)!r}"
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
    """A stored message: when it was injected (context step), when it expires, whether it
    is ephemeral (removed when the next run starts), and, for a transcript message, whether
    the history holds it already (then it is no longer placed).

    `ContextEntry(message, added_at, expires_at=None, ephemeral=False, recorded=False)`:
    `message` is the `ContextMessage`, `added_at` the context step it was injected at,
    `expires_at` the step it expires at (None: never)."""

    message: ContextMessage
    added_at: int
    expires_at: int | None = None
    ephemeral: bool = False
    recorded: bool = False


class ThrottleMark(msgspec.Struct, frozen=True):
    """Adds of `key` are ignored until the context step reaches `until`.

    `ThrottleMark(key, until, content=None, ephemeral=False)`. An add still goes in when its
    content differs from `content`, what was injected, and it asks to be re-injected
    (`reinject_on_change`); a mark saved before marks kept content has None, and never
    re-injects. The mark of an ephemeral message ends with its run."""

    key: str
    until: int
    content: str | None = None
    ephemeral: bool = False


class _Put(msgspec.Struct, frozen=True, tag=True):
    entry: ContextEntry


class _Remove(msgspec.Struct, frozen=True, tag=True):
    keys: frozenset[str]


class _Expire(msgspec.Struct, frozen=True, tag=True):
    now: int


class _RemovePrefix(msgspec.Struct, frozen=True, tag=True):
    prefix: str  # "" removes every message


class _Consume(msgspec.Struct, frozen=True, tag=True):
    keys: frozenset[str]  # emit-once messages placed into a request


class _Recorded(msgspec.Struct, frozen=True, tag=True):
    keys: frozenset[str]  # transcript messages a request held: the history has them now


class _DropEphemeral(msgspec.Struct, frozen=True, tag=True):
    pass  # a new run: the ephemeral messages (or marks) of earlier runs go


class _Mark(msgspec.Struct, frozen=True, tag=True):
    mark: ThrottleMark


class _Prune(msgspec.Struct, frozen=True, tag=True):
    now: int


def _place(entry: ContextEntry) -> tuple[int, int, str]:
    message = entry.message
    return (_RANK[message.band], message.order, message.key)


_Change = _Put | _Remove | _Expire | _RemovePrefix | _Consume | _Recorded | _DropEphemeral


def _changed(value: tuple[ContextEntry, ...], update: _Change) -> tuple[ContextEntry, ...]:
    """The stored context messages after one change."""
    if isinstance(update, _DropEphemeral):
        return tuple(entry for entry in value if not entry.ephemeral)
    if isinstance(update, _Put):
        key = update.entry.message.key
        kept = [entry for entry in value if entry.message.key != key]
        bisect.insort(kept, update.entry, key=_place)
        return tuple(kept)
    if isinstance(update, _Remove | _Consume):
        return tuple(entry for entry in value if entry.message.key not in update.keys)
    if isinstance(update, _Recorded):
        return tuple(
            msgspec.structs.replace(entry, recorded=True)
            if entry.message.key in update.keys
            else entry
            for entry in value
        )
    if isinstance(update, _RemovePrefix):
        return tuple(entry for entry in value if not entry.message.key.startswith(update.prefix))
    now = update.now
    return tuple(entry for entry in value if entry.expires_at is None or entry.expires_at > now)


class ContextMessages(StateKey[tuple[ContextEntry, ...], _Change]):
    """The thread's context messages, kept sorted by (band, order, key). Ephemeral ones
    (`ContextEntry.ephemeral`) are removed when the next run starts.

    Thread key `"context.messages"`: the stored `ContextEntry`s. Its update types are
    internal, so write it with `add_context` / `AddContextMessage` (throttled),
    `remove_context` / `RemoveContextMessage`, `remove_context_prefix` /
    `RemoveContextPrefix` and `clear_context`.
    """

    key = "context.messages"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: tuple[ContextEntry, ...], update: _Change) -> tuple[ContextEntry, ...]:
        return _changed(value, update)


class ContextThrottle(StateKey[tuple[ThrottleMark, ...], _Mark | _Prune | _DropEphemeral]):
    """Keys whose cooldown is running, one mark per key (a new mark replaces the old).

    Thread key `"context.throttle"`: one `ThrottleMark` per key whose cooldown is running.
    """

    key = "context.throttle"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(
        value: tuple[ThrottleMark, ...], update: _Mark | _Prune | _DropEphemeral
    ) -> tuple[ThrottleMark, ...]:
        if isinstance(update, _DropEphemeral):
            return tuple(mark for mark in value if not mark.ephemeral)
        if isinstance(update, _Prune):
            return tuple(mark for mark in value if mark.until > update.now)
        new = update.mark
        return (*(mark for mark in value if mark.key != new.key), new)


class ContextStep(StateKey[int, int]):
    """The thread's step count as context injection sees it: +1 at every STEP_START.

    Thread key `"context.step"`, COMMUTATIVE; it counts across runs. See
    [steps, cooldowns and expiry](howto-context-injection.md#steps-cooldowns-and-expiry).
    """

    key = "context.step"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class AddContextMessage(ScheduledActionSpec[ContextMessage]):
    """Inject a context message, unless its key is in cooldown.

    Action `"context.add"`, phase `BEFORE_INFERENCE`, payload `ContextMessage`: stores the
    message unless its key is in cooldown. `add_context(message)` schedules it.
    """

    key = "context.add"
    phase = Phase.BEFORE_INFERENCE


class RemoveContextMessage(ScheduledActionSpec[str]):
    """Remove the context message with this key (nothing happens if there is none).

    Action `"context.remove"`, phase `BEFORE_INFERENCE`, payload `str` (the key).
    `remove_context` does the same without an action round.
    """

    key = "context.remove"
    phase = Phase.BEFORE_INFERENCE


class RemoveContextPrefix(ScheduledActionSpec[str]):
    """Remove every context message whose key starts with this prefix (`""`: all of them).

    Action `"context.remove_prefix"`, phase `BEFORE_INFERENCE`, payload `str` (the prefix).
    The removal comes in order with the adds around it.
    """

    key = "context.remove_prefix"
    phase = Phase.BEFORE_INFERENCE


def add_context(message: ContextMessage) -> StateCommand:
    """A command that schedules `AddContextMessage(message)`; extend yours with it.

    The same as `StateCommand().schedule(AddContextMessage, message)`.
    """
    return StateCommand().schedule(AddContextMessage, message)


def remove_context(*keys: str) -> StateCommand:
    """A command that removes the messages with these keys when it commits.

    Unlike `RemoveContextMessage`, this needs no action round: the removal is part of the
    command it is in, so it also works from outside a run, with `kernel.update_state`. The
    keys' cooldowns keep running.

    See [removing a message](howto-context-injection.md#removing-a-message).
    """
    return _everywhere(_Remove(frozenset(keys)))


def remove_context_prefix(prefix: str) -> StateCommand:
    """A command that removes every message whose key starts with `prefix` when it commits.

    `remove_context_prefix("tool.")` drops what one family of plugins injected. Like
    `remove_context`, it needs no action round, and cooldowns keep running. An empty prefix
    raises `ValueError` (use `clear_context`)."""
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(
            f"remove_context_prefix needs a non-empty prefix, got {prefix!r}; use "
            f"clear_context() to remove every message"
        )
    return _everywhere(_RemovePrefix(prefix))


def clear_context() -> StateCommand:
    """A command that removes every context message, persistent and ephemeral, when it
    commits. Cooldowns keep running."""
    return _everywhere(_RemovePrefix(""))


def _everywhere(change: _Change) -> StateCommand:
    return StateCommand().update(ContextMessages, change)


class ContextInjection(Plugin):
    """Registers the context keys and actions, the step clock and the request transform.

    `ContextInjection(*, default_lifetime="persistent")`: plugin (id `"context"`). It
    registers:

    - the keys `ContextMessages`, `ContextThrottle` and `ContextStep`;
    - the actions `AddContextMessage`, `RemoveContextMessage` and `RemoveContextPrefix`;
    - a `RUN_START` hook that ends the last run's ephemeral messages and their cooldowns
      (and counts transcript messages the history holds as recorded);
    - a `STEP_START` clock;
    - an `AFTER_INFERENCE` hook that consumes emit-once messages and marks recorded
      transcript messages;
    - the request transform that places stored messages into each `InferenceRequest`.

    `default_lifetime` is the `lifetime` of messages that name none; a value other than
    `"persistent"` or `"ephemeral"` raises `ValueError`.

    See [how-to: context injection](howto-context-injection.md).
    """

    id = "context"

    def __init__(self, *, default_lifetime: Lifetime = "persistent") -> None:
        if default_lifetime not in LIFETIMES:
            raise ValueError(
                f"default_lifetime must be 'persistent' or 'ephemeral', got {default_lifetime!r}"
            )
        self.default_lifetime = default_lifetime

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(ContextMessages)
        registrar.register_key(ContextThrottle)
        registrar.register_key(ContextStep)
        registrar.register_action(AddContextMessage, self.add)
        registrar.register_action(RemoveContextMessage, self.remove)
        registrar.register_action(RemoveContextPrefix, self.remove_prefix)
        registrar.register_phase_hook(Phase.RUN_START, self.start)
        registrar.register_phase_hook(Phase.STEP_START, self.tick)
        registrar.register_phase_hook(Phase.AFTER_INFERENCE, self.consume)
        registrar.register_request_transform(self.place)

    def add(self, message: ContextMessage, ctx: PhaseContext) -> StateCommand | None:
        """Store `message` and start its cooldown -- or do nothing while it is throttled."""
        snapshot = ctx.snapshot
        now = snapshot.get(ContextStep)
        for mark in snapshot.get(ContextThrottle):
            throttled = mark.key == message.key and now < mark.until
            changed = (
                message.reinject_on_change
                and mark.content is not None
                and message.content != mark.content
            )
            if throttled and not changed:
                return None
        expires = message.expires_after_steps
        ephemeral = (message.lifetime or self.default_lifetime) == "ephemeral"
        recorded = message.visibility == "transcript" and (
            any(_shows(entry, message) for entry in snapshot.get(ContextMessages))
            or _in_history(message, ctx.messages)
        )
        entry = ContextEntry(
            message, now, None if expires is None else now + expires, ephemeral, recorded
        )
        command = StateCommand().update(ContextMessages, _Put(entry))
        if message.cooldown_steps is not None:
            until = now + message.cooldown_steps
            mark = ThrottleMark(message.key, until, message.content, ephemeral)
            command.update(ContextThrottle, _Mark(mark))
        return command

    def remove(self, key: str, ctx: PhaseContext) -> StateCommand | None:
        if not any(entry.message.key == key for entry in ctx.snapshot.get(ContextMessages)):
            return None
        return remove_context(key)

    def remove_prefix(self, prefix: str, ctx: PhaseContext) -> StateCommand | None:
        held = ctx.snapshot.get(ContextMessages)
        if not any(entry.message.key.startswith(prefix) for entry in held):
            return None
        return _everywhere(_RemovePrefix(prefix))

    def start(self, ctx: PhaseContext) -> StateCommand | None:
        """A new run: the ephemeral messages of earlier runs, and their cooldowns, end; and
        transcript messages the history holds count as recorded (a run that ended between
        recording one and marking it, cancelled or failed, left it unmarked)."""
        snapshot = ctx.snapshot
        command = StateCommand()
        held = snapshot.get(ContextMessages)
        if any(entry.ephemeral for entry in held):
            command.update(ContextMessages, _DropEphemeral())
        recorded = frozenset(
            entry.message.key
            for entry in held
            if _to_record(entry) and _in_history(entry.message, ctx.messages)
        )
        if recorded:
            command.update(ContextMessages, _Recorded(recorded))
        if any(mark.ephemeral for mark in snapshot.get(ContextThrottle)):
            command.update(ContextThrottle, _DropEphemeral())
        return command if not command.is_empty() else None

    def consume(self, ctx: PhaseContext) -> StateCommand | None:
        """After a request: its transcript messages are in the history now, and its emit-once
        messages are used up."""
        snapshot = ctx.snapshot
        command = StateCommand()
        recorded = frozenset(entry.message.key for entry in _placed(snapshot) if _to_record(entry))
        if recorded:
            command.update(ContextMessages, _Recorded(recorded))
        held = snapshot.get(ContextMessages)
        used = frozenset(entry.message.key for entry in held if entry.message.emit_once)
        if used:
            command.update(ContextMessages, _Consume(used))
        return command if not command.is_empty() else None

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
        """The request with the stored messages placed in their bands, and the transcript
        messages among them also handed to the Agent to record."""
        live = _placed(snapshot)
        if not live:
            return request
        split = bisect.bisect_left(live, _AFTER_HISTORY, key=lambda e: _RANK[e.message.band])
        now = snapshot.get(ContextStep)
        record = tuple(
            Message(entry.message.role, entry.message.content, id=_recorded_id(entry, now))
            for entry in live
            if _to_record(entry)
        )
        return request.replace(
            messages=(*_messages(live[:split]), *request.messages, *_messages(live[split:])),
            transcript=(*request.transcript, *record),
        )


def _placed(snapshot: Snapshot) -> list[ContextEntry]:
    """The entries a request built from `snapshot` holds: not expired, and not already
    in the history as transcript messages."""
    entries = snapshot.get(ContextMessages)
    if not entries:
        return []
    now = snapshot.get(ContextStep)
    return [entry for entry in entries if not _expired(entry, now) and not entry.recorded]


def _to_record(entry: ContextEntry) -> bool:
    return entry.message.visibility == "transcript" and not entry.recorded


def _shows(entry: ContextEntry, message: ContextMessage) -> bool:
    """Whether the history already holds `message` as `entry`'s recorded transcript copy."""
    held = entry.message
    return (
        entry.recorded
        and held.key == message.key
        and held.role == message.role
        and held.content == message.content
    )


def _recorded_id(entry: ContextEntry, now: int) -> str:
    """The id of a transcript message's copy in the history: its key and the step."""
    return f"{_ID_PREFIX}{entry.message.key}@{now}"


def _in_history(message: ContextMessage, history: tuple[Message, ...]) -> bool:
    """Whether the newest copy of `message`'s key in the history says what it says."""
    for held in reversed(history):
        ident = held.id
        if ident is not None and ident.startswith(_ID_PREFIX):
            key, at, step = ident.removeprefix(_ID_PREFIX).rpartition("@")
            if at and step.isdigit() and key == message.key:
                return held.role == message.role and held.content == message.content
    return False


def _expired(entry: ContextEntry, now: int) -> bool:
    return entry.expires_at is not None and entry.expires_at <= now


def _messages(entries: Iterable[ContextEntry]) -> tuple[Message, ...]:
    return tuple(
        Message(entry.message.role, entry.message.content, id=f"{_ID_PREFIX}{entry.message.key}")
        for entry in entries
    )
