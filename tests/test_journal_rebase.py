"""Saves that merge what commutes: two kernels on one thread, the later save rebases when
its commits only add to commutative keys, and conflicts as before otherwise."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from journal_samples import Count, Log, Mood, plugins
from samples import Keys, read

from statekernel import (
    Kernel,
    KeyScope,
    MergeStrategy,
    Rebase,
    RevisionConflict,
    StateCommand,
    StateKey,
    ThreadStore,
    Vector,
)
from statekernel.lowlevel import ThreadSave, ThreadState
from statekernel.stores import MemoryThreadStore, SqliteThreadStore


async def seeded(store: ThreadStore) -> None:
    kernel = Kernel(plugins(), thread_store=store)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Count, 10).update(Log, ("seed",)))
    await run.finish()


async def test_a_stale_save_of_commutative_ops_rebases_onto_the_newer_head(
    thread_store: ThreadStore,
) -> None:
    await seeded(thread_store)
    first = await Kernel(plugins(), thread_store=thread_store).start_run("t")
    second = await Kernel(plugins(), thread_store=thread_store).start_run("t")
    await first.submit(StateCommand().update(Count, 1).update(Log, ("first",)))
    await second.submit(StateCommand().update(Count, 2).update(Log, ("second",)))
    await second.submit(StateCommand().update(Count, 3))
    await first.finish()  # lands at revision 2
    await second.finish()  # stale: its two commits rebase after revision 2
    assert second.rebases == (Rebase(onto=2, revision=4, run_id="t:run-3"),)
    assert second.identity.run_id == "t:run-3"  # run-2 was the first kernel's
    assert (second.revision, second.snapshot.get(Count)) == (4, 16)
    reader = Kernel(plugins(), thread_store=thread_store)
    assert await read(reader, "t", Count) == 10 + 1 + 2 + 3
    assert await read(reader, "t", Log) == Vector(["seed", "first", "second"])
    history = await reader.history("t")
    assert [(r.revision, r.run_id) for r in history] == [
        (1, "t:run-1"),
        (2, "t:run-2"),
        (3, "t:run-3"),
        (4, "t:run-3"),
    ]
    assert (await reader.verify("t")).ok
    assert (await reader.state_at("t", 2)).get(Count) == 11  # the first writer's, as saved


async def test_a_rebased_run_goes_on_from_the_merged_state(thread_store: ThreadStore) -> None:
    await seeded(thread_store)
    first = await Kernel(plugins(), thread_store=thread_store).start_run("t")
    second = await Kernel(plugins(), thread_store=thread_store).start_run("t")
    await first.submit(StateCommand().update(Count, 1))
    await first.finish()
    await second.submit(StateCommand().update(Count, 5))
    await second.checkpoint()  # rebases mid-run
    assert second.snapshot.get(Count) == 16 and second.revision == 3
    await second.submit(StateCommand().update(Mood, "calm"))  # exclusive, but nobody raced
    await second.finish()
    reader = Kernel(plugins(), thread_store=thread_store)
    assert await read(reader, "t", Count) == 16
    assert await read(reader, "t", Mood) == "calm"
    assert (await reader.verify("t")).ok


async def test_a_stale_save_with_an_exclusive_op_still_conflicts_and_stores_nothing(
    thread_store: ThreadStore,
) -> None:
    await seeded(thread_store)
    first = await Kernel(plugins(), thread_store=thread_store).start_run("t")
    second = await Kernel(plugins(), thread_store=thread_store).start_run("t")
    await first.submit(StateCommand().update(Mood, "first"))
    await second.submit(StateCommand().update(Count, 1).update(Mood, "second"))
    await first.finish()
    with pytest.raises(RevisionConflict):
        await second.checkpoint()
    assert second.rebases == ()
    await second.abandon()
    reader = Kernel(plugins(), thread_store=thread_store)
    assert await read(reader, "t", Mood) == "first"
    assert await read(reader, "t", Count) == 10  # nothing of the second run
    assert [r.revision for r in await reader.history("t")] == [1, 2]


class Bounded(StateKey[int, int]):
    """A commutative count that must stay at most 3."""

    key = "r.bounded"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update

    @staticmethod
    def validate(value: int) -> None:
        if value > 3:
            raise ValueError(f"{value} is over 3")


async def test_a_merged_value_that_validate_refuses_is_a_revision_conflict(
    thread_store: ThreadStore,
) -> None:
    """Each save alone is valid, the merge is not: the later save conflicts as it would
    have before, and nothing of it is stored."""
    first = await Kernel([Keys(Bounded)], thread_store=thread_store).start_run("b")
    second = await Kernel([Keys(Bounded)], thread_store=thread_store).start_run("b")
    await first.submit(StateCommand().update(Bounded, 2))
    await second.submit(StateCommand().update(Bounded, 2))
    await first.finish()
    with pytest.raises(RevisionConflict) as refused:
        await second.checkpoint()
    conflict = refused.value
    assert (conflict.expected, conflict.actual, conflict.position) == (0, 1, True)
    assert str(conflict).startswith(
        "thread save expected the thread's write position 0 but the store is at 1"
    )
    assert "could not be applied after the newer head (ValueError: 4 is over 3)" in str(conflict)
    await second.abandon()
    reader = Kernel([Keys(Bounded)], thread_store=thread_store)
    assert await read(reader, "b", Bounded) == 2
    assert (await reader.verify("b")).ok


async def test_a_merged_value_that_validate_accepts_lands(thread_store: ThreadStore) -> None:
    first = await Kernel([Keys(Bounded)], thread_store=thread_store).start_run("b")
    second = await Kernel([Keys(Bounded)], thread_store=thread_store).start_run("b")
    await first.submit(StateCommand().update(Bounded, 1))
    await second.submit(StateCommand().update(Bounded, 2))
    await first.finish()
    await second.finish()  # rebases: 1 + 2 is still at most 3
    assert second.rebases == (Rebase(onto=1, revision=2, run_id="b:run-2"),)
    reader = Kernel([Keys(Bounded)], thread_store=thread_store)
    assert await read(reader, "b", Bounded) == 3


async def test_a_stale_save_that_clears_a_commutative_key_conflicts(
    thread_store: ThreadStore,
) -> None:
    """Only updates commute: a clear (the value dropped whole) is not merged blind."""
    await seeded(thread_store)
    first = await Kernel(plugins(), thread_store=thread_store).start_run("t")
    second = await Kernel(plugins(), thread_store=thread_store).start_run("t")
    await first.submit(StateCommand().update(Count, 1))
    await second.submit(StateCommand().clear(Count))
    await first.finish()
    with pytest.raises(RevisionConflict):
        await second.checkpoint()
    assert second.rebases == ()
    await second.abandon()
    reader = Kernel(plugins(), thread_store=thread_store)
    assert await read(reader, "t", Count) == 11


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[2])
    from journal_samples import Count, Log, plugins
    from statekernel import Kernel, StateCommand
    from statekernel.stores import SqliteThreadStore

    async def main(path):
        async with SqliteThreadStore(path) as store:
            run = await Kernel(plugins(), thread_store=store).start_run("t")
            await run.submit(StateCommand().update(Count, 100).update(Log, ("other process",)))
            await run.finish()

    asyncio.run(main(sys.argv[1]))
    """
)


@pytest.mark.slow
async def test_two_processes_adding_to_one_thread_both_land(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    async with SqliteThreadStore(path) as store:
        await seeded(store)
        run = await Kernel(plugins(), thread_store=store).start_run("t")
        await run.submit(StateCommand().update(Count, 1).update(Log, ("this process",)))
        other = subprocess.run(  # saves the thread while this run is open
            [sys.executable, "-c", WRITER, str(path), str(Path(__file__).parent)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert other.returncode == 0, other.stderr
        await run.finish()
        assert [r.onto for r in run.rebases] == [2]
        reader = Kernel(plugins(), thread_store=store)
        assert await read(reader, "t", Count) == 111
        assert await read(reader, "t", Log) == Vector(["seed", "other process", "this process"])
        assert (await reader.verify("t")).ok


class CancellingStore(MemoryThreadStore):
    """Cancels `task` (the run's caller) during the `cancel_at`-th save, which then waits."""

    saves = 0
    cancel_at = 0
    task: asyncio.Task[object] | None = None

    async def save(self, thread_id: str, save: ThreadSave, *, expected_position: int) -> None:
        self.saves += 1
        if self.saves == self.cancel_at and self.task is not None:
            asyncio.get_running_loop().call_soon(self.task.cancel)
            await asyncio.sleep(0)
        await super().save(thread_id, save, expected_position=expected_position)


async def test_a_rebase_cut_short_by_a_cancel_still_moves_the_run_on() -> None:
    store = CancellingStore()
    await seeded(store)
    first = await Kernel(plugins(), thread_store=store).start_run("t")
    second = await Kernel(plugins(), thread_store=store).start_run("t")
    await first.submit(StateCommand().update(Count, 1))
    await first.finish()
    await second.submit(StateCommand().update(Count, 5))
    store.cancel_at = store.saves + 2  # its first attempt conflicts; the rebased one lands
    task = asyncio.current_task()
    assert task is not None
    store.task = task
    with pytest.raises(asyncio.CancelledError):
        await second.checkpoint()
    task.uncancel()
    assert (second.revision, second.snapshot.get(Count)) == (3, 16)
    assert [r.onto for r in second.rebases] == [2]
    assert second.identity.run_id == second.rebases[0].run_id == "t:run-3"  # renamed, too
    await second.submit(StateCommand().update(Count, 7))
    await second.finish()
    reader = Kernel(plugins(), thread_store=store)
    assert await read(reader, "t", Count) == 23
    assert (await reader.verify("t")).ok


async def test_a_save_onto_a_thread_deleted_meanwhile_conflicts(thread_store: ThreadStore) -> None:
    await seeded(thread_store)
    run = await Kernel(plugins(), thread_store=thread_store).start_run("t")
    await thread_store.delete("t")
    await run.submit(StateCommand().update(Count, 1))
    with pytest.raises(RevisionConflict):
        await run.finish()
    assert await thread_store.load("t") is None  # not brought back by a rebase


class TailStore(SqliteThreadStore):
    """A SQLite store that notes how the thread was read: whole (`load`), or from a
    revision on (`load_since`: the revision and how many records came back)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.loads = 0
        self.since: list[tuple[int, int]] = []

    async def load(self, thread_id: str) -> ThreadState | None:
        self.loads += 1
        return await super().load(thread_id)

    async def load_since(self, thread_id: str, since: int) -> ThreadState | None:
        state = await super().load_since(thread_id, since)
        self.since.append((since, 0 if state is None else len(state.records)))
        return state


async def test_a_rebase_reads_only_the_records_saved_since_its_revision(tmp_path: Path) -> None:
    async with TailStore(tmp_path / "long.db") as store:
        seeder = await Kernel(plugins(), thread_store=store).start_run("t")
        for _ in range(300):
            await seeder.submit(StateCommand().update(Count, 1))
        await seeder.finish()
        run = await Kernel(plugins(), thread_store=store).start_run("t")
        other = await Kernel(plugins(), thread_store=store).start_run("t")
        await other.submit(StateCommand().update(Count, 10))
        await other.submit(StateCommand().update(Log, ("other",)))
        await other.finish()
        loads = store.loads
        await run.submit(StateCommand().update(Count, 5))
        await run.finish()  # overtaken: it reads revisions 301 and 302, not the 302 of them
        assert store.since == [(300, 2)] and store.loads == loads
        assert run.rebases == (Rebase(onto=302, revision=303, run_id="t:run-3"),)
        reader = Kernel(plugins(), thread_store=store)
        assert await read(reader, "t", Count) == 315
        assert (await reader.verify("t")).ok


async def test_a_rebase_onto_a_newer_snapshot_reads_it(thread_store: ThreadStore) -> None:
    """The other kernel wrote a snapshot meanwhile: the rebase starts from it."""
    await seeded(thread_store)
    run = await Kernel(plugins(), thread_store=thread_store).start_run("t")
    other = await Kernel(plugins(), thread_store=thread_store, snapshot_every=2).start_run("t")
    for word in ("a", "b", "c"):
        await other.submit(StateCommand().update(Count, 1).update(Log, (word,)))
    await other.finish()  # 3 records since the seed: a snapshot at revision 4
    assert (await thread_store.snapshot_at("t", 4)) is not None
    await run.submit(StateCommand().update(Count, 100).update(Log, ("mine",)))
    await run.finish()
    assert [r.onto for r in run.rebases] == [4]
    reader = Kernel(plugins(), thread_store=thread_store)
    assert await read(reader, "t", Count) == 113
    assert await read(reader, "t", Log) == Vector(["seed", "a", "b", "c", "mine"])
    assert (await reader.verify("t")).ok


class Seen(StateKey[list[str], str]):
    """A commutative list whose `apply` changes the list it is given (commits hand it a
    copy)."""

    key = "r.seen"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: list[str], update: str) -> list[str]:
        value.append(update)
        return value


async def test_a_rebase_changes_no_value_the_run_handed_out(thread_store: ThreadStore) -> None:
    """Catching up applies the other kernel's records to the values the run holds: a value
    an `apply` changes in place is copied first, so an earlier snapshot still reads as it
    did."""
    seed = await Kernel([Keys(Seen)], thread_store=thread_store).start_run("s")
    await seed.submit(StateCommand().update(Seen, "seed"))
    await seed.finish()
    run = await Kernel([Keys(Seen)], thread_store=thread_store).start_run("s")
    early = run.snapshot
    other = await Kernel([Keys(Seen)], thread_store=thread_store).start_run("s")
    await other.submit(StateCommand().update(Seen, "theirs"))
    await other.finish()
    await run.submit(StateCommand().update(Seen, "mine"))
    await run.checkpoint()  # rebases
    assert early.get(Seen) == ["seed"]
    assert run.snapshot.get(Seen) == ["seed", "theirs", "mine"]
    await run.submit(StateCommand().update(Seen, "after"))
    await run.finish()
    reader = Kernel([Keys(Seen)], thread_store=thread_store)
    assert await read(reader, "s", Seen) == ["seed", "theirs", "mine", "after"]
    assert (await reader.verify("s")).ok


class RivalStore(MemoryThreadStore):
    """Before every save of `mine`, another kernel saves the thread first: that save is
    overtaken every time, however often it rebases."""

    mine: Kernel | None = None
    rival: Kernel | None = None
    _saving_rival = False

    async def save(self, thread_id: str, save: ThreadSave, *, expected_position: int) -> None:
        if self.rival is not None and not self._saving_rival:
            self._saving_rival = True
            try:
                run = await self.rival.start_run(thread_id)
                await run.submit(StateCommand().update(Count, 1))
                await run.finish()
            finally:
                self._saving_rival = False
        await super().save(thread_id, save, expected_position=expected_position)


@pytest.mark.slow
async def test_a_save_overtaken_every_time_gives_up_saying_how_often_it_tried() -> None:
    store = RivalStore()
    await seeded(store)
    run = await Kernel(plugins(), thread_store=store).start_run("t")
    await run.submit(StateCommand().update(Count, 5))
    store.rival = Kernel(plugins(), thread_store=store)
    with pytest.raises(RevisionConflict) as gave_up:
        await run.finish()
    conflict = gave_up.value
    assert conflict.position and conflict.expected == 1 and conflict.rebases == 64
    message = str(conflict)
    assert "again each of the 64 times its commutative ops were rebased" in message
    assert "gives up rebasing after 64 attempts or 10 s" in message
    assert "let fewer writers share the thread" in message
    store.rival = None
    await run.abandon()
    reader = Kernel(plugins(), thread_store=store)
    assert await read(reader, "t", Count) == 10 + 65  # the rival's 65 saves, none of the run's
    assert (await reader.verify("t")).ok


class Tags(StateKey[list[str], str]):
    """Commutative tags whose `apply` appends in place, as a user's might."""

    key = "j.tags"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: list[str], update: str) -> list[str]:
        value.append(update)
        return value


class OvertakesOnce(MemoryThreadStore):
    """Runs `before` just before the `at`-th save it is handed (another writer landing
    first), once."""

    def __init__(self) -> None:
        super().__init__()
        self.saves = 0
        self.at = 0
        self.before: Any = None

    async def save(self, thread_id: str, save: ThreadSave, *, expected_position: int) -> None:
        self.saves += 1
        if self.saves == self.at and self.before is not None:
            await self.before()
        await super().save(thread_id, save, expected_position=expected_position)


async def test_a_rebase_overtaken_again_applies_its_ops_once_even_when_apply_changes_in_place() -> (
    None
):
    """A rebase whose own save is overtaken by yet another writer rebases again, from the
    newer head: ops applied in place to a mutable value in the first try are not in the
    second's starting values, so each writer's tag is there once."""
    store = OvertakesOnce()
    kernels = [Kernel([Keys(Tags)], thread_store=store) for _ in range(3)]
    first = await kernels[0].start_run("t")
    await first.finish()  # the thread, with no tags
    a, b, c = [await k.start_run("t") for k in kernels]
    for run, tag in ((a, "a"), (b, "b"), (c, "c")):
        await run.submit(StateCommand().update(Tags, tag))
    await a.finish()  # lands
    store.at, store.before = store.saves + 2, c.finish  # b's rebase is overtaken by c
    await b.finish()  # overtaken (a), rebased, overtaken again (c), rebased again: lands
    tags = (await Kernel([Keys(Tags)], thread_store=store).get_state("t")).get(Tags)
    assert sorted(tags) == ["a", "b", "c"]
    assert (await kernels[0].verify("t")).ok
