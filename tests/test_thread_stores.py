"""The ThreadStore contract, held by both backends.

A journal of records appended in order, snapshots, a load that is the newest snapshot plus
the records after it, compare-and-set on the write position, pruning that keeps what a load
needs, and a file that says which schema it holds (and migrates one saved before the
journal)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pytest
from journal_samples import Mood
from samples import Keys, commit_all

from statekernel import (
    DecodeFailed,
    Kernel,
    RevisionConflict,
    StateCommand,
    StoreError,
    ThreadStore,
)
from statekernel.lowlevel import JournalEntry, ThreadSave, ThreadSnapshot, ThreadState
from statekernel.stores import (
    MemoryThreadStore,
    PostgresThreadStore,
    SqliteProfileStore,
    SqliteThreadStore,
)


def entries(first: int, last: int) -> tuple[JournalEntry, ...]:
    return tuple(JournalEntry(r, f"record {r}".encode()) for r in range(first, last + 1))


FULL = ThreadSave(
    revision=3,
    records=entries(1, 3),
    snapshot={"notes": b'["a","b"]', "mood": b'"calm"', "blob": bytes(range(256))},
    runs=2,
    run_values={"step": b"3"},
    suspended=b'{"pending":["call-1"]}',
)


def test_both_backends_implement_the_protocol() -> None:
    assert isinstance(MemoryThreadStore(), ThreadStore)
    assert isinstance(SqliteThreadStore(":memory:"), ThreadStore)


async def test_a_save_loads_back_as_its_snapshot_and_head(thread_store: ThreadStore) -> None:
    assert await thread_store.load("t1") is None
    await thread_store.save("t1", FULL, expected_position=0)
    assert await thread_store.load("t1") == ThreadState(
        revision=3,
        values=dict(FULL.snapshot or {}),
        snapshot_revision=3,
        records=(),
        runs=2,
        run_values={"step": b"3"},
        suspended=b'{"pending":["call-1"]}',
        position=1,
    )
    assert await thread_store.load("t2") is None


async def test_a_load_is_the_newest_snapshot_plus_the_records_after_it(
    thread_store: ThreadStore,
) -> None:
    await thread_store.save("t", ThreadSave(revision=2, records=entries(1, 2)), expected_position=0)
    loaded = await thread_store.load("t")
    assert loaded is not None
    assert (loaded.values, loaded.snapshot_revision, loaded.records) == ({}, 0, entries(1, 2))
    snap = ThreadSave(revision=4, records=entries(3, 4), snapshot={"k": b"4"})
    await thread_store.save("t", snap, expected_position=1)
    await thread_store.save("t", ThreadSave(revision=6, records=entries(5, 6)), expected_position=2)
    loaded = await thread_store.load("t")
    assert loaded is not None
    assert (loaded.revision, loaded.values, loaded.snapshot_revision) == (6, {"k": b"4"}, 4)
    assert loaded.records == entries(5, 6)
    # Everything stays readable as history, and each snapshot by revision.
    assert await thread_store.records("t") == list(entries(1, 6))
    assert await thread_store.records("t", since=2, until=4) == list(entries(3, 4))
    assert await thread_store.records("t", since=1, limit=2) == list(entries(2, 3))
    assert await thread_store.snapshot_at("t", 3) is None
    assert await thread_store.snapshot_at("t", 5) == ThreadSnapshot(4, {"k": b"4"})
    assert (
        await thread_store.records("nobody") == []
        and await thread_store.snapshot_at("nobody", 1) is None
    )


async def test_records_must_continue_the_journal_one_revision_at_a_time(
    thread_store: ThreadStore,
) -> None:
    await thread_store.save("t", ThreadSave(revision=2, records=entries(1, 2)), expected_position=0)
    for bad in (
        ThreadSave(revision=4, records=entries(4, 4)),  # a gap
        ThreadSave(revision=2, records=entries(2, 2)),  # a revision twice
        ThreadSave(revision=5, records=entries(3, 4)),  # records end before the head
        ThreadSave(revision=3),  # a head moved without records
    ):
        with pytest.raises(StoreError, match=r"thread 't'.*revision"):
            await thread_store.save("t", bad, expected_position=1)
    loaded = await thread_store.load("t")
    assert loaded is not None and loaded.position == 1 and loaded.records == entries(1, 2)


async def test_a_refused_save_names_the_thread_and_says_what_is_wrong(
    thread_store: ThreadStore,
) -> None:
    await thread_store.save("t", ThreadSave(revision=2, records=entries(1, 2)), expected_position=0)
    snapshot = {"k": b"1"}
    refused = [  # (thread, save, expected position, the problem as the error states it)
        (
            "t",
            ThreadSave(revision=3, records=entries(3, 3), snapshot=snapshot, snapshot_revision=1),
            1,
            "a save to revision 3 may carry an older snapshot (revision 1) only when it creates "
            "the thread",
        ),
        (
            "new",
            ThreadSave(revision=3, records=entries(1, 3), snapshot=snapshot, snapshot_revision=4),
            0,
            "a save to revision 3 may carry an older snapshot (revision 4) only when it creates "
            "the thread",
        ),
        (
            "new",
            ThreadSave(revision=4, records=entries(3, 4)),  # a new thread starts at revision 1
            0,
            "a save's records must follow revision 0 one by one, but one has revision 3",
        ),
        (
            "new",
            ThreadSave(revision=4, records=entries(3, 4), snapshot=snapshot, snapshot_revision=1),
            0,
            "its records start at revision 3, after its snapshot at 1: a gap nothing could rebuild",
        ),
        (
            "t",
            ThreadSave(revision=5, records=entries(3, 4)),
            1,
            "a save to revision 5 must carry the records from revision 3, but its records end at 4",
        ),
    ]
    for thread, bad, position, problem in refused:
        with pytest.raises(StoreError) as caught:
            await thread_store.save(thread, bad, expected_position=position)
        error = caught.value
        assert (error.operation, error.key) == ("thread save", thread)
        assert str(error) == (
            f"store thread save failed (key {thread!r}): ValueError: thread {thread!r}: {problem}"
        )
    loaded = await thread_store.load("t")
    assert loaded is not None and loaded.records == entries(1, 2) and loaded.position == 1
    assert await thread_store.load("new") is None


async def test_every_save_moves_the_write_position_by_one(thread_store: ThreadStore) -> None:
    await thread_store.save(
        "t1", ThreadSave(revision=2, records=entries(1, 2)), expected_position=0
    )
    await thread_store.save("t1", ThreadSave(revision=2), expected_position=1)
    await thread_store.save("t1", ThreadSave(revision=2, runs=1), expected_position=2)
    loaded = await thread_store.load("t1")
    assert loaded is not None
    assert (loaded.revision, loaded.runs, loaded.position) == (2, 1, 3)


async def test_a_stale_saver_gets_revision_conflict_and_changes_nothing(
    thread_store: ThreadStore,
) -> None:
    await thread_store.save(
        "t1", ThreadSave(revision=1, records=entries(1, 1)), expected_position=0
    )
    with pytest.raises(RevisionConflict, match=r"thread save expected the thread's write") as e:
        await thread_store.save(
            "t1", ThreadSave(revision=2, records=entries(2, 2)), expected_position=2
        )
    assert (e.value.expected, e.value.actual) == (2, 1)
    with pytest.raises(RevisionConflict):
        await thread_store.save("t1", ThreadSave(revision=1), expected_position=0)
    loaded = await thread_store.load("t1")
    assert loaded is not None and loaded.records == entries(1, 1) and loaded.position == 1
    assert await thread_store.records("t1") == list(entries(1, 1))


async def test_two_savers_that_loaded_the_same_position_cannot_both_win(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    async with SqliteThreadStore(path) as first, SqliteThreadStore(path) as second:
        await first.save("t", ThreadSave(revision=1, records=entries(1, 1)), expected_position=0)
        outcomes = await asyncio.gather(
            first.save("t", ThreadSave(revision=2, records=entries(2, 2)), expected_position=1),
            second.save("t", ThreadSave(revision=2, records=entries(2, 2)), expected_position=1),
            return_exceptions=True,
        )
        assert sum(isinstance(o, RevisionConflict) for o in outcomes) == 1
        loaded = await first.load("t")
        assert loaded is not None and loaded.revision == 2 and loaded.position == 2


async def test_a_failed_save_in_a_shared_transaction_leaves_no_half_written_rows(
    tmp_path: Path,
) -> None:
    """Concurrent saves share one SQLite transaction: one that fails half-way (here its
    records clash with rows already there) must take back what it wrote, and only it."""
    path = tmp_path / "shared.db"
    async with SqliteThreadStore(path) as store:
        await store.save("a", ThreadSave(revision=1, records=entries(1, 1)), expected_position=0)
    with sqlite3.connect(path) as raw:  # a row the next save of "a" will collide with
        raw.execute("INSERT INTO thread_records VALUES ('a', 3, x'00')")
    async with SqliteThreadStore(path) as store:
        outcomes = await asyncio.gather(
            store.save("a", ThreadSave(revision=3, records=entries(2, 3)), expected_position=1),
            store.save("b", ThreadSave(revision=1, records=entries(1, 1)), expected_position=0),
            return_exceptions=True,
        )
        assert isinstance(outcomes[0], StoreError) and outcomes[1] is None
        a = await store.load("a")
        assert a is not None and (a.revision, a.position) == (1, 1)
        assert [e.revision for e in await store.records("a")] == [1, 3]  # 2 was taken back
        assert await store.records("b") == list(entries(1, 1))


async def test_a_head_saved_without_a_snapshot_keeps_the_older_one(
    thread_store: ThreadStore,
) -> None:
    await thread_store.save("t1", FULL, expected_position=0)
    await thread_store.save("t1", ThreadSave(revision=3), expected_position=1)
    loaded = await thread_store.load("t1")
    assert loaded is not None
    assert loaded.values == FULL.snapshot and loaded.suspended is None and loaded.run_values is None


async def test_saves_that_carry_no_commit_still_cannot_both_land(thread_store: ThreadStore) -> None:
    """Two savers at the same revision: the second one loaded the same position, so it
    loses even though neither committed anything (a suspension, a run that only ended)."""
    await thread_store.save("t1", ThreadSave(revision=0), expected_position=0)
    await thread_store.save("t1", ThreadSave(revision=0, suspended=b"run-2"), expected_position=1)
    with pytest.raises(RevisionConflict):
        await thread_store.save("t1", ThreadSave(revision=0, runs=3), expected_position=1)
    loaded = await thread_store.load("t1")
    assert loaded is not None and loaded.suspended == b"run-2"


async def test_prune_keeps_the_newest_snapshot_at_or_before_the_cut_and_all_after(
    thread_store: ThreadStore,
) -> None:
    await thread_store.save("t", ThreadSave(revision=3, records=entries(1, 3)), expected_position=0)
    await thread_store.save(
        "t",
        ThreadSave(revision=5, records=entries(4, 5), snapshot={"k": b"5"}),
        expected_position=1,
    )
    await thread_store.save(
        "t",
        ThreadSave(revision=8, records=entries(6, 8), snapshot={"k": b"8"}),
        expected_position=2,
    )
    await thread_store.save("t", ThreadSave(revision=9, records=entries(9, 9)), expected_position=3)
    before = await thread_store.load("t")
    await thread_store.prune("t", before=4)  # no snapshot at or before 4: nothing can go
    assert await thread_store.records("t") == list(entries(1, 9))
    await thread_store.prune("t", before=7)  # keeps the snapshot at 5 and everything after it
    assert await thread_store.records("t") == list(entries(6, 9))
    assert await thread_store.snapshot_at("t", 6) == ThreadSnapshot(5, {"k": b"5"})
    await thread_store.prune("t", before=100)
    assert await thread_store.records("t") == list(entries(9, 9))
    assert await thread_store.snapshot_at("t", 7) is None
    assert await thread_store.load("t") == before  # a load never notices
    await thread_store.prune("nobody", before=3)
    with pytest.raises(TypeError, match=r"before"):
        await thread_store.prune("t", before="3")  # type: ignore[arg-type]


async def test_delete_forgets_the_thread_and_is_a_no_op_when_absent(
    thread_store: ThreadStore,
) -> None:
    await thread_store.save("t1", FULL, expected_position=0)
    await thread_store.delete("t1")
    await thread_store.delete("t1")
    assert await thread_store.load("t1") is None
    assert (
        await thread_store.records("t1") == [] and await thread_store.snapshot_at("t1", 3) is None
    )
    await thread_store.save(
        "t1", ThreadSave(revision=1, records=entries(1, 1)), expected_position=0
    )


async def test_bad_arguments_are_refused(thread_store: ThreadStore) -> None:
    with pytest.raises(TypeError, match=r"ThreadSave"):
        await thread_store.save("t1", {"revision": 1}, expected_position=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"expected_position"):
        await thread_store.save("t1", ThreadSave(revision=0), expected_position=-1)
    assert await thread_store.load("t1") is None


async def test_the_file_records_its_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "schema.db"
    async with SqliteThreadStore(path) as made:
        await made.save("t", ThreadSave(revision=0), expected_position=0)
    with sqlite3.connect(path) as raw:
        rows = raw.execute("SELECT component, version FROM statekernel_schema").fetchall()
        assert rows == [("thread_store", 4)]
        raw.execute("UPDATE statekernel_schema SET version = 5")
    async with SqliteThreadStore(path) as made:
        with pytest.raises(StoreError, match=r"thread_store schema version 5.*Upgrade"):
            await made.load("t")


async def test_the_revision_column_holds_the_revision_and_a_version_2_file_migrates(
    tmp_path: Path,
) -> None:
    path = tmp_path / "threads.db"
    async with SqliteThreadStore(path) as store:
        await store.save("t", ThreadSave(revision=3, records=_entries(1, 3)), expected_position=0)
        await store.save("t", ThreadSave(revision=5, records=_entries(4, 5)), expected_position=1)
        await store.save("t", ThreadSave(revision=5), expected_position=2)  # a run ending
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT revision, position FROM thread_states").fetchall() == [(5, 3)]
        # As version 2 wrote it: the position in `revision`, no `position` column.
        raw.executescript(
            """
            CREATE TABLE old AS SELECT thread_id, position AS revision, state, saved_at
                FROM thread_states;
            DROP TABLE thread_states;
            CREATE TABLE thread_states (thread_id TEXT PRIMARY KEY, revision INTEGER NOT NULL,
                state BLOB NOT NULL, saved_at REAL NOT NULL) WITHOUT ROWID;
            INSERT INTO thread_states SELECT * FROM old;
            DROP TABLE old;
            DROP TABLE thread_events;
            UPDATE statekernel_schema SET version = 2;
            """
        )
    async with SqliteThreadStore(path) as store:
        loaded = await store.load("t")
        assert loaded is not None and (loaded.revision, loaded.position) == (5, 3)
        await store.save("t", ThreadSave(revision=6, records=_entries(6, 6)), expected_position=3)
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT revision, position FROM thread_states").fetchall() == [(6, 4)]
        assert raw.execute("SELECT version FROM statekernel_schema").fetchall() == [(4,)]


async def test_a_version_3_file_gains_the_run_events_table(tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    async with SqliteThreadStore(path) as store:
        await store.save("t", ThreadSave(revision=2, records=_entries(1, 2)), expected_position=0)
    with sqlite3.connect(path) as raw:  # as version 3 wrote it: no run events
        raw.executescript("DROP TABLE thread_events; UPDATE statekernel_schema SET version = 3;")
    async with SqliteThreadStore(path, read_only=True) as reader:  # read as it is
        loaded = await reader.load("t")
        assert loaded is not None and loaded.revision == 2
        assert await reader.run_events("t") == []
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT version FROM statekernel_schema").fetchall() == [(3,)]
    async with SqliteThreadStore(path) as store:
        assert await store.run_events("t") == []
        save = ThreadSave(revision=3, records=_entries(3, 3), events=b"events")
        await store.save("t", save, expected_position=1)
        assert await store.run_events("t") == [b"events"]
        loaded = await store.load("t")
        assert loaded is not None and loaded.revision == 3
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT version FROM statekernel_schema").fetchall() == [(4,)]


async def test_read_only_refuses_a_file_it_would_have_to_migrate(tmp_path: Path) -> None:
    from statekernel import StoreNotOpened

    path = tmp_path / "threads.db"
    async with SqliteThreadStore(path) as store:
        await store.save("t", ThreadSave(revision=1, records=_entries(1, 1)), expected_position=0)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE statekernel_schema SET version = 2")
    async with SqliteThreadStore(path, read_only=True) as reader:
        with pytest.raises(StoreNotOpened, match="open it once for writing to migrate"):
            await reader.load("t")
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT version FROM statekernel_schema").fetchall() == [(2,)]


async def test_a_version_1_postgresql_database_gains_the_run_events_table(
    postgres_dsn: str,
) -> None:
    import asyncpg

    async with PostgresThreadStore(postgres_dsn) as store:
        await store.save("t", ThreadSave(revision=2, records=_entries(1, 2)), expected_position=0)
    conn = await asyncpg.connect(postgres_dsn)
    try:  # as version 1 made it: no run events
        await conn.execute("DROP TABLE statekernel_thread_events")
        await conn.execute("UPDATE statekernel_schema SET version = 1")
    finally:
        await conn.close()
    async with PostgresThreadStore(postgres_dsn, read_only=True) as reader:  # read as it is
        loaded = await reader.load("t")
        assert loaded is not None and loaded.revision == 2
        assert await reader.run_events("t") == []
    async with PostgresThreadStore(postgres_dsn) as store:
        save = ThreadSave(revision=3, records=_entries(3, 3), events=b"events")
        await store.save("t", save, expected_position=1)
        assert await store.run_events("t") == [b"events"]


def _entries(first: int, last: int) -> tuple[JournalEntry, ...]:
    return tuple(JournalEntry(r, f"r{r}".encode()) for r in range(first, last + 1))


_VERSION_1 = """
CREATE TABLE statekernel_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL);
INSERT INTO statekernel_schema VALUES ('thread_store', 1);
CREATE TABLE thread_states (
    thread_id TEXT PRIMARY KEY, revision INTEGER NOT NULL, state BLOB NOT NULL,
    saved_at REAL NOT NULL
) WITHOUT ROWID;
"""


class _OldState(msgspec.Struct):
    """A thread state document as version 1 of the file wrote it."""

    revision: int
    values: dict[str, bytes]
    run_values: dict[str, bytes] | None = None
    suspended: bytes | None = None


async def test_a_file_saved_before_the_journal_migrates_and_its_threads_load(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as raw:
        raw.executescript(_VERSION_1)
        old = msgspec.msgpack.encode(_OldState(7, {"mood": b'"calm"'}))
        raw.execute("INSERT INTO thread_states VALUES ('t', 7, ?, 0)", (old,))
    async with SqliteThreadStore(path) as store:
        loaded = await store.load("t")
        assert loaded is not None
        assert (loaded.revision, loaded.values, loaded.snapshot_revision) == (
            7,
            {"mood": b'"calm"'},
            7,
        )
        assert loaded.position == 7 and loaded.records == ()
        assert await store.snapshot_at("t", 7) == ThreadSnapshot(7, {"mood": b'"calm"'})
        # Its first save moves the old values into a snapshot of their own.
        save = ThreadSave(revision=8, records=(JournalEntry(8, b"r8"),))
        await store.save("t", save, expected_position=7)
        loaded = await store.load("t")
        assert loaded is not None and loaded.values == {"mood": b'"calm"'}
        assert loaded.snapshot_revision == 7 and loaded.records == (JournalEntry(8, b"r8"),)
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT version FROM statekernel_schema").fetchall() == [(4,)]
        # The position carried over from the version 1 row, the revision from its head.
        assert raw.execute("SELECT revision, position FROM thread_states").fetchall() == [(8, 8)]


async def test_profile_and_thread_stores_can_share_one_file(tmp_path: Path) -> None:
    from statekernel.stores import SqliteProfileStore

    path = tmp_path / "both.db"
    async with SqliteThreadStore(path) as threads, SqliteProfileStore(path) as profiles:
        await threads.save("t", FULL, expected_position=0)
        await profiles.set("ns", "k", 1)
        loaded = await threads.load("t")
        assert loaded is not None and loaded.values == FULL.snapshot
    with sqlite3.connect(path) as raw:
        components = raw.execute("SELECT component FROM statekernel_schema ORDER BY 1").fetchall()
    assert components == [("profile_store",), ("thread_store",)]


async def test_a_head_or_snapshot_that_no_longer_decodes_names_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    async with SqliteThreadStore(path) as made:
        for thread in ("bad", "bad snapshot", "good"):
            await made.save(thread, FULL, expected_position=0)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE thread_states SET state = x'c1c1' WHERE thread_id = 'bad'")
        raw.execute("UPDATE thread_snapshots SET snapshot = x'c1' WHERE thread_id = 'bad snapshot'")
    async with SqliteThreadStore(path) as made:
        with pytest.raises(DecodeFailed, match=r"'bad'"):
            await made.load("bad")
        with pytest.raises(DecodeFailed, match=r"snapshot at revision 3.*'bad snapshot'") as e:
            await made.load("bad snapshot")
        assert isinstance(e.value.cause, msgspec.DecodeError)  # what msgspec said, kept
        good = await made.load("good")
        assert good is not None and good.values == FULL.snapshot


@pytest.mark.slow
def test_a_saved_thread_survives_into_a_new_process(tmp_path: Path) -> None:
    path = tmp_path / "handover.db"
    writer = textwrap.dedent(
        f"""
        import asyncio
        from statekernel.lowlevel import JournalEntry, ThreadSave
        from statekernel.stores import SqliteThreadStore

        async def main():
            async with SqliteThreadStore({str(path)!r}) as store:
                save = ThreadSave(
                    revision=1, records=(JournalEntry(1, b"r1"),), snapshot={{"k": b'"child"'}}
                )
                await store.save("t-handover", save, expected_position=0)

        asyncio.run(main())
        """
    )
    subprocess.run([sys.executable, "-c", writer], check=True, timeout=60)

    async def read_back() -> ThreadState | None:
        async with SqliteThreadStore(path) as store:
            loaded = await store.load("t-handover")
            await store.save("t-handover", ThreadSave(revision=1), expected_position=1)
            return loaded

    loaded = asyncio.run(read_back())
    assert loaded == ThreadState(
        revision=1, values={"k": b'"child"'}, snapshot_revision=1, position=1
    )


async def test_threads_lists_the_held_ids_sorted_by_literal_prefix(
    thread_store: ThreadStore,
) -> None:
    kernel = Kernel([Keys(Mood, id="mood")], thread_store=thread_store)
    for thread in ("b-2", "a_1", "b-1", "a%1", "c", "b"):
        await commit_all(kernel, thread, StateCommand().update(Mood, thread))
    assert await thread_store.threads() == ["a%1", "a_1", "b", "b-1", "b-2", "c"]
    assert await thread_store.threads(prefix="b-") == ["b-1", "b-2"]
    assert await thread_store.threads(prefix="a_") == ["a_1"]  # no wildcard
    assert await thread_store.threads(prefix="b", limit=2) == ["b", "b-1"]
    assert await thread_store.threads(prefix="zzz") == []
    await thread_store.delete("c")
    assert "c" not in await thread_store.threads()
    with pytest.raises(ValueError, match="limit"):
        await thread_store.threads(limit=-1)
    with pytest.raises(TypeError, match="prefix must be a string"):
        await thread_store.threads(prefix=1)  # type: ignore[arg-type]


async def test_threads_takes_a_limit_of_0_and_refuses_one_that_is_not_an_int(
    thread_store: ThreadStore,
) -> None:
    await thread_store.save("t", ThreadSave(revision=1, records=entries(1, 1)), expected_position=0)
    assert await thread_store.threads(limit=0) == []  # a count: none is a valid answer
    assert await thread_store.threads(limit=1) == ["t"]
    for limit in (True, "1", 1.0):  # a bool is no count, though Python's bools are ints
        with pytest.raises(ValueError, match=r"limit must be None or an int >= 0, got"):
            await thread_store.threads(limit=limit)  # type: ignore[arg-type]


async def test_every_thread_store_refuses_the_same_thread_ids_the_same_way(
    thread_store: ThreadStore,
) -> None:
    for reading in (
        thread_store.load,
        thread_store.records,
        thread_store.delete,
        lambda thread: thread_store.snapshot_at(thread, 1),
        lambda thread: thread_store.prune(thread, before=1),
    ):
        with pytest.raises(TypeError, match="thread_id must be a string"):
            await reading(123)
        with pytest.raises(ValueError, match="lone surrogate at index 1"):
            await reading("t\ud800")
    kernel = Kernel([Keys(Mood, id="mood")], thread_store=thread_store)
    with pytest.raises(ValueError, match="lone surrogate"):
        await kernel.start_run("t\ud800")  # refused before anything commits
    assert await thread_store.threads() == []


async def test_every_name_a_kernel_call_takes_is_refused_as_a_thread_id_is(
    thread_store_or_none: ThreadStore | None,
) -> None:
    """A name no store can keep (a lone surrogate; a NUL, which only some refuse) is
    refused at the call, the same way with every store and none, before anything is
    claimed or stored: the agent name, parent thread and run ids, a commit's source, a
    listing's prefix, the thread a prune or a read names."""
    kernel = Kernel([Keys(Mood, id="mood")], thread_store=thread_store_or_none)
    for bad in ("p\ud800", "p\x00"):
        for label in ("agent", "parent_thread_id", "parent_run_id"):
            with pytest.raises(ValueError, match=f"^{label} 'p"):
                await kernel.start_run("t", **{label: bad})
        with pytest.raises(ValueError, match="^prefix 'p"):
            await kernel.threads(prefix=bad)
        with pytest.raises(ValueError, match="^thread_id 'p"):
            await kernel.prune(bad, before=1)
        with pytest.raises(ValueError, match="^thread_id 'p"):
            await kernel.read_stored(bad, Mood)
    run = await kernel.start_run("t", parent_thread_id="parent")  # nothing was left claimed
    for bad in ("p\ud800", "p\x00"):
        with pytest.raises(ValueError, match="^source 'p"):
            await run.submit(StateCommand().update(Mood, "lost"), source=bad)
    await run.submit(StateCommand().update(Mood, "kept"), source="fine")
    await run.finish()
    assert [record.sources for record in await kernel.history("t")] == [("fine",)]
    assert (await kernel.get_state("t")).get(Mood) == "kept"


@pytest.mark.parametrize("kind", ["thread", "profile"])
async def test_sqlite_files_are_owner_only_in_folders_made_for_them(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "new" / "deeper" / "state.db"  # neither folder exists yet
    old_mask = os.umask(0o022)
    try:
        await _touch_store(kind, path)
    finally:
        os.umask(old_mask)
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        file = path.parent / name
        if file.exists():  # (-wal and -shm go once the last connection closes)
            assert stat.S_IMODE(file.stat().st_mode) == 0o600, name
    shared = tmp_path / "shared.db"
    await _touch_store(kind, shared, file_mode=0o640)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o640


async def test_a_file_holding_another_applications_tables_is_refused_untouched(
    tmp_path: Path,
) -> None:
    path = tmp_path / "theirs.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    for kind in ("thread", "profile"):
        with pytest.raises(StoreError, match=r"another application \(invoices\)"):
            await _touch_store(kind, path)
    with sqlite3.connect(path) as raw:
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}
    assert tables == {"invoices"}  # nothing was added
    await _touch_store("thread", path, other_tables="allow")
    await _touch_store("profile", path)  # statekernel's tables are there now: its file too
    with sqlite3.connect(path) as raw:
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}
    assert {"invoices", "thread_states", "profile_records", "statekernel_schema"} <= tables
    with pytest.raises(ValueError, match="other_tables must be"):
        SqliteThreadStore(path, other_tables="sure")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="file_mode"):
        SqliteProfileStore(path, file_mode=0o1777)


async def _touch_store(kind: str, path: Path, **options: Any) -> None:
    """Open a store of `kind` on `path` and use it once."""
    if kind == "thread":
        async with SqliteThreadStore(path, **options) as store:
            await store.threads()
    else:
        async with SqliteProfileStore(path, **options) as profiles:
            await profiles.get("ns", "k")
