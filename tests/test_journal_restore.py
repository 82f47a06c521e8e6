"""Loading a thread whose keys a kernel declares otherwise, cannot decode, or does not know."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import msgspec
import pytest
from journal_samples import Count, Log, Mood, Notes, Scratch, Total, plugins
from samples import Keys, commit_all, read

from statekernel import (
    DecodeFailed,
    Kernel,
    KeyScope,
    ReplayFailed,
    StateCommand,
    StateKey,
    StateKeyOptions,
    ThreadStore,
    UnknownRevision,
    Vector,
)
from statekernel.stores import SqliteThreadStore

# -- keys this kernel does not know, or keeps otherwise ------------------------------------


async def test_ops_on_keys_this_kernel_does_not_know_are_kept_and_no_snapshot_hides_them(
    tmp_path: Path,
) -> None:
    async with SqliteThreadStore(tmp_path / "j.db") as store:
        both = Kernel(plugins(), thread_store=store, snapshot_every=2)
        await commit_all(
            both, "t", StateCommand().update(Mood, "a"), StateCommand().update(Mood, "b")
        )
        await commit_all(both, "t", StateCommand().update(Mood, "c"))  # a tail op on j.mood
        without_mood = Kernel([Keys(Count)], thread_store=store, snapshot_every=2)
        await commit_all(without_mood, "t", *(StateCommand().update(Count, 1) for _ in range(3)))
        loaded = await store.load("t")
        assert loaded is not None and loaded.snapshot_revision == 2  # no newer snapshot
        run = await both.start_run("t")
        assert (run.snapshot.get(Mood), run.snapshot.get(Count)) == ("c", 3)
        await run.abandon()
        assert (await both.verify("t")).ok


@pytest.mark.parametrize(
    "options", [StateKeyOptions(persistent=False), StateKeyOptions(scope=KeyScope.RUN)]
)
async def test_a_kernel_keeping_a_key_otherwise_does_not_hide_its_newer_records(
    thread_store: ThreadStore, options: StateKeyOptions
) -> None:
    owner = Kernel([Keys(Notes, Total)], thread_store=thread_store, snapshot_every=2)
    await commit_all(
        owner,
        "t",
        StateCommand().update(Total, 1),
        StateCommand().update(Total, 1),
        checkpoints=True,
    )
    run = await owner.start_run("t")
    await run.submit(StateCommand().update(Notes, "after the snapshot"))
    await run.finish()
    other = Kernel(
        [Keys(Notes, Total, options={Notes: options})], thread_store=thread_store, snapshot_every=1
    )
    await commit_all(other, "t", StateCommand().update(Total, 1), checkpoints=True)
    assert await read(owner, "t", Notes) == "after the snapshot"
    assert await read(owner, "t", Total) == 3


@pytest.mark.parametrize(
    "options", [StateKeyOptions(persistent=False), StateKeyOptions(scope=KeyScope.RUN)]
)
async def test_a_kernel_writing_a_key_it_keeps_otherwise_still_hides_nothing(
    thread_store: ThreadStore, options: StateKeyOptions
) -> None:
    owner = Kernel([Keys(Notes, Total)], thread_store=thread_store, snapshot_every=2)
    await commit_all(
        owner,
        "t",
        StateCommand().update(Total, 1),
        StateCommand().update(Total, 10),
        checkpoints=True,
    )
    await commit_all(
        owner, "t", StateCommand().update(Notes, "the owner's"), checkpoints=True
    )  # after the snapshot
    other = Kernel(
        [Keys(Notes, Total, options={Notes: options})], thread_store=thread_store, snapshot_every=1
    )
    await commit_all(
        other, "t", StateCommand().update(Notes, "mine").update(Total, 5), checkpoints=True
    )
    assert await read(owner, "t", Notes) == "the owner's"
    assert await read(owner, "t", Total) == 16
    assert (await owner.verify("t")).ok


class Lines(StateKey[Vector[str], tuple[str, ...]]):
    key = "e.lines"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[str], update: tuple[str, ...]) -> Vector[str]:
        return value.extend(update)


class Marks(Lines):
    key = "e.marks"


async def grow_lines(kernel: Kernel, thread: str) -> None:
    """Snapshots of Lines and Marks at every save: whole at 1, references to the last after."""
    many = tuple(f"l{i}" for i in range(100))
    more = [StateCommand().update(Lines, (f"l{i}",)).update(Marks, ("m",)) for i in range(3)]
    await commit_all(
        kernel,
        thread,
        StateCommand().update(Lines, many).update(Marks, many),
        *more,
        checkpoints=True,
    )


@pytest.mark.parametrize(
    "options", [StateKeyOptions(persistent=False), StateKeyOptions(scope=KeyScope.RUN)]
)
async def test_a_vector_snapshot_reference_of_a_key_kept_otherwise_is_left_to_its_owner(
    thread_store: ThreadStore, options: StateKeyOptions
) -> None:
    owner = Kernel([Keys(Lines, Marks, Total)], thread_store=thread_store, snapshot_every=1)
    await grow_lines(owner, "t")
    other = Kernel(
        [Keys(Lines, Marks, Total, options={Lines: options})],
        thread_store=thread_store,
        snapshot_every=1,
    )
    run = await other.start_run("t")
    assert Lines not in run.snapshot  # the stored one is the owner's, not this kernel's
    assert len(run.snapshot.get(Marks)) == 103
    await run.submit(StateCommand().update(Total, 1))
    await run.finish()  # a snapshot: it keeps the owner's bytes of Lines as they were
    assert len(await read(owner, "t", Lines)) == 103
    assert len(await read(owner, "t", Marks)) == 103
    report = await other.verify("t")
    assert report.ok and report.detail.endswith("['e.lines']")  # not rebuilt by this kernel


# -- values set aside at restore -----------------------------------------------------------


class NotesAsNumber(StateKey[int, int]):
    key = "e.notes"
    scope = KeyScope.THREAD


async def test_a_key_set_aside_at_restore_and_written_again_keeps_the_new_value(
    thread_store: ThreadStore, caplog: pytest.LogCaptureFixture
) -> None:
    await commit_all(
        Kernel([Keys(Notes, Total)], thread_store=thread_store),
        "t",
        StateCommand().update(Notes, "hello"),
        checkpoints=True,
    )
    lenient = Kernel(
        [Keys(NotesAsNumber, Total)],
        thread_store=thread_store,
        restore_errors="skip",
        snapshot_every=3,
    )
    with caplog.at_level(logging.ERROR, logger="statekernel"):
        await commit_all(lenient, "t", StateCommand().update(NotesAsNumber, 5), checkpoints=True)
        assert await read(lenient, "t", NotesAsNumber) == 5
        assert (await lenient.state_at("t", 2)).get(NotesAsNumber) == 5
        for _ in range(10):
            await commit_all(lenient, "t", StateCommand().update(Total, 1), checkpoints=True)
    loaded = await thread_store.load("t")
    assert loaded is not None and loaded.revision == 12
    assert len(loaded.records) < 3  # snapshots go on: a load replays a bounded tail
    report = await lenient.verify("t")
    assert report.ok and "e.notes" in report.detail  # not rebuilt from its old bytes


class LinesAsNumbers(StateKey[Vector[int], tuple[int, ...]]):
    key = "e.lines"
    scope = KeyScope.THREAD


async def test_a_skipped_vector_starts_from_its_default_with_a_warning(
    thread_store: ThreadStore, caplog: pytest.LogCaptureFixture
) -> None:
    owner = Kernel([Keys(Lines)], thread_store=thread_store, snapshot_every=1)
    await commit_all(owner, "t", StateCommand().update(Lines, ("a",)), checkpoints=True)
    lenient = Kernel([Keys(LinesAsNumbers)], thread_store=thread_store, restore_errors="skip")
    with caplog.at_level(logging.WARNING, logger="statekernel"):
        assert await read(lenient, "t", LinesAsNumbers) == Vector()
    (warning,) = [r for r in caplog.records if r.name == "statekernel"]
    assert "'t'" in warning.getMessage() and "'e.lines'" in warning.getMessage()


# -- a clear of a key set aside at restore -------------------------------------------------


class MoodText(StateKey[str, str]):
    key = "t.mood"
    scope = KeyScope.THREAD


class MoodNumber(StateKey[int, int]):
    key = "t.mood"
    scope = KeyScope.THREAD


async def test_a_cleared_undecodable_key_stays_cleared(tmp_path: Path) -> None:
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        run = await Kernel([Keys(MoodText)], thread_store=store).start_run("t")
        await run.submit(StateCommand().update(MoodText, "calm"))
        await run.finish()
        lenient = Kernel([Keys(MoodNumber)], thread_store=store, restore_errors="skip")
        run = await lenient.start_run("t")
        await run.submit(StateCommand().clear(MoodNumber))
        await run.finish()
        run = await Kernel([Keys(MoodText)], thread_store=store).start_run("t")
        assert MoodText not in run.snapshot  # cleared, not resurrected from the old bytes
        await run.abandon()


# -- journaled updates this kernel cannot replay -------------------------------------------


class Amount(StateKey[int, int | str]):
    key = "e.amount"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int | str) -> int:
        return value + int(update)


class WholeAmount(StateKey[int, int]):
    """The same key string, now taking ints only: a journaled "2" no longer decodes."""

    key = "e.amount"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


async def test_a_journaled_update_that_no_longer_decodes_is_refused_or_set_aside(
    thread_store: ThreadStore,
) -> None:
    first = Kernel([Keys(Amount)], thread_store=thread_store, snapshot_every=1)
    await commit_all(first, "t", StateCommand().update(Amount, 1), checkpoints=True)
    later = Kernel([Keys(Amount)], thread_store=thread_store, snapshot_every=100)
    await commit_all(
        later,
        "t",
        StateCommand().update(Amount, "2"),
        StateCommand().update(Amount, 1),
        checkpoints=True,
    )
    loaded = await thread_store.load("t")
    assert loaded is not None and (loaded.snapshot_revision, len(loaded.records)) == (1, 2)
    strict = Kernel([Keys(WholeAmount)], thread_store=thread_store)
    for reading in (lambda: strict.start_run("t"), lambda: strict.state_at("t", 3)):
        with pytest.raises(DecodeFailed) as refused:
            await reading()
        error = refused.value
        assert (error.key, error.record) == ("e.amount", "t (journal, revision 2)")
        assert isinstance(error.cause, msgspec.ValidationError)
    lenient = Kernel([Keys(WholeAmount)], thread_store=thread_store, restore_errors="skip")
    run = await lenient.start_run("t")
    # Neither the snapshot's 1 nor 1 + the last update: unknown from revision 2 on.
    assert WholeAmount not in run.snapshot and run.snapshot.get(WholeAmount) == 0
    await run.abandon()


class PickyTotal(StateKey[int, int]):
    """The same key string as Total, with an apply that now refuses big steps."""

    key = "e.total"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        if update > 5:
            raise ValueError(f"a step of {update} is too big")
        return value + update


async def test_an_apply_that_now_raises_on_a_journaled_update_names_where(
    thread_store: ThreadStore,
) -> None:
    first = Kernel([Keys(Total)], thread_store=thread_store, snapshot_every=1)
    await commit_all(first, "t", StateCommand().update(Total, 1), checkpoints=True)
    later = Kernel([Keys(Total)], thread_store=thread_store, snapshot_every=100)
    await commit_all(
        later, "t", StateCommand().update(Total, 10), checkpoints=True
    )  # in the tail a load replays
    picky = Kernel([Keys(PickyTotal)], thread_store=thread_store)
    for reading in (lambda: picky.start_run("t"), lambda: picky.state_at("t", 2)):
        with pytest.raises(ReplayFailed) as refused:
            await reading()
        error = refused.value
        assert (error.thread_id, error.revision, error.key) == ("t", 2, "e.total")
        assert isinstance(error.cause, ValueError)
        assert "a step of 10 is too big" in str(error)
    report = await picky.verify("t")
    assert (report.ok, report.first_divergence) == (False, 2)


# -- threads saved before the journal ------------------------------------------------------


_VERSION_1 = """
CREATE TABLE statekernel_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL);
INSERT INTO statekernel_schema VALUES ('thread_store', 1);
CREATE TABLE thread_states (
    thread_id TEXT PRIMARY KEY, revision INTEGER NOT NULL, state BLOB NOT NULL,
    saved_at REAL NOT NULL
) WITHOUT ROWID;
"""


async def test_a_thread_saved_before_the_journal_loads_continues_and_travels(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v1.db"
    old = {
        "revision": 4,
        "values": {"j.count": b"7", "j.log": b'["a","b"]', "statekernel.run_count": b"2"},
        "run_values": None,
        "suspended": None,
    }
    with sqlite3.connect(path) as raw:
        raw.executescript(_VERSION_1)
        raw.execute(
            "INSERT INTO thread_states VALUES ('t', 4, ?, 0)", (msgspec.msgpack.encode(old),)
        )
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store)
        run = await kernel.start_run("t")
        assert run.identity.run_id == "t:run-3"  # the old run count goes on
        assert (run.revision, run.snapshot.get(Count), list(run.snapshot.get(Log))) == (
            4,
            7,
            ["a", "b"],
        )
        await run.submit(StateCommand().update(Count, 1))
        await run.finish()
        assert (await kernel.state_at("t", 4)).get(Count) == 7
        assert (await kernel.state_at("t", 5)).get(Count) == 8
        with pytest.raises(UnknownRevision, match=r"holds revisions 4 to 5"):
            await kernel.state_at("t", 3)
        assert [r.revision for r in await kernel.history("t")] == [5]
        report = await kernel.verify("t")
        assert report.ok and report.detail == ""  # the old run count is not a key left unread
        again = await Kernel(plugins(), thread_store=store).start_run("t")
        assert again.identity.run_id == "t:run-4" and again.snapshot.get(Count) == 8
        await again.abandon()


# -- deleted threads -----------------------------------------------------------------------


async def test_a_thread_deleted_from_the_store_starts_afresh_in_a_kernel_that_held_it(
    thread_store: ThreadStore,
) -> None:
    kernel = Kernel(
        [Keys(Scratch, Total, options={Scratch: StateKeyOptions(persistent=False)})],
        thread_store=thread_store,
    )
    await commit_all(
        kernel, "t", StateCommand().update(Total, 1).update(Scratch, 7), checkpoints=True
    )
    await thread_store.delete("t")
    run = await kernel.start_run("t")
    assert (run.revision, run.snapshot.to_dict()) == (0, {})
    await run.submit(StateCommand().update(Total, 2))
    await run.finish()
    assert await kernel.update_state("t", StateCommand().update(Total, 1)) == 2
    assert await read(Kernel([Keys(Total)], thread_store=thread_store), "t", Total) == 3
