"""The loop of one Agent run: steps of model call and tool calls, and every way a run ends.

RUN_START, then steps of STEP_START → BEFORE_INFERENCE → model → AFTER_INFERENCE → the tool
calls (`tool_calls.py`) → STEP_END with a checkpoint, then RUN_END. A run ends in one of
four ways, and each leaves the thread as a model API and a later run can use it: success
(an answer without tool calls), suspension (a call waits for a decision), cancel, failure.
The last two answer every call the model made that has no result yet and still run RUN_END;
`drive` makes sure that even an outside cancellation of the task ends the run that way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from .._engine.phase_engine import PhaseReport
from .._engine.snapshot import Snapshot
from .._errors import RevisionConflict, StateError, cause_text
from .._host.kernel import Kernel
from .._host.run import PhaseListener, Run, Tool
from .._values.commands import StateCommand
from .._values.loop_actions import RequestOverrides, StepRequest
from .._values.messages import Message
from .._values.model import InferenceRequest, InferenceResponse, Model
from .._values.phases import Phase
from .._values.reserved_keys import History, MailCursor
from .._values.tools import ToolCall, ToolCallStatus, ToolResult, ToolSpec
from ..events import ModelResponded, TextDelta
from .mailbox import Delivery
from .run_control import CancelRequested, RunControl, StopRequested
from .run_history import RunHistory
from .run_result import Outcome, PendingCall, RunResult
from .suspension import Decision, Step, Suspension
from .tool_calls import ToolCallRunner

__all__ = ["LoopSettings", "RunLoop", "TeamLink", "awaits_answer"]

logger = logging.getLogger("statekernel")

_NO_OVERRIDES = RequestOverrides()

# What the journal records the Agent's own commits as made by (`CommitRecord.sources`).
INPUT = "agent:input"  # the messages given to run()
MAIL = "agent:mail"  # a team's messages, delivered
OUTBOX = "agent:outbox"  # the letters and spawns a run made, for its team to post
CONTEXT = "agent:context"  # messages the request transforms placed, once the model read them
REQUEST = "agent:request"  # the step's loop actions, cleared once they shaped the request
MODEL = "agent:model"  # the model's answer


class TeamLink(Protocol):
    """How a run of a team's agent meets its team: the mail it collects before each step,
    the letters and spawns it makes (committed in its own thread, in the commit of the step
    that made them), and their posting once a save holds them (see `outbox.py`)."""

    async def collect(self, thread_id: str, snapshot: Snapshot) -> Delivery | None:
        """The mail beyond the thread's `MailCursor` in `snapshot`, with the cursor's
        advance (the entries of `snapshot`'s outbox not yet posted are posted first)."""
        ...

    def note(self, thread_id: str, snapshot: Snapshot) -> None:
        """A run resumes with the thread as `snapshot` holds it (no `collect` first)."""
        ...

    def posted(self, thread_id: str, snapshot: Snapshot) -> StateCommand | None:
        """The outbox entries of `snapshot` that are posted, dropped: committed with the
        step's next commit."""
        ...

    def outgoing(self, thread_id: str, traceparent: str | None = None) -> StateCommand | None:
        """The letters and spawns the thread's run made since this was last asked, as the
        outbox update to commit with what made them; the letters carry `traceparent`, the
        run's span, if it is traced."""
        ...

    async def dispatch(self, thread_id: str, snapshot: Snapshot) -> None:
        """Post what the outbox of `snapshot` (just saved) holds and was not yet posted."""
        ...


class LoopSettings(Protocol):
    """What a run reads of its Agent, each time it needs it."""

    @property
    def kernel(self) -> Kernel: ...
    @property
    def model(self) -> Model: ...
    @property
    def tools(self) -> Mapping[str, Tool]: ...
    @property
    def system_prompt(self) -> str | None: ...
    @property
    def max_steps(self) -> int: ...
    @property
    def on_phase(self) -> PhaseListener | None: ...
    @property
    def team(self) -> TeamLink | None: ...
    def tool_specs(self) -> tuple[ToolSpec, ...]: ...


class RunLoop:
    """One run of an Agent, from its first step (or the step it resumes) to its end.

    `incoming` are the messages `run` was given: unsaved until a save holds them. With
    `only_with_work`, a new run that finds nothing to answer (no messages given, no mail,
    and a history that ends with the model's answer) ends at once as `"superseded"`,
    saving nothing: what a team does when another process got there first."""

    def __init__(
        self,
        agent: LoopSettings,
        run: Run,
        control: RunControl,
        *,
        step: int = 0,
        incoming: tuple[Message, ...] = (),
        only_with_work: bool = False,
    ) -> None:
        self._agent = agent
        self._run = run
        if agent.on_phase is not None:
            run.add_phase_listener(agent.on_phase)
        control.watch(run)
        self._control = control
        self._step = Step(step, frozenset(agent.tools))
        self._history = RunHistory(run)
        durable = run.durable  # whether a save outlives the process
        self._team = agent.team
        self._calls = ToolCallRunner(
            run,
            agent.tools,
            self._step,
            self._history,
            control,
            durable=durable,
            outgoing=self._outgoing,
        )
        self._incoming = incoming
        self._only_with_work = only_with_work
        self._mail_collected = False  # at this step's start already (by `begin`)

    async def drive(self, body: Callable[[], Awaitable[RunResult]]) -> RunResult:
        """Run `body` as this thread's live run: a failure, a cancel request and an outside
        cancellation each end the run cleanly (RUN_END, the last committed state saved)."""
        thread_id = self._run.identity.thread_id
        try:
            try:
                result = await body()
            except CancelRequested:
                result = await self._cancelled()
            except StopRequested:
                result = await self._stopped()
            except RevisionConflict as conflict:
                if conflict.position:  # another writer saved the thread first
                    result = await self._superseded(_for_agent_users(conflict, thread_id))
                else:
                    result = await self._fail(conflict)
            except Exception as error:
                result = await self._fail(error)
        except asyncio.CancelledError:
            # Cancelled from outside (a task.cancel(), a server dropping the request): end
            # the run cleanly all the same, even if cancelled again meanwhile, then let the
            # cancellation go on. The thread's turn is held until then.
            cleanup = asyncio.ensure_future(self._cancelled())
            while not cleanup.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(cleanup)
            self._control.conclude(cleanup.result())
            raise
        except BaseException:
            # KeyboardInterrupt, SystemExit: nothing more may run, but the thread is let go
            # (as last saved), so that this agent can run it again.
            await self._run.abandon()
            raise
        self._control.conclude(result)
        return result

    async def begin(self) -> RunResult:
        """A new run: its messages, RUN_START, then the steps."""
        await self._history.append(*self._incoming, source=INPUT, phase=Phase.RUN_START)
        delivered = await self._collect_mail(Phase.RUN_START)
        self._mail_collected = True
        nothing_new = not (self._incoming or delivered)
        if self._only_with_work and nothing_new and not awaits_answer(self._history.messages()):
            return await self._superseded(None)
        await self._phase(Phase.RUN_START, messages=self._history.messages())
        return await self._loop()

    async def carry_on(
        self, suspension: Suspension, call: PendingCall, decision: Decision
    ) -> RunResult:
        """Carry on a suspended step with an outside `decision` on its `call`: the tools the
        step offered, and the calls it has yet to answer, are the step's as it was."""
        if self._team is not None:
            self._team.note(self._run.identity.thread_id, self._run.snapshot)
        if suspension.offered is not None:
            self._step.offered = frozenset(suspension.offered)
        self._calls.expect(ToolCall(p.id, p.name, p.arguments) for p in suspension.pending)
        remaining = tuple(p for p in suspension.pending if p.id != call.id)
        still = await self._calls.settle(call, decision, remaining)
        if still is not None:
            remaining = (still, *remaining)
        remaining = await self._calls.rerun_idempotent(remaining)
        if remaining:
            return await self._suspend(remaining)
        await self._end_step()
        return await self._loop()

    async def cancel_suspended(self, calls: tuple[PendingCall, ...]) -> RunResult:
        """End a suspended run as cancelled: each of its `calls` fails as Cancelled."""
        for call in calls:
            tool_call = ToolCall(call.id, call.name, dict(call.arguments))
            result = ToolResult(tool_call, ToolCallStatus.CANCELLED, error="cancelled")
            await self._calls.record(result)
        return await self._end("cancelled")

    async def _loop(self) -> RunResult:
        """Steps until the model answers without tool calls, or a call waits on a decision."""
        while self._step.number < self._agent.max_steps:
            self._step.number += 1
            response = await self._ask_model()
            if not response.tool_calls:
                await self._end_step()
                return await self._end("success")
            pending = await self._calls.call_tools(response.tool_calls)
            if pending:
                return await self._suspend(pending)
            await self._end_step()
        raise StateError(
            f"max_steps ({self._agent.max_steps}) reached without a final answer; raise "
            f"max_steps or check why the model keeps calling tools."
        )

    async def _ask_model(self) -> InferenceResponse:
        """A step up to its tool calls: STEP_START, BEFORE_INFERENCE, the model call and
        AFTER_INFERENCE; the request's transcript and the answer join the history, and the
        calls it makes wait for their results."""
        run, history, control = self._run, self._history, self._control
        await control.safe_point()
        control.stop_before_step()
        if not self._mail_collected:
            await self._collect_mail(Phase.STEP_START)
        self._mail_collected = False
        await self._phase(Phase.STEP_START, messages=history.messages())
        await self._phase(Phase.BEFORE_INFERENCE, messages=history.messages())
        request = await self._request()
        response = await self._infer(request)
        await history.append(*request.transcript, source=CONTEXT, phase=Phase.BEFORE_INFERENCE)
        control.emit(ModelResponded(response))
        await control.safe_point()
        await self._phase(Phase.AFTER_INFERENCE, messages=history.messages(), response=response)
        answer = Message("assistant", response.text, tool_calls=response.tool_calls)
        posted = (
            None if self._team is None else self._team.posted(run.identity.thread_id, run.snapshot)
        )
        await history.append(answer, source=MODEL, phase=Phase.AFTER_INFERENCE, also=posted)
        self._calls.expect(response.tool_calls)
        return response

    async def _collect_mail(self, phase: Phase) -> bool:
        """Deliver the thread's new mail: the messages and the cursor that counts them are
        one commit, so the save that holds one holds the other (exactly once). Returns
        whether any mail came."""
        if self._team is None:
            return False
        delivery = await self._team.collect(self._run.identity.thread_id, self._run.snapshot)
        if delivery is None:
            return False
        messages = self._history.stamped(delivery.messages)
        command = StateCommand().update(History, messages).update(MailCursor, delivery.cursor)
        await self._run.submit(command, source=MAIL, phase=phase)
        if delivery.senders:
            self._run.link_letters(delivery.senders)
        return True

    def _outgoing(self) -> StateCommand | None:
        """The letters and spawns this run made since they were last committed."""
        if self._team is None:
            return None
        return self._team.outgoing(self._run.identity.thread_id, self._run.traceparent())

    async def _commit_outgoing(self, phase: Phase) -> None:
        """Commit the letters and spawns the run made since they were last committed."""
        if not self._run.finished:
            outgoing = self._outgoing()
            if outgoing is not None:
                await self._run.submit(outgoing, source=OUTBOX, phase=phase)

    async def _phase(self, phase: Phase, **fields: Any) -> None:
        """Run `phase`, then commit the letters and spawns its hooks made (the tool phases'
        are committed with the tool's result, RUN_END's by `_after_run_end`)."""
        await self._run.run_phase(phase, **fields)
        await self._commit_outgoing(phase)

    async def _after_run_end(self, run: Run, report: PhaseReport) -> None:
        """RUN_END's letters and spawns, committed before the run's last save."""
        await self._commit_outgoing(Phase.RUN_END)

    async def _save(self, save: Callable[[], Awaitable[object]], phase: Phase) -> None:
        """Commit the run's uncommitted letters, save, then post what the save holds.

        A post that fails does not fail the run: the save stands, and what it holds is
        posted again at the agent's next step or run, or when a team opens."""
        await self._commit_outgoing(phase)
        await save()
        if self._team is None:
            return
        thread_id = self._run.identity.thread_id
        try:
            await self._team.dispatch(thread_id, self._run.snapshot)
        except Exception as error:
            logger.warning(
                "run %r: what its outbox holds was saved but not posted yet (%s); it is "
                "posted again at the agent's next step or run",
                self._run.identity.run_id,
                cause_text(error),
            )

    async def _request(self) -> InferenceRequest:
        """This step's request: the tools on offer and the model parameters as the step's
        loop actions left them (then cleared: they hold for this step only), shaped by the
        request transforms, with the system prompt first."""
        overrides = self._run.snapshot.get(StepRequest)
        if overrides != _NO_OVERRIDES:
            clear = StateCommand().clear(StepRequest)
            await self._run.submit(clear, source=REQUEST, phase=Phase.BEFORE_INFERENCE)
        specs = tuple(s for s in self._agent.tool_specs() if overrides.offers(s.name))
        self._step.offered = frozenset(spec.name for spec in specs)
        request = InferenceRequest(self._history.messages(), specs, overrides.params)
        request = await self._run.shape_request(request)
        if self._agent.system_prompt is not None:
            system = Message("system", self._agent.system_prompt)
            request = request.replace(messages=(system, *request.messages))
        return request  # type: ignore[no-any-return]

    async def _infer(self, request: InferenceRequest) -> InferenceResponse:
        """Call the model (streaming its text deltas as events, if it streams); a cancel
        request abandons the call."""
        model = self._agent.model
        streams = getattr(model, "streams", False) is True
        with self._run.model_call_span(_model_name(model, request)) as span:
            answer: Awaitable[Any] = self._streamed(model, request) if streams else model(request)
            response = await self._control.abandonable(answer)
            if not isinstance(response, InferenceResponse):
                raise TypeError(f"the model must return an InferenceResponse, got {response!r}")
            self._run.note_model_response(span, response)
        return response

    async def _streamed(self, model: Any, request: InferenceRequest) -> Any:
        response: Any = None
        async for chunk in model.stream(request):
            if isinstance(chunk, str):
                self._control.emit(TextDelta(chunk))
            else:
                response = chunk
        return response

    async def _end_step(self) -> None:
        await self._phase(Phase.STEP_END, messages=self._history.messages())
        await self._save(self._run.checkpoint, Phase.STEP_END)

    async def _end(self, outcome: Outcome) -> RunResult:
        self._control.end()
        await self._finish()
        return self._result(outcome)

    async def _suspend(self, pending: tuple[PendingCall, ...]) -> RunResult:
        self._control.stop_if_requested()  # asked to stop: end the run rather than wait on it
        detail = self._step.suspended_on(pending)
        await self._save(lambda: self._run.suspend(detail), Phase.TOOL_GATE)
        return self._result("suspended", pending=pending)

    async def _superseded(self, conflict: RevisionConflict | None) -> RunResult:
        """Another writer saved the thread first (or, with `only_with_work`, already did
        what this run was for): nothing of this run is saved, nothing failed."""
        if conflict is not None:
            logger.info("run %r superseded: %s", self._run.identity.run_id, conflict)
        self._control.end()
        await self._run.abandon()
        return self._result("superseded", error=conflict)

    async def _stopped(self) -> RunResult:
        """Stopped before a step began: the thread is let go as its last save left it (what
        this run committed since is dropped, as a crash there would drop it), for the next
        run of the agent, in any process, to carry on."""
        self._control.end()
        await self._run.abandon()
        return self._result("stopped")

    async def _fail(self, error: BaseException) -> RunResult:
        """RUN_END still runs, best effort, and the last committed state is checkpointed."""
        # A failure is the run's answer, not an exception of the caller's: said loudly here,
        # with the traceback of what failed, since nothing is raised.
        logger.error("run %r failed: %s", self._run.identity.run_id, error, exc_info=error)
        self._control.end()
        if not self._run.finished:
            try:
                reason = f"the run failed ({cause_text(error)})"
                await self._calls.answer_unanswered(
                    ToolCallStatus.FAILED,
                    f"not run: {reason}",
                    f"{reason} once the tool was allowed to run: it may have had effects",
                )
            except Exception as cleanup:
                logger.warning(
                    "run %r: answering its open tool calls after a failure failed too: %s",
                    self._run.identity.run_id,
                    cleanup,
                )
            try:
                await self._finish()
            except Exception as cleanup:
                logger.warning(
                    "run %r: RUN_END after a failure also failed: %s",
                    self._run.identity.run_id,
                    cleanup,
                )
        return self._result("failure", error=error)

    async def _cancelled(self) -> RunResult:
        """End the run as cancelled: each call in the history that has no result yet gets a
        Cancelled one (so the history stays one a model API accepts), then RUN_END."""
        self._control.end()
        if self._run.finished:
            return self._result("cancelled")
        try:
            running = "cancelled while the tool ran: it may have had effects"
            await self._calls.answer_unanswered(ToolCallStatus.CANCELLED, "cancelled", running)
            await self._finish()
        except Exception as error:
            logger.warning(
                "run %r: ending it as cancelled failed: %s", self._run.identity.run_id, error
            )
            if not self._run.finished:
                await self._run.abandon()
            return self._result("cancelled", error=error)
        return self._result("cancelled")

    async def _finish(self) -> None:
        """RUN_END and the last save. (In this task: RUN_END hooks see the run's own task
        and context, as every other phase's hooks do.)"""
        if self._team is not None:  # the only phase left is RUN_END
            self._run.add_phase_listener(self._after_run_end)
        await self._save(lambda: self._run.finish(messages=self._history.messages()), Phase.RUN_END)

    def _result(
        self,
        outcome: Outcome,
        *,
        error: BaseException | None = None,
        pending: tuple[PendingCall, ...] = (),
    ) -> RunResult:
        return RunResult(
            outcome=outcome,
            snapshot=self._run.snapshot,
            messages=self._history.messages(),
            steps=self._step.number,
            error=error,
            pending=pending,
            tool_results=tuple(self._calls.results),
            unsaved=() if self._run.saves else self._incoming,
        )


def awaits_answer(messages: tuple[Message, ...]) -> bool:
    """Whether a conversation waits for the model: its last message is not the model's
    (a run cut between steps, or mail delivered and never answered)."""
    return bool(messages) and messages[-1].role != "assistant"


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
        conflict.expected,
        conflict.actual,
        what="thread save",
        position=True,
        retry=retry,
        rebases=conflict.rebases,
        rebasing_for=conflict.rebasing_for,
    )
    better.__cause__ = conflict
    return better


def _model_name(model: Any, request: InferenceRequest) -> str:
    """The model a call asks for, as the span names it: the request's `model` parameter,
    else the adapter's `model`, else its type."""
    named = request.params.get("model") or getattr(model, "model", None)
    return str(named) if isinstance(named, str) and named else type(model).__name__
