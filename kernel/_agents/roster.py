"""A team's roster: who its agents are, where their threads are, what they subscribe to.

The roster is one ProfileStore entry per team, changed only by an atomic read-modify-write
in the store (a compare-and-set retried), so that processes of one team (on PostgreSQL, on
several hosts) see one list of agents and one set of subscriptions, and two processes that
spawn one agent id at once get one agent: the first write decides its thread, and the other
adopts it. It holds what outlives a process: an agent's thread, its parent, its topics, how
often it was restarted, and the two statuses that must survive a restart ("waiting" on a
decision, "failed" for good). Whether an agent is running or done is the live team's to
know. Team snapshots are kept beside it, one entry each.

`TeamRoster` is this process's copy: one index of records by agent id, replaced whole by
every read and every change, never edited in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec

from .._errors import StateError, UnknownAgent
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
    """The team's roster as this process last read or changed it."""

    def __init__(self, profile: ProfileAccess, team_id: str) -> None:
        self._profile = profile
        self.team_id = team_id
        self._data = RosterData()
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
        self._take(await self._profile.read(Roster, self.team_id))

    async def change(self, fn: Callable[[RosterData], RosterData]) -> RosterData:
        """Change the stored roster by `fn` (pure: it may run again on a lost race), and
        take what was written."""
        data = await self._profile.update(Roster, self.team_id, fn)
        self._take(data)
        return data

    async def adopt(self, record: AgentRecord) -> AgentRecord:
        """The roster's record of `record.id`: `record` if nobody held that id, else the one
        held (of another role: `StateError`)."""
        held = (await self.change(lambda roster: roster.adopting(record))).agents[record.id]
        if held.role != record.role:
            raise StateError(
                f"team {self.team_id!r} has agent {record.id!r} already, of role "
                f"{held.role!r}, not {record.role!r}; choose another agent_id"
            )
        return held

    def _take(self, data: RosterData) -> None:
        self._data = data
        self._by_thread = None
