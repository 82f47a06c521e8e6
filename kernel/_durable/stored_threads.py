"""Threads in a ThreadStore: the home of a Kernel made with one.

A thread is its journal. A save appends the commit records since the previous save (and,
now and then, a snapshot of the persistent thread keys); a load takes the newest snapshot
and replays the records after it (`stored_loads`). So a checkpoint costs what changed since
the last one, and a load costs one snapshot plus a bounded tail.

Every save is a compare-and-set on the store's write position as this kernel last loaded or
saved it, and moves that position, whatever it carries (commits, a suspension, a run
ending): of two kernels that loaded the same position only the first save lands and the
other gets a `RevisionConflict`, so no saved run id repeats in a thread. A suspended run is
saved whole: its run keys, the actions still waiting for their phase, and a `SuspendedRun`
record.

The kernel's memory keeps of a thread what the store must not hold (`persistent=False`
keys, and the whole records of the commits that wrote them) and what it knows of the
store's copy (`StoredThread`). For the `CACHED_THREADS` threads it saved or loaded last, it
also keeps the persistent keys as its save (or load) left them: when the store
`SupportsHead` and still stands at that position and seal, nobody saved the thread since,
and the next run starts from them without a load (whose cost grows with the records since
the newest snapshot). It knows nothing of phases, hooks or the run loop: a `Run` hands it
values to save.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import msgspec

from .._engine.invoke import through_cancellation
from .._engine.records import StoreOpWriter
from .._engine.registry import KeyBinding, KeyRegistry
from .._errors import DecodeFailed, OutcomeUnknown, RevisionConflict, StateError, StoreError
from .._values.codec import CODEC_ERRORS
from .._values.keys import KeyScope
from .._values.run_events import RunEvent, decode_run_events, encode_run_events
from .chain import START, Chain, ChainKey, chain_records, link_of, read_head_seal, seal_snapshot
from .journal import CommitRecord, JournalOp, RunJournal
from .key_codec import EncodeCache, encode_scope
from .rebase import Rebase, commutes, merged, renumbered, renumbered_events
from .retention import Retention
from .store import (
    JournalEntry,
    SupportsHead,
    SupportsRunEvents,
    ThreadHead,
    ThreadSave,
    ThreadState,
    ThreadStore,
    store_failures,
)
from .stored_journal import StoredJournal
from .stored_loads import load_newer, load_thread, read_stored_as, snapshot_fetcher
from .stored_thread import StoredThread
from .thread_snapshots import (
    DROPPED_ON_UNINSTALL,
    VectorBase,
    referenced_revisions,
    whole_snapshot,
    write_snapshot,
)
from .threads import SNAPSHOT_EVERY, HeldThread, LiveRuns, Rebased, Saved, SaveRequest

__all__ = ["SNAPSHOT_BYTES", "StoredThreads"]


logger = logging.getLogger("statekernel")

_UNSETTLED = (
    "this run's previous save was cancelled before the store answered, so whether it landed "
    "is unknown: the run saves nothing more. Start a new run: it reads what the store holds."
)

REBASE_ATTEMPTS = 64
"""How many times a save that commutes tries to land after newer heads before it is a
`RevisionConflict` (only when other kernels keep saving the thread in between)."""

REBASE_FOR = 10.0
"""Seconds after which a save that keeps being overtaken stops rebasing, whatever attempts
are left: a `RevisionConflict` then says how many it made."""

REBASE_PAUSE = 0.05
"""The longest pause (seconds) between two attempts: each waits a random time up to twice
the last bound (from 2 ms), so racing savers spread out instead of colliding in step."""

CACHED_THREADS = 1024
"""How many threads' persistent keys a kernel keeps after saving or loading them (least
recently saved or claimed go first): a team worker runs its agents in turn, and with fewer
kept than it serves every run would load (measured: 1,000 agents on 4 workers)."""

SNAPSHOT_BYTES = 1 << 20
"""A save writes a snapshot once the records saved since the last one hold as many bytes
as it did (and at least this many), as well as every `snapshot_every` records: so a load
replays a bounded tail, and snapshots cost at most about what the records did."""


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
        retention: Retention | None = None,
        chain_key: ChainKey | None = None,
    ) -> None:
        self._registry = registry
        self._key = chain_key  # the threads this kernel starts are chained with it
        self._retention = retention or Retention()
        self._store = store
        self.skip_undecodable = skip_undecodable
        self._snapshot_every = snapshot_every
        self._refuse_unknown = refuse_unknown
        self._threads: dict[str, StoredThread] = {}
        self._live = LiveRuns()
        self._heads = store if isinstance(store, SupportsHead) else None
        self._stored = frozenset(registry.stored_names)
        self._cached: dict[str, None] = {}  # threads with saved values, oldest first

    # -- claiming and letting go ----------------------------------------------------------

    async def claim(self, thread_id: str, *, tolerate: bool = False) -> HeldThread:
        self._live.take(thread_id)
        try:
            kept = self._threads.get(thread_id)
            if kept is not None and not kept.unsettled and await self._unchanged(thread_id, kept):
                assert kept.saved_values is not None
                kept.held.values = {**kept.saved_values, **kept.held.values}
                kept.base = kept.saved_values
                self._remember(thread_id)
                return kept.held
            kept = await load_thread(
                self._store,
                self._registry,
                thread_id,
                self._threads.get(thread_id),
                skip_undecodable=self.skip_undecodable or tolerate,
                refuse_unknown=self._refuse_unknown,
                chain_key=self._key,
            )
        except BaseException:
            self._live.drop(thread_id)
            raise
        self._threads[thread_id] = kept
        self._keep_loaded(thread_id, kept)
        return kept.held

    def _keep_loaded(self, thread_id: str, kept: StoredThread) -> None:
        """Keep a thread just loaded whole as a save keeps it: its persistent keys at the
        store's head, so that the next claim reads the head instead of loading again (a
        team looks at an agent, then runs it). Only a clean load: nothing it could not
        read, no suspended run."""
        if self._heads is None or kept.base is None or kept.position == 0:
            return
        if kept.held.suspended is not None or kept.stale or kept.foreign or kept.undecodable:
            return
        kept.saved_values = kept.base
        self._remember(thread_id)

    def release(self, thread_id: str) -> None:
        """End the thread's live run; forget what the store now holds in full (unless it is
        among the threads whose saved values are kept)."""
        self._live.drop(thread_id)
        kept = self._threads.get(thread_id)
        if kept is not None:
            kept.base = None  # what a rebase needs, while a run holds the thread
        self._let_go(thread_id)

    def _let_go(self, thread_id: str) -> None:
        """Hold of a thread without a live run only what the store cannot give back: its
        saved values while they are kept, else its `persistent=False` values and records (a
        thread nothing is left of is forgotten)."""
        kept = self._threads.get(thread_id)
        if kept is None:
            return
        kept.cache = EncodeCache()  # the next claim encodes afresh: hold no old values
        held = kept.held
        if kept.saved_values is not None or kept.position == 0 or held.suspended is not None:
            return
        held.values = {
            name: value for name, value in held.values.items() if name not in self._stored
        }
        if not held.values and not kept.whole:
            del self._threads[thread_id]  # everything it held is in the store

    async def _unchanged(self, thread_id: str, kept: StoredThread) -> bool:
        """Whether the store still stands where this kernel's last save of the thread left
        it (same position, same seal): then its saved values are the thread's."""
        if kept.saved_values is None or self._heads is None or kept.held.suspended is not None:
            return False
        with store_failures("thread head read", thread_id):
            head = await self._heads.head(thread_id)
        if head is not None and head.position == kept.position and head.seal == kept.chain.seal():
            # Unless another thread's claim let its values go while the head was read.
            return kept.saved_values is not None
        self._forget_saved(thread_id)
        return False

    def _remember(self, thread_id: str) -> None:
        """Mark the thread's saved values the most recently used; let the oldest go."""
        self._cached.pop(thread_id, None)
        self._cached[thread_id] = None
        while len(self._cached) > CACHED_THREADS:
            oldest = next(iter(self._cached))
            self._forget_saved(oldest)
            if oldest not in self._live:
                self._let_go(oldest)

    def _forget_saved(self, thread_id: str) -> None:
        self._cached.pop(thread_id, None)
        kept = self._threads.get(thread_id)
        if kept is not None:
            kept.saved_values = None

    def is_live(self, thread_id: str) -> bool:
        return thread_id in self._live

    def set_aside(self, thread_id: str) -> frozenset[str]:
        kept = self._threads.get(thread_id)
        return frozenset() if kept is None else kept.stale.union(kept.undecodable)

    def run_journal(self, thread_id: str, run_id: str | None) -> RunJournal:
        writer = StoreOpWriter(self._registry)  # the store keeps the persistent thread keys' ops
        return RunJournal(self._registry, writer, thread_id=thread_id, run_id=run_id)

    # -- saving ----------------------------------------------------------------------------

    async def save(self, request: SaveRequest) -> Saved:
        """Append the run's records, with a snapshot of the persistent thread keys when the
        policy says so (`_snapshot_due`) or a key needs one (`_snapshot_needs`).

        Only what this save writes is looked at, so its cost follows what changed, not how
        many keys the thread holds. A save another kernel's overtook rebases when its
        commits only commute (`_rebase`), else it is a `RevisionConflict`. Once it has
        landed, a cancellation is reported, not raised (`ThreadHome.save`): one that
        arrived while the store wrote it, or while retention pruned after it.
        """
        thread_id = request.thread_id
        kept = self._threads[thread_id]
        if kept.unsettled:
            raise StoreError("thread save", RuntimeError(_UNSETTLED), key=thread_id)
        rebased = None
        try:
            landed = await self._land(kept, request)
        except RevisionConflict as conflict:
            if not _may_rebase(self._registry, kept, request):
                raise
            found = await self._rebase(kept, request)
            if found is None:
                raise conflict from None
            rebased, landed = found
        revision = request.revision if rebased is None else rebased.report.revision
        cancelled = landed.interrupted
        if landed.snapshot and not cancelled:
            try:
                await self._retain(thread_id, revision)
            except asyncio.CancelledError:
                cancelled = True  # it landed all the same; the next snapshot prunes
        return Saved(revision, rebased, cancelled=cancelled)

    async def _land(self, kept: StoredThread, request: SaveRequest) -> _Landed:
        """Write one save on top of what `kept` knows of the store, and note it there."""
        thread_id, values, revision = request.thread_id, request.values, request.revision
        touched, journaled, suspended = request.touched, request.journaled, request.suspended
        records = _with_drop_clears(kept.dropped, journaled.records)
        chain = kept.chain
        if kept.position == 0 and self._key is not None:  # a thread it starts: keyed
            chain = attrs.evolve(chain, key=self._key)
        entries, chain = chain_records(records, chain)
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
        if snapshot is not None:
            snapshot = seal_snapshot(thread_id, snapshot, revision, chain.link, chain.key)
        save = ThreadSave(
            revision=revision,
            records=entries,
            snapshot=snapshot,
            runs=kept.held.runs,
            run_values=self._run_values(values, kept.cache) if suspended is not None else None,
            suspended=msgspec.json.encode(suspended) if suspended is not None else None,
            seal=chain.seal(),
            events=_events_of(thread_id, journaled.events),
        )
        interrupted = await self._write(thread_id, save, kept.position)
        registry = self._registry
        kept.note_save(
            save,
            size,
            undecodable=undecodable,
            superseded=superseded,
            whole=journaled.whole,
            bases=bases,
            drop_marker=registry.dropped_on_uninstall,
            chain=chain,
        )
        # The store holds the persistent keys; memory keeps only what it must not, and a
        # copy of them while the thread is among the recently saved.
        kept.held.note_saved(
            _named(values, registry.volatile_thread_names),
            _named(values, registry.volatile_run_names),
            revision,
            suspended,
        )
        kept.base = _named(values, registry.stored_names)
        if suspended is None and self._heads is not None:
            kept.saved_values = kept.base
            self._remember(thread_id)
        else:
            self._forget_saved(thread_id)
        return _Landed(interrupted, snapshot is not None)

    async def _rebase(
        self, kept: StoredThread, request: SaveRequest
    ) -> tuple[Rebased, _Landed] | None:
        """Land the save after the newer head: read what the other kernels saved since
        (`load_newer`: only the records after this one's revision, when it can), apply this
        save's commits to it (renumbered, and under a new run number when another kernel's
        run took this one's), and save that. While other kernels keep overtaking it, pause
        (jittered, growing: `REBASE_PAUSE`) and again, up to `REBASE_ATTEMPTS` times or
        `REBASE_FOR` seconds; then a `RevisionConflict` says how many times it tried.
        Nothing of it is stored unless the whole lands. None: not a case for a rebase (the
        thread was deleted, or a run is suspended on it)."""
        thread_id, journaled = request.thread_id, request.journaled
        registry = self._registry
        number = kept.held.runs  # this run's number, as it counted itself
        original = journaled.records[0].run_id if journaled.records else None
        expected, began = kept.position, time.monotonic()
        attempts = 0
        while True:
            attempts += 1
            newer = await load_newer(
                self._store,
                registry,
                thread_id,
                kept,
                skip_undecodable=self.skip_undecodable,
                refuse_unknown=self._refuse_unknown,
                chain_key=self._key,
            )
            if newer.position == 0 or newer.held.suspended is not None:
                return None  # deleted meanwhile, or a run waits there: nothing to merge onto
            if newer.position == kept.position:
                return None  # nothing moved: not a rebase's case
            onto = newer.held.revision
            run_id = original
            if run_id is not None and number <= newer.held.runs:
                newer.held.runs += 1  # the other kernel's run took this one's number
                run_id = f"{thread_id}:run-{newer.held.runs}"
            elif run_id is not None:
                newer.held.runs = number
            records = renumbered(journaled.records, onto, run_id)
            thread_values = merged(
                registry,
                dict(newer.held.values),
                records,
                thread_id=thread_id,
                expected=expected,
                actual=newer.position,
            )
            head = onto + len(records)
            whole = tuple(renumbered(journaled.whole, onto, run_id)) if journaled.whole else ()
            shift = onto - journaled.records[0].revision + 1 if journaled.records else 0
            events = renumbered_events(journaled.events, shift, run_id)
            moved = attrs.evolve(journaled, records=records, whole=whole, events=events)
            all_values = {**request.values, **_named(thread_values, registry.stored_names)}
            onto_newer = attrs.evolve(request, values=all_values, revision=head, journaled=moved)
            try:
                landed = await self._land(newer, onto_newer)
            except RevisionConflict as overtaken:
                kept = newer
                took = time.monotonic() - began
                if attempts >= REBASE_ATTEMPTS or took >= REBASE_FOR:
                    raise _overtaken(expected, overtaken.actual, attempts, took) from overtaken
                bound = min(REBASE_PAUSE, 0.001 * 2**attempts)
                await asyncio.sleep(random.uniform(0, bound))
                continue
            self._threads[thread_id] = newer
            report = Rebase(onto, head, run_id)
            logger.info(
                "thread %r: a save rebased onto revision %d (attempt %d)", thread_id, onto, attempts
            )
            return Rebased(report, _named(thread_values, registry.stored_names)), landed

    async def _retain(self, thread_id: str, revision: int) -> None:
        """Drop what the retention policy no longer keeps, now that a snapshot was written:
        from the newest snapshot this kernel knows at or before the cut, everything older
        than what it reads (one store call, no reads). The save has landed, so a failure
        here is logged, not raised: the next snapshot's save tries again."""
        kept = self._threads.get(thread_id)
        before = self._retention.prune_before(revision)
        if kept is None or before is None:
            return
        known = [at for at in kept.snapshot_origins if at <= before]
        if not known:
            return  # this claim knows no snapshot that old yet
        newest = max(known)
        origin = kept.snapshot_origins[newest]
        point = newest if origin is None else origin
        if point <= kept.pruned_to:
            return
        try:
            if origin is None:  # raw bytes refer back: find how far, snapshot by snapshot
                await self.prune(thread_id, before=newest)
            else:
                with store_failures("thread prune", thread_id):
                    await self._store.prune(thread_id, before=point)
                kept.whole = [r for r in kept.whole if r.revision > point]
        except StateError as error:
            logger.warning(
                "thread %r: pruning by the retention policy failed: %s", thread_id, error
            )
            return
        kept.pruned_to = point
        kept.snapshot_origins = {at: o for at, o in kept.snapshot_origins.items() if at >= point}

    def _snapshot_needs(
        self,
        kept: StoredThread,
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

    def _marking(self, kept: StoredThread) -> bool:
        """Whether a snapshot must change the list of keys dropped on uninstall."""
        return bool(kept.dropped) or kept.drop_marker != self._registry.dropped_on_uninstall

    def _snapshot_due(
        self, kept: StoredThread, entries: tuple[JournalEntry, ...], size: int
    ) -> bool:
        """The snapshot policy: every `snapshot_every` records, or once the records since
        the last snapshot hold as many bytes as it (and at least `SNAPSHOT_BYTES`)."""
        if kept.since_snapshot + len(entries) >= self._snapshot_every:
            return True
        return kept.bytes_since_snapshot + size >= max(SNAPSHOT_BYTES, kept.snapshot_bytes)

    def _snapshot(
        self,
        thread_id: str,
        kept: StoredThread,
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
        arrived meanwhile (reported in `Saved`, raised by the caller once it noted the save).

        A save cancelled half-way may still commit (a SQLite write runs in its own thread):
        this waits for it, so that what is noted is what the store has, but no longer than
        `CANCEL_PATIENCE` after the cancellation. A save still going then is left to the
        store and the thread marked unsettled, as after `OutcomeUnknown`: the run saves
        nothing more (its commits may be in the store already), and the thread's next claim
        reads what the store holds.
        """
        kept = self._threads[thread_id]  # (in a rebase, not the newer head it saves onto)

        def left_to_the_store() -> None:
            kept.unsettled = True

        try:
            with store_failures("thread save", thread_id):
                _, interrupted = await through_cancellation(
                    self._store.save(thread_id, save, expected_position=position),
                    on_give_up=left_to_the_store,
                )
        except OutcomeUnknown:
            kept.unsettled = True
            raise
        return interrupted

    async def read_as(self, thread_id: str, binding: KeyBinding) -> Any:
        return await read_stored_as(self._store, thread_id, binding, self._key)

    # -- the journal: history, forks, pruning ----------------------------------------------

    def journal(self, thread_id: str) -> StoredJournal:
        kept = self._threads.get(thread_id)
        whole = kept.whole if kept is not None else ()
        return StoredJournal(
            self._store,
            self._registry,
            thread_id,
            skip=self.skip_undecodable,
            whole=whole,
            chain_key=self._key,
        )

    async def fork(
        self,
        thread_id: str,
        revision: int,
        new_thread_id: str,
        records: Sequence[CommitRecord],
        values: dict[str, Any],
    ) -> None:
        """The fork is a new thread in the store, chained afresh from its first record (with
        this kernel's key, if it has one), with the run events of the commits it copies;
        this kernel holds nothing of it."""
        with store_failures("thread fork", thread_id):
            base = await self._store.snapshot_at(thread_id, revision)
            snapshot = None
            if base is not None:
                source = Chain(START, None, await self._key_of(thread_id))
                fetch = snapshot_fetcher(self._store, thread_id, source)
                snapshot = await whole_snapshot(base, fetch, record=thread_id)
        start = Chain(START, records[0].revision if records else 1, self._key)
        entries, chain = chain_records(records, start)
        if snapshot is not None and base is not None:  # sealed with the link at its revision
            at_base = [e for e in entries if e.revision == base.revision]
            link = link_of(at_base[0].data, self._key) if at_base else START
            snapshot = seal_snapshot(new_thread_id, snapshot, base.revision, link, self._key)
        save = ThreadSave(
            revision=revision,
            records=entries,
            snapshot=snapshot,
            snapshot_revision=base.revision if base is not None else None,
            seal=chain.seal(),
            events=_events_of(
                new_thread_id,
                tuple(e for e in await self.run_events(thread_id) if e.revision <= revision),
            ),
        )
        with store_failures("thread fork", new_thread_id):
            await self._store.save(new_thread_id, save, expected_position=0)
        if new_thread_id not in self._live:  # a thread of that id deleted earlier is gone
            self._threads.pop(new_thread_id, None)

    async def _key_of(self, thread_id: str) -> ChainKey | None:
        """The key the thread's chain is keyed with (this kernel's, or None)."""
        head: ThreadHead | ThreadState | None
        if self._heads is not None:
            head = await self._heads.head(thread_id)
        else:
            head = await self._store.load(thread_id)
        if head is None:
            return None
        return read_head_seal(thread_id, head.revision, head.seal, self._key).key

    async def threads(self, prefix: str, limit: int | None) -> list[str]:
        with store_failures("thread listing", prefix):
            return await self._store.threads(prefix=prefix, limit=limit)

    async def run_events(self, thread_id: str) -> list[RunEvent]:
        store = self._store
        if not isinstance(store, SupportsRunEvents):
            return []
        with store_failures("run events", thread_id):
            batches = await store.run_events(thread_id)
        events: list[RunEvent] = []
        for data in batches:
            try:
                events.extend(decode_run_events(data))
            except msgspec.DecodeError as error:
                raise DecodeFailed("run events", thread_id, error) from error
        return events

    async def prune(self, thread_id: str, *, before: int) -> None:
        # Snapshots may extend older ones (Vector references): keep from the oldest
        # snapshot the one kept at `before` still reads.
        store = self._store
        with store_failures("thread prune", thread_id):
            snapshot = await store.snapshot_at(thread_id, before)
            while snapshot is not None:
                older = min(referenced_revisions(snapshot), default=snapshot.revision)
                if older >= snapshot.revision:
                    break
                snapshot = await store.snapshot_at(thread_id, older)
            if snapshot is None:
                return
            await store.prune(thread_id, before=snapshot.revision)
        kept = self._threads.get(thread_id)
        if kept is not None:
            kept.whole = [r for r in kept.whole if r.revision > snapshot.revision]


def _may_rebase(registry: KeyRegistry, kept: StoredThread, request: SaveRequest) -> bool:
    """Whether a stale save may land after the newer head: it carries commits, every op of
    which commutes (`rebase.commutes`), and no suspension. (A save of nothing but a run
    ending has nothing to merge, and stays a conflict, so a stale run learns it was.)"""
    records = request.journaled.records
    suspended = request.suspended
    return bool(records) and suspended is None and not kept.dropped and commutes(registry, records)


def _overtaken(expected: int, actual: int, attempts: int, took: float) -> RevisionConflict:
    """The conflict of a save that rebased `attempts` times over `took` seconds, and was
    overtaken by another kernel's save every time."""
    return RevisionConflict(
        expected,
        actual,
        what="thread save",
        position=True,
        rebases=attempts,
        rebasing_for=took,
        retry=(
            f"start a new run to load it again. A save gives up rebasing after "
            f"{REBASE_ATTEMPTS} attempts or {REBASE_FOR:.0f} s; if this keeps happening, too "
            f"many processes save this one thread at once for the store to keep up: let "
            f"fewer writers share the thread, or save it less often"
        ),
    )


@attrs.frozen
class _Landed:
    interrupted: bool  # a cancellation arrived while it was written (`Saved.cancelled`)
    snapshot: bool  # it wrote a snapshot (so retention may prune)


def _with_drop_clears(dropped: frozenset[str], records: list[CommitRecord]) -> list[CommitRecord]:
    """The records to write: keys dropped on uninstall are cleared by the first, so that
    the journal replays to their absence (from any kernel, with or without their plugin)."""
    if not dropped or not records:
        return records
    clears = tuple(JournalOp(name, "clear") for name in sorted(dropped))
    first = msgspec.structs.replace(records[0], ops=(*clears, *records[0].ops))
    return [first, *records[1:]]


def _cleared(records: Iterable[CommitRecord]) -> set[str]:
    """The keys these records clear."""
    return {op.key for record in records for op in record.ops if op.kind == "clear"}


def _events_of(thread_id: str, events: tuple[RunEvent, ...]) -> bytes | None:
    """A save's run events as bytes; None when there are none, or when one cannot be
    encoded (a gate's reason that is no string): they describe the run, and must never cost
    it the save of its state."""
    if not events:
        return None
    try:
        return encode_run_events(events)
    except CODEC_ERRORS as error:
        logger.warning("thread %r: run events not kept with this save: %s", thread_id, error)
        return None


def _named(values: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The held values of `names` (a lookup per name, not a scan of `values`)."""
    return {name: values[name] for name in names if name in values}
