"""The host the engine runs in: a `Kernel` built from plugins, and the `Run`s it starts.

A Kernel validates its plugins once (`DuplicateRegistration` surfaces at construction, not
mid-run) and remembers each thread's state between runs. A Run is one pass of an agent over a
thread: run keys start at their defaults, thread keys come back as the thread last left them,
and the revision continues from the thread's last one, so a `base_revision` taken in one run
still means something in the next.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import immutables

from .commands import StateCommand
from .context import PHASE_FIELDS, AgentSpec, PhaseContext, RunIdentity
from .engine import PhaseEngine, PhaseReport
from .errors import CommitRejected, StateError
from .keys import KeyScope
from .phases import Phase
from .plugin import Components, Plugin
from .snapshot import Snapshot
from .state import LiveState
from .toolgate import Block, GateDecision, SetResult, Suspend
from .tools import ToolCall, ToolCallStatus, ToolOutput, ToolResult

Tool = Callable[..., Any]
"""`(arguments: dict, ctx: PhaseContext) -> ToolOutput | value`, sync or async."""


@attrs.define
class _ThreadMemory:
    """What a Kernel keeps of a thread between runs when no ThreadStore holds it."""

    values: immutables.Map[str, Any] = attrs.field(factory=immutables.Map)
    revision: int = 0
    runs: int = 0


class Kernel:
    """The registry of a set of plugins and the keeper of thread state between runs."""

    def __init__(
        self,
        plugins: Iterable[Plugin],
        *,
        profile_store: Any = None,
        thread_store: Any = None,
        max_phase_rounds: int = 16,
    ) -> None:
        if not isinstance(max_phase_rounds, int) or max_phase_rounds < 1:
            raise ValueError(f"max_phase_rounds must be a positive int, got {max_phase_rounds!r}")
        self.components = Components.build(plugins)
        self.profile_store = profile_store
        self.thread_store = thread_store
        self.max_phase_rounds = max_phase_rounds
        self._threads: dict[str, _ThreadMemory] = {}
        self._live: set[str] = set()

    @property
    def plugin_ids(self) -> tuple[str, ...]:
        return self.components.plugin_ids

    async def start_run(
        self,
        thread_id: str,
        *,
        agent: str = "default",
        parent_thread_id: str | None = None,
        parent_run_id: str | None = None,
        active_hook_filter: Iterable[str] = (),
    ) -> Run:
        """Open a run on `thread_id`; runs no phase (the caller runs RUN_START)."""
        if not isinstance(thread_id, str) or not thread_id:
            raise ValueError(f"thread_id must be a non-empty string, got {thread_id!r}")
        if thread_id in self._live:
            raise StateError(
                f"thread {thread_id!r} already has a live run in this kernel; finish it "
                f"(await run.finish()) before starting another."
            )
        hook_filter = tuple(active_hook_filter)
        unknown = [p for p in hook_filter if p not in self.components.plugin_ids]
        if unknown:
            raise ValueError(
                f"active_hook_filter names plugins this kernel does not have: {unknown}; "
                f"known plugins: {list(self.components.plugin_ids)}"
            )
        memory = self._threads.setdefault(thread_id, _ThreadMemory())
        memory.runs += 1
        identity = RunIdentity(
            run_id=f"{thread_id}:run-{memory.runs}",
            thread_id=thread_id,
            agent_id=agent,
            parent_thread_id=parent_thread_id,
            parent_run_id=parent_run_id,
        )
        state = LiveState(self.components.keys, values=memory.values, revision=memory.revision)
        self._live.add(thread_id)
        return Run(self, identity, AgentSpec(agent, hook_filter), state)

    def _end_run(self, run: Run) -> None:
        memory = self._threads[run.identity.thread_id]
        memory.values = _thread_values(run.snapshot)
        memory.revision = run.revision
        self._live.discard(run.identity.thread_id)


def _thread_values(snapshot: Snapshot) -> immutables.Map[str, Any]:
    """The values that outlive a run: thread keys, and keys no plugin here registered."""
    by_name = snapshot.registry.by_name
    values = snapshot.raw_values()
    mutation = values.mutate()
    for name in values:
        binding = by_name.get(name)
        if binding is not None and binding.scope is KeyScope.RUN:
            del mutation[name]
    return mutation.finish()


class Run:
    """One run on one thread: phases, tool gates and submissions, strictly one at a time."""

    def __init__(
        self, kernel: Kernel, identity: RunIdentity, agent: AgentSpec, state: LiveState
    ) -> None:
        self._kernel = kernel
        self.identity = identity
        self.agent = agent
        self._state = state
        self._lock = asyncio.Lock()
        self._finished = False
        self._engine = PhaseEngine(
            kernel.components,
            state,
            self._context,
            allows=agent.allows,
            max_phase_rounds=kernel.max_phase_rounds,
        )

    @property
    def snapshot(self) -> Snapshot:
        return self._state.snapshot

    @property
    def revision(self) -> int:
        return self._state.revision

    @property
    def finished(self) -> bool:
        return self._finished

    def add_commit_listener(self, listener: Callable[[Snapshot], None]) -> None:
        """Call `listener(snapshot)` after every commit of this run."""
        self._state.add_listener(listener)

    async def run_phase(self, phase: Phase, **fields: Any) -> PhaseReport:
        """Run one phase: gather, merge, commit, effects, then its actions until converged."""
        self._check_open()
        if fields:
            _check_fields(fields)
        async with self._lock:
            return await self._engine.run_phase(phase, fields)

    async def tool_gate(self, tool_call: ToolCall, **fields: Any) -> GateDecision | None:
        """Run TOOL_GATE hooks for `tool_call`, then the tool gates; return the decision."""
        decision, _ = await self._tool_gate(tool_call, fields)
        return decision

    async def submit(self, command: StateCommand) -> PhaseReport:
        """Commit a command from outside a hook through the same path (atomic, validated)."""
        self._check_open()
        async with self._lock:
            return await self._engine.submit(command)

    async def call_tool(
        self, tool_call: ToolCall, tool: Tool, *, messages: tuple[Any, ...] = ()
    ) -> ToolResult:
        """Take one tool call through its whole life: gate, BEFORE_TOOL_EXECUTE, the tool,
        its command, AFTER_TOOL_EXECUTE.

        A Block, a tool that raises, or a rejected tool command fail only this call: the
        result carries the reason for the model, and state is untouched by the failure.
        """
        fields: dict[str, Any] = {"messages": messages}
        decision, _ = await self._tool_gate(tool_call, fields)
        if isinstance(decision, Block):
            result = ToolResult(tool_call, ToolCallStatus.FAILED, error=decision.reason)
        elif isinstance(decision, Suspend):
            return ToolResult(tool_call, ToolCallStatus.SUSPENDED, ticket=decision.ticket)
        elif isinstance(decision, SetResult):
            result = ToolResult(tool_call, ToolCallStatus.SUCCEEDED, result=decision.result)
        else:
            result = await self.execute_tool(tool_call, tool, messages=messages)
        await self.run_phase(
            Phase.AFTER_TOOL_EXECUTE, tool_call=tool_call, tool_result=result, messages=messages
        )
        return result

    async def execute_tool(
        self, tool_call: ToolCall, tool: Tool, *, messages: tuple[Any, ...] = ()
    ) -> ToolResult:
        """Run BEFORE_TOOL_EXECUTE, then the tool with that phase's context, then commit
        the tool's command. Used by `call_tool`, and by a resume that skips the gate."""
        await self.run_phase(Phase.BEFORE_TOOL_EXECUTE, tool_call=tool_call, messages=messages)
        context = self._context(
            Phase.BEFORE_TOOL_EXECUTE,
            self.snapshot,
            {"tool_call": tool_call, "messages": messages},
        )
        try:
            output = tool(dict(tool_call.arguments), context)
            if inspect.isawaitable(output):
                output = await output
        except Exception as error:
            text = str(error) or type(error).__name__
            return ToolResult(tool_call, ToolCallStatus.FAILED, error=text)
        if not isinstance(output, ToolOutput):
            return ToolResult(tool_call, ToolCallStatus.SUCCEEDED, result=output)
        if output.command is not None:
            try:
                await self.submit(output.command)
            except CommitRejected as rejected:
                return ToolResult(tool_call, ToolCallStatus.FAILED, error=str(rejected))
        return ToolResult(tool_call, ToolCallStatus.SUCCEEDED, result=output.result)

    async def finish(self, **fields: Any) -> PhaseReport:
        """Run RUN_END and hand the thread's state back to the kernel; the run is then closed.

        The thread is released even if RUN_END fails, with the state as last committed.
        """
        self._check_open()
        try:
            return await self.run_phase(Phase.RUN_END, **fields)
        finally:
            self._finished = True
            self._kernel._end_run(self)

    async def _tool_gate(
        self, tool_call: ToolCall, fields: Mapping[str, Any]
    ) -> tuple[GateDecision | None, PhaseReport]:
        self._check_open()
        if not isinstance(tool_call, ToolCall):
            raise TypeError(f"tool_gate takes a kernel.ToolCall, got {tool_call!r}")
        fields = {**fields, "tool_call": tool_call}
        _check_fields(fields)
        async with self._lock:
            return await self._engine.tool_gate(fields)

    def _context(self, phase: Phase, snapshot: Snapshot, fields: Mapping[str, Any]) -> PhaseContext:
        return PhaseContext(phase, self.identity, self.agent, snapshot, **fields)

    def _check_open(self) -> None:
        if self._finished:
            raise StateError(
                f"run {self.identity.run_id!r} is finished; start a new run with "
                f"kernel.start_run({self.identity.thread_id!r})."
            )

    def __repr__(self) -> str:
        return f"<Run {self.identity.run_id!r} revision={self.revision}>"


def _check_fields(fields: Mapping[str, Any]) -> None:
    unknown = set(fields) - PHASE_FIELDS
    if unknown:
        raise TypeError(
            f"unknown phase field(s) {sorted(unknown)}; a phase takes {sorted(PHASE_FIELDS)}"
        )
    messages = fields.get("messages")
    if messages is not None and not isinstance(messages, tuple):
        raise TypeError(f"messages must be a tuple, got {type(messages).__name__}")
