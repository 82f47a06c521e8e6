"""`team.serve` and `team.wait_idle` within one process: several workers (team objects on
the same stores) share a team with at most one run per agent at a time; a stop drains;
`wait_idle` waits for every worker alike, and not for agents only a person can help; a
worker that joins gets its share. The separate-process trials are in test_team_workers.py."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
import team_worker_app as app

from statekernel import (
    AgentTeam,
    Decision,
    InferenceRequest,
    InferenceResponse,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    Role,
    StateError,
    Suspend,
    ToolCall,
)
from statekernel.stores import MemoryProfileStore, MemoryThreadStore


class Overlaps:
    """A model wrapper that notes when one agent's model is asked twice at once (an agent
    is known by its task, which differs from any other agent's)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.running: collections.Counter[str] = collections.Counter()
        self.overlaps = 0
        self.calls: collections.Counter[str] = collections.Counter()

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        me = app.text_of(request.messages[0])  # its task
        self.running[me] += 1
        self.calls[me] += 1
        self.overlaps += self.running[me] > 1
        try:
            return await self.model(request)
        finally:
            self.running[me] -= 1


@contextlib.asynccontextmanager
async def serving(team: AgentTeam) -> AsyncIterator[asyncio.Task[Any]]:
    """`team.serve()` in a task, stopped (drained) when the block ends."""
    stop = asyncio.Event()
    task = asyncio.create_task(team.serve(stop=stop))
    try:
        yield task
    finally:
        stop.set()
        await task


def workers_team(
    profiles: MemoryProfileStore, threads: MemoryThreadStore, model: Any, **kw: Any
) -> AgentTeam:
    return AgentTeam(
        {"peer": Role(model=model)},
        profile_store=profiles,
        thread_store=threads,
        team_id="served",
        max_steps=100,
        **kw,
    )


async def test_three_workers_in_one_process_run_each_agent_once_at_a_time() -> None:
    profiles, threads = MemoryProfileStore(), MemoryThreadStore()
    model = Overlaps(app.PlanModel())
    plans = app.plan(5, 120)
    teams = [workers_team(profiles, threads, model) for _ in range(3)]
    async with teams[0] as first, teams[1] as second, teams[2] as third:
        async with serving(first), serving(second), serving(third):
            await app.start_plans(first, plans)
            assert await first.wait_idle(timeout=60)
        infos = {i.id: i for i in first.list_agents()}
        for agent_id, info in infos.items():
            state = await first.agent("peer").kernel.get_state(info.thread_id)
            history = state.to_dict()["statekernel.messages"]
            got = [AgentTeam.sender_of(m) for m in history if AgentTeam.sender_of(m)]
            expected = 1 + sum(1 for p in plans.values() for _, to in p if to == agent_id)
            assert len(got) == expected, agent_id  # its plan and its mail, once each
            assert history[-1].content == "done"
    assert model.overlaps == 0


async def test_stop_drains_a_run_before_its_next_step_and_another_worker_carries_on() -> None:
    profiles, threads = MemoryProfileStore(), MemoryThreadStore()
    release = asyncio.Event()
    asked = asyncio.Event()
    steps = []

    async def slow_then_done(request: InferenceRequest) -> InferenceResponse:
        steps.append(len(request.messages))
        if len(steps) == 1:
            asked.set()
            await release.wait()  # the first step's model call is in flight at the stop
            call = ToolCall(f"c{random.random()}", "note", {})
            return InferenceResponse("", tool_calls=(call,))
        return InferenceResponse("done")

    def note(arguments: dict[str, Any], ctx: Any) -> str:
        return "noted"

    roles = {"peer": Role(model=slow_then_done, tools={"note": note})}
    first = AgentTeam(roles, profile_store=profiles, thread_store=threads, team_id="drain")
    async with first:
        stop = asyncio.Event()
        task = asyncio.create_task(first.serve(stop=stop))
        first.spawn("peer", "go", agent_id="a")
        await asyncio.wait_for(asked.wait(), 10)
        stop.set()
        await asyncio.sleep(0.05)
        assert not task.done()  # it waits for the step in flight
        release.set()
        report = await asyncio.wait_for(task, 10)
        assert report.agents["a"].outcomes == ("stopped",)
        assert not report.idle
        state = await first.agent("peer").kernel.get_state("drain/a")
        assert state.to_dict()["statekernel.messages"][-1].content == "noted"  # step 1 saved
    second = AgentTeam(roles, profile_store=profiles, thread_store=threads, team_id="drain")
    async with second, serving(second):
        assert await second.wait_idle(timeout=10)  # the first released its lease: no wait
        state = await second.agent("peer").kernel.get_state("drain/a")
        messages = state.to_dict()["statekernel.messages"]
        assert messages[-1].content == "done"
        assert [m.content for m in messages if m.role == "tool"] == ["noted"]  # not twice


async def test_wait_idle_is_false_at_its_timeout_while_an_agent_works() -> None:
    profiles, threads = MemoryProfileStore(), MemoryThreadStore()
    release = asyncio.Event()

    async def blocked(request: InferenceRequest) -> InferenceResponse:
        await release.wait()
        return InferenceResponse("ok")

    team = workers_team(profiles, threads, blocked)
    async with team, serving(team):
        team.spawn("peer", "plan ", agent_id="a")
        assert await team.wait_idle(timeout=0.3) is False
        release.set()
        assert await team.wait_idle(timeout=10) is True


async def test_wait_idle_does_not_wait_for_an_agent_waiting_on_a_decision() -> None:
    profiles, threads = MemoryProfileStore(), MemoryThreadStore()

    class Approval(Plugin):
        id = "approval"

        def register(self, registrar: PluginRegistrar) -> None:
            registrar.register_tool_gate(lambda ctx: Suspend("needs a person"))

    def risky(arguments: dict[str, Any], ctx: Any) -> str:
        return "ran"

    async def model(request: InferenceRequest) -> InferenceResponse:
        if request.messages[-1].role == "tool":
            return InferenceResponse("done")
        return InferenceResponse("", tool_calls=(ToolCall("c1", "risky", {}),))

    roles = {"peer": Role(model=model, tools={"risky": risky}, plugins=[Approval()])}
    team = AgentTeam(roles, profile_store=profiles, thread_store=threads, team_id="decide")
    async with team, serving(team):
        team.spawn("peer", "go", agent_id="a")
        assert await team.wait_idle(timeout=10)
        assert [i.status for i in team.list_agents()] == ["waiting"]
        await team.resume("a", "c1", Decision.result("done by hand"))
        assert await team.wait_idle(timeout=10)
        assert [i.status for i in team.list_agents()] == ["done"]


@pytest.mark.slow
async def test_a_worker_that_joins_gets_a_share_of_the_agents() -> None:
    profiles, threads = MemoryProfileStore(), MemoryThreadStore()
    model = Overlaps(app.PlanModel())
    first = workers_team(profiles, threads, model, lease_seconds=2)
    second = workers_team(profiles, threads, model, lease_seconds=2)
    async with first, second, serving(first) as one:
        for agent_id in app.AGENTS:
            first.spawn("peer", f"plan #{agent_id}", agent_id=agent_id)
        assert await first.wait_idle(timeout=30)
        async with serving(second) as two:
            await asyncio.sleep(1.2)  # a beat or two: each worker sees the other
            for rounds in range(3):
                for agent_id in app.AGENTS:
                    await first.send("user", f"more {rounds}", to=agent_id)
                assert await first.wait_idle(timeout=30)
        mine = (await one).agents if one.done() else {}
    ran_second = {a for a, r in (await two).agents.items() if r.runs}
    assert ran_second, "the second worker got no agent"
    assert model.overlaps == 0
    del mine


@pytest.mark.parametrize("bad", [0, -1, True, "10", float("inf"), float("nan")])
def test_lease_seconds_must_be_a_positive_number(bad: Any) -> None:
    with pytest.raises(ValueError, match="lease_seconds"):
        AgentTeam(
            {"a": Role(model=app.PlanModel())},
            profile_store=MemoryProfileStore(),
            lease_seconds=bad,
        )


async def test_serve_and_wait_idle_refuse_bad_arguments_and_calls_from_inside() -> None:
    inner: list[BaseException] = []
    team: AgentTeam

    async def from_inside(arguments: dict[str, Any], ctx: Any) -> str:
        for call in (team.serve(), team.wait_idle()):
            try:
                await call
            except StateError as error:  # refused: it would wait for this very run
                inner.append(error)
        return "tried"

    async def model(request: InferenceRequest) -> InferenceResponse:
        if request.messages[-1].role == "tool":
            return InferenceResponse("done")
        return InferenceResponse("", tool_calls=(ToolCall("c", "from_inside", {}),))

    team = AgentTeam(
        {"a": Role(model=model, tools={"from_inside": from_inside})},
        profile_store=MemoryProfileStore(),
    )
    async with team:
        with pytest.raises(TypeError, match="asyncio.Event"):
            await team.serve(stop=True)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout"):
            await team.wait_idle(timeout=-1)
        team.spawn("a", "go")
        await team.run_until_idle()
    assert len(inner) == 2
    assert all("inside one of the team's own runs" in str(e) for e in inner)


async def test_wait_idle_waits_for_a_tool_that_is_running() -> None:
    """The thread is saved before a tool runs (its call without a result): while a worker
    runs that tool, the agent has work."""
    profiles, threads = MemoryProfileStore(), MemoryThreadStore()
    release = asyncio.Event()

    async def slow(arguments: dict[str, Any], ctx: Any) -> str:
        await release.wait()
        return "slow done"

    async def model(request: InferenceRequest) -> InferenceResponse:
        if request.messages[-1].role == "tool":
            return InferenceResponse("done")
        return InferenceResponse("", tool_calls=(ToolCall("c1", "slow", {}),))

    roles = {"peer": Role(model=model, tools={"slow": slow})}
    team = AgentTeam(roles, profile_store=profiles, thread_store=threads, team_id="tool")
    async with team, serving(team):
        team.spawn("peer", "go", agent_id="a")
        assert await team.wait_idle(timeout=0.5) is False
        release.set()
        assert await team.wait_idle(timeout=10) is True


class SendsAtRunEnd(Plugin):
    """Sends one letter to "b" from agent "a"'s RUN_END (it stays in a's outbox, posted)."""

    id = "sends_at_run_end"

    def __init__(self, team: list[AgentTeam]) -> None:
        self.team = team

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_phase_hook(Phase.RUN_END, self.hook)

    async def hook(self, ctx: PhaseContext) -> None:
        if ctx.run.thread_id.endswith("/a"):
            await self.team[0].send("a", "bye", to="b")


async def test_wait_idle_returns_once_letters_sent_at_the_last_step_are_delivered() -> None:
    profiles, threads = MemoryProfileStore(), MemoryThreadStore()
    holder: list[AgentTeam] = []

    async def answer(request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse("ok")

    roles = {"peer": Role(model=answer, plugins=[SendsAtRunEnd(holder)])}
    team = AgentTeam(roles, profile_store=profiles, thread_store=threads, team_id="end")
    holder.append(team)
    async with team, serving(team):
        team.spawn("peer", "wait", agent_id="b")
        team.spawn("peer", "go", agent_id="a")
        assert await team.wait_idle(timeout=10)
        history = (await team.agent("peer").kernel.get_state("end/b")).to_dict()
        assert [AgentTeam.sender_of(m) for m in history["statekernel.messages"]][-2] == "a"


class FlakyLeases(MemoryProfileStore):
    """A memory store whose reads of an agent's lease fail `failures` times (a store that
    lost its connection for a moment)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def get(self, namespace: str, key: str) -> Any:
        if namespace == "statekernel.team_lease" and key.endswith("/late") and self.failures:
            self.failures -= 1
            raise ConnectionResetError("the connection was reset")
        return await super().get(namespace, key)


@pytest.mark.slow
async def test_a_store_failure_in_a_look_is_said_once_and_the_worker_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    profiles, threads = FlakyLeases(failures=3), MemoryThreadStore()
    team = workers_team(profiles, threads, app.PlanModel(), lease_seconds=2)
    async with team, serving(team) as task:
        await asyncio.sleep(0.05)
        team.spawn("peer", "plan #late", agent_id="late")
        with caplog.at_level(logging.WARNING, logger="statekernel"):
            assert await team.wait_idle(timeout=20)
        assert not task.done()
    said = [r.getMessage() for r in caplog.records if "it goes on" in r.getMessage()]
    assert len(said) == 1 and "the connection was reset" in said[0]
    history = (await team.agent("peer").kernel.get_state("served/late")).to_dict()
    assert history["statekernel.messages"][-1].content == "done"


@pytest.mark.slow
async def test_a_long_serving_worker_keeps_its_report_small() -> None:
    profiles, threads = MemoryProfileStore(), MemoryThreadStore()
    team = workers_team(profiles, threads, app.PlanModel())
    async with team:
        stop = asyncio.Event()
        task = asyncio.create_task(team.serve(stop=stop))
        team.spawn("peer", "plan #a", agent_id="a")
        for n in range(20):
            await team.send("user", f"more {n}", to="a")
            assert await team.wait_idle(timeout=10)
        stop.set()
        report = await task
    assert report.agents["a"].runs >= 20
    assert len(report.agents["a"].outcomes) == len(report.agents["a"].results) == 16


async def test_serve_with_its_stop_already_set_runs_nothing() -> None:
    profiles, threads = MemoryProfileStore(), MemoryThreadStore()
    model = Overlaps(app.PlanModel())
    team = workers_team(profiles, threads, model)
    async with team:
        team.spawn("peer", "plan #a", agent_id="a")
        stop = asyncio.Event()
        stop.set()
        report = await team.serve(stop=stop)
    assert report.agents == {} and sum(model.calls.values()) == 0
