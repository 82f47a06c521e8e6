"""The host the engine runs in: a `Kernel` built from plugins, and the `Run`s it starts.

A Kernel validates its plugins once (`DuplicateRegistration` surfaces at construction, not
mid-run) and remembers each thread's state between runs. A Run is one pass of an agent over a
thread: run keys start at their defaults, thread keys come back as the thread last left them,
and the revision continues from the thread's last one, so a `base_revision` taken in one run
still means something in the next.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs
import msgspec

from .._durable.history import ThreadHistory
from .._durable.journal import CommitRecord, RunJournal
from .._durable.memory_threads import MemoryThreads
from .._durable.replay import ReplayReport
from .._durable.store import ThreadStore
from .._durable.stored_threads import StoredThreads
from .._durable.threads import SNAPSHOT_EVERY, HeldThread, PendingAction, SuspendedRun, ThreadHome
from .._engine.commit import LiveState
from .._engine.context import AgentSpec, PhaseContext, RunIdentity, check_phase_fields
from .._engine.invoke import call, checked, outcome
from .._engine.merge import Contribution
from .._engine.phase_engine import PhaseEngine, PhaseReport
from .._engine.plugin import Components, Plugin
from .._engine.registry import KeyBinding
from .._engine.snapshot import Snapshot
from .._errors import (
    CommitRejected,
    DecodeFailed,
    InvalidToolArguments,
    RevisionConflict,
    StateError,
    UnknownActionHandler,
    cause_text,
)
from .._profile.access import ProfileAccess
from .._profile.store import ProfileStore
from .._public import renamed
from .._values.codec import CODEC_ERRORS, dec_hook, enc_hook
from .._values.commands import StateCommand
from .._values.dead_letters import DeadLetter, DeadLetters, letter_for, retried
from .._values.frozen import thaw
from .._values.keys import RESERVED_PLUGIN_ID, RESERVED_PREFIX, KeyScope, StateKey
from .._values.messages import Message
from .._values.phases import Phase, phase_of
from .._values.specs import ScheduledAction, ScheduledActionSpec, spec_info
from .._values.toolgate import Block, GateDecision, SetResult, Suspend
from .._values.tools import ToolCall, ToolCallStatus, ToolOutput, ToolResult
from .run_lock import RunLock

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


class Kernel:
    """The registry of a set of plugins and the keeper of thread state between runs.

    With a `thread_store`, persistent thread keys (and suspended runs) are saved there at
    every checkpoint; without one they live in this kernel's memory and die with it.
    `restore_errors="skip"` lets a run start when some stored value no longer decodes: that
    key starts from its default and its stored bytes are kept unless the run writes it anew.
    Stored thread keys that no plugin of this kernel registers are carried over untouched
    (`unknown_keys="keep"`), so a plugin left out of one kernel finds its keys again in the
    next; `unknown_keys="refuse"` makes loading such a thread a `StateError` naming them.

    Every commit is journaled (`history`, `state_at`, `verify`). A checkpoint appends the
    commits since the last one to the store, and writes a snapshot of the persistent thread
    keys once `snapshot_every` records accumulated since the previous snapshot (or once
    they hold as many bytes as it, and at least 1 MiB); loading a thread replays at most
    that many records on top of its newest snapshot.
    """

    def __init__(
        self,
        plugins: Iterable[Plugin],
        *,
        profile_store: ProfileStore | None = None,
        thread_store: ThreadStore | None = None,
        max_phase_rounds: int = 16,
        restore_errors: Literal["raise", "skip"] = "raise",
        snapshot_every: int = SNAPSHOT_EVERY,
        unknown_keys: Literal["keep", "refuse"] = "keep",
    ) -> None:
        if isinstance(snapshot_every, bool) or not isinstance(snapshot_every, int):
            raise ValueError(f"snapshot_every must be a positive int, got {snapshot_every!r}")
        if snapshot_every < 1:
            raise ValueError(f"snapshot_every must be a positive int, got {snapshot_every!r}")
        if not isinstance(max_phase_rounds, int) or max_phase_rounds < 1:
            raise ValueError(f"max_phase_rounds must be a positive int, got {max_phase_rounds!r}")
        if restore_errors not in ("raise", "skip"):
            raise ValueError(f"restore_errors must be 'raise' or 'skip', got {restore_errors!r}")
        if unknown_keys not in ("keep", "refuse"):
            raise ValueError(f"unknown_keys must be 'keep' or 'refuse', got {unknown_keys!r}")
        self.components = Components.build(
            plugins, extra_keys=(KeyBinding.of(DeadLetters, plugin=RESERVED_PLUGIN_ID),)
        )
        self.profile_store = profile_store
        self.profile: ProfileAccess | None = (
            ProfileAccess(profile_store, keys=self.components.profile_keys)
            if profile_store is not None
            else None
        )
        self.thread_store = thread_store
        self.max_phase_rounds = max_phase_rounds
        keys, skip = self.components.keys, restore_errors == "skip"
        # Where threads live is decided here, once: nothing else asks whether there is a store.
        self._home: ThreadHome = (
            StoredThreads(
                keys,
                thread_store,
                skip_undecodable=skip,
                snapshot_every=snapshot_every,
                refuse_unknown=unknown_keys == "refuse",
            )
            if thread_store is not None
            else MemoryThreads(keys, skip_undecodable=skip, snapshot_every=snapshot_every)
        )
        self._history = ThreadHistory(self._home, keys)

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
        """Open a run on `thread_id`; runs no phase (the caller runs RUN_START).

        Run keys start at their defaults; thread keys are restored; the revision continues
        from the thread's last one.
        """
        hook_filter = self._check_filter(tuple(active_hook_filter))
        thread = await self._home.claim(thread_id)
        try:
            if thread.suspended is not None:
                raise StateError(
                    f"thread {thread_id!r} has a suspended run ({thread.suspended.run_id!r}) "
                    f"waiting for a decision; resume it or cancel it before starting another."
                )
            identity = RunIdentity(
                run_id=f"{thread_id}:run-{thread.count_run()}",
                thread_id=thread_id,
                agent_id=agent,
                parent_thread_id=parent_thread_id,
                parent_run_id=parent_run_id,
            )
            return self._make_run(identity, AgentSpec(agent, hook_filter), thread, {}, ())
        except BaseException:
            self._home.release(thread_id)
            raise

    async def resume_run(self, thread_id: str) -> tuple[Run, bytes]:
        """Reopen the suspended run of `thread_id` exactly as it was suspended.

        Returns the run and the detail bytes its suspender stored. Raises `StateError` when
        the thread has no suspended run.
        """
        thread = await self._home.claim(thread_id)
        try:
            record = thread.suspended
            if record is None:
                raise StateError(
                    f"thread {thread_id!r} has no suspended run to resume; start a new run."
                )
            identity = RunIdentity(
                run_id=record.run_id,
                thread_id=thread_id,
                agent_id=record.agent,
                parent_thread_id=record.parent_thread_id,
                parent_run_id=record.parent_run_id,
            )
            agent = AgentSpec(record.agent, record.active_hook_filter)
            pending: list[tuple[ScheduledAction, str | None]] = []
            letters: list[tuple[PendingAction, DecodeFailed]] = []
            for saved in record.actions:
                try:
                    pending.append(self._decode_action(saved, thread_id))
                except DecodeFailed as error:
                    if self.components.actions[saved.key].spec.on_failure != "dead_letter":
                        raise
                    letters.append((saved, error))
            run = self._make_run(identity, agent, thread, thread.run_values, pending)
            for saved, failed in letters:
                run._keep_undecodable(saved, failed)
            return run, record.detail
        except BaseException:
            self._home.release(thread_id)
            raise

    # -- the journal: history, time travel, outside commits --------------------------------

    async def history(
        self, thread_id: str, *, since: int = 0, limit: int | None = None
    ) -> list[CommitRecord]:
        """The thread's saved commits with `revision > since`, oldest first (at most `limit`).

        From the ThreadStore, or this kernel's memory without one. A live run's commits
        appear once it saves them (at every checkpoint, suspension and run end)."""
        return await self._history.history(thread_id, since=since, limit=limit)

    async def state_at(self, thread_id: str, revision: int) -> Snapshot:
        """The thread keys exactly as they were right after `revision` committed.

        Rebuilt from the newest snapshot at or before it and the records after that. A
        revision never reached, or pruned, raises `UnknownRevision`."""
        return await self._history.state_at(thread_id, revision)

    async def fork(self, thread_id: str, revision: int, new_thread_id: str) -> None:
        """Make `new_thread_id` a thread whose state and history up to `revision` are the
        source's; the source is untouched. An existing `new_thread_id` raises `StateError`."""
        await self._history.fork(thread_id, revision, new_thread_id)

    async def verify(self, thread_id: str) -> ReplayReport:
        """Rebuild the thread from its journal alone and compare it with what was stored, at
        every snapshot and at the head; the report names the first revision that differs."""
        return await self._history.verify(thread_id)

    async def prune(
        self, thread_id: str, *, before: int | None = None, keep: int | None = None
    ) -> None:
        """Forget history older than revision `before` (or all but the newest `keep`
        revisions), as far as snapshots allow: the newest snapshot at or before that
        revision and everything after it stay. `state_at` of an older revision raises
        `UnknownRevision`; everything newer still works."""
        if (before is None) == (keep is None):
            raise ValueError("prune takes one of before=<revision> or keep=<count of revisions>")
        if keep is not None:
            if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
                raise ValueError(f"keep must be a count of revisions (an int >= 0), got {keep!r}")
            head = await self._history.head(thread_id)
            if head is None:
                return
            before = max(head - keep, 0)
        assert before is not None
        await self._history.prune(thread_id, before=before)

    async def update_state(
        self,
        thread_id: str,
        command: StateCommand,
        *,
        replacing: Iterable[type[StateKey[Any, Any]]] = (),
    ) -> int:
        """Commit `command` to the thread's saved state outside any run; returns the new
        revision.

        Validated and atomic like every commit, journaled with source `"external"`. Only
        thread-scoped keys can be written, and effects and scheduled actions are refused
        (there is no run to dispatch them). A thread with a live or suspended run raises
        `StateError`; so does one another kernel saved since this one loaded it
        (`RevisionConflict`).

        `replacing` names keys whose stored value is replaced, not read: each is cleared
        first, in the same commit, and its stored bytes need not decode into today's type.
        This is how a key whose type changed is dropped (`StateCommand()` with
        `replacing=[K]`) or migrated (read its old value with `read_stored`, write the new
        one in `command`).
        """
        if not isinstance(command, StateCommand):
            raise TypeError(f"update_state takes a StateCommand, got {command!r}")
        replaced = tuple(replacing)
        if command.effects or command.scheduled_actions:
            raise StateError(
                f"update_state commits state ops only, but this command also carries "
                f"{len(command.effects)} effect(s) and {len(command.scheduled_actions)} "
                f"scheduled action(s), which need a run to dispatch; nothing was committed. "
                f"Start a run and submit the command there."
            )
        keys = self.components.keys
        for key in (*(key for key, _ in command.patch.ops), *replaced):
            binding = keys.by_class.get(key)
            if binding is not None and binding.scope is not KeyScope.THREAD:
                raise StateError(
                    f"update_state writes thread keys only, but key {binding.name!r} is "
                    f"run-scoped: run keys start afresh in every run. Nothing was committed."
                )
        names = {keys.binding(key).name for key in replaced}
        thread = await self._home.claim(thread_id, tolerate=bool(names))
        try:
            by_name = keys.by_name
            set_aside = self._home.set_aside(thread_id)
            unreadable = {
                name for name in set_aside - names if name in by_name and by_name[name].stored
            }
            if names and unreadable and not self._home.skip_undecodable:
                raise StateError(
                    f"thread {thread_id!r}: keys {sorted(unreadable)} no longer decode either, "
                    f"and update_state replaces only {sorted(names)}. Nothing was committed; "
                    f"name them in replacing= too, or fix their declarations."
                )
            if replaced:
                cleared = StateCommand()
                for key in replaced:
                    cleared.clear(key)
                command = cleared.extend(command)
            if thread.suspended is not None:
                raise StateError(
                    f"thread {thread_id!r} has a suspended run ({thread.suspended.run_id!r}); "
                    f"resume or cancel it before updating the thread's state from outside."
                )
            state = LiveState(keys, values=thread.values, revision=thread.revision)
            journal = self._home.run_journal(thread_id, None)
            state.keep_journal(journal.writer)
            if set_aside:
                state.track_touched()
            state.commit((Contribution(None, command, "external"),))
            await self._home.save(
                thread_id,
                state.stored_values(),
                revision=state.revision,
                touched=state.touched_names,
                journaled=journal.journaled(state.pending_commits()),
            )
            return state.revision
        finally:
            self._home.release(thread_id)

    async def read_stored(self, thread_id: str, key: type[StateKey[Any, Any]]) -> Any:
        """The value the thread last saved for `key`'s key string, read with `key`'s
        declaration, which need not be the one this kernel registers: give the old
        declaration of a key whose type changed, and this is its old value, typed as it was
        (its snapshot and journal decoded and replayed with the old types and `apply`).
        What a migration reads before it writes the new value with
        `update_state(..., replacing=[NewKey])`. None when the thread holds no value.
        Without a ThreadStore, values live in this kernel's memory, decoded with its own
        declarations: the value held is returned as it is."""
        return await self._home.read_as(thread_id, KeyBinding.of(key))

    def _decode_action(
        self, saved: PendingAction, thread_id: str
    ) -> tuple[ScheduledAction, str | None]:
        entry = self.components.actions.get(saved.key)
        if entry is None:
            raise UnknownActionHandler(saved.key, saved.origin)
        payload_type = spec_info(entry.spec, ScheduledActionSpec).payload_type
        try:
            payload = msgspec.json.decode(saved.payload, type=payload_type, dec_hook=dec_hook)
        except CODEC_ERRORS as error:
            raise DecodeFailed(saved.key, f"{thread_id} (pending action)", error) from error
        action = ScheduledAction(entry.spec, payload, attempt=saved.attempt, retries=saved.retries)
        return action, saved.origin

    def _check_filter(self, hook_filter: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [p for p in hook_filter if p not in self.components.plugin_ids]
        if unknown:
            raise ValueError(
                f"active_hook_filter names plugins this kernel does not have: {unknown}; "
                f"known plugins: {list(self.components.plugin_ids)}"
            )
        return hook_filter

    def _make_run(
        self,
        identity: RunIdentity,
        agent: AgentSpec,
        thread: HeldThread,
        run_values: Mapping[str, Any],
        pending: Sequence[tuple[ScheduledAction, str | None]],
    ) -> Run:
        values = {**thread.values, **run_values}
        state = LiveState(self.components.keys, values=values, revision=thread.revision)
        journal = self._home.run_journal(identity.thread_id, identity.run_id)
        state.keep_journal(journal.writer)
        if thread.suspended is not None:
            state.step = thread.suspended.step
        if self._home.set_aside(identity.thread_id):
            state.track_touched()  # to know which set-aside values this run replaced
        lease = _Lease(self._home, identity.thread_id, journal)
        return Run(self, identity, agent, state, lease, pending)


@attrs.define
class _Lease:
    """A run's hold on its thread: where its saves go, its commits on their way to the
    journal, and how it lets the thread go."""

    home: ThreadHome
    thread_id: str
    journal: RunJournal
    saves: int = 0

    async def save(self, state: LiveState, suspended: SuspendedRun | None = None) -> None:
        pending = state.pending_commits()

        def saved() -> None:  # durable now (and only once the save succeeded)
            state.forget_commits(len(pending))
            self.saves += 1

        await self.home.save(
            self.thread_id,
            state.stored_values(),
            revision=state.revision,
            touched=state.touched_names,
            journaled=self.journal.journaled(pending),
            suspended=suspended,
            on_saved=saved,
        )

    def release(self) -> None:
        self.home.release(self.thread_id)


class Run:
    """One run on one thread: phases, tool gates and submissions, strictly one at a time."""

    def __init__(
        self,
        kernel: Kernel,
        identity: RunIdentity,
        agent: AgentSpec,
        state: LiveState,
        lease: _Lease,
        pending: Sequence[tuple[ScheduledAction, str | None]] = (),
    ) -> None:
        self._kernel = kernel
        self.identity = identity
        self.agent = agent
        self._state = state
        self._lease = lease
        profile = kernel.profile
        self._read_only_profile = profile.read_only(_WRITES_HERE) if profile is not None else None
        self._phase_listeners: list[PhaseListener] = []
        self._start_listeners: list[PhaseStartListener] = []
        self._lock = RunLock()
        self._finished = False
        self._engine = PhaseEngine(
            kernel.components,
            state,
            self._context,
            allows=agent.allows,
            max_phase_rounds=kernel.max_phase_rounds,
            profile=kernel.profile,
        )
        self._engine.restore_pending(pending)

    @property
    def snapshot(self) -> Snapshot:
        return self._state.snapshot

    @property
    def revision(self) -> int:
        return self._state.revision

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def saves(self) -> int:
        """How many saves of this run succeeded (checkpoints, and the one of `finish` or
        `suspend`): 0 means nothing this run did is durable."""
        return self._lease.saves

    @property
    def durable(self) -> bool:
        """Whether this run's saves outlive the process: True when its kernel keeps threads
        in a ThreadStore (another process can then resume what it saved); False when they
        live in the kernel's memory and die with it."""
        return self._lease.home.durable

    @property
    def step(self) -> int:
        """How many STEP_START phases this run has begun (0 before the first); the journal
        records it with every commit."""
        return self._state.step

    def add_commit_listener(self, listener: Callable[[Snapshot], None]) -> None:
        """Call `listener(snapshot)` after every commit of this run."""
        self._state.add_listener(listener)

    def add_phase_listener(self, listener: PhaseListener) -> None:
        """Call `listener(run, report)` after every phase of this run (tracing, demos); an async
        listener is awaited before the phase returns."""
        self._phase_listeners.append(listener)

    def add_phase_start_listener(self, listener: PhaseStartListener) -> None:
        """Call `listener(run, phase)` before every phase of this run begins; an async
        listener is awaited first."""
        self._start_listeners.append(listener)

    def add_record_listener(self, listener: Callable[[CommitRecord], None]) -> None:
        """Call `listener(record)` after every commit of this run with its `CommitRecord`,
        every op included (what `kernel.history` shows of it without a store)."""
        state = self._state
        journal = self._lease.journal
        journal.writer.write_every_op()  # a save sorts them for the store

        def on_commit(snapshot: Snapshot) -> None:
            pending = state.noted_commit(snapshot.revision)
            if pending is not None:
                listener(journal.whole_record(pending))

        state.add_listener(on_commit)

    async def run_phase(self, phase: Phase | str, **fields: Any) -> PhaseReport:
        """Run one phase: gather, merge, commit, effects, then its actions until converged.

        `phase` is a `Phase` or its name in any case (`"step_start"`).
        """
        if self._finished:
            self._check_open()
        if type(phase) is not Phase:
            phase = phase_of(phase)
        if fields:
            check_phase_fields(fields)
        if self._start_listeners:
            await self._notify_start(phase)
        lock = self._lock
        if not lock.take_now():
            await lock.take()
        try:
            if phase is Phase.STEP_START:
                self._state.step += 1
            report = await self._engine.run_phase(phase, fields)
        finally:
            lock.release()
        if self._phase_listeners:
            await self._notify_phase(report)
        return report

    async def tool_gate(self, tool_call: ToolCall, **fields: Any) -> GateDecision | None:
        """Run TOOL_GATE hooks for `tool_call`, then the tool gates; return the decision."""
        decision, _ = await self._tool_gate(tool_call, fields)
        return decision

    async def submit(self, command: StateCommand) -> PhaseReport:
        """Commit a command from outside a hook through the same path (atomic, validated)."""
        self._check_open()
        async with self._lock:
            return await self._engine.submit(command)

    async def retry(self, letter: DeadLetter | str) -> PhaseReport:
        """Schedule a dead letter's action again, as its next attempt. It runs in its phase's
        convergence loop, as when it was first scheduled. The letter stays in `DeadLetters`
        until then: the action's own commit takes it out, or, if it fails again, replaces
        it with its next letter. A run that ends before the phase comes keeps the letter."""
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
            entry = self._kernel.components.actions.get(found.action)
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
            phase=self._kernel.components.actions[saved.key].spec.phase,
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
        """Take one tool call through its whole life: gate, BEFORE_TOOL_EXECUTE, the tool,
        its command, AFTER_TOOL_EXECUTE. (`execute_tool` is the middle part: the tool run.)

        A Block, a tool that raises, or a rejected tool command fail only this call: the
        result carries the reason for the model, and state is untouched by the failure.
        `before_execute` is awaited once the gates let the tool run, before
        BEFORE_TOOL_EXECUTE (the Agent saves the run there, so that a crash cannot run the
        tool twice unseen, and a resume runs that phase's hooks once). `on_run` is called
        right before the tool itself is.
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
            if before_execute is not None:
                await before_execute()
            result = await self.execute_tool(tool_call, tool, messages=messages, on_run=on_run)
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
        """Run BEFORE_TOOL_EXECUTE, then the tool with that phase's context (`on_run()` right
        before it), then commit the tool's command. Used by `handle_tool_call`, and by a resume
        that skips the gate."""
        await self.run_phase(Phase.BEFORE_TOOL_EXECUTE, tool_call=tool_call, messages=messages)
        profile = self._kernel.profile
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
        result = output.result if isinstance(output, ToolOutput) else output
        if isinstance(output, ToolOutput) and output.command is not None:
            try:
                self._check_open()
                async with self._lock:
                    await self._engine.submit(output.command, source=f"tool:{tool_call.name}")
            except (CommitRejected, RevisionConflict) as rejected:
                return ToolResult(tool_call, ToolCallStatus.FAILED, error=str(rejected))
        if buffer is not None:
            await buffer.apply()  # a tool's profile writes travel with its command
        return ToolResult(tool_call, ToolCallStatus.SUCCEEDED, result=result)

    async def shape_request(self, request: Any) -> Any:
        """Apply the active request transforms, in registration order, before an inference.

        Each is `(request, snapshot) -> request`; they see the snapshot as it is now.
        """
        for transform in self._kernel.components.transforms:
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
        """Persist the thread keys now (the Agent calls this at every STEP_END).

        With `resumable`, the whole run is saved as `suspend(resumable)` would save it (run
        keys and waiting actions included) and stays open: if the process dies before the
        next save, `kernel.resume_run` reopens the run from here and hands back
        `resumable`. The Agent does this before running a tool, so that a crash can never
        silently run it twice. The next save (checkpoint, finish, suspend) replaces it.

        The save is a compare-and-set on the thread's write position in the store: if
        another kernel saved the thread since this run loaded it (even without a commit),
        this raises `RevisionConflict` and saves nothing.
        """
        self._check_open()
        record = self._suspended_record(resumable) if resumable is not None else None
        async with self._lock:
            await self._lease.save(self._state, record)

    async def finish(self, **fields: Any) -> PhaseReport:
        """Run RUN_END, save the thread keys and close the run.

        The thread is saved and released even if RUN_END fails, with the state as last
        committed; the failure is then raised.
        """
        self._check_open()
        try:
            return await self.run_phase(Phase.RUN_END, **fields)
        finally:
            await self._close(save=True)

    async def suspend(self, detail: bytes = b"") -> None:
        """Save the whole run -- run keys included -- and close it without RUN_END.

        `kernel.resume_run(thread_id)` reopens it exactly as it was, in this or any
        process sharing the ThreadStore, and hands back `detail`.
        """
        self._check_open()
        record = self._suspended_record(detail)
        async with self._lock:
            await self._lease.save(self._state, record)  # on failure the run stays open
        self._finished = True
        self._lease.release()

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
            self._finished = True
            self._lease.release()

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
                    await self._lease.save(self._state)
        finally:
            self._finished = True
            self._lease.release()

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
        async with self._lock:
            decision, report = await self._engine.tool_gate(fields)
        if self._phase_listeners:
            await self._notify_phase(report)
        return decision, report

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
