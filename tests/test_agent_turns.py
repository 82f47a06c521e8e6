"""One thread, one run at a time: runs take turns; a run that would wait for itself fails."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from pathlib import Path
from typing import Any

import pytest
from samples import Hooks

from statekernel import (
    Agent,
    InferenceRequest,
    InferenceResponse,
    PhaseContext,
    ScriptedModel,
    StateError,
    ToolCall,
)
from statekernel.stores import SqliteThreadStore


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


async def test_running_a_streamed_thread_from_the_loop_reading_it_fails_at_once() -> None:
    agent = Agent([], ScriptedModel([InferenceResponse("a1"), InferenceResponse("a2")]))
    async with contextlib.aclosing(agent.stream("t", ["one"])) as events:
        async for _ in events:
            with pytest.raises(StateError, match="waits for this very task"):
                await agent.run("t", ["follow-up"])
            break
    # Two streams of one thread stepped by one task: the second says so instead of hanging.
    first = agent.stream("u", ["one"])
    await first.__anext__()
    second = agent.stream("u", ["two"])
    with pytest.raises(StateError, match="waits for this very task"):
        await second.__anext__()
    await first.aclose()  # type: ignore[attr-defined]


async def test_pending_asked_from_inside_the_threads_own_run_is_empty(tmp_path: Path) -> None:
    """A thread whose run is live has no suspended run: `agent.pending` asked by a tool of
    that run, or by the loop reading its stream, is `()` as for any such thread, not a
    failure for a turn it would wait for forever."""
    asked: list[object] = []

    async def peek(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        asked.append(await agent.pending("t"))
        return "peeked"

    async with SqliteThreadStore(tmp_path / "t.db") as store:
        model = ScriptedModel([InferenceResponse("", (ToolCall("c1", "peek", {}),))])
        agent = Agent([], model, {"peek": peek}, thread_store=store)
        result = await asyncio.wait_for(agent.run("t", ["hello"]), timeout=10)
        assert result.outcome == "success", result.error
        assert asked == [()]
        async with contextlib.aclosing(agent.stream("t", ["again"])) as events:
            async for _ in events:
                assert await agent.pending("t") == ()
        assert await agent.pending("t") == ()
        assert await agent.pending("never-run") == ()  # a thread the store does not hold


async def test_run_end_hooks_run_in_the_runs_own_task_and_context() -> None:
    span: contextvars.ContextVar[str | None] = contextvars.ContextVar("span", default=None)
    tokens: dict[str, contextvars.Token[str | None]] = {}
    agent: Agent

    def start(ctx: PhaseContext) -> None:
        tokens[ctx.run.run_id] = span.set(f"span {ctx.run.run_id}")

    async def end(ctx: PhaseContext) -> None:
        span.reset(tokens.pop(ctx.run.run_id))  # a token of this very context
        with pytest.raises(StateError, match="waits for this very task"):
            await agent.run(ctx.run.thread_id, ["from RUN_END"])

    agent = Agent([Hooks(RUN_START=start, RUN_END=end)], ScriptedModel())
    result = await asyncio.wait_for(agent.run("t", ["hi"]), 10)
    assert result.outcome == "success", result.error
    assert span.get() is None


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
        assert lost.outcome == "superseded" and type(lost.error).__name__ == "RevisionConflict"
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
