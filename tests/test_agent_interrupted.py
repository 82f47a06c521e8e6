"""Tool calls cut off by a dying process: interrupted or not started on restart, rerun if safe."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from samples import Hooks

from statekernel import (
    Agent,
    Block,
    Decision,
    ExcludeTool,
    InferenceResponse,
    PhaseContext,
    ScriptedModel,
    StateCommand,
    StateError,
    ToolCall,
    tool,
)
from statekernel.stores import MemoryThreadStore, SqliteThreadStore


class _Crash(BaseException):
    """Stands in for the process dying: it passes every `except Exception`."""


def _crashing_agent(
    store: MemoryThreadStore, ran: list[str], *, crash: bool, asks: bool = True
) -> Agent:
    """`asks`: the model asks for both tools first (a restarted process's model, resuming,
    is asked only for its final answer)."""

    def charge(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        ran.append("charge")
        if crash:
            raise _Crash
        return "charged"

    def lookup(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        ran.append("lookup")
        return "found"

    lookup.idempotent = True  # type: ignore[attr-defined]
    calls = (ToolCall("c1", "charge", {}), ToolCall("c2", "lookup", {}))
    model = ScriptedModel([InferenceResponse(text="", tool_calls=calls)] if asks else [])
    return Agent([], model, {"charge": charge, "lookup": lookup}, thread_store=store)


async def test_a_tool_cut_off_comes_back_interrupted_and_idempotent_ones_rerun_by_themselves() -> (
    None
):
    store, ran = MemoryThreadStore(), []
    with pytest.raises(_Crash):
        await _crashing_agent(store, ran, crash=True).run("t", ["pay and look"])
    assert ran == ["charge"]
    restarted = _crashing_agent(store, ran, crash=False, asks=False)
    waiting = await restarted.pending("t")
    assert [(p.id, p.ticket) for p in waiting] == [("c1", "interrupted"), ("c2", "not started")]
    with pytest.raises(StateError, match="suspended run"):
        await restarted.run("t", ["again"])  # nothing runs behind the caller's back
    result = await restarted.resume("t", "c1", Decision.result("charged (checked by hand)"))
    assert result.outcome == "success"
    assert ran == ["charge", "lookup"]  # charge never ran twice; lookup re-ran by itself
    tool_messages = [m.content for m in result.messages if m.role == "tool"]
    assert tool_messages == ["charged (checked by hand)", "found"]


async def test_an_interrupted_call_runs_again_only_when_the_caller_approves() -> None:
    store, ran = MemoryThreadStore(), []
    with pytest.raises(_Crash):
        await _crashing_agent(store, ran, crash=True).run("t", ["pay"])
    restarted = _crashing_agent(store, ran, crash=False, asks=False)
    result = await restarted.resume("t", "c1", Decision.approve())
    assert result.outcome == "success" and ran == ["charge", "charge", "lookup"]


async def test_without_a_thread_store_nothing_is_saved_before_a_tool() -> None:
    ran: list[str] = []
    agent = _crashing_agent(MemoryThreadStore(), ran, crash=False)
    in_memory = Agent([], agent.model, agent.tools)
    result = await in_memory.run("t", ["pay"])
    assert result.outcome == "success" and ran == ["charge", "lookup"]
    assert await in_memory.pending("t") == ()  # nothing was saved as in flight


def _three_call_agent(
    store: MemoryThreadStore, ran: list[str], *, crash_in: str | None, blocked: str | None = None
) -> Agent:
    def tool_named(name: str) -> Any:
        def tool(arguments: dict[str, Any], ctx: PhaseContext) -> str:
            ran.append(f"{name}:{ctx.tool_call.id if ctx.tool_call else '?'}")
            if name == crash_in:
                raise _Crash
            return f"{name} done"

        return tool

    gate = Hooks(
        "gate",
        gate=lambda ctx: (
            Block("not allowed")
            if ctx.tool_call is not None and ctx.tool_call.name == blocked
            else None
        ),
    )
    tools = {name: tool_named(name) for name in ("charge", "lookup")}
    tools["lookup"].idempotent = True
    calls = (
        ToolCall("c1", "charge", {}),
        ToolCall("c2", "lookup", {}),
        ToolCall("c3", "charge", {}),
    )
    model = ScriptedModel([InferenceResponse(text="", tool_calls=calls)] if crash_in else [])
    return Agent([gate], model, tools, thread_store=store)


async def test_a_finished_call_never_comes_back_interrupted() -> None:
    store, ran = MemoryThreadStore(), []
    with pytest.raises(_Crash):
        await _three_call_agent(store, ran, crash_in="lookup").run("t", ["go"])
    assert ran == ["charge:c1", "lookup:c2"]
    restarted = _three_call_agent(store, ran, crash_in=None)
    waiting = await restarted.pending("t")
    assert [(p.id, p.ticket) for p in waiting] == [("c2", "not started"), ("c3", "not started")]
    result = await restarted.resume("t", "c3", Decision.approve())
    assert result.outcome == "success"
    assert ran == ["charge:c1", "lookup:c2", "charge:c3", "lookup:c2"]  # c1 charged once


async def test_a_call_never_started_still_passes_its_gates() -> None:
    store, ran = MemoryThreadStore(), []
    with pytest.raises(_Crash):
        await _three_call_agent(store, ran, crash_in="charge", blocked="lookup").run("t", ["go"])
    restarted = _three_call_agent(store, ran, crash_in=None, blocked="lookup")
    result = await restarted.resume("t", "c1", Decision.result("charged by hand"))
    tool_messages = [m.content for m in result.messages if m.role == "tool"]
    assert "not allowed" in tool_messages  # the idempotent lookup was judged, and blocked
    assert ran.count("lookup:c2") == 0


async def test_a_resumed_step_offers_only_what_it_offered_before(tmp_path: Path) -> None:
    published: list[int] = []

    @tool(idempotent=True)
    def publish() -> str:
        """Publish."""
        published.append(1)
        return "published"

    crash = [True]

    class Crash(BaseException):
        pass

    @tool
    def work() -> str:
        """Work."""
        if crash[0]:
            raise Crash
        return "worked"

    steer = Hooks(STEP_START=lambda ctx: StateCommand().schedule(ExcludeTool, "publish"))
    calls = (ToolCall("c1", "work", {}), ToolCall("c2", "publish", {}))
    path = tmp_path / "t.db"
    async with SqliteThreadStore(path) as store:
        model = ScriptedModel([InferenceResponse("", calls)])
        with pytest.raises(Crash):  # the process dies while `work` runs
            await Agent([steer], model, [work, publish], thread_store=store).run("t", ["go"])
    crash[0] = False
    async with SqliteThreadStore(path) as store:
        agent = Agent([steer], ScriptedModel(), [work, publish], thread_store=store)
        result = await agent.resume("t", "c1", Decision.approve())
    assert published == []  # excluded in that step: not run, not even as idempotent
    assert [(m.tool_call_id, m.content) for m in result.messages if m.role == "tool"] == [
        ("c1", "worked"),
        ("c2", "not offered in this step tool 'publish'"),
    ]
