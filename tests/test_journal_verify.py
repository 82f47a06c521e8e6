"""`kernel.verify`: a replay that matches the thread, or names where tampering begins."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from journal_samples import (
    Count,
    Log,
    Mood,
    Step,
    counters,
    edit_snapshot,
    plugins,
    referring_keys,
    write_referring,
    written_before_the_chain,
)
from samples import Keys, commit_all, read

from statekernel import (
    CommitRecord,
    JournalCorrupted,
    JournalOp,
    Kernel,
    KeyScope,
    ReplayFailed,
    ReplayReport,
    StateCommand,
    StateKey,
    ThreadStore,
    UnknownThread,
)
from statekernel.stores import SqliteThreadStore


async def test_verify_rebuilds_the_thread_and_matches_it(
    thread_store_or_none: ThreadStore | None,
) -> None:
    kernel = Kernel(plugins(), thread_store=thread_store_or_none, snapshot_every=3)
    last = await commit_all(
        kernel, "t", *(StateCommand().update(Count, i).update(Log, (str(i),)) for i in range(8))
    )
    report = await kernel.verify("t")
    head = await kernel.state_at("t", last)
    assert report == ReplayReport(True, last, head.state_hash(), head_digest=report.head_digest)
    # A store's journal is chained: its digest at the head (a kernel's memory has none).
    assert report.head_digest.startswith(f"{last}:") == (thread_store_or_none is not None)
    with pytest.raises(UnknownThread):
        await kernel.verify("nobody")


async def test_verify_reports_an_apply_that_changed_meaning(
    thread_store_or_none: ThreadStore | None,
) -> None:
    class Doubling(StateKey[int, int]):
        key = "j.count"
        scope = KeyScope.THREAD

        @staticmethod
        def apply(value: int, update: int) -> int:
            return value + 2 * update

    kernel = Kernel(plugins(), thread_store=thread_store_or_none, snapshot_every=3)
    await commit_all(kernel, "t", *(StateCommand().update(Count, 1) for _ in range(5)))
    if thread_store_or_none is None:
        report = await kernel.verify("t")
        assert report.ok
        return
    changed = Kernel([Keys(Doubling, Log, Mood, Step)], thread_store=thread_store_or_none)
    report = await changed.verify("t")
    assert not report.ok and report.first_divergence == 1


# -- records changed on disk ---------------------------------------------------------------


async def test_a_record_changed_on_disk_or_stored_under_another_revision_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    async with SqliteThreadStore(path) as store:
        for thread in ("swapped", "changed"):
            kernel = Kernel(plugins(), thread_store=store)
            await commit_all(kernel, thread, *(StateCommand().update(Count, 1) for _ in range(3)))
    with sqlite3.connect(path) as raw:
        stored = dict(
            raw.execute(
                "SELECT revision, record FROM thread_records WHERE thread_id = 'swapped'"
            ).fetchall()
        )
        raw.execute(  # revision 2 holds revision 3's (intact) record
            "UPDATE thread_records SET record = ? WHERE thread_id = 'swapped' AND revision = 2",
            (stored[3],),
        )
        (data,) = raw.execute(
            "SELECT record FROM thread_records WHERE thread_id = 'changed' AND revision = 2"
        ).fetchone()
        forged = data.replace(b"\xa6update\xc4\x011", b"\xa6update\xc4\x017")  # 1 becomes 7
        assert forged != data
        raw.execute(
            "UPDATE thread_records SET record = ? WHERE thread_id = 'changed' AND revision = 2",
            (forged,),
        )
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store)
        for thread, problem in (
            ("swapped", "the store holds the record of revision 3 as revision 2"),
            ("changed", "the record of revision 2 was changed: the record after it names another"),
        ):
            readings: list[Callable[[str], Awaitable[Any]]] = [
                kernel.start_run,  # a load
                kernel.history,
                functools.partial(kernel.state_at, revision=3),
            ]
            for reading in readings:
                with pytest.raises(JournalCorrupted) as refused:
                    await reading(thread)
                error = refused.value
                assert (error.thread_id, error.revision, error.problem) == (thread, 2, problem)
            report = await kernel.verify(thread)
            assert not report.ok and report.first_divergence == 2
        assert (await kernel.state_at("changed", 1)).get(Count) == 1  # before it: still whole


async def test_verify_names_exactly_the_revision_of_a_record_changed_on_disk(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tamper.db"
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store, snapshot_every=4)
        commands = [StateCommand().update(Count, 1) for _ in range(10)]  # all write one key
        await commit_all(kernel, "t", *commands, checkpoints=True)
        assert (await kernel.verify("t")).ok
    for revision in (3, 10):  # one the snapshots cover, one in the tail a load replays
        with sqlite3.connect(path) as raw:  # the update 1 becomes 7 on disk
            (data,) = raw.execute(
                "SELECT record FROM thread_records WHERE thread_id = 't' AND revision = ?",
                (revision,),
            ).fetchone()
            forged = data.replace(b"\xa6update\xc4\x011", b"\xa6update\xc4\x017")
            assert forged != data
            raw.execute(
                "UPDATE thread_records SET record = ? WHERE thread_id = 't' AND revision = ?",
                (forged, revision),
            )
        async with SqliteThreadStore(path) as store:
            kernel = Kernel(plugins(), thread_store=store)
            report = await kernel.verify("t")
            assert not report.ok and report.first_divergence == 3 and report.revision == 10
            assert "from revision 3" in report.detail
    async with SqliteThreadStore(path) as store:  # the tail one also stops a load
        with pytest.raises(JournalCorrupted, match=r"from revision 10") as refused:
            await Kernel(plugins(), thread_store=store).start_run("t")
    assert refused.value.revision == 10


# -- snapshots changed on disk -------------------------------------------------------------


async def test_verify_finds_a_tampered_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "tamper.db"
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store, snapshot_every=4)
        await commit_all(
            kernel,
            "t",
            *(StateCommand().update(Mood, f"m{i}") for i in range(10)),
            checkpoints=True,
        )
    edit_snapshot(path, "t", 8, lambda values: values.update({"j.mood": b'"forged"'}))
    async with SqliteThreadStore(path) as store:
        report = await Kernel(plugins(), thread_store=store).verify("t")
    assert (report.ok, report.first_divergence) == (False, 8)  # its seal no longer matches
    assert "the snapshot at revision 8 does not match its seal" in report.detail
    # Resealed (by a forger who knows the format), replay still finds it: the journal
    # rebuilds another value there, first written after the snapshot at 4 by revision 5.
    edit_snapshot(path, "t", 8, lambda values: None, reseal=True)
    async with SqliteThreadStore(path) as store:
        report = await Kernel(plugins(), thread_store=store).verify("t")
    assert (report.ok, report.first_divergence) == (False, 5)


async def test_verify_finds_keys_missing_from_or_added_to_a_stored_snapshot(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tamper.db"
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store, snapshot_every=4)
        for thread in ("missing", "added"):
            commands = [StateCommand().update(Count, 1) for _ in range(8)]
            commands[0].update(Mood, "first")
            await commit_all(kernel, thread, *commands, checkpoints=True)  # snapshots: 4, 8

    def drop_count_and_mood(values: dict[str, bytes]) -> None:
        del values["j.count"], values["j.mood"]

    edit_snapshot(path, "missing", 4, drop_count_and_mood, reseal=True)
    edit_snapshot(
        path, "added", 8, lambda values: values.update({"j.log": b'["forged"]'}), reseal=True
    )
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store)
        missing = await kernel.verify("missing")
        assert (missing.ok, missing.first_divergence) == (False, 1)
        assert missing.detail == (
            "the journal rebuilds keys ['j.count', 'j.mood'] differently from what was stored at "
            "revision 4; the first commit after revision 0 that wrote one is revision 1"
        )
        added = await kernel.verify("added")
        assert (added.ok, added.first_divergence) == (False, 8)  # no commit wrote it
        assert "keys ['j.log']" in added.detail and "stored at revision 8" in added.detail


async def test_verify_finds_a_changed_item_in_a_snapshot_that_refers_to_an_older_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tamper.db"
    await write_referring(path, "t")

    def change_an_item(values: dict[str, bytes]) -> None:
        reference = msgspec.json.decode(values[Log.key])
        reference["items"] = ["forged"]  # as many items as before
        values[Log.key] = msgspec.json.encode(reference)

    edit_snapshot(path, "t", 3, change_an_item, reseal=True)
    async with SqliteThreadStore(path) as store:
        report = await Kernel(referring_keys(), thread_store=store).verify("t")
    assert (report.ok, report.first_divergence) == (False, 3)
    assert "keys ['j.log']" in report.detail and "stored at revision 3" in report.detail


async def test_verify_reports_a_stored_snapshot_value_that_does_not_decode(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tamper.db"
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store, snapshot_every=4)
        commands = [StateCommand().update(Count, 1) for _ in range(8)]
        await commit_all(kernel, "t", *commands, checkpoints=True)
    edit_snapshot(path, "t", 8, lambda values: values.update({"j.count": b'"eight"'}), reseal=True)
    async with SqliteThreadStore(path) as store:
        report = await Kernel(plugins(), thread_store=store).verify("t")
    assert (report.ok, report.first_divergence) == (False, 5)  # the records since revision 4
    assert report.detail.startswith(
        "stored value of key 'j.count' (record 't') does not decode into the declared type: "
        "ValidationError: Expected `int`, got `str`"
    )


async def test_an_op_stored_without_its_bytes_is_reported_never_replaced_by_a_default(
    tmp_path: Path,
) -> None:
    """A store written by a statekernel that kept some ops without their bytes (the value of
    a commit whose update did not encode): a load starts from the snapshot after it, but
    time travel between the op and that snapshot cannot rebuild the key and says so, and
    `verify` is not ok, naming the key and the revision."""
    path = tmp_path / "old.db"
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store, snapshot_every=4)
        commands = [StateCommand().update(Count, 1).update(Mood, f"m{i}") for i in range(6)]
        await commit_all(kernel, "t", *commands, checkpoints=True)  # snapshot at 4

    def without_bytes(record: CommitRecord) -> CommitRecord:
        if record.revision != 2:
            return record
        ops = tuple(JournalOp(op.key, "value") if op.key == Count.key else op for op in record.ops)
        return msgspec.structs.replace(record, ops=ops)

    written_before_the_chain(path, "t", without_bytes)
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store)
        assert (await kernel.state_at("t", 1)).get(Count) == 1
        with pytest.raises(ReplayFailed) as refused:
            await kernel.state_at("t", 3)
        assert (refused.value.key, refused.value.revision) == (Count.key, 3)
        assert "journaled without its bytes" in str(refused.value)
        assert (await kernel.state_at("t", 4)).get(Count) == 4  # the snapshot holds it
        assert await read(kernel, "t", Count) == 6
        report = await kernel.verify("t")
        assert (report.ok, report.first_divergence) == (False, 2)
        assert "'j.count'" in report.detail


async def test_a_fork_between_an_op_stored_without_its_bytes_and_its_snapshot_loads_the_rest(
    tmp_path: Path,
) -> None:
    """Forked between such ops and the snapshot after them, a thread holds them in the
    records its load replays: the keys they wrote are unknown there (never a value from
    before the op, never a default), and every other op of their records still replays."""
    path = tmp_path / "old.db"
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store, snapshot_every=4)
        commands = [StateCommand().update(Count, 1).update(Log, (f"l{i}",)) for i in (1, 2, 3)]
        commands[2].update(Mood, "m3")  # Mood's first op
        await commit_all(kernel, "t", *commands, StateCommand().update(Count, 1), checkpoints=True)

    def without_bytes(record: CommitRecord) -> CommitRecord:
        lost = {2: Count.key, 3: Mood.key}.get(record.revision)
        ops = tuple(JournalOp(op.key, "value") if op.key == lost else op for op in record.ops)
        return msgspec.structs.replace(record, ops=ops)

    written_before_the_chain(path, "t", without_bytes)
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store)
        await kernel.fork("t", 3, "fork")
        records = await kernel.history("fork")
        assert [[(op.key, op.update is None) for op in r.ops] for r in records] == [
            [(Count.key, False), (Log.key, False)],
            [(Count.key, True), (Log.key, False)],  # Count's op comes before another's
            [(Count.key, False), (Log.key, False), (Mood.key, True)],
        ]
        run = await kernel.start_run("fork")
        assert list(run.snapshot.get(Log)) == ["l1", "l2", "l3"]
        assert Count not in run.snapshot and Mood not in run.snapshot
        await run.abandon()
        assert await kernel.read_stored("fork", Count) is None
        assert list(await kernel.read_stored("fork", Log)) == ["l1", "l2", "l3"]


async def test_verify_skipping_stored_values_that_do_not_decode_still_names_every_other_key(
    tmp_path: Path,
) -> None:
    """With `restore_errors="skip"`, a stored value that no longer decodes is set aside; the
    keys checked after it in the same snapshot are still checked (many of each, so that the
    order the keys come in cannot hide one)."""
    keys = counters(24)
    unreadable, changed = keys[:12], keys[12:]
    path = tmp_path / "tamper.db"
    async with SqliteThreadStore(path) as store:
        command = StateCommand()
        for key in keys:
            command.update(key, 1)
        await commit_all(Kernel([Keys(*keys)], thread_store=store, snapshot_every=1), "t", command)

    def tamper(values: dict[str, bytes]) -> None:
        values.update({key.key: b'"one"' for key in unreadable})
        values.update({key.key: b"2" for key in changed})

    edit_snapshot(path, "t", 1, tamper, reseal=True)
    async with SqliteThreadStore(path) as store:
        kernel = Kernel([Keys(*keys)], thread_store=store, restore_errors="skip")
        report = await kernel.verify("t")
    assert (report.ok, report.first_divergence) == (False, 1)
    named = sorted(key.key for key in changed)
    assert report.detail.startswith(f"the journal rebuilds keys {named} differently from what")
