"""A `Run`: one pass of an agent over a thread, strictly one call at a time.

Run keys start at their defaults, thread keys come back as the thread last left them, and
the revision continues from the thread's last one, so a `base_revision` taken in one run
still means something in the next. Its phases, tool gates, tool calls and submissions all
commit through the one engine; its saves go through the lease its kernel gave it.

A run is handed what it needs of its kernel (plugins, profile access, options, tracing), not
the kernel. It keeps three helpers: its `RunSpans` (`_observe.spans`; the no-op
`NO_RUN_SPANS` when it is not traced, so it never asks), its `RunNotes` (the run events,
phases, gate decisions and tool calls, noted for the journal) and its `ToolLedger` (what a
gate's decision answers a tool call with, and how each call ended, noted once).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import attrs
import msgspec

from .._durable.journal import CommitRecord, RunJournal
from .._durable.rebase import Rebase
from .._durable.threads import PendingAction, Saved, SaveRequest, SuspendedRun, ThreadHome
from .._engine.commit import LiveState
from .._engine.context import AgentSpec, PhaseContext, RunIdentity, check_phase_fields
from .._engine.invoke import call, checked, outcome
from .._engine.phase_engine import PhaseEngine, PhaseReport
from .._engine.plugin import Components
from .._engine.snapshot import Snapshot
from .._errors import (
    CommitRejected,
    DecodeFailed,
    InvalidToolArguments,
    RevisionConflict,
    StateError,
    ToolResultTooDeep,
    UnknownActionHandler,
    cause_text,
)
from .._observe.spans import (
    NO_RUN_SPANS,
    Gated,
    GateRunner,
    NoRunSpans,
    NoTracing,
    PhaseRunner,
    RunSpans,
    Tracing,
)
from .._profile.access import ProfileAccess
from .._public import renamed
from .._values.codec import CODEC_ERRORS, enc_hook
from .._values.commands import StateCommand
from .._values.dead_letters import DeadLetter, DeadLetters, letter_for, retried
from .._values.frozen import thaw
from .._values.keys import RESERVED_PREFIX
from .._values.messages import Message
from .._values.names import check_name
from .._values.phases import Phase, phase_of
from .._values.specs import ScheduledAction
from .._values.toolgate import GateDecision
from .._values.tools import ToolCall, ToolCallStatus, ToolOutput, ToolResult
from .run_lock import RunLock
from .run_notes import RunNotes
from .tool_ledger import ToolLedger

_WRITES_HERE = (
    "this context is read-only for profile state; hooks, action handlers and tools get a "
    "writable ctx.profile whose writes apply when their command commits"
)

PhaseListener = Callable[["Run", PhaseReport], Awaitable[None] | None]
"""Called after each phase of a run with the run and the phase's report; an async listener
is awaited before the phase returns."""
PhaseStartListener = Callable[["Run", Phase], Awaitable[None] | None]
"""Called as each phase of a run starts, with the run and the phase, before its hooks; an
async listener is awaited first."""

Tool = Callable[..., Any]
"""`(arguments: dict, ctx: PhaseContext) -> ToolOutput | value`, sync or async."""


logger = logging.getLogger("statekernel")


@attrs.define
class Lease:
    """A run's hold on its thread: where its saves go, its commits on their way to the
    journal, and how it lets the thread go."""

    home: ThreadHome
    thread_id: str
    journal: RunJournal
    saves: int = 0
    rebases: list[Rebase] = attrs.field(factory=list)

    async def save(self, state: LiveState, suspended: SuspendedRun | None = None) -> Saved:
        """Save the run's commits since the last save; one that rebased after another
        kernel's moves the run on to the new head (and, if that run took this one's number,
        to a new run id). A cancellation during a save that landed is not raised here: the
        caller raises it (`Saved.raise_cancellation`) once it has done what follows the save
        (a suspended run is released first)."""
        pending = state.pending_commits()
        journaled = self.journal.journaled(pending)
        saved = await self.home.save(
            SaveRequest(
                thread_id=self.thread_id,
                values=state.stored_values(),
                revision=state.revision,
                touched=state.touched_names,
                journaled=journaled,
                suspended=suspended,
            )
        )
        state.forget_commits(len(pending))  # durable now, even if cancelled meanwhile
        self.journal.forget_events(len(journaled.events))
        self.saves += 1
        if (rebased := saved.rebased) is not None:
            state.rebase(rebased.values, saved.revision)
            self.rebases.append(rebased.report)
            if rebased.report.run_id is not None:
                self.journal.rename(rebased.report.run_id)
        return saved

    def release(self) -> None:
        self.home.release(self.thread_id)


class Run:
    """One run on one thread: phases, tool gates and submissions, strictly one at a time.

    Get it from `kernel.start_run` or `kernel.resume_run`, not from the constructor. Its
    calls run strictly one at a time. Once the run is finished, `run_phase`, `tool_gate`,
    `submit`, `handle_tool_call`, `execute_tool`, `checkpoint`, `finish` and `suspend`
    raise `StateError`, and `abandon` does nothing.

    Attributes:

    - `run.identity`: its `RunIdentity` (run id, thread id, agent, parent thread and run).
      A save that rebased under a new run id updates it (see `rebases`).
    - `run.agent`: its `AgentSpec` (the agent's name and active hook filter).
    """

    def __init__(
        self,
        components: Components,
        identity: RunIdentity,
        agent: AgentSpec,
        state: LiveState,
        lease: Lease,
        pending: Sequence[tuple[ScheduledAction, str | None]] = (),
        *,
        profile: ProfileAccess | None,
        max_phase_rounds: int,
        tracing: Tracing | NoTracing,
    ) -> None:
        self._components = components
        self.identity = identity
        self.agent = agent
        self._state = state
        self._lease = lease
        self._profile = profile
        self._read_only_profile = profile.read_only(_WRITES_HERE) if profile is not None else None
        self._phase_listeners: list[PhaseListener] = []
        self._start_listeners: list[PhaseStartListener] = []
        self._lock = RunLock()
        self._finished = False
        self._notes = RunNotes(lease.journal, state)
        self._ledger = ToolLedger(self._notes)
        self._engine = PhaseEngine(
            components,
            state,
            self._context,
            allows=agent.allows,
            max_phase_rounds=max_phase_rounds,
            profile=profile,
        )
        self._engine.restore_pending(pending)
        spans = tracing.start_run(agent.name, identity, state)
        self._spans: RunSpans | NoRunSpans = spans
        # What phases, tool gates and tool calls go through, asked of the spans once:
        # untraced, the bare engine and methods themselves, so that none of them makes a
        # call for tracing; traced, those wrapped in spans (which open none once the run
        # ended: it takes no phase, gate or call then).
        self._phases: PhaseRunner = spans.phases(self._engine)
        self._gate: GateRunner = spans.tool_gates(self._bare_gate)
        self._handle = spans.tool_calls(self._bare_handle)

    @property
    def snapshot(self) -> Snapshot:
        """The run's current snapshot: the state as of its last commit."""
        return self._state.snapshot

    @property
    def revision(self) -> int:
        """The revision of the current snapshot."""
        return self._state.revision

    @property
    def finished(self) -> bool:
        """Whether the run is closed (finished, suspended or abandoned)."""
        return self._finished

    @property
    def saves(self) -> int:
        """How many saves of this run succeeded (checkpoints, and the one of `finish` or
        `suspend`): 0 means nothing this run did is durable."""
        return self._lease.saves

    @property
    def rebases(self) -> tuple[Rebase, ...]:
        """The saves of this run that landed after another kernel's save of the thread.

        One `Rebase(onto, revision, run_id)` per such save (onto which revision, where this
        run's commits now end, and the run id they were journaled under), oldest first;
        empty when none did. See [durability: saves that merge what
        commutes](durability.md#saves-that-merge-what-commutes)."""
        return tuple(self._lease.rebases)

    async def _save(self, suspended: SuspendedRun | None = None) -> Saved:
        """Save, and take the run id a rebase gave the run's commits; a cancellation that
        came during a save that landed is the caller's to raise (`Lease.save`)."""
        saved = await self._lease.save(self._state, suspended)
        run_id = self._lease.journal.run_id
        if run_id is not None and run_id != self.identity.run_id:
            self.identity = attrs.evolve(self.identity, run_id=run_id)
        return saved

    @property
    def durable(self) -> bool:
        """Whether this run's saves outlive the process: True when its kernel keeps threads
        in a ThreadStore (another process can then resume what it saved); False when they
        live in the kernel's memory and die with it."""
        return self._lease.home.durable

    @property
    def step(self) -> int:
        """How many `STEP_START` phases this run has begun (0 before the first).

        Kept across a suspension. The journal records it with every commit."""
        return self._state.step

    def add_commit_listener(self, listener: Callable[[Snapshot], None]) -> None:
        """Call `listener(snapshot)` after every commit of this run."""
        self._state.add_listener(listener)

    def add_phase_listener(self, listener: PhaseListener) -> None:
        """Call `listener(run, report)` after every phase of this run (tracing, demos).

        An async listener is awaited before the phase returns. A listener that raises fails
        the call with `HookFailed` (plugin `"phase listener"`); the phase has committed by
        then."""
        self._phase_listeners.append(listener)

    def add_phase_start_listener(self, listener: PhaseStartListener) -> None:
        """Call `listener(run, phase)` before every phase of this run begins.

        An async listener is awaited first. `agent.stream` is built on this and
        `add_record_listener`."""
        self._start_listeners.append(listener)

    def add_record_listener(self, listener: Callable[[CommitRecord], None]) -> None:
        """Call `listener(record)` after every commit of this run with its `CommitRecord`,
        every op included (what `kernel.history` shows of it without a store).

        `agent.stream` is built on this and `add_phase_start_listener`."""
        state = self._state
        journal = self._lease.journal
        state.keep_journal(journal.write_every_op())  # a save sorts them for the store

        def on_commit(snapshot: Snapshot) -> None:
            pending = state.noted_commit(snapshot.revision)
            if pending is not None:
                listener(journal.whole_record(pending))

        state.add_listener(on_commit)

    async def run_phase(self, phase: Phase | str, **fields: Any) -> PhaseReport:
        """Run one phase: gather, merge, commit, effects, then its actions until converged.

        `phase` is a `Phase` or its name in any case (`"step_start"`); anything else raises
        `StateError` listing the phases. `fields` may be `messages` (a tuple), `tool_call`,
        `response` and `tool_result`, which the phase's `PhaseContext` carries; any other
        field raises `TypeError`.
        """
        if self._finished:
            self._check_open()
        if type(phase) is not Phase:
            phase = phase_of(phase)
        if fields:
            check_phase_fields(fields)
        if self._start_listeners:
            await self._notify_start(phase)
        report = await self._phase(phase, fields)
        if self._phase_listeners:
            await self._notify_phase(report)
        return report

    async def _phase(self, phase: Phase, fields: Mapping[str, Any]) -> PhaseReport:
        lock = self._lock
        if not lock.take_now():
            await lock.take()
        try:
            if phase is Phase.STEP_START:
                self._state.step += 1
            report = await self._phases.run_phase(phase, fields)
        except Exception as error:
            self._phase_failed(phase, error)
            raise
        finally:
            lock.release()
        self._notes.phase(report)
        return report

    async def tool_gate(self, tool_call: ToolCall, **fields: Any) -> GateDecision | None:
        """Run the `TOOL_GATE` hooks for `tool_call`, then the tool gates on the resulting
        snapshot; return the decision.

        The decision is a `Block`, `Suspend` or `SetResult`, or None when the call may run.
        `fields` are the phase's fields, as for `run_phase`."""
        decision, _ = await self._tool_gate(tool_call, fields)
        return decision

    async def submit(
        self, command: StateCommand, *, source: str = "submit", phase: Phase | None = None
    ) -> PhaseReport:
        """Commit a command from outside a hook through the same path as a hook's.

        Checked, atomic, and its effects dispatched. Its journal record names `source` (who
        made it) and `phase` (a `Phase`, or None: outside any); the Agent's own commits use
        `"agent:input"`, `"agent:model"`, `"tool:<name>"` and the like (see
        [agent](agent.md#the-agent-in-ten-lines)). An empty `source` or a `phase` that is
        not a `Phase` raises `TypeError`; a `source` no store can keep (a lone surrogate, a
        NUL character) raises `ValueError`, as a thread id does, and nothing is committed."""
        if not isinstance(source, str) or not source:
            raise TypeError(f"source must be a non-empty string, got {source!r}")
        check_name("source", source)
        if phase is not None and not isinstance(phase, Phase):
            raise TypeError(f"phase must be a statekernel.Phase or None, got {phase!r}")
        self._check_open()
        async with self._lock:
            return await self._engine.submit(command, source=source, phase=phase)

    async def retry(self, letter: DeadLetter | str) -> PhaseReport:
        """Schedule a dead letter's action again, as its next `attempt`.

        `letter` is a `DeadLetter` or its id. The action runs in its phase's convergence
        loop, as when it was first scheduled. The letter stays in `DeadLetters` until then:
        the action's own commit takes it out, or, if it fails again, replaces it with its
        next letter. A run that ends before the phase comes keeps the letter.

        A letter the thread does not hold or that is already being retried, a `DeadLetter`
        read from another thread (ids are unique within a thread only), one whose payload
        was not kept or no longer decodes, or one whose action has no handler raises a
        `StateError`; anything but a letter or a string, `TypeError`."""
        if not isinstance(letter, DeadLetter | str):
            raise TypeError(
                f"run.retry takes a DeadLetter or its id, got {type(letter).__name__} "
                f"{letter!r}; read them with run.snapshot.get(DeadLetters)"
            )
        wanted = letter if isinstance(letter, str) else letter.id
        self._check_open()
        async with self._lock:
            held = {item.id: item for item in self.snapshot.get(DeadLetters)}
            found = held.get(wanted)
            if found is None:
                raise StateError(
                    f"thread {self.identity.thread_id!r} holds no dead letter {wanted!r}; it "
                    f"holds {sorted(held) or 'none'}. Read them with "
                    f"run.snapshot.get(DeadLetters) or agent.dead_letters(thread_id); a letter "
                    f"whose retry ran is gone."
                )
            if isinstance(letter, DeadLetter) and letter != found:
                raise StateError(
                    f"the dead letter given (action {letter.action!r}, run {letter.run_id!r}) "
                    f"is not thread {self.identity.thread_id!r}'s letter {wanted!r} (action "
                    f"{found.action!r}, run {found.run_id!r}): it was read from another thread. "
                    f"Retry a letter on the thread that holds it."
                )
            if any(action.retries == wanted for action, _ in self._engine.pending_actions):
                raise StateError(
                    f"dead letter {wanted!r} is already being retried: its action waits for "
                    f"phase {found.phase.name} of this run."
                )
            entry = self._components.actions.get(found.action)
            if entry is None:
                raise UnknownActionHandler(found.action, None)
            command = StateCommand()
            command.scheduled_actions.append(retried(found, entry.spec))
            return await self._engine.submit(command)

    def _keep_undecodable(self, saved: PendingAction, failed: DecodeFailed) -> None:
        """Dead-letter a resumed action whose saved payload no longer decodes."""
        letter = letter_for(
            saved.key,
            saved.attempt,
            bytes(saved.payload).decode(),
            failed,
            phase=self._components.actions[saved.key].spec.phase,
            revision=self._state.revision + 1,
            run_id=self.identity.run_id,
        )
        self._engine.keep_dead_letter(letter, None)

    async def handle_tool_call(
        self,
        tool_call: ToolCall,
        tool: Tool,
        *,
        messages: tuple[Message, ...] = (),
        before_execute: Callable[[], Awaitable[None]] | None = None,
        on_run: Callable[[], None] | None = None,
    ) -> ToolResult:
        """Take one tool call through its whole life: the gate, `BEFORE_TOOL_EXECUTE`, the
        tool, its command, `AFTER_TOOL_EXECUTE`.

        `execute_tool` is the middle part: the tool run. `messages` is the conversation the
        phases see. A Block, a tool that raises, or a rejected tool command fail only this
        call: the result carries the reason for the model, and state is untouched by the
        failure. `run.call_tool`, its earlier name, still works and warns
        (`DeprecationWarning`) until 0.2.0.
        `before_execute` is awaited once the gates let the tool run, before
        BEFORE_TOOL_EXECUTE (the Agent saves the run there, so that a crash cannot run the
        tool twice unseen, and a resume runs that phase's hooks once). `on_run` is called
        right before the tool itself is.
        """
        return await self._handle(tool_call, tool, messages, before_execute, on_run)

    def model_call_span(self, model: str) -> AbstractContextManager[Any]:
        """A context manager for one model call of this run.

        It opens the `chat {model}` span under the run's when the run is traced
        ([tracing](observability.md)); else it does nothing and yields None. The Agent
        calls it around each model call; `note_model_response(span, response)` puts what
        the model answered on the span."""
        return self._spans.model_call(model)

    def note_model_response(self, span: Any, response: Any) -> None:
        """What the model answered, on its call's span (from `model_call_span`)."""
        self._spans.model_done(span, response)

    def traceparent(self) -> str | None:
        """This run's `invoke_agent` span as a W3C `traceparent`, the context a team's
        letter sent from the run carries; None when the run is not traced."""
        return self._spans.traceparent()

    def link_letters(self, senders: Iterable[tuple[str, str]]) -> None:
        """Link this run's span to the spans that sent the letters it delivers, given as
        `(traceparent, sender)`: once per sending span, at most 128 per run
        ([tracing](observability.md)). Nothing when the run is not traced."""
        self._spans.link_letters(senders)

    async def _bare_handle(
        self,
        tool_call: ToolCall,
        tool: Tool,
        messages: tuple[Message, ...],
        before_execute: Callable[[], Awaitable[None]] | None,
        on_run: Callable[[], None] | None,
    ) -> ToolResult:
        fields: dict[str, Any] = {"messages": messages}
        decision, _ = await self._tool_gate(tool_call, fields)
        if decision is None:  # the gates let the tool run
            if before_execute is not None:
                await before_execute()
            result = await self.execute_tool(tool_call, tool, messages=messages, on_run=on_run)
        else:
            result = self._ledger.decided(tool_call, decision)
            if result.status is ToolCallStatus.SUSPENDED:
                return result
        await self.run_phase(
            Phase.AFTER_TOOL_EXECUTE, tool_call=tool_call, tool_result=result, messages=messages
        )
        return result

    call_tool = renamed(handle_tool_call, "call_tool", until="0.2.0")

    async def execute_tool(
        self,
        tool_call: ToolCall,
        tool: Tool,
        *,
        messages: tuple[Message, ...] = (),
        on_run: Callable[[], None] | None = None,
    ) -> ToolResult:
        """The middle of a call's life: `BEFORE_TOOL_EXECUTE`, then the tool, then its command.

        The tool runs with that phase's context (`on_run()` right before it); there is no
        gate and no `AFTER_TOOL_EXECUTE`. Used by `handle_tool_call`, and by a resume that
        skips the gate."""
        result = await self._execute_tool(tool_call, tool, messages, on_run)
        return self._ledger.ended(result)

    async def _execute_tool(
        self,
        tool_call: ToolCall,
        tool: Tool,
        messages: tuple[Message, ...],
        on_run: Callable[[], None] | None,
    ) -> ToolResult:
        await self.run_phase(Phase.BEFORE_TOOL_EXECUTE, tool_call=tool_call, messages=messages)
        profile = self._profile
        buffer = profile.buffered() if profile is not None else None
        context = msgspec.structs.replace(
            self._context(
                Phase.BEFORE_TOOL_EXECUTE,
                self.snapshot,
                {"tool_call": tool_call, "messages": messages},
            ),
            profile=buffer,
        )
        if on_run is not None:
            on_run()
        try:
            # A tool's failure is a result for the model, not an error of the run.
            output = await outcome(tool, thaw(tool_call.arguments), context)
        except InvalidToolArguments as error:  # the model's mistake: it is told, and retries
            logger.info("run %r: %s", self.identity.run_id, error)
            return ToolResult(tool_call, ToolCallStatus.FAILED, error=str(error), exception=error)
        except Exception as error:
            logger.warning(
                "run %r: tool %r (call %r) raised %s",
                self.identity.run_id,
                tool_call.name,
                tool_call.id,
                type(error).__name__,
                exc_info=error,
            )
            return ToolResult(
                tool_call, ToolCallStatus.FAILED, error=cause_text(error), exception=error
            )
        try:
            # Made first: a result too deep to keep fails the call before its command lands.
            succeeded = ToolResult(
                tool_call,
                ToolCallStatus.SUCCEEDED,
                result=output.result if isinstance(output, ToolOutput) else output,
            )
        except ToolResultTooDeep as error:
            logger.warning("run %r: %s", self.identity.run_id, error)
            return ToolResult(
                tool_call, ToolCallStatus.FAILED, error=cause_text(error), exception=error
            )
        if isinstance(output, ToolOutput) and output.command is not None:
            try:
                self._check_open()
                async with self._lock:
                    await self._engine.submit(output.command, source=f"tool:{tool_call.name}")
            except (CommitRejected, RevisionConflict) as rejected:
                return ToolResult(tool_call, ToolCallStatus.FAILED, error=str(rejected))
        if buffer is not None:
            await buffer.apply()  # a tool's profile writes travel with its command
        return succeeded

    async def shape_request(self, request: Any) -> Any:
        """Apply the active request transforms, in registration order, before an inference.

        Each is `(request, snapshot) -> request`; they see the snapshot as it is now. A
        transform that raises, or returns another type, fails with `HookFailed`.
        """
        for transform in self._components.transforms:
            if not self.agent.allows(transform.plugin):
                continue
            phase = Phase.BEFORE_INFERENCE
            shaped = await call(
                transform.function, request, self.snapshot, owner=transform.plugin, phase=phase
            )
            request = checked(
                shaped,
                (type(request),),
                owner=transform.plugin,
                phase=phase,
                what="a request transform",
                expected=f"a {type(request).__name__}",
                optional=False,
                exact=True,
            )
        return request

    async def checkpoint(self, *, resumable: bytes | None = None) -> None:
        """Persist the thread keys now (the Agent calls this at every `STEP_END`).

        With `resumable` (bytes), the whole run is saved as `suspend(resumable)` would save
        it (run keys and waiting actions included) and stays open: if the process dies
        before the next save, `kernel.resume_run` reopens the run from here and returns
        `resumable`. With a ThreadStore, the Agent does this before each tool that is not
        `idempotent` runs, so that a crash can never silently run it twice. The next save
        (checkpoint, finish, suspend) replaces it.

        Like every save (`finish`, `suspend`), it is a compare-and-set on the thread's write
        position in the store. If another kernel saved the thread since this run loaded it
        (even without committing anything), the save rebases when every op of its unsaved
        commits is an update of a `COMMUTATIVE` key (see `rebases`); otherwise it raises
        `RevisionConflict` and saves nothing.
        """
        self._check_open()
        record = self._suspended_record(resumable) if resumable is not None else None
        async with self._lock:
            saved = await self._save(record)
        saved.raise_cancellation()

    async def finish(self, **fields: Any) -> PhaseReport:
        """Run `RUN_END`, save the thread keys and close the run.

        `fields` are the phase's fields, as for `run_phase`. The save and the close happen
        even if `RUN_END` fails, with the state as last committed; the failure is then
        raised.
        """
        self._check_open()
        try:
            return await self.run_phase(Phase.RUN_END, **fields)
        finally:
            await self._close(save=True)

    async def suspend(self, detail: bytes = b"") -> None:
        """Save the whole run, run keys included, and close it without `RUN_END`.

        `kernel.resume_run(thread_id)` reopens it exactly as it was, in this or any
        process sharing the ThreadStore, and returns `detail`.
        """
        self._check_open()
        record = self._suspended_record(detail)
        async with self._lock:
            saved = await self._save(record)  # on failure the run stays open
        self._release("suspended")  # it landed: the run is suspended, cancelled or not
        saved.raise_cancellation()

    def _suspended_record(self, detail: bytes) -> SuspendedRun:
        actions = tuple(
            PendingAction(
                action.spec.key,
                origin,
                msgspec.Raw(self._cache_encode(action.payload)),
                attempt=action.attempt,
                retries=action.retries,
            )
            for action, origin in self._engine.pending_actions
        )
        return SuspendedRun(
            run_id=self.identity.run_id,
            agent=self.agent.name,
            step=self._state.step,
            parent_thread_id=self.identity.parent_thread_id,
            parent_run_id=self.identity.parent_run_id,
            active_hook_filter=self.agent.active_hook_filter,
            actions=actions,
            detail=detail,
        )

    async def abandon(self) -> None:
        """Close the run without saving anything: the thread stays as it was last saved."""
        if not self._finished:
            self._release("abandoned")

    def _cache_encode(self, payload: Any) -> bytes:
        try:
            return msgspec.json.encode(payload, enc_hook=enc_hook)
        except CODEC_ERRORS as error:
            raise StateError(
                f"a scheduled action's payload cannot be saved with the suspended run: {error}; "
                f"use a msgspec-encodable payload type."
            ) from error

    async def _close(self, *, save: bool) -> None:
        # The kernel's own actions (loop actions) are for one step: unused, they just lapse.
        dropped = [
            action.spec.key
            for action, _ in self._engine.pending_actions
            if not action.spec.key.startswith(RESERVED_PREFIX)
        ]
        if dropped:
            logger.warning(
                "run %r ended with scheduled actions whose phase never came: %s (dropped)",
                self.identity.run_id,
                ", ".join(dropped),
            )
        try:
            if save:
                async with self._lock:
                    saved = await self._save()
                saved.raise_cancellation()
        finally:
            self._release("finished")

    def _release(self, outcome: str) -> None:
        """The run is over: its thread goes back, its span ends."""
        self._finished = True
        self._lease.release()
        spans, self._spans = self._spans, NO_RUN_SPANS  # nothing of an ended run is traced
        spans.end(outcome)

    async def _tool_gate(
        self, tool_call: ToolCall, fields: Mapping[str, Any]
    ) -> tuple[GateDecision | None, PhaseReport]:
        self._check_open()
        if not isinstance(tool_call, ToolCall):
            raise TypeError(f"tool_gate takes a kernel.ToolCall, got {tool_call!r}")
        fields = {**fields, "tool_call": tool_call}
        check_phase_fields(fields)
        if self._start_listeners:
            await self._notify_start(Phase.TOOL_GATE)
        async with self._lock:  # (a phase's span, like its run, starts once it holds the lock)
            decision, report, _ = await self._gate(tool_call, fields)
        if self._phase_listeners:
            await self._notify_phase(report)
        return decision, report

    async def _bare_gate(self, tool_call: ToolCall, fields: Mapping[str, Any]) -> Gated:
        """The `TOOL_GATE` phase and the gates on its snapshot, noted; under the lock."""
        try:
            decision, decided_by, report = await self._engine.tool_gate(fields)
        except Exception as error:
            self._phase_failed(Phase.TOOL_GATE, error)
            raise
        self._notes.phase(report)
        return decision, report, self._notes.gate(tool_call, decision, decided_by)

    def _phase_failed(self, phase: Phase, error: Exception) -> None:
        """A phase failed: the journal notes it (`PhaseRun` with its error), the run's span
        says so."""
        self._spans.fail(error)
        self._notes.failed_phase(phase, error)

    def note_tool_result(self, result: ToolResult) -> None:
        """Journal how a tool call ended (a `ToolRun` run event, for the trace).

        For a call that ended outside `handle_tool_call` and `execute_tool`, which journal
        their own: an outside decision on a suspended call, a call of a tool that does not
        exist, a call answered because its run stopped. A call already journaled with the
        same status is not journaled twice."""
        self._ledger.ended(result)

    async def _notify_start(self, phase: Phase) -> None:
        for listener in self._start_listeners:
            await call(listener, self, phase, owner="phase listener", phase=phase)

    async def _notify_phase(self, report: PhaseReport) -> None:
        for listener in self._phase_listeners:
            await call(listener, self, report, owner="phase listener", phase=report.phase or "")

    def _context(self, phase: Phase, snapshot: Snapshot, fields: Mapping[str, Any]) -> PhaseContext:
        # Read-only by default: every path that may write (hooks, actions, tools) swaps in a
        # buffer of its own, so a forgotten swap can never write around the commit path.
        return PhaseContext(
            phase, self.identity, self.agent, snapshot, profile=self._read_only_profile, **fields
        )

    def _check_open(self) -> None:
        if self._finished:
            raise StateError(
                f"run {self.identity.run_id!r} is finished; start a new run with "
                f"kernel.start_run({self.identity.thread_id!r})."
            )

    def __repr__(self) -> str:
        return f"<Run {self.identity.run_id!r} revision={self.revision}>"
