"""A thread's journal in a ThreadStore, as history reads it.

The store holds the records of persistent thread keys and the snapshots; history, time
travel and `verify` read them through here, decoded with this kernel's declarations. The
ops of `persistent=False` thread keys were never stored: the kernel that made such a commit
keeps its whole record in memory (`StoredThreads`), and `history` shows that one instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._engine.registry import KeyRegistry
from .journal import CommitRecord, decode_record
from .store import ThreadSnapshot, ThreadStore, store_failures
from .thread_snapshots import RESERVED_VALUES, differing_keys, read_snapshot
from .threads import ReplayBase

__all__ = ["StoredJournal"]


class StoredJournal:
    """One thread's stored journal; `whole` are the records this kernel holds whole."""

    persistent_only = True

    def __init__(
        self,
        store: ThreadStore,
        registry: KeyRegistry,
        thread_id: str,
        *,
        skip: bool,
        whole: Sequence[CommitRecord] = (),
    ) -> None:
        self._store, self._registry, self._thread_id = store, registry, thread_id
        self._skip = skip
        self._whole = whole

    async def head(self) -> int | None:
        with store_failures("thread history read", self._thread_id):
            stored = await self._store.load(self._thread_id)
        return None if stored is None else stored.revision

    async def records(
        self, since: int, until: int | None = None, limit: int | None = None
    ) -> list[CommitRecord]:
        with store_failures("thread history read", self._thread_id):
            entries = await self._store.records(
                self._thread_id, since=since, until=until, limit=limit
            )
        return [
            decode_record(entry.data, thread_id=self._thread_id, revision=entry.revision)
            for entry in entries
        ]

    async def shown(self, since: int, limit: int | None) -> list[CommitRecord]:
        records = await self.records(since, limit=limit)
        if not self._whole:
            return records
        # Ops of `persistent=False` keys are journaled in this kernel's memory only.
        whole = {(r.revision, r.run_id, r.created_at): r for r in self._whole}
        return [whole.get((r.revision, r.run_id, r.created_at), r) for r in records]

    async def base(self, revision: int) -> ReplayBase | None:
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
        return ReplayBase(snapshot.revision, restored.values, foreign)

    async def snapshot(self, revision: int) -> ThreadSnapshot | None:
        with store_failures("thread history read", self._thread_id):
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

    def held_differing(self, values: Mapping[str, Any], ignore: set[str]) -> set[str]:
        return set()  # the store holds the thread; this kernel only some keys of it
