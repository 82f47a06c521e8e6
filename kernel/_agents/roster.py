"""A team's roster: who its agents are, where their threads are, what they subscribe to.

The roster is one ProfileStore entry per team, changed only by compare-and-set on the
version this process read (read again and retried after a lost race), so that processes of
one team (on PostgreSQL, on several hosts) see one list of agents and one set of
subscriptions, and two processes that spawn one agent id at once get one agent: the first
write decides its thread, and the other adopts it. It holds what outlives a process: an
agent's thread, its parent, its topics, how often it was restarted, and the two statuses
that must survive a restart ("waiting" on a decision, "failed" for good). Whether an agent
is running or done is the live team's to know. Team snapshots are kept beside it, one entry
each.

`TeamRoster` is this process's copy: one index of records by agent id, replaced whole by
every read and every change, never edited in place.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec

from .._errors import StateError, UnknownAgent, VersionConflict
from .._profile.access import ProfileAccess
from .._profile.keys import ProfileKey
from .mailbox import InboxData

__all__ = [
    "AgentRecord",
    "AgentStatus",
    "Roster",
    "RosterData",
    "Snapshots",
    "TeamRoster",
    "TeamSnapshot",
    "role_clash",
]

AgentStatus = Literal["idle", "running", "waiting", "failed", "done"]


class AgentRecord(msgspec.Struct, frozen=True):
    """One agent of the roster."""

    id: str
    role: str
    thread_id: str
    parent_id: str | None = None
    topics: tuple[str, ...] = ()
    restarts: int = 0
    held: Literal["waiting", "failed"] | None = None
    """A status that outlives the process; None: the live team decides."""
    error: str | None = None


class RosterData(msgspec.Struct, frozen=True):
    """Every agent of the team by id, in spawn order, and the names of its snapshots."""

    agents: dict[str, AgentRecord] = {}
    snapshots: tuple[str, ...] = ()

    def with_record(self, record: AgentRecord) -> RosterData:
        return RosterData({**self.agents, record.id: record}, self.snapshots)

    def adopting(self, record: AgentRecord) -> RosterData:
        """With `record`, unless its agent id is held already (then unchanged: the first
        spawn of an id decides its thread)."""
        return self if record.id in self.agents else self.with_record(record)

    def changing(self, agent_id: str, **changes: Any) -> RosterData:
        """With the agent's record changed (unchanged if the roster no longer holds it)."""
        record = self.agents.get(agent_id)
        if record is None:
            return self
        return self.with_record(msgspec.structs.replace(record, **changes))

    def restarted(self, agent_id: str) -> RosterData:
        """With the agent's restarts counted one more, and nothing held."""
        record = self.agents.get(agent_id)
        if record is None:
            return self
        return self.changing(agent_id, restarts=record.restarts + 1, held=None)

    def recovered(self, agent_id: str) -> RosterData:
        """With the agent's restarts and anything it held cleared (its run answered)."""
        return self.changing(agent_id, held=None, restarts=0)

    def subscribing(self, agent_id: str, topic: str, on: bool) -> RosterData:
        """With `topic` added to (or, `on` False, dropped from) the agent's topics."""
        record = self.agents.get(agent_id)
        if record is None:
            return self
        topics = tuple(t for t in record.topics if t != topic)
        return self.changing(agent_id, topics=(*topics, topic) if on else topics)


class Roster(ProfileKey[RosterData]):
    """Rosters, one entry per team id."""

    key = "statekernel.team_roster"
    _kernel_values = True


class TeamSnapshot(msgspec.Struct, frozen=True):
    """A team at one point in time, as `save_snapshot` returns it and `restore_snapshot`
    takes it.

    `TeamSnapshot(name, team_id, taken_at, agents, revisions, inboxes)`: its name, the
    team's id, when it was taken (seconds since the epoch), and by agent id: every agent's
    record, its thread's head revision (None: the thread had saved nothing yet) and its
    inbox (the undelivered mail).
    """

    name: str
    team_id: str
    taken_at: float
    agents: dict[str, AgentRecord]
    revisions: dict[str, int | None]
    inboxes: dict[str, InboxData]


class Snapshots(ProfileKey[TeamSnapshot | None]):
    """Team snapshots, one entry per `<team id>/<name>`."""

    key = "statekernel.team_snapshot"
    default = None


class TeamRoster:
    """The team's roster as this process last read or changed it, with the store's version
    of it: a read that comes back after a newer change is not taken."""

    def __init__(self, profile: ProfileAccess, team_id: str) -> None:
        self._profile = profile
        self.team_id = team_id
        self._data = RosterData()
        self._version = 0
        self._by_thread: dict[str, str] | None = None

    @property
    def agents(self) -> Mapping[str, AgentRecord]:
        """Every agent by id, in spawn order."""
        return self._data.agents

    @property
    def snapshots(self) -> tuple[str, ...]:
        return self._data.snapshots

    def record(self, agent_id: str) -> AgentRecord:
        """The agent's record; `UnknownAgent` if the roster does not hold it."""
        record = self._data.agents.get(agent_id)
        if record is None:
            raise UnknownAgent(agent_id, self.team_id, self._data.agents)
        return record

    def agent_of_thread(self, thread_id: str) -> str | None:
        """The id of the agent whose thread `thread_id` is, if any."""
        if self._by_thread is None:
            self._by_thread = {r.thread_id: r.id for r in self._data.agents.values()}
        return self._by_thread.get(thread_id)

    async def load(self) -> None:
        """Read the roster as stored (agents other processes spawned, subscriptions)."""
        data, version = await self._profile.read_with_version(Roster, self.team_id)
        self._take(data, version)

    async def change(self, fn: Callable[[RosterData], RosterData]) -> RosterData:
        """Change the stored roster by `fn` with compare-and-set on the version read, again
        on a fresh read after a lost race (`fn` is pure: it may run more than once), and
        take what was written."""
        for attempt in range(CHANGE_ATTEMPTS):
            data, version = await self._profile.read_with_version(Roster, self.team_id)
            changed = fn(data)
            if changed == data:
                self._take(data, version)
                return data
            try:
                written = await self._profile.compare_and_set(
                    Roster, self.team_id, changed, version=version
                )
            except VersionConflict:
                await asyncio.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
                continue
            self._take(changed, written)
            return changed
        raise StateError(
            f"the roster of team {self.team_id!r} kept changing under this process "
            f"({CHANGE_ATTEMPTS} writes of others came first); nothing was changed, try again"
        )

    async def adopt(self, record: AgentRecord) -> AgentRecord:
        """The roster's record of `record.id`: `record` if nobody held that id, else the one
        held (of another role: `StateError`)."""
        held = (await self.change(lambda roster: roster.adopting(record))).agents[record.id]
        if held.role != record.role:
            raise role_clash(self.team_id, held, record.role)
        return held

    def _take(self, data: RosterData, version: int) -> None:
        if version < self._version:
            return  # read before a change this process made since
        self._data = data
        self._version = version
        self._by_thread = None


CHANGE_ATTEMPTS = 64
"""How many lost compare-and-set races a roster change takes before it gives up."""


def role_clash(team_id: str, held: AgentRecord, role: str) -> StateError:
    """The error of a spawn of an agent id the team holds with another role."""
    return StateError(
        f"team {team_id!r} has agent {held.id!r} already, of role {held.role!r}, not "
        f"{role!r}; choose another agent_id"
    )
