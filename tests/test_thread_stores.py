"""The ThreadStore contract, held by both backends: round trip, compare-and-set on the
revision, emptied state saved as empty, and a file that says which schema it holds."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from statekernel import DecodeFailed, RevisionConflict, StoreError, ThreadStore
from statekernel.lowlevel import ThreadState
from statekernel.stores import MemoryThreadStore, SqliteThreadStore


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ThreadStore]:
    made: ThreadStore = (
        MemoryThreadStore() if request.param == "memory" else SqliteThreadStore(tmp_path / "t.db")
    )
    async with made:
        yield made


FULL = ThreadState(
    revision=7,
    values={"notes": b'["a","b"]', "mood": b'"calm"', "blob": bytes(range(256))},
    run_values={"step": b"3"},
    suspended=b'{"pending":["call-1"]}',
)


def test_both_backends_implement_the_protocol() -> None:
    assert isinstance(MemoryThreadStore(), ThreadStore)
    assert isinstance(SqliteThreadStore(":memory:"), ThreadStore)


def _at(state: ThreadState, position: int) -> ThreadState:
    return msgspec.structs.replace(state, position=position)


async def test_a_saved_state_loads_back_exactly(store: ThreadStore) -> None:
    assert await store.load("t1") is None
    await store.save("t1", FULL, expected_position=0)
    assert await store.load("t1") == _at(FULL, 1)
    assert await store.load("t2") is None


async def test_every_save_moves_the_write_position_by_one(store: ThreadStore) -> None:
    await store.save("t1", ThreadState(revision=2, values={"k": b"1"}), expected_position=0)
    await store.save("t1", ThreadState(revision=5, values={"k": b"2"}), expected_position=1)
    await store.save("t1", ThreadState(revision=5, values={"k": b"2"}), expected_position=2)
    loaded = await store.load("t1")
    assert loaded is not None
    assert (loaded.revision, loaded.values, loaded.position) == (5, {"k": b"2"}, 3)


async def test_the_position_given_in_a_saved_state_is_ignored(store: ThreadStore) -> None:
    await store.save("t1", ThreadState(revision=1, position=40), expected_position=0)
    loaded = await store.load("t1")
    assert loaded is not None and loaded.position == 1


async def test_a_stale_saver_gets_revision_conflict_and_changes_nothing(
    store: ThreadStore,
) -> None:
    await store.save("t1", ThreadState(revision=3, values={"k": b"new"}), expected_position=0)
    with pytest.raises(RevisionConflict, match=r"thread save expected the thread's write") as e:
        await store.save("t1", ThreadState(revision=2, values={"k": b"stale"}), expected_position=2)
    assert (e.value.expected, e.value.actual) == (2, 1)
    with pytest.raises(RevisionConflict):
        await store.save("t1", ThreadState(revision=9), expected_position=0)
    loaded = await store.load("t1")
    assert loaded is not None and loaded.values == {"k": b"new"} and loaded.position == 1


async def test_two_savers_that_loaded_the_same_position_cannot_both_win(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    async with SqliteThreadStore(path) as first, SqliteThreadStore(path) as second:
        await first.save("t", ThreadState(revision=1), expected_position=0)
        outcomes = await asyncio.gather(
            first.save("t", ThreadState(revision=2, values={"by": b"1"}), expected_position=1),
            second.save("t", ThreadState(revision=2, values={"by": b"2"}), expected_position=1),
            return_exceptions=True,
        )
        assert sum(isinstance(o, RevisionConflict) for o in outcomes) == 1
        loaded = await first.load("t")
        assert loaded is not None and loaded.revision == 2 and loaded.position == 2


async def test_an_emptied_state_is_saved_as_empty(store: ThreadStore) -> None:
    await store.save("t1", FULL, expected_position=0)
    await store.save("t1", ThreadState(revision=8), expected_position=1)
    loaded = await store.load("t1")
    assert loaded == ThreadState(revision=8, position=2)
    assert loaded is not None and loaded.values == {} and loaded.suspended is None


async def test_saves_that_carry_no_commit_still_cannot_both_land(store: ThreadStore) -> None:
    """Two savers at the same revision: the second one loaded the same position, so it
    loses even though neither committed anything (a suspension, a run that only ended)."""
    await store.save("t1", ThreadState(revision=0, values={"k": b"1"}), expected_position=0)
    await store.save("t1", ThreadState(revision=0, suspended=b"run-2"), expected_position=1)
    with pytest.raises(RevisionConflict):
        await store.save("t1", ThreadState(revision=0, values={"k": b"2"}), expected_position=1)
    loaded = await store.load("t1")
    assert loaded is not None and loaded.suspended == b"run-2"


async def test_delete_forgets_the_thread_and_is_a_no_op_when_absent(store: ThreadStore) -> None:
    await store.save("t1", FULL, expected_position=0)
    await store.delete("t1")
    await store.delete("t1")
    assert await store.load("t1") is None
    await store.save("t1", ThreadState(revision=1), expected_position=0)


async def test_bad_arguments_are_refused(store: ThreadStore) -> None:
    with pytest.raises(TypeError, match=r"ThreadState"):
        await store.save("t1", {"revision": 1}, expected_position=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"expected_position"):
        await store.save("t1", ThreadState(revision=1), expected_position=-1)
    assert await store.load("t1") is None


async def test_the_file_records_its_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "schema.db"
    async with SqliteThreadStore(path) as made:
        await made.save("t", ThreadState(revision=1), expected_position=0)
    with sqlite3.connect(path) as raw:
        rows = raw.execute("SELECT component, version FROM statekernel_schema").fetchall()
        assert rows == [("thread_store", 1)]
        raw.execute("UPDATE statekernel_schema SET version = 2")
    async with SqliteThreadStore(path) as made:
        with pytest.raises(StoreError, match=r"thread_store schema version 2.*Upgrade"):
            await made.load("t")


async def test_profile_and_thread_stores_can_share_one_file(tmp_path: Path) -> None:
    from statekernel.stores import SqliteProfileStore

    path = tmp_path / "both.db"
    async with SqliteThreadStore(path) as threads, SqliteProfileStore(path) as profiles:
        await threads.save("t", FULL, expected_position=0)
        await profiles.set("ns", "k", 1)
        assert await threads.load("t") == _at(FULL, 1)
    with sqlite3.connect(path) as raw:
        components = raw.execute("SELECT component FROM statekernel_schema ORDER BY 1").fetchall()
    assert components == [("profile_store",), ("thread_store",)]


async def test_a_state_that_no_longer_decodes_names_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    async with SqliteThreadStore(path) as made:
        await made.save("bad", FULL, expected_position=0)
        await made.save("good", FULL, expected_position=0)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE thread_states SET state = x'c1c1' WHERE thread_id = 'bad'")
    async with SqliteThreadStore(path) as made:
        with pytest.raises(DecodeFailed, match=r"'bad'"):
            await made.load("bad")
        assert await made.load("good") == _at(FULL, 1)


def test_a_saved_thread_survives_into_a_new_process(tmp_path: Path) -> None:
    path = tmp_path / "handover.db"
    writer = textwrap.dedent(
        f"""
        import asyncio
        from statekernel.lowlevel import ThreadState
        from statekernel.stores import SqliteThreadStore

        async def main():
            async with SqliteThreadStore({str(path)!r}) as store:
                state = ThreadState(revision=4, values={{"k": b'"from the child"'}})
                await store.save("t-handover", state, expected_position=0)

        asyncio.run(main())
        """
    )
    subprocess.run([sys.executable, "-c", writer], check=True, timeout=60)

    async def read_back() -> ThreadState | None:
        async with SqliteThreadStore(path) as store:
            loaded = await store.load("t-handover")
            await store.save("t-handover", ThreadState(revision=5), expected_position=1)
            return loaded

    loaded = asyncio.run(read_back())
    assert loaded == ThreadState(revision=4, values={"k": b'"from the child"'}, position=1)
