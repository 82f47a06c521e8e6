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
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs

from .._errors import cause_text
from .._profile.changes import ChangeFeed, SupportsChanges
from .._profile.store import ProfileStore
from .agent import Agent
from .leases import Leases, TeamLease
from .mailbox import Inbox
from .roster import AgentRecord, Roster, TeamRoster
from .rounds import IN_ROUND, Rounds, Tally, TeamReport
from .run_control import RunControl

__all__ = ["POLL_WITHOUT_FEED", "Worker", "inbox_changes"]

logger = logging.getLogger("statekernel")

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
        agents: Mapping[str, Agent],
    ) -> None:
        self._rounds = rounds
        self._roster = roster
        self._leases = leases
        self._store = store
        self._agents = agents
        self._tallies: dict[str, Tally] = {}
        self._running: dict[str, asyncio.Task[None]] = {}  # by agent id
        self._finished: set[str] = set()  # threads whose runs ended since the last look
        self._ended = asyncio.Event()  # set when a run ends
        self._controls: dict[str, RunControl] = {}
        self._unknown: set[str] = set()  # inboxes written that the roster had no agent of
        self._looks = 0
        self._beat_failed = False

    async def serve(self, stop: asyncio.Event, *, started: asyncio.Event) -> TeamReport:
        """Serve until `stop` is set; `started` is set once the first beat landed."""
        token = IN_ROUND.set(self._rounds)  # the agents' runs (tools, hooks) inherit it
        try:
            await self._leases.beat()  # before any lease is taken
            started.set()
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
            IN_ROUND.reset(token)
        stopped = any(t.outcomes[-1:] == ["stopped"] for t in self._tallies.values())
        idle = not (stopped or self._leases.waiting)
        return self._rounds.report(self._tallies, idle=idle, rounds=self._looks)

    async def _loop(self, feeds: _Feeds, stop: asyncio.Event) -> None:
        leases = self._leases
        loop = asyncio.get_running_loop()
        dirty: set[str] | None = None  # threads to look at; None: every agent
        next_beat = loop.time() + leases.beat_every
        stopping = asyncio.ensure_future(stop.wait())
        changed = asyncio.ensure_future(feeds.inboxes.next())
        joined = asyncio.ensure_future(feeds.rosters.next())
        moved = asyncio.ensure_future(feeds.leases.next())
        ended = asyncio.ensure_future(self._ended.wait())
        try:
            while True:
                if dirty is None or dirty:
                    await self._start_ready(dirty)
                    dirty = set()
                wake_at = min(next_beat, leases.next_look() or next_beat)
                done, _ = await asyncio.wait(
                    {stopping, changed, joined, moved, ended},
                    timeout=max(0.0, wake_at - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if stopping in done:
                    return
                if changed in done:
                    keys = self._changed_keys(changed)
                    dirty = None if keys is None or dirty is None else dirty | keys
                    changed = asyncio.ensure_future(feeds.inboxes.next())
                if joined in done:
                    # A spawn posts the task before the roster names its agent: a task
                    # seen before its agent waits for the roster to change.
                    self._changed_keys(joined)
                    if dirty is not None:
                        dirty |= self._unknown
                    self._unknown.clear()
                    joined = asyncio.ensure_future(feeds.rosters.next())
                if moved in done:
                    # A lease taken, handed on or released: the agent is worth a look.
                    keys = self._changed_keys(moved)
                    leases.moved(keys)
                    dirty = None if keys is None or dirty is None else dirty | keys
                    moved = asyncio.ensure_future(feeds.leases.next())
                if ended in done:
                    if dirty is not None:
                        dirty |= self._finished  # more work may have come meanwhile
                    self._finished.clear()
                    self._ended.clear()
                    ended = asyncio.ensure_future(self._ended.wait())
                if loop.time() >= wake_at and dirty is not None:
                    dirty |= leases.due_again() | self._unknown
                if loop.time() >= next_beat:
                    if await self._beat():
                        dirty = None
                    next_beat = loop.time() + leases.beat_every
        finally:
            for waiting in (stopping, changed, joined, moved, ended):
                waiting.cancel()

    def _changed_keys(self, changed: asyncio.Future[frozenset[str] | None]) -> set[str] | None:
        try:
            keys = changed.result()
        except Exception as error:  # the feed failed: look at everything, on a timer
            logger.warning("team worker: the store's change feed failed: %s", cause_text(error))
            return None
        return None if keys is None else set(keys)

    async def _beat(self) -> bool:
        """Beat the heartbeat; a store that cannot be reached is said once, not each beat
        (the leases lapse on their own, and the store logs its outage)."""
        try:
            fleet_changed = await self._leases.beat()
        except Exception as error:
            if not self._beat_failed:
                logger.warning(
                    "team worker %s: its heartbeat could not be written (%s); it takes no "
                    "new agents until it can",
                    self._leases.worker_id,
                    cause_text(error),
                )
            self._beat_failed = True
            return False
        if self._beat_failed:
            logger.warning("team worker %s: its heartbeat is written again", self._leases.worker_id)
            self._beat_failed = False
        return fleet_changed

    async def _start_ready(self, dirty: set[str] | None) -> None:
        """Look at the agents in `dirty` (None: all of this process's), start a run of each
        with work whose lease this worker holds or takes, and hand idle ones on."""
        self._looks += 1
        roster = self._roster
        if dirty is None or any(roster.agent_of_thread(t) is None for t in dirty):
            await roster.load()  # agents spawned elsewhere join from here on
            if dirty is not None:
                self._unknown |= {t for t in dirty if roster.agent_of_thread(t) is None}
        if dirty is None:
            records = [r for r in self._rounds.local() if r.id not in self._running]
        else:
            local = self._rounds.local_roles
            # A letter to an agent another live worker holds is that worker's to deliver.
            named = (roster.agent_of_thread(t) for t in dirty if not self._leases.elsewhere(t))
            records = [
                record
                for agent_id in named
                if agent_id is not None and agent_id not in self._running
                for record in (roster.record(agent_id),)
                if record.role in local
            ]
        if not records:
            return
        ready = set(await self._rounds.ready(records))
        for record in records:
            if record.id not in ready:
                await self._leases.idle(record.thread_id, record.role)
            elif await self._leases.take(record.thread_id, record.role):
                self._start(record)

    def _start(self, record: AgentRecord) -> None:
        control = RunControl()
        tally = self._tallies.setdefault(record.id, Tally())
        task = asyncio.ensure_future(self._rounds.step(record.id, tally, control))
        self._running[record.id] = task
        self._controls[record.id] = control
        task.add_done_callback(lambda _: self._run_ended(record))

    def _run_ended(self, record: AgentRecord) -> None:
        """A run's task ended: its agent is looked at again (more work may have come)."""
        self._running.pop(record.id, None)
        self._controls.pop(record.id, None)
        self._finished.add(record.thread_id)
        self._ended.set()

    async def _drain(self) -> None:
        """Stop every run before its next step, wait for them, and release the leases."""
        for control in self._controls.values():
            control.request_stop()
        if self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)
        self._running.clear()
        self._controls.clear()
        try:
            await self._leases.release()
        except Exception as error:
            logger.warning(
                "team worker %s: its leases could not be released (%s); the other workers "
                "take its agents once a lease has passed",
                self._leases.worker_id,
                cause_text(error),
            )
