"""What only the PostgreSQL stores do, against a real server: saves of many threads grouped
into one transaction (and each save's own outcome kept), the schema's version, and saves
that survive a server restart without landing twice or being lost."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import asyncpg
import pytest

from statekernel import DecodeFailed, RevisionConflict, StoreError
from statekernel.lowlevel import JournalEntry, ThreadSave
from statekernel.stores import PostgresProfileStore, PostgresThreadStore
from statekernel.testing.postgres import PostgresServer


def one_record(revision: int) -> ThreadSave:
    """A save of one record (the store keeps a record's bytes without reading them)."""
    return ThreadSave(revision=revision, records=(JournalEntry(revision, b"r%d" % revision),))


async def fetch(dsn: str, query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def transactions_of(dsn: str, threads: Sequence[str]) -> int:
    """How many transactions wrote the records of `threads` (rows one transaction inserted
    share its id, `xmin`)."""
    rows = await fetch(
        dsn,
        "SELECT count(DISTINCT xmin::text) FROM statekernel_thread_records "
        "WHERE thread_id = ANY($1::text[])",
        list(threads),
    )
    return int(rows[0][0])


async def test_saves_of_many_threads_at_once_land_whole_in_a_few_transactions(
    postgres_dsn: str,
) -> None:
    threads = [f"t{n:03d}" for n in range(100)]
    async with PostgresThreadStore(postgres_dsn, pool_size=1) as store:

        async def five_saves(thread_id: str) -> None:
            for revision in range(1, 6):
                await store.save(thread_id, one_record(revision), expected_position=revision - 1)

        await asyncio.gather(*(five_saves(thread_id) for thread_id in threads))
        for thread_id in threads:
            state = await store.load(thread_id)
            assert state is not None
            assert (state.position, state.revision) == (5, 5)
            assert [(e.revision, e.data) for e in state.records] == [
                (r, b"r%d" % r) for r in range(1, 6)
            ]
    # 500 saves from 100 tasks through one slot: batches, not one transaction per save.
    assert await transactions_of(postgres_dsn, threads) <= 100


async def test_a_stale_save_in_a_batch_fails_alone_and_the_others_land(
    postgres_dsn: str,
) -> None:
    async with PostgresThreadStore(postgres_dsn) as other:
        await other.save("taken", one_record(1), expected_position=0)
    threads = [f"t{n:02d}" for n in range(20)]
    async with PostgresThreadStore(postgres_dsn, pool_size=1) as store:
        outcomes = await asyncio.gather(
            *(store.save(t, one_record(1), expected_position=0) for t in threads),
            store.save("taken", one_record(1), expected_position=0),
            return_exceptions=True,
        )
        assert outcomes[:-1] == [None] * len(threads)
        assert isinstance(outcomes[-1], RevisionConflict)
        assert outcomes[-1].position and outcomes[-1].actual == 1
        for thread_id in threads:
            state = await store.load(thread_id)
            assert state is not None and state.revision == 1
    # The first save leaves alone (the slot was free); the other 19 and the stale one wait
    # for it and leave together.
    assert await transactions_of(postgres_dsn, threads) == 2


async def test_a_batch_the_server_refuses_is_sent_save_by_save(postgres_dsn: str) -> None:
    async with PostgresThreadStore(postgres_dsn) as store:
        await store.threads()  # the tables
    # A stray record where "bad"'s first save will write (left by hand, say): its insert
    # breaks the records' primary key, which the server checks, not the store.
    await fetch(
        postgres_dsn,
        "INSERT INTO statekernel_thread_records (thread_id, revision, record) "
        "VALUES ('bad', 1, 'stray')",
    )
    threads = [f"t{n:02d}" for n in range(10)]
    async with PostgresThreadStore(postgres_dsn, pool_size=1) as store:
        outcomes = await asyncio.gather(
            store.save("first", one_record(1), expected_position=0),
            store.save("bad", one_record(1), expected_position=0),
            *(store.save(t, one_record(1), expected_position=0) for t in threads),
            return_exceptions=True,
        )
        assert outcomes[0] is None and outcomes[2:] == [None] * len(threads)
        assert isinstance(outcomes[1], StoreError)
        assert "'bad'" in str(outcomes[1]) and "duplicate key" in str(outcomes[1])
        assert await store.load("bad") is None  # nothing of the refused save landed
        assert sorted(await store.threads()) == sorted(["first", *threads])


async def rows_transactions(dsn: str, namespace: str) -> int:
    rows = await fetch(
        dsn,
        "SELECT count(DISTINCT xmin::text) FROM statekernel_profile_entries WHERE namespace = $1",
        namespace,
    )
    return int(rows[0][0])


class TestProfileGroupCommit:
    async def test_concurrent_sets_of_many_entries_land_in_a_few_transactions(
        self, postgres_dsn: str
    ) -> None:
        async with PostgresProfileStore(postgres_dsn, pool_size=1) as store:
            written = await asyncio.gather(
                *(store.set("ns", f"k{n:03d}", {"n": n}) for n in range(200))
            )
            assert [(e.key, e.value, e.version) for e in written] == [
                (f"k{n:03d}", {"n": n}, 1) for n in range(200)
            ]
            listed = await store.list("ns")
            assert [(e.key, e.value) for e in listed] == [
                (f"k{n:03d}", {"n": n}) for n in range(200)
            ]
        assert await rows_transactions(postgres_dsn, "ns") <= 20

    async def test_concurrent_sets_of_one_entry_land_in_call_order(self, postgres_dsn: str) -> None:
        async with PostgresProfileStore(postgres_dsn, pool_size=1) as store:
            written = await asyncio.gather(
                *(store.set("ns", "hot", n) for n in range(30)),
                *(store.set("ns", f"cold{n}", n) for n in range(30)),
            )
            assert [e.version for e in written[:30]] == list(range(1, 31))
            hot = await store.get("ns", "hot")
            assert hot is not None and (hot.value, hot.version) == (29, 30)

    async def test_concurrent_gets_each_see_their_own_entry_and_a_bad_row_fails_alone(
        self, postgres_dsn: str
    ) -> None:
        async with PostgresProfileStore(postgres_dsn, pool_size=1) as store:
            for n in range(20):
                await store.set("ns", f"k{n}", n)
            await fetch(
                postgres_dsn,
                "UPDATE statekernel_profile_entries SET value = 'not json' WHERE key = 'k7'",
            )
            keys = [f"k{n}" for n in range(20)] + ["k3", "k3", "missing"]
            got = await asyncio.gather(
                *(store.get("ns", key) for key in keys), return_exceptions=True
            )
        assert isinstance(got[7], DecodeFailed) and "'k7'" in str(got[7])
        values = [None if isinstance(e, BaseException) or e is None else e.value for e in got]
        assert values == [*range(7), None, *range(8, 20), 3, 3, None]


class TestSchema:
    async def test_a_database_written_by_a_newer_statekernel_is_refused(
        self, postgres_dsn: str
    ) -> None:
        async with PostgresThreadStore(postgres_dsn) as store:
            await store.threads()
        await fetch(
            postgres_dsn,
            "UPDATE statekernel_schema SET version = 99 WHERE component = 'thread_store'",
        )
        async with PostgresThreadStore(postgres_dsn) as store:
            with pytest.raises(StoreError) as refused:
                await store.load("t")
        assert "schema version 99" in str(refused.value)
        assert "upgrade statekernel" in str(refused.value)

    async def test_stores_opening_a_fresh_database_at_once_create_each_table_once(
        self, postgres_dsn: str
    ) -> None:
        """Processes of a fleet start together: the first uses race to create the tables,
        and the schema lock lets exactly one of them do it."""
        stores = [PostgresThreadStore(postgres_dsn, pool_size=1) for _ in range(4)]
        profiles = [PostgresProfileStore(postgres_dsn, pool_size=1) for _ in range(4)]
        try:
            await asyncio.gather(
                *(store.threads() for store in stores),
                *(profile.get("ns", "key") for profile in profiles),
            )
        finally:
            for closing in [*stores, *profiles]:
                await closing.close()
        rows = await fetch(
            postgres_dsn, "SELECT component, version FROM statekernel_schema ORDER BY component"
        )
        assert [tuple(row) for row in rows] == [("profile_store", 1), ("thread_store", 1)]


async def test_saves_through_a_server_restart_land_once_and_none_acknowledged_is_lost(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    """Twenty threads save record after record (grouped into batches) while the server
    stops and starts; a writer resends only a save the store says did not land. Had the
    store called a landed save "not applied", its resend would meet a RevisionConflict
    (there is one writer per thread)."""
    threads = [f"t{n:02d}" for n in range(20)]
    acked: dict[str, int] = dict.fromkeys(threads, 0)
    unknown: dict[str, int] = {}
    conflicts: list[RevisionConflict] = []
    restarted = threading.Event()

    async def writer(store: PostgresThreadStore, thread_id: str) -> None:
        for revision in range(1, 201):
            while True:
                try:
                    await store.save(
                        thread_id, one_record(revision), expected_position=revision - 1
                    )
                except RevisionConflict as conflict:
                    conflicts.append(conflict)
                    return
                except StoreError as error:
                    if "unknown" in str(error):
                        unknown[thread_id] = revision
                        return
                    await asyncio.sleep(0.05)  # "not applied": write it again
                    continue
                acked[thread_id] = revision
                break
            if not restarted.is_set() and revision >= 120:
                await asyncio.sleep(0.02)  # keep saving across the restart

    def restart_when_saving() -> None:
        deadline = time.monotonic() + 60
        while sum(acked.values()) < 400 and time.monotonic() < deadline:
            time.sleep(0.02)
        postgres_server.stop()
        time.sleep(1.0)
        postgres_server.start()
        restarted.set()

    restarter = threading.Thread(target=restart_when_saving)
    restarter.start()
    try:
        async with PostgresThreadStore(postgres_dsn, pool_size=4, retry_for=0.3) as store:
            await asyncio.gather(*(writer(store, thread_id) for thread_id in threads))
    finally:
        restarter.join()
    assert restarted.is_set()
    assert conflicts == [], "a save that had landed was reported as not applied"
    async with PostgresThreadStore(postgres_dsn) as store:
        for thread_id in threads:
            state = await store.load(thread_id)
            assert state is not None
            stored = [entry.revision for entry in state.records]
            assert stored == list(range(1, state.revision + 1))
            assert acked[thread_id] <= state.revision  # nothing acknowledged is lost
            assert state.revision <= unknown.get(thread_id, acked[thread_id])
