"""Watching a run: `agent.stream` events in order, as JSON, and a consumer that leaves early."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from samples import Ends, Hooks

from statekernel import (
    Agent,
    HookFailed,
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
    RunFailed,
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


class Obj:
    def __repr__(self) -> str:
        return "<Obj>"


@pytest.mark.parametrize(
    "value",
    [Obj(), {(1, 2): "tuple key"}, 1j, range(3), (x for x in ()), float("nan")],
    ids=["object", "tuple-key", "complex", "range", "generator", "nan"],
)
async def test_every_event_encodes_whatever_a_tool_returned(value: Any) -> None:
    model = ScriptedModel([InferenceResponse("", (ToolCall("c1", "odd", {}),))])
    agent = Agent([], model, {"odd": lambda a, c: value})
    events = [e async for e in agent.stream("t", ["go"])]
    for event in events:
        msgspec.json.decode(msgspec.json.encode(event, enc_hook=enc_hook))  # never raises
    final = events[-1]
    assert isinstance(final, RunFinished) and final.result.outcome == "success"


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


async def test_leaving_a_stream_before_its_first_event_cancels_nothing_it_did_not_start() -> None:
    agent = Agent([], ScriptedModel())
    stream = agent.stream("t", ["hi"])
    first = await stream.__anext__()
    assert not isinstance(first, ToolCallStarted)
    await stream.aclose()  # type: ignore[attr-defined]
    assert (await agent.run("t", ["again"])).outcome == "success"


async def test_async_phase_callbacks_are_awaited_in_order() -> None:
    seen: list[str] = []

    async def on_phase(run: Any, report: Any) -> None:
        await asyncio.sleep(0)
        seen.append(report.phase.name)

    await Agent([], ScriptedModel(), on_phase=on_phase).run("t", [Message("user", "hi")])
    assert seen[0] == "RUN_START" and seen[-1] == "RUN_END" and "STEP_END" in seen


async def test_a_failing_hook_is_said_in_the_stream_the_result_and_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def boom(ctx: PhaseContext) -> None:
        raise ValueError("bad config")

    agent = Agent([Hooks("settings", step_start=boom)], ScriptedModel([InferenceResponse("hi")]))
    with caplog.at_level("ERROR", logger="statekernel"):
        events = [event async for event in agent.stream("t", ["go"])]
    failed = [event for event in events if isinstance(event, RunFailed)]
    assert len(failed) == 1 and isinstance(events[-2], RunFailed)
    (event,) = failed
    assert (event.plugin, event.phase) == ("settings", "STEP_START")
    assert isinstance(event.error, HookFailed)
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.result.error is event.error
    assert str(finished.result) == (
        "failure after 1 step: HookFailed: hook of plugin 'settings' failed in phase "
        "STEP_START: ValueError: bad config. Nothing of this gather round was committed."
    )
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "run 't:run-1' failed: hook of plugin 'settings'" in record.getMessage()
    assert record.exc_info is not None and "ValueError: bad config" in caplog.text
    ok = await Agent([], ScriptedModel([InferenceResponse("hi")])).run("u", ["go"])
    assert str(ok) == "success after 1 step"
