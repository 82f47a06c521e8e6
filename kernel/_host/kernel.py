"""The `Kernel`: plugins validated once, where its threads live, and the runs it starts.

A Kernel validates its plugins once (`DuplicateRegistration` surfaces at construction, not
mid-run), chooses once where its threads live between runs (a ThreadStore's home or its own
memory), and starts and resumes `Run`s on them. Its history, time travel, fork, prune and
verify read the same home.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import immutables
import msgspec

from .._durable.chain import chain_key_of
from .._durable.export import ExportedState
from .._durable.history import ThreadHistory
from .._durable.journal import CommitRecord
from .._durable.memory_threads import MemoryThreads
from .._durable.replay import ReplayReport
from .._durable.retention import Retention
from .._durable.store import ThreadStore
from .._durable.stored_threads import StoredThreads
from .._durable.threads import (
    SNAPSHOT_EVERY,
    HeldThread,
    PendingAction,
    SaveRequest,
    ThreadHome,
    check_thread_id,
)
from .._engine.commit import LiveState
from .._engine.context import AgentSpec, RunIdentity
from .._engine.merge import Contribution
from .._engine.plugin import Components, Plugin
from .._engine.registry import KeyBinding
from .._engine.snapshot import Snapshot
from .._errors import (
    DecodeFailed,
    StateError,
    UnknownActionHandler,
    UnknownThread,
)
from .._observe.spans import NoTracing, Tracing, tracing
from .._profile.access import ProfileAccess
from .._profile.store import ProfileStore
from .._values import options
from .._values.codec import CODEC_ERRORS, dec_hook
from .._values.commands import StateCommand
from .._values.dead_letters import DeadLetters
from .._values.keys import RESERVED_PLUGIN_ID, KeyScope, StateKey
from .._values.names import check_name
from .._values.reserved_keys import History, MailCursor, Outbox
from .._values.run_events import RunEvent
from .._values.specs import ScheduledAction, ScheduledActionSpec, spec_info
from .run import Lease, Run
from .stores import Stores, chosen_stores

logger = logging.getLogger("statekernel")


class Kernel:
    """The registry built from a set of plugins, and the keeper of thread state between runs.

    A kernel keeps each thread's state as its journal: every commit is journaled
    (`history`, `state_at`, `verify`). It starts and resumes the `Run`s on its threads.
    Registration is validated when the kernel is built, not mid-run
    (`DuplicateRegistration`, `InvalidDeclaration`). See [agent](agent.md) and
    [concepts: kernel and runs](concepts.md#kernel-and-runs).

    - `plugins`: the plugins this kernel registers.
    - `thread_store`: persistent thread keys (and suspended runs) are saved there at every
      checkpoint. Without one, thread keys live in this kernel's memory and die with it.
    - `profile_store`: where profile keys live (`kernel.profile` reads and writes them).
    - `stores`: both stores as one [`Stores`](reference.md#statekernel.Stores)
      (`statekernel.stores.embedded()`: one SQLite file in a folder) instead of
      `profile_store=` and `thread_store=`. A kernel never closes a store it was given.
    - `max_phase_rounds` (default 16): how many rounds of scheduled actions one phase may
      run before `PhaseRunLoopExceeded`. Not a positive int (a bool is not one):
      `ValueError`.
    - `restore_errors`: `"raise"` (the default) or `"skip"`; any other value raises
      `ValueError`. `"skip"` lets a run start when a stored value no longer decodes: that
      key starts from its default, and its stored bytes are kept unless the run writes it
      anew.
    - `snapshot_every` (default 1000): a checkpoint appends the commits since the last one
      to the store, and writes a snapshot of the persistent thread keys once this many
      records were saved since the last snapshot (or once they hold as many bytes as it,
      and at least 1 MiB). A load replays at most that many records on top of its newest
      snapshot. Not a positive int: `ValueError`. See
      [durability and history](durability.md).
    - `unknown_keys`: `"keep"` (the default) carries stored thread keys that no plugin of
      this kernel registers over untouched, so a plugin left out of one kernel finds its
      keys again in the next. `"refuse"` makes loading a thread that holds any a
      `StateError` naming them (Awaken's strict restore); nothing is loaded. Any other
      value raises `ValueError`.
    - `retention`: how much of each thread's journal is kept, a
      [`Retention`](reference.md#statekernel.Retention) (None: the default, `Retention()`,
      the newest 1,000 revisions). Anything else raises `TypeError`.
    - `chain_key`: a secret of 16 to 64 bytes (e.g. `secrets.token_bytes(32)`) that keys
      the journal chain of every thread this kernel starts in its thread store, so that
      only whoever holds it can forge or re-chain a record unseen; such a thread is read
      only with that key (`ChainKeyMissing`, `ChainKeyMismatch`). Threads stored without
      a key stay readable and unkeyed. A `str` or other non-bytes raises `TypeError`, a
      wrong length `ValueError`. See [durability: a chain only the key holder can
      forge](durability.md#a-chain-only-the-key-holder-can-forge).

    Every option is checked here, by the checks every public constructor shares: a value of
    the wrong kind (a bool or a string where an int goes) raises `TypeError`, also a
    `ValueError`; one out of range, `ValueError`; both are `StateError`s whose message starts
    with the option's name.

    Attributes:

    - `kernel.plugin_ids`: the ids of its plugins.
    - `kernel.profile_store`, `kernel.thread_store`: the stores it was given (or None).
    - `kernel.retention`: its `Retention`.
    - `kernel.chain_key`: the `chain_key` it was given (bytes), or None: what a reader of
      its threads needs (the command line's `--app` takes it from here).
    - `kernel.profile`: a `ProfileAccess` on the profile store, or None without one.
    """

    def __init__(
        self,
        plugins: Iterable[Plugin],
        *,
        stores: Stores | None = None,
        profile_store: ProfileStore | None = None,
        thread_store: ThreadStore | None = None,
        max_phase_rounds: int = 16,
        restore_errors: Literal["raise", "skip"] = "raise",
        snapshot_every: int = SNAPSHOT_EVERY,
        unknown_keys: Literal["keep", "refuse"] = "keep",
        retention: Retention | None = None,
        chain_key: bytes | None = None,
    ) -> None:
        profile_store, thread_store = chosen_stores(
            stores, profile_store, thread_store, owner="Kernel"
        )
        options.positive_int("snapshot_every", snapshot_every)
        options.positive_int("max_phase_rounds", max_phase_rounds)
        options.choice("restore_errors", restore_errors, ("raise", "skip"))
        options.choice("unknown_keys", unknown_keys, ("keep", "refuse"))
        retention = options.instance(
            "retention",
            Retention() if retention is None else retention,
            Retention,
            "a statekernel.Retention (e.g. Retention(revisions=5000) or Retention.keep_all())",
        )
        self.retention = retention
        key = chain_key_of(chain_key)
        self._chain_key = key
        # OpenTelemetry spans when the extra is installed; else the no-op NO_TRACING, with
        # nothing of it imported and nothing spent.
        self.tracing: Tracing | NoTracing = tracing()
        self.components = Components.build(
            plugins,
            extra_keys=tuple(
                KeyBinding.of(key, plugin=RESERVED_PLUGIN_ID)
                for key in (DeadLetters, History, MailCursor, Outbox)
            ),
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
                retention=retention,
                chain_key=key,
            )
            if thread_store is not None
            else MemoryThreads(
                keys, skip_undecodable=skip, snapshot_every=snapshot_every, retention=retention
            )
        )
        self._history = ThreadHistory(self._home, keys)

    @property
    def plugin_ids(self) -> tuple[str, ...]:
        """The ids of the plugins this kernel registers, in registration order."""
        return self.components.plugin_ids

    @property
    def chain_key(self) -> bytes | None:
        """The key this kernel chains the threads it starts with, and reads keyed threads
        with (None: unkeyed); fixed when the kernel is made."""
        return None if self._chain_key is None else self._chain_key.secret

    async def start_run(
        self,
        thread_id: str,
        *,
        agent: str = "default",
        parent_thread_id: str | None = None,
        parent_run_id: str | None = None,
        active_hook_filter: Iterable[str] = (),
    ) -> Run:
        """Open a run on `thread_id`; runs no phase (the caller runs `RUN_START`).

        Run keys start at their defaults, thread keys are restored, and the revision
        continues from the thread's last one. `agent` names the `AgentSpec` of the run;
        `parent_thread_id` and `parent_run_id` go into its `RunIdentity`;
        `active_hook_filter` names the plugins whose hooks, tool gates and request
        transforms may run (empty: every plugin's).

        Raises `StateError` if the thread already has a live run in this kernel or a
        suspended run. Raises `ValueError` for an empty `thread_id` or a filter that names
        an unknown plugin. Every id and name is checked as a thread id is (`check_name`):
        one that is not a string raises `NameNotAString` (a `TypeError`), and one no store
        can keep (a lone surrogate, a NUL character) `InvalidName` (a `ValueError`), before
        anything is claimed or stored.
        """
        check_name("agent", agent)
        for label, name in (
            ("parent_thread_id", parent_thread_id),
            ("parent_run_id", parent_run_id),
        ):
            if name is not None:
                check_name(label, name)
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

        Returns the run and the detail bytes passed to `run.suspend` (or to
        `run.checkpoint(resumable=...)`). Raises `StateError` when the thread has no
        suspended run.
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

    async def _saved(self, thread_id: str) -> tuple[Snapshot, bytes | None] | None:
        """The thread keys as last saved and its suspended run's detail (None: none), or
        None for a thread nothing saved (no commit, no suspended run): what `suspension`
        says, with the state a team's look at an agent between its runs wants. Read through
        the home, so a thread this kernel saved or loaded last costs a head read, not a load
        and a replay."""
        thread = await self._home.claim(thread_id)
        try:
            if thread.revision == 0 and thread.suspended is None:
                return None
            detail = None if thread.suspended is None else thread.suspended.detail
            values = immutables.Map(thread.values)
            return Snapshot(thread.revision, values, self.components.keys), detail
        finally:
            self._home.release(thread_id)

    async def suspension(self, thread_id: str) -> bytes | None:
        """The detail bytes the thread's suspended run was saved with (what `run.suspend`
        or `run.checkpoint(resumable=...)` was given), or None when the thread has no
        suspended run (or is unknown). Changes nothing.

        Raises `StateError` while this kernel has a live run on the thread."""
        saved = await self._saved(thread_id)
        return None if saved is None else saved[1]

    # -- the journal: history, time travel, outside commits --------------------------------

    async def history(
        self, thread_id: str, *, since: int = 0, limit: int | None = None
    ) -> list[CommitRecord]:
        """The thread's saved commits with `revision > since`, oldest first (at most `limit`).

        From the ThreadStore, or this kernel's memory without one. A run's commits appear
        once it saved them (at every checkpoint, suspension and run end). A thread nothing
        saved raises `UnknownThread`; records that stop short of the head (the newest
        lost) or go past it, or that do not follow one another, `JournalCorrupted`. With a
        ThreadStore, ops of `persistent=False` thread keys appear only in the kernel that
        made them (they are journaled in memory only).
        """
        return await self._history.history(thread_id, since=since, limit=limit)

    async def state_at(self, thread_id: str, revision: int) -> Snapshot:
        """The thread keys exactly as they were right after `revision` committed.

        Rebuilt from the newest snapshot at or before it and the records after that. A
        revision never reached, or pruned, raises `UnknownRevision`; a thread nothing saved,
        `UnknownThread`; a revision the journal holds but whose record is gone (deleted, or
        the newest lost while the head still names it), `JournalCorrupted`."""
        return await self._history.state_at(thread_id, revision)

    async def threads(self, *, prefix: str = "", limit: int | None = None) -> list[str]:
        """The ids of the threads saved where this kernel keeps them, sorted.

        Those in its ThreadStore (or, without one, its memory) that start with `prefix`
        (literally), at most `limit`. A thread whose run has not saved yet is not listed. A
        `prefix` that is not a string raises `TypeError`, one no store can keep (a lone
        surrogate, a NUL character) `ValueError`, as for a thread id; a `limit` that is not
        None or an int >= 0, `ValueError`."""
        check_name("prefix", prefix)
        if limit is not None:
            options.count("limit", limit, expected="None or an int >= 0")
        return await self._home.threads(prefix, limit)

    async def get_state(self, thread_id: str) -> Snapshot:
        """The thread keys as the thread last saved them (its head), without starting a run.

        `snapshot.revision` is the head revision. A thread nothing saved raises
        `UnknownThread`; one whose stored journal does not end where its head says (a
        record lost, or one past it), `JournalCorrupted`."""
        return await self._history.current(thread_id)

    async def run_events(self, thread_id: str) -> list[RunEvent]:
        """What the thread's runs did beyond their commits, oldest first.

        Each phase (`PhaseRun`: its hooks' plugins, re-runs, effects, actions), each tool
        gate decision (`GateRun`) and how each tool call ended (`ToolRun`), as their saves
        journaled them: the [run events](reference.md#statekernel.RunEvent). Empty where the
        ThreadStore does not keep them (`SupportsRunEvents`); a thread nothing saved raises
        `UnknownThread`."""
        if await self._history.head(thread_id) is None:
            raise UnknownThread(thread_id)
        return await self._home.run_events(thread_id)

    async def export_state(self, thread_id: str, *, revision: int | None = None) -> ExportedState:
        """Every stored key of the thread at `revision` (None: its head) as plain JSON data.

        The keys this kernel's plugins register appear as their values encode, every other
        key as far as its stored bytes go (`ExportedState.as_of` names those whose later
        updates only their declaration can apply). For tools that show a thread to people
        or other programs, whoever wrote it; it is what `statekernel show --json` prints.
        A thread nothing saved raises `UnknownThread`, a revision it does not hold
        `UnknownRevision`, a damaged journal (as `get_state` and `state_at` find it)
        `JournalCorrupted`."""
        return await self._history.export(thread_id, revision)

    async def fork(self, thread_id: str, revision: int, new_thread_id: str) -> None:
        """Make `new_thread_id` a new thread whose state and history up to `revision` are
        the source's.

        The source is untouched. An existing `new_thread_id` raises `StateError`."""
        await self._history.fork(thread_id, revision, new_thread_id)

    async def verify(self, thread_id: str, *, expect_head: str | None = None) -> ReplayReport:
        """Rebuild the thread from its journal alone and compare it with what was stored.

        The rebuilt state is compared at every stored snapshot and at the head; the
        `ReplayReport` names the first revision that differs, says whether the chain is
        keyed, and gives the head's digest. `expect_head`: a `head_digest` an earlier
        `verify` reported and you kept elsewhere; the report is not ok unless the journal
        still holds exactly that history up to its revision (`ValueError` if it is not
        one; `UnknownRevision` once that revision is pruned). A thread nothing saved
        raises `UnknownThread`; a keyed thread read without its key `ChainKeyMissing`."""
        return await self._history.verify(thread_id, expect_head=expect_head)

    async def prune(
        self, thread_id: str, *, before: int | None = None, keep: int | None = None
    ) -> None:
        """Forget history older than revision `before`, or all but the newest `keep`
        revisions.

        Give exactly one of them (else `ValueError`; so is a `keep` that is not an int >= 0).
        History goes as far as snapshots allow: the newest snapshot at or before that
        revision, and everything after it, stay. `state_at` of an older revision raises
        `UnknownRevision`; everything newer still works. A kernel's `Retention` prunes this
        way on its own at every save that writes a snapshot."""
        check_thread_id(thread_id)
        if (before is None) == (keep is None):
            raise ValueError("prune takes one of before=<revision> or keep=<count of revisions>")
        if keep is not None:
            options.count("keep", keep, expected="a count of revisions (an int >= 0)")
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
        thread-scoped keys can be written; effects and scheduled actions raise `StateError`
        (there is no run to dispatch them), and so does a run key. A thread with a live or
        suspended run raises `StateError`; so does one another kernel saved since this one
        loaded it (`RevisionConflict`). Anything but a `StateCommand` raises `TypeError`.

        `replacing` names keys whose stored value is cleared first, in the same commit,
        without being read: their stored bytes need not decode into today's type. This is
        how a key whose type changed is dropped (`StateCommand()` with `replacing=[K]`) or
        migrated (read its old value with `read_stored`, write the new one in `command`).
        Any other stored key that no longer decodes still raises `StateError`.
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
            saved = await self._home.save(
                SaveRequest(
                    thread_id=thread_id,
                    values=state.stored_values(),
                    revision=state.revision,
                    touched=state.touched_names,
                    journaled=journal.journaled(state.pending_commits()),
                )
            )
            saved.raise_cancellation()  # it landed, but the caller was cancelled meanwhile
            return saved.revision  # after another kernel's save, if it rebased
        finally:
            self._home.release(thread_id)

    async def read_stored(self, thread_id: str, key: type[StateKey[Any, Any]]) -> Any:
        """The value the thread last saved for `key`'s key string, read with `key`'s own
        declaration.

        That declaration need not be the one this kernel registers: give the old
        declaration of a key whose type changed, and this is its old value, typed as it was
        (its snapshot and journal decoded and replayed with the old types and `apply`).
        What a migration reads before it writes the new value with
        `update_state(..., replacing=[NewKey])`. None when the thread holds no value.
        Without a ThreadStore, values live in this kernel's memory, decoded with its own
        declarations: the value held is returned as it is. See
        [agent: a key whose type changed](agent.md#a-key-whose-type-changed)."""
        check_thread_id(thread_id)
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
        lease = Lease(self._home, identity.thread_id, journal)
        return Run(
            self.components,
            identity,
            agent,
            state,
            lease,
            pending,
            profile=self.profile,
            max_phase_rounds=self.max_phase_rounds,
            tracing=self.tracing,
        )
