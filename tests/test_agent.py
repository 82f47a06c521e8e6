"""The Agent facade end to end: the loop, tools, suspend and resume, failures."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import msgspec
import pytest
from sample_keys import Counter, Handle, LiveHandle, Positive
from samples import Hooks, answered

from statekernel import (
    Agent,
    Block,
    Decision,
    InferenceRequest,
    InferenceResponse,
    KeyScope,
    MergeStrategy,
    Message,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScheduledActionSpec,
    ScriptedModel,
    StateCommand,
    StateError,
    StateKey,
    StateKeyOptions,
    StateValidationError,
    Suspend,
    ToolArgumentsTooDeep,
    ToolCall,
    ToolOutput,
    run_status,
)
from statekernel.stores import MemoryThreadStore, SqliteThreadStore


class Visits(StateKey[int, int]):
    """A thread key: counts runs on the thread."""

    key = "t.visits"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Tracker(Plugin):
    """Counts runs (thread key) and steps (run key), records the phases it saw."""

    id = "tracker"

    def __init__(self) -> None:
        self.phases: list[Phase] = []

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Visits)
        r.register_key(Counter)
        r.register_key(Positive)
        for phase in Phase:
            r.register_phase_hook(phase, self.seen)
        r.register_phase_hook(Phase.RUN_START, lambda ctx: StateCommand().update(Visits, 1))
        r.register_phase_hook(Phase.STEP_START, lambda ctx: StateCommand().update(Counter, 1))
        r.register_tool_gate(self.gate)

    def seen(self, ctx: PhaseContext) -> None:
        self.phases.append(ctx.phase)

    def gate(self, ctx: PhaseContext) -> Block | Suspend | None:
        assert ctx.tool_call is not None
        if ctx.tool_call.name == "delete":
            return Block("delete is not allowed here")
        if ctx.tool_call.name == "pay":
            return Suspend({"approve": "payment", "amount": ctx.tool_call.arguments["amount"]})
        return None


def calls(*names: str, **arguments: Any) -> InferenceResponse:
    return InferenceResponse(
        text="calling",
        tool_calls=tuple(ToolCall(f"call-{n}", n, dict(arguments)) for n in names),
    )


def make_agent(responses: list[InferenceResponse], **tools: Any) -> tuple[Agent, Tracker]:
    tracker = Tracker()
    return Agent([tracker], ScriptedModel(responses), tools), tracker


async def test_a_text_answer_ends_the_run_with_success() -> None:
    agent, tracker = make_agent([InferenceResponse(text="hello there")])
    result = await agent.run("t", ["hi"])
    assert result.outcome == "success" and result.steps == 1 and result.error is None
    assert [(m.role, m.content) for m in result.messages] == [
        ("user", "hi"),
        ("assistant", "hello there"),
    ]
    assert tracker.phases == [
        Phase.RUN_START,
        Phase.STEP_START,
        Phase.BEFORE_INFERENCE,
        Phase.AFTER_INFERENCE,
        Phase.STEP_END,
        Phase.RUN_END,
    ]


async def test_message_ids_are_derived_deterministically() -> None:
    first, _ = make_agent([InferenceResponse(text="a")])
    second, _ = make_agent([InferenceResponse(text="a")])
    ids_one = [m.id for m in (await first.run("t", ["x"])).messages]
    ids_two = [m.id for m in (await second.run("t", ["x"])).messages]
    assert ids_one == ids_two == ["t:run-1:m0", "t:run-1:m1"]


async def test_tool_calls_run_through_every_tool_phase_and_answer_as_tool_messages() -> None:
    def search(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
        return ToolOutput({"hits": 2}, StateCommand().update(Counter, 10))

    agent, tracker = make_agent(
        [calls("search", q="x"), InferenceResponse(text="found")], search=search
    )
    result = await agent.run("t", ["look"])
    assert result.outcome == "success" and result.steps == 2
    tool_message = result.messages[2]
    assert tool_message.role == "tool" and tool_message.tool_call_id == "call-search"
    assert tool_message.content == '{"hits":2}' and not tool_message.is_error
    assert result.snapshot.get(Counter) == 12  # 2 steps + the tool's command
    step_one = tracker.phases[: tracker.phases.index(Phase.STEP_END) + 1]
    assert step_one[3:] == [
        Phase.AFTER_INFERENCE,
        Phase.TOOL_GATE,
        Phase.BEFORE_TOOL_EXECUTE,
        Phase.AFTER_TOOL_EXECUTE,
        Phase.STEP_END,
    ]
    assert run_status(result.snapshot) == "done"


async def test_run_keys_reset_and_thread_keys_survive_across_runs() -> None:
    agent, _ = make_agent([])
    first = await agent.run("t", ["one"])
    second = await agent.run("t", ["two"])
    assert first.snapshot.get(Visits) == 1 and second.snapshot.get(Visits) == 2
    assert second.snapshot.get(Counter) == 1  # run key: back to default, then one step
    assert [m.content for m in second.messages] == ["one", "done", "two", "done"]
    assert second.snapshot.revision > first.snapshot.revision  # monotonic per thread
    other = await agent.run("other", ["x"])
    assert other.snapshot.get(Visits) == 1


async def test_block_and_raising_tools_become_tool_errors_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def explode(arguments: dict[str, Any], ctx: PhaseContext) -> None:
        raise RuntimeError("disk on fire")

    agent, _ = make_agent(
        [calls("delete"), calls("explode"), calls("missing"), InferenceResponse(text="ok")],
        delete=lambda a, c: "deleted",
        explode=explode,
    )
    with caplog.at_level(logging.WARNING, logger="statekernel"):
        result = await agent.run("t", ["go"])
    assert result.outcome == "success"
    errors = [m for m in result.messages if m.role == "tool"]
    assert [(m.content, m.is_error) for m in errors] == [
        ("delete is not allowed here", True),
        ("RuntimeError: disk on fire", True),  # the model sees the exception's type too
        ("unknown tool 'missing'; available tools: delete, explode", True),
    ]
    # The exception itself, with its traceback, is logged and in the result.
    (raised,) = [r for r in result.tool_results if r.exception is not None]
    assert raised.call.name == "explode" and isinstance(raised.exception, RuntimeError)
    assert raised.exception.__traceback__ is not None
    (logged,) = [r for r in caplog.records if r.exc_info and r.exc_info[1] is raised.exception]
    assert logged.levelno == logging.WARNING and "'explode'" in logged.getMessage()
    assert [r.call.name for r in result.tool_results] == ["delete", "explode", "missing"]


async def test_a_rejected_tool_command_fails_the_call_visibly_and_leaves_state_untouched() -> None:
    def overspend(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
        return ToolOutput("spent", StateCommand().update(Counter, 100).update(Positive, -1))

    agent, _ = make_agent([calls("overspend"), InferenceResponse(text="ok")], overspend=overspend)
    result = await agent.run("t", ["go"])
    assert result.outcome == "success"
    (tool_message,) = [m for m in result.messages if m.role == "tool"]
    assert tool_message.is_error and "must stay >= 0" in tool_message.content
    assert result.snapshot.get(Counter) == 2 and result.snapshot.get(Positive) == 0


async def test_request_transforms_shape_what_the_model_sees() -> None:
    class Prefix(Plugin):
        id = "prefix"

        def register(self, r: PluginRegistrar) -> None:
            r.register_request_transform(self.shape)

        async def shape(self, request: InferenceRequest, snapshot: Any) -> InferenceRequest:
            system = Message("system", "be brief")
            return InferenceRequest((system, *request.messages), request.tools)

    model = ScriptedModel([InferenceResponse(text="ok")])
    agent = Agent([Prefix()], model)
    result = await agent.run("t", ["hi"])
    assert [m.content for m in model.requests[0].messages] == ["be brief", "hi"]
    assert [m.content for m in result.messages] == ["hi", "ok"]  # history itself unchanged


async def test_a_failing_model_is_a_failure_with_run_end_and_state_kept() -> None:
    async def broken(request: InferenceRequest) -> InferenceResponse:
        raise ConnectionError("model unreachable")

    tracker = Tracker()
    agent = Agent([tracker], broken)
    result = await agent.run("t", ["hi"])
    assert result.outcome == "failure" and isinstance(result.error, ConnectionError)
    assert tracker.phases[-1] is Phase.RUN_END
    again = await agent.run("t", ["retry"])  # the thread was released and saved
    assert again.snapshot.get(Visits) == 2
    assert [m.content for m in again.messages][:2] == ["hi", "retry"]


async def test_running_out_of_steps_is_a_failure() -> None:
    agent = Agent([], ScriptedModel([calls("noop")] * 5), {"noop": lambda a, c: "ok"}, max_steps=3)
    result = await agent.run("t", ["loop"])
    assert result.outcome == "failure" and result.steps == 3
    assert "max_steps (3)" in str(result.error)


async def test_a_failed_run_gives_its_open_tool_calls_a_result() -> None:
    armed = [True]

    def flaky(ctx: PhaseContext) -> None:
        if armed.pop() if armed else False:
            raise RuntimeError("hook bug")

    model = ScriptedModel([InferenceResponse("", (ToolCall("c1", "t", {}),)), InferenceResponse()])
    agent = Agent([Hooks(BEFORE_TOOL_EXECUTE=flaky)], model, {"t": lambda a, c: "r"})
    failed = await agent.run("t", ["go"])
    assert failed.outcome == "failure"
    again = await agent.run("t", ["again"])
    assert answered(model.requests[-1].messages) and again.outcome == "success"
    (result,) = [m for m in again.messages if m.role == "tool"]
    assert result.is_error and result.content.startswith("not run: the run failed (HookFailed")


async def test_unsaved_is_empty_once_the_run_end_saved_even_if_it_failed() -> None:
    def broken_end(ctx: PhaseContext) -> None:
        raise RuntimeError("RUN_END hook broke")

    agent = Agent([Hooks(RUN_END=broken_end)], ScriptedModel())
    result = await agent.run("t", ["hello"])
    assert result.outcome == "failure" and result.unsaved == ()
    assert result.messages[0].content == "hello"


# -- suspend, resume, cancel ------------------------------------------------------------


def payment_agent(ran: list[Any]) -> Agent:
    def pay(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        ran.append(arguments["amount"])
        return f"paid {arguments['amount']}"

    agent, _ = make_agent([calls("pay", amount=5), InferenceResponse(text="all done")], pay=pay)
    return agent


async def test_suspend_then_approve_runs_the_tool_once_and_finishes() -> None:
    ran: list[Any] = []
    agent = payment_agent(ran)
    suspended = await agent.run("t", ["pay please"])
    assert suspended.outcome == "suspended" and ran == []
    (pending,) = suspended.pending
    assert pending.id == "call-pay" and pending.ticket == {"approve": "payment", "amount": 5}
    assert run_status(suspended.snapshot) == "waiting"
    with pytest.raises(StateError, match="suspended"):
        await agent.run("t", ["anything"])

    done = await agent.resume("t", "call-pay", Decision.approve())
    assert done.outcome == "success" and ran == [5]
    assert [m.content for m in done.messages if m.role == "tool"] == ["paid 5"]
    assert done.snapshot.get(Counter) == 2  # the run's own keys came back with it
    with pytest.raises(StateError, match="no suspended run"):
        await agent.resume("t", "call-pay", Decision.approve())


async def test_approve_with_replaced_arguments_deny_and_result() -> None:
    ran: list[Any] = []
    agent = payment_agent(ran)
    await agent.run("a", ["pay"])
    done = await agent.resume("a", "call-pay", Decision.approve({"amount": 7}))
    assert ran == [7] and done.outcome == "success"

    agent = payment_agent(ran)
    await agent.run("b", ["pay"])
    denied = await agent.resume("b", "call-pay", Decision.deny("over budget"))
    (message,) = [m for m in denied.messages if m.role == "tool"]
    assert (message.content, message.is_error) == ("over budget", True)

    agent = payment_agent(ran)
    await agent.run("c", ["pay"])
    given = await agent.resume("c", "call-pay", Decision.result("paid by hand"))
    assert [m.content for m in given.messages if m.role == "tool"] == ["paid by hand"]
    assert ran == [7]


async def test_resume_with_an_unknown_call_id_raises_and_changes_nothing() -> None:
    ran: list[Any] = []
    agent = payment_agent(ran)
    suspended = await agent.run("t", ["pay"])
    with pytest.raises(StateError, match="no suspended call 'nope'.*call-pay"):
        await agent.resume("t", "nope", Decision.approve())
    done = await agent.resume("t", "call-pay", Decision.approve())
    assert done.outcome == "success" and ran == [5]
    assert done.snapshot.revision > suspended.snapshot.revision


async def test_cancel_fails_pending_calls_and_ends_the_run() -> None:
    tracker = Tracker()
    agent = Agent([tracker], ScriptedModel([calls("pay", amount=1)]), {"pay": lambda a, c: "x"})
    await agent.run("t", ["pay"])
    tracker.phases.clear()
    cancelled = await agent.cancel("t")
    assert cancelled.outcome == "cancelled"
    (message,) = [m for m in cancelled.messages if m.role == "tool"]
    assert message.is_error and message.content == "cancelled"
    assert tracker.phases == [Phase.RUN_END]
    again = await agent.run("t", ["next"])
    assert again.outcome in {"success", "suspended"}


async def test_wrong_decision_type_is_refused() -> None:
    agent = payment_agent([])
    await agent.run("t", ["pay"])
    with pytest.raises(TypeError, match="Decision.approve"):
        await agent.resume("t", "call-pay", "yes")  # type: ignore[arg-type]


async def test_suspending_skips_non_persistent_run_keys(tmp_path: Path) -> None:
    class Plug(Plugin):
        id = "plug"

        def register(self, r: PluginRegistrar) -> None:
            r.register_key(LiveHandle, StateKeyOptions(persistent=False))
            r.register_phase_hook(
                Phase.RUN_START, lambda ctx: StateCommand().update(LiveHandle, Handle())
            )
            r.register_tool_gate(lambda ctx: Suspend("approve?"))

    async with SqliteThreadStore(tmp_path / "t.db") as store:
        model = ScriptedModel([InferenceResponse(tool_calls=(ToolCall("c1", "deploy"),))])
        agent = Agent([Plug()], model, {"deploy": lambda a, c: "ok"}, thread_store=store)
        result = await agent.run("t", ["go"])
        assert result.outcome == "suspended"


async def test_a_suspend_that_cannot_be_saved_fails_the_run_cleanly(tmp_path: Path) -> None:
    class Plug(Plugin):
        id = "plug"

        def register(self, r: PluginRegistrar) -> None:
            r.register_key(LiveHandle)  # persistent: a suspend must save it, and cannot
            r.register_phase_hook(
                Phase.RUN_START, lambda ctx: StateCommand().update(LiveHandle, Handle())
            )
            r.register_phase_hook(Phase.RUN_END, lambda ctx: ended.append(ctx.run.run_id))
            r.register_tool_gate(lambda ctx: Suspend("approve?"))

    ended: list[str] = []
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        model = ScriptedModel([InferenceResponse(tool_calls=(ToolCall("c1", "deploy"),))])
        agent = Agent([Plug()], model, {"deploy": lambda a, c: "ok"}, thread_store=store)
        result = await agent.run("t", ["go"])
        assert result.outcome == "failure"
        assert isinstance(result.error, StateError) and "t.handle" in str(result.error)
        assert ended == ["t:run-1"]  # RUN_END ran, and the thread was released
        stored = await store.load("t")
        assert stored is not None and stored.suspended is None


class Remind(ScheduledActionSpec[str]):
    key = "t.remind"
    phase = Phase.BEFORE_INFERENCE


class Reminders(StateKey[tuple[str, ...], str]):
    key = "t.reminders"

    @staticmethod
    def apply(value: tuple[str, ...], update: str) -> tuple[str, ...]:
        return (*value, update)


class Reminding(Plugin):
    id = "reminding"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Reminders)
        r.register_action(Remind, lambda text, ctx: StateCommand().update(Reminders, text))
        r.register_tool_gate(
            lambda ctx: Suspend("ok?") if ctx.tool_call and ctx.tool_call.name == "pay" else None
        )


@pytest.mark.parametrize("with_store", [False, True])
async def test_actions_waiting_for_a_later_phase_survive_suspend_and_resume(
    with_store: bool, tmp_path: Any
) -> None:
    from statekernel.stores import SqliteThreadStore

    def note(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
        return ToolOutput("noted", StateCommand().schedule(Remind, "check the invoice"))

    store = SqliteThreadStore(tmp_path / "t.db") if with_store else None
    model = ScriptedModel(
        [
            InferenceResponse(
                tool_calls=(ToolCall("n", "note", {}), ToolCall("p", "pay", {"amount": 1}))
            ),
            InferenceResponse(text="done"),
        ]
    )
    tools = {"note": note, "pay": lambda a, c: "paid"}
    agent = Agent([Reminding()], model, tools, thread_store=store)
    suspended = await agent.run("t", ["go"])
    assert suspended.outcome == "suspended" and suspended.snapshot.get(Reminders) == ()
    # Memory lives in the Agent's kernel; a store lets a brand-new Agent pick the run up.
    resumed = agent if store is None else Agent([Reminding()], model, tools, thread_store=store)
    done = await resumed.resume("t", "p", Decision.approve())
    assert done.outcome == "success"
    assert done.snapshot.get(Reminders) == ("check the invoice",)
    if store is not None:
        await store.close()


async def test_an_async_on_phase_callback_is_awaited_for_every_phase() -> None:
    seen: list[Phase | None] = []

    async def listen(run: Any, report: Any) -> None:
        await asyncio.sleep(0)
        seen.append(report.phase)

    calls = InferenceResponse("", (ToolCall("c1", "echo", {}),))
    agent = Agent([], ScriptedModel([calls]), {"echo": lambda a, c: "hi"}, on_phase=listen)
    result = await agent.run("t", ["go"])
    assert result.outcome == "success"
    assert seen[0] is Phase.RUN_START and seen[-1] is Phase.RUN_END
    assert Phase.TOOL_GATE in seen and Phase.AFTER_TOOL_EXECUTE in seen
    assert seen.count(Phase.STEP_START) == 2


async def test_the_stored_thread_document_keeps_its_key_names() -> None:
    """The facade's own keys are part of the stored format: a thread saved by one version
    must load in the next, so their key strings never change with the code's layout."""
    store = MemoryThreadStore()
    agent = Agent([], ScriptedModel([InferenceResponse(text="hello")]), thread_store=store)
    await agent.run("t", ["hi"])
    saved = await store.load("t")
    assert saved is not None
    records = [msgspec.msgpack.decode(entry.data[16:]) for entry in saved.records]  # [:16]: link
    ops = [op for record in records for op in record["ops"]]
    appended = [
        item["content"]
        for op in ops
        if op["key"] == "statekernel.messages"
        for item in msgspec.json.decode(op["update"])
    ]
    assert appended == ["hi", "hello"]


async def test_a_refused_input_leaves_no_thread_behind(tmp_path: Path) -> None:
    """Input the store could not keep is refused when the call is made, before a thread is
    claimed: no empty thread is listed, and a thread that exists is left as it was."""
    unkeepable: list[Any] = [
        "lone \ud800 surrogate",
        {"role": "user", "content": "\udfff"},
        Message("user", "fine", id="id \ud800"),
        [  # arguments a store gives back as a list, not as the tuple they were
            Message("assistant", "", tool_calls=(ToolCall("c1", "f", {"xy": (1, 2)}),)),
            Message("tool", "done", tool_call_id="c1"),
        ],
        42,  # no message at all
    ]
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        agent = Agent([], ScriptedModel([InferenceResponse("hi")] * 2), thread_store=store)
        for index, given in enumerate(unkeepable):
            with pytest.raises(StateValidationError, match="agent input") as refused:
                await agent.run(f"new-{index}", given)
            if index < 4:
                assert "no run started" in str(refused.value)
            with pytest.raises(StateValidationError, match="agent input"):
                agent.stream(f"new-{index}", given)  # refused before its first event
        deep = '{"a":' * 9_999 + "{}" + "}" * 9_999
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": deep}}
        with pytest.raises(ToolArgumentsTooDeep):
            await agent.run("deep", {"role": "assistant", "content": "", "tool_calls": [call]})
        assert await store.threads() == []
        await agent.run("kept", "hello")
        state = await store.load("kept")
        with pytest.raises(StateValidationError):
            await agent.run("kept", "again \ud800")
        assert await store.load("kept") == state  # not even a run ending was saved
        assert await store.threads() == ["kept"]
        again = await agent.run("kept", "again")
        assert again.outcome == "success"
        assert [m.content for m in again.messages] == ["hello", "hi", "again", "hi"]


async def test_a_parent_thread_id_no_store_can_keep_is_refused_at_the_call(
    tmp_path: Path,
) -> None:
    """Checked as a thread id is, with a store or without: no run starts, no thread is made,
    and the same agent goes on; so is an agent's name, saved with a suspended run."""
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        for thread_store in (store, None):
            model = ScriptedModel([InferenceResponse("hi")])
            agent = Agent([], model, thread_store=thread_store)
            for bad in ("p\ud800", "p\x00"):
                with pytest.raises(ValueError, match="^parent_thread_id 'p"):
                    await agent.run("t", "hello", parent_thread_id=bad)
                with pytest.raises(ValueError, match="^parent_thread_id 'p"):
                    agent.stream("t", "hello", parent_thread_id=bad)  # before its first event
                with pytest.raises(ValueError, match="^agent name 'p"):
                    Agent([], model, name=bad)
            assert await agent.kernel.threads() == [] and model.requests == []
            result = await agent.run("t", "hello", parent_thread_id="parent")
            assert result.outcome == "success"
            assert [m.content for m in result.messages] == ["hello", "hi"]
        assert await store.threads() == ["t"]
