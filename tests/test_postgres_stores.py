"""What only the PostgreSQL stores do, against a real server: saves of many threads grouped
into one transaction (and each save's own outcome kept), the schema's version, and saves
that survive a server restart without landing twice or being lost."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

import asyncpg
import pytest

from statekernel import DecodeFailed, RevisionConflict, StoreError, VersionConflict
from statekernel.lowlevel import Entry, JournalEntry, ThreadSave
from statekernel.stores import PostgresProfileStore, PostgresThreadStore
from statekernel.testing.postgres import PostgresServer

T = TypeVar("T")


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

    async def test_concurrent_compare_and_sets_land_in_a_few_transactions_each_on_its_condition(
        self, postgres_dsn: str
    ) -> None:
        """Compare-and-sets that leave together each hold or fail on their own: those that
        hold land with their versions, each that fails raises the `VersionConflict` a set
        alone raises (the version it found), and nothing of it is written."""
        async with PostgresProfileStore(postgres_dsn, pool_size=1) as store:
            await asyncio.gather(
                *(store.set("ns", f"k{n:03d}", {"n": n}) for n in range(100)),
                *(store.set("ns", f"old{n:02d}", "kept") for n in range(20)),
            )
            outcomes = await asyncio.gather(
                *(store.set("ns", f"k{n:03d}", -n, expected_version=1) for n in range(100)),
                *(store.set("ns", f"new{n:02d}", n, expected_version=0) for n in range(50)),
                *(store.set("ns", f"old{n:02d}", "lost", expected_version=3) for n in range(20)),
                *(store.set("ns", f"gone{n:02d}", "lost", expected_version=2) for n in range(20)),
                # Called after the first of their entries: in call order, they find it moved.
                *(store.set("ns", f"k{n:03d}", "lost", expected_version=1) for n in range(20)),
                *(store.set("ns", f"p{n:02d}", n) for n in range(50)),
                return_exceptions=True,
            )
            landed = [o for o in outcomes if isinstance(o, Entry)]
            conflicts = [o for o in outcomes if isinstance(o, VersionConflict)]
            assert len(landed) + len(conflicts) == len(outcomes)
            assert [(e.key, e.value, e.version) for e in landed] == [
                *((f"k{n:03d}", -n, 2) for n in range(100)),
                *((f"new{n:02d}", n, 1) for n in range(50)),
                *((f"p{n:02d}", n, 1) for n in range(50)),
            ]
            expected_conflicts = [
                *(VersionConflict("ns", f"old{n:02d}", 3, 1) for n in range(20)),
                *(VersionConflict("ns", f"gone{n:02d}", 2, None) for n in range(20)),
                *(VersionConflict("ns", f"k{n:03d}", 1, 2) for n in range(20)),
            ]
            assert [(str(c), c.key, c.expected, c.actual) for c in conflicts] == [
                (str(c), c.key, c.expected, c.actual) for c in expected_conflicts
            ]
            stored = {e.key: (e.value, e.version) for e in await store.list("ns")}
            assert stored == {
                **{f"k{n:03d}": (-n, 2) for n in range(100)},
                **{f"new{n:02d}": (n, 1) for n in range(50)},
                **{f"old{n:02d}": ("kept", 1) for n in range(20)},
                **{f"p{n:02d}": (n, 1) for n in range(50)},
            }
        assert await rows_transactions(postgres_dsn, "ns") <= 20

    async def test_compare_and_sets_of_one_entry_have_one_winner_per_version(
        self, postgres_dsn: str
    ) -> None:
        """Writers in two store objects (two pools, as two processes would have) race for
        one entry by compare-and-set, among plain sets and updates of it and compare-and-sets
        of other entries batched with theirs. Of those that expect one version, one wins;
        every version is written by one write only, and each compare-and-set that landed
        wrote over the very value it read: no update is lost."""
        async with (
            PostgresProfileStore(postgres_dsn, pool_size=2) as one,
            PostgresProfileStore(postgres_dsn, pool_size=2) as two,
        ):
            stores = (one, two)
            first = await one.set("ns", "hot", {"n": 0, "by": "start"})
            raced = await asyncio.gather(
                *(
                    stores[n % 2].set("ns", "hot", {"n": 1, "by": n}, expected_version=1)
                    for n in range(20)
                ),
                return_exceptions=True,
            )
            winners = [o for o in raced if isinstance(o, Entry)]
            assert len(winners) == 1 and winners[0].version == 2
            losers = [o for o in raced if not isinstance(o, Entry)]
            assert all(isinstance(o, VersionConflict) for o in losers), losers
            assert {(o.expected, o.actual) for o in losers} == {(1, 2)}  # type: ignore[union-attr]

            written: dict[int, Any] = {first.version: first.value, 2: winners[0].value}
            won: list[tuple[int, Any, Any]] = []  # each landed compare-and-set: read, wrote

            def wrote(entry: Entry) -> None:
                assert entry.version not in written, f"version {entry.version} written twice"
                written[entry.version] = entry.value

            async def compare_and_set(store: PostgresProfileStore, key: str, tag: str) -> None:
                for turn in range(30):
                    got = await store.get("ns", key)
                    assert got is not None
                    value = {"n": got.value["n"] + 1, "by": f"{tag}.{turn}"}
                    try:
                        entry = await store.set("ns", key, value, expected_version=got.version)
                    except VersionConflict as conflict:
                        assert conflict.expected == got.version != conflict.actual
                        continue
                    assert entry.version == got.version + 1
                    if key == "hot":
                        wrote(entry)
                        won.append((got.version, got.value, value))

            async def plain_set(store: PostgresProfileStore, tag: str) -> None:
                for turn in range(30):
                    wrote(await store.set("ns", "hot", {"n": 1000, "by": f"{tag}.{turn}"}))

            async def update(store: PostgresProfileStore, tag: str) -> None:
                for turn in range(30):

                    def add_one(entry: Entry | None, by: str = f"{tag}.{turn}") -> Any:
                        assert entry is not None
                        return {"n": entry.value["n"] + 1, "by": by}

                    wrote(await store.update("ns", "hot", add_one))

            for n in range(4):
                await one.set("ns", f"cold{n}", {"n": 0, "by": "start"})
            await asyncio.gather(
                *(compare_and_set(stores[n % 2], "hot", f"cas{n}") for n in range(8)),
                *(compare_and_set(stores[n % 2], f"cold{n}", f"cold{n}") for n in range(4)),
                *(plain_set(stores[n % 2], f"set{n}") for n in range(2)),
                *(update(stores[n % 2], f"update{n}") for n in range(2)),
            )
            hot = await one.get("ns", "hot")
        assert hot is not None
        assert sorted(written) == list(range(1, hot.version + 1))
        assert hot.value == written[hot.version]
        for read_version, read_value, value in won:
            assert written[read_version] == read_value
            assert value["n"] == read_value["n"] + 1


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
        assert [tuple(row) for row in rows] == [("profile_store", 2), ("thread_store", 2)]


@pytest.mark.slow
async def test_writes_arriving_for_several_call_timeouts_run_on_their_own_deadlines(
    postgres_dsn: str,
) -> None:
    """Under sustained load a batch is still in flight whenever the next one forms, so each
    batch starts the next for as long as the load lasts. Every batch runs on the deadlines
    of the calls in it, not on the long-passed one of the call that started the first: for
    several times `call_timeout`, every set, get and save succeeds and lands."""
    timeouts = {"call_timeout": 0.5, "retry_for": 0.5, "pool_size": 1}
    async with (
        PostgresProfileStore(postgres_dsn, **timeouts) as profiles,
        PostgresThreadStore(postgres_dsn, **timeouts) as threads,
    ):
        loop = asyncio.get_running_loop()
        until = loop.time() + 6 * 0.5

        async def set_and_get(key: str) -> int:
            value = 0
            while loop.time() < until:
                value += 1
                await profiles.set("ns", key, value)
                entry = await profiles.get("ns", key)
                assert entry is not None and entry.value == value
            return value

        async def save(thread_id: str) -> int:
            position = 0
            while loop.time() < until:
                await threads.save(thread_id, one_record(position + 1), expected_position=position)
                position += 1
            return position

        keys, thread_ids = [f"k{n}" for n in range(12)], [f"t{n}" for n in range(12)]
        done = await asyncio.gather(
            *(set_and_get(key) for key in keys),
            *(save(thread_id) for thread_id in thread_ids),
            return_exceptions=True,
        )
        failed = [outcome for outcome in done if isinstance(outcome, BaseException)]
        assert failed == []
        for key, value in zip(keys, done[:12], strict=True):
            entry = await profiles.get("ns", key)
            assert entry is not None and entry.value == value
        for thread_id, position in zip(thread_ids, done[12:], strict=True):
            head = await threads.head(thread_id)
            assert head is not None and head.position == position


@pytest.mark.slow
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


# -- batches under row locks, lost answers and cancellation ---------------------------------


async def blocked(dsn: str, count: int) -> None:
    """Wait until `count` statements wait for a row lock."""
    conn = await asyncpg.connect(dsn)
    try:
        for _ in range(500):
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            )
            if waiting >= count:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"only {waiting} of {count} statements wait for a lock")
    finally:
        await conn.close()


def within(awaitable: Awaitable[T], seconds: float = 30.0) -> Awaitable[T]:
    """`awaitable`, or a TimeoutError when a write that should finish hangs instead."""
    return asyncio.wait_for(awaitable, seconds)


class RowLock:
    """A row held by another session's open transaction (`SELECT ... FOR UPDATE`)."""

    def __init__(self, conn: asyncpg.Connection, transaction: Any) -> None:
        self.conn, self.transaction = conn, transaction

    async def release(self) -> None:
        if not self.conn.is_closed():
            await self.transaction.rollback()
            await self.conn.close()


class HeldRows:
    """Rows other sessions hold; every one is let go on leaving the block (before the store
    under test closes, which would otherwise wait for the writes they hold up)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.held: list[RowLock] = []

    async def entry(self, key: str) -> RowLock:
        return await self._hold(
            "SELECT 1 FROM statekernel_profile_entries WHERE namespace = 'ns' AND key = $1", key
        )

    async def head(self, thread_id: str) -> RowLock:
        return await self._hold(
            "SELECT 1 FROM statekernel_thread_heads WHERE thread_id = $1", thread_id
        )

    async def _hold(self, query: str, arg: str) -> RowLock:
        conn = await asyncpg.connect(self.dsn)
        transaction = conn.transaction()
        await transaction.start()
        await conn.execute(query + " FOR UPDATE", arg)
        self.held.append(RowLock(conn, transaction))
        return self.held[-1]

    async def __aenter__(self) -> HeldRows:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for row in self.held:
            await row.release()


async def cut_connections_running(dsn: str, pattern: str) -> int:
    """Terminate the sessions whose statement matches `pattern` (as a server going down
    does): their answers are lost."""
    rows = await fetch(
        dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE query LIKE $1 AND pid <> pg_backend_pid()",
        pattern,
    )
    return len(rows)


class TestBatchesInFlight:
    async def test_a_set_whose_caller_gave_up_in_flight_lands_before_its_entrys_next_set(
        self, postgres_dsn: str
    ) -> None:
        async with (
            PostgresProfileStore(postgres_dsn, pool_size=4) as store,  # two slots
            HeldRows(postgres_dsn) as rows,
        ):
            for key in "XYWE":
                await store.set("ns", key, "before")
            x, y, w = [await rows.entry(key) for key in "XYW"]
            set_x = asyncio.create_task(store.set("ns", "X", "x"))  # a slot, held up
            set_y = asyncio.create_task(store.set("ns", "Y", "y"))  # the other slot
            await blocked(postgres_dsn, 2)
            set_w = asyncio.create_task(store.set("ns", "W", "w"))
            old = asyncio.create_task(store.set("ns", "E", "old"))  # one batch with W
            await asyncio.sleep(0.05)
            await y.release()
            await set_y
            await blocked(postgres_dsn, 2)  # X alone, and the batch [W, E] held up by W
            await x.release()
            await set_x  # a slot is free again
            old.cancel()  # E's caller gives up while its batch is on its way
            with pytest.raises(asyncio.CancelledError):
                await old
            new = asyncio.create_task(store.set("ns", "E", "new"))
            await asyncio.sleep(0.2)
            assert not new.done()  # it waits for the write before it, which still runs
            await w.release()
            await within(set_w)
            assert (await within(new)).version == 3
            entry = await store.get("ns", "E")
            assert entry is not None and (entry.value, entry.version) == ("new", 3)

    async def test_sets_of_one_entry_land_in_the_order_they_were_called(
        self, postgres_dsn: str
    ) -> None:
        async with PostgresProfileStore(postgres_dsn) as store:
            calls = []
            for index in range(600):
                calls.append(asyncio.create_task(store.set("ns", "hot", index)))
                for _ in range(index % 4):  # calls come as the loop turns, unevenly
                    await asyncio.sleep(0)
            versions = [entry.version for entry in await within(asyncio.gather(*calls))]
            assert versions == list(range(1, 601))
            entry = await store.get("ns", "hot")
            assert entry is not None and entry.value == 599

    async def test_a_batch_of_sets_whose_answer_is_lost_lands_once(self, postgres_dsn: str) -> None:
        async with (
            PostgresProfileStore(postgres_dsn, pool_size=1) as store,  # one slot
            HeldRows(postgres_dsn) as rows,
        ):
            for key in "XWE":
                await store.set("ns", key, "before")
            x, w = await rows.entry("X"), await rows.entry("W")
            set_x = asyncio.create_task(store.set("ns", "X", "x"))
            await blocked(postgres_dsn, 1)
            set_w = asyncio.create_task(store.set("ns", "W", "w"))
            set_e = asyncio.create_task(store.set("ns", "E", "e"))
            await asyncio.sleep(0.05)
            await x.release()
            await set_x
            await blocked(postgres_dsn, 1)  # the batch [W, E], held up by W
            assert await cut_connections_running(postgres_dsn, "%unnest($1::text[]%") == 1
            await asyncio.sleep(0.2)
            await w.release()  # the batch is sent again (nothing of it landed) and lands
            assert [(await within(t)).version for t in (set_w, set_e)] == [2, 2]
            for key, value in (("W", "w"), ("E", "e")):
                entry = await store.get("ns", key)
                assert entry is not None and (entry.value, entry.version) == (value, 2)

    async def test_a_batch_of_compare_and_sets_whose_answer_is_lost_lands_once(
        self, postgres_dsn: str
    ) -> None:
        """A batch of compare-and-sets loses its connection while it waits for a row: asked
        by its write ids, none of it landed, so it is sent again whole; then the sets whose
        conditions hold land once, and the stale one fails on its own."""
        async with (
            PostgresProfileStore(postgres_dsn, pool_size=1) as store,  # one slot
            HeldRows(postgres_dsn) as rows,
        ):
            for key in "XWS":
                await store.set("ns", key, "before")
            x, w = await rows.entry("X"), await rows.entry("W")
            set_x = asyncio.create_task(store.set("ns", "X", "x"))
            await blocked(postgres_dsn, 1)
            set_w = asyncio.create_task(store.set("ns", "W", "w", expected_version=1))
            set_e = asyncio.create_task(store.set("ns", "E", "e", expected_version=0))
            set_s = asyncio.create_task(store.set("ns", "S", "s", expected_version=4))
            await asyncio.sleep(0.05)
            await x.release()
            await set_x
            await blocked(postgres_dsn, 1)  # the batch [W, E, S], held up by W
            assert await cut_connections_running(postgres_dsn, "%unnest($1::text[]%") == 1
            await asyncio.sleep(0.2)
            await w.release()
            assert [(await within(t)).version for t in (set_w, set_e)] == [2, 1]
            with pytest.raises(VersionConflict) as conflict:
                await within(set_s)
            assert (conflict.value.expected, conflict.value.actual) == (4, 1)
            stored = {e.key: (e.value, e.version) for e in await store.list("ns")}
            assert stored == {"X": ("x", 2), "W": ("w", 2), "E": ("e", 1), "S": ("before", 1)}

    async def test_a_lost_answer_of_a_batch_with_a_stale_save_resends_the_others(
        self, postgres_dsn: str
    ) -> None:
        async with (
            PostgresThreadStore(postgres_dsn, pool_size=1) as store,
            HeldRows(postgres_dsn) as rows,
        ):
            for thread_id in ("first", "valid", "stale"):
                await store.save(thread_id, one_record(1), expected_position=0)
            for revision in range(2, 12):  # "stale" moves 10 positions on
                await store.save("stale", one_record(revision), expected_position=revision - 1)
            first, valid = await rows.head("first"), await rows.head("valid")
            save_first = asyncio.create_task(
                store.save("first", one_record(2), expected_position=1)
            )
            await blocked(postgres_dsn, 1)
            save_valid = asyncio.create_task(
                store.save("valid", one_record(2), expected_position=1)
            )
            save_stale = asyncio.create_task(
                store.save("stale", one_record(3), expected_position=2)
            )
            await asyncio.sleep(0.05)
            await first.release()
            await save_first
            await blocked(postgres_dsn, 1)  # the batch [valid, stale], held up by "valid"
            assert await cut_connections_running(postgres_dsn, "%WITH saves AS%") == 1
            await asyncio.sleep(0.2)
            await valid.release()
            assert await within(save_valid) is None  # its head had not moved: sent again, landed
            with pytest.raises(RevisionConflict) as conflict:
                await within(save_stale)
            assert (conflict.value.expected, conflict.value.actual) == (2, 11)
            state = await store.load("valid")
            assert state is not None and (state.position, state.revision) == (2, 2)

    async def test_a_close_given_up_on_leaves_the_writes_in_flight_to_finish(
        self, postgres_dsn: str
    ) -> None:
        store = PostgresProfileStore(postgres_dsn)
        try:
            async with HeldRows(postgres_dsn) as rows:
                await store.set("ns", "E", "before")
                held = await rows.entry("E")
                write = asyncio.create_task(store.set("ns", "E", "after"))
                await blocked(postgres_dsn, 1)
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(store.close(), 0.2)
                await held.release()
                assert (await within(write)).value == "after"  # its caller never gave up
            entry = await store.get("ns", "E")
            assert entry is not None and entry.value == "after"
        finally:
            await store.close()
