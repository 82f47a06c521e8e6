"""The Agent facade: the whole phase loop behind `await agent.run(thread_id, messages)`.

`Kernel` and `Run` give full control, one phase at a time. Most users want the loop itself:
RUN_START, then steps of STEP_START → BEFORE_INFERENCE → model → AFTER_INFERENCE → per tool
call TOOL_GATE → BEFORE_TOOL_EXECUTE → tool → AFTER_TOOL_EXECUTE → STEP_END, then RUN_END,
with a checkpoint at every STEP_END, suspension when a gate says Suspend, and `resume` from
any process that shares the ThreadStore. Defaults are sensible; every part can be overridden.

The facade keeps its own state in keys under the reserved prefix `statekernel.`: the thread's
message history (a thread key) and the life of each tool call of the run (a run key).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal

import attrs
import msgspec

from .._durable.store import ThreadStore
from .._durable.threads import SNAPSHOT_EVERY
from .._engine.plugin import Plugin
from .._errors import RevisionConflict, StateError, cause_text
from .._host.runtime import Kernel, PhaseListener, Run, Tool
from .._profile.store import ProfileStore
from .._values.codec import as_json_data
from .._values.commands import StateCommand
from .._values.dead_letters import DeadLetter, DeadLetters
from .._values.loop_actions import RequestOverrides, StepRequest
from .._values.messages import Message, MessageLike, as_message, is_one_message
from .._values.model import InferenceRequest, InferenceResponse, Model
from .._values.phases import Phase
from .._values.tools import ToolCall, ToolCallStatus, ToolResult, ToolSpec
from .._values.vector import Vector
from ..events import (
    Event,
    ModelResponded,
    TextDelta,
    ToolCallEnded,
    ToolCallStarted,
)
from .event_stream import stream
from .facade_state import CallState, FacadeState, History, ToolCalls
from .function_tools import spec_of
from .run_control import CancelRequested, RunControl
from .run_result import Outcome, PendingCall, RunResult
from .suspension import INTERRUPTED, NOT_STARTED, Decision, Suspension
from .suspension import pending as _pending
from .turns import Turns

logger = logging.getLogger("statekernel")


def is_idempotent(tool: Tool) -> bool:
    """Whether `tool` says it may safely run twice (`tool.idempotent = True`)."""
    return getattr(tool, "idempotent", False) is True


class Agent:
    """An agent: plugins, a model and tools, driven through the phase loop.

    No store given: state lives in memory, like `Kernel`. Pass a `thread_store` (and a
    `profile_store`) to persist; the demo and the command line use SQLite files.
    `tools` is a mapping name → tool, or an iterable of `@statekernel.tool` functions.
    `system_prompt` is placed first in every request. `on_phase(run, report)` is called
    after every phase, for tracing.
    """

    def __init__(
        self,
        plugins: Iterable[Plugin],
        model: Model,
        tools: Mapping[str, Tool] | Iterable[Tool] | None = None,
        *,
        system_prompt: str | None = None,
        profile_store: ProfileStore | None = None,
        thread_store: ThreadStore | None = None,
        max_steps: int = 25,
        name: str = "default",
        max_phase_rounds: int = 16,
        restore_errors: Literal["raise", "skip"] = "raise",
        unknown_keys: Literal["keep", "refuse"] = "keep",
        snapshot_every: int = SNAPSHOT_EVERY,
        on_phase: PhaseListener | None = None,
    ) -> None:
        if not callable(model):
            raise TypeError(f"model must be an async callable (request) -> response, got {model!r}")
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        self.kernel = Kernel(
            [FacadeState(), *plugins],
            profile_store=profile_store,
            thread_store=thread_store,
            max_phase_rounds=max_phase_rounds,
            restore_errors=restore_errors,
            unknown_keys=unknown_keys,
            snapshot_every=snapshot_every,
        )
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt must be a string, got {system_prompt!r}")
        self.model = model
        self.tools: dict[str, Tool] = _named_tools(tools)
        self.system_prompt = system_prompt
        self._specs: dict[str, tuple[Tool, ToolSpec]] = {}
        self._turns = Turns()
        self.max_steps = max_steps
        self.name = name
        self.on_phase = on_phase

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is told of every tool, in the order given."""
        specs = []
        for name, tool in self.tools.items():
            known = self._specs.get(name)
            if known is None or known[0] is not tool:
                known = self._specs[name] = (tool, spec_of(name, tool))
            specs.append(known[1])
        return tuple(specs)

    async def run(
        self,
        thread_id: str,
        messages: Iterable[MessageLike] | MessageLike = (),
        *,
        parent_thread_id: str | None = None,
        active_hook_filter: Iterable[str] = (),
        retry: Iterable[DeadLetter | str] | DeadLetter | str = (),
    ) -> RunResult:
        """Append `messages` and run the loop to its end. Each message may be a `Message`, a
        string (a user message), a `("user", "hi")` tuple or an OpenAI-style dict; one of
        these alone is one message.

        `retry` names dead letters of the thread (`DeadLetter`s or their ids, one or many;
        see `dead_letters`) whose actions this run schedules again, before RUN_START: each
        runs in its phase, as its next attempt. A letter the thread does not hold is a
        `StateError` before anything runs.

        A second call on a thread this agent is running waits for its turn."""
        incoming = _incoming(messages)
        options = _RunOptions(parent_thread_id, tuple(active_hook_filter), _letters(retry))
        return await self._start(thread_id, incoming, options, RunControl())

    def stream(
        self,
        thread_id: str,
        messages: Iterable[MessageLike] | MessageLike = (),
        *,
        parent_thread_id: str | None = None,
        active_hook_filter: Iterable[str] = (),
        retry: Iterable[DeadLetter | str] | DeadLetter | str = (),
    ) -> AsyncIterator[Event]:
        """The same run as `run`, as an async iterator of `statekernel.events`, in the order
        things happen, ending with `RunFinished(result)`.

        The run keeps pace with the consumer: it waits at each phase, model answer and tool
        call until the events so far were taken. Stopping early (`break`, or closing the
        iterator) cancels the run cleanly at the next such point: the state is as last
        committed, saved, and RUN_END ran. Close it promptly with
        `contextlib.aclosing(agent.stream(...))`.
        """
        incoming = _incoming(messages)
        options = _RunOptions(parent_thread_id, tuple(active_hook_filter), _letters(retry))
        return stream(lambda control: self._start(thread_id, incoming, options, control))

    async def _start(
        self,
        thread_id: str,
        incoming: tuple[Message, ...],
        options: _RunOptions,
        control: RunControl,
    ) -> RunResult:
        async with self._turns.turn(thread_id, control):
            run = await self.kernel.start_run(
                thread_id,
                agent=self.name,
                parent_thread_id=options.parent_thread_id,
                active_hook_filter=options.active_hook_filter,
            )
            try:
                for letter in options.retry:
                    await run.retry(letter)
            except BaseException:
                await run.abandon()
                raise
            driver = _Driver(self, run, control, steps=0)
            driver.incoming = incoming

            async def begin() -> RunResult:
                await driver.append(*incoming)
                await run.run_phase(Phase.RUN_START, messages=driver.history())
                return await driver.loop()

            return await self._drive(driver, begin)

    async def resume(self, thread_id: str, call_id: str, decision: Decision) -> RunResult:
        """Continue a suspended run with an outside `decision` on its call `call_id`."""
        if not isinstance(decision, Decision):
            raise TypeError(
                f"decision must be Decision.approve(...), Decision.deny(...) or "
                f"Decision.result(...), got {decision!r}"
            )
        async with self._turns.turn(thread_id) as control:
            run, detail = await self.kernel.resume_run(thread_id)
            suspension = Suspension.decode(detail)
            call = next((p for p in suspension.pending if p.id == call_id), None)
            if call is None:
                await run.abandon()
                waiting = [p.id for p in suspension.pending]
                raise StateError(
                    f"thread {thread_id!r} has no suspended call {call_id!r}; the calls "
                    f"waiting for a decision are {waiting}. Nothing was changed."
                )
            driver = _Driver(self, run, control, steps=suspension.step)
            driver.resumed(suspension)

            async def carry_on() -> RunResult:
                remaining = tuple(p for p in suspension.pending if p.id != call_id)
                still = await driver.settle(call, decision, remaining)
                if still is not None:
                    remaining = (still, *remaining)
                remaining = await driver.rerun_idempotent(remaining)
                if remaining:
                    return await driver.suspend(remaining)
                await driver.end_step()
                return await driver.loop()

            return await self._drive(driver, carry_on)

    async def dead_letters(self, thread_id: str) -> tuple[DeadLetter, ...]:
        """The dead letters the thread last saved (its failed actions waiting for a retry),
        oldest first; retry them with `agent.run(thread_id, retry=...)`."""
        held = await self.kernel.read_stored(thread_id, DeadLetters)
        return () if held is None else tuple(held)

    async def pending(self, thread_id: str) -> tuple[PendingCall, ...]:
        """The calls the thread's suspended run waits on, with their tickets; changes nothing.

        After a crash this says what came back: a call whose tool was running has the ticket
        `"interrupted"` (its outcome is unknown: decide with `resume`), one the model asked
        for beside it and never started has `"not started"`. Raises `StateError` when the
        thread has no suspended run.
        """
        async with self._turns.turn(thread_id):
            run, detail = await self.kernel.resume_run(thread_id)
            await run.abandon()
            return Suspension.decode(detail).pending

    async def cancel(self, thread_id: str) -> RunResult:
        """Cancel the thread's run: a run in progress in this agent stops at its next safe
        point (the phase in flight finishes, a model call is abandoned, a running tool
        completes), a suspended one has its pending calls failed as Cancelled. Either way
        RUN_END runs and everything committed is saved; returns how the run ended."""
        live = self._turns.live(thread_id)
        if live is not None:
            live.request_cancel()
            if live.task is asyncio.current_task():
                raise StateError(
                    f"agent.cancel({thread_id!r}) was called from inside the run it cancels (a "
                    f"tool or hook of it): the run stops at its next safe point, but it cannot "
                    f"be waited for from inside. Return from the tool or hook instead."
                )
            ended = await live.ended()
            if ended is not None:
                return ended
            # That run ended before it began (a suspended thread, say): see below.
        async with self._turns.turn(thread_id) as control:
            run, detail = await self.kernel.resume_run(thread_id)
            suspension = Suspension.decode(detail)
            driver = _Driver(self, run, control, steps=suspension.step)

            async def cancel_pending() -> RunResult:
                for pending in suspension.pending:
                    call = ToolCall(pending.id, pending.name, dict(pending.arguments))
                    result = ToolResult(call, ToolCallStatus.CANCELLED, error="cancelled")
                    await driver.record(result)
                return await driver.end("cancelled")

            return await self._drive(driver, cancel_pending)

    async def _drive(self, driver: _Driver, body: Callable[[], Awaitable[RunResult]]) -> RunResult:
        """Run `body` as this thread's live run: a failure, a cancel request and an outside
        cancellation each end the run cleanly (RUN_END, the last committed state saved)."""
        thread_id = driver.run.identity.thread_id
        try:
            try:
                result = await body()
            except CancelRequested:
                result = await driver.cancelled()
            except RevisionConflict as conflict:
                result = await driver.fail(_for_agent_users(conflict, thread_id))
            except Exception as error:
                result = await driver.fail(error)
        except asyncio.CancelledError:
            # Cancelled from outside (a task.cancel(), a server dropping the request): end
            # the run cleanly all the same, even if cancelled again meanwhile, then let the
            # cancellation go on. The thread's turn is held until then.
            cleanup = asyncio.ensure_future(driver.cancelled())
            while not cleanup.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(cleanup)
            driver.control.conclude(cleanup.result())
            raise
        except BaseException:
            # KeyboardInterrupt, SystemExit: nothing more may run, but the thread is let go
            # (as last saved), so that this agent can run it again.
            await driver.run.abandon()
            raise
        driver.control.conclude(result)
        return result


class _Driver:
    """The loop for one run: owns the step count and the message bookkeeping; its control
    (`RunControl`) holds the events of a streamed run and the cancel request."""

    def __init__(self, agent: Agent, run: Run, control: RunControl, *, steps: int) -> None:
        self.agent = agent
        self.run = run
        if agent.on_phase is not None:
            run.add_phase_listener(agent.on_phase)
        control.watch(run)
        self.steps = steps
        self.offered: frozenset[str] = frozenset(agent.tools)
        self.results: list[ToolResult] = []
        self.unanswered: dict[str, ToolCall] = {}  # calls in the history without a result
        self.running: str | None = None  # the id of the call whose tool is running
        self._seen: tuple[Vector[Message] | None, tuple[Message, ...]] = (None, ())
        self.control = control
        self.incoming: tuple[Message, ...] = ()  # what `run` was given: unsaved until a save

    def resumed(self, suspension: Suspension) -> None:
        """Carry on a suspended step: the tools it offered, and the calls it has yet to
        answer."""
        if suspension.offered is not None:
            self.offered = frozenset(suspension.offered)
        self.unanswered = {p.id: ToolCall(p.id, p.name, p.arguments) for p in suspension.pending}

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Call the model (streaming its text deltas as events, if it streams); a cancel
        request abandons the call."""
        model = self.agent.model
        streams = getattr(model, "streams", False) is True
        answer: Awaitable[Any] = self._streamed(model, request) if streams else model(request)
        response = await self.control.abandonable(answer)
        if not isinstance(response, InferenceResponse):
            raise TypeError(f"the model must return an InferenceResponse, got {response!r}")
        return response

    async def _streamed(self, model: Any, request: InferenceRequest) -> Any:
        response: Any = None
        async for chunk in model.stream(request):
            if isinstance(chunk, str):
                self.control.emit(TextDelta(chunk))
            else:
                response = chunk
        return response

    async def cancelled(self) -> RunResult:
        """End the run as cancelled: each call in the history that has no result yet gets a
        Cancelled one (so the history stays one a model API accepts), then RUN_END."""
        self.control.end()
        if self.run.finished:
            return self._result("cancelled")
        try:
            running = "cancelled while the tool ran: it may have had effects"
            await self.answer_unanswered(ToolCallStatus.CANCELLED, "cancelled", running)
            await self._finish()
        except Exception as error:
            logger.warning(
                "run %r: ending it as cancelled failed: %s", self.run.identity.run_id, error
            )
            if not self.run.finished:
                await self.run.abandon()
            return self._result("cancelled", error=error)
        return self._result("cancelled")

    def _runs(self, call: ToolCall) -> None:
        self.running = call.id  # left set if the call is cut short: see answer_unanswered

    async def answer_unanswered(self, status: ToolCallStatus, idle: str, running: str) -> None:
        """Give each call in the history that has no result yet one, so that the history
        stays one a model API accepts: `status` with the text `idle`, or `running` for the
        call whose tool was allowed to run when the run stopped (it may have had effects)."""
        for call in list(self.unanswered.values()):
            error = running if call.id == self.running else idle
            await self.record(ToolResult(call, status, error=error))

    def history(self) -> tuple[Message, ...]:
        current = self.run.snapshot.get(History)
        if current is not self._seen[0]:
            self._seen = (current, current.totuple())
        return self._seen[1]

    async def append(self, *messages: Message) -> None:
        if not messages:
            return
        base = len(self.run.snapshot.get(History))
        prefix = self.run.identity.run_id
        stamped = tuple(
            m if m.id is not None else msgspec.structs.replace(m, id=f"{prefix}:m{base + i}")
            for i, m in enumerate(messages)
        )
        await self.run.submit(StateCommand().update(History, stamped))

    async def loop(self) -> RunResult:
        run = self.run
        while self.steps < self.agent.max_steps:
            self.steps += 1
            await self.control.safe_point()
            await run.run_phase(Phase.STEP_START, messages=self.history())
            await run.run_phase(Phase.BEFORE_INFERENCE, messages=self.history())
            request = await self.request()
            response = await self.infer(request)
            await self.append(*request.transcript)
            self.control.emit(ModelResponded(response))
            await self.control.safe_point()
            await run.run_phase(Phase.AFTER_INFERENCE, messages=self.history(), response=response)
            await self.append(Message("assistant", response.text, tool_calls=response.tool_calls))
            self.unanswered = {call.id: call for call in response.tool_calls}
            if not response.tool_calls:
                await self.end_step()
                return await self.end("success")
            pending = await self.call_tools(response.tool_calls)
            if pending:
                return await self.suspend(pending)
            await self.end_step()
        raise StateError(
            f"max_steps ({self.agent.max_steps}) reached without a final answer; raise "
            f"max_steps or check why the model keeps calling tools."
        )

    async def request(self) -> InferenceRequest:
        """This step's request: the tools on offer and the model parameters as the step's
        loop actions left them (then cleared: they hold for this step only), shaped by the
        request transforms, with the system prompt first."""
        overrides = self.run.snapshot.get(StepRequest)
        if overrides != _NO_OVERRIDES:
            await self.run.submit(StateCommand().clear(StepRequest))
        specs = tuple(s for s in self.agent.tool_specs() if overrides.offers(s.name))
        self.offered = frozenset(spec.name for spec in specs)
        request = InferenceRequest(self.history(), specs, overrides.params)
        request = await self.run.shape_request(request)
        if self.agent.system_prompt is not None:
            system = Message("system", self.agent.system_prompt)
            request = request.replace(messages=(system, *request.messages))
        return request  # type: ignore[no-any-return]

    async def call_tools(self, calls: tuple[ToolCall, ...]) -> tuple[PendingCall, ...]:
        command = StateCommand()
        for call in calls:
            command.update(ToolCalls, CallState(call.id, call.name, ToolCallStatus.NEW))
        await self.run.submit(command)
        pending: list[PendingCall] = []
        for index, call in enumerate(calls):
            await self.control.safe_point()
            self.control.emit(ToolCallStarted(call))
            tool = self.agent.tools.get(call.name)
            if tool is None or call.name not in self.offered:
                available = ", ".join(sorted(self.offered)) or "none"
                known = "not offered in this step" if tool is not None else "unknown"
                error = f"{known} tool {call.name!r}; available tools: {available}"
                await self.record(ToolResult(call, ToolCallStatus.FAILED, error=error))
                continue
            await self._mark(call, ToolCallStatus.RUNNING)
            later = tuple(_pending(c, NOT_STARTED) for c in calls[index + 1 :])
            still = await self._run_call(call, tool, tuple(pending), later)
            if still is not None:
                pending.append(still)
        return tuple(pending)

    async def _run_call(
        self,
        call: ToolCall,
        tool: Tool,
        waiting: tuple[PendingCall, ...],
        later: tuple[PendingCall, ...] = (),
    ) -> PendingCall | None:
        """One call through its gate and, if allowed, the tool; returns it as pending if
        a gate suspended it. A non-idempotent tool is saved as in flight just before it
        runs, and its outcome is saved right after it is recorded, so that no crash can
        make a finished call look interrupted either. `waiting` and `later` are the other
        calls of the step, saved with it."""
        marked = False

        async def before_execute() -> None:
            nonlocal marked
            if not is_idempotent(tool):
                marked = await self._in_flight((*waiting, _pending(call, INTERRUPTED), *later))

        await self.control.safe_point()  # the last point to stop before the call's gates and tool
        result = await self.run.call_tool(
            call,
            tool,
            messages=self.history(),
            before_execute=before_execute,
            on_run=lambda: self._runs(call),
        )
        self.running = None
        if result.status is ToolCallStatus.SUSPENDED:
            await self._mark(call, ToolCallStatus.SUSPENDED)
            self.control.emit(ToolCallEnded(call, ToolCallStatus.SUSPENDED))
            return _pending(call, result.ticket)
        await self.record(result)
        if marked:
            await self._settled((*waiting, *later))
        return None

    async def settle(
        self, pending: PendingCall, decision: Decision, waiting: tuple[PendingCall, ...] = ()
    ) -> PendingCall | None:
        """Carry out an outside decision on a suspended call; `waiting` are the other calls
        still suspended, saved with the in-flight mark so that a crash loses none of them.

        A call that never started goes through its gates like any call (they never judged
        it), so it may come back suspended by one: then it is returned, still pending."""
        call = ToolCall(pending.id, pending.name, dict(pending.arguments))
        await self._mark(call, ToolCallStatus.RESUMING)
        marked = False
        if decision.kind == "approve":
            if decision.arguments is not None:
                call = ToolCall(call.id, call.name, dict(decision.arguments))
            tool = self.agent.tools.get(call.name)
            if tool is not None and call.name not in self.offered:
                tool = None  # its step did not offer it (a loop action): it does not run
            if tool is not None and pending.ticket == NOT_STARTED:
                return await self._run_call(call, tool, waiting)
            if tool is None:
                known = "not offered in this step" if call.name in self.agent.tools else "unknown"
                result = ToolResult(
                    call, ToolCallStatus.FAILED, error=f"{known} tool {call.name!r}"
                )
            else:
                await self.control.safe_point()  # the last point to stop before the tool's phases
                if not is_idempotent(tool):
                    marked = await self._in_flight((_pending(call, INTERRUPTED), *waiting))
                result = await self.run.execute_tool(
                    call, tool, messages=self.history(), on_run=lambda: self._runs(call)
                )
                self.running = None
        elif decision.kind == "deny":
            result = ToolResult(call, ToolCallStatus.FAILED, error=decision.reason)
        else:
            result = ToolResult(call, ToolCallStatus.SUCCEEDED, result=decision.value)
        await self.run.run_phase(
            Phase.AFTER_TOOL_EXECUTE, tool_call=call, tool_result=result, messages=self.history()
        )
        await self.record(result)
        if marked:
            await self._settled(waiting)
        return None

    async def rerun_idempotent(self, pending: tuple[PendingCall, ...]) -> tuple[PendingCall, ...]:
        """Run again, by themselves, the calls a crash interrupted (or kept from starting)
        whose tools are idempotent; returns the calls still waiting for a decision."""
        waiting = list(pending)
        for call in pending:
            tool = self.agent.tools.get(call.name)
            unknown = call.ticket in (INTERRUPTED, NOT_STARTED)
            if unknown and tool is not None and is_idempotent(tool):
                await self.control.safe_point()
                waiting.remove(call)
                still = await self.settle(call, Decision.approve(), tuple(waiting))
                if still is not None:
                    waiting.append(still)
        return tuple(waiting)

    async def record(self, result: ToolResult) -> None:
        """The call's final state, and its result or error as a tool message."""
        call = result.call
        self.results.append(result)
        self.unanswered.pop(call.id, None)
        state = CallState(call.id, call.name, result.status, result.error)
        content = result.text
        base = len(self.run.snapshot.get(History))
        message = Message(
            "tool",
            content,
            tool_call_id=call.id,
            is_error=result.is_error,
            id=f"{self.run.identity.run_id}:m{base}",
        )
        await self.run.submit(StateCommand().update(ToolCalls, state).update(History, (message,)))
        if self.control.streamed:
            shown = as_json_data(result.result, result.text)  # an event always encodes
            self.control.emit(
                ToolCallEnded(call, result.status, shown, result.error, result.exception)
            )

    async def _in_flight(self, pending: tuple[PendingCall, ...]) -> bool:
        """Save the run durably before a tool runs, as if suspended on `pending`: if the
        process dies before the next save, the thread comes back suspended with the call
        `"interrupted"` (the caller decides) instead of running it again unseen. Returns
        whether anything was saved (not without a thread store: nothing outlives the
        process, so there is nothing to come back to)."""
        if self.agent.kernel.thread_store is None:
            return False
        await self.run.checkpoint(resumable=self._suspension(pending))
        return True

    async def _settled(self, waiting: tuple[PendingCall, ...]) -> None:
        """Save a finished call's outcome at once: the in-flight save before it would
        otherwise bring it back as interrupted. The calls still `waiting` stay resumable."""
        if waiting:
            await self._in_flight(waiting)
        else:
            await self.run.checkpoint()

    async def _mark(self, call: ToolCall, status: ToolCallStatus) -> None:
        await self.run.submit(
            StateCommand().update(ToolCalls, CallState(call.id, call.name, status))
        )

    async def end_step(self) -> None:
        await self.run.run_phase(Phase.STEP_END, messages=self.history())
        await self.run.checkpoint()

    async def end(self, outcome: Outcome) -> RunResult:
        self.control.end()
        await self._finish()
        return self._result(outcome)

    async def suspend(self, pending: tuple[PendingCall, ...]) -> RunResult:
        self.control.stop_if_requested()  # asked to stop: end the run rather than wait on it
        detail = self._suspension(pending)
        await self.run.suspend(detail)
        return self._result("suspended", pending=pending)

    async def fail(self, error: BaseException) -> RunResult:
        """RUN_END still runs, best effort, and the last committed state is checkpointed."""
        logger.info("run %r failed: %s", self.run.identity.run_id, error)
        self.control.end()
        if not self.run.finished:
            try:
                reason = f"the run failed ({cause_text(error)})"
                await self.answer_unanswered(
                    ToolCallStatus.FAILED,
                    f"not run: {reason}",
                    f"{reason} once the tool was allowed to run: it may have had effects",
                )
            except Exception as cleanup:
                logger.warning(
                    "run %r: answering its open tool calls after a failure failed too: %s",
                    self.run.identity.run_id,
                    cleanup,
                )
            try:
                await self._finish()
            except Exception as cleanup:
                logger.warning(
                    "run %r: RUN_END after a failure also failed: %s",
                    self.run.identity.run_id,
                    cleanup,
                )
        return self._result("failure", error=error)

    async def _finish(self) -> None:
        """RUN_END and the last save. (In this task: RUN_END hooks see the run's own task
        and context, as every other phase's hooks do.)"""
        await self.run.finish(messages=self.history())

    def _suspension(self, pending: tuple[PendingCall, ...]) -> bytes:
        return Suspension(self.steps, pending, tuple(sorted(self.offered))).encode()

    def _result(
        self,
        outcome: Outcome,
        *,
        error: BaseException | None = None,
        pending: tuple[PendingCall, ...] = (),
    ) -> RunResult:
        return RunResult(
            outcome=outcome,
            snapshot=self.run.snapshot,
            messages=self.history(),
            steps=self.steps,
            error=error,
            pending=pending,
            tool_results=tuple(self.results),
            unsaved=() if self.run.saves else self.incoming,
        )


_NO_OVERRIDES = RequestOverrides()


def _for_agent_users(conflict: RevisionConflict, thread_id: str) -> RevisionConflict:
    """A save conflict, told as an Agent user can act on it (they never saw a `Run`)."""
    if not conflict.position:
        return conflict
    retry = (
        f"the run ended there. Another process (or Agent) saved thread {thread_id!r} while "
        f"this run was going; run again to continue from what it saved: "
        f"`await agent.run({thread_id!r}, result.unsaved)` sends again the messages no save "
        f"holds (none, if a checkpoint of this run was saved before)"
    )
    better = RevisionConflict(
        conflict.expected, conflict.actual, what="thread save", position=True, retry=retry
    )
    better.__cause__ = conflict
    return better


@attrs.frozen
class _RunOptions:
    parent_thread_id: str | None
    active_hook_filter: tuple[str, ...]
    retry: tuple[DeadLetter | str, ...] = ()


def _letters(retry: Iterable[DeadLetter | str] | DeadLetter | str) -> tuple[DeadLetter | str, ...]:
    """`retry=` as a tuple: one letter (or id) given alone is one letter."""
    if isinstance(retry, DeadLetter | str):
        return (retry,)
    if not isinstance(retry, Iterable):
        raise TypeError(
            f"retry takes DeadLetters or their ids, got {type(retry).__name__} {retry!r}; "
            f"read them with `await agent.dead_letters(thread_id)`"
        )
    letters = tuple(retry)
    for letter in letters:
        if not isinstance(letter, DeadLetter | str):
            raise TypeError(
                f"retry takes DeadLetters or their ids, got {type(letter).__name__} "
                f"{letter!r}; read them with `await agent.dead_letters(thread_id)`"
            )
    return letters


def _named_tools(tools: Mapping[str, Tool] | Iterable[Tool] | None) -> dict[str, Tool]:
    """Tools by name: a mapping as given, or each `@tool` function under its own name."""
    if tools is None:
        return {}
    if isinstance(tools, Mapping):
        named = dict(tools)
    else:
        named = {}
        for tool in tools:
            name = getattr(tool, "name", None) if getattr(tool, "spec", None) else None
            if not isinstance(name, str):
                raise TypeError(
                    f"tools given as a list must be @statekernel.tool functions (which know "
                    f"their names), got {tool!r}; pass a mapping name -> tool for others"
                )
            if name in named:
                raise ValueError(f"two tools are named {name!r}; tool names must be unique")
            named[name] = tool
    for name, tool in named.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"tool names must be non-empty strings, got {name!r}")
        if not callable(tool):
            raise TypeError(f"tool {name!r} must be callable (arguments, ctx), got {tool!r}")
    return named


def _incoming(messages: Iterable[MessageLike] | MessageLike) -> tuple[Message, ...]:
    """What a run is given, as Messages: one message (a string, a `(role, content)` tuple, a
    dict, a Message) or an iterable of them, each spelled any way `as_message` takes."""
    if is_one_message(messages):
        return (as_message(messages, "agent input"),)
    if not isinstance(messages, Iterable):
        return (as_message(messages, "agent input"),)  # refused, with the spellings that work
    return tuple(as_message(m, "agent input") for m in messages)
