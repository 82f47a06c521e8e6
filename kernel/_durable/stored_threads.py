"""Threads in a ThreadStore: the home of a Kernel made with one.

A thread is its journal. A save appends the commit records since the previous save (and,
now and then, a snapshot of the persistent thread keys); a load takes the newest snapshot
and replays the records after it (`replay`). So a checkpoint costs what changed since the
last one, and a load costs one snapshot plus a bounded tail.

Every save is a compare-and-set on the store's write position as this kernel last loaded or
saved it, and moves that position, whatever it carries (commits, a suspension, a run
ending): of two kernels that loaded the same position only the first save lands and the
other gets a `RevisionConflict`, so no saved run id repeats in a thread. A suspended run is
saved whole: its run keys, the actions still waiting for their phase, and a `SuspendedRun`
record. Values are encoded key by key (`key_codec`), so a value that no longer decodes
fails alone, naming its key.

The kernel's memory keeps of a thread only what the store must not hold (`persistent=False`
keys, and the whole records of the commits that wrote them) and what it knows of the
store's copy (`_Kept`). It knows nothing of phases, hooks or the run loop: a `Run` hands it
values to save.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import msgspec

from .._engine.invoke import through_cancellation
from .._engine.registry import KeyBinding, KeyRegistry
from .._errors import DecodeFailed, StateError, StoreError
from .._values.codec import CODEC_ERRORS
from .._values.keys import RESERVED_PREFIX, KeyScope
from .journal import (
    CommitRecord,
    Journaled,
    JournalOp,
    RunJournal,
    decode_record,
    encode_record_bytes,
)
from .key_codec import EncodeCache, decode_values, encode_scope
from .replay import apply_records
from .store import JournalEntry, ThreadSave, ThreadSnapshot, ThreadState, ThreadStore
from .stored_journal import StoredJournal
from .thread_snapshots import (
    DROPPED_ON_UNINSTALL,
    RESERVED_VALUES,
    RUN_COUNT,
    VectorBase,
    read_snapshot,
    referenced_revisions,
    whole_snapshot,
    write_snapshot,
)
from .threads import SNAPSHOT_EVERY, HeldThread, LiveRuns, SuspendedRun

__all__ = ["SNAPSHOT_BYTES", "StoredThreads"]


SNAPSHOT_BYTES = 1 << 20
"""A save writes a snapshot once the records saved since the last one hold as many bytes
as it did (and at least this many), as well as every `snapshot_every` records: so a load
replays a bounded tail, and snapshots cost at most about what the records did."""
_int_decoder = msgspec.json.Decoder(int)
_names_decoder = msgspec.json.Decoder(list[str])


@attrs.define
class _Kept:
    """What this kernel keeps of one stored thread: what it handed the run, and what it
    knows of the store's copy.

    `position` is the store's write position for the thread as last loaded or saved, for
    compare-and-set. `foreign` and `undecodable` hold snapshot bytes this kernel may not or
    could not decode, written back untouched. `since_snapshot` and `bytes_since_snapshot`
    count what was saved since the newest snapshot, of `snapshot_bytes` bytes, whose
    Vectors (`vector_bases`) the next one may extend; `stale` names keys whose stored ops
    this kernel could not replay (no snapshot is written while there are any). `whole`
    holds, for the commits of this kernel that wrote `persistent=False` thread keys, the
    whole record (the store's lacks those ops). `cache` holds this claim's encodings.
    """

    held: HeldThread = attrs.field(factory=HeldThread)
    position: int = 0
    foreign: dict[str, bytes] = attrs.field(factory=dict)
    undecodable: dict[str, bytes] = attrs.field(factory=dict)
    since_snapshot: int = 0
    bytes_since_snapshot: int = 0
    snapshot_bytes: int = 0
    stale: frozenset[str] = frozenset()
    vector_bases: dict[str, VectorBase] = attrs.field(factory=dict)
    dropped: frozenset[str] = frozenset()
    """Keys of an uninstalled plugin that said to drop them: gone from `held.values` and
    `foreign`; the next save's first record clears them in the journal, and the next
    snapshot leaves their bytes out."""
    drop_marker: frozenset[str] = frozenset()
    """The keys the stored snapshot lists as dropped on uninstall."""
    whole: list[CommitRecord] = attrs.field(factory=list)
    cache: EncodeCache = attrs.field(factory=EncodeCache)

    def note_save(
        self,
        save: ThreadSave,
        size: int,
        *,
        undecodable: dict[str, bytes],
        superseded: set[str],
        whole: tuple[CommitRecord, ...],
        bases: dict[str, VectorBase],
        drop_marker: frozenset[str],
    ) -> None:
        """Note what the store now holds after `save` (its records of `size` bytes)."""
        self.position += 1
        self.whole.extend(whole)
        self.undecodable = undecodable
        if save.records:
            self.dropped = frozenset()  # cleared by a saved record
            self.stale -= superseded
        if save.snapshot is None:
            self.since_snapshot += len(save.records)
            self.bytes_since_snapshot += size
            return
        self.drop_marker = drop_marker
        self.since_snapshot = self.bytes_since_snapshot = 0
        self.snapshot_bytes = sum(len(data) for data in save.snapshot.values())
        self.vector_bases = bases
        self.stale = frozenset()


class StoredThreads:
    """A kernel's threads in a ThreadStore; one live run per thread."""

    durable = True

    def __init__(
        self,
        registry: KeyRegistry,
        store: ThreadStore,
        *,
        skip_undecodable: bool,
        snapshot_every: int = SNAPSHOT_EVERY,
        refuse_unknown: bool = False,
    ) -> None:
        self._registry = registry
        self._store = store
        self.skip_undecodable = skip_undecodable
        self._snapshot_every = snapshot_every
        self._refuse_unknown = refuse_unknown
        self._threads: dict[str, _Kept] = {}
        self._live = LiveRuns()

    # -- claiming and letting go ----------------------------------------------------------

    async def claim(self, thread_id: str, *, tolerate: bool = False) -> HeldThread:
        self._live.take(thread_id)
        try:
            kept = await self._load(thread_id, self._threads.get(thread_id), tolerate=tolerate)
        except BaseException:
            self._live.drop(thread_id)
            raise
        self._threads[thread_id] = kept
        return kept.held

    def release(self, thread_id: str) -> None:
        """End the thread's live run; forget what the store now holds in full."""
        self._live.drop(thread_id)
        kept = self._threads.get(thread_id)
        if kept is None:
            return
        held = kept.held
        if kept.position > 0 and not held.values and not kept.whole and held.suspended is None:
            del self._threads[thread_id]  # everything it held is in the store
        else:
            kept.cache = EncodeCache()  # the next claim loads afresh: hold no old values

    def is_live(self, thread_id: str) -> bool:
        return thread_id in self._live

    def set_aside(self, thread_id: str) -> frozenset[str]:
        kept = self._threads.get(thread_id)
        return frozenset() if kept is None else kept.stale.union(kept.undecodable)

    def run_journal(self, thread_id: str, run_id: str | None) -> RunJournal:
        return RunJournal(self._registry, thread_id=thread_id, run_id=run_id, for_store=True)

    # -- saving ----------------------------------------------------------------------------

    async def save(
        self,
        thread_id: str,
        values: Mapping[str, Any],
        *,
        revision: int,
        touched: frozenset[str],
        journaled: Journaled,
        suspended: SuspendedRun | None = None,
        on_saved: Callable[[], None] | None = None,
    ) -> None:
        """Append the run's records, with a snapshot of the persistent thread keys when the
        policy says so (`_snapshot_due`) or a key needs one (`_snapshot_needs`).

        Only what this save writes is looked at, so its cost follows what changed, not how
        many keys the thread holds.
        """
        kept = self._threads[thread_id]
        records = _with_drop_clears(kept.dropped, journaled.records)
        entries = tuple(JournalEntry(r.revision, encode_record_bytes(r)) for r in records)
        size = sum(len(entry.data) for entry in entries)
        undecodable = {name: data for name, data in kept.undecodable.items() if name not in touched}
        needed, blocking, superseded = self._snapshot_needs(
            kept, records, touched, journaled.unrecorded
        )
        snapshot, bases = None, kept.vector_bases
        if entries and (needed or self._marking(kept) or self._snapshot_due(kept, entries, size)):
            snapshot, bases = self._snapshot(
                thread_id, kept, values, undecodable, needed, blocking, revision
            )
        save = ThreadSave(
            revision=revision,
            records=entries,
            snapshot=snapshot,
            runs=kept.held.runs,
            run_values=self._run_values(values, kept.cache) if suspended is not None else None,
            suspended=msgspec.json.encode(suspended) if suspended is not None else None,
        )
        interrupted = await self._write(thread_id, save, kept.position)
        registry = self._registry
        kept.note_save(
            save,
            size,
            undecodable=undecodable,
            superseded=superseded,
            whole=journaled.in_memory,
            bases=bases,
            drop_marker=registry.dropped_on_uninstall,
        )
        # The store holds the persistent keys; memory keeps only what it must not.
        kept.held.note_saved(
            _named(values, registry.volatile_thread_names),
            _named(values, registry.volatile_run_names),
            revision,
            suspended,
        )
        if on_saved is not None:
            on_saved()
        if interrupted:
            raise asyncio.CancelledError

    def _snapshot_needs(
        self,
        kept: _Kept,
        records: list[CommitRecord],
        touched: frozenset[str],
        unrecorded: frozenset[str],
    ) -> tuple[frozenset[str], frozenset[str], set[str]]:
        """(needed, blocking, superseded): the keys that can be rebuilt only from a snapshot
        from now on, the keys whose records this kernel cannot replay (a snapshot would hide
        them), and the stale keys this save's clears make harmless."""
        # A key whose op could not be journaled, or that this run wrote over bytes it could
        # not read, can only be rebuilt from a snapshot from now on.
        by_name = self._registry.by_name
        rewritten = {
            name
            for name in touched & (kept.stale | kept.undecodable.keys())
            if (binding := by_name.get(name)) is not None and binding.stored
        }
        blocking = kept.stale - rewritten
        # Where other records block a snapshot, a key this save clears needs none for the
        # bytes it could not read when those were journal ops only: replay skips updates a
        # later clear supersedes. (Otherwise the snapshot is written: it lets `prune` drop
        # the old records, and older kernels read the thread.)
        superseded = (
            (rewritten & _cleared(records)) - kept.undecodable.keys()
            if rewritten and blocking
            else set()
        )
        return unrecorded | (rewritten - superseded), blocking, superseded

    def _marking(self, kept: _Kept) -> bool:
        """Whether a snapshot must change the list of keys dropped on uninstall."""
        return bool(kept.dropped) or kept.drop_marker != self._registry.dropped_on_uninstall

    def _snapshot_due(self, kept: _Kept, entries: tuple[JournalEntry, ...], size: int) -> bool:
        if kept.since_snapshot + len(entries) >= self._snapshot_every:
            return True
        return kept.bytes_since_snapshot + size >= max(SNAPSHOT_BYTES, kept.snapshot_bytes)

    def _snapshot(
        self,
        thread_id: str,
        kept: _Kept,
        values: Mapping[str, Any],
        undecodable: dict[str, bytes],
        needed: frozenset[str],
        blocking: frozenset[str],
        revision: int,
    ) -> tuple[dict[str, bytes] | None, dict[str, VectorBase]]:
        """The snapshot this save writes and the Vectors it holds, or none (and the bases
        as they were) while records this kernel cannot replay block it."""
        if blocking and needed:
            raise StateError(
                f"thread {thread_id!r}: keys {sorted(needed)} can only be saved with a "
                f"snapshot, but keys {sorted(blocking)} hold records this kernel cannot "
                f"replay (no plugin of it registers them as persistent thread keys), and a "
                f"snapshot would hide them. Nothing was saved; save from a kernel that "
                f"registers them."
            )
        if blocking:
            return None, kept.vector_bases
        registry = self._registry
        stored = _named(values, registry.stored_names)
        encoded, bases = write_snapshot(registry, stored, kept.cache, kept.vector_bases, revision)
        # Keys dropped on uninstall leave it, and it lists those this kernel declares.
        snapshot = {**kept.foreign, **undecodable, **encoded}
        if registry.dropped_on_uninstall:
            names = sorted(registry.dropped_on_uninstall)
            snapshot[DROPPED_ON_UNINSTALL] = msgspec.json.encode(names)
        return snapshot, bases

    def _run_values(self, values: Mapping[str, Any], cache: EncodeCache) -> dict[str, bytes]:
        """A suspended run's run keys, encoded."""
        registry = self._registry
        return encode_scope(registry, _named(values, registry.run_names), KeyScope.RUN, cache)

    async def _write(self, thread_id: str, save: ThreadSave, position: int) -> bool:
        """Write `save` if the store is still at `position`; returns whether a cancellation
        arrived meanwhile (to be raised once the save is noted).

        A save cancelled half-way may still commit (a SQLite write runs in its own thread):
        this waits for it whatever happens, so that what is noted is what the store has.
        """
        try:
            _, interrupted = await through_cancellation(
                self._store.save(thread_id, save, expected_position=position)
            )
        except StateError:
            raise
        except Exception as error:
            raise StoreError("thread save", error, key=thread_id) from error
        return interrupted

    # -- loading ---------------------------------------------------------------------------

    async def _loaded(self, thread_id: str) -> ThreadState | None:
        """The thread as the store holds it; a store's own failure is a `StoreError`."""
        try:
            return await self._store.load(thread_id)
        except StateError:
            raise
        except Exception as error:
            raise StoreError("thread load", error, key=thread_id) from error

    def _fetcher(self, thread_id: str) -> Callable[[int], Awaitable[ThreadSnapshot | None]]:
        """How `read_snapshot` fetches the older snapshots a Vector extends."""
        store = self._store

        async def fetch(revision: int) -> ThreadSnapshot | None:
            return await store.snapshot_at(thread_id, revision)

        return fetch

    async def _load(self, thread_id: str, previous: _Kept | None, *, tolerate: bool) -> _Kept:
        """The thread as the store has it, with non-persistent keys from memory."""
        previous = previous or _Kept()
        stored = await self._loaded(thread_id)
        if stored is None:
            if previous.position > 0:
                return _Kept()  # deleted from the store since: a new thread
            held = previous.held
            return _Kept(
                HeldThread(_volatile(self._registry, held.values), held.revision, held.runs),
                whole=previous.whole,
            )
        registry = self._registry
        skip = self.skip_undecodable or tolerate
        restored, bases = await read_snapshot(
            registry,
            ThreadSnapshot(stored.snapshot_revision, stored.values),
            self._fetcher(thread_id),
            record=thread_id,
            skip_undecodable=skip,
            exclude=lambda name: name in RESERVED_VALUES,
        )
        drop_marker = _drop_marker(stored, thread_id)
        dropped = frozenset(name for name in drop_marker if name not in registry.by_name)
        for name in dropped:  # its plugin is gone and said not to keep it
            restored.foreign.pop(name, None)
            restored.undecodable.pop(name, None)
        records = _records_of(stored, thread_id)
        _check_complete(stored, records, thread_id)
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
        return _Kept(
            self._held(thread_id, stored, previous.held, restored.values, skip=skip),
            position=stored.position,
            foreign=restored.foreign,
            undecodable=restored.undecodable,
            since_snapshot=len(records),
            bytes_since_snapshot=sum(len(entry.data) for entry in stored.records),
            snapshot_bytes=sum(len(data) for data in stored.values.values()),
            stale=frozenset(stale) - dropped,
            vector_bases=bases,
            dropped=dropped,
            drop_marker=drop_marker,
            whole=previous.whole,
        )

    def _held(
        self,
        thread_id: str,
        stored: ThreadState,
        previous: HeldThread,
        values: dict[str, Any],
        *,
        skip: bool,
    ) -> HeldThread:
        """What a run gets of a loaded thread: its replayed `values` with the non-persistent
        ones this kernel held, and a suspended run's record and run keys."""
        registry = self._registry
        suspended = None
        run_values: dict[str, Any] = {}
        if stored.suspended is not None:
            suspended = msgspec.json.decode(stored.suspended, type=SuspendedRun)
            run_values = {
                **_volatile(registry, previous.run_values),
                **decode_values(
                    registry,
                    stored.run_values or {},
                    record=thread_id,
                    skip_undecodable=skip,
                    scope=KeyScope.RUN,
                ).values,
            }
        runs_raw = stored.values.get(RUN_COUNT)
        legacy_runs = _int_decoder.decode(runs_raw) if runs_raw is not None else 0
        return HeldThread(
            values={**_volatile(registry, previous.values), **values},
            revision=stored.revision,
            runs=max(stored.runs, legacy_runs),
            suspended=suspended,
            run_values=run_values,
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

    async def read_as(self, thread_id: str, binding: KeyBinding) -> Any:
        """Decoded and replayed with `binding`'s declaration alone."""
        name = binding.name
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

    # -- the journal: history, forks, pruning ----------------------------------------------

    def journal(self, thread_id: str) -> StoredJournal:
        kept = self._threads.get(thread_id)
        whole = kept.whole if kept is not None else ()
        return StoredJournal(
            self._store, self._registry, thread_id, skip=self.skip_undecodable, whole=whole
        )

    async def fork(
        self,
        thread_id: str,
        revision: int,
        new_thread_id: str,
        records: Sequence[CommitRecord],
        values: dict[str, Any],
    ) -> None:
        """The fork is a new thread in the store; this kernel holds nothing of it."""
        base = await self._store.snapshot_at(thread_id, revision)
        snapshot = None
        if base is not None:
            snapshot = await whole_snapshot(base, self._fetcher(thread_id), record=thread_id)
        save = ThreadSave(
            revision=revision,
            records=tuple(JournalEntry(r.revision, encode_record_bytes(r)) for r in records),
            snapshot=snapshot,
            snapshot_revision=base.revision if base is not None else None,
        )
        await self._store.save(new_thread_id, save, expected_position=0)
        if new_thread_id not in self._live:  # a thread of that id deleted earlier is gone
            self._threads.pop(new_thread_id, None)

    async def prune(self, thread_id: str, *, before: int) -> None:
        # Snapshots may extend older ones (Vector references): keep from the oldest
        # snapshot the one kept at `before` still reads.
        store = self._store
        kept = await store.snapshot_at(thread_id, before)
        while kept is not None:
            older = min(referenced_revisions(kept), default=kept.revision)
            if older >= kept.revision:
                break
            kept = await store.snapshot_at(thread_id, older)
        if kept is None:
            return
        await store.prune(thread_id, before=kept.revision)
        thread = self._threads.get(thread_id)
        if thread is not None:
            thread.whole = [r for r in thread.whole if r.revision > kept.revision]


def _with_drop_clears(dropped: frozenset[str], records: list[CommitRecord]) -> list[CommitRecord]:
    """The records to write: keys dropped on uninstall are cleared by the first, so that
    the journal replays to their absence (from any kernel, with or without their plugin)."""
    if not dropped or not records:
        return records
    clears = tuple(JournalOp(name, "clear") for name in sorted(dropped))
    first = msgspec.structs.replace(records[0], ops=(*clears, *records[0].ops))
    return [first, *records[1:]]


def _drop_marker(stored: ThreadState, thread_id: str) -> frozenset[str]:
    """The keys the stored snapshot lists as dropped on uninstall."""
    marker = stored.values.get(DROPPED_ON_UNINSTALL)
    try:
        return frozenset(_names_decoder.decode(marker) if marker is not None else ())
    except CODEC_ERRORS as error:
        raise DecodeFailed(DROPPED_ON_UNINSTALL, thread_id, error) from error


def _check_complete(stored: ThreadState, records: list[CommitRecord], thread_id: str) -> None:
    """Refuse a journal whose records stop short of its head."""
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


def _volatile(registry: KeyRegistry, values: Mapping[str, Any]) -> dict[str, Any]:
    """The non-persistent keys among `values`: they live in kernel memory only."""
    return {
        name: value
        for name, value in values.items()
        if (binding := registry.by_name.get(name)) is not None and not binding.persistent
    }
