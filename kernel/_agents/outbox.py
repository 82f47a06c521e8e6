"""The outbox: what a team's running agent sends and spawns leaves its thread only once a
save holds it, and reaches its recipients exactly once, however the process dies.

A letter sent from inside a run (the `send_message` tool, or `team.send` from a tool or hook
of the run) and an agent spawned there (`spawn_agent`, or `team.spawn`) are staged here, then
committed into the sender's own thread, in the `Outbox` key, with what made them: a tool's
letters in the commit of its result, a hook's before the step's checkpoint. The outbox
numbers each entry once per thread, so `(sender thread, number)` names it wherever it goes;
the model's call id never does. So a crash before the save loses the step and its letters
together, and the step done again makes them anew under the same numbers.

After each save the entries are posted: a letter into each recipient's inbox (which drops
a number from that thread it took already), a spawn into the roster (which adopts an agent
id it holds already). They are posted again, just as safely, whenever the sender's next run
starts and whenever the team opens, until a commit of the sender's thread drops them: the
next step's commit of the model's answer (no commit of its own). Entries are posted in
number order, so when an inbox holds a number from a thread, it holds every earlier letter
of that thread to it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import Counter
from typing import Protocol

import msgspec

from .._engine.snapshot import Snapshot
from .._errors import StateError, StoreError, UnknownAgent
from .._values.commands import StateCommand
from .._values.reserved_keys import (
    MailCursor,
    Outbox,
    OutboxChange,
    OutboxData,
    OutEntry,
    OutLetter,
    OutSpawn,
)
from .mailbox import Delivery, InboxData, InboxMoved, LetterOf, Mailbox, deliverable
from .roster import TeamRoster

__all__ = ["SENDING", "Outboxes", "SpawnsEntries", "post_following"]

logger = logging.getLogger("statekernel")

SENDING: contextvars.ContextVar[tuple[Outboxes, str] | None] = contextvars.ContextVar(
    "statekernel_team_sending", default=None
)
"""The outboxes and thread of the team run the current task belongs to: a `team.send` or
`team.spawn` made there goes into that thread's outbox."""

MOVES = 3
"""How many team restores a post follows to an agent's new thread before it gives up."""


class SpawnsEntries(Protocol):
    """What carries out a spawn an outbox holds (the team's `Spawner`)."""

    async def spawn_entry(self, entry: OutSpawn) -> None: ...


class Outboxes:
    """The outboxes of the team's agents: staged by their runs, posted after their saves;
    and the mail their runs collect. The team's side of `TeamLink`."""

    def __init__(self, roster: TeamRoster, mailbox: Mailbox, spawns: SpawnsEntries) -> None:
        self._roster = roster
        self.mailbox = mailbox
        self._spawns = spawns
        self._staged: dict[str, list[OutEntry]] = {}
        self._next: dict[str, int] = {}  # per thread, its outbox's next number as last seen
        self._posted: dict[str, int] = {}  # per thread, the last number this process posted
        self.prefetched: dict[str, InboxData] = {}  # inboxes the rounds read just before
        self.delivered: Counter[str] = Counter()  # messages delivered, per thread

    # -- staging, inside a run ---------------------------------------------------------------

    def next_number(self, thread_id: str) -> int:
        """The number the next entry staged from `thread_id`'s run will be given, as far
        as this process knows the thread's outbox (`note`d as the run started)."""
        return self._next[thread_id] + len(self._staged.get(thread_id, ()))

    def stage(self, thread_id: str, entry: OutEntry) -> None:
        """Stage `entry` from the run of `thread_id`: committed with what made it."""
        self._staged.setdefault(thread_id, []).append(entry)

    def note(self, thread_id: str, snapshot: Snapshot) -> None:
        """Take the outbox's next number from `snapshot`, the thread as a run starts or
        resumes with it: what the entries it stages will be numbered (and named) after."""
        self._next[thread_id] = snapshot.get(Outbox).next

    def outgoing(self, thread_id: str, traceparent: str | None = None) -> StateCommand | None:
        staged = self._staged.pop(thread_id, None)
        if not staged:
            return None
        self._next[thread_id] += len(staged)
        if traceparent is not None:  # the run that made them commits them: its span sent them
            staged = [_sent_under(entry, traceparent) for entry in staged]
        return StateCommand().update(Outbox, OutboxChange(added=tuple(staged)))

    def discard(self, thread_id: str) -> None:
        """Forget what a run staged and never committed (it ended first)."""
        self._staged.pop(thread_id, None)

    # -- posting, after a save -------------------------------------------------------------

    async def dispatch(self, thread_id: str, snapshot: Snapshot) -> None:
        await self.post(thread_id, snapshot.get(Outbox))

    async def post(self, thread_id: str, outbox: OutboxData) -> None:
        """Post the entries of `outbox` (as a save of `thread_id` holds it) this process
        has not posted yet, in order. A spawn the team refuses for good (an id another
        spawn took with another role, a role the team does not have) is logged and counted
        as posted, so that it never holds up the entries after it."""
        for entry in outbox.entries:
            if entry.seq <= self._posted.get(thread_id, 0):
                continue
            if isinstance(entry, OutLetter):
                await self._post_letter(thread_id, entry)
            else:
                try:
                    await self._spawns.spawn_entry(entry)
                except StateError as refused:
                    if isinstance(refused, StoreError):
                        raise  # the store failed: posted again later
                    logger.warning(
                        "agent %r could not be spawned from thread %r and never will be: %s",
                        entry.agent_id,
                        thread_id,
                        refused,
                    )
            self._posted[thread_id] = entry.seq

    async def _post_letter(self, thread_id: str, entry: OutLetter) -> None:
        letter = LetterOf(
            entry.sender,
            entry.content,
            entry.via,
            origin=(thread_id, entry.seq),
            traceparent=entry.traceparent,
        )
        if len(entry.to) == 1:
            await self._post_to(entry.to[0], letter)
        else:
            await asyncio.gather(*(self._post_to(agent_id, letter) for agent_id in entry.to))

    async def _post_to(self, agent_id: str, letter: LetterOf) -> None:
        try:
            await post_following(self._roster, self.mailbox, agent_id, letter, None)
        except UnknownAgent:  # a restore dropped it since the letter was sent
            logger.warning(
                "a letter from %r to agent %r was dropped: the team no longer has it",
                letter.sender,
                agent_id,
            )

    # -- collecting, at a step's start ------------------------------------------------------

    async def collect(self, thread_id: str, snapshot: Snapshot) -> Delivery | None:
        if self._roster.agent_of_thread(thread_id) is None:
            return None
        outbox = snapshot.get(Outbox)
        self._next[thread_id] = outbox.next
        if outbox.entries:
            await self.post(thread_id, outbox)  # after a crash: what the last run left
        inbox = self.prefetched.pop(thread_id, None)
        if inbox is None:
            inbox = await self.mailbox.read(thread_id)
        delivery = deliverable(inbox, snapshot.get(MailCursor))
        if delivery is not None:
            self.delivered[thread_id] += len(delivery.messages)
        return delivery

    def posted(self, thread_id: str, snapshot: Snapshot) -> StateCommand | None:
        entries = snapshot.get(Outbox).entries
        if not entries:
            return None
        through = min(entries[-1].seq, self._posted.get(thread_id, 0))
        if through < entries[0].seq:
            return None
        return StateCommand().update(Outbox, OutboxChange(posted_through=through))


def _sent_under(entry: OutEntry, traceparent: str) -> OutEntry:
    if isinstance(entry, OutLetter) and entry.traceparent is None:
        return msgspec.structs.replace(entry, traceparent=traceparent)
    return entry


async def post_following(
    roster: TeamRoster,
    mailbox: Mailbox,
    agent_id: str,
    letter: LetterOf,
    message_id: str | None,
) -> None:
    """Post `letter` to the agent's inbox; one a team restore moved is followed to the
    agent's thread as the stored roster has it now. An agent no longer in the roster (a
    restore dropped it) raises `UnknownAgent`."""
    record = roster.agents.get(agent_id)
    for _ in range(MOVES):
        if record is None:
            await roster.load()
            record = roster.record(agent_id)
        try:
            await mailbox.post(record.thread_id, letter, message_id)
            return
        except InboxMoved:
            record = None  # read the roster again
    raise StateError(
        f"the inbox of agent {agent_id!r} kept moving ({MOVES} restores of team "
        f"{roster.team_id!r} while sending); send again once they are done"
    )
