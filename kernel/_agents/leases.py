"""Leases: which worker runs which agent, so that at most one runs it at a time, and a dead
worker's agents are taken over by the living.

A worker is one `team.serve()` in some process. A lease is one profile entry per agent
thread naming the worker that runs it, taken by compare-and-set, so that of two workers
taking one agent at once one wins. A worker keeps all its leases alive with one heartbeat
entry of its own, beaten every `beat_every` seconds, rather than one write per agent: a team
of a thousand agents costs each worker one write a second. The same beat reads every
worker's heartbeat, which is how a worker learns who else serves the team.

Whether a worker is alive is judged on the observer's own clock, never the holder's: a
worker whose heartbeat has not changed for `lease_seconds` of the observer's time (or that
is gone: a worker that stops cleanly deletes it) is dead, and its leases may be taken.
Clocks of different hosts are never compared. A worker trusts its own leases only within
`lease_seconds` of the moment it sent its last beat that landed, so it stops taking work
before anyone can think it dead; should two workers still run one agent (a process paused
past its lease), the thread's compare-and-set save lands one and supersedes the other.

Free agents are shared out by rendezvous hashing: of the live workers serving an agent's
role, the one whose hash with the agent's thread is highest is its preferred worker. A
worker takes a free agent at once when it is the preferred one, and after `beat_every` when
the preferred worker has not (it may be slow to hear, or gone), so that an agent with work
never waits for long; and it hands an agent it holds to its preferred worker when that
agent goes idle. So a worker that joins gets its share as agents finish, and agents stay
with one worker (its caches warm) while the fleet does not change.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable

import attrs
import msgspec

from .._errors import VersionConflict
from .._profile.access import ProfileAccess
from .._profile.keys import ProfileKey

__all__ = ["LeaseData", "Leases", "TeamLease", "TeamWorker", "WorkerBeat"]

logger = logging.getLogger("statekernel")

LONGEST_BEAT = 1.0
"""The longest time between a worker's beats (seconds): a short beat bounds how long after
`lease_seconds` a dead worker's agents are taken over, and costs one small write."""


FORGOTTEN_AFTER = 3
"""How many leases a dead worker's heartbeat stays before a living worker deletes it."""


class WorkerBeat(msgspec.Struct, frozen=True):
    """A worker's heartbeat: the roles it serves, and a count bumped at each beat."""

    roles: tuple[str, ...] = ()
    beat: int = 0


class LeaseData(msgspec.Struct, frozen=True):
    """Who runs the agent of a thread: a worker id ("": nobody)."""

    worker: str = ""


class TeamWorker(ProfileKey[WorkerBeat | None]):
    """Heartbeats, one entry per `<team id>/<worker id>`."""

    key = "statekernel.team_worker"
    _kernel_values = True
    default = None


class TeamLease(ProfileKey[LeaseData]):
    """Leases, one entry per agent thread."""

    key = "statekernel.team_lease"
    _kernel_values = True


@attrs.define
class _Seen:
    """A worker as this observer last saw it: its roles, its last beat count, and when that
    count was first seen (the observer's clock)."""

    roles: tuple[str, ...]
    beat: int
    at: float


class Leases:
    """One worker's leases on its team's agents, and its view of the other workers."""

    def __init__(
        self,
        profile: ProfileAccess,
        team_id: str,
        roles: tuple[str, ...],
        *,
        lease_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._profile = profile
        self._team_id = team_id
        self._roles = roles
        self.lease_seconds = lease_seconds
        self.beat_every = min(lease_seconds / 4, LONGEST_BEAT)
        self._clock = clock
        self.worker_id = uuid.uuid4().hex
        self._held: set[str] = set()
        self._seen: dict[str, _Seen] = {}
        self._deferred: dict[str, float] = {}  # free agents left to their preferred worker
        self._elsewhere: dict[str, str] = {}  # agents with work a live worker holds: by whom
        self._trusted_until = float("-inf")
        self._observed_at = float("-inf")  # when the heartbeats were last read
        self._beat = 0

    def _entry(self, worker_id: str) -> str:
        return f"{self._team_id}/{worker_id}"

    # -- the heartbeat -------------------------------------------------------------------

    async def beat(self) -> bool:
        """Beat this worker's heartbeat and read everyone else's; returns whether every
        agent is worth another look: the fleet changed since the last beat (a worker
        joined, left or died), or this worker's leases were not trusted until this beat."""
        self._beat += 1
        sent = self._clock()
        await self._profile.write(
            TeamWorker, self._entry(self.worker_id), WorkerBeat(self._roles, self._beat)
        )
        lapsed = self._clock() >= self._trusted_until
        if lapsed:
            # The beat landed after the last one's trust ran out: meanwhile the others may
            # have judged this worker dead and taken its agents, so it holds none of them.
            self._held.clear()
        self._trusted_until = sent + self.lease_seconds
        return await self._observe() or lapsed

    async def _observe(self) -> bool:
        entries = await self._profile.list_entries(TeamWorker, f"{self._team_id}/")
        now = self._observed_at = self._clock()
        before = self._alive_ids(now)
        present = set()
        for key, beat in entries:
            worker = key.rpartition("/")[2]
            if worker == self.worker_id or beat is None:
                continue
            present.add(worker)
            seen = self._seen.get(worker)
            if seen is None or seen.beat != beat.beat:
                self._seen[worker] = _Seen(beat.roles, beat.beat, now)
        for gone in set(self._seen) - present:
            del self._seen[gone]
        for worker in (before - self._alive_ids(now)) & self._seen.keys():
            logger.warning(
                "team %r: worker %s has not beaten for %.1f s, more than a lease: judged "
                "dead, its agents are taken over as they get work",
                self._team_id,
                worker,
                now - self._seen[worker].at,
            )
        for worker, seen in list(self._seen.items()):
            if now - seen.at >= FORGOTTEN_AFTER * self.lease_seconds:
                # Long dead (killed): its entry goes, so that the heartbeats of a fleet that
                # restarts often do not pile up. Should it beat again after all, that beat
                # finds its trust lapsed and holds nothing (see `beat`).
                del self._seen[worker]
                await self._profile.delete(TeamWorker, self._entry(worker))
        return self._alive_ids(now) != before

    def _alive_ids(self, now: float) -> frozenset[str]:
        return frozenset(w for w, s in self._seen.items() if now - s.at < self.lease_seconds)

    def trusted(self) -> bool:
        """Whether this worker's leases still hold: its last beat that landed was sent
        within a lease of its own time."""
        return self._clock() < self._trusted_until

    async def alive(self, worker_id: str) -> bool:
        """Whether a lease's holder is alive: its heartbeat changed within a lease of the
        last time this worker read the heartbeats (not of now: a worker whose own reads
        were slow has seen nothing that proves anyone dead). One not seen yet (it started
        since) is read, and alive for a lease from then if it has a heartbeat."""
        seen = self._seen.get(worker_id)
        if seen is None:
            beat = await self._profile.read(TeamWorker, self._entry(worker_id))
            if beat is None:
                return False  # it stopped cleanly
            seen = self._seen[worker_id] = _Seen(beat.roles, beat.beat, self._clock())
            return True
        return self._observed_at - seen.at < self.lease_seconds

    async def observe(self) -> None:
        """Read the heartbeats (for an observer that holds no leases: `wait_idle`)."""
        await self._observe()

    # -- leases ----------------------------------------------------------------------------

    def preferred(self, thread_id: str, role: str) -> str:
        """The live worker serving `role` that the agent of `thread_id` goes to."""
        now = self._clock()
        candidates = [self.worker_id] if role in self._roles else []
        candidates += [
            w for w, s in self._seen.items() if role in s.roles and now - s.at < self.lease_seconds
        ]
        return max(candidates, key=lambda w: _weight(w, thread_id))

    async def claimable(self, thread_id: str, role: str) -> int | None:
        """Whether this worker may run the agent of `thread_id`: None if not (another live
        worker holds it, or it is free and left to its preferred worker for a beat), else
        the lease's version to `take` it at (-1: this worker holds it already)."""
        if not self.trusted():
            return None
        if thread_id in self._held:
            return -1
        self._elsewhere.pop(thread_id, None)
        lease, version = await self._profile.read_with_version(TeamLease, thread_id)
        if lease.worker == self.worker_id:  # handed over to this worker
            self._held.add(thread_id)
            return -1
        if lease.worker and await self.alive(lease.worker):
            self._deferred.pop(thread_id, None)
            self._elsewhere[thread_id] = lease.worker
            return None
        if self.preferred(thread_id, role) != self.worker_id:
            first = self._deferred.setdefault(thread_id, self._clock())
            if self._clock() - first < self.beat_every:
                return None
        return version

    async def take(self, thread_id: str, version: int) -> bool:
        """Take the lease `claimable` found free at `version`; whether this worker holds it
        now (of two workers taking it, one wins)."""
        if thread_id in self._held:
            return True
        self._deferred.pop(thread_id, None)
        if not self.trusted():  # (the reads took long)
            return False
        try:
            await self._profile.compare_and_set(
                TeamLease, thread_id, LeaseData(self.worker_id), version=version
            )
        except VersionConflict:
            return False  # another worker took it first
        self._held.add(thread_id)
        return True

    def next_look(self) -> float | None:
        """When an agent this worker could not take is worth another look (the observer's
        clock): a free one left to another worker once its grace is over, one a live worker
        holds once that worker would be judged dead if it beats no more."""
        times = [t + self.beat_every for t in self._deferred.values()]
        for holder in set(self._elsewhere.values()):
            seen = self._seen.get(holder)
            times.append(self._clock() if seen is None else seen.at + self.lease_seconds)
        return min(times, default=None)

    def due_again(self) -> set[str]:
        """The agents `next_look` was for, now due: deferred past their grace, or held by a
        worker that is dead or gone."""
        now = self._clock()
        due = {t for t, first in self._deferred.items() if now - first >= self.beat_every}
        for thread_id, holder in self._elsewhere.items():
            seen = self._seen.get(holder)
            if seen is None or now - seen.at >= self.lease_seconds:
                due.add(thread_id)
        return due

    def forget(self, thread_id: str) -> None:
        """The agent left the team (a restore): nothing waits for it."""
        self._deferred.pop(thread_id, None)
        self._elsewhere.pop(thread_id, None)

    def elsewhere(self, thread_id: str) -> bool:
        """Whether a live worker holds the agent of `thread_id`, as this worker last read
        its lease: its letters are that worker's to deliver, and not worth a look here."""
        holder = self._elsewhere.get(thread_id)
        if holder is None:
            return False
        seen = self._seen.get(holder)
        return seen is not None and self._observed_at - seen.at < self.lease_seconds

    def moved(self, thread_ids: set[str] | None) -> None:
        """Leases were written (taken, handed on, released): what was read of them is
        stale (None: of every lease)."""
        if thread_ids is None:
            self._elsewhere.clear()
        else:
            for thread_id in thread_ids:
                self._elsewhere.pop(thread_id, None)

    @property
    def waiting(self) -> bool:
        """Whether agents with work wait for another worker (or for a lease to pass)."""
        return bool(self._deferred or self._elsewhere)

    async def idle(self, thread_id: str, role: str) -> None:
        """The agent has no work: nothing waits on another worker for it; and one this
        worker holds goes to its preferred worker, if that is another (a worker that joined
        since): the lease names it, so it runs the agent's next work without waiting for a
        lease to run out."""
        self._deferred.pop(thread_id, None)
        self._elsewhere.pop(thread_id, None)
        if thread_id not in self._held:
            return
        other = self.preferred(thread_id, role)
        if other == self.worker_id:
            return
        self._held.discard(thread_id)
        lease, version = await self._profile.read_with_version(TeamLease, thread_id)
        if lease.worker != self.worker_id:
            return
        try:
            await self._profile.compare_and_set(
                TeamLease, thread_id, LeaseData(other), version=version
            )
        except VersionConflict:
            return

    async def release(self) -> None:
        """Give every lease up at once: this worker's heartbeat goes, so that the others
        judge it gone at their next beat instead of after a lease."""
        self._held.clear()
        self._trusted_until = float("-inf")
        await self._profile.delete(TeamWorker, self._entry(self.worker_id))


def _weight(worker_id: str, thread_id: str) -> bytes:
    return hashlib.blake2b(f"{worker_id}\x00{thread_id}".encode(), digest_size=8).digest()
