"""A ThreadStore of your own, kept in a dict: the store that docs/custom-stores.md builds.

It passes the store contract (`statekernel.testing.store_contract.ThreadStoreContract`;
tests/test_store_contract.py runs it). A thread is a head (revision, runs, a suspended run,
the kernel's seal), its write position, its records and its snapshots; every byte in them
is the kernel's, kept as it came. The store's own work is three rules: a save is a
compare-and-set on the write position (`RevisionConflict`), its records follow the stored
head one by one (`StoreError`), and a load is the newest snapshot plus every record after
it. It leaves out the optional `SupportsHead`, `SupportsLoadSince` and `SupportsRunEvents`;
the contract skips their tests.
"""

from __future__ import annotations

import builtins
from types import TracebackType
from typing import Self

import attrs
import msgspec

from statekernel import RevisionConflict, StoreError
from statekernel.lowlevel import (
    JournalEntry,
    ThreadSave,
    ThreadSnapshot,
    ThreadState,
    check_name,
)


@attrs.define
class Thread:
    """One stored thread: the last save's head, the position, records and snapshots."""

    head: ThreadSave  # without its records and snapshot, which are kept below
    position: int
    records: dict[int, bytes] = attrs.field(factory=dict)  # by revision
    snapshots: dict[int, dict[str, bytes]] = attrs.field(factory=dict)  # by revision


class DictThreadStore:
    """A `ThreadStore` held in a dict of threads by id."""

    def __init__(self) -> None:
        self.threads_by_id: dict[str, Thread] = {}

    async def load(self, thread_id: str) -> ThreadState | None:
        thread = self.threads_by_id.get(check_name("thread id", thread_id))
        if thread is None:
            return None
        snapshot = _newest_snapshot(thread, thread.head.revision)
        since = 0 if snapshot is None else snapshot.revision
        return ThreadState(
            revision=thread.head.revision,
            values={} if snapshot is None else snapshot.values,
            snapshot_revision=since,
            records=tuple(_records(thread, since)),  # also any past the head: the kernel
            runs=thread.head.runs,  # must see those to say the journal is damaged
            run_values=thread.head.run_values,
            suspended=thread.head.suspended,
            position=thread.position,
            seal=thread.head.seal,
        )

    async def save(self, thread_id: str, save: ThreadSave, *, expected_position: int) -> None:
        thread = self.threads_by_id.get(check_name("thread id", thread_id))
        position = 0 if thread is None else thread.position
        if expected_position != position:
            raise RevisionConflict(expected_position, position, what="thread save", position=True)
        _check_records(thread_id, save, thread)
        # Everything is checked: from here on nothing can fail half-way.
        if thread is None:
            thread = self.threads_by_id[thread_id] = Thread(save, 0)
        thread.head = msgspec.structs.replace(save, records=(), snapshot=None, events=None)
        thread.position = position + 1
        thread.records.update((entry.revision, entry.data) for entry in save.records)
        if save.snapshot is not None:
            taken_at = save.revision if save.snapshot_revision is None else save.snapshot_revision
            thread.snapshots[taken_at] = dict(save.snapshot)

    async def records(
        self, thread_id: str, *, since: int = 0, until: int | None = None, limit: int | None = None
    ) -> builtins.list[JournalEntry]:
        thread = self.threads_by_id.get(check_name("thread id", thread_id))
        if thread is None:
            return []
        found = [e for e in _records(thread, since) if until is None or e.revision <= until]
        return found if limit is None else found[:limit]

    async def snapshot_at(self, thread_id: str, revision: int) -> ThreadSnapshot | None:
        thread = self.threads_by_id.get(check_name("thread id", thread_id))
        return None if thread is None else _newest_snapshot(thread, revision)

    async def prune(self, thread_id: str, *, before: int) -> None:
        thread = self.threads_by_id.get(check_name("thread id", thread_id))
        keep = None if thread is None else _newest_snapshot(thread, before)
        if thread is None or keep is None:
            return  # no snapshot at or before `before`: nothing may go
        thread.records = {r: data for r, data in thread.records.items() if r > keep.revision}
        thread.snapshots = {r: s for r, s in thread.snapshots.items() if r >= keep.revision}

    async def delete(self, thread_id: str) -> None:
        self.threads_by_id.pop(check_name("thread id", thread_id), None)

    async def threads(self, *, prefix: str = "", limit: int | None = None) -> builtins.list[str]:
        check_name("prefix", prefix)
        found = sorted(t for t in self.threads_by_id if t.startswith(prefix))
        return found if limit is None else found[:limit]

    async def close(self) -> None:
        """Nothing to release: a dict holds no connection."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


def _records(thread: Thread, since: int) -> list[JournalEntry]:
    return [JournalEntry(r, thread.records[r]) for r in sorted(thread.records) if r > since]


def _newest_snapshot(thread: Thread, revision: int) -> ThreadSnapshot | None:
    taken = [r for r in thread.snapshots if r <= revision]
    return ThreadSnapshot(max(taken), thread.snapshots[max(taken)]) if taken else None


def _check_records(thread_id: str, save: ThreadSave, thread: Thread | None) -> None:
    """The save's records must follow the stored head one by one and end at its revision.
    Only a save that creates the thread with a snapshot (a fork) may start them elsewhere:
    at or before its snapshot, which is the state they lead to."""
    follows = 0 if thread is None else thread.head.revision
    if thread is None and save.snapshot is not None:
        taken_at = save.revision if save.snapshot_revision is None else save.snapshot_revision
        follows = save.records[0].revision - 1 if save.records else taken_at
        if follows > taken_at:
            _refuse(thread_id, f"its records start after its snapshot at {taken_at}")
    revisions = [entry.revision for entry in save.records]
    if revisions != list(range(follows + 1, save.revision + 1)):
        _refuse(
            thread_id,
            f"a save to revision {save.revision} must carry the records from {follows + 1} "
            f"on, one by one; it carries {revisions}",
        )


def _refuse(thread_id: str, problem: str) -> None:
    raise StoreError("thread save", ValueError(f"thread {thread_id!r}: {problem}"), key=thread_id)
