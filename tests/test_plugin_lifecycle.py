"""Run lifecycle: phase, status, step and pending work, as other plugins read them."""

from __future__ import annotations

from typing import Any

import pytest

from statekernel import (
    Agent,
    CommitRejected,
    InferenceRequest,
    InferenceResponse,
    Kernel,
    Phase,
    PhaseContext,
    PhaseReport,
    Plugin,
    PluginRegistrar,
    Run,
    ScriptedModel,
    Snapshot,
    StateCommand,
    ToolCall,
)
from statekernel.plugins import (
    Lifecycle,
    PendingWork,
    RunLifecycle,
    RunPhase,
    RunStatus,
    StepCount,
    lifecycle_of,
)
from statekernel.testing import assert_commutative

P = Phase


class Observer(Plugin):
    """Another plugin: records what the lifecycle looks like from each of its hooks."""

    id = "observer"

    def __init__(self) -> None:
        self.raw: list[tuple[Phase, Phase | None, str, int]] = []
        self.views: list[Lifecycle] = []
        self.transform_saw: list[Lifecycle] = []
        self.gate_saw: list[Lifecycle] = []

    def register(self, registrar: PluginRegistrar) -> None:
        for phase in Phase:
            registrar.register_phase_hook(phase, self.hook)
        registrar.register_tool_gate(self.gate)
        registrar.register_request_transform(self.transform)

    def hook(self, ctx: PhaseContext) -> None:
        snapshot = ctx.snapshot
        self.raw.append(
            (ctx.phase, snapshot.get(RunPhase), snapshot.get(RunStatus), snapshot.get(StepCount))
        )
        self.views.append(lifecycle_of(ctx))

    def gate(self, ctx: PhaseContext) -> None:
        self.gate_saw.append(lifecycle_of(ctx.snapshot))

    def transform(self, request: InferenceRequest, snapshot: Snapshot) -> InferenceRequest:
        self.transform_saw.append(lifecycle_of(snapshot))
        return request


class Worker(Plugin):
    """Starts a unit of work around each tool call; `twin` does the same under another id."""

    def __init__(self, plugin_id: str) -> None:
        self.id = plugin_id

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_phase_hook(Phase.BEFORE_TOOL_EXECUTE, self.start)
        registrar.register_phase_hook(Phase.AFTER_TOOL_EXECUTE, self.finish)

    def start(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(PendingWork, 1)

    def finish(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(PendingWork, -1)


ONE_TOOL_CALL = [InferenceResponse("working", (ToolCall("c1", "probe", {}),))]

PHASES = [
    P.RUN_START,
    *(P.STEP_START, P.BEFORE_INFERENCE, P.AFTER_INFERENCE),
    *(P.TOOL_GATE, P.BEFORE_TOOL_EXECUTE, P.AFTER_TOOL_EXECUTE, P.STEP_END),
    *(P.STEP_START, P.BEFORE_INFERENCE, P.AFTER_INFERENCE, P.STEP_END),
    P.RUN_END,
]
STEPS = [0, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2]


async def test_hooks_of_other_plugins_read_the_lifecycle_of_their_phase() -> None:
    observer = Observer()
    agent = Agent(
        [RunLifecycle(), observer], ScriptedModel(ONE_TOOL_CALL), {"probe": lambda a, c: "ok"}
    )
    result = await agent.run("t", ["go"])
    assert result.outcome == "success"

    statuses = ["running"] * (len(PHASES) - 1) + ["done"]
    assert observer.views == [
        Lifecycle(phase, status, step, 0)
        for phase, status, step in zip(PHASES, statuses, STEPS, strict=True)
    ]
    # The keys themselves, inside a hook of phase X, are as the previous phase left them.
    previous = [None, *PHASES[:-1]]
    assert [raw[1] for raw in observer.raw] == previous
    assert [raw[3] for raw in observer.raw] == [0, 0, *STEPS[1:-1]]
    assert [raw[2] for raw in observer.raw] == ["idle", *["running"] * (len(PHASES) - 1)]

    # Readers after the gather round see their own phase in the keys directly.
    assert observer.gate_saw == [Lifecycle(P.TOOL_GATE, "running", 1, 0)]
    assert observer.transform_saw == [
        Lifecycle(P.BEFORE_INFERENCE, "running", 1, 0),
        Lifecycle(P.BEFORE_INFERENCE, "running", 2, 0),
    ]
    assert lifecycle_of(result.snapshot) == Lifecycle(P.RUN_END, "done", 2, 0)


async def test_a_tool_reads_its_own_phase_and_step() -> None:
    saw: list[Lifecycle] = []

    def probe(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        saw.extend((lifecycle_of(ctx), lifecycle_of(ctx.snapshot)))
        return "ok"

    agent = Agent([RunLifecycle()], ScriptedModel(ONE_TOOL_CALL), {"probe": probe})
    await agent.run("t", ["go"])
    assert saw == [Lifecycle(P.BEFORE_TOOL_EXECUTE, "running", 1, 0)] * 2


async def test_pending_work_adds_up_across_plugins_without_conflicts() -> None:
    observer = Observer()
    reports: list[PhaseReport] = []
    pending_seen: list[tuple[Phase, int]] = []

    def probe(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        pending_seen.append((ctx.phase, ctx.snapshot.get(PendingWork)))
        return "ok"

    def listen(run: Run, report: PhaseReport) -> None:
        reports.append(report)

    agent = Agent(
        [RunLifecycle(), Worker("worker"), Worker("twin"), observer],
        ScriptedModel(ONE_TOOL_CALL),
        {"probe": probe},
        on_phase=listen,
    )
    result = await agent.run("t", ["go"])
    assert pending_seen == [(P.BEFORE_TOOL_EXECUTE, 2)]
    after_tool = observer.views[PHASES.index(P.AFTER_TOOL_EXECUTE)]
    assert after_tool.pending_work == 2  # the hooks of AFTER_TOOL_EXECUTE still see it
    assert result.snapshot.get(PendingWork) == 0
    assert sum(report.conflicts for report in reports) == 0


async def test_finishing_work_never_started_is_rejected() -> None:
    run = await Kernel([RunLifecycle()]).start_run("t")
    await run.submit(StateCommand().update(PendingWork, 1))
    with pytest.raises(CommitRejected, match="pending work would drop to -1"):
        await run.submit(StateCommand().update(PendingWork, -2))
    assert run.snapshot.get(PendingWork) == 1


async def test_the_lifecycle_starts_over_with_every_run() -> None:
    agent = Agent([RunLifecycle()], ScriptedModel(ONE_TOOL_CALL), {"probe": lambda a, c: "ok"})
    first = await agent.run("t", ["one"])
    second = await agent.run("t", ["two"])
    assert (first.snapshot.get(StepCount), second.snapshot.get(StepCount)) == (2, 1)
    assert second.snapshot.get(RunStatus) == "done"


async def test_a_run_driven_by_hand_reports_its_status() -> None:
    run = await Kernel([RunLifecycle()]).start_run("t")
    assert lifecycle_of(run.snapshot) == Lifecycle(None, "idle", 0, 0)
    await run.run_phase(Phase.RUN_START)
    await run.run_phase(Phase.STEP_START)
    assert lifecycle_of(run.snapshot) == Lifecycle(P.STEP_START, "running", 1, 0)
    await run.finish()
    assert lifecycle_of(run.snapshot) == Lifecycle(P.RUN_END, "done", 1, 0)


def test_the_counters_are_commutative() -> None:
    assert_commutative(StepCount, 0, [1, 1, 1])
    assert_commutative(PendingWork, 0, [3, -1, 2, -2, 1])
