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

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs
import msgspec

from ._codec import enc_hook
from ._commands import StateCommand
from ._errors import StateError
from ._function_tools import spec_of
from ._keys import RESERVED_PLUGIN_ID, KeyScope, StateKey
from ._loop_actions import HANDLERS as LOOP_ACTIONS
from ._loop_actions import RequestOverrides, StepRequest
from ._messages import Message
from ._model import InferenceRequest, InferenceResponse, Model
from ._phases import Phase
from ._plugin import Plugin, PluginRegistrar
from ._protocols import ProfileStore, ThreadStore
from ._runtime import Kernel, PhaseListener, Run, Tool
from ._snapshot import Snapshot
from ._threads import SNAPSHOT_EVERY
from ._tools import ToolCall, ToolCallStatus, ToolResult, ToolSpec
from ._vector import Vector

logger = logging.getLogger("statekernel")

Outcome = Literal["success", "failure", "suspended", "cancelled"]


class CallState(msgspec.Struct, frozen=True):
    """Where one tool call of the run stands."""

    id: str
    name: str
    status: ToolCallStatus
    error: str | None = None


class History(StateKey[Vector[Message], tuple[Message, ...]]):
    """The thread's whole message history (a thread key: it survives across runs)."""

    key = "statekernel.messages"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[Message], update: tuple[Message, ...]) -> Vector[Message]:
        return value.extend(update)


class ToolCalls(StateKey[tuple[CallState, ...], CallState]):
    """The life of each tool call of this run; an update replaces the call's entry by id."""

    key = "statekernel.tool_calls"

    @staticmethod
    def apply(value: tuple[CallState, ...], update: CallState) -> tuple[CallState, ...]:
        for index, call in enumerate(value):
            if call.id == update.id:
                return (*value[:index], update, *value[index + 1 :])
        return (*value, update)


def run_status(snapshot: Snapshot) -> Literal["running", "waiting", "done"]:
    """The run's status, derived from its tool calls: any Running (or Resuming) → running;
    else any Suspended → waiting; else the step's calls are done."""
    statuses = {call.status for call in snapshot.get(ToolCalls)}
    if statuses & {ToolCallStatus.RUNNING, ToolCallStatus.RESUMING}:
        return "running"
    if ToolCallStatus.SUSPENDED in statuses:
        return "waiting"
    return "done"


class _Facade(Plugin):
    id = RESERVED_PLUGIN_ID

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(History)
        registrar.register_key(ToolCalls)
        registrar.register_key(StepRequest)
        for action, handler in LOOP_ACTIONS.items():
            registrar.register_action(action, handler)


class PendingCall(msgspec.Struct, frozen=True):
    """A suspended tool call: what it was, and the ticket describing what it waits for."""

    id: str
    name: str
    arguments: dict[str, Any]
    ticket: Any = None


INTERRUPTED = "interrupted"
"""The ticket of a call that was running when its process died: its outcome is unknown."""

NOT_STARTED = "not started"
"""The ticket of a call the model asked for alongside an interrupted one, never started."""


def is_idempotent(tool: Tool) -> bool:
    """Whether `tool` says it may safely run twice (`tool.idempotent = True`)."""
    return getattr(tool, "idempotent", False) is True


class _Suspension(msgspec.Struct, frozen=True):
    step: int
    pending: tuple[PendingCall, ...]


@attrs.frozen
class Decision:
    """An outside decision on a suspended call; build it with the class methods."""

    kind: Literal["approve", "deny", "result"]
    arguments: dict[str, Any] | None = None
    reason: str = ""
    value: Any = None

    @classmethod
    def approve(cls, arguments: dict[str, Any] | None = None) -> Decision:
        """Run the tool, with `arguments` replacing the original ones if given."""
        return cls("approve", arguments=arguments)

    @classmethod
    def deny(cls, reason: str) -> Decision:
        """Fail the call; the model sees `reason` as the tool's error."""
        return cls("deny", reason=reason)

    @classmethod
    def result(cls, value: Any) -> Decision:
        """Skip the tool and use `value` as its result."""
        return cls("result", value=value)


@attrs.frozen
class RunResult:
    """How a run ended.

    `outcome` is "success" (the model answered without tool calls), "failure" (see
    `error`), "suspended" (see `pending`) or "cancelled". `messages` is the thread's whole
    history after the run; `steps` counts the steps taken. `tool_results` are the calls
    that ended during this `run` (or `resume`, `cancel`), in order; a tool that raised has
    its exception, traceback included, in its `exception`.
    """

    outcome: Outcome
    snapshot: Snapshot
    messages: tuple[Message, ...]
    steps: int
    error: BaseException | None = None
    pending: tuple[PendingCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()


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
        snapshot_every: int = SNAPSHOT_EVERY,
        on_phase: PhaseListener | None = None,
    ) -> None:
        if not callable(model):
            raise TypeError(f"model must be an async callable (request) -> response, got {model!r}")
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        self.kernel = Kernel(
            [_Facade(), *plugins],
            profile_store=profile_store,
            thread_store=thread_store,
            max_phase_rounds=max_phase_rounds,
            restore_errors=restore_errors,
            snapshot_every=snapshot_every,
        )
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt must be a string, got {system_prompt!r}")
        self.model = model
        self.tools: dict[str, Tool] = _named_tools(tools)
        self.system_prompt = system_prompt
        self._specs: dict[str, tuple[Tool, ToolSpec]] = {}
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
        messages: Iterable[Message | str] = (),
        *,
        parent_thread_id: str | None = None,
        active_hook_filter: Iterable[str] = (),
    ) -> RunResult:
        """Append `messages` (a plain string is a user message) and run the loop to its end."""
        incoming = [_as_message(m) for m in messages]
        run = await self.kernel.start_run(
            thread_id,
            agent=self.name,
            parent_thread_id=parent_thread_id,
            active_hook_filter=active_hook_filter,
        )
        driver = _Driver(self, run, steps=0)
        try:
            await driver.append(*incoming)
            await run.run_phase(Phase.RUN_START, messages=driver.history())
            return await driver.loop()
        except Exception as error:
            return await driver.fail(error)

    async def resume(self, thread_id: str, call_id: str, decision: Decision) -> RunResult:
        """Continue a suspended run with an outside `decision` on its call `call_id`."""
        if not isinstance(decision, Decision):
            raise TypeError(
                f"decision must be Decision.approve(...), Decision.deny(...) or "
                f"Decision.result(...), got {decision!r}"
            )
        run, detail = await self.kernel.resume_run(thread_id)
        suspension = msgspec.json.decode(detail, type=_Suspension)
        call = next((p for p in suspension.pending if p.id == call_id), None)
        if call is None:
            await run.abandon()
            waiting = [p.id for p in suspension.pending]
            raise StateError(
                f"thread {thread_id!r} has no suspended call {call_id!r}; the calls waiting "
                f"for a decision are {waiting}. Nothing was changed."
            )
        driver = _Driver(self, run, steps=suspension.step)
        try:
            remaining = tuple(p for p in suspension.pending if p.id != call_id)
            still = await driver.settle(call, decision, remaining)
            if still is not None:
                remaining = (still, *remaining)
            remaining = await driver.rerun_idempotent(remaining)
            if remaining:
                return await driver.suspend(remaining)
            await driver.end_step()
            return await driver.loop()
        except Exception as error:
            return await driver.fail(error)

    async def pending(self, thread_id: str) -> tuple[PendingCall, ...]:
        """The calls the thread's suspended run waits on, with their tickets; changes nothing.

        After a crash this says what came back: a call whose tool was running has the ticket
        `"interrupted"` (its outcome is unknown: decide with `resume`), one the model asked
        for beside it and never started has `"not started"`. Raises `StateError` when the
        thread has no suspended run.
        """
        run, detail = await self.kernel.resume_run(thread_id)
        await run.abandon()
        return msgspec.json.decode(detail, type=_Suspension).pending

    async def cancel(self, thread_id: str) -> RunResult:
        """Fail the suspended run's pending calls as Cancelled and end the run (RUN_END)."""
        run, detail = await self.kernel.resume_run(thread_id)
        suspension = msgspec.json.decode(detail, type=_Suspension)
        driver = _Driver(self, run, steps=suspension.step)
        try:
            for pending in suspension.pending:
                call = ToolCall(pending.id, pending.name, dict(pending.arguments))
                result = ToolResult(call, ToolCallStatus.CANCELLED, error="cancelled")
                await driver.record(result)
            return await driver.end("cancelled")
        except Exception as error:
            return await driver.fail(error)


class _Driver:
    """The loop for one run: owns the step count and the message bookkeeping."""

    def __init__(self, agent: Agent, run: Run, *, steps: int) -> None:
        self.agent = agent
        self.run = run
        if agent.on_phase is not None:
            run.add_phase_listener(agent.on_phase)
        self.steps = steps
        self.offered: frozenset[str] = frozenset(agent.tools)
        self.results: list[ToolResult] = []
        self._seen: tuple[Vector[Message] | None, tuple[Message, ...]] = (None, ())

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
            await run.run_phase(Phase.STEP_START, messages=self.history())
            await run.run_phase(Phase.BEFORE_INFERENCE, messages=self.history())
            request = await self.request()
            response = await self.agent.model(request)
            if not isinstance(response, InferenceResponse):
                raise TypeError(f"the model must return an InferenceResponse, got {response!r}")
            await run.run_phase(Phase.AFTER_INFERENCE, messages=self.history(), response=response)
            await self.append(Message("assistant", response.text, tool_calls=response.tool_calls))
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

        async def mark_in_flight() -> None:
            nonlocal marked
            marked = await self._in_flight((*waiting, _pending(call, INTERRUPTED), *later))

        guard = None if is_idempotent(tool) else mark_in_flight
        result = await self.run.call_tool(call, tool, messages=self.history(), before_execute=guard)
        if result.status is ToolCallStatus.SUSPENDED:
            await self._mark(call, ToolCallStatus.SUSPENDED)
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
            if tool is not None and pending.ticket == NOT_STARTED:
                return await self._run_call(call, tool, waiting)
            if tool is None:
                result = ToolResult(
                    call, ToolCallStatus.FAILED, error=f"unknown tool {call.name!r}"
                )
            else:
                if not is_idempotent(tool):
                    marked = await self._in_flight((_pending(call, INTERRUPTED), *waiting))
                result = await self.run.execute_tool(call, tool, messages=self.history())
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
                waiting.remove(call)
                still = await self.settle(call, Decision.approve(), tuple(waiting))
                if still is not None:
                    waiting.append(still)
        return tuple(waiting)

    async def record(self, result: ToolResult) -> None:
        """The call's final state, and its result or error as a tool message."""
        call = result.call
        self.results.append(result)
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

    async def _in_flight(self, pending: tuple[PendingCall, ...]) -> bool:
        """Save the run durably before a tool runs, as if suspended on `pending`: if the
        process dies before the next save, the thread comes back suspended with the call
        `"interrupted"` (the caller decides) instead of running it again unseen. Returns
        whether anything was saved (not without a thread store: nothing outlives the
        process, so there is nothing to come back to)."""
        if self.agent.kernel.thread_store is None:
            return False
        detail = msgspec.json.encode(_Suspension(self.steps, pending), enc_hook=enc_hook)
        await self.run.checkpoint(resumable=detail)
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
        await self.run.finish(messages=self.history())
        return self._result(outcome)

    async def suspend(self, pending: tuple[PendingCall, ...]) -> RunResult:
        detail = msgspec.json.encode(_Suspension(self.steps, pending), enc_hook=enc_hook)
        await self.run.suspend(detail)
        return self._result("suspended", pending=pending)

    async def fail(self, error: BaseException) -> RunResult:
        """RUN_END still runs, best effort, and the last committed state is checkpointed."""
        logger.info("run %r failed: %s", self.run.identity.run_id, error)
        if not self.run.finished:
            try:
                await self.run.finish(messages=self.history())
            except Exception as cleanup:
                logger.warning(
                    "run %r: RUN_END after a failure also failed: %s",
                    self.run.identity.run_id,
                    cleanup,
                )
        return self._result("failure", error=error)

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
        )


_NO_OVERRIDES = RequestOverrides()


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


def _pending(call: ToolCall, ticket: str) -> PendingCall:
    return PendingCall(call.id, call.name, dict(call.arguments), ticket)


def _as_message(message: Message | str) -> Message:
    if isinstance(message, Message):
        return message
    if isinstance(message, str):
        return Message("user", message)
    raise TypeError(f"messages must be kernel.Message objects or strings, got {message!r}")
