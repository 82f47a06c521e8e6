"""OpenTelemetry spans (the extra `statekernel[otel]`), caught by the SDK's in-memory exporter:
an approval run's spans nest run -> phases -> model call -> tool call, with the GenAI
conventions' names and the Block reason on the gate's span; a bare Kernel's runs and a
team's agents are traced too; the run that delivers a team's letters links to the span each
was sent under; and without the extra nothing of OpenTelemetry is imported, and runs go
through the no-op tracing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from sample_keys import Counter
from samples import Hooks, Keys

from statekernel import (
    Agent,
    AgentTeam,
    Block,
    GateRun,
    HookFailed,
    InferenceRequest,
    InferenceResponse,
    Kernel,
    Phase,
    PhaseContext,
    PhaseRun,
    Plugin,
    PluginRegistrar,
    Role,
    ScriptedModel,
    StateCommand,
    StateError,
    Suspend,
    ToolCall,
    ToolCallStatus,
    ToolRun,
)
from statekernel.stores import MemoryProfileStore

_EXPORTER = InMemorySpanExporter()


class _WhileATestWatches(Sampler):
    """Records spans only while a test here runs. The tracer provider stays set for the rest
    of the process (OpenTelemetry sets it once), so without this every later test's runs
    would make real spans, and the in-memory exporter would hold them all: a test that
    measures a run's memory would count them."""

    on = False

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        *args: Any,
        **kwargs: Any,
    ) -> SamplingResult:
        # the span keeps the attributes the result carries: hand the start's on
        decision = Decision.RECORD_AND_SAMPLE if self.on else Decision.DROP
        return SamplingResult(decision, attributes)

    def get_description(self) -> str:
        return "while a test_otel test runs"


_SAMPLER = _WhileATestWatches()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The application's tracer provider (set once per process, as an application does),
    with the spans of this test only."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider(sampler=_SAMPLER)
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    _SAMPLER.on = True
    try:
        yield _EXPORTER
    finally:
        _SAMPLER.on = False
        _EXPORTER.clear()


class Approval(Plugin):
    id = "approval"

    def register(self, r: PluginRegistrar) -> None:
        r.register_tool_gate(self.gate)

    @staticmethod
    def gate(ctx: PhaseContext) -> Block | None:
        if ctx.tool_call is not None and ctx.tool_call.name == "publish":
            return Block("publish needs a review first")
        return None


def by_name(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in finished if span.name == name]


def parent_of(span: ReadableSpan, finished: tuple[ReadableSpan, ...]) -> ReadableSpan:
    assert span.parent is not None, span.name
    (found,) = [s for s in finished if s.context.span_id == span.parent.span_id]
    return found


async def test_an_approval_runs_spans_nest_and_carry_the_block_reason(
    spans: InMemorySpanExporter,
) -> None:
    calls = (ToolCall("c1", "review", {}), ToolCall("c2", "publish", {}))
    model = ScriptedModel([InferenceResponse(tool_calls=calls), InferenceResponse(text="done")])
    tools: dict[str, Any] = {"review": lambda a, c: "ok", "publish": lambda a, c: "out"}
    agent = Agent([Approval()], model, tools, name="writer")
    result = await agent.run("t", ["publish it"])
    assert result.outcome == "success"
    finished = spans.get_finished_spans()
    (run,) = by_name(finished, "invoke_agent writer")
    assert run.attributes is not None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["statekernel.thread_id"] == "t"
    assert run.attributes["statekernel.outcome"] == "finished"
    assert run.attributes["statekernel.revision"] == result.snapshot.revision
    phases = [s for s in finished if s.name.startswith("phase ")]
    assert {p.name for p in phases} >= {f"phase {phase.value}" for phase in Phase}
    step = by_name(finished, "phase STEP_START")[0]
    assert parent_of(step, finished) is run
    chats = by_name(finished, "chat ScriptedModel")
    assert len(chats) == 2 and all(parent_of(c, finished) is run for c in chats)
    assert chats[0].attributes is not None
    assert chats[0].attributes["gen_ai.request.model"] == "ScriptedModel"
    assert chats[0].attributes["statekernel.tool_calls"] == ("review", "publish")
    (publish,) = by_name(finished, "execute_tool publish")
    assert parent_of(publish, finished) is run
    assert publish.attributes is not None
    assert publish.attributes["gen_ai.tool.name"] == "publish"
    assert publish.attributes["gen_ai.tool.call.id"] == "c2"
    assert publish.attributes["statekernel.gate.decision"] == "block"
    assert publish.attributes["statekernel.gate.plugin"] == "approval"
    assert publish.attributes["statekernel.gate.reason"] == "publish needs a review first"
    assert publish.attributes["statekernel.tool.status"] == "failed"
    assert publish.status.status_code is trace.StatusCode.ERROR
    gates = [s for s in by_name(finished, "phase TOOL_GATE") if parent_of(s, finished) is publish]
    assert len(gates) == 1 and gates[0].attributes is not None
    assert gates[0].attributes["statekernel.gate.reason"] == "publish needs a review first"
    (review,) = by_name(finished, "execute_tool review")
    assert review.attributes is not None
    assert review.attributes["statekernel.gate.decision"] == "allow"
    assert review.status.status_code is not trace.StatusCode.ERROR
    before = [s for s in phases if s.name == "phase BEFORE_TOOL_EXECUTE"]
    assert [parent_of(s, finished).name for s in before] == ["execute_tool review"]


async def test_a_suspended_calls_span_carries_its_ticket(spans: InMemorySpanExporter) -> None:
    from pydantic import BaseModel

    class Ticket(BaseModel):
        approver: str

    hold = Hooks("hold", gate=lambda ctx: Suspend(Ticket(approver="finance")))
    model = ScriptedModel([InferenceResponse(tool_calls=(ToolCall("c1", "pay", {}),))])
    agent = Agent([hold], model, {"pay": lambda a, c: "paid"}, name="payer")
    assert (await agent.run("t", ["pay"])).outcome == "suspended"
    (pay,) = by_name(spans.get_finished_spans(), "execute_tool pay")
    assert pay.attributes is not None
    assert pay.attributes["statekernel.gate.decision"] == "suspend"
    assert pay.attributes["statekernel.gate.ticket"] == '{"approver":"finance"}'
    assert "statekernel.gate.reason" not in pay.attributes


async def test_a_bare_kernels_run_is_traced_with_its_hooks(spans: InMemorySpanExporter) -> None:
    class Adder(Plugin):
        id = "adder"

        def register(self, r: PluginRegistrar) -> None:
            r.register_phase_hook(Phase.STEP_START, lambda ctx: StateCommand().update(Counter, 1))

    kernel = Kernel([Keys(Counter), Adder()])
    run = await kernel.start_run("bare", agent="worker")
    await run.run_phase(Phase.STEP_START)
    await run.finish()
    finished = spans.get_finished_spans()
    (root,) = by_name(finished, "invoke_agent worker")
    (step,) = by_name(finished, "phase STEP_START")
    assert parent_of(step, finished) is root and step.attributes is not None
    assert step.attributes["statekernel.hooks"] == ("adder",)
    assert step.attributes["statekernel.commits"] == 1


async def test_a_failed_run_marks_its_span(spans: InMemorySpanExporter) -> None:
    def boom(ctx: PhaseContext) -> None:
        raise ValueError("bad config")

    class Broken(Plugin):
        id = "broken"

        def register(self, r: PluginRegistrar) -> None:
            r.register_phase_hook(Phase.STEP_START, boom)

    result = await Agent([Broken()], ScriptedModel([])).run("t", ["go"])
    assert result.outcome == "failure"
    finished = spans.get_finished_spans()
    (root,) = by_name(finished, "invoke_agent default")
    assert root.status.status_code is trace.StatusCode.ERROR
    assert root.attributes is not None and root.attributes["error.type"] == "HookFailed"
    (step,) = by_name(finished, "phase STEP_START")
    assert step.status.status_code is trace.StatusCode.ERROR


async def test_without_tracing_phases_tools_and_model_calls_run_through_the_no_op(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tracing off, as without the extra: the kernel's tracing is the no-op one, through
    which a bare run's phases (a failed one too), gates and tool calls and an agent's model
    and tool calls all run, journaling their run events; the provider the application set
    gets no span."""
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)  # as if not installed

    def refuse(ctx: PhaseContext) -> None:
        raise ValueError("not at the end")

    hooks = Hooks(
        "hooks", step_start=lambda ctx: StateCommand().update(Counter, 1), step_end=refuse
    )
    kernel = Kernel([Keys(Counter), hooks, Approval()])
    assert kernel.tracing.enabled is False
    run = await kernel.start_run("bare")
    await run.run_phase(Phase.STEP_START)
    with pytest.raises(HookFailed):
        await run.run_phase(Phase.STEP_END)
    review = await run.handle_tool_call(ToolCall("c1", "review", {}), lambda a, c: "ok")
    publish = await run.handle_tool_call(ToolCall("c2", "publish", {}), lambda a, c: "out")
    assert (review.status, review.result) == (ToolCallStatus.SUCCEEDED, "ok")
    assert (publish.status, publish.error) == (
        ToolCallStatus.FAILED,
        "publish needs a review first",
    )
    with run.model_call_span("a-model") as span:
        assert span is None
    run.note_model_response(span, InferenceResponse(text="hi"))
    assert run.traceparent() is None
    run.link_letters([("00-" + "1" * 32 + "-" + "2" * 16 + "-01", "someone")])
    await run.finish()
    assert run.snapshot.get(Counter) == 1
    events = await kernel.run_events("bare")
    (failed,) = [e for e in events if isinstance(e, PhaseRun) and e.error is not None]
    assert failed.phase is Phase.STEP_END and "ValueError: not at the end" in str(failed.error)
    assert [(e.call_id, e.decision) for e in events if isinstance(e, GateRun)] == [
        ("c1", "allow"),
        ("c2", "block"),
    ]
    assert [(e.call_id, e.status) for e in events if isinstance(e, ToolRun)] == [
        ("c1", "succeeded"),
        ("c2", "failed"),
    ]

    calls = (ToolCall("c1", "review", {}), ToolCall("c2", "publish", {}))
    model = ScriptedModel([InferenceResponse(tool_calls=calls), InferenceResponse(text="done")])
    tools: dict[str, Any] = {"review": lambda a, c: "ok", "publish": lambda a, c: "out"}
    agent = Agent([Approval()], model, tools, name="writer")
    assert agent.kernel.tracing.enabled is False
    assert (await agent.run("t", ["publish it"])).outcome == "success"
    assert len([e for e in await agent.kernel.run_events("t") if isinstance(e, ToolRun)]) == 2
    assert spans.get_finished_spans() == ()


async def test_an_ended_runs_calls_make_no_span(spans: InMemorySpanExporter) -> None:
    kernel = Kernel([Approval()])
    run = await kernel.start_run("t", agent="ended")
    assert kernel.tracing.enabled and run.traceparent() is not None
    await run.finish()
    assert run.traceparent() is None
    with pytest.raises(StateError):
        await run.handle_tool_call(ToolCall("c1", "review", {}), lambda a, c: "ok")
    with run.model_call_span("a-model") as span:
        assert span is None
    names = [span.name for span in spans.get_finished_spans()]
    assert names == ["phase RUN_END", "invoke_agent ended"]


async def test_a_teams_agents_are_traced(spans: InMemorySpanExporter) -> None:
    model = ScriptedModel([InferenceResponse(text="done")])
    team = AgentTeam({"solo": Role(model=model)}, profile_store=MemoryProfileStore())
    async with team:
        team.spawn("solo", "work", agent_id="a1")
        await team.run_until_idle()
    names = {span.name for span in spans.get_finished_spans()}
    assert "invoke_agent solo" in names and "chat ScriptedModel" in names


def sends_once(to: str) -> Any:
    """A model that has its agent send "hi" to `to` with its `send_message` tool, then
    answers "done" (and "done" at once in any later run)."""

    async def model(request: InferenceRequest) -> InferenceResponse:
        if any(m.role == "tool" for m in request.messages):
            return InferenceResponse("done")
        call = ToolCall("c1", "send_message", {"content": "hi", "to": to})
        return InferenceResponse("", (call,))

    return model


def delivering_runs(finished: tuple[ReadableSpan, ...], role: str) -> list[ReadableSpan]:
    """The runs of `role` whose spans link to other spans."""
    return [span for span in by_name(finished, f"invoke_agent {role}") if span.links]


async def test_the_run_that_delivers_a_letter_links_to_the_sending_runs_span(
    spans: InMemorySpanExporter,
) -> None:
    roles = {
        "writer": Role(model=sends_once("reader")),
        "reader": Role(model=ScriptedModel([InferenceResponse(text="ok")] * 2)),
    }
    async with AgentTeam(roles, profile_store=MemoryProfileStore()) as team:
        team.spawn("reader", "wait for mail", agent_id="reader")
        await team.run_until_idle()
        team.spawn("writer", "greet the reader", agent_id="writer")
        await team.run_until_idle()
    finished = spans.get_finished_spans()
    (sender,) = by_name(finished, "invoke_agent writer")
    reader_runs = by_name(finished, "invoke_agent reader")
    assert len(reader_runs) == 2 and not reader_runs[0].links  # its task carries no context
    (link,) = reader_runs[1].links
    assert sender.context is not None
    assert (link.context.trace_id, link.context.span_id) == (
        sender.context.trace_id,
        sender.context.span_id,
    )
    assert link.attributes == {"statekernel.letter.sender": "writer"}
    assert reader_runs[1].context is not None
    assert reader_runs[1].context.trace_id != sender.context.trace_id  # linked, not nested


async def test_a_send_inside_an_application_span_links_the_delivering_run_to_it(
    spans: InMemorySpanExporter,
) -> None:
    model = ScriptedModel([InferenceResponse(text="ok")] * 2)
    async with AgentTeam({"reader": Role(model=model)}, profile_store=MemoryProfileStore()) as team:
        team.spawn("reader", "wait for mail", agent_id="reader")
        await team.run_until_idle()
        with trace.get_tracer("app").start_as_current_span("handle request") as request:
            await team.send("user", "hello", to="reader")
            await team.send("user", "and again", to="reader")  # the same span: one link
        await team.run_until_idle()
    (delivering,) = delivering_runs(spans.get_finished_spans(), "reader")
    (link,) = delivering.links
    context = request.get_span_context()
    assert (link.context.trace_id, link.context.span_id) == (context.trace_id, context.span_id)
    assert link.attributes == {"statekernel.letter.sender": "user"}


async def test_a_letter_sent_under_no_span_links_nothing(spans: InMemorySpanExporter) -> None:
    model = ScriptedModel([InferenceResponse(text="ok")] * 2)
    async with AgentTeam({"reader": Role(model=model)}, profile_store=MemoryProfileStore()) as team:
        team.spawn("reader", "wait for mail", agent_id="reader")
        await team.run_until_idle()
        await team.send("user", "hello", to="reader")
        report = await team.run_until_idle()
    assert report.agents["reader"].outcomes == ("success",)
    reader_runs = by_name(spans.get_finished_spans(), "invoke_agent reader")
    assert len(reader_runs) == 2 and not any(run.links for run in reader_runs)


async def test_a_run_links_to_at_most_128_senders_and_counts_the_rest(
    spans: InMemorySpanExporter,
) -> None:
    model = ScriptedModel([InferenceResponse(text="ok")] * 2)
    tracer = trace.get_tracer("app")
    async with AgentTeam({"reader": Role(model=model)}, profile_store=MemoryProfileStore()) as team:
        team.spawn("reader", "wait for mail", agent_id="reader")
        await team.run_until_idle()
        for n in range(130):
            with tracer.start_as_current_span(f"request {n}"):
                await team.send(f"user{n}", "hello", to="reader")
        await team.run_until_idle()
    (delivering,) = delivering_runs(spans.get_finished_spans(), "reader")
    assert len(delivering.links) == 128
    assert [link.attributes for link in delivering.links][:2] == [
        {"statekernel.letter.sender": "user0"},
        {"statekernel.letter.sender": "user1"},
    ]
    assert delivering.attributes is not None
    assert delivering.attributes["statekernel.letter.links_dropped"] == 2


@pytest.mark.slow
def test_without_the_extra_nothing_of_opentelemetry_is_imported() -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # as if the extra were not installed
        from statekernel import Agent, InferenceResponse, ScriptedModel
        agent = Agent([], ScriptedModel([InferenceResponse(text="hi")]))
        result = asyncio.run(agent.run("t", ["go"]))
        assert result.outcome == "success", result
        assert agent.kernel.tracing.enabled is False
        assert not [m for m in sys.modules if m.startswith("opentelemetry.")], sys.modules
        print("untraced")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "untraced", done.stderr


@pytest.mark.slow
def test_a_team_without_the_extra_sends_and_delivers_importing_nothing_of_it() -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # as if the extra were not installed
        from statekernel import AgentTeam, InferenceResponse, Role, ScriptedModel, ToolCall
        from statekernel.stores import MemoryProfileStore

        async def writer(request):
            if any(m.role == "tool" for m in request.messages):
                return InferenceResponse("done")
            call = ToolCall("c1", "send_message", {"content": "hi", "to": "reader"})
            return InferenceResponse("", (call,))

        async def main():
            roles = {
                "writer": Role(model=writer),
                "reader": Role(model=ScriptedModel([InferenceResponse(text="ok")] * 3)),
            }
            async with AgentTeam(roles, profile_store=MemoryProfileStore()) as team:
                team.spawn("reader", "wait for mail", agent_id="reader")
                team.spawn("writer", "greet the reader", agent_id="writer")
                await team.run_until_idle()
                await team.send("user", "hello", to="reader")
                await team.run_until_idle()
                info = next(a for a in team.list_agents() if a.id == "reader")
                state = await team.agent("reader").kernel.get_state(info.thread_id)
                messages = state.to_dict()["statekernel.messages"]
                return [AgentTeam.sender_of(m) for m in messages]

        senders = asyncio.run(main())
        assert senders.count("writer") == 1 and senders.count("user") == 1, senders
        assert not [m for m in sys.modules if m.startswith("opentelemetry.")], sys.modules
        print("delivered")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "delivered", done.stderr


@pytest.mark.slow
def test_a_run_started_before_any_tracer_provider_makes_no_spans_later() -> None:
    """With the API installed and no provider yet, a run has nothing to trace under: it
    does not start parentless phase, tool or model spans once the application sets one up
    mid-run, and a run started after that is traced whole."""
    script = textwrap.dedent(
        """
        import asyncio
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
        from statekernel import Kernel, Phase

        async def main():
            kernel = Kernel([])
            early = await kernel.start_run("t1")
            await early.run_phase(Phase.STEP_START)
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            for _ in range(3):
                await early.run_phase(Phase.STEP_START)
            await early.finish()
            assert exporter.get_finished_spans() == (), exporter.get_finished_spans()
            late = await kernel.start_run("t2")
            await late.run_phase(Phase.STEP_START)
            await late.finish()
            return sorted(span.name for span in exporter.get_finished_spans())

        print(asyncio.run(main()))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(
        ["invoke_agent default", "phase RUN_END", "phase STEP_START"]
    ), done.stdout
