"""Team snapshots: every agent's thread revision and the undelivered mail as one point in
time, and returning a team to one.

A snapshot is taken between rounds, with the team quiet. Before the inboxes are read, what
the agents' outboxes hold is posted, so that the inboxes hold every letter the threads'
revisions sent; a restore then forks each thread at its revision with an empty outbox (its
letters are in the restored inboxes already) and sets each inbox as it was.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import msgspec

from .._errors import StateError, UnknownThread
from .._host.kernel import Kernel
from .._profile.access import ProfileAccess
from .._values.commands import StateCommand
from .._values.reserved_keys import Outbox, OutboxChange
from .outbox import Outboxes
from .roster import AgentRecord, RosterData, Snapshots, TeamRoster, TeamSnapshot

__all__ = ["TeamSnapshots"]


class TeamSnapshots:
    """Saving and restoring the team's snapshots, kept beside its roster."""

    def __init__(
        self,
        profile: ProfileAccess,
        roster: TeamRoster,
        outboxes: Outboxes,
        kernel_of: Callable[[str], Kernel],
    ) -> None:
        self._profile = profile
        self._roster = roster
        self._outboxes = outboxes
        self._kernel_of = kernel_of

    async def save(self, name: str | None, waiting: list[str]) -> TeamSnapshot:
        """Store the team as it is now under `name` (default: a new one)."""
        if waiting:
            raise StateError(
                f"agents {waiting} wait on a decision, and a team snapshot cannot hold a "
                f"suspended run; resume (or cancel) them first. Nothing was saved."
            )
        team_id = self._roster.team_id
        name = name or f"snapshot-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        # First what the outboxes hold (spawns among it join the roster), then the roster.
        await asyncio.gather(*(self._post(r) for r in self._roster.agents.values()))
        await self._roster.load()
        records = dict(self._roster.agents)
        heads = await asyncio.gather(*(self._head(r) for r in records.values()))
        mailbox = self._outboxes.mailbox
        inboxes = await asyncio.gather(*(mailbox.read(r.thread_id) for r in records.values()))
        snapshot = TeamSnapshot(
            name,
            team_id,
            time.time(),
            records,
            dict(zip(records, heads, strict=True)),
            dict(zip(records, inboxes, strict=True)),
        )
        await self._profile.write(Snapshots, f"{team_id}/{name}", snapshot)
        await self._roster.change(lambda r: RosterData(r.agents, (*r.snapshots, name)))
        return snapshot

    async def _post(self, record: AgentRecord) -> None:
        """Post what the agent's outbox holds."""
        try:
            state = await self._kernel_of(record.role).get_state(record.thread_id)
        except UnknownThread:
            return
        await self._outboxes.post(record.thread_id, state.get(Outbox))

    async def _head(self, record: AgentRecord) -> int | None:
        """The thread's head revision (None: nothing saved)."""
        try:
            return (await self._kernel_of(record.role).get_state(record.thread_id)).revision
        except UnknownThread:
            return None

    async def restore(self, given: TeamSnapshot | str | None) -> TeamSnapshot:
        """Fork every agent's thread at its snapshot revision, set the inboxes as they were,
        and point the roster at the new threads."""
        snapshot = await self.find(given)
        team_id = self._roster.team_id
        if snapshot.team_id != team_id:
            raise StateError(
                f"snapshot {snapshot.name!r} is of team {snapshot.team_id!r}, not of "
                f"{team_id!r}; restore it with AgentTeam(..., team_id={snapshot.team_id!r}). "
                f"Nothing was changed."
            )
        await self._roster.load()
        before = dict(self._roster.agents)
        token = uuid.uuid4().hex[:8]
        mailbox = self._outboxes.mailbox
        restored: dict[str, AgentRecord] = {}
        for agent_id, record in snapshot.agents.items():
            thread_id = f"{team_id}/{agent_id}/{token}"
            revision = snapshot.revisions.get(agent_id)
            if revision is not None:
                kernel = self._kernel_of(record.role)
                await kernel.fork(record.thread_id, revision, thread_id)
                outbox = (await kernel.get_state(thread_id)).get(Outbox)
                if outbox.entries:  # posted when the snapshot was taken
                    drop = OutboxChange(posted_through=outbox.entries[-1].seq)
                    await kernel.update_state(thread_id, StateCommand().update(Outbox, drop))
            await mailbox.replace(thread_id, snapshot.inboxes[agent_id])
            restored[agent_id] = msgspec.structs.replace(record, thread_id=thread_id)
        await self._roster.change(lambda r: RosterData(restored, r.snapshots))
        # Senders elsewhere still hold the old threads: their next send to one finds it
        # moved, reads the roster again and sends to the new thread.
        for agent_id, record in before.items():
            moved = restored.get(agent_id)
            await mailbox.move(record.thread_id, moved.thread_id if moved else "")
        return snapshot

    async def find(self, given: TeamSnapshot | str | None) -> TeamSnapshot:
        team_id = self._roster.team_id
        if isinstance(given, TeamSnapshot):
            return given
        if given is None:
            await self._roster.load()
            names = self._roster.snapshots
            if not names:
                raise StateError(f"team {team_id!r} has no snapshot to restore")
            given = names[-1]
        if not isinstance(given, str):
            raise TypeError(f"restore_snapshot takes a TeamSnapshot or its name, got {given!r}")
        found = await self._profile.read(Snapshots, f"{team_id}/{given}")
        if found is None:
            await self._roster.load()
            raise StateError(
                f"team {team_id!r} has no snapshot named {given!r}; its snapshots are "
                f"{list(self._roster.snapshots)}"
            )
        return found
