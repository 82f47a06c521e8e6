"""A thread key whose type changed: read what the thread stores, then migrate or drop it.

Explicitly (`kernel.read_stored`, `kernel.update_state(..., replacing=[K])`), rather than
starting runs with `restore_errors="skip"` and hoping."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from samples import Keys

from statekernel import DecodeFailed, Kernel, KeyScope, StateCommand, StateError, StateKey
from statekernel.stores import SqliteThreadStore


class NameV1(msgspec.Struct, frozen=True):
    full_name: str


class NameV2(msgspec.Struct, frozen=True):
    first: str
    last: str


class ProfileV1(StateKey[NameV1, NameV1]):
    key = "user.name"
    scope = KeyScope.THREAD
    default = NameV1("")


class ProfileV2(StateKey[NameV2, NameV2]):
    """The same key string, its type changed in a later release."""

    key = "user.name"
    scope = KeyScope.THREAD
    default = NameV2("", "")


class Visits(StateKey[int, int]):
    key = "user.visits"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


async def written_by_v1(store: SqliteThreadStore) -> None:
    run = await Kernel([Keys(ProfileV1, Visits, id="user")], thread_store=store).start_run("t1")
    await run.submit(StateCommand().update(ProfileV1, NameV1("Ada Lovelace")).update(Visits, 2))
    await run.finish()


async def test_a_changed_key_is_read_as_stored_and_migrated_in_one_commit(tmp_path: Path) -> None:
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        await written_by_v1(store)
        v2 = Kernel([Keys(ProfileV2, Visits, id="user")], thread_store=store)
        with pytest.raises(DecodeFailed, match="user.name"):
            await v2.start_run("t1")  # today's type cannot read it: nothing starts
        old = await v2.read_stored("t1", ProfileV1)  # read with the old declaration
        assert old == NameV1("Ada Lovelace")
        first, last = old.full_name.split(" ", 1)
        revision = await v2.update_state(
            "t1", StateCommand().update(ProfileV2, NameV2(first, last)), replacing=[ProfileV2]
        )
        assert await store.snapshot_at("t1", revision) is not None  # old records prunable
        run = await v2.start_run("t1")
        assert run.snapshot.get(ProfileV2) == NameV2("Ada", "Lovelace")
        assert run.snapshot.get(Visits) == 2 and run.snapshot.revision == revision
        await run.abandon()
        (record,) = await v2.history("t1", since=revision - 1)
        assert record.sources == ("external",)
        assert [op.kind for op in record.ops] == ["clear", "update"]


async def test_a_changed_key_can_be_dropped_and_starts_from_its_default(tmp_path: Path) -> None:
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        await written_by_v1(store)
        v2 = Kernel([Keys(ProfileV2, Visits, id="user")], thread_store=store)
        await v2.update_state("t1", StateCommand(), replacing=[ProfileV2])
        run = await v2.start_run("t1")
        assert ProfileV2 not in run.snapshot and run.snapshot.get(Visits) == 2
        await run.abandon()
        assert await v2.read_stored("t1", ProfileV2) is None
        assert await v2.read_stored("t1", ProfileV1) is None


class VisitsV2(StateKey[str, str]):
    key = "user.visits"  # its type changed too
    scope = KeyScope.THREAD


async def test_replacing_one_key_does_not_hide_another_that_no_longer_decodes(
    tmp_path: Path,
) -> None:
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        await written_by_v1(store)
        v2 = Kernel([Keys(ProfileV2, VisitsV2, id="user")], thread_store=store)
        with pytest.raises(StateError, match=r"\['user.visits'\] no longer decode either"):
            await v2.update_state("t1", StateCommand(), replacing=[ProfileV2])
        await v2.update_state("t1", StateCommand(), replacing=[ProfileV2, VisitsV2])
        run = await v2.start_run("t1")
        assert ProfileV2 not in run.snapshot and VisitsV2 not in run.snapshot
        await run.abandon()


async def test_read_stored_replays_the_journal_with_the_old_apply(tmp_path: Path) -> None:
    class Tally(StateKey[int, int]):
        key = "user.tally"
        scope = KeyScope.THREAD

        @staticmethod
        def apply(value: int, update: int) -> int:
            return value + update

    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        kernel = Kernel([Keys(Tally, id="user")], thread_store=store, snapshot_every=2)
        for _ in range(5):  # a snapshot and records after it
            await kernel.update_state("t1", StateCommand().update(Tally, 3))
        assert await kernel.read_stored("t1", Tally) == 15
        assert await Kernel([Keys(Tally, id="user")]).read_stored("t1", Tally) is None  # no store


class Note(StateKey[str, str]):
    key = "other.note"
    scope = KeyScope.THREAD


async def test_a_key_only_in_the_journal_is_replaced_beside_another_plugins_records(
    tmp_path: Path,
) -> None:
    # The thread has no snapshot yet, so both keys live in the journal alone; the migrating
    # kernel lacks the other plugin, so it cannot write a snapshot (it would hide the note).
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        v1 = Kernel(
            [Keys(ProfileV1, id="user"), Keys(Note, id="other")],
            thread_store=store,
            snapshot_every=1000,
        )
        await v1.update_state(
            "t1", StateCommand().update(ProfileV1, NameV1("Ada Lovelace")).update(Note, "hi")
        )
        v2 = Kernel([Keys(ProfileV2, id="user")], thread_store=store, snapshot_every=1000)
        old = await v2.read_stored("t1", ProfileV1)
        first, last = old.full_name.split(" ", 1)
        await v2.update_state(
            "t1", StateCommand().update(ProfileV2, NameV2(first, last)), replacing=[ProfileV2]
        )
        assert await store.snapshot_at("t1", 10) is None  # still journal only
        run = await v2.start_run("t1")  # today's type reads it: the old update is superseded
        assert run.snapshot.get(ProfileV2) == NameV2("Ada", "Lovelace")
        await run.submit(StateCommand().update(ProfileV2, NameV2("Ada", "King")))
        await run.finish()  # and the thread goes on saving
        both = Kernel([Keys(ProfileV2, id="user"), Keys(Note, id="other")], thread_store=store)
        run = await both.start_run("t1")
        assert run.snapshot.get(ProfileV2) == NameV2("Ada", "King")
        assert run.snapshot.get(Note) == "hi"
        await run.abandon()
        assert (await both.verify("t1")).ok
