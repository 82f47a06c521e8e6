"""Rounds: which of this process's agents have work, running them, and what a run's end
means for the agent (its status, and the restart policy).

An agent has work when its inbox holds letters beyond the cursor its thread saved, a restart
is due, or its thread's conversation waits for the model (a run a crash cut between steps).
In each round every agent with work runs once, concurrently. The first time a process looks
at an agent since it opened the team, it reads the agent's thread as stored: a run a crash
left suspended makes the agent `"waiting"` (for `team.resume`; looked at again each round),
a conversation that waits for the model makes it due, and what its outbox holds is posted.

Statuses live in two places on purpose: `"waiting"` on a decision and `"failed"` outlast the
process, so they are kept in the roster (`AgentRecord.held`); `"running"`, `"done"`, `"idle"`
and a suspension found in the store are this process's to know. `status_of` is the one
reading of both.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
from collections.abc import Iterable, Mapping
from typing import Literal

import attrs

from .._errors import StateError, cause_text
from .._values.reserved_keys import History, MailCursor, Outbox
from .agent import Agent
from .mailbox import PRUNE_AT
from .outbox import SENDING, Outboxes
from .roster import AgentRecord, AgentStatus, TeamRoster
from .run_control import RunControl
from .run_loop import awaits_answer
from .run_result import Outcome, RunResult
from .suspension import Decision

__all__ = ["IN_ROUND", "AgentReport", "RestartPolicy", "Rounds", "Tally", "TeamReport"]

RestartPolicy = Literal["never", "on_failure"]

IN_ROUND: contextvars.ContextVar[Rounds | None] = contextvars.ContextVar(
    "statekernel_team_round", default=None
)
"""The rounds the current task runs in (its agents' runs inherit it)."""


@attrs.frozen
class AgentReport:
    """What one agent did in one `run_until_idle`, in `TeamReport.agents`.

    `AgentReport(id, role, status, runs, steps, delivered, restarts, outcomes, error,
    results)`:

    - `id`, `role`, `status`: the agent, its role and its status now (as in `AgentInfo`).
    - `runs`, `steps`: its runs, and the steps they took.
    - `delivered`: the messages delivered into its runs, its task included (a run that
      failed before saving delivers them again later, and they count again).
    - `restarts`: its restarts in a row.
    - `outcomes`: each run's outcome (`"superseded"`: another process ran the agent
      meanwhile, and this run's work was not kept: not a failure); `results`: each run's
      `RunResult`.
    - `error`: the error of its last failed (or superseded) run, or None.
    """

    id: str
    role: str
    status: AgentStatus
    runs: int
    steps: int
    delivered: int
    restarts: int
    outcomes: tuple[Outcome, ...]
    error: BaseException | None
    results: tuple[RunResult, ...]


@attrs.frozen
class TeamReport:
    """How `run_until_idle` ended.

    `TeamReport(idle, rounds, agents)`: `idle` is True when no agent had work left (False:
    `max_rounds` stopped it), `rounds` the rounds it ran, and `agents` maps each agent that
    ran to its `AgentReport`.
    """

    idle: bool
    rounds: int
    agents: Mapping[str, AgentReport]

    def failed(self) -> tuple[str, ...]:
        """The ids of the agents whose status is `"failed"`."""
        return tuple(a.id for a in self.agents.values() if a.status == "failed")

    def waiting(self) -> tuple[str, ...]:
        """The ids of the agents whose status is `"waiting"`."""
        return tuple(a.id for a in self.agents.values() if a.status == "waiting")


@attrs.define
class Tally:
    """One agent's counts during one `run_until_idle` (or `serve`), with its last `keep`
    runs' outcomes and results (None: all of them)."""

    keep: int | None = None
    runs: int = 0
    steps: int = 0
    outcomes: collections.deque[Outcome] = attrs.field(init=False)
    results: collections.deque[RunResult] = attrs.field(init=False)
    error: BaseException | None = None

    def __attrs_post_init__(self) -> None:
        self.outcomes = collections.deque(maxlen=self.keep)
        self.results = collections.deque(maxlen=self.keep)


class Rounds:
    """This process's agents of the team: who has work, their runs, their statuses."""

    def __init__(
        self,
        roster: TeamRoster,
        outboxes: Outboxes,
        agents: Mapping[str, Agent],
        *,
        local: frozenset[str],
        restart_policy: RestartPolicy,
        max_restarts: int,
    ) -> None:
        self._roster = roster
        self._outboxes = outboxes
        self._agents = agents
        self.local_roles = local
        self._policy: RestartPolicy = restart_policy
        self._max_restarts = max_restarts
        self._live: dict[str, AgentStatus] = {}
        self._restart_due: set[str] = set()
        self._answer_due: set[str] = set()  # agents whose conversation waits for the model
        self._looked_at: set[str] = set()  # threads read as stored since the team opened
        self._found_waiting: set[str] = set()  # agents whose stored run was found suspended
        # Each thread's mail cursor as its store holds it, by thread id (a restore moves an
        # agent to a new thread, whose cursor is another).
        self._cursors: dict[str, dict[str, int]] = {}
        self.lock = asyncio.Lock()  # one run_until_idle (or snapshot) at a time

    def status_of(self, record: AgentRecord) -> AgentStatus:
        if record.held is not None:
            return record.held
        if record.id in self._found_waiting:
            return "waiting"
        return self._live.get(record.id, "idle")

    def mail_arrived(self, records: list[AgentRecord]) -> None:
        """A done agent that gets mail has work again."""
        for record in records:
            if self._live.get(record.id) == "done":
                self._live[record.id] = "idle"

    def forget(self) -> None:
        """Forget everything known of the agents (a restore moved them to new threads)."""
        self._live.clear()
        self._restart_due.clear()
        self._answer_due.clear()
        self._looked_at.clear()
        self._found_waiting.clear()
        self._cursors.clear()

    def forget_threads(self, thread_ids: Iterable[str]) -> None:
        """Forget what was read of these threads (another worker may have run them since):
        they are read as stored at the next look."""
        for thread_id in thread_ids:
            self._looked_at.discard(thread_id)
            self._cursors.pop(thread_id, None)
            agent_id = self._roster.agent_of_thread(thread_id)
            if agent_id is not None:
                self._answer_due.discard(agent_id)

    def refuse_inside(self, call: str) -> None:
        """`call` waits for the rounds to end: from inside one (a tool or hook of an agent's
        run) it would wait forever."""
        if IN_ROUND.get() is self:
            raise StateError(
                f"team.{call}() was called from inside one of the team's own runs (a tool or "
                f"hook of an agent), and it waits for the round to end, which waits for that "
                f"run: it would wait forever. Call it between rounds, outside the agents."
            )

    # -- the rounds --------------------------------------------------------------------------

    async def run(self, max_rounds: int) -> TeamReport:
        """Rounds until no agent of this process has work, at most `max_rounds`."""
        tallies: dict[str, Tally] = {}
        token = IN_ROUND.set(self)  # the agents' runs (tools, hooks) inherit it
        try:
            rounds = 0
            await self._roster.load()  # agents other processes spawned join from here on
            while True:
                ready = await self._ready()
                if not ready or rounds == max_rounds:
                    return self.report(tallies, idle=not ready, rounds=rounds)
                rounds += 1
                steps = (self.step(a, tallies.setdefault(a, Tally())) for a in ready)
                await asyncio.gather(*steps)
        finally:
            IN_ROUND.reset(token)

    def local(self) -> list[AgentRecord]:
        """The agents of the roles this process runs."""
        return [r for r in self._roster.agents.values() if r.role in self.local_roles]

    async def _ready(self) -> list[str]:
        return await self.ready(self.local())

    async def ready(self, local: list[AgentRecord]) -> list[str]:
        """Those of `local` (agents of this process) with work (their inboxes read
        together; delivered letters are pruned on the way)."""
        unseen = [
            r for r in local if r.thread_id not in self._looked_at or r.id in self._found_waiting
        ]
        if unseen:
            await asyncio.gather(*(self._look_at(r) for r in unseen))
        candidates = [r for r in local if self.status_of(r) not in ("waiting", "failed")]
        self._outboxes.prefetched.clear()
        found = await asyncio.gather(*(self._has_work(r) for r in candidates))
        return [r.id for r, has in zip(candidates, found, strict=True) if has]

    async def _look_at(self, record: AgentRecord) -> None:
        """Read the agent's thread as stored: an outbox not yet posted (a failed agent's
        too), a run a crash left suspended, a conversation that waits for the model.

        A suspended run found here may be one a crash left, or one another process saved
        as in flight before a tool it is running now: the store cannot tell them apart. So
        it makes the agent `"waiting"` in this process only, and it is looked at again each
        round until it is not suspended any more."""
        agent = self._agents[record.role]
        saved = await agent._saved(record.thread_id)
        if saved is None:
            self._looked_at.add(record.thread_id)
            return  # nothing saved yet: its task waits in its inbox
        state, pending = saved
        outbox = state.get(Outbox)
        if outbox.entries:
            await self._outboxes.post(record.thread_id, outbox)
        cursor: tuple[tuple[str, int], ...] = state.get(MailCursor)
        self._cursors[record.thread_id] = dict(cursor)
        suspended = record.held is None and bool(pending)
        self._looked_at.add(record.thread_id)
        if suspended:
            self._found_waiting.add(record.id)
            return
        self._found_waiting.discard(record.id)
        if record.held is None and awaits_answer(tuple(state.get(History)[-1:])):
            self._answer_due.add(record.id)

    async def _has_work(self, record: AgentRecord) -> bool:
        if record.id in self._restart_due or record.id in self._answer_due:
            return True
        mailbox = self._outboxes.mailbox
        inbox = await mailbox.read(record.thread_id)
        if not inbox.letters:
            return False
        cursor = self._cursors.get(record.thread_id)
        if cursor is None:
            saved = await self._agents[record.role].kernel.read_stored(record.thread_id, MailCursor)
            cursor = self._cursors[record.thread_id] = dict(saved or ())
        fresh = inbox.undelivered(cursor)
        if len(inbox.letters) - len(fresh.letters) >= PRUNE_AT:
            await mailbox.prune(record.thread_id, cursor)
        if not fresh.letters:
            return False
        self._outboxes.prefetched[record.thread_id] = inbox
        return True

    async def step(self, agent_id: str, tally: Tally, control: RunControl | None = None) -> None:
        """Run the agent once (`control`: how its worker stops it), and take the run's end
        in."""
        record = self._roster.record(agent_id)
        self._live[agent_id] = "running"
        self._restart_due.discard(agent_id)
        self._answer_due.discard(agent_id)
        parent = self._roster.agents.get(record.parent_id) if record.parent_id else None
        agent = self._agents[record.role]
        token = SENDING.set((self._outboxes, record.thread_id))
        try:
            result = await agent.run_if_work(
                record.thread_id,
                parent_thread_id=self._roster.team_id if parent is None else parent.thread_id,
                control=control,
            )
        except asyncio.CancelledError:
            self._live[agent_id] = "idle"  # run_until_idle was cancelled: it may run again
            self._cursors.pop(record.thread_id, None)
            raise
        except Exception as error:  # refused before it began: the thread was not loaded
            tally.error = error
            self._cursors.pop(record.thread_id, None)
            await self._failed(record, error)
            return
        finally:
            SENDING.reset(token)
            self._outboxes.discard(record.thread_id)
        await self.after_run(record, result, tally)

    async def resume(self, record: AgentRecord, call_id: str, decision: Decision) -> RunResult:
        token = SENDING.set((self._outboxes, record.thread_id))
        try:
            agent = self._agents[record.role]
            result = await agent.resume(record.thread_id, call_id, decision)
        finally:
            SENDING.reset(token)
            self._outboxes.discard(record.thread_id)
        await self.after_run(record, result, Tally())
        return result

    async def cancel(self, record: AgentRecord) -> RunResult:
        running = self._live.get(record.id) == "running"
        result = await self._agents[record.role].cancel(record.thread_id)
        if not running:  # else the round that runs it takes the result in
            await self.after_run(record, result, Tally())
        return result

    async def after_run(self, record: AgentRecord, result: RunResult, tally: Tally) -> None:
        tally.runs += 1
        tally.steps += result.steps
        tally.outcomes.append(result.outcome)
        tally.results.append(result)
        agent_id = record.id
        if result.outcome in ("success", "suspended"):  # both end with a save that landed
            cursor: tuple[tuple[str, int], ...] = result.snapshot.get(MailCursor)
            self._cursors[record.thread_id] = dict(cursor)
        else:  # what the run saved last is unknown: read it when needed
            self._cursors.pop(record.thread_id, None)
        if result.outcome in ("superseded", "stopped"):
            # Another process ran this agent meanwhile and saved first, or this process's
            # worker stopped it between steps: nothing failed, and whoever runs the agent
            # next looks again at what the store holds.
            if result.error is not None:
                tally.error = result.error
            self._live[agent_id] = "idle"
            if result.outcome == "superseded" and result.error is None:
                # Nothing was left to answer (another process answered it): a restart
                # that was due is done.
                await self._recovered(agent_id)
            return
        if result.outcome == "failure":
            tally.error = result.error
            await self._failed(record, result.error)
            return
        if result.outcome == "suspended":
            self._live[agent_id] = "waiting"
            self._found_waiting.discard(agent_id)
            await self._roster.change(lambda r: r.changing(agent_id, held="waiting"))
            return
        self._live[agent_id] = "done"
        self._found_waiting.discard(agent_id)
        await self._recovered(agent_id)

    async def _recovered(self, agent_id: str) -> None:
        """The agent's run answered: a decision it waited on, or restarts it counted, are
        over (resumed or cancelled; recovered)."""
        current = self._roster.record(agent_id)
        if current.held == "waiting" or current.restarts:
            await self._roster.change(lambda r: r.recovered(agent_id))

    async def _failed(self, record: AgentRecord, error: BaseException | None) -> None:
        current = self._roster.record(record.id)
        if self._policy == "on_failure" and current.restarts < self._max_restarts:
            self._live[record.id] = "idle"
            self._restart_due.add(record.id)
            self._found_waiting.discard(record.id)  # a resumed run that failed waits no more
            await self._roster.change(lambda r: r.restarted(record.id))
            return
        self._live[record.id] = "failed"
        text = "failed" if error is None else cause_text(error)
        await self._roster.change(lambda r: r.changing(record.id, held="failed", error=text))

    def report(self, tallies: Mapping[str, Tally], *, idle: bool, rounds: int) -> TeamReport:
        agents = {}
        for agent_id, tally in tallies.items():
            record = self._roster.record(agent_id)
            agents[agent_id] = AgentReport(
                id=agent_id,
                role=record.role,
                status=self.status_of(record),
                runs=tally.runs,
                steps=tally.steps,
                delivered=self._outboxes.delivered.pop(record.thread_id, 0),
                restarts=record.restarts,
                outcomes=tuple(tally.outcomes),
                error=tally.error,
                results=tuple(tally.results),
            )
        return TeamReport(idle=idle, rounds=rounds, agents=agents)
