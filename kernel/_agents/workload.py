"""Workload: whether any agent of a team, in any process, has work, read from the stores
alone, behind `team.wait_idle`.

An agent has work when its inbox holds letters beyond the cursor its thread saved, its
conversation waits for the model (a run between steps, here or in another process, or one a
crash cut), its thread holds letters or spawns not yet posted, or a restart is due. An agent
waiting on a decision, or failed for good, has none: nobody can do its work but a person.

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
from .._values.reserved_keys import History, MailCursor, Outbox
from .agent import Agent
from .mailbox import Mailbox
from .roster import AgentRecord, TeamRoster
from .run_loop import awaits_answer

__all__ = ["Workload"]

_Mark = tuple[object, ...]
"""What one agent looked like when found without work: the same mark twice means nothing
happened to it between."""


class Workload:
    """Looks at a team's agents as the stores hold them."""

    def __init__(self, roster: TeamRoster, mailbox: Mailbox, agents: Mapping[str, Agent]) -> None:
        self._roster = roster
        self._mailbox = mailbox
        self._agents = agents
        self._last: dict[str, _Mark] | None = None

    async def idle(self) -> bool:
        """Whether no agent has work, and nothing changed since the previous look found
        none (the first look after work is never enough)."""
        await self._roster.load()
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
        if state.get(Outbox).entries:
            return None
        if awaits_answer(tuple(state.get(History)[-1:])):
            try:
                suspended = await agent.kernel.suspension(record.thread_id)
            except StateError:
                return None  # a run of it is live in this process
            if suspended is None:
                return None
        return (version, state.revision)
