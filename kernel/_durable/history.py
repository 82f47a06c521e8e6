"""Reading a thread's journal: history, time travel, forks, verified replay and pruning.

Everything here reads what was saved: the records and snapshots in the ThreadStore, or in
the kernel's memory when it has no store (then every key is journaled, the non-persistent
ones too). With a store, `history` also shows the ops of `persistent=False` thread keys
that this kernel keeps in its memory (the store never had them).
A run's commits appear once it saved them (a checkpoint, a suspension, the run's
end). Both places answer the same few questions through a `_Journal`, so each operation
is written once: the newest snapshot at or before a revision, the records in a range, the
head revision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs
import immutables
import msgspec

from .._engine.registry import KeyRegistry
from .._engine.snapshot import Snapshot
from .._errors import DecodeFailed, ReplayFailed, StateError, UnknownRevision
from .._values.declared_types import copy_of
from .._values.keys import KeyScope
from .journal import CommitRecord, decode_record, encode_record_bytes
from .replay import ReplayReport, apply_records, hash_of
from .store import JournalEntry, ThreadSave, ThreadSnapshot, ThreadStore
from .thread_snapshots import (
    RESERVED_VALUES,
    differing_keys,
    read_snapshot,
    referenced_revisions,
    whole_snapshot,
)
from .threads import ThreadKeeper, ThreadMemory

__all__ = ["ThreadHistory"]


@attrs.define
class _Base:
    """A snapshot to replay from: decoded values (the caller's to change), and bytes this
    kernel cannot read."""

    revision: int
    values: dict[str, Any]
    raw: dict[str, bytes] = attrs.field(factory=dict)


class _Journal(Protocol):
    from_store: bool

    async def head(self) -> int | None: ...

    async def records(
        self, since: int, until: int | None = None, limit: int | None = None
    ) -> list[CommitRecord]: ...

    async def base(self, revision: int) -> _Base | None: ...

    async def snapshot_revisions(self, after: int, until: int) -> list[int]: ...

    async def differing(
        self, revision: int, values: Mapping[str, Any], ignore: set[str]
    ) -> set[str]: ...


class _StoredJournal:
    from_store = True

    def __init__(
        self, store: ThreadStore, registry: KeyRegistry, thread_id: str, *, skip: bool
    ) -> None:
        self._store, self._registry, self._thread_id = store, registry, thread_id
        self._skip = skip

    async def head(self) -> int | None:
        stored = await self._store.load(self._thread_id)
        return None if stored is None else stored.revision

    async def records(
        self, since: int, until: int | None = None, limit: int | None = None
    ) -> list[CommitRecord]:
        entries = await self._store.records(self._thread_id, since=since, until=until, limit=limit)
        return [
            decode_record(entry.data, thread_id=self._thread_id, revision=entry.revision)
            for entry in entries
        ]

    async def base(self, revision: int) -> _Base | None:
        snapshot = await self.snapshot(revision)
        if snapshot is None:
            return None
        restored, _ = await read_snapshot(
            self._registry,
            snapshot,
            self.snapshot,
            record=self._thread_id,
            skip_undecodable=self._skip,
            exclude=lambda name: name in RESERVED_VALUES,
        )
        foreign = {**restored.foreign, **restored.undecodable}
        return _Base(snapshot.revision, restored.values, foreign)

    async def snapshot(self, revision: int) -> ThreadSnapshot | None:
        return await self._store.snapshot_at(self._thread_id, revision)

    async def snapshot_revisions(self, after: int, until: int) -> list[int]:
        found: list[int] = []
        at = until
        while at > after:  # walking back, one snapshot at a time (none is kept)
            snapshot = await self.snapshot(at)
            if snapshot is None or snapshot.revision <= after:
                break
            found.append(snapshot.revision)
            at = snapshot.revision - 1
        return found[::-1]

    async def differing(
        self, revision: int, values: Mapping[str, Any], ignore: set[str]
    ) -> set[str]:
        snapshot = await self.snapshot(revision)
        if snapshot is None or snapshot.revision != revision:
            return set()
        return differing_keys(
            self._registry,
            snapshot,
            values,
            ignore=ignore,
            record=self._thread_id,
            skip_undecodable=self._skip,
        )


class _MemoryJournal:
    from_store = False

    def __init__(self, thread: ThreadMemory | None, registry: KeyRegistry) -> None:
        self._thread = thread
        self._registry = registry

    async def head(self) -> int | None:
        return None if self._thread is None else self._thread.revision

    async def records(
        self, since: int, until: int | None = None, limit: int | None = None
    ) -> list[CommitRecord]:
        if self._thread is None:
            return []
        found = [
            record
            for record in self._thread.journal
            if record.revision > since and (until is None or record.revision <= until)
        ]
        return found if limit is None else found[:limit]

    async def base(self, revision: int) -> _Base | None:
        if self._thread is None:
            return None
        held = [(r, values) for r, values in self._thread.snapshots if r <= revision]
        if not held:
            return None
        newest, values = held[-1]
        # The held values are the thread's own; replay hands them to `apply`, which may
        # change a mutable value in place, so it gets copies, as a commit would.
        by_name = self._registry.by_name
        copied = {
            name: copy_of(value, name) if _copies(by_name.get(name)) else value
            for name, value in values.items()
        }
        return _Base(newest, copied)

    async def snapshot_revisions(self, after: int, until: int) -> list[int]:
        held = self._thread.snapshots if self._thread is not None else []
        return [r for r, _ in held if after < r <= until]

    async def differing(
        self, revision: int, values: Mapping[str, Any], ignore: set[str]
    ) -> set[str]:
        held = self._thread.snapshots if self._thread is not None else []
        for at, stored in held:
            if at == revision:
                return _differing(self._registry, values, stored, ignore)
        return set()


def _copies(binding: Any) -> bool:
    return binding is not None and (binding.copy_values or binding.copy_items)


@attrs.frozen
class _Rebuilt:
    revision: int
    values: dict[str, Any]
    stale: frozenset[str]


class ThreadHistory:
    """The journal-reading side of a kernel's threads."""

    def __init__(self, keeper: ThreadKeeper, registry: KeyRegistry) -> None:
        self._keeper = keeper
        self._registry = registry

    def _journal(self, thread_id: str) -> _Journal:
        if not isinstance(thread_id, str) or not thread_id:
            raise ValueError(f"thread_id must be a non-empty string, got {thread_id!r}")
        store = self._keeper.store
        if store is not None:
            skip = self._keeper.skip_undecodable  # as loads do: `restore_errors`
            return _StoredJournal(store, self._registry, thread_id, skip=skip)
        return _MemoryJournal(self._keeper.remembered(thread_id), self._registry)

    async def head(self, thread_id: str) -> int | None:
        """The thread's saved head revision, or None for a thread never saved."""
        return await self._journal(thread_id).head()

    async def history(
        self, thread_id: str, *, since: int = 0, limit: int | None = None
    ) -> list[CommitRecord]:
        _check_revision("since", since)
        if limit is not None:
            _check_revision("limit", limit)
        records = await self._journal(thread_id).records(since, limit=limit)
        thread = self._keeper.remembered(thread_id)
        if self._keeper.store is None or thread is None or not thread.journal:
            return records
        # Ops of `persistent=False` keys are journaled in this kernel's memory only.
        whole = {(r.revision, r.run_id, r.created_at): r for r in thread.journal}
        return [whole.get((r.revision, r.run_id, r.created_at), r) for r in records]

    async def state_at(self, thread_id: str, revision: int) -> Snapshot:
        rebuilt = await self._rebuild(self._journal(thread_id), thread_id, revision)
        values = {
            name: value for name, value in rebuilt.values.items() if name not in rebuilt.stale
        }
        return Snapshot(rebuilt.revision, immutables.Map(values), self._registry)

    async def _rebuild(self, journal: _Journal, thread_id: str, revision: int) -> _Rebuilt:
        _check_revision("revision", revision)
        base = await journal.base(revision) or _Base(0, {})
        records = await journal.records(base.revision, until=revision)
        reached = records[-1].revision if records else base.revision
        contiguous = not records or records[0].revision == base.revision + 1
        found = reached == revision and contiguous
        if found and base.revision == 0:  # from the empty start: not if pruned or unknown
            first = await journal.records(0, limit=1)
            found = await journal.head() is not None and (not first or first[0].revision == 1)
        if not found:
            head = await journal.head()
            raise UnknownRevision(thread_id, revision, held=await _held(journal, head))
        stale = apply_records(
            self._registry,
            base.values,
            records,
            thread_id=thread_id,
            unreadable=base.raw,
            skip_undecodable=self._keeper.skip_undecodable,
            from_store=journal.from_store,
        )
        return _Rebuilt(revision, base.values, frozenset(stale | set(base.raw)))

    async def fork(self, thread_id: str, revision: int, new_thread_id: str) -> None:
        """A new thread holding the source's newest snapshot at or before `revision` and
        every record up to it, so that it rebuilds (and travels back) exactly as the source
        does, keys this kernel cannot read included."""
        source = self._journal(thread_id)
        if (
            self._keeper.is_live(new_thread_id)
            or await self._journal(new_thread_id).head() is not None
        ):
            raise StateError(
                f"cannot fork thread {thread_id!r} into {new_thread_id!r}: that thread already "
                f"exists. Fork into a new thread id, or delete it first."
            )
        await self._rebuild(source, thread_id, revision)  # raises UnknownRevision first
        records = [
            msgspec.structs.replace(record, thread_id=new_thread_id)
            for record in await source.records(0, until=revision)
        ]
        store = self._keeper.store
        if store is None:
            thread = self._keeper.remembered(thread_id)
            assert thread is not None  # it has the revision, so the kernel holds it
            rebuilt = await self._rebuild(source, thread_id, revision)
            known = {k: v for k, v in rebuilt.values.items() if k not in rebuilt.stale}
            self._keeper.adopt(
                new_thread_id,
                ThreadMemory(
                    values=known,
                    revision=revision,
                    journal=records,
                    snapshots=[(r, values) for r, values in thread.snapshots if r <= revision],
                ),
            )
            return
        base = await store.snapshot_at(thread_id, revision)
        snapshot = None
        if base is not None:

            async def fetch(at: int) -> ThreadSnapshot | None:
                return await store.snapshot_at(thread_id, at)

            snapshot = await whole_snapshot(base, fetch, record=thread_id)
        save = ThreadSave(
            revision=revision,
            records=tuple(JournalEntry(r.revision, encode_record_bytes(r)) for r in records),
            snapshot=snapshot,
            snapshot_revision=base.revision if base is not None else None,
        )
        await store.save(new_thread_id, save, expected_position=0)
        self._keeper.forget(new_thread_id)  # a thread of that id deleted earlier is gone

    async def prune(self, thread_id: str, *, before: int) -> None:
        _check_revision("before", before)
        store = self._keeper.store
        if store is not None:
            # Snapshots may extend older ones (Vector references): keep from the oldest
            # snapshot the one kept at `before` still reads.
            kept = await store.snapshot_at(thread_id, before)
            while kept is not None:
                older = min(referenced_revisions(kept), default=kept.revision)
                if older >= kept.revision:
                    break
                kept = await store.snapshot_at(thread_id, older)
            if kept is not None:
                await store.prune(thread_id, before=kept.revision)
                thread = self._keeper.remembered(thread_id)
                if thread is not None:
                    thread.journal = [r for r in thread.journal if r.revision > kept.revision]
            return
        thread = self._keeper.remembered(thread_id)
        if thread is None:
            return
        held = [r for r, _ in thread.snapshots if r <= before]
        if not held:
            return
        keep = held[-1]
        thread.journal = [record for record in thread.journal if record.revision > keep]
        thread.snapshots = [(r, values) for r, values in thread.snapshots if r >= keep]

    async def verify(self, thread_id: str) -> ReplayReport:
        journal = self._journal(thread_id)
        head = await journal.head()
        if head is None:
            raise UnknownRevision(thread_id, 0, held=None)
        try:
            held = await _held(journal, head)
            assert held is not None
            start = held[0]  # records before it (a pruned thread's fork) are history only
            base = (await journal.base(start) if start else None) or _Base(0, {})
            checks = await journal.snapshot_revisions(start, head)
        except DecodeFailed as error:
            detail = f"a stored snapshot does not decode: {error}"
            return ReplayReport(False, head, "", None, detail)
        try:
            records = await journal.records(start)
        except DecodeFailed as error:  # a record changed on disk: its digest says which
            return ReplayReport(False, head, "", error.revision, str(error))
        values, unreadable = base.values, set(base.raw)
        position, last_good = 0, start
        for revision in [*checks, head]:
            chunk_end = position
            while chunk_end < len(records) and records[chunk_end].revision <= revision:
                chunk_end += 1
            chunk = records[position:chunk_end]
            position = chunk_end
            try:
                unreadable |= apply_records(
                    self._registry,
                    values,
                    chunk,
                    thread_id=thread_id,
                    unreadable=unreadable,
                    skip_undecodable=self._keeper.skip_undecodable,
                    from_store=journal.from_store,
                )
                if revision in checks:
                    where = f"what was stored at revision {revision}"
                    differing = await journal.differing(revision, values, unreadable)
                else:
                    where = f"the state this kernel holds at revision {head}"
                    in_memory = self._held_values(thread_id)
                    differing = (
                        set()
                        if in_memory is None
                        else _differing(self._registry, values, in_memory, unreadable)
                    )
            except (ReplayFailed, DecodeFailed) as error:
                failed_at = getattr(error, "revision", None) or _first_of(chunk, revision)
                return ReplayReport(False, head, "", failed_at, str(error))
            if differing:
                first = _first_writer(records, last_good, revision, differing)
                detail = (
                    f"the journal rebuilds keys {sorted(differing)} differently from {where}; "
                    f"the first commit after revision {last_good} that wrote one is revision "
                    f"{first}"
                )
                return ReplayReport(False, head, "", first, detail)
            last_good = revision
        kept = {name: value for name, value in values.items() if name not in unreadable}
        detail = (
            f"not rebuilt by this kernel (no plugin registers them, or they do not decode): "
            f"{sorted(unreadable)}"
            if unreadable
            else ""
        )
        return ReplayReport(True, head, hash_of(self._registry, head, kept), None, detail)

    def _held_values(self, thread_id: str) -> dict[str, Any] | None:
        """The thread values this kernel holds in memory, when it holds all of them."""
        if self._keeper.store is not None:
            return None
        thread = self._keeper.remembered(thread_id)
        return None if thread is None else thread.values


def _differing(
    registry: KeyRegistry,
    rebuilt: Mapping[str, Any],
    stored: Mapping[str, Any],
    unreadable: set[str],
) -> set[str]:
    names = (set(rebuilt) | set(stored)) - unreadable
    by_name = registry.by_name
    differing: set[str] = set()
    for name in names:
        binding = by_name.get(name)
        if binding is None or binding.scope is not KeyScope.THREAD:
            continue
        if (name in rebuilt) != (name in stored) or hash_of(
            registry, 0, {name: rebuilt[name]}
        ) != hash_of(registry, 0, {name: stored[name]}):
            differing.add(name)
    return differing


def _first_writer(records: list[CommitRecord], after: int, until: int, names: set[str]) -> int:
    """The first revision in (after, until] whose commit wrote one of `names`; else `until`
    (the stored side changed without a commit: a tampered snapshot)."""
    for record in records:
        if after < record.revision <= until and any(op.key in names for op in record.ops):
            return record.revision
    return until


def _first_of(records: list[CommitRecord], default: int) -> int:
    return records[0].revision if records else default


async def _held(journal: _Journal, head: int | None) -> tuple[int, int] | None:
    """The revisions `state_at` can rebuild: from the oldest snapshot the held records go
    on from (0 when they start at revision 1) to the head."""
    if head is None:
        return None
    first = await journal.records(0, limit=1)
    start = first[0].revision - 1 if first else head
    if start == 0:
        return (0, head)
    base = await journal.base(start)
    if base is not None and base.revision == start:
        return (start, head)
    oldest = head  # else the oldest snapshot after `start` (walking back from the head)
    base = await journal.base(head)
    while base is not None and base.revision > start:
        oldest = base.revision
        base = await journal.base(base.revision - 1)
    return (oldest, head)


def _check_revision(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a revision (an int >= 0), got {value!r}")
