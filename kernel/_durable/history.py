"""Reading a thread's journal: history, time travel, forks, verified replay and pruning.

Everything here reads what was saved, wherever the kernel's `ThreadHome` keeps it: the
records and snapshots in the ThreadStore, or in the kernel's memory when it has no store
(then every key is journaled, the non-persistent ones too). A run's commits appear once it
saved them (a checkpoint, a suspension, the run's end). The home answers the same few
questions for either place through a `ThreadJournal`, so each operation is written once:
the newest snapshot at or before a revision, the records in a range, the head revision.
"""

from __future__ import annotations

from typing import Any

import attrs
import immutables
import msgspec

from .._engine.registry import KeyRegistry
from .._engine.snapshot import Snapshot
from .._errors import (
    ChainKeyMismatch,
    DecodeFailed,
    JournalCorrupted,
    ReplayFailed,
    StateError,
    UnknownRevision,
    UnknownThread,
)
from .export import ExportedState, export_state
from .journal import LINK_SIZE, CommitRecord
from .replay import ReplayReport, apply_records, hash_of
from .store import ThreadSnapshot
from .threads import ReplayBase, ThreadHome, ThreadJournal, check_thread_id

__all__ = ["ThreadHistory"]


@attrs.frozen
class _Rebuilt:
    revision: int
    values: dict[str, Any]
    stale: frozenset[str]
    lost: dict[str, int]  # keys whose op had no bytes, by that op's revision
    base: ReplayBase
    records: list[CommitRecord]


class ThreadHistory:
    """The journal-reading side of a kernel's threads, over their home."""

    def __init__(self, home: ThreadHome, registry: KeyRegistry) -> None:
        self._home = home
        self._registry = registry

    def _journal(self, thread_id: str) -> ThreadJournal:
        check_thread_id(thread_id)
        return self._home.journal(thread_id)

    async def head(self, thread_id: str) -> int | None:
        """The thread's saved head revision, or None for a thread never saved."""
        return await self._journal(thread_id).head()

    async def history(
        self, thread_id: str, *, since: int = 0, limit: int | None = None
    ) -> list[CommitRecord]:
        _check_revision("since", since)
        if limit is not None:
            _check_revision("limit", limit)
        journal = self._journal(thread_id)
        head = await journal.head()  # first: a save meanwhile only adds to what is read
        shown = await journal.shown(since, limit)
        if head is None:
            if not shown:
                raise UnknownThread(thread_id)
            return shown
        # The head names the newest record: records that stop short of it (a record lost) or
        # go past it (one put there by hand) are damage, unless a save or a prune meanwhile
        # explains them, which the whole journal, read again, tells apart.
        newest = shown[-1].revision if shown else since
        if shown and newest > head:  # most likely a save meanwhile: the head, read again
            head = await journal.head()
            if head is None or newest > head:
                await journal.check_whole()
                return shown
        if (limit is None or len(shown) < limit) and newest < head:
            await journal.check_whole()
        elif shown and newest == head:
            await journal.check_newest(head)  # only the head vouches for the newest record
        return shown

    async def state_at(self, thread_id: str, revision: int) -> Snapshot:
        _, values = await self._readable(self._journal(thread_id), thread_id, revision)
        return Snapshot(revision, immutables.Map(values), self._registry)

    async def current(self, thread_id: str) -> Snapshot:
        """The thread keys at the saved head, which must name the newest record."""
        journal = self._journal(thread_id)
        head = await journal.head()
        if head is None:
            raise UnknownThread(thread_id)
        _, values = await self._readable(journal, thread_id, head, head=head)
        return Snapshot(head, immutables.Map(values), self._registry)

    async def _readable(
        self, journal: ThreadJournal, thread_id: str, revision: int, *, head: int | None = None
    ) -> tuple[_Rebuilt, dict[str, Any]]:
        """The thread rebuilt at `revision`, and the values it can be read as: those it
        rebuilt whole (a key whose op had no bytes raises, never a default in its place)."""
        rebuilt = await self._rebuild(journal, thread_id, revision, head=head)
        for name, at in rebuilt.lost.items():
            raise _unjournaled(thread_id, revision, name, at)
        values = {
            name: value for name, value in rebuilt.values.items() if name not in rebuilt.stale
        }
        return rebuilt, values

    async def _rebuild(
        self, journal: ThreadJournal, thread_id: str, revision: int, *, head: int | None = None
    ) -> _Rebuilt:
        """The thread rebuilt at `revision`. Given the `head` (read before), a rebuild at the
        head reads on past it: the head names the newest record, so one past it is damage
        (unless a save meanwhile put it there)."""
        _check_revision("revision", revision)
        at_head = head is not None and revision == head
        base = await journal.base(revision) or ReplayBase(0, {})
        read = await journal.records(base.revision, until=None if at_head else revision)
        records = [record for record in read if record.revision <= revision]
        reached = records[-1].revision if records else base.revision
        contiguous = not records or records[0].revision == base.revision + 1
        found = reached == revision and contiguous
        if found and base.revision == 0:  # from the empty start: not if pruned or unknown
            first = await journal.records(0, limit=1)
            known = head is not None or await journal.head() is not None
            found = known and (not first or first[0].revision == 1)
        if not found:
            head = await journal.head()
            if head is None:
                raise UnknownThread(thread_id)
            held = await _held(journal, head)
            if held is not None and held[0] <= revision <= head:
                # The journal holds this revision, yet its record is not there: a record
                # lost (the newest, when only the head still names it). The whole journal
                # names it, unless a prune meanwhile explains the gap.
                await journal.check_whole()
            raise UnknownRevision(thread_id, revision, held=held)
        if len(read) > len(records):  # most likely a save meanwhile: the head, read again
            now = await journal.head()
            if now is None or read[-1].revision > now:
                await journal.check_whole()  # a record past the head
        elif at_head:
            await journal.check_newest(revision)  # only the head vouches for the newest record
        replayed = apply_records(
            self._registry,
            base.values,
            records,
            thread_id=thread_id,
            policy=journal.replay_policy,
            unreadable=base.raw,
        )
        return _Rebuilt(
            revision,
            base.values,
            replayed.stale | set(base.raw),
            replayed.lost,
            base,
            records,
        )

    async def export(self, thread_id: str, revision: int | None) -> ExportedState:
        """Every stored key at `revision` (None: the head) as plain JSON data, those this
        kernel does not type as far as their bytes go (`export.py`)."""
        journal = self._journal(thread_id)
        head = None
        if revision is None:
            revision = head = await journal.head()
            if revision is None:
                raise UnknownThread(thread_id)
        rebuilt, values = await self._readable(journal, thread_id, revision, head=head)
        by_name = self._registry.by_name
        typed = {name: value for name, value in values.items() if name in by_name}

        async def fetch(at: int) -> ThreadSnapshot | None:
            older = await journal.base(at)
            return None if older is None else ThreadSnapshot(older.revision, older.raw)

        base = ThreadSnapshot(rebuilt.base.revision, rebuilt.base.raw)
        return await export_state(
            revision, typed, base, rebuilt.records, fetch, thread_id=thread_id
        )

    async def fork(self, thread_id: str, revision: int, new_thread_id: str) -> None:
        """A new thread holding the source's newest snapshot at or before `revision` and
        every record up to it, so that it rebuilds (and travels back) exactly as the source
        does, keys this kernel cannot read included."""
        source = self._journal(thread_id)
        if (
            self._home.is_live(new_thread_id)
            or await self._journal(new_thread_id).head() is not None
        ):
            raise StateError(
                f"cannot fork thread {thread_id!r} into {new_thread_id!r}: that thread already "
                f"exists. Fork into a new thread id, or delete it first."
            )
        rebuilt = await self._rebuild(source, thread_id, revision)  # raises UnknownRevision
        if revision == await source.head():  # only the head vouches for its newest record
            await source.check_whole()
        records = [
            msgspec.structs.replace(record, thread_id=new_thread_id)
            for record in await source.records(0, until=revision)
        ]
        known = {k: v for k, v in rebuilt.values.items() if k not in rebuilt.stale}
        await self._home.fork(thread_id, revision, new_thread_id, records, known)

    async def prune(self, thread_id: str, *, before: int) -> None:
        _check_revision("before", before)
        await self._home.prune(thread_id, before=before)

    async def verify(self, thread_id: str, *, expect_head: str | None = None) -> ReplayReport:
        expected = None if expect_head is None else _head_digest_of(expect_head)
        journal = self._journal(thread_id)
        head = await journal.head()
        if head is None:
            raise UnknownThread(thread_id)
        try:
            await journal.check_whole()
        except JournalCorrupted as error:
            keyed = journal.keyed or isinstance(error, ChainKeyMismatch)
            return ReplayReport(False, head, "", error.revision, str(error), keyed=keyed)
        link = journal.link_at(head)
        digest = "" if link is None else f"{head}:{link.hex()}"
        if expected is not None and link is None:
            raise StateError(
                f"thread {thread_id!r} has no head digest to check {expect_head!r} against: "
                f"its journal is not chained (a kernel without a thread store keeps it in "
                f"memory; a thread stored before the chain gets one at its next save)"
            )
        report = None
        if expected is not None:
            report = await _kept_head(journal, thread_id, head, *expected)
        if report is None or report.ok:
            report = await self._replayed(journal, thread_id, head)
        return attrs.evolve(report, keyed=journal.keyed, head_digest=digest)

    async def _replayed(self, journal: ThreadJournal, thread_id: str, head: int) -> ReplayReport:
        """The thread rebuilt from its journal (its chain checked) and compared with what
        was stored, at every snapshot and at the head."""
        try:
            held = await _held(journal, head)
            assert held is not None
            start = held[0]  # records before it (a pruned thread's fork) are history only
            base = (await journal.base(start) if start else None) or ReplayBase(0, {})
            checks = await journal.snapshot_revisions(start, head)
        except DecodeFailed as error:
            detail = f"a stored snapshot does not decode: {error}"
            return ReplayReport(False, head, "", None, detail)
        try:
            records = await journal.records(start)
        except JournalCorrupted as error:  # (between the check and this read)
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
                replayed = apply_records(
                    self._registry,
                    values,
                    chunk,
                    thread_id=thread_id,
                    policy=journal.replay_policy,
                    unreadable=unreadable,
                )
                unreadable |= replayed.stale
                if replayed.lost:  # a value the journal cannot rebuild: never reported as ok
                    name, at = min(replayed.lost.items(), key=lambda item: item[1])
                    unjournaled = _unjournaled(thread_id, at, name, at)
                    return ReplayReport(False, head, "", at, str(unjournaled))
                if revision in checks:
                    where = f"what was stored at revision {revision}"
                    differing = await journal.differing(revision, values, unreadable)
                else:
                    where = f"the state this kernel holds at revision {head}"
                    differing = journal.held_differing(values, unreadable)
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


def _head_digest_of(text: str) -> tuple[int, bytes]:
    """A head digest as `ReplayReport.head_digest` shows it: `"<revision>:<32 hex digits>"`."""
    revision, _, digest = str(text).strip().partition(":")
    try:
        at, link = int(revision), bytes.fromhex(digest)
    except ValueError:
        at, link = 0, b""
    if at < 1 or len(link) != LINK_SIZE:
        raise ValueError(
            f"expect_head must be a head digest as verify reports it, "
            f"'<revision>:<{2 * LINK_SIZE} hex digits>' (ReplayReport.head_digest, "
            f"`statekernel verify --json`'s head_digest), got {text!r}"
        )
    return at, link


async def _kept_head(
    journal: ThreadJournal, thread_id: str, head: int, revision: int, link: bytes
) -> ReplayReport:
    """Whether the journal (its chain checked) holds, at `revision`, the `link` a head
    digest kept elsewhere names: ok, or a report of what changed since it was kept."""
    kept = f"{revision}:{link.hex()}"
    if revision > head:
        detail = (
            f"the kept head digest {kept} names revision {revision}, but the thread's journal "
            f"ends at revision {head}: its newer records were removed, with the head"
        )
        return ReplayReport(False, head, "", head + 1, detail)
    found = journal.link_at(revision)
    if found is None:
        raise UnknownRevision(thread_id, revision, held=await _held(journal, head))
    if found == link:
        return ReplayReport(True, head, "")
    held = await _held(journal, head)
    first = held[0] + 1 if held is not None else 1
    detail = (
        f"the kept head digest {kept} is not this journal's at revision {revision} (it holds "
        f"{revision}:{found.hex()}): its history up to revision {revision} was rewritten and "
        f"re-chained since the digest was kept (or the digest is another thread's)"
    )
    return ReplayReport(False, head, "", first, detail)


def _unjournaled(thread_id: str, revision: int, name: str, at: int) -> ReplayFailed:
    return ReplayFailed(
        thread_id,
        revision,
        name,
        ValueError(f"the op of revision {at} was journaled without its bytes"),
        fix=(
            "The journal cannot rebuild this key between that op and the next snapshot (the "
            "thread was saved by a statekernel that stored such ops without bytes). Travel to "
            "a revision before it or at a later snapshot, or write the key anew with "
            "kernel.update_state."
        ),
    )


def _first_writer(records: list[CommitRecord], after: int, until: int, names: set[str]) -> int:
    """The first revision in (after, until] whose commit wrote one of `names`; else `until`
    (the stored side changed without a commit: a tampered snapshot)."""
    for record in records:
        if after < record.revision <= until and any(op.key in names for op in record.ops):
            return record.revision
    return until


def _first_of(records: list[CommitRecord], default: int) -> int:
    return records[0].revision if records else default


async def _held(journal: ThreadJournal, head: int | None) -> tuple[int, int] | None:
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
