"""A tool call's life in an Agent's run: gate, tool, suspension, outside decision, record.

Each call the model makes ends in exactly one result, recorded as the call's final state
and as a tool message, so that the history stays one a model API accepts whatever happens:
a gate that blocks or suspends, a tool that fails, a decision from outside, a cancel, a
crash. The crash is the hard case. A tool with effects (not `idempotent`) is saved as in
flight just before it runs and its outcome right after, so that a process that dies in
between comes back suspended with the call `"interrupted"` for someone to decide, and never
runs it twice unseen; an idempotent tool is simply run again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .._host.run import Run, Tool
from .._values.codec import as_json_data
from .._values.commands import StateCommand
from .._values.messages import Message
from .._values.phases import Phase
from .._values.reserved_keys import History
from .._values.tools import ToolCall, ToolCallStatus, ToolResult
from ..events import ToolCallEnded, ToolCallStarted
from .facade_state import CallState, ToolCalls
from .run_control import RunControl
from .run_history import RunHistory
from .run_result import PendingCall
from .suspension import INTERRUPTED, NOT_STARTED, Decision, Step, pending

__all__ = ["ToolCallRunner", "is_idempotent"]


def is_idempotent(tool: Tool) -> bool:
    """Whether `tool` says it may safely run twice (`tool.idempotent = True`)."""
    return getattr(tool, "idempotent", False) is True


class ToolCallRunner:
    """The tool calls of one run: runs them, carries out decisions on suspended ones, and
    keeps which calls in the history still have no result.

    `durable`: the thread is saved to a store, so an in-flight save can outlive a crash.
    `outgoing`: the letters and spawns the run made (a team's agent), committed with each
    call's result, so that the tool that made them and they are saved together.
    """

    def __init__(
        self,
        run: Run,
        tools: Mapping[str, Tool],
        step: Step,
        history: RunHistory,
        control: RunControl,
        *,
        durable: bool,
        outgoing: Callable[[], StateCommand | None] = lambda: None,
    ) -> None:
        self._run = run
        self._outgoing = outgoing
        self._tools = tools
        self._step = step
        self._history = history
        self._control = control
        self._durable = durable
        self.results: list[ToolResult] = []  # the calls that ended, in order
        self.unanswered: dict[str, ToolCall] = {}  # calls in the history without a result
        self._running: str | None = None  # the id of the call whose tool is running

    def expect(self, calls: Iterable[ToolCall]) -> None:
        """`calls` are in the history now, each waiting for its result."""
        self.unanswered = {call.id: call for call in calls}

    async def call_tools(self, calls: tuple[ToolCall, ...]) -> tuple[PendingCall, ...]:
        """Run the step's calls in order; returns those a gate suspended."""
        command = StateCommand()
        for call in calls:
            command.update(ToolCalls, CallState(call.id, call.name, ToolCallStatus.NEW))
        await self._run.submit(command, source="agent:calls", phase=Phase.AFTER_INFERENCE)
        suspended: list[PendingCall] = []
        for index, call in enumerate(calls):
            await self._control.safe_point()
            self._control.emit(ToolCallStarted(call))
            tool = self._offered(call.name)
            if tool is None:
                available = ", ".join(sorted(self._step.offered)) or "none"
                error = f"{self._unavailable(call.name)}; available tools: {available}"
                await self.record(ToolResult(call, ToolCallStatus.FAILED, error=error))
                continue
            await self._mark(call, ToolCallStatus.RUNNING)
            later = tuple(pending(c, NOT_STARTED) for c in calls[index + 1 :])
            still = await self._run_call(call, tool, tuple(suspended), later)
            if still is not None:
                suspended.append(still)
        return tuple(suspended)

    async def settle(
        self, call: PendingCall, decision: Decision, waiting: tuple[PendingCall, ...] = ()
    ) -> PendingCall | None:
        """Carry out an outside decision on a suspended call; `waiting` are the other calls
        still suspended, saved with the in-flight mark so that a crash loses none of them.

        A call that never started goes through its gates like any call (they never judged
        it), so it may come back suspended by one: then it is returned, still pending."""
        tool_call = ToolCall(call.id, call.name, dict(call.arguments))
        await self._mark(tool_call, ToolCallStatus.RESUMING)
        if decision.kind == "approve":
            if decision.arguments is not None:
                tool_call = ToolCall(call.id, call.name, dict(decision.arguments))
            return await self._approved(tool_call, call.ticket, waiting)
        if decision.kind == "deny":
            result = ToolResult(tool_call, ToolCallStatus.FAILED, error=decision.reason)
        else:
            result = ToolResult(tool_call, ToolCallStatus.SUCCEEDED, result=decision.value)
        await self._after_execute(tool_call, result)
        return None

    async def rerun_idempotent(self, calls: tuple[PendingCall, ...]) -> tuple[PendingCall, ...]:
        """Run again, by themselves, the calls a crash interrupted (or kept from starting)
        whose tools are idempotent; returns the calls still waiting for a decision."""
        waiting = list(calls)
        for call in calls:
            tool = self._tools.get(call.name)
            unknown = call.ticket in (INTERRUPTED, NOT_STARTED)
            if unknown and tool is not None and is_idempotent(tool):
                await self._control.safe_point()
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
        self._run.note_tool_result(result)
        state = CallState(call.id, call.name, result.status, result.error)
        message = Message("tool", result.text, tool_call_id=call.id, is_error=result.is_error)
        stamped = self._history.stamped((message,))
        command = StateCommand().update(ToolCalls, state).update(History, stamped)
        made = self._outgoing()
        if made is not None:
            command.extend(made)
        await self._run.submit(command, source=f"tool:{call.name}", phase=Phase.AFTER_TOOL_EXECUTE)
        if self._control.streamed:
            shown = as_json_data(result.result, result.text)  # an event always encodes
            self._control.emit(
                ToolCallEnded(call, result.status, shown, result.error, result.exception)
            )

    async def answer_unanswered(self, status: ToolCallStatus, idle: str, running: str) -> None:
        """Give each call in the history that has no result yet one, so that the history
        stays one a model API accepts: `status` with the text `idle`, or `running` for the
        call whose tool was allowed to run when the run stopped (it may have had effects)."""
        for call in list(self.unanswered.values()):
            error = running if call.id == self._running else idle
            await self.record(ToolResult(call, status, error=error))

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
                marked = await self._in_flight((*waiting, pending(call, INTERRUPTED), *later))

        await self._control.safe_point()  # the last point to stop before the gates and tool
        result = await self._run.handle_tool_call(
            call,
            tool,
            messages=self._history.messages(),
            before_execute=before_execute,
            on_run=lambda: self._runs(call),
        )
        self._running = None
        if result.status is ToolCallStatus.SUSPENDED:
            await self._mark(call, ToolCallStatus.SUSPENDED)
            self._control.emit(ToolCallEnded(call, ToolCallStatus.SUSPENDED))
            return pending(call, result.ticket)
        await self.record(result)
        if marked:
            await self._settled((*waiting, *later))
        return None

    async def _approved(
        self, call: ToolCall, ticket: object, waiting: tuple[PendingCall, ...]
    ) -> PendingCall | None:
        """Run a call approved from outside: one that never started through its gates, one
        that was suspended or interrupted straight to its tool."""
        tool = self._offered(call.name)
        if tool is None:
            error = self._unavailable(call.name)
            await self._after_execute(call, ToolResult(call, ToolCallStatus.FAILED, error=error))
            return None
        if ticket == NOT_STARTED:
            return await self._run_call(call, tool, waiting)
        await self._control.safe_point()  # the last point to stop before the tool's phases
        marked = False
        if not is_idempotent(tool):
            marked = await self._in_flight((pending(call, INTERRUPTED), *waiting))
        result = await self._run.execute_tool(
            call, tool, messages=self._history.messages(), on_run=lambda: self._runs(call)
        )
        self._running = None
        await self._after_execute(call, result)
        if marked:
            await self._settled(waiting)
        return None

    async def _after_execute(self, call: ToolCall, result: ToolResult) -> None:
        """AFTER_TOOL_EXECUTE for a result that did not come through `handle_tool_call`, then the
        record."""
        await self._run.run_phase(
            Phase.AFTER_TOOL_EXECUTE,
            tool_call=call,
            tool_result=result,
            messages=self._history.messages(),
        )
        await self.record(result)

    def _offered(self, name: str) -> Tool | None:
        """The tool `name` if this step offered it to the model."""
        tool = self._tools.get(name)
        return tool if tool is not None and name in self._step.offered else None

    def _unavailable(self, name: str) -> str:
        """Why the model may not call `name` in this step."""
        known = "not offered in this step" if name in self._tools else "unknown"
        return f"{known} tool {name!r}"

    def _runs(self, call: ToolCall) -> None:
        self._running = call.id  # left set if the call is cut short: see answer_unanswered

    async def _in_flight(self, calls: tuple[PendingCall, ...]) -> bool:
        """Save the run durably before a tool runs, as if suspended on `calls`: if the
        process dies before the next save, the thread comes back suspended with the call
        `"interrupted"` (the caller decides) instead of running it again unseen. Returns
        whether anything was saved (not without a thread store: nothing outlives the
        process, so there is nothing to come back to)."""
        if not self._durable:
            return False
        made = self._outgoing()  # what its gates' hooks sent: resumed, they do not run again
        if made is not None:
            await self._run.submit(made, source="agent:outbox", phase=Phase.TOOL_GATE)
        await self._run.checkpoint(resumable=self._step.suspended_on(calls))
        return True

    async def _settled(self, waiting: tuple[PendingCall, ...]) -> None:
        """Save a finished call's outcome at once: the in-flight save before it would
        otherwise bring it back as interrupted. The calls still `waiting` stay resumable."""
        if waiting:
            await self._in_flight(waiting)
        else:
            await self._run.checkpoint()

    async def _mark(self, call: ToolCall, status: ToolCallStatus) -> None:
        """The call's new status, recorded as the tool's, in the phase it is reached in."""
        phase = Phase.TOOL_GATE if status is ToolCallStatus.SUSPENDED else Phase.BEFORE_TOOL_EXECUTE
        command = StateCommand().update(ToolCalls, CallState(call.id, call.name, status))
        await self._run.submit(command, source=f"tool:{call.name}", phase=phase)
