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
from .chain import (
    SEAL,
    START,
    Chain,
    ChainKey,
    check_head,
    read_head_seal,
    snapshot_link,
    walk,
)
from .journal import CommitRecord, record_prev
from .replay import ReplayPolicy
from .store import (
    SupportsHead,
    ThreadHead,
    ThreadSnapshot,
    ThreadState,
    ThreadStore,
    store_failures,
)
from .stored_loads import trusted_records
from .thread_snapshots import RESERVED_VALUES, differing_keys, read_snapshot
from .threads import ReplayBase

__all__ = ["StoredJournal"]

_LINKED_ONLY = Chain(START, None)
"""What history reads assume of a thread's chain when its head has no seal (or there is
no head): they check the records and seals they find (a thread stored before the chain
has none)."""


class StoredJournal:
    """One thread's stored journal; `whole` are the records this kernel holds whole."""

    def __init__(
        self,
        store: ThreadStore,
        registry: KeyRegistry,
        thread_id: str,
        *,
        skip: bool,
        whole: Sequence[CommitRecord] = (),
        chain_key: ChainKey | None = None,
    ) -> None:
        self._store, self._registry, self._thread_id = store, registry, thread_id
        self._skip = skip
        self.replay_policy = ReplayPolicy(every_op=False, skip_undecodable=skip)
        """A store keeps the persistent thread keys' ops, each with its bytes."""
        self._key = chain_key
        self._whole = whole
        # The link at each revision this journal read: a sealed snapshot's (`base`), or a
        # record's own (`records`), for the next read to start from or the head to name.
        self._links: dict[int, bytes] = {}
        self._head: tuple[int, bytes | None] | None = None  # the head last read, its seal
        self._sealed = False  # whether anything read carries a link or seal (the chain began)
        self._head_read = False  # whether `_head` was read (a head that is None, too)
        self._keyed = False  # whether the chain last read is keyed

    async def head(self) -> int | None:
        found = await self._read_head()
        self._head = None if found is None else (found.revision, found.seal)
        self._head_read = True
        return None if found is None else found.revision

    @property
    def keyed(self) -> bool:
        """Whether the chain this journal last read (at its head) is keyed."""
        return self._keyed

    def link_at(self, revision: int) -> bytes | None:
        """The link at `revision` as this journal read and checked it, if it did."""
        return self._links.get(revision)

    async def _read_head(self) -> ThreadHead | ThreadState | None:
        with store_failures("thread history read", self._thread_id):
            if isinstance(self._store, SupportsHead):  # the head alone, not the thread
                return await self._store.head(self._thread_id)
            return await self._store.load(self._thread_id)

    async def records(
        self, since: int, until: int | None = None, limit: int | None = None
    ) -> list[CommitRecord]:
        """The records asked for, each checked against its neighbours' links: the record
        after the last (read too, when there is one) vouches for it, and the sealed
        snapshot at `since` (when this journal just read it, as `state_at` does) or the
        start of the thread for the first; the head, when this journal read it and they
        end there, for the last. (Whether the head names the newest record at all is
        `check_newest`'s to say.)"""
        thread_id = self._thread_id
        with store_failures("thread history read", thread_id):
            entries = await self._store.records(
                thread_id,
                since=since,
                until=None if until is None else until + 1,
                limit=None if limit is None else limit + 1,
            )
        if not entries:
            return []
        after = entries[0].revision - 1
        link = self._links.get(after) if after == since else None
        if after == 0 and record_prev(entries[0].data) is not None:
            link = START
        chain = await self._chain()
        then = chain.link if self._head_at(entries[-1].revision) else None
        records, links = walk(thread_id, entries, after=after, link=link, chain=chain, then=then)
        self._links.update(zip((entry.revision for entry in entries), links, strict=True))
        self._sealed = self._sealed or record_prev(entries[-1].data) is not None
        wanted = len(records) if limit is None else min(limit, len(records))
        if until is not None:
            wanted = min(wanted, sum(1 for record in records if record.revision <= until))
        return records[:wanted]

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
        link = snapshot_link(
            self._thread_id, snapshot, await self._chain()
        )  # a changed one is refused
        if link is not None:
            self._links[snapshot.revision] = link
            self._sealed = True
        restored, _ = await read_snapshot(
            self._registry,
            snapshot,
            self._sealed_snapshot,
            record=self._thread_id,
            skip_undecodable=self._skip,
            exclude=lambda name: name in RESERVED_VALUES,
        )
        foreign = {**restored.foreign, **restored.undecodable}
        return ReplayBase(snapshot.revision, restored.values, foreign)

    async def _sealed_snapshot(self, revision: int) -> ThreadSnapshot | None:
        """An older snapshot a Vector extends, checked against its seal like the first."""
        snapshot = await self.snapshot(revision)
        if snapshot is not None:
            snapshot_link(self._thread_id, snapshot, await self._chain())
        return snapshot

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

    async def _chain(self) -> Chain:
        """The chain the head last read names (read first, when it was not: a keyed chain
        is checked with its key, and needs it); of a thread stored before the chain, what
        history reads assume (`_LINKED_ONLY`)."""
        if not self._head_read:
            await self.head()
        return self._chain_named()

    def _chain_named(self) -> Chain:
        if self._head is None or self._head[1] is None:
            return _LINKED_ONLY
        chain = read_head_seal(self._thread_id, self._head[0], self._head[1], self._key)
        self._keyed = chain.key is not None
        return chain

    def _head_at(self, revision: int) -> bool:
        """Whether the head last read stands at `revision` with a seal."""
        return self._head is not None and self._head[0] == revision and self._head[1] is not None

    async def check_newest(self, revision: int) -> None:
        """The head last read names `revision`: its seal must name the link there, the
        newest record's (or the snapshot's taken there) as this journal read it. A head
        without a seal is a thread stored before the chain only if nothing read was sealed."""
        if self._head is None or self._head[0] != revision:
            return
        seal = self._head[1]
        if seal is None:
            if self._sealed:
                await self.check_whole()  # the head lost its seal
            return
        link = self._links.get(revision)
        if link is not None and link != self._chain_named().link:
            await self.check_whole()  # names what was changed, the record or the head

    async def check_whole(self) -> None:
        """Walk the whole held journal link by link, every snapshot checked against its
        seal and against the link at its revision, up to the head's seal."""
        thread_id = self._thread_id
        with store_failures("thread history read", thread_id):
            stored = await self._store.load(thread_id)
            entries = await self._store.records(thread_id)
        if stored is None:
            return
        if (
            entries
            and entries[-1].revision > stored.revision
            and await self._moved_past(entries[-1].revision)
        ):  # a save landed between the two reads: what it added is not checked here
            entries = [entry for entry in entries if entry.revision <= stored.revision]
        chain = read_head_seal(thread_id, stored.revision, stored.seal, self._key)
        self._keyed = chain.key is not None
        if not entries:  # a snapshot and no record: what a load checks is all there is
            trusted_records(thread_id, stored, self._key)
            if chain.chained_from is not None:
                self._links[stored.revision] = chain.link
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
            named = snapshot_link(thread_id, snapshot, chain)
            if named is not None and at.get(snapshot.revision, named) != named:
                raise JournalCorrupted(
                    thread_id,
                    snapshot.revision,
                    f"the snapshot at revision {snapshot.revision} does not belong to this "
                    f"journal (its seal names another record of that revision)",
                )
        sealed = any(SEAL in snapshot.values for snapshot in snapshots) or any(
            record_prev(entry.data) for entry in entries
        )
        last = entries[-1].revision
        check_head(thread_id, stored.revision, last, links[-1], chain, sealed=sealed)
        if chain.chained_from is not None:
            self._links.update(at)

    async def _moved_past(self, revision: int) -> bool:
        """Whether the head now stands at `revision` or later (read again)."""
        found = await self._read_head()
        return found is not None and found.revision >= revision


def _first(error: JournalCorrupted, other: JournalCorrupted | None) -> JournalCorrupted:
    """Of two breaks, the one that condemns the earlier revision."""
    return other if other is not None and other.revision < error.revision else error
