"""PostgreSQL stores under the faults a production server meets, on real components: a
throwaway server of this module's own (restarted with `-m immediate`, stopped for seconds,
made read-only, out of connections), a TCP proxy of the tests' own that stops forwarding,
and Debian's PgBouncer in front in transaction and session pooling.

What every test holds: no acknowledged write lost, none applied twice, no false error, no
call longer than its deadline plus a second, a cancel that returns within a second.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from pgbouncer import throwaway_pgbouncer
from tcp_proxy import tcp_proxy

from statekernel import (
    Agent,
    InferenceRequest,
    InferenceResponse,
    Kernel,
    Message,
    OutcomeUnknown,
    StoreError,
    VersionConflict,
)
from statekernel.lowlevel import Entry, JournalEntry, ThreadSave
from statekernel.stores import PostgresProfileStore, PostgresThreadStore
from statekernel.testing.postgres import (
    HOW_TO_INSTALL,
    PostgresServer,
    find_binaries,
    throwaway_postgres,
)

pytestmark = pytest.mark.slow  # a server restarted and stopped, proxies, PgBouncer

REQUIRE_POSTGRES = os.environ.get("STATEKERNEL_REQUIRE_POSTGRES") == "1"
_databases = itertools.count(1)


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """A server of this module's own: its tests restart and stop it. Durable (fsync and
    synchronous commit on): a crash must lose nothing acknowledged."""
    if find_binaries() is None:
        message = f"PostgreSQL is not installed here: {HOW_TO_INSTALL}"
        if REQUIRE_POSTGRES:
            pytest.fail(message)
        pytest.skip(message)
    with throwaway_postgres(durable=True) as made:
        yield made


async def fresh_database(server: PostgresServer, *, port: int | None = None) -> str:
    """A new, empty database on `server`; its DSN, through `port` when given (a proxy's)."""
    import asyncpg

    name = f"faults_{os.getpid()}_{next(_databases)}"
    conn = await asyncpg.connect(server.dsn)
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    return f"postgresql://postgres@127.0.0.1:{port or server.port}/{name}"


async def model(request: InferenceRequest) -> InferenceResponse:
    return InferenceResponse("ok")


async def said(agent: Agent, thread_id: str) -> list[str]:
    """What the user said in the thread, as its stored history holds it."""
    state = await agent.kernel.get_state(thread_id)
    history: tuple[Message, ...] = tuple(state.to_dict()["statekernel.messages"])
    return [m.content for m in history if m.role == "user"]


async def test_a_call_on_a_connection_that_stops_answering_ends_at_its_deadline(
    server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = await fresh_database(server)
    async with tcp_proxy(server.port) as proxy:
        through = dsn.replace(f":{server.port}/", f":{proxy.port}/")
        async with PostgresProfileStore(through, call_timeout=2, retry_for=1) as store:
            await store.set("ns", "k", 1)
            proxy.stall()
            # On the pooled connection, which stops answering once the write is sent:
            start = time.monotonic()
            with pytest.raises(StoreError, match="outcome unknown") as raised:
                await store.set("ns", "k", 2)
            assert time.monotonic() - start <= 2 + 1
            assert "next call asks what became of it" in str(raised.value)
            # On a new connection, which the stalled network never opens:
            start = time.monotonic()
            with pytest.raises(StoreError, match="call_timeout"):
                await store.get("ns", "k")
            assert time.monotonic() - start <= 2 + 1
            start = time.monotonic()
            with pytest.raises(StoreError, match="not applied: no answer within call_timeout"):
                await store.set("ns", "other", 1)
            assert time.monotonic() - start <= 2 + 1
            proxy.resume()  # the held bytes of the abandoned write now reach the server
            with caplog.at_level(logging.WARNING, logger="statekernel"):
                entry = await store.get("ns", "k")
    settled = [r.getMessage() for r in caplog.records if "without an answer was" in r.getMessage()]
    assert len(settled) == 1
    # What the log says became of the write is what the store holds, now and later.
    expected = 2 if settled[0].endswith("was applied") else 1
    assert settled[0].endswith(("was applied", "was not applied"))
    assert entry is not None and entry.value == expected
    async with PostgresProfileStore(dsn) as again:
        await asyncio.sleep(0.5)
        later = await again.get("ns", "k")
        assert later is not None and later.value == expected


async def test_a_run_cancelled_while_its_save_hangs_returns_within_a_second(
    server: PostgresServer,
) -> None:
    """The store stops answering while a run saves (the network stalls as the model
    answers): cancelling the run returns within a second; the save left to the store lands
    or not, the run saves nothing more, and the next run goes on from what the store holds,
    with nothing lost and nothing twice."""
    dsn = await fresh_database(server)
    stall_on_answer = asyncio.Event()

    async def model(request: InferenceRequest) -> InferenceResponse:
        if stall_on_answer.is_set():
            proxy.stall()  # the answer is committed; its save will hang
        return InferenceResponse("ok")

    async with tcp_proxy(server.port) as proxy:
        through = dsn.replace(f":{server.port}/", f":{proxy.port}/")
        store = PostgresThreadStore(through, call_timeout=30)
        async with store:
            agent = Agent([], model, thread_store=store)
            await agent.run("t", ["first"])
            stall_on_answer.set()
            task = asyncio.create_task(agent.run("t", ["second"]))
            while not proxy.stalled_bytes:  # the save is on its way, and held
                await asyncio.sleep(0.01)
            start = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - start <= 1.0
            stall_on_answer.clear()
            proxy.resume()
            result = await agent.run("t", ["third"])
            assert result.outcome == "success"
            texts = await said(agent, "t")
            assert texts[0] == "first" and texts[-1] == "third"
            assert texts.count("second") <= 1
    async with PostgresThreadStore(dsn) as reader:
        report = await Kernel([], thread_store=reader).verify("t")
        assert report.ok, report


async def test_updates_after_a_restart_raise_no_false_errors(server: PostgresServer) -> None:
    dsn = await fresh_database(server)
    async with PostgresProfileStore(dsn, retry_for=30, call_timeout=40) as store:
        for _round in range(3):
            for _ in range(12):
                await store.update("ns", "counter", lambda e: (e.value if e else 0) + 1)
            await asyncio.to_thread(server.restart, "immediate")
        entry = await store.get("ns", "counter")
        assert entry is not None and entry.value == 36


async def test_writers_through_a_crash_and_a_stopped_server(
    server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Profile updaters and agents keep writing while the server crashes (`-m immediate`)
    and then stays stopped for 3 s: every acknowledged write is there once, no call fails
    (each is retried within its `retry_for`), and the log says each outage in a line or
    two per store, without a traceback."""
    caplog.set_level(logging.INFO, logger="statekernel")
    dsn = await fresh_database(server)
    stop = asyncio.Event()
    acknowledged: dict[str, int] = {}
    errors: list[BaseException] = []

    async def updater(store: PostgresProfileStore, name: str) -> None:
        while not stop.is_set():
            try:
                await store.update("ns", name, lambda e: (e.value if e else 0) + 1)
            except StoreError as error:
                errors.append(error)
                return
            acknowledged[name] = acknowledged.get(name, 0) + 1

    async def talker(agent: Agent, thread: str) -> None:
        while not stop.is_set():
            try:
                await agent.run(thread, [f"m{acknowledged.get(thread, 0)}"])
            except StoreError as error:
                errors.append(error)
                return
            acknowledged[thread] = acknowledged.get(thread, 0) + 1

    async with (
        PostgresProfileStore(dsn, retry_for=30, call_timeout=40) as profiles,
        PostgresThreadStore(dsn, retry_for=30, call_timeout=40) as threads,
    ):
        agent = Agent([], model, thread_store=threads)
        workers = [asyncio.create_task(updater(profiles, f"c{n}")) for n in range(3)]
        workers += [asyncio.create_task(talker(agent, f"t{n}")) for n in range(2)]
        await asyncio.sleep(0.5)
        await asyncio.to_thread(server.restart, "immediate")
        await asyncio.sleep(0.5)
        await asyncio.to_thread(server.stop, "immediate")
        await asyncio.sleep(3)
        await asyncio.to_thread(server.start)
        await asyncio.sleep(1)
        stop.set()
        await asyncio.gather(*workers)
        assert errors == []
        assert not [r for r in caplog.records if r.exc_info], "a traceback in the log"
        down = [r for r in caplog.records if "is not answering" in r.getMessage()]
        # One line per outage (two) and store (two); a store whose connection opened while
        # the server was going down ("answers again, after 0.0 s") saw one outage more.
        flaps = sum("answers again, after 0.0 s" in r.getMessage() for r in caplog.records)
        assert 2 <= len(down) <= 4 + flaps
        for n in range(3):
            entry = await profiles.get("ns", f"c{n}")
            assert entry is not None and entry.value == acknowledged[f"c{n}"], caplog.text
        for n in range(2):
            users = await said(agent, f"t{n}")
            assert users == [f"m{k}" for k in range(acknowledged[f"t{n}"])]
            assert (await agent.kernel.verify(f"t{n}")).ok


async def test_a_commit_caught_half_way_by_a_crash_is_asked_about_only_after_the_server_is_gone(
    server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash can catch a commit half-way: its record written, its answer never sent, and
    the transaction not yet visible to the server's other sessions, which still answer for
    a moment. Recovery then commits it. Asked on one of those sessions, the update would be
    "not applied" and run again, landing twice; the store asks on a connection opened after
    the answer was lost, which only the restarted server answers, so it lands once.

    Held there deterministically: a synchronous standby that never comes keeps the commit
    waiting after its record is written, and the postmaster is paused (SIGSTOP) so that the
    killed process's siblings outlive it, as long as the test likes."""
    import asyncpg

    caplog.set_level(logging.INFO, logger="statekernel")
    dsn = await fresh_database(server)
    database = dsn.rsplit("/", 1)[1]
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])

    def count(entry: Entry | None) -> int:
        return (entry.value if entry else 0) + 1

    admin = await asyncpg.connect(server.dsn)
    try:
        async with PostgresProfileStore(dsn, retry_for=60, call_timeout=90) as store:
            # Two pooled connections: one of them idle while the other's commit hangs.
            await asyncio.gather(store.update("ns", "c", count), store.update("ns", "d", count))
            acknowledged = 1
            await admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
            await admin.execute("SELECT pg_reload_conf()")
            while True:  # (until the setting reaches the server's processes)
                update = asyncio.create_task(store.update("ns", "c", count))
                held = None
                while held is None and not update.done():
                    await asyncio.sleep(0.05)
                    held = await admin.fetchval(
                        "SELECT pid FROM pg_stat_activity "
                        "WHERE datname = $1 AND wait_event = 'SyncRep'",
                        database,
                    )
                if held is not None:
                    break
                await update
                acknowledged += 1
            os.kill(postmaster, signal.SIGSTOP)
            try:
                os.kill(held, signal.SIGKILL)  # the answer is lost; the commit is in the WAL
                await asyncio.sleep(1)  # the store asks what became of the update
                await admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
                await admin.execute("SELECT pg_reload_conf()")  # (read when it goes on)
            finally:
                os.kill(postmaster, signal.SIGCONT)  # it sees the killed process: a crash
            entry = await update
            acknowledged += 1
            assert entry.value == acknowledged, caplog.text
            stored = await store.get("ns", "c")
            assert stored is not None and stored.value == acknowledged, caplog.text
    finally:
        admin.terminate()
    # What the log says became of it is what happened, and names what broke the connection.
    lost = [r.getMessage() for r in caplog.records if "whose answer was lost" in r.getMessage()]
    assert len(lost) == 1 and lost[0].endswith("(ConnectionDoesNotExistError) was applied"), lost


async def test_an_update_sent_again_after_a_wrong_not_applied_lands_once(
    server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Behind a transaction pooler no server process is a connection's own, so none can be
    ended after a lost answer, and a commit still in doubt (its record written, not yet
    visible) is asked about too early: "not applied". The update sent again waits for the
    row's lock, which the earlier try holds until it commits, and then finds its own write
    id there: it lands once.

    Held there deterministically: a synchronous standby that never comes keeps the first
    try's commit waiting, the network to it is cut, and the standby is given up once the
    update sent again waits for the lock."""
    import asyncpg

    caplog.set_level(logging.INFO, logger="statekernel")
    dsn = await fresh_database(server)
    database = dsn.rsplit("/", 1)[1]

    def count(entry: Entry | None) -> int:
        return (entry.value if entry else 0) + 1

    async def waiting(event: str) -> int | None:
        found = await admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND wait_event = $2",
            database,
            event,
        )
        return None if found is None else int(found)

    admin = await asyncpg.connect(server.dsn)
    async with tcp_proxy(server.port) as proxy:
        through = dsn.replace(f":{server.port}/", f":{proxy.port}/")
        store = PostgresProfileStore(through, statement_cache_size=0, call_timeout=60)
        try:
            async with store:
                await store.update("ns", "c", count)
                acknowledged = 1
                await admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
                await admin.execute("SELECT pg_reload_conf()")
                while True:  # (until the setting reaches the server's processes)
                    update = asyncio.create_task(store.update("ns", "c", count))
                    while not update.done() and await waiting("SyncRep") is None:
                        await asyncio.sleep(0.05)
                    if not update.done():
                        break
                    await update
                    acknowledged += 1
                proxy.cut()  # the answer is lost; the commit waits, in doubt
                while await waiting("transactionid") is None:  # sent again, at the lock
                    await asyncio.sleep(0.05)
                await admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
                await admin.execute("SELECT pg_reload_conf()")  # the first try commits
                entry = await update
                acknowledged += 1
                assert entry.value == acknowledged, caplog.text
                stored = await store.get("ns", "c")
                assert stored is not None and stored.value == acknowledged
        finally:
            await admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
            await admin.execute("SELECT pg_reload_conf()")
            await admin.close()
    assert "found that an earlier try of it, its answer lost, had landed" in caplog.text


async def test_a_read_only_server_is_readable_and_refuses_writes_by_name(
    server: PostgresServer,
) -> None:
    import asyncpg

    dsn = await fresh_database(server)
    async with PostgresProfileStore(dsn) as profiles, PostgresThreadStore(dsn) as threads:
        await profiles.set("ns", "k", 1)
        await (await Kernel([], thread_store=threads).start_run("t")).finish()
    database = dsn.rsplit("/", 1)[1]
    conn = await asyncpg.connect(server.dsn)
    try:
        await conn.execute(f"ALTER DATABASE {database} SET default_transaction_read_only = on")
    finally:
        await conn.close()
    # Ordinary stores (not read_only=True), as an app pointed at a replica opens them.
    async with PostgresProfileStore(dsn) as profiles, PostgresThreadStore(dsn) as threads:
        entry = await profiles.get("ns", "k")
        assert entry is not None and entry.value == 1
        assert await threads.threads() == ["t"]
        with pytest.raises(StoreError, match="read-only"):
            await profiles.set("ns", "k", 2)
    async with PostgresProfileStore(dsn, read_only=True) as reader:
        entry = await reader.get("ns", "k")
        assert entry is not None and entry.value == 1


async def test_calls_wait_for_a_free_connection_when_the_server_has_none(
    server: PostgresServer,
) -> None:
    import asyncpg

    dsn = await fresh_database(server)
    admin = await asyncpg.connect(server.dsn)
    try:
        await admin.execute("DROP ROLE IF EXISTS few; CREATE ROLE few LOGIN CONNECTION LIMIT 2")
        database = dsn.rsplit("/", 1)[1]
        await admin.execute(f"GRANT ALL ON DATABASE {database} TO few")
        await admin.execute(f"ALTER DATABASE {database} OWNER TO few")
    finally:
        await admin.close()
    few = dsn.replace("postgres@", "few@")
    async with PostgresProfileStore(few) as store:  # its tables made
        await store.set("ns", "k", 0)
    held = [await asyncpg.connect(few) for _ in range(2)]  # every connection it may have
    try:
        async with PostgresProfileStore(few, retry_for=20, call_timeout=30) as store:
            call = asyncio.create_task(store.update("ns", "k", lambda e: e.value + 1))
            await asyncio.sleep(1)
            assert not call.done()  # waiting, not failing
            await held.pop().close()
            entry = await call
            assert entry.value == 1
        async with PostgresProfileStore(few, retry_for=1, call_timeout=2) as store:
            await held.pop().close()
            held.append(await asyncpg.connect(few))
            held.append(await asyncpg.connect(few))
            start = time.monotonic()
            with pytest.raises(StoreError, match="not applied"):
                await store.set("ns", "k", 5)
            assert time.monotonic() - start <= 2 + 1
    finally:
        for conn in held:
            await conn.close()


@pytest.mark.parametrize(
    ("mode", "cache"), [("transaction", None), ("transaction", 0), ("session", None)]
)
async def test_the_stores_work_behind_pgbouncer(
    server: PostgresServer, pgbouncer: str, mode: str, cache: int | None
) -> None:
    """With `statement_cache_size` left alone (the pooler is detected on the first missing
    statement) or set to 0 as the docs advise."""
    dsn = await fresh_database(server)
    database = dsn.rsplit("/", 1)[1]

    # In session pooling a client's connection holds a server connection while it is open,
    # so the pooler needs as many as the stores' pools together (10 each by default); in
    # transaction pooling a few serve them all.
    pool_size = 4 if mode == "transaction" else 20
    with throwaway_pgbouncer(pgbouncer, server.port, database, mode, pool_size) as pooled:
        async with (
            PostgresProfileStore(pooled, statement_cache_size=cache) as profiles,
            PostgresThreadStore(pooled, statement_cache_size=cache) as threads,
        ):
            agent = Agent([], model, thread_store=threads)

            async def counter(name: str) -> None:
                for _ in range(20):
                    await profiles.update("ns", name, lambda e: (e.value if e else 0) + 1)

            async def talk(thread: str) -> None:
                for k in range(5):
                    await agent.run(thread, [f"m{k}"])

            await asyncio.gather(
                *(counter(f"c{n}") for n in range(4)),
                *(talk(f"t{n}") for n in range(4)),
                *(profiles.set("ns", f"s{n}", n) for n in range(20)),
            )
            for n in range(4):
                entry = await profiles.get("ns", f"c{n}")
                assert entry is not None and entry.value == 20
                assert await said(agent, f"t{n}") == [f"m{k}" for k in range(5)]
        async with PostgresThreadStore(pooled, read_only=True) as reader:
            assert await reader.threads() == [f"t{n}" for n in range(4)]
            assert (await Kernel([], thread_store=reader).verify("t0")).ok
        # The command line opens read-only stores: through the pooler too.
        listed = []
        for command in (["verify", pooled, "--thread", "t1"], ["threads", pooled, "--json"]):
            done = subprocess.run(
                [sys.executable, "-m", "statekernel", *command],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            listed = (
                [row["thread_id"] for row in json.loads(done.stdout)] if "--json" in command else []
            )
        assert listed == [f"t{n}" for n in range(4)]


@pytest.mark.parametrize("write", ["update", "compare-and-set"])
async def test_a_write_blocked_by_another_sessions_lock_ends_and_never_lands_late(
    server: PostgresServer, caplog: pytest.LogCaptureFixture, write: str
) -> None:
    """A write that waits on another session's row lock past its deadline (an `update`,
    one transaction; a compare-and-set `set`, one statement) is reported unknown; the
    store's next call ends the server process still holding it, and only then asks by its
    write id, so the write can never land after it was found not to have (here: when the
    lock goes)."""
    import asyncpg

    dsn = await fresh_database(server)
    async with PostgresProfileStore(dsn, call_timeout=2, retry_for=1) as store:
        first = await store.set("ns", "k", 1)
        other = await asyncpg.connect(dsn)
        try:
            locking = other.transaction()
            await locking.start()
            await other.execute(
                "SELECT * FROM statekernel_profile_entries WHERE key = 'k' FOR UPDATE"
            )
            start = time.monotonic()
            with pytest.raises(StoreError, match="outcome unknown"):
                if write == "update":
                    await store.update("ns", "k", lambda e: e.value + 1)
                else:
                    await store.set("ns", "k", 2, expected_version=first.version)
            assert time.monotonic() - start <= 2 + 1
            with caplog.at_level(logging.WARNING, logger="statekernel"):
                entry = await store.get("ns", "k")  # ends the blocked process, then asks
            await locking.commit()  # the lock goes: a write still waiting would land now
        finally:
            await other.close()
        await asyncio.sleep(0.5)
        assert entry is not None and entry.value == 1
        again = await store.get("ns", "k")
        assert again is not None and (again.value, again.version) == (1, first.version)
    assert any(r.getMessage().endswith("was not applied") for r in caplog.records)


@pytest.mark.parametrize("lock", ["released", "held"])
async def test_a_batch_of_sets_left_without_an_answer_is_settled_entry_by_entry_in_the_log(
    server: PostgresServer, caplog: pytest.LogCaptureFixture, lock: str
) -> None:
    """Sets that left together (group commit) wait on another session's lock past their
    deadline. The store's next call asks what became of them and the log names every
    entry with its outcome: applied when the lock went while they still waited at the
    server, not applied when the store ended them first."""
    import asyncpg

    dsn = await fresh_database(server)
    # One connection: "a" leaves alone, and "b" and "c", waiting meanwhile, leave together.
    async with PostgresProfileStore(dsn, call_timeout=2, retry_for=1, pool_size=1) as store:
        await store.set("ns", "b", 0)
        other = await asyncpg.connect(dsn)
        try:
            locking = other.transaction()
            await locking.start()
            await other.execute(
                "SELECT * FROM statekernel_profile_entries WHERE key = 'b' FOR UPDATE"
            )
            outcomes = await asyncio.gather(
                *(store.set("ns", key, 1) for key in ("a", "b", "c")), return_exceptions=True
            )
            assert isinstance(outcomes[0], Entry)
            assert all("outcome unknown" in str(outcome) for outcome in outcomes[1:]), outcomes
            if lock == "released":
                await locking.commit()  # the batch, still at the server, lands
                query = "SELECT count(*) FROM statekernel_profile_entries WHERE key = 'c'"
                while not await other.fetchval(query):
                    await asyncio.sleep(0.05)
            with caplog.at_level(logging.WARNING, logger="statekernel"):
                await store.get("ns", "a")  # asks what became of the batch
        finally:
            await other.close()
        entry = await store.get("ns", "c")
    outcome = "applied" if lock == "released" else "not applied"
    assert (entry is not None) is (lock == "released")
    said = [r.getMessage() for r in caplog.records if "set of 2 entries" in r.getMessage()]
    assert said == [
        f"PostgreSQL store: the set of 2 entries whose call ended without an answer was "
        f"{outcome} for 2 (entry 'b' in 'ns', entry 'c' in 'ns')"
    ]


@pytest.mark.parametrize("lock", ["released", "held"])
async def test_a_batch_of_compare_and_sets_left_without_an_answer_is_settled_set_by_set(
    server: PostgresServer, caplog: pytest.LogCaptureFixture, lock: str
) -> None:
    """Compare-and-sets that left together wait on another session's lock past their
    deadline. The store's next call asks what became of each by its write id, and the log
    names each: applied for those whose condition held when the lock went, not applied
    for the stale one; none applied when the store ended them first."""
    import asyncpg

    dsn = await fresh_database(server)
    # One connection: "a" leaves alone, and "b", "c" and "d", waiting meanwhile, together.
    async with PostgresProfileStore(dsn, call_timeout=2, retry_for=1, pool_size=1) as store:
        for key in ("b", "d"):
            await store.set("ns", key, 0)
        other = await asyncpg.connect(dsn)
        try:
            locking = other.transaction()
            await locking.start()
            await other.execute(
                "SELECT * FROM statekernel_profile_entries WHERE key = 'b' FOR UPDATE"
            )
            outcomes = await asyncio.gather(
                store.set("ns", "a", 1),
                store.set("ns", "b", 1, expected_version=1),
                store.set("ns", "c", 1, expected_version=0),
                store.set("ns", "d", 1, expected_version=7),  # stale
                return_exceptions=True,
            )
            assert isinstance(outcomes[0], Entry)
            assert all(isinstance(outcome, OutcomeUnknown) for outcome in outcomes[1:]), outcomes
            if lock == "released":
                await locking.commit()  # the batch, still at the server, lands
                query = "SELECT count(*) FROM statekernel_profile_entries WHERE key = 'c'"
                while not await other.fetchval(query):
                    await asyncio.sleep(0.05)
            with caplog.at_level(logging.WARNING, logger="statekernel"):
                await store.get("ns", "a")  # asks what became of the batch
        finally:
            await other.close()
        stored = {e.key: (e.value, e.version) for e in await store.list("ns")}
    said = [r.getMessage() for r in caplog.records if "set of 3 entries" in r.getMessage()]
    prefix = "PostgreSQL store: the set of 3 entries whose call ended without an answer was"
    if lock == "released":
        assert stored == {"a": (1, 1), "b": (1, 2), "c": (1, 1), "d": (0, 1)}
        assert said == [
            f"{prefix} applied for 2 (entry 'b' in 'ns', entry 'c' in 'ns'); "
            f"not applied for 1 (entry 'd' in 'ns')"
        ]
    else:
        assert stored == {"a": (1, 1), "b": (0, 1), "d": (0, 1)}
        assert said == [
            f"{prefix} not applied for 3 (entry 'b' in 'ns', entry 'c' in 'ns', entry 'd' in 'ns')"
        ]


async def test_a_batch_of_compare_and_sets_that_landed_unanswered_answers_each_caller(
    server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection breaks after the server committed a batch of compare-and-sets and
    before its answer came back. The store asks by the write ids and each caller gets what
    its own set did: the versions of those that held, and for the stale one, sent again
    alone, the conflict naming the version it found. Nothing lands twice."""
    import asyncpg

    dsn = await fresh_database(server)
    async with tcp_proxy(server.port) as proxy:
        through = dsn.replace(f":{server.port}/", f":{proxy.port}/")
        async with PostgresProfileStore(through, pool_size=1) as store:
            for key in ("b", "d"):
                await store.set("ns", key, 0)
            other = await asyncpg.connect(dsn)
            try:
                locking = other.transaction()
                await locking.start()
                await other.execute(
                    "SELECT * FROM statekernel_profile_entries WHERE key = 'b' FOR UPDATE"
                )
                # "a" leaves alone; "b", "c" and "d" leave together and wait for b's row.
                calls = [
                    asyncio.create_task(store.set("ns", "a", 1)),
                    asyncio.create_task(store.set("ns", "b", 1, expected_version=1)),
                    asyncio.create_task(store.set("ns", "c", 1, expected_version=0)),
                    asyncio.create_task(store.set("ns", "d", 1, expected_version=7)),
                ]
                waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                while not await other.fetchval(waiting):
                    await asyncio.sleep(0.02)
                proxy.stall()  # the answer will not come back
                await locking.commit()
                query = "SELECT count(*) FROM statekernel_profile_entries WHERE key = 'c'"
                while not await other.fetchval(query):
                    await asyncio.sleep(0.02)
                proxy.cut()
                proxy.resume()
                with caplog.at_level(logging.INFO, logger="statekernel"):
                    outcomes = await asyncio.wait_for(
                        asyncio.gather(*calls, return_exceptions=True), 30
                    )
            finally:
                await other.close()
            stored = {e.key: (e.value, e.version) for e in await store.list("ns")}
    assert [(o.key, o.version) for o in outcomes[:3] if isinstance(o, Entry)] == [
        ("a", 1),
        ("b", 2),
        ("c", 1),
    ]
    conflict = outcomes[3]
    assert isinstance(conflict, VersionConflict)
    assert str(conflict) == str(VersionConflict("ns", "d", 7, 1))
    assert stored == {"a": (1, 1), "b": (1, 2), "c": (1, 1), "d": (0, 1)}
    said = [r.getMessage() for r in caplog.records if "set of 3 entries" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith(
        "was applied for 2 (entry 'b' in 'ns', entry 'c' in 'ns'); "
        "not applied for 1 (entry 'd' in 'ns')"
    ), said


async def test_a_batch_of_saves_left_without_an_answer_is_settled_thread_by_thread_in_the_log(
    server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """One statement saves a batch of threads, and moves only the heads still where their
    saves expect them. Here one thread's head is locked and then moved by another session
    while the batch waits past its deadline: the batch lands for the other thread only,
    and the store's next call says so in the log, thread by thread."""
    import asyncpg

    def one_record(revision: int) -> ThreadSave:
        return ThreadSave(revision=revision, records=(JournalEntry(revision, b"r%d" % revision),))

    dsn = await fresh_database(server)
    async with PostgresThreadStore(dsn, call_timeout=2, retry_for=1, pool_size=1) as store:
        for thread in ("t0", "t1", "t2"):
            await store.save(thread, one_record(1), expected_position=0)
        other = await asyncpg.connect(dsn)
        try:
            moving = other.transaction()
            await moving.start()
            await other.execute(
                "UPDATE statekernel_thread_heads SET position = position + 1 WHERE thread_id = 't1'"
            )
            # One connection: "t0" leaves alone, and "t1" and "t2", waiting meanwhile,
            # leave together, to wait on t1's head.
            outcomes = await asyncio.gather(
                *(store.save(t, one_record(2), expected_position=1) for t in ("t0", "t1", "t2")),
                return_exceptions=True,
            )
            assert outcomes[0] is None
            assert all("outcome unknown" in str(outcome) for outcome in outcomes[1:]), outcomes
            await moving.commit()  # t1's head moved on: the batch moves t2's only
            query = "SELECT position FROM statekernel_thread_heads WHERE thread_id = 't2'"
            while await other.fetchval(query) != 2:
                await asyncio.sleep(0.05)
        finally:
            await other.close()
        with caplog.at_level(logging.WARNING, logger="statekernel"):
            assert await store.threads() == ["t0", "t1", "t2"]  # asks what became of it
    said = [r.getMessage() for r in caplog.records if "save of 2 threads" in r.getMessage()]
    assert said == [
        "PostgreSQL store: the save of 2 threads whose call ended without an answer was "
        "applied for 1 (thread 't2'); not applied for 1 (thread 't1')"
    ]


async def test_calls_queued_behind_a_blocked_write_end_by_their_own_deadline(
    server: PostgresServer,
) -> None:
    """Writes of one entry land in call order, so while the first waits on another
    session's lock the rest wait their turn: each still ends within its own `call_timeout`
    (the first with its outcome unknown, the others not applied), and none lands later."""
    import asyncpg

    dsn = await fresh_database(server)
    async with PostgresProfileStore(dsn, call_timeout=2, retry_for=1) as store:
        await store.set("ns", "k", 1)
        other = await asyncpg.connect(dsn)
        try:
            locking = other.transaction()
            await locking.start()
            await other.execute(
                "SELECT * FROM statekernel_profile_entries WHERE key = 'k' FOR UPDATE"
            )

            async def timed_update() -> tuple[float, BaseException]:
                start = time.monotonic()
                with pytest.raises(StoreError) as raised:
                    await store.update("ns", "k", lambda e: e.value + 1)
                return time.monotonic() - start, raised.value

            ended = await asyncio.gather(*(timed_update() for _ in range(4)))
            assert max(took for took, _ in ended) <= 2 + 1
            unknown = [e for _, e in ended if isinstance(e, OutcomeUnknown)]
            assert len(unknown) == 1
            assert all("not applied" in str(e) for _, e in ended if e not in unknown)
            entry = await store.get("ns", "k")  # ends the blocked process, then asks
            await locking.commit()
        finally:
            await other.close()
        await asyncio.sleep(0.5)
        assert entry is not None and entry.value == 1
        again = await store.get("ns", "k")
        assert again is not None and again.value == 1


async def test_a_change_feed_says_unknown_after_a_restart_then_names_keys_again(
    server: PostgresServer,
) -> None:
    """The listening connection a restart broke is made again while `next()` waits; that
    `next()` returns None (notices may have been missed), and later writes are named."""
    dsn = await fresh_database(server)
    async with (
        PostgresProfileStore(dsn) as store,
        PostgresProfileStore(dsn) as writer,
        store.changes("inbox") as feed,
    ):
        await writer.set("inbox", "before", 1)
        assert await asyncio.wait_for(feed.next(), 30) == {"before"}
        waiting = asyncio.ensure_future(asyncio.wait_for(feed.next(), 90))
        await asyncio.to_thread(server.restart, "immediate")
        assert await waiting is None
        await writer.set("inbox", "after", 1)
        assert await asyncio.wait_for(feed.next(), 30) == {"after"}


async def test_a_change_feed_behind_pgbouncer_listens_on_the_server_itself(
    server: PostgresServer, pgbouncer: str
) -> None:
    """Transaction pooling cannot carry a LISTEN: `listen_dsn` names the server."""
    dsn = await fresh_database(server)
    database = dsn.rsplit("/", 1)[1]
    with throwaway_pgbouncer(pgbouncer, server.port, database, "transaction", 4) as pooled:
        async with (
            PostgresProfileStore(pooled, statement_cache_size=0, listen_dsn=dsn) as store,
            PostgresProfileStore(pooled, statement_cache_size=0) as writer,
            store.changes("inbox") as feed,
        ):
            await writer.set("inbox", "k", 1)
            assert await asyncio.wait_for(feed.next(), 30) == {"k"}
            await writer.update("inbox", "u", lambda entry: 1)
            assert await asyncio.wait_for(feed.next(), 30) == {"u"}


async def test_a_change_feed_on_a_read_only_server_listens_to_what_was_watched_before(
    server: PostgresServer,
) -> None:
    """Watching a namespace the first time is a write, which a read-only server refuses by
    name; one watched before is listened to (its writes would come from the primary)."""
    import asyncpg

    dsn = await fresh_database(server)
    async with PostgresProfileStore(dsn) as store, store.changes("inbox"):
        pass
    database = dsn.rsplit("/", 1)[1]
    conn = await asyncpg.connect(server.dsn)
    try:
        await conn.execute(f"ALTER DATABASE {database} SET default_transaction_read_only = on")
    finally:
        await conn.close()
    async with PostgresProfileStore(dsn) as store:
        with pytest.raises(StoreError, match="read-only") as refused:
            async with store.changes("outbox"):
                pass
        assert "listen_dsn" in str(refused.value)
        async with store.changes("inbox") as feed:
            writer = await asyncpg.connect(dsn)  # (as the primary's writes would arrive)
            try:
                async with writer.transaction():
                    await writer.execute("SET TRANSACTION READ WRITE")
                    await writer.execute(
                        "INSERT INTO statekernel_profile_entries VALUES "
                        "('inbox', 'k', '1', 1, 0, ARRAY[]::bytea[])"
                    )
            finally:
                await writer.close()
            assert await asyncio.wait_for(feed.next(), 30) == {"k"}


async def test_a_change_feed_waits_out_a_stopped_server_and_never_holds_up_a_close(
    server: PostgresServer,
) -> None:
    """While the server is away, a waiting `next()` keeps trying to listen again; closing
    the store meanwhile waits for no more than one try (`call_timeout`)."""
    dsn = await fresh_database(server)
    async with (
        PostgresProfileStore(dsn, call_timeout=2) as store,
        PostgresProfileStore(dsn) as writer,
        store.changes("inbox") as feed,
    ):
        waiting = asyncio.ensure_future(asyncio.wait_for(feed.next(), 120))
        await asyncio.to_thread(server.stop)
        try:
            await asyncio.sleep(1)  # (it tries, and tries again)
            assert not waiting.done()
            start = time.monotonic()
            await store.close()
            assert time.monotonic() - start <= 2 + 1
        finally:
            await asyncio.to_thread(server.start)
        assert await waiting is None
        await writer.set("inbox", "k", 1)
        assert await asyncio.wait_for(feed.next(), 30) == {"k"}


async def test_a_read_only_server_at_an_older_profile_schema_is_still_read(
    server: PostgresServer,
) -> None:
    """A replica of a primary not yet migrated: the store reads it as it is (it cannot
    migrate there), and a change feed says what it lacks."""
    import asyncpg

    dsn = await fresh_database(server)
    async with PostgresProfileStore(dsn) as store:
        await store.set("ns", "k", 1)
    database = dsn.rsplit("/", 1)[1]
    conn = await asyncpg.connect(dsn)
    try:  # as version 1 made it, then read-only
        await conn.execute("DROP FUNCTION statekernel_profile_watch(text)")
        await conn.execute("DROP FUNCTION statekernel_profile_notify() CASCADE")
        await conn.execute("DROP TABLE statekernel_profile_watched")
        await conn.execute(
            "UPDATE statekernel_schema SET version = 1 WHERE component = 'profile_store'"
        )
        await conn.execute(f"ALTER DATABASE {database} SET default_transaction_read_only = on")
    finally:
        await conn.close()
    async with PostgresProfileStore(dsn) as store:
        entry = await store.get("ns", "k")
        assert entry is not None and entry.value == 1
        with pytest.raises(StoreError, match="read-only"):
            await store.set("ns", "k", 2)
        with pytest.raises(StoreError, match="schema version 1"):
            async with store.changes("ns"):
                pass
