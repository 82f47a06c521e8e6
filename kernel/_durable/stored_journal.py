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
from .._errors import JournalCorrupted
from .chain import START, Chain, check_head, read_head_seal, snapshot_link, walk
from .journal import CommitRecord
from .store import ThreadSnapshot, ThreadStore, store_failures
from .stored_loads import trusted_records
from .thread_snapshots import RESERVED_VALUES, differing_keys, read_snapshot
from .threads import ReplayBase

__all__ = ["StoredJournal"]

_SEALED_IF_SO = Chain(START, None)  # history reads check the seals they find


class StoredJournal:
    """One thread's stored journal; `whole` are the records this kernel holds whole."""

    persistent_only = True
    held: Mapping[tuple[int, str], Any] = {}  # a store keeps every op's bytes

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
        """The records asked for, each checked against its neighbours' links: the one
        after the last (read too) or the head vouches for it, and the snapshot at `since`
        (when it is there) for the first."""
        thread_id = self._thread_id
        with store_failures("thread history read", thread_id):
            stored = await self._store.load(thread_id)
            entries = await self._store.records(
                thread_id,
                since=since,
                until=None if until is None else until + 1,
                limit=None if limit is None else limit + 1,
            )
        if stored is None or not entries:
            return []
        chain = read_head_seal(thread_id, stored.revision, stored.seal)
        after, link = entries[0].revision - 1, None
        if after == since:
            link = await self._link_at(since, chain)
        then = chain.link if chain.chained_from is not None else None
        records, links = walk(thread_id, entries, after=after, link=link, chain=chain, then=then)
        link = links[-1]
        wanted = len(records) if limit is None else min(limit, len(records))
        if until is not None:
            wanted = min(wanted, sum(1 for record in records if record.revision <= until))
        if wanted == len(records):  # nothing after the last: the head vouches for it
            check_head(thread_id, stored.revision, records[-1].revision, link, chain)
        return records[:wanted]

    async def _link_at(self, revision: int, chain: Chain) -> bytes | None:
        """The link the sealed snapshot at `revision` names (the start's, at 0), if known."""
        if revision == 0:
            return START if chain.chained_from == 1 else None
        snapshot = await self.snapshot(revision)
        if snapshot is None or snapshot.revision != revision:
            return None
        return snapshot_link(self._thread_id, snapshot, chain)

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
        snapshot_link(self._thread_id, snapshot, _SEALED_IF_SO)  # a changed one is refused
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

    async def check_whole(self) -> None:
        """Walk the whole held journal link by link, every snapshot checked against its
        seal and against the link at its revision, up to the head's seal."""
        thread_id = self._thread_id
        with store_failures("thread history read", thread_id):
            stored = await self._store.load(thread_id)
            entries = await self._store.records(thread_id)
        if stored is None:
            return
        chain = read_head_seal(thread_id, stored.revision, stored.seal)
        if not entries:  # a snapshot and no record: what a load checks is all there is
            trusted_records(thread_id, stored)
            return
        after = entries[0].revision - 1
        link: bytes | None = START if after == 0 and chain.chained_from == 1 else None
        start = await self.snapshot(after) if after else None
        if start is not None and start.revision == after:
            link = snapshot_link(thread_id, start, chain)
        snapshots: list[ThreadSnapshot] = []
        unsealed: JournalCorrupted | None = None  # the oldest snapshot its seal condemns
        for revision in await self.snapshot_revisions(after, stored.revision):
            snapshot = await self.snapshot(revision)
            if snapshot is None:
                continue  # pruned meanwhile
            try:
                snapshot_link(thread_id, snapshot, chain)
            except JournalCorrupted as error:
                unsealed = unsealed or error
            snapshots.append(snapshot)
        then = chain.link if chain.chained_from is not None else None
        try:
            _, links = walk(thread_id, entries, after=after, link=link, chain=chain, then=then)
        except JournalCorrupted as error:
            raise _first(error, unsealed) from None
        if unsealed is not None:
            raise unsealed
        at = {entry.revision: own for entry, own in zip(entries, links, strict=True)}
        for snapshot in snapshots:
            sealed = snapshot_link(thread_id, snapshot, chain)
            if sealed is not None and at.get(snapshot.revision, sealed) != sealed:
                raise JournalCorrupted(
                    thread_id,
                    snapshot.revision,
                    f"the snapshot at revision {snapshot.revision} does not belong to this "
                    f"journal (its seal names another record of that revision)",
                )
        last = entries[-1].revision
        check_head(thread_id, stored.revision, last, links[-1], chain)


def _first(error: JournalCorrupted, other: JournalCorrupted | None) -> JournalCorrupted:
    """Of two breaks, the one that condemns the earlier revision."""
    return other if other is not None and other.revision < error.revision else error
