"""Watching and stopping a run as it happens: `agent.stream` yields typed events in order,
ending with the RunResult; a consumer that leaves early, `agent.cancel` on a run in
progress, and an outside task cancellation all end the run cleanly; and two runs of one
thread in one process take turns."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from samples import Ends

from statekernel import (
    Agent,
    InferenceRequest,
    InferenceResponse,
    Message,
    Phase,
    PhaseContext,
    ScriptedModel,
    ToolCall,
    ToolCallStatus,
    enc_hook,
)
from statekernel.events import (
    Committed,
    ModelResponded,
    PhaseEnded,
    PhaseStarted,
    RunFinished,
    TextDelta,
    ToolCallEnded,
    ToolCallStarted,
)
from statekernel.stores import SqliteThreadStore


def conversation() -> ScriptedModel:
    return ScriptedModel(
        [
            InferenceResponse("looking", (ToolCall("c1", "lookup", {"q": "weather"}),)),
            InferenceResponse("It is sunny."),
        ]
    )


TOOLS = {"lookup": lambda arguments, ctx: f"sunny ({arguments['q']})"}


async def test_a_streamed_run_yields_its_events_in_order_ending_with_the_result() -> None:
    agent = Agent([Ends()], conversation(), TOOLS)
    events = [event async for event in agent.stream("t", ["weather?"])]
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "Committed" and kinds[-1] == "RunFinished"  # the user's message first
    assert kinds.count("RunFinished") == 1
    phases = [e.phase for e in events if isinstance(e, PhaseStarted)]
    assert phases[0] is Phase.RUN_START and phases[-1] is Phase.RUN_END
    assert phases.count(Phase.STEP_START) == 2 and Phase.TOOL_GATE in phases
    # Every phase start has its end, in order; commits of a phase come between the two.
    started = [i for i, e in enumerate(events) if isinstance(e, PhaseStarted)]
    ended = [i for i, e in enumerate(events) if isinstance(e, PhaseEnded)]
    assert len(started) == len(ended) and all(s < e for s, e in zip(started, ended, strict=True))
    # The model, then the tool call, in order.
    order = [
        type(e).__name__
        for e in events
        if isinstance(e, ModelResponded | ToolCallStarted | ToolCallEnded)
    ]
    assert order == ["ModelResponded", "ToolCallStarted", "ToolCallEnded", "ModelResponded"]
    (ended_call,) = [e for e in events if isinstance(e, ToolCallEnded)]
    assert ended_call.status is ToolCallStatus.SUCCEEDED and ended_call.result == "sunny (weather)"
    # Committed records are the journal's: revisions one by one, as history shows them.
    records = [e.record for e in events if isinstance(e, Committed)]
    assert [r.revision for r in records] == list(range(1, len(records) + 1))
    assert records == await agent.kernel.history("t")
    final = events[-1]
    assert isinstance(final, RunFinished) and final.result.outcome == "success"
    assert [m.content for m in final.result.messages][-1] == "It is sunny."
    # The same run as agent.run gives.
    plain = await Agent([Ends()], conversation(), TOOLS).run("t", ["weather?"])
    assert [m.content for m in plain.messages] == [m.content for m in final.result.messages]


async def test_every_event_encodes_as_json_a_web_page_can_read() -> None:
    def broken(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        raise KeyError("text")

    model = ScriptedModel([InferenceResponse("", (ToolCall("c1", "broken", {}),))])
    events = [e async for e in Agent([], model, {"broken": broken}).stream("t", ["go"])]
    decoded = [msgspec.json.decode(msgspec.json.encode(e, enc_hook=enc_hook)) for e in events]
    assert {d["event"] for d in decoded} >= {
        "PhaseStarted",
        "PhaseEnded",
        "Committed",
        "ModelResponded",
        "ToolCallStarted",
        "ToolCallEnded",
        "RunFinished",
    }
    (failed,) = [d for d in decoded if d["event"] == "ToolCallEnded"]
    assert failed["error"] == "KeyError: 'text'"
    assert failed["exception"] == {"type": "KeyError", "message": "'text'"}
    finished = decoded[-1]["result"]
    assert finished["outcome"] == "success"
    assert finished["snapshot"]["statekernel.messages"][0]["content"] == "go"  # key -> value
    assert decoded[0]["record"]["ops"][0]["key"] == "statekernel.messages"


class StreamingModel:
    """A model that streams its text, the protocol `OpenAIChatModel(stream=True)` speaks."""

    streams = True

    async def stream(self, request: InferenceRequest) -> AsyncIterator[str | InferenceResponse]:
        for piece in ("Hel", "lo", "!"):
            yield piece
        yield InferenceResponse("Hello!")

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        raise AssertionError("a streaming model is streamed")


async def test_a_streaming_models_text_arrives_as_deltas_before_its_response() -> None:
    events = [e async for e in Agent([], StreamingModel()).stream("t", ["hi"])]
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == ["Hel", "lo", "!"]
    deltas_end = max(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    responded = next(i for i, e in enumerate(events) if isinstance(e, ModelResponded))
    assert deltas_end < responded
    assert events[-1].result.messages[-1].content == "Hello!"  # type: ignore[attr-defined]


async def test_leaving_a_stream_after_the_first_tool_call_leaves_a_consistent_saved_thread(
    tmp_path: Path,
) -> None:
    ran: list[str] = []

    def lookup(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        ran.append(arguments["q"])
        return "sunny"

    ends = Ends()
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        agent = Agent([ends], conversation(), {"lookup": lookup}, thread_store=store)
        seen: list[Any] = []
        async with contextlib.aclosing(agent.stream("t", ["weather?"])) as events:
            async for event in events:
                seen.append(event)
                if isinstance(event, ToolCallStarted):
                    break
        assert not any(isinstance(e, RunFinished) for e in seen)
        assert ran == []  # the run stopped at the next safe point, before the tool ran
        assert ends.ended == 1  # RUN_END ran
        # A new agent over the same file finds a consistent, saved thread...
        again = Agent([], ScriptedModel([InferenceResponse("ok")]), thread_store=store)
        assert (await again.kernel.verify("t")).ok
        result = await again.run("t", ["and now?"])
    assert result.outcome == "success"
    roles = [(m.role, m.tool_call_id, m.is_error, m.content) for m in result.messages]
    # ...where the call the model made has a result (cancelled), as model APIs require.
    assert roles[:3] == [
        ("user", None, False, "weather?"),
        ("assistant", None, False, "looking"),
        ("tool", "c1", True, "cancelled"),
    ]


class Blocking:
    """A model that never answers until released: a slow model call in flight."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.abandoned = False

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.abandoned = True
            raise
        raise AssertionError("unreachable")


async def test_cancel_stops_a_run_in_progress_and_keeps_what_it_committed(
    tmp_path: Path,
) -> None:
    ends = Ends()
    model = Blocking()
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        agent = Agent([ends], model, thread_store=store)
        running = asyncio.ensure_future(agent.run("t", ["a long question"]))
        await model.entered.wait()
        cancelled = await agent.cancel("t")
        assert cancelled.outcome == "cancelled" and model.abandoned and ends.ended == 1
        assert (await running).outcome == "cancelled"  # the run's own caller sees it too
        again = Agent([], ScriptedModel([InferenceResponse("ok")]), thread_store=store)
        result = await again.run("t", ["still there?"])
    assert [m.content for m in result.messages] == ["a long question", "still there?", "ok"]


async def test_a_run_cancelled_from_outside_still_ends_cleanly(tmp_path: Path) -> None:
    ends = Ends()
    model = Blocking()
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        agent = Agent([ends], model, thread_store=store)
        running = asyncio.ensure_future(agent.run("t", ["question"]))
        await model.entered.wait()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert ends.ended == 1
        # The thread is free again, in this agent and in a new one.
        agent.model = ScriptedModel([InferenceResponse("answer")])
        result = await agent.run("t", ["again"])
    assert [m.content for m in result.messages] == ["question", "again", "answer"]


async def test_two_runs_of_one_thread_in_one_agent_take_turns() -> None:
    class Slow:
        async def __call__(self, request: InferenceRequest) -> InferenceResponse:
            await asyncio.sleep(0.01)
            return InferenceResponse(f"answer to {request.messages[-1].content}")

    agent = Agent([], Slow())
    first, second = await asyncio.gather(agent.run("t", ["one"]), agent.run("t", ["two"]))
    assert first.outcome == second.outcome == "success"
    assert [m.content for m in second.messages] == [
        "one",
        "answer to one",
        "two",
        "answer to two",
    ]


async def test_a_run_of_its_own_thread_from_inside_a_tool_fails_at_once_saying_why() -> None:
    agent: Agent

    async def recurse(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        result = await agent.run("t", ["inner"])
        return result.outcome

    model = ScriptedModel([InferenceResponse("", (ToolCall("c1", "recurse", {}),))])
    agent = Agent([], model, {"recurse": recurse})
    result = await asyncio.wait_for(agent.run("t", ["outer"]), timeout=10)
    (message,) = [m for m in result.messages if m.role == "tool"]
    assert message.is_error and "would wait forever" in message.content
    assert "parent_thread_id" in message.content


async def test_async_phase_callbacks_are_awaited_in_order() -> None:
    seen: list[str] = []

    async def on_phase(run: Any, report: Any) -> None:
        await asyncio.sleep(0)
        seen.append(report.phase.name)

    await Agent([], ScriptedModel(), on_phase=on_phase).run("t", [Message("user", "hi")])
    assert seen[0] == "RUN_START" and seen[-1] == "RUN_END" and "STEP_END" in seen


class Gate:
    """A model that answers once released: a run held in flight while another process
    saves the same thread."""

    def __init__(self, answer: str) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.answer = answer

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        self.entered.set()
        await self.release.wait()
        return InferenceResponse(self.answer)


async def test_a_run_that_lost_a_save_race_to_another_process_keeps_its_message_to_retry(
    tmp_path: Path,
) -> None:
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        gate = Gate("answer for A")
        first = Agent([], gate, thread_store=store)  # one process...
        other = Agent([], ScriptedModel([InferenceResponse("answer for B")]), thread_store=store)
        held = asyncio.ensure_future(first.run("t", ["from A"]))
        await gate.entered.wait()
        assert (await other.run("t", ["from B"])).outcome == "success"  # ...and another
        gate.release.set()
        lost = await held
        assert lost.outcome == "failure" and type(lost.error).__name__ == "RevisionConflict"
        assert "result.unsaved" in str(lost.error) and "agent.run('t'" in str(lost.error)
        assert [(m.role, m.content) for m in lost.unsaved] == [("user", "from A")]
        # Retrying as the error says continues from what the other process saved.
        gate.release.set()
        retried = await first.run("t", lost.unsaved)
    assert retried.outcome == "success"
    assert [m.content for m in retried.messages] == [
        "from B",
        "answer for B",
        "from A",
        "answer for A",
    ]
    assert len({m.id for m in retried.messages}) == 4
