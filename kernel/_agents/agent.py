"""The Agent facade: the whole phase loop behind `await agent.run(thread_id, messages)`.

`Kernel` and `Run` give full control, one phase at a time. Most users want the loop itself:
RUN_START, then steps of STEP_START → BEFORE_INFERENCE → model → AFTER_INFERENCE → per tool
call TOOL_GATE → BEFORE_TOOL_EXECUTE → tool → AFTER_TOOL_EXECUTE → STEP_END, then RUN_END,
with a checkpoint at every STEP_END, suspension when a gate says Suspend, and `resume` from
any process that shares the ThreadStore. Defaults are sensible; every part can be overridden.

This module is the facade only: what each public method promises, and which parts it puts
together. The loop of a run is `run_loop.py`, a tool call's life `tool_calls.py`, one run per
thread at a time `turns.py`, stopping a run `run_control.py`, and streaming `event_stream.py`.
The facade keeps its own state in keys under the reserved prefix `statekernel.`
(`facade_state.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Literal

import attrs

from .._durable.retention import Retention
from .._durable.store import ThreadStore
from .._durable.threads import SNAPSHOT_EVERY
from .._engine.plugin import Plugin
from .._engine.snapshot import Snapshot
from .._errors import StateError
from .._host.kernel import Kernel
from .._host.run import PhaseListener, Tool
from .._host.stores import Stores, chosen_stores
from .._profile.store import ProfileStore
from .._values import options
from .._values.dead_letters import DeadLetter, DeadLetters
from .._values.messages import MessageLike
from .._values.model import Model
from .._values.names import check_name
from .._values.tools import ToolSpec
from ..events import Event
from .event_stream import stream
from .facade_state import FacadeState
from .function_tools import spec_of
from .run_control import RunControl
from .run_input import RunInput
from .run_loop import RunLoop, TeamLink
from .run_result import PendingCall, RunResult
from .suspension import Decision, Suspension
from .turns import Turns

__all__ = ["Agent", "named_tools"]


class Agent:
    """An agent: plugins, a model and tools, driven through the phase loop; the whole loop
    behind one call.

    - `plugins`: the plugins of its `Kernel`.
    - `model`: an async callable `(InferenceRequest) -> InferenceResponse`. One that is not
      callable raises `TypeError`.
    - `tools`: a mapping of a name to `(arguments: dict, ctx: PhaseContext) -> ToolOutput |
      value`, sync or async; or an iterable of `@tool` functions, each under its own name.
      A list of anything else raises `TypeError`, and two tools of one name raise
      `ValueError`. A tool called with a name it was not offered under in that step fails
      as a tool error.
    - `system_prompt`: a system message placed first in every request (after the request
      transforms ran), never stored in the history. Not a string: `TypeError`.
    - `stores`, `profile_store`, `thread_store`: where state lives. No store given: state
      lives in this process's memory and dies with it. One argument persists it:
      `stores=statekernel.stores.embedded()` (one SQLite file in ./.statekernel, the embedded
      default) or `stores=statekernel.stores.open_stores(db)` (a file or a PostgreSQL DSN);
      or give `thread_store` and `profile_store` one by one.
    - `max_steps` (default 25): how many steps a run may take; running out ends the run
      with outcome `"failure"`. Not a positive int (a bool is not one): `ValueError`.
    - `name`: the agent's name, the `AgentSpec` name of its runs (saved with a suspended
      run: a name no store can keep, holding a lone surrogate or a NUL character, raises
      `ValueError`).
    - `max_phase_rounds`, `restore_errors`, `unknown_keys`, `snapshot_every`, `retention`
      and `chain_key`: its `Kernel`'s (see [Kernel](reference.md#statekernel.Kernel)).
    - `on_phase(run, report)`: called after every phase, for tracing; an async one is
      awaited before the loop goes on. Not callable: `TypeError`.

    The agent's `Kernel` is `agent.kernel`; `agent.tools`, `agent.model`,
    `agent.system_prompt`, `agent.max_steps` and `agent.name` are what it was given.

    A Block, a tool that raises, an unknown tool name and a rejected tool command each
    become a tool error message, and the run goes on. A phase or the model raising, or
    `max_steps` running out, ends the run with outcome `"failure"`. In that case `RUN_END`
    still runs (best effort) and the last committed state is checkpointed. See
    [agent](agent.md).
    """

    def __init__(
        self,
        plugins: Iterable[Plugin],
        model: Model,
        tools: Mapping[str, Tool] | Iterable[Tool] | None = None,
        *,
        system_prompt: str | None = None,
        stores: Stores | None = None,
        profile_store: ProfileStore | None = None,
        thread_store: ThreadStore | None = None,
        max_steps: int = 25,
        name: str = "default",
        max_phase_rounds: int = 16,
        restore_errors: Literal["raise", "skip"] = "raise",
        unknown_keys: Literal["keep", "refuse"] = "keep",
        snapshot_every: int = SNAPSHOT_EVERY,
        retention: Retention | None = None,
        on_phase: PhaseListener | None = None,
        chain_key: bytes | None = None,
    ) -> None:
        options.a_callable("model", model, "an async callable (request) -> response")
        options.positive_int("max_steps", max_steps)
        if on_phase is not None:
            options.a_callable("on_phase", on_phase, "None or a callable (run, report)")
        if system_prompt is not None:
            options.instance("system_prompt", system_prompt, str, "a string")
        check_name("agent name", name)
        profile_store, thread_store = chosen_stores(
            stores, profile_store, thread_store, owner="Agent"
        )
        self.kernel = Kernel(
            [FacadeState(), *plugins],
            profile_store=profile_store,
            thread_store=thread_store,
            max_phase_rounds=max_phase_rounds,
            restore_errors=restore_errors,
            unknown_keys=unknown_keys,
            snapshot_every=snapshot_every,
            retention=retention,
            chain_key=chain_key,
        )
        self.model = model
        self._stored = thread_store is not None  # a run's input must be what it can keep
        self.tools: dict[str, Tool] = named_tools(tools)
        self.system_prompt = system_prompt
        self._specs: dict[str, _KnownSpec] = {}
        self._turns = Turns()
        self.max_steps = max_steps
        self.name = name
        self.on_phase = on_phase
        self.team: TeamLink | None = None
        """How runs meet the `AgentTeam` whose agents this agent runs (their mail, their
        outbox): set by that team."""

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is told of every tool: the `ToolSpec` of each, in the order given.

        A tool's own `.spec` (as `@tool` functions have; renamed if offered under another
        name), else its docstring's first paragraph and arguments of any shape
        (`{"type": "object"}`)."""
        specs = []
        for name, tool in self.tools.items():
            known = self._specs.get(name)
            if known is None or known.tool is not tool:
                known = self._specs[name] = _KnownSpec(tool, spec_of(name, tool))
            specs.append(known.spec)
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
        """Append `messages` and run the loop to its end: `RUN_START`, the steps and
        `RUN_END`, with a checkpoint at every `STEP_END`.

        Each message may be spelled any `MessageLike` way: a `Message`, a string (a user
        message), a `("user", "hi")` tuple or an OpenAI-style dict; one of these given
        alone, such as a string, is one message. Anything else, and (with a ThreadStore) a
        message the store could not keep exactly (text with a lone surrogate, tool call
        arguments that are not JSON data), raises `StateValidationError` when the call is
        made: nothing runs, and no thread is made or changed.

        `retry` names dead letters of the thread (`DeadLetter`s or their ids, one or many;
        see `dead_letters`) whose actions this run schedules again, before `RUN_START`: each
        runs in its phase, as its next attempt. A letter the thread does not hold, or one
        named twice, raises `StateError` and nothing runs; anything but letters and ids
        raises `TypeError`. `parent_thread_id` and `active_hook_filter` are as for
        `Kernel.start_run`: a `parent_thread_id` no store can keep (a lone surrogate, a NUL
        character) raises `ValueError` when the call is made, as a thread id does, and
        nothing runs.

        Raises `StateError` while the thread has a suspended run. A second call on a thread
        this agent is running waits for its turn; one from inside that thread's own run (a
        tool) raises `StateError` at once. Cancelled from outside (`task.cancel()`, a
        timeout), the run still ends cleanly (calls without a result are cancelled,
        `RUN_END` runs, the state is saved) before the cancellation goes on; a tool or hook
        that is running gets the cancellation, and a tool's call is recorded as cut short.
        """
        given = RunInput.of(
            messages, parent_thread_id, active_hook_filter, retry, stored=self._stored
        )
        return await self._start(thread_id, given, RunControl())

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

        The run keeps pace with the consumer: it waits at each phase end, model answer and
        tool call until the events so far were taken. Stopping early (`break`, or closing
        the iterator) cancels the run cleanly at the next such point: the state is as last
        committed, saved, and `RUN_END` ran. Close it promptly with
        `contextlib.aclosing(agent.stream(...))`. See [streaming](streaming.md).
        """
        given = RunInput.of(
            messages, parent_thread_id, active_hook_filter, retry, stored=self._stored
        )
        return stream(lambda control: self._start(thread_id, given, control))

    async def _start(
        self,
        thread_id: str,
        given: RunInput,
        control: RunControl,
        *,
        only_with_work: bool = False,
    ) -> RunResult:
        async with self._turns.turn(thread_id, control):
            run = await self.kernel.start_run(
                thread_id,
                agent=self.name,
                parent_thread_id=given.parent_thread_id,
                active_hook_filter=given.active_hook_filter,
            )
            try:
                for letter in given.retry:
                    await run.retry(letter)
            except BaseException:
                await run.abandon()
                raise
            loop = RunLoop(
                self, run, control, incoming=given.messages, only_with_work=only_with_work
            )
            return await loop.drive(loop.begin)

    async def run_if_work(
        self, thread_id: str, *, parent_thread_id: str | None, control: RunControl | None = None
    ) -> RunResult:
        """A run of `thread_id` with no new messages, that ends at once as `"superseded"`
        (saving nothing) if the thread has nothing to answer: no mail, and a conversation
        that ends with the model's answer. The team's way to run an agent that had work
        when it last looked; `control` is how its worker stops it."""
        given = RunInput.of((), parent_thread_id, (), (), stored=self._stored)
        control = RunControl() if control is None else control
        return await self._start(thread_id, given, control, only_with_work=True)

    async def resume(self, thread_id: str, call_id: str, decision: Decision) -> RunResult:
        """Continue a suspended run with an outside `decision` on its pending call
        `call_id`.

        An unknown `call_id` raises `StateError` and changes nothing. A `decision` that is
        not a `Decision` raises `TypeError`. See
        [agent: suspend and resume](agent.md#suspend-and-resume)."""
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
            loop = RunLoop(self, run, control, step=suspension.step)
            return await loop.drive(lambda: loop.carry_on(suspension, call, decision))

    async def dead_letters(self, thread_id: str) -> tuple[DeadLetter, ...]:
        """The dead letters the thread last saved (its failed actions waiting for a retry),
        oldest first.

        `()` for none, or for an unknown thread. It changes nothing. Retry them with
        `agent.run(thread_id, ..., retry=letters)`; see
        [concepts: dead letters](concepts.md#dead-letters)."""
        held = await self.kernel.read_stored(thread_id, DeadLetters)
        return () if held is None else tuple(held)

    async def pending(self, thread_id: str) -> tuple[PendingCall, ...]:
        """The calls the thread's suspended run waits on, with their tickets; `()` when the
        thread has no suspended run (or is unknown, or is running: also when asked by a tool
        or hook of its own run, or the loop reading its stream). Changes nothing.

        After a crash this says what came back: a call whose tool was running has the ticket
        `"interrupted"` (its outcome is unknown: decide with `resume`), one the model asked
        for beside it and never started has `"not started"` (see
        [agent: crash safety](agent.md#crash-safety)).
        """
        live = self._turns.live(thread_id)
        if live is not None and live.waits_for(asyncio.current_task()):
            return ()  # its own run asks: running, so not suspended (a turn would never come)
        saved = await self._saved(thread_id)
        return () if saved is None else saved[1]

    async def _saved(self, thread_id: str) -> tuple[Snapshot, tuple[PendingCall, ...]] | None:
        """The thread as last saved and the calls its suspended run waits on, or None for a
        thread nothing saved: what `pending` says, and what a team's look at an agent
        between its runs reads (in the thread's turn, so never beside its run)."""
        async with self._turns.turn(thread_id):
            found = await self.kernel._saved(thread_id)
        if found is None:
            return None
        state, detail = found
        return state, () if detail is None else Suspension.decode(detail).pending

    async def cancel(self, thread_id: str) -> RunResult:
        """Cancel the thread's run; returns how the run ended.

        A run in progress in this agent stops at its next safe point (the phase in flight
        finishes, a model call in flight is abandoned, a running tool completes); each call
        in the history without a result gets a `CANCELLED` one. A suspended run has its
        pending calls failed as `CANCELLED`. Either way `RUN_END` runs, everything committed
        is saved, and the outcome is `"cancelled"` (unless the run was past its last safe
        point and ended on its own: then how it ended). Called from inside the run it
        cancels (a tool or hook of it), it raises `StateError`."""
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
            loop = RunLoop(self, run, control, step=suspension.step)
            return await loop.drive(lambda: loop.cancel_suspended(suspension.pending))


@attrs.frozen
class _KnownSpec:
    """A tool's spec, kept while the agent holds that same tool under its name."""

    tool: Tool
    spec: ToolSpec


def named_tools(tools: Mapping[str, Tool] | Iterable[Tool] | None) -> dict[str, Tool]:
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
