"""The thread keys every kernel registers, whatever its plugins: an Agent's conversation, its
mailbox cursor and its team outbox (with `DeadLetters`, in `dead_letters.py`).

They are declared here, below the engine, rather than by the Agent that writes them, so that
a plain `Kernel` (no plugins, another process, the command line) reads an Agent's thread
whole: its message history decoded and typed, and the same `state_hash` as the writer's. A
thread is never readable only by the code that wrote it.
"""

from __future__ import annotations

import msgspec

from .keys import KeyScope, StateKey
from .messages import Message
from .vector import Vector

__all__ = [
    "History",
    "MailCursor",
    "OutEntry",
    "OutLetter",
    "OutSpawn",
    "Outbox",
    "OutboxChange",
    "OutboxData",
]


class History(StateKey[Vector[Message], tuple[Message, ...]]):
    """The thread's whole message history (a thread key: it survives across runs)."""

    key = "statekernel.messages"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[Message], update: tuple[Message, ...]) -> Vector[Message]:
        return value.extend(update)


class MailCursor(StateKey[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]):
    """Per sender, the sequence number of the last team message delivered into the thread
    (a thread key). It is committed with the messages it counts, in one commit, so a save
    holds both or neither: the mailbox delivers what lies beyond it, exactly once. An update
    raises senders' numbers and never lowers one."""

    key = "statekernel.mail_cursor"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(
        value: tuple[tuple[str, int], ...], update: tuple[tuple[str, int], ...]
    ) -> tuple[tuple[str, int], ...]:
        merged = dict(value)
        for sender, seq in update:
            merged[sender] = max(merged.get(sender, 0), seq)
        return tuple(sorted(merged.items()))


class OutLetter(msgspec.Struct, frozen=True, tag="letter"):
    """A team letter a run sent, waiting in its sender's outbox until the recipients'
    inboxes hold it: from `sender` (an agent id) to the agents `to`, addressed `via`;
    `traceparent`: the sending run's span (W3C trace context), None when it was not traced."""

    seq: int
    sender: str
    to: tuple[str, ...]
    content: str
    via: str | None = None
    traceparent: str | None = None


class OutSpawn(msgspec.Struct, frozen=True, tag="spawn"):
    """An agent a run spawned, waiting in its spawner's outbox until the team's roster
    holds it: `agent_id` of `role`, with `task` as its first message."""

    seq: int
    role: str
    agent_id: str
    task: str
    parent_id: str | None = None


OutEntry = OutLetter | OutSpawn


class OutboxData(msgspec.Struct, frozen=True):
    """What a thread's runs sent and spawned and the team has not yet seen through: the
    entries in order, and the number the next one gets. A number is given once per thread,
    so `(thread id, seq)` names an entry wherever it is posted."""

    entries: tuple[OutEntry, ...] = ()
    next: int = 1


class OutboxChange(msgspec.Struct, frozen=True):
    """An outbox update: drop the entries numbered up to `posted_through` (their posting
    is done), then add `added`, numbered from the outbox's next number on."""

    added: tuple[OutEntry, ...] = ()
    posted_through: int = 0


class Outbox(StateKey[OutboxData, OutboxChange]):
    """A thread's team outbox (a thread key): the letters and spawns its runs made, each
    committed in the same commit as the step that made it, so that a save holds both or
    neither. The team posts them after the save, and again (the inboxes and the roster
    drop what they already hold) until a later commit of the thread drops them."""

    key = "statekernel.outbox"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: OutboxData, update: OutboxChange) -> OutboxData:
        kept = tuple(e for e in value.entries if e.seq > update.posted_through)
        number = value.next
        added = []
        for entry in update.added:
            added.append(msgspec.structs.replace(entry, seq=number))
            number += 1
        if not added and len(kept) == len(value.entries):
            return value
        return OutboxData((*kept, *added), number)
