"""In-memory ProfileStore and ThreadStore: for tests, demos and single-process runs.

They keep exactly the semantics of the SQLite stores (versions, compare-and-set, literal
prefixes, JSON / MessagePack encoding, size limit), so code tested against memory behaves the
same on disk. Their contents die with the process. Every method completes without awaiting
anything, so each call is atomic with respect to other tasks.
"""

from __future__ import annotations

import bisect
import builtins
import time
from collections.abc import Callable
from typing import Any, ClassVar

import attrs

from statekernel.lowlevel import (
    DEFAULT_MAX_VALUE_BYTES,
    ChangeFeed,
    Entry,
    JournalEntry,
    ThreadHead,
    ThreadSave,
    ThreadSnapshot,
    ThreadState,
    encode_entry,
)

from ._changes import Feed, Watchers
from ._closing import ClosingStore
from ._profile_codec import (
    check_expected,
    check_expected_version,
    check_names,
    decode_value,
    listed,
)
from ._thread_codec import (
    check_listing,
    check_position,
    check_save,
    check_since,
    check_thread_id,
    decode_head,
    decode_snapshot,
    legacy_snapshot,
    plan_save,
    prune_point,
    state_of,
)

__all__ = ["MemoryProfileStore", "MemoryThreadStore"]


@attrs.frozen
class _Record:
    data: bytes
    version: int
    updated_at: float


class MemoryProfileStore(ClosingStore):
    """A `ProfileStore` held in a dict; nothing survives the process.

    Its semantics match `SqliteProfileStore`: values are held as JSON, a value over
    `max_value_bytes` of JSON (16 MiB by default) raises `StoreError`, and it
    `SupportsAtomicUpdate`. It also `SupportsNamespaces`, `AcceptsEncodedValues` and
    `SupportsChanges`: every write through it (a `set`, `update`, `delete`, or `clear`,
    which reports the keys it removed) is told to its feeds of that namespace at once.
    """

    accepts_encoded_values: ClassVar[bool] = True  # see statekernel.lowlevel.EncodedValue

    def __init__(self, *, max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES) -> None:
        self._records: dict[str, dict[str, _Record]] = {}
        self._max_value_bytes = max_value_bytes
        self._watchers = Watchers()

    def changes(self, namespace: str) -> ChangeFeed:
        """A feed of the keys of `namespace` written through this store object from the
        moment it is entered (`async with store.changes(namespace) as feed:`)."""
        namespace, _ = check_names(namespace, "")
        return Feed(self._watchers, namespace)

    async def get(self, namespace: str, key: str) -> Entry | None:
        namespace, key = check_names(namespace, key)
        record = self._records.get(namespace, {}).get(key)
        return None if record is None else _entry(namespace, key, record)

    async def set(
        self, namespace: str, key: str, value: Any, *, expected_version: int | None = None
    ) -> Entry:
        namespace, key = check_names(namespace, key)
        expected = check_expected_version(expected_version)
        encoded = encode_entry(namespace, key, value, self._max_value_bytes)
        table = self._records.setdefault(namespace, {})
        old = table.get(key)
        check_expected(namespace, key, expected, None if old is None else old.version)
        record = _Record(encoded.data, 1 if old is None else old.version + 1, time.time())
        table[key] = record
        self._watchers.wrote(namespace, (key,))
        return Entry(namespace, key, encoded.value, record.version, record.updated_at)

    async def update(self, namespace: str, key: str, fn: Callable[[Entry | None], Any]) -> Entry:
        """Set the entry to `fn(current entry or None)` in one step (no await between)."""
        namespace, key = check_names(namespace, key)
        table = self._records.setdefault(namespace, {})
        old = table.get(key)
        value = fn(None if old is None else _entry(namespace, key, old))
        encoded = encode_entry(namespace, key, value, self._max_value_bytes)
        record = _Record(encoded.data, 1 if old is None else old.version + 1, time.time())
        table[key] = record
        self._watchers.wrote(namespace, (key,))
        return Entry(namespace, key, encoded.value, record.version, record.updated_at)

    async def delete(self, namespace: str, key: str) -> None:
        namespace, key = check_names(namespace, key)
        if self._records.get(namespace, {}).pop(key, None) is not None:
            self._watchers.wrote(namespace, (key,))

    async def namespaces(self, prefix: str = "") -> builtins.list[str]:
        _, prefix = check_names("namespaces", prefix)
        return sorted(
            name for name, table in self._records.items() if table and name.startswith(prefix)
        )

    async def list(self, namespace: str, prefix: str = "") -> builtins.list[Entry]:
        namespace, prefix = check_names(namespace, prefix)
        table = self._records.get(namespace, {})
        found = sorted(key for key in table if key.startswith(prefix))
        rows = ((key, table[key].data, table[key].version, table[key].updated_at) for key in found)
        return listed(namespace, rows)

    async def clear(self, namespace: str) -> None:
        namespace, _ = check_names(namespace, "")
        self._watchers.wrote(namespace, self._records.pop(namespace, {}))

    async def close(self) -> None:
        """Nothing to release; the entries (and entered feeds) stay until the store is
        dropped."""


def _entry(namespace: str, key: str, record: _Record) -> Entry:
    value = decode_value(namespace, key, record.data)
    return Entry(namespace, key, value, record.version, record.updated_at)


@attrs.define
class _Thread:
    position: int
    head: bytes
    records: list[JournalEntry] = attrs.field(factory=list)  # in revision order
    snapshots: dict[int, bytes] = attrs.field(factory=dict)
    events: list[tuple[int, bytes]] = attrs.field(factory=list)  # (save's revision, events)

    def after(self, since: int, until: int | None = None) -> list[JournalEntry]:
        """The entries with `since < revision <= until`, found by bisection."""
        start = bisect.bisect_right(self.records, since, key=_revision)
        stop = (
            len(self.records)
            if until is None
            else bisect.bisect_right(self.records, until, key=_revision)
        )
        return self.records[start:stop]


def _revision(entry: JournalEntry) -> int:
    return entry.revision


class MemoryThreadStore(ClosingStore):
    """A `ThreadStore` held in a dict; nothing survives the process.

    Its semantics match `SqliteThreadStore`. It `SupportsHead`, `SupportsLoadSince` and
    `SupportsRunEvents`.
    """

    def __init__(self) -> None:
        self._threads: dict[str, _Thread] = {}

    async def load(self, thread_id: str) -> ThreadState | None:
        thread = self._threads.get(check_thread_id(thread_id))
        if thread is None:
            return None
        head = decode_head(thread_id, thread.head)
        snapshot = self._newest_snapshot(thread_id, thread, head.revision)
        records = thread.after(snapshot.revision if snapshot is not None else 0)
        return state_of(head, thread.position, snapshot, records)

    async def load_since(self, thread_id: str, since: int) -> ThreadState | None:
        since = check_since(since)
        thread = self._threads.get(check_thread_id(thread_id))
        if thread is None:
            return None
        head = decode_head(thread_id, thread.head)
        held = [r for r in thread.snapshots if r <= head.revision]
        newest = max(held, default=0)
        if newest > since or legacy_snapshot(head) is not None:
            return await self.load(thread_id)
        snapshot = ThreadSnapshot(newest, {}) if held else None
        return state_of(head, thread.position, snapshot, thread.after(since))

    async def head(self, thread_id: str) -> ThreadHead | None:
        thread = self._threads.get(check_thread_id(thread_id))
        if thread is None:
            return None
        head = decode_head(thread_id, thread.head)
        return ThreadHead(thread.position, head.revision, head.seal)

    async def save(self, thread_id: str, save: ThreadSave, *, expected_position: int) -> None:
        save = check_save(thread_id, save, expected_position)
        thread = self._threads.get(thread_id)
        position = check_position(expected_position, None if thread is None else thread.position)
        old = decode_head(thread_id, thread.head) if thread is not None else None
        plan = plan_save(thread_id, save, old)
        # Everything is checked and encoded: from here on nothing can fail half-way.
        if thread is None:
            thread = self._threads[thread_id] = _Thread(position, plan.head)
        thread.position, thread.head = position, plan.head
        thread.records.extend(JournalEntry(e.revision, bytes(e.data)) for e in save.records)
        thread.snapshots.update(plan.snapshots)
        if save.events is not None:
            thread.events.append((save.revision, bytes(save.events)))

    async def records(
        self, thread_id: str, *, since: int = 0, until: int | None = None, limit: int | None = None
    ) -> builtins.list[JournalEntry]:
        thread = self._threads.get(check_thread_id(thread_id))
        if thread is None:
            return []
        found = thread.after(since, until)
        return found if limit is None else found[: max(limit, 0)]

    async def snapshot_at(self, thread_id: str, revision: int) -> ThreadSnapshot | None:
        thread = self._threads.get(check_thread_id(thread_id))
        if thread is None:
            return None
        return self._newest_snapshot(thread_id, thread, revision)

    async def prune(self, thread_id: str, *, before: int) -> None:
        keep = prune_point(before, ())  # checks the argument first
        thread = self._threads.get(check_thread_id(thread_id))
        if thread is None:
            return
        keep = prune_point(before, builtins.list(thread.snapshots))
        if keep is None:
            return
        thread.records = thread.after(keep)
        thread.snapshots = {r: d for r, d in thread.snapshots.items() if r >= keep}
        thread.events = [(r, data) for r, data in thread.events if r >= keep]

    async def run_events(self, thread_id: str) -> builtins.list[bytes]:
        thread = self._threads.get(check_thread_id(thread_id))
        return [] if thread is None else [data for _, data in thread.events]

    async def delete(self, thread_id: str) -> None:
        self._threads.pop(check_thread_id(thread_id), None)

    async def threads(self, *, prefix: str = "", limit: int | None = None) -> builtins.list[str]:
        prefix, limit = check_listing(prefix, limit)
        found = sorted(thread_id for thread_id in self._threads if thread_id.startswith(prefix))
        return found if limit is None else found[:limit]

    async def close(self) -> None:
        """Nothing to release; the threads stay until the store is dropped."""

    @staticmethod
    def _newest_snapshot(thread_id: str, thread: _Thread, revision: int) -> ThreadSnapshot | None:
        held = [r for r in thread.snapshots if r <= revision]
        if held:
            newest = max(held)
            return decode_snapshot(thread_id, newest, thread.snapshots[newest])
        legacy = legacy_snapshot(decode_head(thread_id, thread.head))
        return legacy if legacy is not None and legacy.revision <= revision else None
