"""Edges of the Agent found by review: failures, cancels and streams that must still leave
a thread a model API accepts, a finished tool's result that must never be lost, cancels
that must reach the run they name, and tool declarations that must just work."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import functools
import pickle
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pydantic
import pytest

from statekernel import (
    Agent,
    Decision,
    ExcludeTool,
    InferenceRequest,
    InferenceResponse,
    Message,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScriptedModel,
    StateCommand,
    StateError,
    Suspend,
    ToolCall,
    ToolCallStatus,
    ToolResult,
    enc_hook,
    tool,
)
from statekernel.events import RunFinished, ToolCallStarted
from statekernel.stores import SqliteThreadStore


class Hooks(Plugin):
    def __init__(self, id: str = "hooks", **by_phase: Any) -> None:
        self.id, self.by_phase = id, by_phase

    def register(self, r: PluginRegistrar) -> None:
        for name, hook in self.by_phase.items():
            if name == "gate":
                r.register_tool_gate(hook)
            else:
                r.register_phase_hook(Phase[name], hook)


def answered(messages: tuple[Message, ...]) -> bool:
    """Whether every tool call in `messages` has its result before the next message that is
    not a tool result: what model APIs require."""
    open_calls: set[str] = set()
    for message in messages:
        if message.role == "tool":
            open_calls.discard(message.tool_call_id or "")
            continue
        if open_calls:
            return False
        open_calls = {call.id for call in message.tool_calls}
    return not open_calls


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


async def test_a_tool_that_finished_keeps_its_result_when_a_streamed_run_is_cancelled() -> None:
    ran: list[str] = []

    async def slow(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        ran.append(arguments["q"])
        await asyncio.sleep(0.1)
        return "done:" + arguments["q"]

    calls = (ToolCall("c1", "slow", {"q": "a"}), ToolCall("c2", "slow", {"q": "b"}))
    agent = Agent([], ScriptedModel([InferenceResponse("", calls)]), {"slow": slow})

    async def consume() -> None:
        async for _ in agent.stream("t", ["hi"]):
            pass

    reading = asyncio.ensure_future(consume())
    while not ran:
        await asyncio.sleep(0.005)
    result = await agent.cancel("t")  # while the first tool runs
    await reading
    assert result.outcome == "cancelled" and ran == ["a"]
    statuses = [(r.call.id, r.status) for r in result.tool_results]
    assert statuses == [("c1", ToolCallStatus.SUCCEEDED), ("c2", ToolCallStatus.CANCELLED)]
    tool_messages = [(m.tool_call_id, m.content) for m in result.messages if m.role == "tool"]
    assert tool_messages == [("c1", "done:a"), ("c2", "cancelled")]


class Blocking:
    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        if not self.entered.is_set():
            self.entered.set()
            await asyncio.Event().wait()
        return InferenceResponse("answer")


async def test_a_run_cancelled_twice_from_outside_still_holds_its_turn_until_it_ended() -> None:
    ended: list[int] = []

    async def slow_end(ctx: PhaseContext) -> None:
        await asyncio.sleep(0.1)
        ended.append(1)

    model = Blocking()
    agent = Agent([Hooks(RUN_END=slow_end)], model)
    running = asyncio.ensure_future(agent.run("t", ["go"]))
    await model.entered.wait()
    running.cancel()
    await asyncio.sleep(0.02)
    running.cancel()  # again, during the clean end (anyio and Starlette do this)
    with pytest.raises(asyncio.CancelledError):
        await running
    assert ended == [1]  # the clean end finished
    result = await agent.run("t", ["next"])
    assert result.outcome == "success" and [m.content for m in result.messages][:2] == [
        "go",
        "next",
    ]


async def test_a_cancel_right_after_a_run_starts_cancels_that_run(tmp_path: Path) -> None:
    model = Blocking()
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        agent = Agent([], model, thread_store=store)
        running = asyncio.ensure_future(agent.run("t", ["hi"]))
        await asyncio.sleep(0)  # it has its turn, and is loading the thread
        cancelled = await asyncio.wait_for(agent.cancel("t"), 10)
        assert cancelled.outcome == "cancelled" and (await running).outcome == "cancelled"


async def test_cancel_from_inside_the_run_stops_it_without_waiting_for_itself() -> None:
    agent: Agent

    async def stop(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        await agent.cancel(ctx.run.thread_id)
        return "unreachable"

    model = ScriptedModel([InferenceResponse("", (ToolCall("c1", "stop", {}),))])
    agent = Agent([], model, {"stop": stop})
    result = await asyncio.wait_for(agent.run("t", ["go"]), 10)
    assert result.outcome == "cancelled"
    (message,) = [m for m in result.messages if m.role == "tool"]
    assert "cannot be waited for from inside" in message.content


async def test_an_impatient_cancel_does_not_break_the_others() -> None:
    started = asyncio.Event()

    async def slow(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        started.set()
        await asyncio.sleep(0.2)
        return "done"

    model = ScriptedModel([InferenceResponse("", (ToolCall("c1", "slow", {}),))])
    agent = Agent([], model, {"slow": slow})
    events: list[Any] = []

    async def consume() -> None:
        async for event in agent.stream("t", ["go"]):
            events.append(event)

    reading = asyncio.ensure_future(consume())
    await started.wait()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(agent.cancel("t"), 0.01)
    result = await agent.cancel("t")
    await reading
    assert result.outcome == "cancelled" and isinstance(events[-1], RunFinished)


async def test_a_cancel_during_a_resume_that_would_suspend_again_ends_the_run(
    tmp_path: Path,
) -> None:
    ended: list[int] = []
    started = asyncio.Event()

    async def pay(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        started.set()
        await asyncio.sleep(0.1)
        return "paid"

    def gate(ctx: PhaseContext) -> Suspend | None:
        return Suspend("approve?") if ctx.tool_call and ctx.tool_call.name == "pay" else None

    calls = (ToolCall("c1", "pay", {"n": [1]}), ToolCall("c2", "pay", {"n": [2]}))
    model = ScriptedModel([InferenceResponse("", calls)])
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        plugins = [Hooks(gate=gate, RUN_END=lambda ctx: ended.append(1))]
        agent = Agent(plugins, model, {"pay": pay}, thread_store=store)
        suspended = await agent.run("t", ["pay both"])
        assert [p.id for p in suspended.pending] == ["c1", "c2"]
        assert type(suspended.pending[0].arguments["n"]) is list  # plain data to edit
        resuming = asyncio.ensure_future(
            agent.resume("t", "c1", Decision.approve(suspended.pending[0].arguments))
        )
        await started.wait()
        result = await agent.cancel("t")
        assert (await resuming).outcome == result.outcome == "cancelled"
        assert ended == [1]
        assert [(r.call.id, r.status.value) for r in result.tool_results] == [
            ("c1", "succeeded"),
            ("c2", "cancelled"),
        ]
        again = await agent.run("t", ["next"])  # not suspended any more
    assert again.outcome == "success" and answered(again.messages)


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


class CancellingStore(SqliteThreadStore):
    """Cancels the run's task while its `at`-th save is under way."""

    at = 0
    task: asyncio.Task[Any] | None = None
    saves = 0

    async def save(self, thread_id: str, save: Any, *, expected_position: int) -> None:
        self.saves += 1
        if self.saves == self.at and self.task is not None:
            asyncio.get_running_loop().call_soon(self.task.cancel)
        await super().save(thread_id, save, expected_position=expected_position)


@pytest.mark.parametrize("at", [1, 2, 3])
async def test_a_cancel_during_a_save_leaves_the_thread_as_the_store_has_it(
    tmp_path: Path, at: int
) -> None:
    async with CancellingStore(tmp_path / "t.db") as store:
        store.at = at
        model = ScriptedModel([InferenceResponse("a", (ToolCall("c1", "t", {}),))])
        agent = Agent([], model, {"t": lambda a, c: "ok"}, thread_store=store)
        store.task = asyncio.ensure_future(agent.run("th", ["hello"]))
        with contextlib.suppress(asyncio.CancelledError):
            await store.task
        store.task = None
        # No false "interrupted" call, no false conflict: the thread just goes on.
        with pytest.raises(StateError, match="no suspended run|not suspended|has no"):
            await agent.pending("th")
        result = await agent.run("th", ["again"])
        assert result.outcome == "success", result.error
        fresh = Agent([], ScriptedModel(), thread_store=store)
        assert (await fresh.kernel.verify("th")).ok
        final = await fresh.run("th", ["from a new agent"])
    assert final.outcome == "success" and answered(final.messages)


def test_tool_methods_partials_and_any_parameter_name_work() -> None:
    class Shop:
        def __init__(self) -> None:
            self.sold: list[int] = []

        @tool
        def sell(self, n: int) -> str:
            """Sell n items."""
            self.sold.append(n)
            return f"sold {n}"

    shop = Shop()
    assert shop.sell.spec.parameters["required"] == ["n"]  # no `self` for the model
    assert shop.sell({"n": "3"}, None) == "sold 3" and shop.sold == [3]

    def search(index: str, query: str) -> str:
        """Search an index."""
        return f"{index}:{query}"

    partial = tool(name="search_docs")(functools.partial(search, "docs"))
    assert partial.spec.description == "Search an index."
    assert partial({"query": "x"}, None) == "docs:x"

    @tool
    def optional_context(x: int, ctx: PhaseContext | None = None) -> int:
        """Optional context."""
        return x

    assert list(optional_context.spec.parameters["properties"]) == ["x"]

    namespace: dict[str, Any] = {}
    exec(
        "def f(model_config: int, _private: int, schema: int) -> int:\n    '''F.'''\n"
        "    return model_config + _private + schema\n",
        namespace,
    )
    odd = tool(namespace["f"])
    assert list(odd.spec.parameters["properties"]) == ["model_config", "_private", "schema"]
    assert odd({"model_config": 1, "_private": 2, "schema": 3}, None) == 6


def test_a_docstring_without_a_blank_line_before_args_describes_only_the_tool() -> None:
    @tool
    def add(x: int, y: int) -> int:
        """Add numbers.
        Args:
            x: first
            y: second
        """
        return x + y

    assert add.spec.description == "Add numbers."
    assert add.spec.parameters["properties"]["y"]["description"] == "second"


def test_frozen_calls_copy_pickle_and_hash_as_themselves() -> None:
    call = ToolCall("c", "send", {"to": ["a"], "meta": {"k": [1]}})
    for again in (copy.deepcopy(call), copy.copy(call), pickle.loads(pickle.dumps(call))):
        assert again == call
        with pytest.raises(TypeError, match="frozen"):
            again.arguments["to"].append("b")
    message = Message("assistant", "", tool_calls=(call,))
    assert hash(message) == hash(Message("assistant", "", tool_calls=(call,)))


async def test_unsaved_is_empty_once_the_run_end_saved_even_if_it_failed() -> None:
    def broken_end(ctx: PhaseContext) -> None:
        raise RuntimeError("RUN_END hook broke")

    agent = Agent([Hooks(RUN_END=broken_end)], ScriptedModel())
    result = await agent.run("t", ["hello"])
    assert result.outcome == "failure" and result.unsaved == ()
    assert result.messages[0].content == "hello"


async def test_leaving_a_stream_before_its_first_event_cancels_nothing_it_did_not_start() -> None:
    agent = Agent([], ScriptedModel())
    stream = agent.stream("t", ["hi"])
    first = await stream.__anext__()
    assert not isinstance(first, ToolCallStarted)
    await stream.aclose()  # type: ignore[attr-defined]
    assert (await agent.run("t", ["again"])).outcome == "success"


# -- cancellations that arrive during a save, a RUN_END, a tool, or a stream's close ------


class ExpiringStore(SqliteThreadStore):
    """Makes the enclosing `asyncio.timeout` expire while its `at`-th save is under way."""

    at = 0
    saves = 0
    timeout: Any = None

    async def save(self, thread_id: str, save: Any, *, expected_position: int) -> None:
        self.saves += 1
        if self.saves == self.at and self.timeout is not None:
            self.timeout.reschedule(asyncio.get_running_loop().time())
        await super().save(thread_id, save, expected_position=expected_position)


@pytest.mark.parametrize("at", [1, 2])
async def test_a_timeout_during_a_save_is_a_timeout_and_nothing_is_left_pending(
    tmp_path: Path, at: int
) -> None:
    async with ExpiringStore(tmp_path / "t.db") as store:
        store.at = at
        agent = Agent([], ScriptedModel([InferenceResponse("answer")]), thread_store=store)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(None) as timeout:
                store.timeout = timeout
                await agent.run("t", ["hi"])
        store.timeout = None
        current = asyncio.current_task()
        assert current is not None and current.cancelling() == 0
        await asyncio.sleep(0)  # no stray cancellation arrives later
        result = await agent.run("t", ["again"])
    assert result.outcome == "success" and answered(result.messages)


async def test_a_cancel_during_the_save_before_a_tool_keeps_the_tool_from_running(
    tmp_path: Path,
) -> None:
    ran: list[str] = []
    model = ScriptedModel([InferenceResponse("", (ToolCall("c1", "pay", {}),))])
    async with CancellingStore(tmp_path / "t.db") as store:
        store.at = 1  # the first save: the call, saved as in flight just before the tool
        agent = Agent(
            [], model, {"pay": lambda a, c: ran.append("pay") or "paid"}, thread_store=store
        )
        store.task = asyncio.ensure_future(agent.run("t", ["hi"]))
        with pytest.raises(asyncio.CancelledError):
            await store.task
        store.task = None
        assert ran == []
        again = await agent.run("t", ["again"])
    (message,) = [m for m in again.messages if m.role == "tool"]
    assert message.content == "cancelled"


async def test_an_outside_cancel_during_run_end_still_leaves_the_thread_saved_and_free() -> None:
    log: list[str] = []

    async def at_end(ctx: PhaseContext) -> None:
        log.append("started")
        await asyncio.sleep(0.05)  # cut short: asyncio delivers the cancellation here
        log.append("finished")

    agent = Agent([Hooks(RUN_END=at_end)], ScriptedModel([InferenceResponse("answer")]))
    running = asyncio.ensure_future(agent.run("t", ["hi"]))
    while not log:
        await asyncio.sleep(0)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert log == ["started"]
    result = await agent.run("t", ["again"])
    assert [m.content for m in result.messages][:3] == ["hi", "answer", "again"]


async def test_a_tool_cut_short_from_outside_is_recorded_as_such() -> None:
    started = asyncio.Event()

    async def slow(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        started.set()
        await asyncio.sleep(10)
        return "unreachable"

    model = ScriptedModel([InferenceResponse("", (ToolCall("c1", "slow", {}),))])
    agent = Agent([], model, {"slow": slow})
    running = asyncio.ensure_future(agent.run("t", ["go"]))
    await started.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    result = await agent.run("t", ["what happened?"])
    (message,) = [m for m in result.messages if m.role == "tool"]
    assert message.content == "cancelled while the tool ran: it may have had effects"


async def test_a_consumer_cancelled_while_closing_a_stream_stays_cancelled() -> None:
    async def slow_end(ctx: PhaseContext) -> None:
        await asyncio.sleep(0.3)

    agent = Agent([Hooks(RUN_END=slow_end)], ScriptedModel([InferenceResponse("answer")]))
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            async with contextlib.aclosing(agent.stream("t", ["hi"])) as events:
                async for _ in events:
                    break


async def test_an_interrupt_escaping_a_tool_lets_the_thread_go() -> None:
    class Stop(BaseException):
        pass

    def stop(arguments: dict[str, Any], ctx: PhaseContext) -> None:
        raise Stop

    model = ScriptedModel([InferenceResponse("", (ToolCall("c1", "stop", {}),))])
    agent = Agent([], model, {"stop": stop})
    with pytest.raises(Stop):
        await agent.run("t", ["go"])
    assert (await agent.run("t", ["again"])).outcome == "success"


def test_tool_results_copy_and_pickle_and_can_be_held_in_state() -> None:
    call = ToolCall("c", "t", {"a": [1]})
    result = ToolResult(call, ToolCallStatus.SUCCEEDED, result={"rows": [1, 2]})
    assert copy.deepcopy(result) == result == pickle.loads(pickle.dumps(result))
    assert copy.copy(result) is result


def test_only_methods_bind_to_their_instance() -> None:
    @tool
    def lookup(q: str) -> str:
        """Look up."""
        return f"found {q}"

    class Box:
        find = lookup  # a tool kept as a class attribute: not a method

        @tool
        @staticmethod
        def add(a: int, b: int) -> int:
            """Add."""
            return a + b

    assert Box().find({"q": "x"}, None) == "found x"
    assert Box().add({"a": 1, "b": 2}, None) == 3
    renamed = tool(name="search")(lookup)
    assert (renamed.name, renamed.spec.name) == ("search", "search")


def test_a_description_in_annotated_stands() -> None:
    @tool
    def count(n: Annotated[int, pydantic.Field(description="how many")]) -> int:
        """Count."""
        return n

    assert count.spec.parameters["properties"]["n"]["description"] == "how many"


# -- the run's own task, context and hook pairs, whatever stops it ------------------------


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


class SlowToLeave:
    """A model that takes a while to clean up when its call is cancelled."""

    def __init__(self, reaction: str = "reraise") -> None:
        self.started = asyncio.Event()
        self.reaction = reaction

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        self.started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.02)
            if self.reaction == "other":
                raise RuntimeError("the client closed") from None
            raise
        raise AssertionError("unreachable")


async def test_a_timeout_during_a_cancel_of_the_model_call_is_still_a_timeout() -> None:
    model = SlowToLeave()
    agent = Agent([], model)
    timeouts: list[Any] = []

    async def caller() -> str:
        try:
            async with asyncio.timeout(None) as timeout:
                timeouts.append(timeout)
                result = await agent.run("t", ["hi"])
            return f"returned {result.outcome}"
        except TimeoutError:
            return "TimeoutError"

    calling = asyncio.ensure_future(caller())
    await model.started.wait()
    cancelling = asyncio.ensure_future(agent.cancel("t"))
    await asyncio.sleep(0.005)  # the model is cleaning up after the cancel request
    timeouts[0].reschedule(asyncio.get_running_loop().time())
    assert await calling == "TimeoutError"
    assert (await cancelling).outcome == "cancelled"


async def test_a_model_that_turns_the_cancel_into_an_error_is_still_cancelled() -> None:
    model = SlowToLeave("other")
    agent = Agent([], model)
    running = asyncio.ensure_future(agent.run("t", ["hi"]))
    await model.started.wait()
    assert (await agent.cancel("t")).outcome == "cancelled"
    assert (await running).outcome == "cancelled"


async def test_a_cancel_during_before_tool_execute_lets_the_call_finish_its_phases() -> None:
    log: list[str] = []
    in_before = asyncio.Event()

    async def before(ctx: PhaseContext) -> None:
        log.append("before")
        in_before.set()
        await asyncio.sleep(0.01)

    def after(ctx: PhaseContext) -> None:
        assert ctx.tool_result is not None
        log.append(f"after {ctx.tool_result.status.name}")

    calls = (ToolCall("c1", "pay", {}),)
    agent = Agent(
        [Hooks(BEFORE_TOOL_EXECUTE=before, AFTER_TOOL_EXECUTE=after)],
        ScriptedModel([InferenceResponse("", calls)]),
        {"pay": lambda a, c: log.append("tool") or "paid"},
    )
    running = asyncio.ensure_future(agent.run("t", ["hi"]))
    await in_before.wait()
    result = await agent.cancel("t")
    await running
    assert result.outcome == "cancelled"
    assert log == ["before", "tool", "after SUCCEEDED"]  # BEFORE is always paired with AFTER
    assert [m.content for m in result.messages if m.role == "tool"] == ["paid"]
