"""Thread persistence: what a Kernel keeps of each thread between its runs, and the store.

A thread is its journal. A save appends the commit records since the previous save (and,
now and then, a snapshot of the persistent thread keys); a load takes the newest snapshot
and replays the records after it (`_replay`). So a checkpoint costs what changed since the
last one, and a load costs one snapshot plus a bounded tail.

A `ThreadKeeper` is the one object that loads, saves and remembers threads. It knows which
thread has a live run (one at a time per kernel), holds the thread keys between runs (all of
them without a ThreadStore; only the non-persistent ones with one), and saves with a
compare-and-set on the store's write position as it last loaded or saved it. Every save
moves that position, whatever it carries (commits, a suspension, a run ending), so of two
kernels that loaded the same position only the first save lands and the other gets a
`RevisionConflict`; no saved run id therefore repeats in a thread. A suspended run is saved
whole: its run keys, the actions still waiting
for their phase, and a `SuspendedRun` record. Values are encoded key by key
(`_key_codec`), so a value that no longer decodes fails alone, naming its key.

It knows nothing of phases, hooks or the run loop: a `Run` hands it values to save.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import attrs
import msgspec

from .._engine.invoke import through_cancellation
from .._engine.registry import KeyBinding, KeyRegistry
from .._errors import DecodeFailed, StateError, StoreError
from .._values.codec import CODEC_ERRORS
from .._values.keys import RESERVED_PREFIX, KeyScope
from .journal import CommitRecord, Journaled, JournalOp, decode_record, encode_record_bytes
from .key_codec import EncodeCache, decode_values, encode_scope
from .replay import apply_records
from .store import JournalEntry, ThreadSave, ThreadSnapshot, ThreadState, ThreadStore
from .thread_snapshots import (
    DROPPED_ON_UNINSTALL,
    RESERVED_VALUES,
    RUN_COUNT,
    VectorBase,
    read_snapshot,
    write_snapshot,
)

__all__ = ["SNAPSHOT_EVERY", "PendingAction", "SuspendedRun", "ThreadKeeper", "ThreadMemory"]


SNAPSHOT_EVERY = 1000
"""A checkpoint writes a snapshot once this many records were saved since the last one..."""
SNAPSHOT_BYTES = 1 << 20
"""...or once they hold as many bytes as the last snapshot (and at least this many): so a
load replays a bounded tail, and snapshots cost at most about what the records did."""
_int_decoder = msgspec.json.Decoder(int)
_names_decoder = msgspec.json.Decoder(list[str])


class PendingAction(msgspec.Struct, frozen=True):
    """A scheduled action saved with a suspended run: its spec key, who scheduled it, and
    its payload encoded like any persisted value."""

    key: str
    origin: str | None
    payload: msgspec.Raw
    attempt: int = 1
    retries: str | None = None


class SuspendedRun(msgspec.Struct, frozen=True, kw_only=True):
    """The kernel's record of a suspended run: who it was, the actions still waiting for
    their phase, plus the suspender's own detail."""

    run_id: str
    agent: str
    step: int = 0
    parent_thread_id: str | None = None
    parent_run_id: str | None = None
    active_hook_filter: tuple[str, ...] = ()
    actions: tuple[PendingAction, ...] = ()
    detail: bytes = b""


@attrs.define
class ThreadMemory:
    """What is known of one thread between its runs.

    `values` holds decoded thread-scope values (non-persistent ones included); `foreign` and
    `undecodable` hold stored bytes this kernel could not or may not decode, written back
    untouched. `saved_position` is the ThreadStore's write position for this thread as last
    loaded or saved, for compare-and-set. While a
    run is suspended, `suspended` is its record and `run_values` its run keys.

    Without a ThreadStore, `journal` holds every record and `snapshots` the thread values
    every `SNAPSHOT_EVERY` records (frozen values, shared, not copies). With one, the store
    holds them, and `journal` holds, for the commits of this kernel that wrote
    `persistent=False` thread keys, the whole record (the store's lacks those ops);
    `since_snapshot` and `bytes_since_snapshot` count what was saved since its
    newest snapshot, of `snapshot_bytes` bytes, and `stale` names keys whose stored ops this
    kernel could not replay (no snapshot is written while there are any).
    """

    values: dict[str, Any] = attrs.field(factory=dict)
    foreign: dict[str, bytes] = attrs.field(factory=dict)
    undecodable: dict[str, bytes] = attrs.field(factory=dict)
    revision: int = 0
    saved_position: int = 0
    runs: int = 0
    suspended: SuspendedRun | None = None
    run_values: dict[str, Any] = attrs.field(factory=dict)
    journal: list[CommitRecord] = attrs.field(factory=list)
    snapshots: list[tuple[int, dict[str, Any]]] = attrs.field(factory=list)
    since_snapshot: int = 0
    bytes_since_snapshot: int = 0
    snapshot_bytes: int = 0
    stale: frozenset[str] = frozenset()
    vector_bases: dict[str, VectorBase] = attrs.field(factory=dict)
    dropped: frozenset[str] = frozenset()
    """Keys of an uninstalled plugin that said to drop them: gone from `values` and
    `foreign`; the next save's first record clears them in the journal, and the next
    snapshot leaves their bytes out."""
    drop_marker: frozenset[str] = frozenset()
    """The keys the stored snapshot lists as dropped on uninstall."""


class ThreadKeeper:
    """Loads, saves and remembers threads for one kernel; one live run per thread."""

    def __init__(
        self,
        registry: KeyRegistry,
        store: ThreadStore | None,
        *,
        skip_undecodable: bool,
        snapshot_every: int = SNAPSHOT_EVERY,
        refuse_unknown: bool = False,
    ) -> None:
        self._registry = registry
        self._refuse_unknown = refuse_unknown
        self._snapshot_every = snapshot_every
        self._store = store
        self._skip_undecodable = skip_undecodable
        self._threads: dict[str, ThreadMemory] = {}
        self._live: set[str] = set()

    async def claim(self, thread_id: str, *, tolerate: bool = False) -> ThreadMemory:
        """Mark the thread as having a live run and return it as last saved.

        Raises `StateError` if it already has one in this kernel. A failed load releases
        the claim again. With `tolerate`, stored bytes that no longer decode are set aside
        (`undecodable`, `stale`) whatever `skip_undecodable` says, for a caller that will
        replace them.
        """
        if not isinstance(thread_id, str) or not thread_id:
            raise ValueError(f"thread_id must be a non-empty string, got {thread_id!r}")
        if thread_id in self._live:
            raise StateError(
                f"thread {thread_id!r} already has a live run in this kernel; finish it "
                f"(await run.finish()) before starting another."
            )
        self._live.add(thread_id)
        try:
            thread = self._threads.get(thread_id) or ThreadMemory()
            if self._store is not None:
                thread = await self._load(thread_id, thread, tolerate=tolerate)
            self._threads[thread_id] = thread
            return thread
        except BaseException:
            self._live.discard(thread_id)
            raise

    async def read_as(self, thread_id: str, binding: KeyBinding) -> Any:
        """The thread's last saved value of `binding`'s key string, decoded and replayed
        with `binding`'s declaration alone (None when it holds none)."""
        name = binding.name
        if self._store is None:
            memory = self._threads.get(thread_id)
            return None if memory is None else memory.values.get(name)
        stored = await self._loaded(thread_id)
        if stored is None:
            return None
        registry = KeyRegistry([binding])
        restored, _ = await read_snapshot(
            registry,
            ThreadSnapshot(stored.snapshot_revision, stored.values),
            self._fetcher(thread_id),
            record=thread_id,
            skip_undecodable=False,
            exclude=lambda other: other != name,
        )
        records = _records_of(stored, thread_id)
        apply_records(registry, restored.values, records, thread_id=thread_id, from_store=True)
        return restored.values.get(name)

    async def _loaded(self, thread_id: str) -> ThreadState | None:
        """The thread as the store holds it; a store's own failure is a `StoreError`."""
        assert self._store is not None
        try:
            return await self._store.load(thread_id)
        except StateError:
            raise
        except Exception as error:
            raise StoreError("thread load", error, key=thread_id) from error

    def _fetcher(self, thread_id: str) -> Callable[[int], Awaitable[ThreadSnapshot | None]]:
        """How `read_snapshot` fetches the older snapshots a Vector extends."""
        store = self._store
        assert store is not None

        async def fetch(revision: int) -> ThreadSnapshot | None:
            return await store.snapshot_at(thread_id, revision)

        return fetch

    def count_run(self, thread: ThreadMemory) -> int:
        """Count a new run of `thread` (saved with it); returns its number, from 1."""
        thread.runs += 1
        return thread.runs

    def release(self, thread_id: str) -> None:
        """End the thread's live run; forget what the store now holds in full."""
        self._live.discard(thread_id)
        thread = self._threads.get(thread_id)
        if (
            self._store is not None
            and thread is not None
            and thread.saved_position > 0
            and not thread.values
            and not thread.journal
            and thread.suspended is None
        ):
            del self._threads[thread_id]  # everything it held is in the store

    @property
    def store(self) -> ThreadStore | None:
        return self._store

    @property
    def skip_undecodable(self) -> bool:
        return self._skip_undecodable

    def is_live(self, thread_id: str) -> bool:
        return thread_id in self._live

    def forget(self, thread_id: str) -> None:
        """Drop what this kernel remembers of a thread without a live run (its store copy
        is all there is)."""
        if thread_id not in self._live:
            self._threads.pop(thread_id, None)

    def adopt(self, thread_id: str, thread: ThreadMemory) -> None:
        """Hold a thread made outside a run (a fork, without a store)."""
        self._threads[thread_id] = thread

    def remembered(self, thread_id: str) -> ThreadMemory | None:
        """What this kernel holds of the thread in memory (None: nothing, or all in the store)."""
        return self._threads.get(thread_id)

    async def save(
        self,
        thread_id: str,
        thread: ThreadMemory,
        values: Mapping[str, Any],
        *,
        revision: int,
        touched: frozenset[str],
        cache: EncodeCache,
        journaled: Journaled,
        suspended: SuspendedRun | None = None,
        on_saved: Callable[[], None] | None = None,
    ) -> None:
        """Save a run's commits since its last save and where it stands.

        `on_saved` is called once the save is durable and noted, before anything else can
        happen (also when a cancellation arrived during the save: it is raised after).

        With a store: the `journaled` records are appended in the store, with a snapshot of
        the persistent thread keys when the snapshot policy says so (or a key needs one);
        without one, the records and the values stay in memory.
        With `suspended`, the run keys are saved too, with the record. Raises before changing
        anything if a value cannot be encoded or the store refuses the save; the run then
        stays open, so the caller can still end it cleanly. `touched` names the keys the run
        wrote, whose set-aside undecodable bytes it replaced.
        """
        registry = self._registry
        records = journaled.records
        if self._store is None:
            thread_values, run_values = _split_by_scope(registry, values)
        else:
            # Only what this save writes is looked at, so its cost follows what changed, not
            # how many keys the thread holds.
            thread_values = run_values = {}
        if self._store is not None:
            undecodable = {
                name: data for name, data in thread.undecodable.items() if name not in touched
            }
            # Keys dropped on uninstall are cleared by this save's first record, so that the
            # journal replays to their absence (from any kernel, with or without their
            # plugin); a snapshot, when one can be written, then forgets their bytes and
            # carries the list of such keys this kernel declares.
            marking = bool(thread.dropped) or (thread.drop_marker != registry.dropped_on_uninstall)
            if thread.dropped and records:
                clears = tuple(JournalOp(n, "clear") for n in sorted(thread.dropped))
                first = msgspec.structs.replace(records[0], ops=(*clears, *records[0].ops))
                records = [first, *records[1:]]
            entries = tuple(JournalEntry(r.revision, encode_record_bytes(r)) for r in records)
            added = sum(len(entry.data) for entry in entries)
            # A key whose op could not be journaled, or that this run wrote over bytes it
            # could not read, can only be rebuilt from a snapshot from now on.
            by_name = registry.by_name
            rewritten = {
                name
                for name in touched & (thread.stale | thread.undecodable.keys())
                if (binding := by_name.get(name)) is not None and binding.stored
            }
            blocking = thread.stale - rewritten
            # Where other records block a snapshot, a key this save clears needs none for the
            # bytes it could not read when those were journal ops only: replay skips updates
            # a later clear supersedes. (Otherwise the snapshot is written: it lets `prune`
            # drop the old records, and older kernels read the thread.)
            superseded = (
                (rewritten & _cleared(records)) - thread.undecodable.keys()
                if rewritten and blocking
                else set()
            )
            needed = journaled.unrecorded | (rewritten - superseded)
            snapshot = None
            if entries and (needed or marking or self._snapshot_due(thread, len(entries), added)):
                if blocking and needed:
                    raise StateError(
                        f"thread {thread_id!r}: keys {sorted(needed)} can only be saved with a "
                        f"snapshot, but keys {sorted(blocking)} hold records this kernel cannot "
                        f"replay (no plugin of it registers them as persistent thread keys), "
                        f"and a snapshot would hide them. Nothing was saved; save from a kernel "
                        f"that registers them."
                    )
                if not blocking:
                    stored = _named(values, registry.stored_names)
                    encoded, bases = write_snapshot(
                        registry, stored, cache, thread.vector_bases, revision
                    )
                    snapshot = {**thread.foreign, **undecodable, **encoded}
                    if registry.dropped_on_uninstall:
                        names = sorted(registry.dropped_on_uninstall)
                        snapshot[DROPPED_ON_UNINSTALL] = msgspec.json.encode(names)
            save = ThreadSave(
                revision=revision,
                records=entries,
                snapshot=snapshot,
                runs=thread.runs,
                run_values=(
                    encode_scope(registry, _named(values, registry.run_names), KeyScope.RUN, cache)
                    if suspended is not None
                    else None
                ),
                suspended=msgspec.json.encode(suspended) if suspended is not None else None,
            )
            # A save cancelled half-way may still commit (a SQLite write runs in its own
            # thread): wait for it whatever happens, so that what is noted below is what
            # the store has. A cancellation meanwhile is raised once that is noted.
            try:
                _, interrupted = await through_cancellation(
                    self._store.save(thread_id, save, expected_position=thread.saved_position)
                )
            except StateError:
                raise
            except Exception as error:
                raise StoreError("thread save", error, key=thread_id) from error
            thread.saved_position += 1
            thread.journal.extend(journaled.in_memory)
            thread.undecodable = undecodable
            if entries:
                thread.dropped = frozenset()  # cleared by a saved record
                thread.stale -= superseded
            if snapshot is not None:
                thread.drop_marker = registry.dropped_on_uninstall
                thread.since_snapshot = thread.bytes_since_snapshot = 0
                thread.snapshot_bytes = sum(len(data) for data in snapshot.values())
                thread.vector_bases = bases
                thread.stale = frozenset()
            else:
                thread.since_snapshot += len(entries)
                thread.bytes_since_snapshot += added
            # The store holds the persistent keys; memory keeps only what it must not.
            thread_values = _named(values, registry.volatile_thread_names)
            run_values = _named(values, registry.volatile_run_names)
            if interrupted:
                self._finish_save(thread, thread_values, run_values, revision, suspended)
                if on_saved is not None:
                    on_saved()
                raise asyncio.CancelledError
        else:
            thread.journal.extend(records)
            thread.since_snapshot += len(records)
            if records and (journaled.unrecorded or thread.since_snapshot >= self._snapshot_every):
                thread.snapshots.append((revision, dict(thread_values)))
                thread.since_snapshot = 0
        self._finish_save(thread, thread_values, run_values, revision, suspended)
        if on_saved is not None:
            on_saved()

    @staticmethod
    def _finish_save(
        thread: ThreadMemory,
        thread_values: dict[str, Any],
        run_values: dict[str, Any],
        revision: int,
        suspended: SuspendedRun | None,
    ) -> None:
        thread.values = thread_values
        thread.run_values = run_values if suspended is not None else {}
        thread.revision = revision
        thread.suspended = suspended

    def _snapshot_due(self, thread: ThreadMemory, count: int, size: int) -> bool:
        if thread.since_snapshot + count >= self._snapshot_every:
            return True
        return thread.bytes_since_snapshot + size >= max(SNAPSHOT_BYTES, thread.snapshot_bytes)

    async def _load(
        self, thread_id: str, memory: ThreadMemory, *, tolerate: bool = False
    ) -> ThreadMemory:
        """The thread as the store has it, with non-persistent keys from memory."""
        assert self._store is not None
        skip = self._skip_undecodable or tolerate
        stored = await self._loaded(thread_id)
        registry = self._registry
        if stored is None and memory.saved_position > 0:
            return ThreadMemory()  # deleted from the store since: a new thread
        if stored is None:
            return ThreadMemory(
                values=_volatile(registry, memory.values),
                revision=memory.revision,
                runs=memory.runs,
                journal=memory.journal,
            )
        runs_raw = stored.values.get(RUN_COUNT)
        restored, bases = await read_snapshot(
            registry,
            ThreadSnapshot(stored.snapshot_revision, stored.values),
            self._fetcher(thread_id),
            record=thread_id,
            skip_undecodable=skip,
            exclude=lambda name: name in RESERVED_VALUES,
        )
        marker = stored.values.get(DROPPED_ON_UNINSTALL)
        try:
            drop_marker = frozenset(_names_decoder.decode(marker) if marker is not None else ())
        except CODEC_ERRORS as error:
            raise DecodeFailed(DROPPED_ON_UNINSTALL, thread_id, error) from error
        dropped = frozenset(name for name in drop_marker if name not in registry.by_name)
        for name in dropped:  # its plugin is gone and said not to keep it
            restored.foreign.pop(name, None)
            restored.undecodable.pop(name, None)
        records = _records_of(stored, thread_id)
        ends_at = records[-1].revision if records else stored.snapshot_revision
        if ends_at != stored.revision:
            raise StoreError(
                "thread load",
                ValueError(
                    f"the journal of thread {thread_id!r} ends at revision {ends_at} but its "
                    f"head is at revision {stored.revision}: the store lost records"
                ),
                key=thread_id,
            )
        if self._refuse_unknown:
            self._check_known(thread_id, restored.foreign, records, stored.run_values, dropped)
        stale = apply_records(
            registry,
            restored.values,
            records,
            from_store=True,
            thread_id=thread_id,
            unreadable=(*restored.foreign, *restored.undecodable),
            skip_undecodable=skip,
            lost=set(),  # unknown until a snapshot, but no reason to hold snapshots back
        )
        values = {**_volatile(registry, memory.values), **restored.values}
        suspended = None
        run_values: dict[str, Any] = {}
        if stored.suspended is not None:
            suspended = msgspec.json.decode(stored.suspended, type=SuspendedRun)
            run_values = {
                **_volatile(registry, memory.run_values),
                **decode_values(
                    registry,
                    stored.run_values or {},
                    record=thread_id,
                    skip_undecodable=skip,
                    scope=KeyScope.RUN,
                ).values,
            }
        legacy_runs = _int_decoder.decode(runs_raw) if runs_raw is not None else 0
        return ThreadMemory(
            values=values,
            foreign=restored.foreign,
            undecodable=restored.undecodable,
            revision=stored.revision,
            saved_position=stored.position,
            runs=max(stored.runs, legacy_runs),
            suspended=suspended,
            run_values=run_values,
            since_snapshot=len(records),
            bytes_since_snapshot=sum(len(entry.data) for entry in stored.records),
            snapshot_bytes=sum(len(data) for data in stored.values.values()),
            stale=frozenset(stale) - dropped,
            vector_bases=bases,
            journal=memory.journal,
            dropped=dropped,
            drop_marker=drop_marker,
        )

    def _check_known(
        self,
        thread_id: str,
        foreign: Mapping[str, bytes],
        records: list[CommitRecord],
        run_values: Mapping[str, bytes] | None,
        dropped: frozenset[str],
    ) -> None:
        """Refuse a thread that holds keys no plugin of this kernel registers (strict): in
        its snapshot, its journal since, or a suspended run's run keys."""
        by_name = self._registry.by_name
        unknown = {name for name in foreign if name not in RESERVED_VALUES}
        unknown.update(op.key for record in records for op in record.ops if op.key not in by_name)
        unknown -= dropped  # dropped on uninstall, as their plugin asked: not kept at all
        unknown.update(name for name in run_values or () if name not in by_name)
        if not unknown:
            return
        reserved = sorted(name for name in unknown if name.startswith(RESERVED_PREFIX))
        hint = (
            f" Keys {reserved} are the Agent facade's own: load the thread with an Agent."
            if reserved
            else ""
        )
        raise StateError(
            f"thread {thread_id!r} holds keys no plugin of this kernel registers: "
            f"{sorted(unknown)}, and this kernel refuses unknown stored keys "
            f"(unknown_keys='refuse'). Nothing was loaded. Add the plugins that declare "
            f"them, or load the thread with unknown_keys='keep' (the default), which carries "
            f"them over untouched.{hint}"
        )


def _cleared(records: Iterable[CommitRecord]) -> set[str]:
    """The keys these records clear."""
    return {op.key for record in records for op in record.ops if op.kind == "clear"}


def _records_of(stored: ThreadState, thread_id: str) -> list[CommitRecord]:
    return [
        decode_record(entry.data, thread_id=thread_id, revision=entry.revision)
        for entry in stored.records
    ]


def _named(values: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The held values of `names` (a lookup per name, not a scan of `values`)."""
    return {name: values[name] for name in names if name in values}


def _split_by_scope(
    registry: KeyRegistry, values: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Registered values split into (thread-scoped, run-scoped)."""
    thread_values: dict[str, Any] = {}
    run_values: dict[str, Any] = {}
    for name, value in values.items():
        binding = registry.by_name.get(name)
        if binding is not None:
            target = thread_values if binding.scope is KeyScope.THREAD else run_values
            target[name] = value
    return thread_values, run_values


def _volatile(registry: KeyRegistry, values: Mapping[str, Any]) -> dict[str, Any]:
    """The non-persistent keys among `values`: they live in kernel memory only."""
    return {
        name: value
        for name, value in values.items()
        if (binding := registry.by_name.get(name)) is not None and not binding.persistent
    }
