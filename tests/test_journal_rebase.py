"""Saves that merge what commutes: two kernels on one thread, the later save rebases when
its commits only add to commutative keys, and conflicts as before otherwise."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

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
from statekernel.lowlevel import ThreadSave
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
