"""Tool gates and tool commands: every decision combination, and rejected tool commands."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sample_keys import Counter, Positive
from samples import Hooks

from statekernel import (
    Block,
    HookFailed,
    Kernel,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    SetResult,
    StateCommand,
    Suspend,
    ToolCall,
    ToolCallStatus,
    ToolOutput,
)

CALL = ToolCall("c1", "publish", {"doc": "a"})


class Gate(Plugin):
    def __init__(self, id: str, answer: Any) -> None:
        self.id = id
        self.answer = answer

    def register(self, r: PluginRegistrar) -> None:
        r.register_tool_gate(lambda ctx: self.answer)


async def decide(*answers: Any) -> Any:
    kernel = Kernel([Gate(f"g{i}", answer) for i, answer in enumerate(answers)])
    run = await kernel.start_run("t")
    return await run.tool_gate(CALL)


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        ((), None),
        ((None, None), None),
        ((Block("no"),), Block("no")),
        ((Suspend("ask"),), Suspend("ask")),
        ((SetResult(1),), SetResult(1)),
        ((SetResult(1), Suspend("ask"), Block("no")), Block("no")),
        ((SetResult(1), Suspend("ask")), Suspend("ask")),
        ((None, SetResult(2), None), SetResult(2)),
        ((Block("first"), Block("second")), Block("first")),
        ((Suspend("a"), Suspend("b")), Suspend("a")),
        ((SetResult("a"), SetResult("b")), SetResult("a")),
    ],
)
async def test_gate_decisions_follow_priority_then_registration_order(
    answers: tuple[Any, ...], expected: Any
) -> None:
    assert await decide(*answers) == expected


async def test_same_kind_clash_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="statekernel"):
        await decide(Block("first"), Block("second"))
    assert "clash" in caplog.text and "g0" in caplog.text and "g1" in caplog.text


async def test_gates_read_the_snapshot_after_tool_gate_hooks_commit() -> None:
    class Stage(Plugin):
        id = "stage"

        def register(self, r: PluginRegistrar) -> None:
            r.register_key(Counter)
            r.register_phase_hook(Phase.TOOL_GATE, lambda ctx: StateCommand().update(Counter, 1))
            r.register_tool_gate(self.gate)

        def gate(self, ctx: PhaseContext) -> Block | None:
            assert ctx.tool_call == CALL
            return Block(f"seen {ctx.snapshot.get(Counter)}")

    run = await Kernel([Stage()]).start_run("t")
    assert await run.tool_gate(CALL) == Block("seen 1")


async def test_a_raising_gate_or_a_wrong_answer_is_a_hook_failure() -> None:
    run = await Kernel([Hooks("raises", gate=lambda ctx: 1 / 0)]).start_run("t")
    with pytest.raises(HookFailed, match="raises"):
        await run.tool_gate(CALL)
    with pytest.raises(HookFailed, match="Block, Suspend, SetResult or None"):
        await decide("yes")


async def test_a_ticket_that_cannot_be_saved_fails_at_the_gate_naming_its_plugin() -> None:
    class Opaque:
        pass

    run = await Kernel([Gate("approval", Suspend(Opaque()))]).start_run("t")
    with pytest.raises(HookFailed, match=r"Suspend ticket must be data.*Opaque") as caught:
        await run.tool_gate(CALL)
    assert caught.value.plugin == "approval" and caught.value.phase == Phase.TOOL_GATE
    fine = await Kernel([Gate("approval", Suspend({"approver": "finance"}))]).start_run("t")
    assert await fine.tool_gate(CALL) == Suspend({"approver": "finance"})


async def test_gates_of_filtered_out_plugins_are_ignored() -> None:
    kernel = Kernel([Gate("blocker", Block("no")), Gate("other", None)])
    run = await kernel.start_run("t", active_hook_filter=("other",))
    assert await run.tool_gate(CALL) is None


async def test_gate_answers_of_subclassed_kinds_rank_as_their_kind() -> None:
    class PolicyBlock(Block):
        pass

    run = await Kernel([Gate("gate0", Suspend("x")), Gate("gate1", PolicyBlock("no"))]).start_run(
        "t"
    )
    assert await run.tool_gate(ToolCall("c1", "search", {})) == PolicyBlock("no")


class Tools(Plugin):
    """Counter and Positive keys plus a gate that blocks the tool named 'forbidden'."""

    id = "tools"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Counter)
        r.register_key(Positive)
        r.register_tool_gate(self.gate)

    def gate(self, ctx: PhaseContext) -> Block | SetResult | Suspend | None:
        assert ctx.tool_call is not None
        return {
            "forbidden": Block("forbidden needs review first"),
            "cached": SetResult("from cache"),
            "ask": Suspend({"question": "ok?"}),
        }.get(ctx.tool_call.name)


async def test_a_tool_command_commits_through_the_same_path() -> None:
    run = await Kernel([Tools()]).start_run("t")

    def tool(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
        assert ctx.phase is Phase.BEFORE_TOOL_EXECUTE
        return ToolOutput(f"added {arguments['n']}", StateCommand().update(Counter, arguments["n"]))

    result = await run.handle_tool_call(ToolCall("c", "add", {"n": 3}), tool)
    assert result.status is ToolCallStatus.SUCCEEDED and result.result == "added 3"
    assert run.snapshot.get(Counter) == 3


async def test_a_rejected_tool_command_fails_the_call_and_leaves_state_untouched() -> None:
    run = await Kernel([Tools()]).start_run("t")
    await run.submit(StateCommand().update(Counter, 1))

    def tool(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
        return ToolOutput("ok", StateCommand().update(Counter, 10).update(Positive, -1))

    result = await run.handle_tool_call(ToolCall("c", "bad", {}), tool)
    assert result.status is ToolCallStatus.FAILED and result.is_error
    assert result.error is not None and "must stay >= 0" in result.error
    assert run.snapshot.get(Counter) == 1 and run.revision == 1


async def test_block_fails_only_the_call_and_the_tool_never_runs() -> None:
    run = await Kernel([Tools()]).start_run("t")
    ran: list[str] = []
    result = await run.handle_tool_call(
        ToolCall("c", "forbidden", {}), lambda a, c: ran.append("x")
    )
    assert result.status is ToolCallStatus.FAILED and result.error == "forbidden needs review first"
    assert ran == []
    ok = await run.handle_tool_call(ToolCall("d", "fine", {}), lambda a, c: "fine result")
    assert ok.result == "fine result"


async def test_set_result_skips_the_tool_and_suspend_reports_the_ticket() -> None:
    run = await Kernel([Tools()]).start_run("t")
    cached = await run.handle_tool_call(ToolCall("c", "cached", {}), lambda a, c: 1 / 0)
    assert cached.status is ToolCallStatus.SUCCEEDED and cached.result == "from cache"
    asked = await run.handle_tool_call(ToolCall("d", "ask", {}), lambda a, c: 1 / 0)
    assert asked.status is ToolCallStatus.SUSPENDED and asked.ticket == {"question": "ok?"}


async def test_a_raising_tool_becomes_a_tool_error() -> None:
    run = await Kernel([Tools()]).start_run("t")

    async def broken(arguments: dict[str, Any], ctx: PhaseContext) -> None:
        raise LookupError("no such document")

    result = await run.handle_tool_call(ToolCall("c", "lookup", {}), broken)
    assert (
        result.status is ToolCallStatus.FAILED and result.error == "LookupError: no such document"
    )
