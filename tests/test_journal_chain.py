"""The journal's chain: a stored thread missing a record, or holding one nobody committed,
never loads, and `verify` names the first revision that cannot be trusted.

Each tampering is done twice: on the bytes a store hands back (any backend, through
`Tampered`), and on a real SQLite file with `sqlite3`, as an operator's bad restore or a
hand edit would leave it. The thread: 35 commits of one count, snapshots at 10, 20 and 30.
"""

from __future__ import annotations

import builtins
import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import msgspec
import pytest
from journal_samples import (
    SEAL,
    Count,
    Log,
    Mood,
    edit_snapshot,
    plugins,
    referring_keys,
    write_referring,
    written_before_the_chain,
)
from samples import commit_all, read

from statekernel import (
    CommitRecord,
    JournalCorrupted,
    Kernel,
    StateCommand,
    StateError,
    ThreadStore,
)
from statekernel.lowlevel import (
    JournalEntry,
    SupportsHead,
    ThreadHead,
    ThreadSave,
    ThreadSnapshot,
    ThreadState,
)
from statekernel.stores import SqliteThreadStore

HEAD = 35

Entries = list[JournalEntry]


class Tampered:
    """A ThreadStore that hands back what the store under it holds, changed the way a
    faulty disk or a bad restore would change it: its records, its head or a snapshot."""

    def __init__(
        self,
        store: ThreadStore,
        *,
        records: Callable[[Entries], Entries] = lambda entries: entries,
        head: Callable[[ThreadState], ThreadState] = lambda state: state,
        snapshot: Callable[[ThreadSnapshot], ThreadSnapshot] = lambda snapshot: snapshot,
    ) -> None:
        self.store = store
        self.edit_records = records
        self.edit_head = head
        self.edit_snapshot = snapshot

    async def load(self, thread_id: str) -> ThreadState | None:
        state = await self.store.load(thread_id)
        if state is None:
            return None
        snapshot = self.edit_snapshot(ThreadSnapshot(state.snapshot_revision, state.values))
        every = self.edit_records(await self.store.records(thread_id))
        return self.edit_head(
            msgspec.structs.replace(
                state,
                values=snapshot.values,
                records=tuple(e for e in every if e.revision > state.snapshot_revision),
            )
        )

    async def save(self, thread_id: str, save: ThreadSave, *, expected_position: int) -> None:
        await self.store.save(thread_id, save, expected_position=expected_position)

    async def records(
        self, thread_id: str, *, since: int = 0, until: int | None = None, limit: int | None = None
    ) -> builtins.list[JournalEntry]:
        every = self.edit_records(await self.store.records(thread_id))
        found = [e for e in every if e.revision > since and (until is None or e.revision <= until)]
        return found if limit is None else found[:limit]

    async def snapshot_at(self, thread_id: str, revision: int) -> ThreadSnapshot | None:
        snapshot = await self.store.snapshot_at(thread_id, revision)
        return None if snapshot is None else self.edit_snapshot(snapshot)

    async def prune(self, thread_id: str, *, before: int) -> None:
        await self.store.prune(thread_id, before=before)

    async def delete(self, thread_id: str) -> None:
        await self.store.delete(thread_id)

    async def threads(self, *, prefix: str = "", limit: int | None = None) -> builtins.list[str]:
        return await self.store.threads(prefix=prefix, limit=limit)

    async def close(self) -> None:
        await self.store.close()

    async def __aenter__(self) -> Tampered:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


# -- the tamperings, on entries and on a SQLite file -----------------------------------------


def forged_body(data: bytes) -> bytes:
    """A record's bytes with its count update 1 made 7 (a decodable record nobody wrote)."""
    forged = data.replace(b"\xa6update\xc4\x011", b"\xa6update\xc4\x017")
    assert forged != data
    return forged


def forged_whole(data: bytes, revision: int) -> bytes:
    """A well-formed record of `revision`, its own link to the record before it intact:
    only the chain after it can tell it was not committed."""
    record = msgspec.msgpack.decode(data[16:], type=CommitRecord)
    assert record.revision == revision
    other = msgspec.structs.replace(record, run_id="forger", sources=("external",))
    return data[:16] + msgspec.msgpack.encode(other)


def relinked(data: bytes) -> bytes:
    """A record whose link to the record before it was overwritten (its body intact)."""
    return bytes(16) + data[16:]


def link_of(data: bytes) -> bytes:
    """A stored record's link, as docs/durability.md defines it: BLAKE2b (16 bytes) of its
    bytes, which the record after it begins with."""
    return hashlib.blake2b(data, digest_size=16).digest()


def before_the_chain(data: bytes) -> bytes:
    """A record as statekernel stored it before the chain: its body after 8 bytes of its own
    digest, naming no record before it."""
    body = data[16:]
    return hashlib.blake2b(body, digest_size=8).digest() + body


def cut_short(data: bytes) -> bytes:
    """A record whose bytes end halfway (a torn write): its body no longer decodes."""
    return data[: len(data) // 2]


def cut_to_a_few_bytes(data: bytes) -> bytes:
    """A record torn after 8 bytes: shorter than a link, as long as the digest a record
    stored before the chain begins with, and no body after either."""
    return data[:8]


def without(revision: int) -> Callable[[Entries], Entries]:
    return lambda entries: [e for e in entries if e.revision != revision]


def swapped(a: int, b: int) -> Callable[[Entries], Entries]:
    def edit(entries: Entries) -> Entries:
        data = {e.revision: e.data for e in entries}
        swap = {a: data[b], b: data[a]}
        return [JournalEntry(e.revision, swap.get(e.revision, e.data)) for e in entries]

    return edit


def rewritten(revision: int, change: Callable[[bytes], bytes]) -> Callable[[Entries], Entries]:
    return lambda entries: [
        JournalEntry(e.revision, change(e.data) if e.revision == revision else e.data)
        for e in entries
    ]


def altered_snapshot(snapshot: ThreadSnapshot) -> ThreadSnapshot:
    if snapshot.revision != 30:
        return snapshot
    return ThreadSnapshot(30, {**snapshot.values, Count.key: b"999"})  # still decodes


def emptied_snapshot(snapshot: ThreadSnapshot) -> ThreadSnapshot:
    return ThreadSnapshot(30, {}) if snapshot.revision == 30 else snapshot


def damaged_seal(snapshot: ThreadSnapshot) -> ThreadSnapshot:
    if snapshot.revision != 30:
        return snapshot
    return ThreadSnapshot(30, {**snapshot.values, SEAL: b"not a seal"})


TAMPERINGS: dict[str, tuple[dict[str, object], int, str]] = {
    # name: (how `Tampered` changes what the store hands back, the first untrusted revision,
    # what the error says went wrong: all of it, or how it begins when it quotes the decoder)
    "a record deleted": ({"records": without(33)}, 33, "the record of revision 33 is missing"),
    "two records swapped": (
        {"records": swapped(33, 34)},
        33,
        "the store holds the record of revision 34 as revision 33",
    ),
    "a byte changed": (
        {"records": rewritten(33, forged_body)},
        33,
        "the record of revision 33 was changed: the record after it names another",
    ),
    "a record forged whole": (
        {"records": rewritten(33, lambda data: forged_whole(data, 33))},
        33,
        "the record of revision 33 was changed: the record after it names another",
    ),
    "a record's link changed": (
        {"records": rewritten(33, relinked)},
        33,
        "the record of revision 33 was changed or put there by hand: it does not follow the "
        "one before it",
    ),
    "a record cut short": (
        {"records": rewritten(33, cut_short)},
        33,
        "the record of revision 33 does not decode (",
    ),
    "a record cut to a few bytes": (
        {"records": rewritten(33, cut_to_a_few_bytes)},
        33,
        "the record of revision 33 does not decode (",
    ),
    "a record stored as before the chain": (
        {"records": rewritten(33, before_the_chain)},
        33,
        "the record of revision 33 was changed or put there by hand: it does not follow the "
        "one before it",
    ),
    "the newest record changed": (
        {"records": rewritten(HEAD, forged_body)},
        HEAD,
        f"the head's seal does not name the record of revision {HEAD}: one of them was changed",
    ),
    "the newest record's link changed": (
        {"records": rewritten(HEAD, relinked)},
        HEAD,
        f"the record of revision {HEAD} was changed or put there by hand: it does not follow "
        f"the one before it",
    ),
    "the head raised": (
        {"head": lambda state: msgspec.structs.replace(state, revision=40)},
        36,
        "its head names revision 40, but the store holds no records of revisions 36 to 40 "
        "(deleted, or lost in a partial restore)",
    ),
    "the head lowered": (
        {"head": lambda state: msgspec.structs.replace(state, revision=HEAD - 1)},
        HEAD,
        f"the store holds a record of revision {HEAD} beyond its head (revision {HEAD - 1})",
    ),
    "the head's seal removed": (
        {"head": lambda state: msgspec.structs.replace(state, seal=None)},
        HEAD,
        "the head lost its seal: nothing vouches for the newest record",
    ),
    "the head's seal damaged": (
        {"head": lambda state: msgspec.structs.replace(state, seal=b"not a seal")},
        HEAD,
        "the head's seal does not decode (",
    ),
    "a snapshot altered": (
        {"snapshot": altered_snapshot},
        30,
        "the snapshot at revision 30 does not match its seal: it was changed",
    ),
    "a snapshot emptied": (
        {"snapshot": emptied_snapshot},
        30,
        "the snapshot at revision 30 lost its seal",
    ),
    "a snapshot's seal damaged": (
        {"snapshot": damaged_seal},
        30,
        "the seal of the snapshot at revision 30 is damaged",
    ),
}


def on_disk(path: Path, name: str) -> None:
    """The same tampering, done with sqlite3 to the file (thread "t")."""
    with sqlite3.connect(path) as raw:
        rows = dict(
            raw.execute("SELECT revision, record FROM thread_records WHERE thread_id = 't'")
        )

        def put(revision: int, data: bytes) -> None:
            raw.execute(
                "UPDATE thread_records SET record = ? WHERE thread_id = 't' AND revision = ?",
                (data, revision),
            )

        if name == "a record deleted":
            raw.execute("DELETE FROM thread_records WHERE thread_id = 't' AND revision = 33")
        elif name == "two records swapped":
            put(33, rows[34])
            put(34, rows[33])
        elif name == "a byte changed":
            put(33, forged_body(rows[33]))
        elif name == "a record forged whole":
            put(33, forged_whole(rows[33], 33))
        elif name == "a record's link changed":
            put(33, relinked(rows[33]))
        elif name == "a record cut short":
            put(33, cut_short(rows[33]))
        elif name == "a record cut to a few bytes":
            put(33, cut_to_a_few_bytes(rows[33]))
        elif name == "a record stored as before the chain":
            put(33, before_the_chain(rows[33]))
        elif name == "the newest record changed":
            put(HEAD, forged_body(rows[HEAD]))
        elif name == "the newest record's link changed":
            put(HEAD, relinked(rows[HEAD]))
        elif name.startswith("the head"):
            (blob,) = raw.execute(
                "SELECT state FROM thread_states WHERE thread_id = 't'"
            ).fetchone()
            head = msgspec.msgpack.decode(blob)
            if name == "the head raised":
                head["revision"] = 40
            elif name == "the head lowered":
                head["revision"] = HEAD - 1
            elif name == "the head's seal damaged":
                head["seal"] = b"not a seal"
            else:
                del head["seal"]
            raw.execute(
                "UPDATE thread_states SET state = ? WHERE thread_id = 't'",
                (msgspec.msgpack.encode(head),),
            )
    if name == "a snapshot altered":
        edit_snapshot(path, "t", 30, lambda values: values.update({Count.key: b"999"}))
    if name == "a snapshot emptied":
        edit_snapshot(path, "t", 30, lambda values: values.clear())
    if name == "a snapshot's seal damaged":
        edit_snapshot(path, "t", 30, lambda values: values.update({SEAL: b"not a seal"}))


async def write_thread(store: ThreadStore) -> None:
    kernel = Kernel(plugins(), thread_store=store, snapshot_every=10)
    commands = [StateCommand().update(Count, 1) for _ in range(HEAD)]
    assert await commit_all(kernel, "t", *commands, checkpoints=True) == HEAD
    assert (await kernel.verify("t")).ok


async def assert_refused(store: ThreadStore, first_untrusted: int, problem: str = "") -> None:
    kernel = Kernel(plugins(), thread_store=store)
    with pytest.raises(JournalCorrupted) as refused:
        await kernel.start_run("t")
    error = refused.value
    assert (error.thread_id, error.revision) == ("t", first_untrusted)
    assert error.problem.startswith(problem) and f": {error.problem}." in str(error)
    assert "Restore the store from a backup" in str(error)
    # the way on: a fork from the last good revision, or (nothing before it) a fresh start
    assert ("fork" in str(error)) == (first_untrusted > 1)
    assert "migrate" not in str(error).lower()
    report = await kernel.verify("t")
    assert not report.ok
    assert report.first_divergence == first_untrusted, report.detail
    assert f"from revision {first_untrusted}" in report.detail
    # reading the head reads what a load reads: the same revision, never a forged state
    with pytest.raises(JournalCorrupted) as read:
        await Kernel(plugins(), thread_store=store).get_state("t")
    assert read.value.revision == first_untrusted


# -- the tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
async def test_every_tampering_of_what_a_store_hands_back_is_caught(
    thread_store: ThreadStore, tampering: str
) -> None:
    await write_thread(thread_store)
    edits, first_untrusted, problem = TAMPERINGS[tampering]
    await assert_refused(Tampered(thread_store, **edits), first_untrusted, problem)  # type: ignore[arg-type]
    if "snapshot" not in edits:  # history reads the records and the head, not snapshots
        reader = Kernel(plugins(), thread_store=Tampered(thread_store, **edits))  # type: ignore[arg-type]
        with pytest.raises(JournalCorrupted) as refused:
            await reader.history("t")
        assert refused.value.revision == first_untrusted
    untouched = Kernel(plugins(), thread_store=thread_store)
    assert (await untouched.verify("t")).ok
    assert await read(untouched, "t", Count) == HEAD


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
async def test_every_tampering_of_a_sqlite_file_is_caught(tmp_path: Path, tampering: str) -> None:
    path = tmp_path / "j.db"
    async with SqliteThreadStore(path) as store:
        await write_thread(store)
        kernel = Kernel(plugins(), thread_store=store)
        await commit_all(kernel, "untouched", StateCommand().update(Count, 1))
    on_disk(path, tampering)
    async with SqliteThreadStore(path) as store:
        await assert_refused(store, *TAMPERINGS[tampering][1:])
        kernel = Kernel(plugins(), thread_store=store)
        assert (await kernel.verify("untouched")).ok
        run = await kernel.start_run("untouched")
        assert run.snapshot.get(Count) == 1
        await run.abandon()


async def test_the_last_good_revision_forks_into_a_thread_that_loads_and_verifies(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    async with SqliteThreadStore(path) as store:
        await write_thread(store)
    on_disk(path, "a byte changed")
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store)
        with pytest.raises(JournalCorrupted) as refused:
            await kernel.start_run("t")
        assert refused.value.revision == 33
        assert "kernel.fork('t', 32, <new thread id>)" in str(refused.value)
        await kernel.fork("t", 32, "t-restored")
        assert (await kernel.verify("t-restored")).ok
        run = await kernel.start_run("t-restored")
        assert (run.revision, run.snapshot.get(Count)) == (32, 32)
        await run.submit(StateCommand().update(Count, 1))
        await run.finish()
        assert (await kernel.verify("t-restored")).ok


async def test_a_record_changed_before_the_newest_snapshot_is_named_by_verify(
    tmp_path: Path,
) -> None:
    """A load reads only the newest snapshot and the records after it; `verify` walks the
    whole held journal, so it finds a change a load never reads."""
    path = tmp_path / "j.db"
    async with SqliteThreadStore(path) as store:
        await write_thread(store)
    with sqlite3.connect(path) as raw:
        (data,) = raw.execute(
            "SELECT record FROM thread_records WHERE thread_id = 't' AND revision = 12"
        ).fetchone()
        raw.execute(
            "UPDATE thread_records SET record = ? WHERE thread_id = 't' AND revision = 12",
            (forged_whole(data, 12),),
        )
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store)
        report = await kernel.verify("t")
        assert (report.ok, report.first_divergence) == (False, 12)
        run = await kernel.start_run("t")  # from the snapshot at 30: what it reads is whole
        assert run.snapshot.get(Count) == HEAD
        await run.abandon()
        with pytest.raises(JournalCorrupted, match="revision 12"):
            await kernel.state_at("t", 15)  # replays 11..15 from the snapshot at 10


async def test_a_snapshot_that_lost_its_seal_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with SqliteThreadStore(path) as store:
        await write_thread(store)
    edit_snapshot(path, "t", 30, lambda values: values.pop(SEAL))
    async with SqliteThreadStore(path) as store:
        await assert_refused(store, 30, "the snapshot at revision 30 lost its seal")


def restarted(entries: Entries) -> Entries:
    """Record 1 made to follow some other record (as if copied from another thread), and
    record 2 made to follow it: only the start of the chain can tell."""
    data = {e.revision: e.data for e in entries}
    data[1] = b"\xff" * 16 + data[1][16:]
    data[2] = link_of(data[1]) + data[2][16:]
    return [JournalEntry(e.revision, data[e.revision]) for e in entries]


@pytest.mark.parametrize(
    "edit",
    [rewritten(1, before_the_chain), restarted],
    ids=["stored as before the chain", "following another record"],
)
async def test_the_first_record_of_a_thread_must_follow_the_start_of_the_chain(
    thread_store: ThreadStore, edit: Callable[[Entries], Entries]
) -> None:
    """A thread's first record names the start of the chain (no record before it); one that
    does not was changed or put there by hand, whatever the records after it say."""
    kernel = Kernel(plugins(), thread_store=thread_store)
    await commit_all(kernel, "t", *(StateCommand().update(Count, 1) for _ in range(3)))
    assert (await thread_store.load("t")).values == {}  # type: ignore[union-attr]  # no snapshot
    await assert_refused(
        Tampered(thread_store, records=edit),
        1,
        "the record of revision 1 was changed or put there by hand: it does not follow the one "
        "before it",
    )


async def test_a_snapshot_at_the_first_revision_that_lost_its_seal_is_refused(
    thread_store: ThreadStore,
) -> None:
    """The chain starts at revision 1, so a snapshot taken there carries a seal too."""
    kernel = Kernel(plugins(), thread_store=thread_store, snapshot_every=1)
    await commit_all(kernel, "t", StateCommand().update(Count, 1))
    stored = await thread_store.snapshot_at("t", 1)
    assert stored is not None and stored.revision == 1 and SEAL in stored.values

    def unsealed(snapshot: ThreadSnapshot) -> ThreadSnapshot:
        values = {name: data for name, data in snapshot.values.items() if name != SEAL}
        return ThreadSnapshot(snapshot.revision, values)

    await assert_refused(
        Tampered(thread_store, snapshot=unsealed), 1, "the snapshot at revision 1 lost its seal"
    )


async def test_a_snapshot_moved_to_another_revision_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with SqliteThreadStore(path) as store:
        await write_thread(store)
    with sqlite3.connect(path) as raw:  # the snapshot of 20 stands in for 30's
        (blob,) = raw.execute(
            "SELECT snapshot FROM thread_snapshots WHERE thread_id = 't' AND revision = 20"
        ).fetchone()
        raw.execute(
            "UPDATE thread_snapshots SET snapshot = ? WHERE thread_id = 't' AND revision = 30",
            (blob,),
        )
    async with SqliteThreadStore(path) as store:
        await assert_refused(store, 30)


async def test_journal_corrupted_is_a_state_error_that_teaches() -> None:
    error = JournalCorrupted("t", 33, "the record of revision 33 is missing")
    assert isinstance(error, StateError)
    assert str(error) == (
        "thread 't' is damaged: its stored journal cannot be trusted from revision 33: the "
        "record of revision 33 is missing. It was changed outside statekernel (a bad "
        "restore, a disk fault, a hand edit); nothing was loaded. Restore the store from a "
        "backup, or fork the thread from its last good revision: `await kernel.fork('t', "
        "32, <new thread id>)`; `statekernel verify DB --thread t` checks every record."
    )
    assert "start the thread afresh" in str(JournalCorrupted("t", 1, "x"))


async def test_a_thread_stored_before_the_chain_loads_and_is_chained_from_its_next_save(
    tmp_path: Path,
) -> None:
    """A thread written before the chain: records with their own 8-byte digest and a head
    without a seal. It loads; its next save starts the chain, so a record deleted after
    that is caught."""
    path = tmp_path / "old.db"
    async with SqliteThreadStore(path) as store:
        await write_thread(store)
    written_before_the_chain(path, "t")
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store)
        assert (await kernel.verify("t")).ok
        await commit_all(kernel, "t", *(StateCommand().update(Count, 1) for _ in range(3)))
        assert (await kernel.verify("t")).ok
        assert len(await kernel.history("t")) == HEAD + 3
    with sqlite3.connect(path) as raw:
        raw.execute("DELETE FROM thread_records WHERE thread_id = 't' AND revision = 37")
    async with SqliteThreadStore(path) as store:
        await assert_refused(store, 37)


async def test_memory_and_sqlite_seal_alike(thread_store: ThreadStore) -> None:
    """Every backend keeps the kernel's seal with the head and gives it back on load."""
    await write_thread(thread_store)
    state = await thread_store.load("t")
    assert state is not None and state.seal is not None
    snapshot = await thread_store.snapshot_at("t", 30)
    assert snapshot is not None and "statekernel.seal" in snapshot.values
    kernel = Kernel(plugins(), thread_store=thread_store)
    await commit_all(kernel, "t", StateCommand().update(Mood, "fine"))
    later = await thread_store.load("t")
    assert later is not None and later.seal not in (None, state.seal)


async def test_a_forged_newest_record_cannot_be_laundered_through_a_fork(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with SqliteThreadStore(path) as store:
        await write_thread(store)
    on_disk(path, "the newest record changed")
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store)
        with pytest.raises(JournalCorrupted, match=f"revision {HEAD}"):
            await kernel.fork("t", HEAD, "laundered")
        assert await store.load("laundered") is None
        await kernel.fork("t", HEAD - 1, "good")  # the record after it vouches for it
        assert (await kernel.verify("good")).ok


async def test_time_travel_refuses_an_altered_snapshot_a_vector_extends(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    await write_referring(path, "t")  # snapshots at 1..4, each extending the one before
    edit_snapshot(path, "t", 1, lambda values: values.update({Log.key: b'["FORGED"]'}))
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(referring_keys(), thread_store=store)
        with pytest.raises(JournalCorrupted, match="revision 1"):
            await kernel.state_at("t", 3)


async def test_a_snapshot_of_another_thread_does_not_pass_for_this_ones(tmp_path: Path) -> None:
    """Two threads with the same values: thread b's snapshot at 1, which a's snapshot at 4
    extends (a Vector reference), swapped in for a's. Its seal names b."""
    path = tmp_path / "v.db"
    await write_referring(path, "a", "b")
    with sqlite3.connect(path) as raw:
        (blob,) = raw.execute(
            "SELECT snapshot FROM thread_snapshots WHERE thread_id = 'b' AND revision = 1"
        ).fetchone()
        raw.execute(
            "UPDATE thread_snapshots SET snapshot = ? WHERE thread_id = 'a' AND revision = 1",
            (blob,),
        )
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(referring_keys(), thread_store=store)
        with pytest.raises(JournalCorrupted, match="revision 1"):
            await kernel.start_run("a")
        run = await kernel.start_run("b")  # b is untouched
        await run.abandon()


class SavedMeanwhile(Tampered):
    """The store as another process sees it while this one reads: the first time records
    are read, another kernel saves a commit to thread "t" just before."""

    def __init__(self, store: ThreadStore) -> None:
        super().__init__(store)
        self.pending = True

    async def head(self, thread_id: str) -> ThreadHead | None:
        assert isinstance(self.store, SupportsHead)
        return await self.store.head(thread_id)

    async def records(
        self, thread_id: str, *, since: int = 0, until: int | None = None, limit: int | None = None
    ) -> builtins.list[JournalEntry]:
        if self.pending:
            self.pending = False
            await commit_all(
                Kernel(plugins(), thread_store=self.store), "t", StateCommand().update(Count, 1)
            )
        return await self.store.records(thread_id, since=since, until=until, limit=limit)


@pytest.mark.parametrize("read_with", ["verify", "history", "get_state"])
async def test_a_save_between_two_reads_is_not_taken_for_damage(
    tmp_path: Path, read_with: str
) -> None:
    """A reader that reads the head, then the records, meets a record past the head it read
    when another process saved in between: that is a save, not damage, and it is told
    apart by reading the head again."""
    async with SqliteThreadStore(tmp_path / "j.db") as store:
        await write_thread(store)
        kernel = Kernel(plugins(), thread_store=SavedMeanwhile(store))
        if read_with == "verify":
            report = await kernel.verify("t")
            assert (report.ok, report.revision) == (True, HEAD), report.detail
        elif read_with == "history":
            assert [r.revision for r in await kernel.history("t")][-1] == HEAD + 1
        else:
            assert (await kernel.get_state("t")).get(Count) == HEAD
        assert (await Kernel(plugins(), thread_store=store).verify("t")).ok
