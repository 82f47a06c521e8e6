"""Time travel: `state_at` at every revision, pruning, and revisions that are not held."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from journal_samples import Count, Log, Mood, Total, edit_snapshot, plugins, thread_values
from samples import Keys, commit_all, read

from statekernel import (
    DecodeFailed,
    Kernel,
    KeyScope,
    StateCommand,
    StateKey,
    StateValidationError,
    ThreadStore,
    UnknownRevision,
    UnknownThread,
)
from statekernel.stores import SqliteThreadStore


async def test_state_at_every_revision_is_the_state_that_committed_then(
    thread_store_or_none: ThreadStore | None,
) -> None:
    kernel = Kernel(plugins(), thread_store=thread_store_or_none, snapshot_every=3)
    seen: dict[int, dict[str, Any]] = {0: {}}
    for run_number in range(3):
        run = await kernel.start_run("t")
        run.add_commit_listener(lambda s: seen.__setitem__(s.revision, thread_values(s)))
        for i in range(4):
            command = StateCommand().update(Count, i).update(Log, (f"{run_number}.{i}",))
            if i == 2:
                command.update(Mood, f"mood {run_number}")
            if i == 3 and run_number == 1:
                command.clear(Mood)
            await run.submit(command)
            if i % 2:
                await run.checkpoint()
        await run.finish()
    assert max(seen) == 12
    for revision, expected in seen.items():
        snapshot = await kernel.state_at("t", revision)
        assert snapshot.revision == revision
        assert thread_values(snapshot) == expected, revision


async def test_a_cleared_key_written_again_replays_loads_and_travels_to_its_new_value(
    thread_store_or_none: ThreadStore | None,
) -> None:
    kernel = Kernel(plugins(), thread_store=thread_store_or_none, snapshot_every=100)
    await commit_all(
        kernel,
        "t",
        StateCommand().update(Mood, "first"),
        StateCommand().clear(Mood).update(Count, 1),  # a clear, then another key's op
        StateCommand().update(Mood, "again"),
        StateCommand().clear(Log),  # a key that holds no value
        checkpoints=True,
    )
    assert (await kernel.state_at("t", 2)).to_dict() == {"j.count": 1}
    expected = {"j.count": 1, "j.mood": "again"}
    assert thread_values(await kernel.state_at("t", 4)) == expected
    if thread_store_or_none is not None:  # a load replays every record: no snapshot was due
        run = await Kernel(plugins(), thread_store=thread_store_or_none).start_run("t")
        assert thread_values(run.snapshot) == expected
        await run.abandon()
    assert (await kernel.verify("t")).ok


async def test_revisions_never_reached_or_pruned_are_unknown(
    thread_store_or_none: ThreadStore | None,
) -> None:
    kernel = Kernel(plugins(), thread_store=thread_store_or_none, snapshot_every=4)
    run = await kernel.start_run("t")
    for _ in range(10):
        await run.submit(StateCommand().update(Count, 1))
        await run.checkpoint()
    await run.finish()
    with pytest.raises(
        UnknownRevision, match=r"'t' has no revision 11: it holds revisions 0 to 10"
    ) as e:
        await kernel.state_at("t", 11)
    assert (e.value.thread_id, e.value.revision, e.value.held) == ("t", 11, (0, 10))
    with pytest.raises(UnknownThread, match=r"thread 'nobody' does not exist") as unknown:
        await kernel.state_at("nobody", 0)
    assert unknown.value.thread_id == "nobody"
    for call in (kernel.history("nobody"), kernel.verify("nobody"), kernel.get_state("nobody")):
        with pytest.raises(UnknownThread):
            await call
    with pytest.raises(UnknownThread):
        await kernel.fork("nobody", 0, "copy")
    with pytest.raises(ValueError, match=r"revision must be a revision"):
        await kernel.state_at("t", -1)
    with pytest.raises(ValueError, match=r"one of before=.* or keep="):
        await kernel.prune("t")
    with pytest.raises(ValueError, match=r"keep must be a count"):
        await kernel.prune("t", keep=-1)
    await kernel.prune("nobody", keep=3)
    await kernel.prune("t", keep=6)  # before revision 4: the newest snapshot at or before is 4
    assert [r.revision for r in await kernel.history("t")] == [5, 6, 7, 8, 9, 10]
    await kernel.prune("t", before=9)  # the newest snapshot at or before 9 is at 8
    for gone in (0, 3, 7):
        with pytest.raises(UnknownRevision, match=r"holds revisions 8 to 10"):
            await kernel.state_at("t", gone)
    for kept in (8, 9, 10):
        assert (await kernel.state_at("t", kept)).get(Count) == kept
    assert [r.revision for r in await kernel.history("t")] == [9, 10]
    assert (await kernel.verify("t")).ok
    nxt = await kernel.start_run("t")
    assert nxt.snapshot.get(Count) == 10  # a load never notices
    await nxt.abandon()


async def test_without_a_store_revision_0_of_a_known_thread_is_the_empty_state() -> None:
    kernel = Kernel([Keys(Total)])
    run = await kernel.start_run("t")
    await run.finish()
    assert (await kernel.state_at("t", 0)).to_dict() == {}
    assert (await kernel.verify("t")).ok


async def test_time_travel_refuses_a_stored_value_that_does_not_decode(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with SqliteThreadStore(path) as store:
        kernel = Kernel([Keys(Total)], thread_store=store, snapshot_every=2)
        await commit_all(
            kernel, "t", *(StateCommand().update(Total, 1) for _ in range(3)), checkpoints=True
        )
    # (resealed: a value whose declaration changed, not a tampered file)
    edit_snapshot(path, "t", 2, lambda values: values.update({"e.total": b'"two"'}), reseal=True)
    async with SqliteThreadStore(path) as store:
        kernel = Kernel([Keys(Total)], thread_store=store)
        with pytest.raises(DecodeFailed, match=r"'e\.total'"):
            await kernel.state_at("t", 3)
        await kernel.prune("t", before=2)
        report = await kernel.verify("t")
        assert not report.ok and "does not decode" in report.detail


class Appended(StateKey[list[str], str]):
    key = "e.appended"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: list[str], update: str) -> list[str]:
        value.append(update)  # changes its input: the kernel hands it a copy
        return value


async def test_without_a_store_time_travel_never_changes_what_it_travels_back_to() -> None:
    kernel = Kernel([Keys(Appended)], snapshot_every=2)
    await commit_all(
        kernel, "t", *(StateCommand().update(Appended, text) for text in "abc"), checkpoints=True
    )
    for _ in range(2):
        assert (await kernel.state_at("t", 2)).get(Appended) == ["a", "b"]
        assert (await kernel.state_at("t", 3)).get(Appended) == ["a", "b", "c"]
    await kernel.fork("t", 3, "copy")
    assert await read(kernel, "copy", Appended) == ["a", "b", "c"]
    assert (await kernel.verify("t")).ok
    assert (await kernel.state_at("copy", 2)).get(Appended) == ["a", "b"]


# -- a key whose type changed, migrated by a clear -----------------------------------------


class Place(StateKey[str, str]):
    key = "e.place"
    scope = KeyScope.THREAD


class PlaceNumber(StateKey[int, int]):
    """Place's key string, its type changed: the strings journaled before do not decode."""

    key = "e.place"
    scope = KeyScope.THREAD


async def test_updates_of_a_keys_old_type_before_the_clear_that_replaced_it_are_never_decoded(
    tmp_path: Path,
) -> None:
    async with SqliteThreadStore(tmp_path / "e.db") as store:
        old = Kernel([Keys(Mood, Place)], thread_store=store)
        await old.update_state("t", StateCommand().update(Mood, "calm").update(Place, "home"))
        new = Kernel([Keys(Mood, PlaceNumber)], thread_store=store)
        await new.update_state("t", StateCommand().update(PlaceNumber, 7), replacing=[PlaceNumber])
        records = await new.history("t")
        assert [[(op.key, op.kind) for op in r.ops] for r in records] == [
            [(Mood.key, "update"), (Place.key, "update")],  # the old update is not the first op
            [(Place.key, "clear"), (Place.key, "update")],
        ]
        assert (await new.verify("t")).ok  # replays both records: the old update superseded
        assert thread_values(await new.state_at("t", 2)) == {Mood.key: "calm", Place.key: 7}
        assert await read(new, "t", PlaceNumber) == 7


async def test_read_stored_refuses_a_journal_the_declaration_given_does_not_fit(
    tmp_path: Path,
) -> None:
    async with SqliteThreadStore(tmp_path / "e.db") as store:
        kernel = Kernel([Keys(Place)], thread_store=store)
        await kernel.update_state("t", StateCommand().update(Place, "home"))
        assert await kernel.read_stored("t", Place) == "home"
        with pytest.raises(DecodeFailed, match=r"'e\.place'") as refused:
            await kernel.read_stored("t", PlaceNumber)  # never None: the thread holds a value
        assert refused.value.key == Place.key


# -- values no op could journal, held in the kernel's memory -------------------------------


class Bag(StateKey[list[Any], Any]):
    """Takes an item to append in place (the kernel hands apply a copy), or a function of
    the value (which no codec can store)."""

    key = "e.bag"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: list[Any], update: Any) -> list[Any]:
        if callable(update):
            return list(update(value))
        value.append(update)
        return value


async def test_without_a_store_a_value_no_op_could_journal_is_replayed_as_a_copy() -> None:
    """A function that makes a value no codec stores (a complex number): the kernel's memory
    holds the value, replay starts from a copy of it, and the other ops of its commit replay
    too."""
    kernel = Kernel([Keys(Bag, Total)])
    await commit_all(
        kernel,
        "t",
        StateCommand().update(Bag, lambda value: [*value, 1j]).update(Total, 1),
        StateCommand().update(Bag, "x"),  # appended in place, to what replay holds then
        StateCommand().update(Total, 1),
    )
    assert [op.update for op in (await kernel.history("t"))[0].ops] == [None, b"1"]
    for _ in range(2):
        at_2 = await kernel.state_at("t", 2)
        assert (at_2.get(Bag), at_2.get(Total)) == ([1j, "x"], 1)
        assert (await kernel.state_at("t", 1)).get(Bag) == [1j]


async def test_without_a_store_time_travel_names_a_held_value_it_cannot_copy() -> None:
    kernel = Kernel([Keys(Bag, Total)])
    await commit_all(
        kernel,
        "t",
        StateCommand().update(Bag, lambda value: [*value, threading.Lock()]),
        StateCommand().update(Total, 1),  # the thread's snapshot is at revision 2
    )
    with pytest.raises(StateValidationError, match=r"'e\.bag'.*live resource") as refused:
        await kernel.state_at("t", 1)
    assert refused.value.key == Bag.key


async def test_export_state_reads_a_thread_without_its_declarations_as_far_as_its_bytes_go(
    tmp_path: Path,
) -> None:
    """A kernel that declares none of the keys (the command line's) shows each as the JSON
    its bytes hold: at a snapshot, the same as the writer; after a key's update ops, its
    value as of the newest snapshot before them, and that revision in `as_of`."""
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        writer = Kernel(plugins(), thread_store=store, snapshot_every=4)
        commands = []
        for i in range(40):
            command = StateCommand().update(Count, 1).update(Log, (f"line {i}",))
            if i % 7 == 3:
                command.update(Mood, f"mood {i}")
            if i == 30:
                command.clear(Mood)
            commands.append(command)
        head = await commit_all(writer, "t", *commands, checkpoints=True)
        reader = Kernel([], thread_store=store)
        whole = 0
        for revision in range(1, head + 1):
            typed = await writer.export_state("t", revision=revision)
            untyped = await reader.export_state("t", revision=revision)
            assert typed.revision == untyped.revision == revision and not typed.as_of
            for name, value in typed.values.items():
                if name in untyped.as_of:
                    then = await writer.export_state("t", revision=untyped.as_of[name])
                    assert untyped.values.get(name) == then.values.get(name), (revision, name)
                else:
                    assert untyped.values[name] == value, (revision, name)
            assert set(untyped.values) <= set(typed.values)
            if not untyped.as_of:  # a snapshot's revision: everything as the writer has it
                assert untyped.values == typed.values
                whole += 1
        assert whole >= 5
        cleared = await reader.export_state("t", revision=31)  # line 30's commit
        assert "j.mood" not in cleared.values and "j.mood" not in cleared.as_of
        assert (await reader.export_state("t", revision=30)).values["j.mood"] == "mood 24"
        assert (await writer.export_state("t")).values["j.log"][:2] == ["line 0", "line 1"]


async def test_export_without_declarations_names_the_key_whose_bytes_cannot_be_read(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    async with SqliteThreadStore(db) as store:
        writer = Kernel(plugins(), thread_store=store, snapshot_every=4)
        commands = [StateCommand().update(Count, 1).update(Log, (f"l{i}",)) for i in range(40)]
        head = await commit_all(writer, "t", *commands, checkpoints=True)
    assert head == 40  # a snapshot every 4 revisions; j.log's at 40 extends the one at 36

    def count_as(data: bytes) -> Callable[[dict[str, bytes]], None]:
        return lambda values: values.__setitem__("j.count", data)

    edit_snapshot(db, "t", 40, count_as(b"{no json"), reseal=True)
    async with SqliteThreadStore(db) as store:
        with pytest.raises(DecodeFailed, match=r"'j\.count' \(record 't'\).*malformed"):
            await Kernel([], thread_store=store).export_state("t")
    edit_snapshot(db, "t", 40, count_as(b"40"), reseal=True)
    with sqlite3.connect(db) as raw:  # the snapshot j.log's extends is gone, as a hand would
        raw.execute("DELETE FROM thread_snapshots WHERE thread_id = 't' AND revision = 36")
    async with SqliteThreadStore(db) as store:
        with pytest.raises(DecodeFailed, match=r"'j\.log' \(record 't'\).*revision 36"):
            await Kernel([], thread_store=store).export_state("t")
