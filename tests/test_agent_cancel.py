"""Stopping a run (cancel, outside cancellation, timeout) leaves its thread saved and free."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from journal_samples import Count, plugins
from samples import Ends, Hooks, answered, read

from statekernel import (
    Agent,
    Decision,
    InferenceRequest,
    InferenceResponse,
    Kernel,
    PhaseContext,
    Retention,
    ScriptedModel,
    StateCommand,
    StateError,
    Suspend,
    ToolCall,
    ToolCallStatus,
)
from statekernel.events import RunFinished
from statekernel.stores import SqliteThreadStore

# -- agent.cancel --------------------------------------------------------------------------


class Blocking:
    """A model whose first call never answers: a slow model call in flight, until it is
    cancelled (`abandoned`); later calls answer at once."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.abandoned = False

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        if not self.entered.is_set():
            self.entered.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.abandoned = True
                raise
        return InferenceResponse("answer")


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


# -- a model slow to leave its call --------------------------------------------------------


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


# -- an outside cancellation of the run's task ---------------------------------------------


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


# -- cancels and timeouts during a save ----------------------------------------------------


class CancellingStore(SqliteThreadStore):
    """Cancels the run's task while its `at`-th save is under way."""

    at = 0
    task: asyncio.Task[Any] | None = None
    saves = 0

    async def save(self, thread_id: str, save: Any, *, expected_position: int) -> None:
        self.saves += 1
        if self.saves == self.at and self.task is not None:
            asyncio.get_running_loop().call_soon(self.task.cancel)
            await asyncio.sleep(0)  # a save that waits (a big one, a busy file: threaded)
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
        assert await agent.pending("th") == ()
        result = await agent.run("th", ["again"])
        assert result.outcome == "success", result.error
        fresh = Agent([], ScriptedModel(), thread_store=store)
        assert (await fresh.kernel.verify("th")).ok
        final = await fresh.run("th", ["from a new agent"])
    assert final.outcome == "success" and answered(final.messages)


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


class ExpiringStore(SqliteThreadStore):
    """Makes the enclosing `asyncio.timeout` expire while its `at`-th save is under way."""

    at = 0
    saves = 0
    timeout: Any = None

    async def save(self, thread_id: str, save: Any, *, expected_position: int) -> None:
        self.saves += 1
        if self.saves == self.at and self.timeout is not None:
            self.timeout.reschedule(asyncio.get_running_loop().time())
            await asyncio.sleep(0)  # a save that waits (a big one, a busy file: threaded)
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


async def test_a_cancel_during_a_small_save_lands_the_save_first(tmp_path: Path) -> None:
    """A step's save to an idle SQLite file runs on the event loop's thread: a cancellation
    that arrives meanwhile cannot cut it short; it is raised once the save landed."""
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        kernel = Kernel(plugins(), thread_store=store)
        run = await kernel.start_run("t")
        await run.submit(StateCommand().update(Count, 1))
        await run.checkpoint()  # opens the file (on its thread)
        await run.submit(StateCommand().update(Count, 1))
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_soon(task.cancel)
        with pytest.raises(asyncio.CancelledError):
            await run.checkpoint()
        task.uncancel()
        stored = await store.load("t")
        assert stored is not None and stored.revision == 2
        assert run.saves == 2
        await run.abandon()


async def test_an_update_state_cancelled_during_its_save_lands_it_and_raises(
    tmp_path: Path,
) -> None:
    """The commit is in the store, and the caller still learns of the cancellation."""
    async with CancellingStore(tmp_path / "t.db") as store:
        kernel = Kernel(plugins(), thread_store=store)
        assert await kernel.update_state("t", StateCommand().update(Count, 1)) == 1
        store.at = store.saves + 1
        store.task = asyncio.ensure_future(
            kernel.update_state("t", StateCommand().update(Count, 2))
        )
        with pytest.raises(asyncio.CancelledError):
            await store.task
        store.task = None
        stored = await store.load("t")
        assert stored is not None and stored.revision == 2
        assert await kernel.update_state("t", StateCommand().update(Count, 4)) == 3
        assert await read(kernel, "t", Count) == 7
        assert (await kernel.verify("t")).ok


class PruneCancellingStore(SqliteThreadStore):
    """Cancels `task` while retention prunes the thread (after a save that landed)."""

    task: asyncio.Task[Any] | None = None

    async def prune(self, thread_id: str, *, before: int) -> None:
        if self.task is not None:
            asyncio.get_running_loop().call_soon(self.task.cancel)
            await asyncio.sleep(0)
        await super().prune(thread_id, before=before)


async def test_a_cancel_while_retention_prunes_after_a_save_keeps_the_save_noted(
    tmp_path: Path,
) -> None:
    async with PruneCancellingStore(tmp_path / "t.db") as store:
        kernel = Kernel(
            plugins(), thread_store=store, snapshot_every=2, retention=Retention(revisions=1)
        )
        run = await kernel.start_run("t")
        for _ in range(2):
            await run.submit(StateCommand().update(Count, 1))
        await run.checkpoint()  # a snapshot at 2: nothing older to prune yet
        for _ in range(2):
            await run.submit(StateCommand().update(Count, 1))
        store.task = asyncio.current_task()
        assert store.task is not None
        with pytest.raises(asyncio.CancelledError):
            await run.checkpoint()  # a snapshot at 4: retention prunes before 2
        store.task.uncancel()
        store.task = None
        assert run.saves == 2  # the run noted the save that landed
        stored = await store.load("t")
        assert stored is not None and stored.revision == 4
        await run.submit(StateCommand().update(Count, 1))
        await run.finish()  # its commits are not sent again: no conflict
        assert await read(kernel, "t", Count) == 5
        assert (await kernel.verify("t")).ok


async def test_a_suspend_cancelled_during_its_save_still_releases_the_run(tmp_path: Path) -> None:
    """The suspended run is in the store, so the run is over here: its thread can be resumed
    at once, and the caller still learns of the cancellation."""
    async with CancellingStore(tmp_path / "t.db") as store:
        kernel = Kernel(plugins(), thread_store=store)
        run = await kernel.start_run("t")
        await run.submit(StateCommand().update(Count, 3))
        store.at = store.saves + 1
        store.task = asyncio.ensure_future(run.suspend(b"waiting"))
        with pytest.raises(asyncio.CancelledError):
            await store.task
        store.task = None
        with pytest.raises(StateError, match="finished"):
            await run.submit(StateCommand().update(Count, 1))
        resumed, detail = await kernel.resume_run("t")
        assert detail == b"waiting"
        assert resumed.snapshot.get(Count) == 3
        await resumed.finish()
        assert (await kernel.verify("t")).ok
