"""Serving: one process's worker of a team, running its agents as work arrives until told
to stop, and sleeping between.

A worker starts each agent's run as soon as it has work and this worker holds its lease
(`leases.py`), each run in a task of its own, so one slow agent holds nobody up. Between
runs it sleeps on five things at once: the profile store's change feed of the inboxes (a
letter posted in any process names its recipient), its feed of the rosters (a spawn posts
the new agent's task before the roster names the agent, so a task whose agent is not known
yet waits for the roster to change), its feed of the leases (an agent handed on, taken or
released), its own runs ending (an agent may have more work), and its heartbeat's timer
(each beat may find a worker joined, left or dead, whose agents are then worth another
look). A store without change feeds is looked at whole every `POLL_WITHOUT_FEED` seconds
instead.

Who is looked at is what changed: the recipients a feed names and the agents whose runs
ended. Everything is looked at when the worker starts, when a feed cannot say what changed,
and when the fleet changes. A letter to an agent that a live worker holds costs the others
nothing: they read its lease once, and look again only when the lease changes or when its
holder would be judged dead.

Told to stop, the worker drains: no run starts, each running one stops before its next step
(its last step saved), and its leases are released by deleting its heartbeat, so that the
other workers take its agents at their next beat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import attrs

from .._errors import cause_text
from .._profile.changes import ChangeFeed, SupportsChanges
from .._profile.store import ProfileStore
from .leases import Leases, TeamLease
from .mailbox import Inbox
from .roster import AgentRecord, Roster, TeamRoster
from .rounds import IN_ROUND, Rounds, Tally, TeamReport
from .run_control import RunControl

__all__ = ["POLL_WITHOUT_FEED", "Worker", "inbox_changes"]

logger = logging.getLogger("statekernel")

T = TypeVar("T")

KEPT_RESULTS = 16
"""How many of each agent's last runs a worker's report keeps (their outcomes and
`RunResult`s): a worker runs for days, and a result holds the whole conversation."""

POLL_WITHOUT_FEED = 1.0
"""How often a worker (or `wait_idle`) on a store without change feeds looks at every
agent (seconds)."""


class _Timer:
    """A change feed of a store that has none: "anything may have changed", every so often."""

    def __init__(self, every: float) -> None:
        self._every = every

    async def next(self) -> frozenset[str] | None:
        await asyncio.sleep(self._every)
        return None


@contextlib.asynccontextmanager
async def changes(store: ProfileStore, namespace: str) -> AsyncIterator[ChangeFeed | _Timer]:
    """The store's feed of `namespace`'s changes, or a timer where it has none."""
    if isinstance(store, SupportsChanges):
        async with store.changes(namespace) as feed:
            yield feed
    else:
        yield _Timer(POLL_WITHOUT_FEED)


def inbox_changes(store: ProfileStore) -> contextlib.AbstractAsyncContextManager[Any]:
    """The store's feed of inbox changes (a letter posted names its recipient's thread)."""
    return changes(store, Inbox.key)


@attrs.frozen
class _Feeds:
    """What a worker sleeps on besides its runs: the inboxes, the rosters, the leases."""

    inboxes: ChangeFeed | _Timer
    rosters: ChangeFeed | _Timer
    leases: ChangeFeed | _Timer


class Worker:
    """One `team.serve()`: its runs, its leases, and what it looks at next."""

    def __init__(
        self,
        rounds: Rounds,
        roster: TeamRoster,
        leases: Leases,
        store: ProfileStore,
    ) -> None:
        self._rounds = rounds
        self._roster = roster
        self._leases = leases
        self._store = store
        self._prefix = f"{roster.team_id}/"  # every thread of the team's agents starts so
        self._tallies: dict[str, Tally] = {}
        self._running: dict[str, asyncio.Task[None]] = {}  # by agent id
        self._controls: dict[str, RunControl] = {}
        self._known: frozenset[str] = frozenset()  # the agents the roster named at the last look
        self._unknown: set[str] = set()  # inboxes written that the roster had no agent of
        self._looks = 0
        self._failing: str | None = None  # what failed last, said once until it works again
        # What wakes the loop besides the feeds: a run's end, a beat that asks for a look
        # at everything.
        self._finished: set[str] = set()
        self._look_at_all = False
        self._known_changed = False
        self._woken = asyncio.Event()

    async def serve(self, stop: asyncio.Event, *, started: asyncio.Event) -> TeamReport:
        """Serve until `stop` is set; `started` is set once the first beat landed."""
        token = IN_ROUND.set(self._rounds)  # the agents' runs (tools, hooks) inherit it
        try:
            await self._leases.beat()  # before any lease is taken
            started.set()
            beating = asyncio.ensure_future(self._beat_on())
            try:
                async with (
                    inbox_changes(self._store) as inboxes,
                    changes(self._store, Roster.key) as rosters,
                    changes(self._store, TeamLease.key) as leases,
                ):
                    try:
                        await self._loop(_Feeds(inboxes, rosters, leases), stop)
                    finally:
                        await self._drain()
            finally:
                beating.cancel()
                await self._release()
        finally:
            IN_ROUND.reset(token)
        stopped = any(t.outcomes and t.outcomes[-1] == "stopped" for t in self._tallies.values())
        idle = not (stopped or self._leases.waiting)
        return self._rounds.report(self._tallies, idle=idle, rounds=self._looks)

    # -- the loop --------------------------------------------------------------------------

    async def _loop(self, feeds: _Feeds, stop: asyncio.Event) -> None:
        leases = self._leases
        loop = asyncio.get_running_loop()
        dirty: set[str] | None = None  # threads to look at; None: every agent
        stopping = asyncio.ensure_future(stop.wait())
        changed = asyncio.ensure_future(feeds.inboxes.next())
        joined = asyncio.ensure_future(feeds.rosters.next())
        moved = asyncio.ensure_future(feeds.leases.next())
        woken = asyncio.ensure_future(self._woken.wait())
        try:
            while not stop.is_set():
                if dirty is None or dirty:
                    dirty = await self._look(dirty)
                wake_at = leases.next_look()
                done, _ = await asyncio.wait(
                    {stopping, changed, joined, moved, woken},
                    timeout=None if wake_at is None else max(0.0, wake_at - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if stopping in done:
                    return
                looked_for: set[str] | None = set()
                if changed in done:
                    looked_for = await self._keys(changed)
                    changed = asyncio.ensure_future(feeds.inboxes.next())
                if joined in done:
                    # A spawn posts the task before the roster names its agent: the tasks
                    # seen before their agents are looked at once the roster changes.
                    await self._keys(joined)
                    looked_for = _union(looked_for, self._unknown)
                    self._unknown = set()
                    self._known_changed = True
                    joined = asyncio.ensure_future(feeds.rosters.next())
                if moved in done:
                    # A lease taken, handed on or released: the agent is worth a look.
                    keys = await self._keys(moved)
                    leases.moved(keys)
                    looked_for = _union(looked_for, keys)
                    moved = asyncio.ensure_future(feeds.leases.next())
                if woken in done:
                    self._woken.clear()
                    woken = asyncio.ensure_future(self._woken.wait())
                    looked_for = _union(looked_for, self._finished)  # more work may have come
                    self._finished = set()
                    if self._look_at_all:
                        self._look_at_all = False
                        looked_for = None
                if wake_at is not None and loop.time() >= wake_at:
                    await self._quietly("heartbeat read", leases.observe)
                    looked_for = _union(looked_for, leases.due_again())
                dirty = _union(dirty, looked_for)
        finally:
            for waiting in (stopping, changed, joined, moved, woken):
                waiting.cancel()

    async def _keys(self, changed: asyncio.Future[frozenset[str] | None]) -> set[str] | None:
        """The team's threads a feed named (None: look at everything). A feed that failed
        is waited for a beat before it is asked again, so that it cannot spin."""
        try:
            keys = changed.result()
        except Exception as error:
            self._said("the store's change feed", error)
            await asyncio.sleep(self._leases.beat_every)
            return None
        if keys is None:
            return None
        return {k for k in keys if k.startswith(self._prefix)}

    # -- the heartbeat ---------------------------------------------------------------------

    async def _beat_on(self) -> None:
        """Beat every `beat_every`, in a task of its own (a long look must not delay it);
        a beat that finds the fleet changed (or this worker's trust back) asks for a look
        at every agent, and one that finds the trust gone stops the runs at their next
        step: another worker may be running their agents by now."""
        leases = self._leases
        while True:
            await asyncio.sleep(leases.beat_every)
            look = await self._quietly("heartbeat", leases.beat)
            if look:
                self._look_at_all = True
                self._woken.set()
            if not leases.trusted():
                for control in self._controls.values():
                    control.request_stop()

    # -- looking at agents ------------------------------------------------------------------

    async def _look(self, dirty: set[str] | None) -> set[str]:
        """Look at the agents in `dirty` (None: all of this process's), start a run of each
        with work whose lease this worker holds or takes, and hand idle ones on. Returns
        what is left to look at: on a store failure, said once, every agent at the next
        beat."""
        self._looks += 1
        try:
            await self._start_ready(dirty)
        except Exception as error:
            self._said("a look at the agents", error)
            await asyncio.sleep(self._leases.beat_every)
            self._look_at_all = True
            self._woken.set()
            return set()
        self._failing = None
        return set()

    async def _start_ready(self, dirty: set[str] | None) -> None:
        roster, leases = self._roster, self._leases
        named = {roster.agent_of_thread(t) for t in dirty or ()}
        if dirty is None or None in named or self._known_changed:
            self._known_changed = False
            await roster.load()  # agents spawned elsewhere join from here on
            known = frozenset(roster.agents)
            if dirty is not None:
                # Agents named since the last look (their tasks may have been seen first).
                dirty |= {roster.agents[a].thread_id for a in known - self._known}
                for thread_id in dirty:
                    if roster.agent_of_thread(thread_id) is None:
                        self._unknown.add(thread_id)
                        leases.forget(thread_id)
            self._known = known
        if dirty is None:
            records = [r for r in self._rounds.local() if r.id not in self._running]
        else:
            local = self._rounds.local_roles
            # A letter to an agent another live worker holds is that worker's to deliver.
            records = [
                record
                for thread_id in dirty
                if not leases.elsewhere(thread_id)
                for agent_id in (roster.agent_of_thread(thread_id),)
                if agent_id is not None and agent_id not in self._running
                for record in (roster.record(agent_id),)
                if record.role in local
            ]
        if not records:
            return
        # An agent this worker does not hold is looked at only if it may take it: its
        # lease is read first (one read), its inbox and thread after.
        versions = await asyncio.gather(*(leases.claimable(r.thread_id, r.role) for r in records))
        open_ = {r.id: v for r, v in zip(records, versions, strict=True) if v is not None}
        records = [r for r in records if r.id in open_]
        if not records:
            return
        # What this process knew of an agent it did not hold (its cursor, whether its
        # conversation waits) may be stale: another worker may have run it since.
        self._rounds.forget_threads(r.thread_id for r in records if open_[r.id] >= 0)
        ready = set(await self._rounds.ready(records))
        for record in records:
            if record.id not in ready:
                await leases.idle(record.thread_id, record.role)
            elif await leases.take(record.thread_id, open_[record.id]):
                self._start(record)

    # -- runs ------------------------------------------------------------------------------

    def _start(self, record: AgentRecord) -> None:
        control = RunControl()
        tally = self._tallies.setdefault(record.id, Tally(keep=KEPT_RESULTS))
        task = asyncio.ensure_future(self._rounds.step(record.id, tally, control))
        self._running[record.id] = task
        self._controls[record.id] = control
        task.add_done_callback(lambda done: self._run_ended(record, done))

    def _run_ended(self, record: AgentRecord, task: asyncio.Task[None]) -> None:
        """A run's task ended: its agent is looked at again (more work may have come)."""
        self._running.pop(record.id, None)
        self._controls.pop(record.id, None)
        self._finished.add(record.thread_id)
        self._woken.set()
        if not task.cancelled() and task.exception() is not None:
            # The run's end could not be taken in (its status, a restart): the store
            # failed. The agent is looked at again like any other.
            self._said(f"agent {record.id!r}", task.exception())

    async def _drain(self) -> None:
        """Stop every run before its next step and wait for them (a second cancel cancels
        them: each run still ends cleanly)."""
        for control in self._controls.values():
            control.request_stop()
        if self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def _release(self) -> None:
        """Release the leases, even when cancelled again meanwhile (bounded: a store that
        does not answer leaves the others to wait out a lease)."""
        release = asyncio.ensure_future(self._leases.release())
        try:
            async with asyncio.timeout(self._leases.lease_seconds):
                await asyncio.shield(release)
        except (Exception, asyncio.CancelledError) as error:
            release.cancel()
            logger.warning(
                "team worker %s: its leases could not be released (%s); the other workers "
                "take its agents once a lease has passed",
                self._leases.worker_id,
                cause_text(error) if isinstance(error, Exception) else "cancelled",
            )

    # -- saying what failed ------------------------------------------------------------------

    async def _quietly(self, what: str, call: Callable[[], Awaitable[T]]) -> T | None:
        try:
            result = await call()
        except Exception as error:
            self._said(what, error)
            return None
        if self._failing == what:
            logger.warning("team worker %s: %s works again", self._leases.worker_id, what)
            self._failing = None
        return result

    def _said(self, what: str, error: BaseException | None) -> None:
        """Log a failure once until what failed works again (the store logs its outages;
        the leases lapse on their own while it cannot beat)."""
        if self._failing == what:
            return
        self._failing = what
        logger.warning(
            "team worker %s: %s failed (%s); it goes on, and tries again",
            self._leases.worker_id,
            what,
            "unknown" if error is None else cause_text(error),
        )


def _union(a: set[str] | None, b: set[str] | None) -> set[str] | None:
    """Two sets of threads to look at, None standing for every thread."""
    return None if a is None or b is None else a | b
