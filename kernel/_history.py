"""Reading a thread's journal: history, time travel, forks, verified replay and pruning.

Everything here reads what was saved: the records and snapshots in the ThreadStore, or in
the kernel's memory when it has no store (then every key is journaled, the non-persistent
ones too). A run's commits appear once it saved them (a checkpoint, a suspension, the run's
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

from ._errors import DecodeFailed, ReplayFailed, StateError, UnknownRevision
from ._journal import CommitRecord, decode_record, encode_record_bytes
from ._key_codec import EncodeCache, encode_scope
from ._keys import KeyScope
from ._protocols import JournalEntry, ThreadSave, ThreadSnapshot, ThreadStore
from ._registry import KeyRegistry
from ._replay import ReplayReport, apply_records, hash_of
from ._snapshot import Snapshot
from ._thread_snapshots import read_snapshot, referenced_revisions
from ._threads import ThreadKeeper, ThreadMemory

__all__ = ["ThreadHistory"]


@attrs.define
class _Base:
    """A snapshot to replay from: decoded values, and bytes this kernel cannot read."""

    revision: int
    values: dict[str, Any]
    raw: dict[str, bytes] = attrs.field(factory=dict)


class _Journal(Protocol):
    async def head(self) -> int | None: ...

    async def records(
        self, since: int, until: int | None = None, limit: int | None = None
    ) -> list[CommitRecord]: ...

    async def base(self, revision: int) -> _Base | None: ...


class _StoredJournal:
    def __init__(self, store: ThreadStore, registry: KeyRegistry, thread_id: str) -> None:
        self._store, self._registry, self._thread_id = store, registry, thread_id

    async def head(self) -> int | None:
        stored = await self._store.load(self._thread_id)
        return None if stored is None else stored.revision

    async def records(
        self, since: int, until: int | None = None, limit: int | None = None
    ) -> list[CommitRecord]:
        entries = await self._store.records(self._thread_id, since=since, until=until, limit=limit)
        return [decode_record(entry.data, thread_id=self._thread_id) for entry in entries]

    async def base(self, revision: int) -> _Base | None:
        snapshot = await self.snapshot(revision)
        if snapshot is None:
            return None
        restored, _ = await read_snapshot(
            self._registry,
            snapshot,
            self.snapshot,
            record=self._thread_id,
            skip_undecodable=True,
            exclude=_reserved,
        )
        foreign = {**restored.foreign, **restored.undecodable}
        return _Base(snapshot.revision, restored.values, foreign)

    async def snapshot(self, revision: int) -> ThreadSnapshot | None:
        return await self._store.snapshot_at(self._thread_id, revision)


class _MemoryJournal:
    def __init__(self, thread: ThreadMemory | None) -> None:
        self._thread = thread

    async def head(self) -> int | None:
        thread = self._thread
        return (
            None if thread is None or not (thread.journal or thread.revision) else thread.revision
        )

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
        return _Base(newest, dict(values))


def _reserved(name: str) -> bool:
    return name == "statekernel.run_count"  # the run count of heads saved before the journal


@attrs.frozen
class _Rebuilt:
    revision: int
    values: dict[str, Any]
    raw: dict[str, bytes]
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
            return _StoredJournal(store, self._registry, thread_id)
        return _MemoryJournal(self._keeper.remembered(thread_id))

    async def history(
        self, thread_id: str, *, since: int = 0, limit: int | None = None
    ) -> list[CommitRecord]:
        _check_revision("since", since)
        if limit is not None:
            _check_revision("limit", limit)
        return await self._journal(thread_id).records(since, limit=limit)

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
        if found and revision == 0:  # the empty start: held unless the thread is unknown or pruned
            first = await journal.records(0, limit=1)
            found = await journal.head() is not None and (not first or first[0].revision == 1)
        if not found:
            raise UnknownRevision(
                thread_id, revision, held=await _held(journal, await journal.head())
            )
        stale = apply_records(
            self._registry, base.values, records, thread_id=thread_id, unreadable=base.raw
        )
        raw = {name: data for name, data in base.raw.items() if name not in stale}
        return _Rebuilt(revision, base.values, raw, frozenset(stale))

    async def fork(self, thread_id: str, revision: int, new_thread_id: str) -> None:
        source = self._journal(thread_id)
        target = self._journal(new_thread_id)
        if self._keeper.is_live(new_thread_id) or await target.head() is not None:
            raise StateError(
                f"cannot fork thread {thread_id!r} into {new_thread_id!r}: that thread already "
                f"exists. Fork into a new thread id, or delete it first."
            )
        rebuilt = await self._rebuild(source, thread_id, revision)
        records = [
            msgspec.structs.replace(record, thread_id=new_thread_id)
            for record in await source.records(0, until=revision)
        ]
        store = self._keeper.store
        if store is None:
            self._keeper.adopt(
                new_thread_id,
                ThreadMemory(
                    values=dict(rebuilt.values),
                    revision=revision,
                    journal=records,
                    snapshots=[(revision, dict(rebuilt.values))],
                ),
            )
            return
        snapshot = {
            **rebuilt.raw,
            **encode_scope(self._registry, rebuilt.values, KeyScope.THREAD, EncodeCache()),
        }
        save = ThreadSave(
            revision=revision,
            records=tuple(JournalEntry(r.revision, encode_record_bytes(r)) for r in records),
            snapshot=snapshot,
        )
        await store.save(new_thread_id, save, expected_position=0)

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
        records = await journal.records(0)
        start = records[0].revision - 1 if records else head
        base = (await journal.base(start) if start else None) or _Base(0, {})
        if base.revision != start:
            raise UnknownRevision(thread_id, start, held=await _held(journal, head))
        checks = await _checkpoints(journal, start, head)
        values, unreadable = base.values, set(base.raw)
        done = start
        last_good = start
        for revision, expected in checks:
            chunk = [record for record in records if done < record.revision <= revision]
            try:
                unreadable |= apply_records(
                    self._registry, values, chunk, thread_id=thread_id, unreadable=unreadable
                )
            except (ReplayFailed, DecodeFailed) as error:
                failed_at = getattr(error, "revision", None) or _first_of(chunk, revision)
                return ReplayReport(False, head, "", failed_at, str(error))
            done = revision
            differing = _differing(self._registry, values, expected, unreadable)
            if differing:
                first = _first_writer(records, last_good, revision, differing)
                detail = (
                    f"at revision {revision} the journal rebuilds keys "
                    f"{sorted(differing)} differently from what was stored; the first commit "
                    f"after revision {last_good} that wrote one is revision {first}"
                )
                return ReplayReport(False, head, "", first, detail)
            last_good = revision
        tail = [record for record in records if record.revision > done]
        try:
            unreadable |= apply_records(
                self._registry, values, tail, thread_id=thread_id, unreadable=unreadable
            )
        except (ReplayFailed, DecodeFailed) as error:
            failed_at = getattr(error, "revision", None) or _first_of(tail, head)
            return ReplayReport(False, head, "", failed_at, str(error))
        held = self._held_values(thread_id)
        if held is not None:
            differing = _differing(self._registry, values, held, unreadable)
            if differing:
                first = _first_writer(records, last_good, head, differing)
                detail = (
                    f"the journal rebuilds keys {sorted(differing)} differently from the "
                    f"state this kernel holds at revision {head}"
                )
                return ReplayReport(False, head, "", first, detail)
        kept = {name: value for name, value in values.items() if name not in unreadable}
        return ReplayReport(True, head, hash_of(self._registry, head, kept))

    def _held_values(self, thread_id: str) -> dict[str, Any] | None:
        """The thread values this kernel holds in memory, when it holds all of them."""
        if self._keeper.store is not None:
            return None
        thread = self._keeper.remembered(thread_id)
        return None if thread is None else thread.values


async def _checkpoints(
    journal: _Journal, start: int, head: int
) -> list[tuple[int, Mapping[str, Any]]]:
    """Every snapshot after `start` up to `head`, oldest first (walking back from the head)."""
    found: list[tuple[int, Mapping[str, Any]]] = []
    at = head
    while at > start:
        base = await journal.base(at)
        if base is None or base.revision <= start:
            break
        found.append((base.revision, base.values))
        at = base.revision - 1
    found.reverse()
    return found


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
    if head is None:
        return None
    first = await journal.records(0, limit=1)
    return (first[0].revision - 1 if first else head, head)


def _check_revision(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a revision (an int >= 0), got {value!r}")
