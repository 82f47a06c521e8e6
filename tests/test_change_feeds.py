"""Change feeds of the bundled profile stores, on real components: a worker sleeps on a feed
and wakes when an entry it watches is written, by this store object, by another one on the
same SQLite file or PostgreSQL database, or by another OS process.

(What every store's feed promises is in the store contract; these are what each backend adds:
SQLite's own writes by key and others' as None, PostgreSQL's notice in the write's own
transaction, a restart, a read-only server, an idle feed that sends nothing.)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from statekernel import StoreError
from statekernel.lowlevel import ChangeFeed, SupportsChanges
from statekernel.stores import (
    MemoryProfileStore,
    PostgresProfileStore,
    SqliteProfileStore,
)

PATIENCE = 30.0  # seconds: only so that a feed that never wakes fails instead of hanging


async def woken(feed: ChangeFeed) -> frozenset[str] | None:
    async with asyncio.timeout(PATIENCE):
        return await feed.next()


async def quiet(feed: ChangeFeed, seconds: float) -> bool:
    """Whether the feed reports nothing for `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            await feed.next()
    except TimeoutError:
        return True
    return False


async def sql(dsn: str, query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


def test_every_bundled_profile_store_has_change_feeds(tmp_path: Path) -> None:
    stores = [
        MemoryProfileStore(),
        SqliteProfileStore(tmp_path / "p.db"),
        PostgresProfileStore("postgresql://u@127.0.0.1:1/db"),  # (connects on first use)
    ]
    assert all(isinstance(store, SupportsChanges) for store in stores)


class TestMemory:
    async def test_every_feed_of_the_namespace_is_told_and_clear_names_what_it_removed(
        self,
    ) -> None:
        store = MemoryProfileStore()
        await store.set("ns", "a", 1)
        async with store.changes("ns") as first, store.changes("ns") as second:
            await store.set("ns", "b", 1)
            assert await woken(first) == await woken(second) == {"b"}
            await store.delete("ns", "absent")  # nothing removed: nothing to tell
            await store.clear("ns")
            assert await woken(first) == {"a", "b"}

    async def test_a_feed_used_outside_its_block_says_how_to_use_it(self) -> None:
        store = MemoryProfileStore()
        feed = store.changes("ns")
        with pytest.raises(StoreError, match="async with store.changes"):
            await feed.next()
        async with feed:
            with pytest.raises(StoreError, match="entered already"):
                await feed.__aenter__()
        async with feed:  # once left, it may be entered again
            await store.set("ns", "k", 1)
            assert await woken(feed) == {"k"}

    async def test_a_namespace_no_store_can_keep_is_refused_at_the_call(self) -> None:
        with pytest.raises(ValueError, match="lone surrogate"):
            MemoryProfileStore().changes("t\ud800")


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from statekernel.stores import open_stores

    async def main(where, key):
        profiles = open_stores(where).profile_store
        async with profiles:
            await profiles.set("inbox", key, "from another process")

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def write_from_another_process(where: str, key: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, where, key],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


class TestSqlite:
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[SqliteProfileStore]:
        async with SqliteProfileStore(tmp_path / "team.db", change_poll=0.05) as opened:
            yield opened

    async def test_its_own_writes_are_told_by_key_and_never_as_unknown(
        self, store: SqliteProfileStore
    ) -> None:
        async with store.changes("inbox") as feed:
            await store.set("inbox", "a", 1)
            await asyncio.gather(*(store.set("inbox", f"g{n}", n) for n in range(20)))
            await store.update("inbox", "u", lambda entry: 1)
            await store.set("inbox", "a", 2, expected_version=1)
            await store.delete("inbox", "g0")
            await store.set("elsewhere", "x", 1)
            assert await woken(feed) == {"a", "u", *(f"g{n}" for n in range(20))}
            assert await quiet(feed, 0.3)  # six polls: none took them for another's

    async def test_another_store_object_on_the_file_is_told_as_unknown(
        self, store: SqliteProfileStore
    ) -> None:
        async with (
            SqliteProfileStore(store.path) as other,
            store.changes("inbox") as feed,
        ):
            await other.set("inbox", "a", 1)
            assert await woken(feed) is None
            got = await store.get("inbox", "a")
            assert got is not None and got.value == 1

    @pytest.mark.slow
    async def test_another_process_writing_the_file_is_told_as_unknown(
        self, store: SqliteProfileStore
    ) -> None:
        await store.set("inbox", "warm", 0)  # the file and its tables exist
        async with store.changes("inbox") as feed:
            await asyncio.to_thread(write_from_another_process, store.path, "letter")
            assert await woken(feed) is None
            got = await store.get("inbox", "letter")
            assert got is not None and got.value == "from another process"

    async def test_a_feed_goes_on_after_the_store_is_closed_under_it(
        self, store: SqliteProfileStore
    ) -> None:
        async with SqliteProfileStore(store.path) as other, store.changes("inbox") as feed:
            waiting = asyncio.ensure_future(woken(feed))
            await asyncio.sleep(0)
            await store.close()
            assert await waiting is None  # (returned once it polled again)
            await other.set("inbox", "b", 1)
            assert await woken(feed) is None
            await store.set("inbox", "c", 1)
            assert await woken(feed) == {"c"}

    @pytest.mark.parametrize("poll", [0, -1, float("nan"), float("inf"), True, "0.1"])
    def test_a_change_poll_that_is_not_a_positive_number_is_refused(
        self, tmp_path: Path, poll: object
    ) -> None:
        with pytest.raises(ValueError, match="change_poll"):
            SqliteProfileStore(tmp_path / "p.db", change_poll=poll)  # type: ignore[arg-type]


class TestPostgres:
    @pytest.fixture
    async def store(self, postgres_dsn: str) -> AsyncIterator[PostgresProfileStore]:
        async with PostgresProfileStore(postgres_dsn) as opened:
            yield opened

    async def test_a_write_by_another_store_object_wakes_the_feed_with_its_key(
        self, store: PostgresProfileStore, postgres_dsn: str
    ) -> None:
        async with PostgresProfileStore(postgres_dsn) as other, store.changes("inbox") as feed:
            await other.set("inbox", "agent-1", ["hello"])
            assert await woken(feed) == {"agent-1"}
            await other.set("elsewhere", "agent-1", 1)
            await other.update("inbox", "agent-2", lambda entry: 1)
            assert await woken(feed) == {"agent-2"}

    @pytest.mark.slow
    async def test_a_write_by_another_process_wakes_the_feed_with_its_key(
        self, store: PostgresProfileStore, postgres_dsn: str
    ) -> None:
        async with store.changes("inbox") as feed:
            await asyncio.to_thread(write_from_another_process, postgres_dsn, "agent-7")
            assert await woken(feed) == {"agent-7"}

    async def test_a_watcher_woken_by_a_notice_always_finds_the_write(
        self, store: PostgresProfileStore, postgres_dsn: str
    ) -> None:
        """The notice is sent in the write's own transaction: every write, of every kind
        (group-committed sets among them), is found by the read its notice wakes."""
        count = 300
        missing: list[str] = []
        async with PostgresProfileStore(postgres_dsn) as writer, store.changes("inbox") as feed:

            async def write(n: int) -> None:
                key = f"k{n:03d}"
                if n % 3 == 0:
                    await writer.set("inbox", key, n)
                elif n % 3 == 1:
                    await writer.set("inbox", key, n, expected_version=0)
                else:
                    await writer.update("inbox", key, lambda entry: n)

            async def write_all() -> None:
                for start in range(0, count, 10):  # ten at a time: sets go as one batch
                    await asyncio.gather(*(write(n) for n in range(start, start + 10)))

            writing = asyncio.create_task(write_all())
            seen: set[str] = set()
            while len(seen) < count:
                keys = await woken(feed)
                assert keys is not None
                for key in keys:
                    if await store.get("inbox", key) is None:
                        missing.append(key)
                seen |= keys
            await writing
        assert missing == []

    async def test_a_key_too_long_for_a_notice_is_told_as_unknown(
        self, store: PostgresProfileStore
    ) -> None:
        async with store.changes("inbox") as feed:
            await store.set("inbox", "é" * 4000, 1)  # 8000 bytes
            assert await woken(feed) is None

    @pytest.mark.slow  # waits a second on purpose
    async def test_an_idle_feed_sends_nothing(
        self, store: PostgresProfileStore, postgres_dsn: str
    ) -> None:
        """No timer behind it: the listening connection's last statement is its LISTEN,
        and a second later it still is."""
        async with store.changes("inbox") as feed:
            pid = listening_pid(store)
            activity = "SELECT state, query, state_change FROM pg_stat_activity WHERE pid = $1"
            before = await sql(postgres_dsn, activity, pid)
            assert before[0]["state"] == "idle" and before[0]["query"].startswith("LISTEN")
            assert await quiet(feed, 1.0)
            assert await sql(postgres_dsn, activity, pid) == before

    async def test_a_feed_goes_on_after_the_store_is_closed_under_it(
        self, store: PostgresProfileStore, postgres_dsn: str
    ) -> None:
        async with PostgresProfileStore(postgres_dsn) as other, store.changes("inbox") as feed:
            waiting = asyncio.ensure_future(woken(feed))
            await asyncio.sleep(0)
            await store.close()
            assert await waiting is None  # (returned once it listened again)
            await other.set("inbox", "b", 1)
            assert await woken(feed) == {"b"}

    async def test_two_schemas_in_one_database_do_not_hear_each_other(
        self, postgres_server: object, postgres_dsn: str
    ) -> None:
        second_dsn = postgres_dsn + "_second"
        schema = second_dsn.rsplit("=", 1)[1]
        await sql(postgres_dsn, f"CREATE SCHEMA {schema}")
        async with (
            PostgresProfileStore(postgres_dsn) as first,
            PostgresProfileStore(second_dsn) as second,
            first.changes("inbox") as feed,
            second.changes("inbox") as other_feed,
        ):
            await second.set("inbox", "theirs", 1)
            assert await woken(other_feed) == {"theirs"}
            await first.set("inbox", "ours", 1)
            assert await woken(feed) == {"ours"}

    async def test_a_read_only_store_listens_only_to_a_namespace_already_watched(
        self, store: PostgresProfileStore, postgres_dsn: str
    ) -> None:
        await store.set("inbox", "warm", 0)
        async with PostgresProfileStore(postgres_dsn, read_only=True) as reader:
            with pytest.raises(StoreError, match="read_only=True"):
                async with reader.changes("inbox"):
                    pass
            async with store.changes("inbox"):  # a writable store registers it
                pass
            async with reader.changes("inbox") as feed:
                await store.set("inbox", "a", 1)
                assert await woken(feed) == {"a"}

    async def test_a_version_1_database_is_migrated_and_read_only_feeds_say_so(
        self, postgres_dsn: str
    ) -> None:
        async with PostgresProfileStore(postgres_dsn) as store:
            await store.set("inbox", "kept", 1)
        for statement in (  # as version 1 made it: no watched table, no functions
            "DROP FUNCTION statekernel_profile_watch(text)",
            "DROP FUNCTION statekernel_profile_notify() CASCADE",
            "DROP TABLE statekernel_profile_watched",
            "UPDATE statekernel_schema SET version = 1 WHERE component = 'profile_store'",
        ):
            await sql(postgres_dsn, statement)
        async with PostgresProfileStore(postgres_dsn, read_only=True) as reader:
            entry = await reader.get("inbox", "kept")  # read as it is
            assert entry is not None and entry.value == 1
            with pytest.raises(StoreError, match="schema version 1"):
                async with reader.changes("inbox"):
                    pass
        async with PostgresProfileStore(postgres_dsn) as store, store.changes("inbox") as feed:
            await store.set("inbox", "new", 1)
            assert await woken(feed) == {"new"}
        rows = await sql(
            postgres_dsn,
            "SELECT version FROM statekernel_schema WHERE component = 'profile_store'",
        )
        assert rows[0][0] == 2


def listening_pid(store: PostgresProfileStore) -> int:
    """The server process of the store's listening connection (while a feed is entered)."""
    conn = store._listener._conn
    assert conn is not None
    return int(conn.get_server_pid())


async def test_the_last_feed_to_leave_closes_the_listening_connection(postgres_dsn: str) -> None:
    async with PostgresProfileStore(postgres_dsn) as store:
        async with store.changes("inbox"), store.changes("outbox"):
            pid = listening_pid(store)
        async with asyncio.timeout(PATIENCE):  # (a backend takes a moment to exit)
            while await sql(postgres_dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = $1", pid):
                await asyncio.sleep(0.05)
