"""A team's roster: who its agents are, where their threads are, what they subscribe to.

The roster is one ProfileStore entry per team, changed only with atomic `update`s, so that
processes of one team (on PostgreSQL, on several hosts) see one list of agents and one set
of subscriptions. It holds what outlives a process: an agent's thread, its parent, its
topics, how often it was restarted, and the two statuses that must survive a restart
("waiting" on a decision, "failed" for good). Whether an agent is running or done is the
live team's to know. Team snapshots are kept beside it, one entry each.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .._profile.keys import ProfileKey
from .mailbox import InboxData

__all__ = ["AgentRecord", "AgentStatus", "Roster", "RosterData", "Snapshots", "TeamSnapshot"]

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
