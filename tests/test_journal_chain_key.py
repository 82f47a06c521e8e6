"""A keyed chain: whoever can write the store, but lacks the kernel's `chain_key`, cannot
forge a record and re-chain the journal after it unseen.

The forger here knows the format (docs/durability.md): they change a record and recompute
every link after it, and the head's seal, with BLAKE2b as an unkeyed chain computes them,
keeping the key id the head names. On an unkeyed thread that passes every check, which is
why the key exists; on a keyed one the load, `verify` and the command line name the forged
revision. Done to real SQLite files and to a real PostgreSQL database.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import msgspec
import pytest
from journal_samples import SEAL, Count, plugins, seal_of
from samples import commit_all, read

from statekernel import (
    Agent,
    AgentTeam,
    ChainKeyMismatch,
    ChainKeyMissing,
    InferenceResponse,
    JournalCorrupted,
    Kernel,
    Role,
    ScriptedModel,
    StateCommand,
    StateError,
    ThreadStore,
)
from statekernel.stores import PostgresThreadStore, SqliteThreadStore, embedded
from statekernel.testing.postgres import PostgresServer

KEY = bytes(range(32))
OTHER = bytes(range(100, 132))
HEAD = 35  # 35 commits of one count, snapshots at 10, 20 and 30

Rows = dict[int, bytes]


def unkeyed_link(data: bytes) -> bytes:
    """A record's link as an unkeyed chain computes it (docs/durability.md)."""
    return hashlib.blake2b(data, digest_size=16).digest()


def forged_body(data: bytes) -> bytes:
    """A record's bytes with its count update 1 made 7 (a record nobody committed)."""
    forged = data.replace(b"\xa6update\xc4\x011", b"\xa6update\xc4\x017")
    assert forged != data
    return forged


def rechained(rows: Rows, seal: bytes, forged: int) -> tuple[Rows, bytes]:
    """The records with `forged`'s body changed (its link to the record before it kept),
    every record after it and the head's seal re-linked the unkeyed way; the seal keeps
    whatever else it names (a keyed head's key id)."""
    out = dict(rows)
    out[forged] = forged_body(rows[forged])
    for revision in sorted(rows):
        if revision > forged:
            out[revision] = unkeyed_link(out[revision - 1]) + rows[revision][16:]
    items = msgspec.msgpack.decode(seal)
    items[0] = unkeyed_link(out[max(out)])
    return out, msgspec.msgpack.encode(items)


# -- the two stores, as a hand with the database's own client reaches them ---------------------


class Backend:
    """A real store, opened through statekernel or edited behind its back."""

    db: str  # as the command line names it

    def open(self) -> AbstractAsyncContextManager[ThreadStore]:
        raise NotImplementedError

    async def journal(self, thread: str) -> tuple[Rows, bytes]:
        """The thread's stored records and its head's seal."""
        raise NotImplementedError

    async def rewrite(self, thread: str, rows: Rows, seal: bytes) -> None:
        raise NotImplementedError


class Sqlite(Backend):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = str(path)

    def open(self) -> AbstractAsyncContextManager[ThreadStore]:
        return SqliteThreadStore(self.path)

    async def journal(self, thread: str) -> tuple[Rows, bytes]:
        with sqlite3.connect(self.path) as raw:
            rows = dict(
                raw.execute(
                    "SELECT revision, record FROM thread_records WHERE thread_id = ?", (thread,)
                )
            )
            (state,) = raw.execute(
                "SELECT state FROM thread_states WHERE thread_id = ?", (thread,)
            ).fetchone()
        return rows, msgspec.msgpack.decode(state)["seal"]

    async def rewrite(self, thread: str, rows: Rows, seal: bytes) -> None:
        with sqlite3.connect(self.path) as raw:
            for revision, data in rows.items():
                raw.execute(
                    "UPDATE thread_records SET record = ? WHERE thread_id = ? AND revision = ?",
                    (data, thread, revision),
                )
            (state,) = raw.execute(
                "SELECT state FROM thread_states WHERE thread_id = ?", (thread,)
            ).fetchone()
            head = msgspec.msgpack.decode(state)
            head["seal"] = seal
            raw.execute(
                "UPDATE thread_states SET state = ? WHERE thread_id = ?",
                (msgspec.msgpack.encode(head), thread),
            )


class Postgres(Backend):
    def __init__(self, dsn: str) -> None:
        self.dsn = self.db = dsn

    def open(self) -> AbstractAsyncContextManager[ThreadStore]:
        return PostgresThreadStore(self.dsn)

    async def journal(self, thread: str) -> tuple[Rows, bytes]:
        import asyncpg

        conn = await asyncpg.connect(self.dsn)
        try:
            found = await conn.fetch(
                "SELECT revision, record FROM statekernel_thread_records WHERE thread_id = $1",
                thread,
            )
            head = await conn.fetchval(
                "SELECT head FROM statekernel_thread_heads WHERE thread_id = $1", thread
            )
        finally:
            await conn.close()
        return {r["revision"]: bytes(r["record"]) for r in found}, msgspec.msgpack.decode(head)[
            "seal"
        ]

    async def rewrite(self, thread: str, rows: Rows, seal: bytes) -> None:
        import asyncpg

        conn = await asyncpg.connect(self.dsn)
        try:
            async with conn.transaction():
                for revision, data in rows.items():
                    await conn.execute(
                        "UPDATE statekernel_thread_records SET record = $1 "
                        "WHERE thread_id = $2 AND revision = $3",
                        data,
                        thread,
                        revision,
                    )
                blob = await conn.fetchval(
                    "SELECT head FROM statekernel_thread_heads WHERE thread_id = $1", thread
                )
                head = msgspec.msgpack.decode(blob)
                head["seal"] = seal
                await conn.execute(
                    "UPDATE statekernel_thread_heads SET head = $1 WHERE thread_id = $2",
                    msgspec.msgpack.encode(head),
                    thread,
                )
        finally:
            await conn.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """A SQLite file, then a fresh schema of the throwaway PostgreSQL server."""
    if request.param == "sqlite":
        yield Sqlite(tmp_path / "j.db")
        return
    import asyncpg

    server: PostgresServer = request.getfixturevalue("postgres_server")
    schema = f"chain_key_{os.getpid()}_{next(_schemas)}"
    conn = await asyncpg.connect(server.dsn)
    try:
        await conn.execute(f"CREATE SCHEMA {schema}")
    finally:
        await conn.close()
    yield Postgres(f"{server.dsn}?search_path={schema}")


_schemas = itertools.count()


async def write_thread(backend: Backend, key: bytes | None, thread: str = "t") -> None:
    async with backend.open() as store:
        kernel = Kernel(plugins(), thread_store=store, snapshot_every=10, chain_key=key)
        commands = [StateCommand().update(Count, 1) for _ in range(HEAD)]
        assert await commit_all(kernel, thread, *commands, checkpoints=True) == HEAD


async def forge(backend: Backend, revision: int, thread: str = "t") -> None:
    rows, seal = await backend.journal(thread)
    await backend.rewrite(thread, *rechained(rows, seal, revision))


# -- the tests ---------------------------------------------------------------------------------


async def test_a_forgery_rechained_without_the_key_is_named_by_load_and_verify(
    backend: Backend,
) -> None:
    await write_thread(backend, KEY)
    await write_thread(backend, None, thread="unkeyed")
    await forge(backend, 33)
    await forge(backend, 33, thread="unkeyed")
    async with backend.open() as store:
        kernel = Kernel(plugins(), thread_store=store, chain_key=KEY)
        with pytest.raises(JournalCorrupted) as refused:
            await kernel.start_run("t")
        assert (refused.value.thread_id, refused.value.revision) == ("t", 33)
        assert "re-chained by someone without the thread's chain key" in str(refused.value)
        with pytest.raises(JournalCorrupted, match="revision 33"):
            await kernel.get_state("t")
        with pytest.raises(JournalCorrupted, match="revision 33"):
            await kernel.history("t")
        report = await kernel.verify("t")
        assert (report.ok, report.first_divergence, report.keyed) == (False, 33, True)
        # The same forgery passes every check of an unkeyed chain: what the key is for.
        assert await read(kernel, "unkeyed", Count) == HEAD + 6
        report = await kernel.verify("unkeyed")
        assert (report.ok, report.keyed) == (True, False)


async def test_a_forgery_before_the_newest_snapshot_is_named_by_verify(tmp_path: Path) -> None:
    backend = Sqlite(tmp_path / "j.db")
    await write_thread(backend, KEY)
    await forge(backend, 12)
    async with backend.open() as store:
        kernel = Kernel(plugins(), thread_store=store, chain_key=KEY)
        report = await kernel.verify("t")
        assert (report.ok, report.first_divergence) == (False, 12), report.detail
        with pytest.raises(JournalCorrupted):
            await kernel.start_run("t")  # the snapshot at 30 no longer meets record 31


async def test_a_snapshot_resealed_without_the_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    await write_thread(Sqlite(path), KEY)
    with sqlite3.connect(path) as raw:
        (blob,) = raw.execute(
            "SELECT snapshot FROM thread_snapshots WHERE thread_id = 't' AND revision = 30"
        ).fetchone()
        values = msgspec.msgpack.decode(blob, type=dict[str, bytes])
        values[Count.key] = b"999"
        values[SEAL] = seal_of("t", values, 30)  # the unkeyed digest, as the docs define it
        raw.execute(
            "UPDATE thread_snapshots SET snapshot = ? WHERE thread_id = 't' AND revision = 30",
            (msgspec.msgpack.encode(values),),
        )
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store, chain_key=KEY)
        with pytest.raises(JournalCorrupted, match="snapshot at revision 30 does not match") as e:
            await kernel.start_run("t")
        assert e.value.revision == 30
        assert (await kernel.verify("t")).first_divergence == 30


async def test_a_keyed_thread_is_read_only_with_its_key(backend: Backend) -> None:
    await write_thread(backend, KEY)
    async with backend.open() as store:
        keyed = Kernel(plugins(), thread_store=store, chain_key=KEY)
        assert await read(keyed, "t", Count) == HEAD
        report = await keyed.verify("t")
        assert (report.ok, report.keyed) == (True, True)
        revision, _, digest = report.head_digest.partition(":")
        assert int(revision) == HEAD and len(bytes.fromhex(digest)) == 16

        unkeyed = Kernel(plugins(), thread_store=store)
        reads: list[Callable[[], Awaitable[object]]] = [
            lambda: unkeyed.start_run("t"),
            lambda: unkeyed.get_state("t"),
            lambda: unkeyed.state_at("t", 15),
            lambda: unkeyed.history("t"),
            lambda: unkeyed.verify("t"),
            lambda: unkeyed.fork("t", 20, "copy"),
        ]
        for reading in reads:
            with pytest.raises(ChainKeyMissing) as missing:
                await reading()
            assert isinstance(missing.value, StateError)
            assert missing.value.thread_id == "t"
            message = str(missing.value)
            assert "chain_key=" in message and "--chain-key-file" in message
            assert "STATEKERNEL_CHAIN_KEY" in message

        wrong = Kernel(plugins(), thread_store=store, chain_key=OTHER)
        with pytest.raises(ChainKeyMismatch) as mismatch:
            await wrong.start_run("t")
        assert isinstance(mismatch.value, JournalCorrupted)  # nothing of it can be trusted
        assert "another key than this kernel's" in str(mismatch.value)
        assert "revision" not in mismatch.value.problem  # the key, not a forged record
        assert mismatch.value.stored_key_id != mismatch.value.key_id
        report = await wrong.verify("t")
        assert (report.ok, report.keyed) == (False, True)
        assert "another key" in report.detail


async def test_unkeyed_threads_stay_readable_and_a_keyed_fork_keys_one(tmp_path: Path) -> None:
    backend = Sqlite(tmp_path / "j.db")
    await write_thread(backend, None)
    async with backend.open() as store:
        keyed = Kernel(plugins(), thread_store=store, chain_key=KEY)
        assert await commit_all(keyed, "t", StateCommand().update(Count, 1)) == HEAD + 1
        report = await keyed.verify("t")
        assert (report.ok, report.keyed) == (True, False)  # a thread keeps its kind of chain
        unkeyed = Kernel(plugins(), thread_store=store)
        assert await read(unkeyed, "t", Count) == HEAD + 1

        await keyed.fork("t", HEAD, "t-keyed")
        report = await keyed.verify("t-keyed")
        assert (report.ok, report.keyed) == (True, True)
        with pytest.raises(ChainKeyMissing):
            await unkeyed.start_run("t-keyed")
        assert await read(keyed, "t-keyed", Count) == HEAD
    # An unkeyed head's seal is the two-item array it always was (older readers read it).
    rows, seal = await backend.journal("t")
    assert msgspec.msgpack.decode(seal) == [unkeyed_link(rows[max(rows)]), 1]


async def test_a_kept_head_digest_catches_a_history_rewritten_whole(tmp_path: Path) -> None:
    """Without a key, a forger can re-chain everything; a head digest kept elsewhere still
    tells, even after the thread grew."""
    backend = Sqlite(tmp_path / "j.db")
    await write_thread(backend, None)
    async with backend.open() as store:
        kernel = Kernel(plugins(), thread_store=store)
        kept = (await kernel.verify("t")).head_digest
        assert kept.startswith(f"{HEAD}:")
        await commit_all(kernel, "t", StateCommand().update(Count, 1))
        report = await kernel.verify("t", expect_head=kept)
        assert report.ok and report.head_digest.startswith(f"{HEAD + 1}:")
    await forge(backend, 33)
    async with backend.open() as store:
        kernel = Kernel(plugins(), thread_store=store)
        assert (await kernel.verify("t")).ok  # the chain alone cannot tell
        report = await kernel.verify("t", expect_head=kept)
        assert (report.ok, report.first_divergence) == (False, 1)
        assert f"the kept head digest {kept} is not this journal's" in report.detail
        ahead = await kernel.verify("t", expect_head=f"{HEAD + 9}:{'0' * 32}")
        assert (ahead.ok, ahead.first_divergence) == (False, HEAD + 2)
        for bad in ("35", "x:00", f"0:{'0' * 32}", f"35:{'0' * 30}"):
            with pytest.raises(ValueError, match="head digest"):
                await kernel.verify("t", expect_head=bad)


def test_a_chain_key_is_bytes_of_16_to_64() -> None:
    """Each refusal says what was wrong and how to make a key."""
    with pytest.raises(TypeError) as text:
        Kernel([], chain_key=KEY.hex())  # type: ignore[arg-type]
    assert str(text.value) == (
        "chain_key must be bytes, not a str: give the key's bytes (e.g. bytes.fromhex(...) "
        "of the hex the command line reads, or secrets.token_bytes(32))"
    )
    with pytest.raises(TypeError) as number:
        Kernel([], chain_key=42)  # type: ignore[arg-type]
    assert str(number.value) == "chain_key must be bytes (e.g. secrets.token_bytes(32)), got int"
    for size in (0, 15, 65):
        with pytest.raises(ValueError) as wrong_size:
            Kernel([], chain_key=bytes(size))
        assert str(wrong_size.value) == (
            f"chain_key must be 16 to 64 bytes long, got {size} (secrets.token_bytes(32) makes one)"
        )
    assert Kernel([], chain_key=bytes(16)).chain_key == bytes(16)
    assert Kernel([], chain_key=bytearray(64)).chain_key == bytes(64)  # type: ignore[arg-type]
    assert Kernel([]).chain_key is None
    with pytest.raises(TypeError, match="not a str"):
        Agent([], ScriptedModel([]), chain_key="secret")  # type: ignore[arg-type]


async def test_agents_and_teams_chain_their_threads_with_the_key(tmp_path: Path) -> None:
    stores = embedded(tmp_path)
    async with stores:
        agent = Agent(
            [], ScriptedModel([InferenceResponse(text="ok")]), stores=stores, chain_key=KEY
        )
        await agent.run("solo", "hi")
        roles = {"helper": Role(model=ScriptedModel([InferenceResponse(text="done")] * 3))}
        async with AgentTeam(roles, stores=stores, chain_key=KEY) as team:
            team.spawn("helper", "help")
            await team.run_until_idle()
        assert agent.kernel.chain_key == KEY  # what a reader given the application takes
        assert all(team.agent(r).kernel.chain_key == KEY for r in team.roles)
        reader = Kernel([], thread_store=stores.thread_store)
        keyed = Kernel([], thread_store=stores.thread_store, chain_key=KEY)
        threads = await keyed.threads()
        assert "solo" in threads and len(threads) >= 2
        for thread in threads:
            with pytest.raises(ChainKeyMissing):
                await reader.get_state(thread)
            assert (await keyed.verify(thread)).keyed


# -- the command line ----------------------------------------------------------------------------


def cli(*args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STATEKERNEL_CHAIN_KEY"}
    if key is not None:
        env["STATEKERNEL_CHAIN_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "statekernel", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


@pytest.mark.slow
async def test_the_command_line_reads_and_verifies_with_the_key(
    backend: Backend, tmp_path: Path
) -> None:
    await write_thread(backend, KEY)
    db = backend.db
    key_file = tmp_path / "chain.key"
    key_file.write_text(KEY.hex() + "\n")

    done = cli("verify", db, "--thread", "t", "--json", "--chain-key-file", str(key_file))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["ok"], report["keyed"]) == (True, True)
    kept = report["head_digest"]
    assert kept.startswith(f"{HEAD}:")
    done = cli("verify", db, "--thread", "t", "--expect-head", kept, key=KEY.hex())
    assert done.returncode == 0, done.stderr
    assert f"head digest {kept} (keyed chain)" in done.stdout
    assert cli("show", db, "--thread", "t", key=KEY.hex()).returncode == 0

    missing = cli("show", db, "--thread", "t")
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "--chain-key-file" in missing.stderr
    listed = cli("threads", db, "--json")  # the keyed thread in its own row, the listing whole
    assert listed.returncode == 1, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert (row["thread_id"], row["status"]) == ("t", "keyed")
    assert "keyed: give its chain key" in cli("threads", db).stdout
    wrong = cli("verify", db, "--thread", "t", key=OTHER.hex())
    assert wrong.returncode == 1 and "another key" in wrong.stdout
    not_hex = cli("verify", db, "--thread", "t", key="not a key")
    assert not_hex.returncode == 2
    assert "STATEKERNEL_CHAIN_KEY is not hex" in not_hex.stderr
    assert "not a key" not in not_hex.stderr  # the text is never echoed

    await forge(backend, 33)
    done = cli("verify", db, "--thread", "t", "--chain-key-file", str(key_file))
    assert done.returncode == 1
    assert done.stdout.startswith("diverged at revision 33:")
    done = cli("verify", db, "--thread", "t", "--json", key=KEY.hex())
    report = json.loads(done.stdout)
    assert (report["ok"], report["first_divergence"], report["keyed"]) == (False, 33, True)
