"""Workload: whether any agent of a team, in any process, has work, read from the stores
alone, behind `team.wait_idle`.

An agent has work when its inbox holds letters beyond the cursor its thread saved, its
conversation waits for the model (a run between steps, here or in another process, or one a
crash cut), a tool call of it is running (its thread, saved before the tool began, holds a
call without a result, and a live worker holds its lease), its thread holds letters or
spawns its recipients (or the roster) do not hold yet, or a restart is due. An agent waiting
on a decision, or failed for good, has none: nobody can do its work but a person. (A call
without a result in a thread no live worker holds is one a crash cut: the agent waits for
`team.resume`.)

One look reads every agent at a slightly different moment, so one look that finds nothing
proves nothing: an agent read as idle may get a letter from one read after it, just before
that one ended. So the team is idle only when two looks in a row find no work and every
inbox version and thread revision the same: whatever happened between them would have
changed one of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from .._errors import StateError, UnknownThread
from .._profile.access import ProfileAccess
from .._values.reserved_keys import History, MailCursor, Outbox, OutboxData, OutSpawn
from .agent import Agent
from .leases import Leases, TeamLease
from .mailbox import Mailbox
from .roster import AgentRecord, TeamRoster
from .run_loop import awaits_answer

__all__ = ["Workload"]

_Mark = tuple[object, ...]
"""What one agent looked like when found without work: the same mark twice means nothing
happened to it between."""


class Workload:
    """Looks at a team's agents as the stores hold them."""

    def __init__(
        self,
        roster: TeamRoster,
        mailbox: Mailbox,
        agents: Mapping[str, Agent],
        leases: Leases,
        profile: ProfileAccess,
    ) -> None:
        self._roster = roster
        self._mailbox = mailbox
        self._agents = agents
        self._leases = leases  # observes the workers; holds nothing
        self._profile = profile
        self._last: dict[str, _Mark] | None = None

    async def idle(self) -> bool:
        """Whether no agent has work, and nothing changed since the previous look found
        none (the first look after work is never enough)."""
        await self._roster.load()
        await self._leases.observe()
        records = list(self._roster.agents.values())
        marks = await asyncio.gather(*(self._mark(r) for r in records))
        if any(m is None for m in marks):
            self._last = None
            return False
        now = {r.id: m for r, m in zip(records, marks, strict=True) if m is not None}
        settled = now == self._last
        self._last = now
        return settled

    async def _mark(self, record: AgentRecord) -> _Mark | None:
        """The agent's mark when it has no work, else None."""
        if record.held is not None:
            return ("held", record.held, record.restarts)
        if record.restarts:
            return None  # a restart is due (or running)
        agent = self._agents[record.role]
        inbox, version = await self._mailbox.read_with_version(record.thread_id)
        try:
            state = await agent.kernel.get_state(record.thread_id)
        except UnknownThread:
            return None if inbox.letters else (version, None)
        cursor: tuple[tuple[str, int], ...] = state.get(MailCursor)
        if inbox.undelivered(dict(cursor)).letters:
            return None
        outbox: OutboxData = state.get(Outbox)
        if not await self._posted(record.thread_id, outbox):
            return None
        last = tuple(state.get(History)[-1:])
        if awaits_answer(last):
            try:
                suspended = await agent.kernel.suspension(record.thread_id)
            except StateError:
                return None  # a run of it is live in this process
            if suspended is None:
                return None
        elif last and last[0].tool_calls and await self._held_alive(record.thread_id):
            return None  # its tool is running (saved in flight), in a live worker
        return (version, state.revision)

    async def _posted(self, thread_id: str, outbox: OutboxData) -> bool:
        """Whether what the thread's outbox holds is where it goes: each letter in its
        recipients' inboxes, each spawn in the roster (entries stay in the outbox, posted,
        until the sender's next step drops them)."""
        roster = self._roster
        for entry in outbox.entries:
            if isinstance(entry, OutSpawn):
                if entry.agent_id not in roster.agents:
                    return False
                continue
            for agent_id in entry.to:
                recipient = roster.agents.get(agent_id)
                if recipient is None:
                    continue  # left the team: its letters are dropped
                inbox, _ = await self._mailbox.head(recipient.thread_id)
                if inbox.origins.get(thread_id, 0) < entry.seq:
                    return False
        return True

    async def _held_alive(self, thread_id: str) -> bool:
        lease = await self._profile.read(TeamLease, thread_id)
        return bool(lease.worker) and await self._leases.alive(lease.worker)
