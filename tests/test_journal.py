"""The journal as users rely on it: a record for every commit that moved the revision, with
its sources; checkpoints that persist what changed; history, time travel, forks, outside
updates, pruning and verified replay, in kernel memory and through both ThreadStores."""

from __future__ import annotations

import datetime
import functools
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from statekernel import (
    CommitRecord,
    CommitRejected,
    DecodeFailed,
    InvalidDeclaration,
    Kernel,
    KeyScope,
    MergeStrategy,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ReplayReport,
    RevisionConflict,
    ScheduledActionSpec,
    StateCommand,
    StateError,
    StateKey,
    StateKeyOptions,
    ThreadStore,
    ToolCall,
    ToolOutput,
    UnknownRevision,
    Vector,
)
from statekernel.stores import MemoryThreadStore, SqliteThreadStore


class Count(StateKey[int, int]):
    key = "j.count"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Log(StateKey[Vector[str], tuple[str, ...]]):
    key = "j.log"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: Vector[str], update: tuple[str, ...]) -> Vector[str]:
        return value.extend(update)


class Mood(StateKey[str, str]):
    key = "j.mood"
    scope = KeyScope.THREAD
    default = ""


class Step(StateKey[int, int]):
    """A run key: journaled in memory, never in a store, never rebuilt by replay."""

    key = "j.step"


class Note(ScheduledActionSpec[str]):
    key = "j.note"
    phase = Phase.STEP_END


class KeysOf(Plugin):
    def __init__(self, id: str = "keys", *keys: type[StateKey[Any, Any]]) -> None:
        self.id = id
        self.keys = keys or (Count, Log, Mood, Step)

    def register(self, r: PluginRegistrar) -> None:
        for key in self.keys:
            r.register_key(key)


class Hooks(Plugin):
    """Two hooks' worth of writes in one plugin per id, so merge order is visible."""

    def __init__(self, id: str, phase: Phase, make: Callable[[PhaseContext], StateCommand | None]):
        self.id = id
        self.phase = phase
        self.make = make

    def register(self, r: PluginRegistrar) -> None:
        r.register_phase_hook(self.phase, self.make)


class Noter(Plugin):
    id = "noter"

    def register(self, r: PluginRegistrar) -> None:
        r.register_action(Note, lambda text, ctx: StateCommand().update(Log, (text,)))


@pytest.fixture(params=["kernel memory", "memory store", "sqlite store"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ThreadStore | None]:
    if request.param == "kernel memory":
        yield None
        return
    made: ThreadStore = (
        MemoryThreadStore()
        if request.param == "memory store"
        else SqliteThreadStore(tmp_path / "j.db")
    )
    async with made:
        yield made


@pytest.fixture(params=["memory store", "sqlite store"])
async def a_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ThreadStore]:
    made: ThreadStore = (
        MemoryThreadStore()
        if request.param == "memory store"
        else SqliteThreadStore(tmp_path / "j.db")
    )
    async with made:
        yield made


def plugins(*extra: Plugin) -> list[Plugin]:
    return [KeysOf(), *extra]


async def commit_all(
    kernel: Kernel, thread: str, *commands: StateCommand, checkpoints: bool = False
) -> int:
    """Commit `commands` in one run; with `checkpoints`, save after each (a snapshot policy
    is applied at each save, so that is when snapshots are written)."""
    run = await kernel.start_run(thread)
    for command in commands:
        await run.submit(command)
        if checkpoints:
            await run.checkpoint()
    await run.finish()
    return run.revision


def thread_values(snapshot: Any) -> dict[str, Any]:
    return {k: v for k, v in snapshot.to_dict().items() if k != Step.key}


# -- records and their sources --------------------------------------------------------------


async def test_every_commit_that_moves_the_revision_is_one_record_with_its_sources(
    store: ThreadStore | None,
) -> None:
    hooks = [
        Hooks("a", Phase.STEP_START, lambda ctx: StateCommand().update(Count, 1)),
        Hooks(
            "b",
            Phase.STEP_START,
            lambda ctx: StateCommand().update(Count, 2).schedule(Note, "from b"),
        ),
        Hooks(
            "c", Phase.STEP_END, lambda ctx: StateCommand().update(Step, ctx.run.run_id.count("r"))
        ),
    ]
    kernel = Kernel(plugins(*hooks, Noter()), thread_store=store)
    run = await kernel.start_run("t")
    await run.run_phase(Phase.STEP_START)
    await run.run_phase(Phase.STEP_END)
    await run.submit(StateCommand().update(Mood, "calm"))
    tool = lambda args, ctx: ToolOutput("done", StateCommand().update(Log, ("tool",)))  # noqa: E731
    await run.handle_tool_call(ToolCall("call-1", "writer"), tool)
    await run.submit(StateCommand())  # moves nothing: no record
    await run.finish()
    records = await kernel.history("t")
    assert [r.revision for r in records] == [1, 2, 3, 4, 5]
    assert [r.sources for r in records] == [
        ("plugin:a", "plugin:b"),
        ("plugin:c",),
        ("action:j.note",),
        ("submit",),
        ("tool:writer",),
    ]
    assert [r.phase for r in records] == [
        Phase.STEP_START,
        Phase.STEP_END,
        Phase.STEP_END,
        None,
        None,
    ]
    assert [r.step for r in records] == [1, 1, 1, 1, 1]
    assert {r.run_id for r in records} == {"t:run-1"} and {r.thread_id for r in records} == {"t"}
    assert all(r.created_at.tzinfo is datetime.UTC for r in records)
    first = records[0]
    assert [(op.key, op.kind, op.update) for op in first.ops] == [
        ("j.count", "update", b"1"),
        ("j.count", "update", b"2"),
    ]
    run_key_journaled = any(op.key == Step.key for r in records for op in r.ops)
    assert run_key_journaled is (store is None)  # a store keeps persistent thread keys only
    assert [r.revision for r in await kernel.history("t", since=2, limit=2)] == [3, 4]


async def test_records_are_saved_with_the_checkpoint_and_a_cleared_key_is_a_clear_op(
    store: ThreadStore | None,
) -> None:
    kernel = Kernel(plugins(), thread_store=store)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Mood, "calm"))
    assert await kernel.history("t") == []  # not saved yet
    await run.checkpoint()
    assert [r.revision for r in await kernel.history("t")] == [1]
    await run.submit(StateCommand().clear(Mood))
    await run.abandon()  # never saved: never journaled
    assert [r.revision for r in await kernel.history("t")] == [1]
    run = await kernel.start_run("t")
    assert run.revision == 1 and run.snapshot.get(Mood) == "calm"
    await run.submit(StateCommand().clear(Mood))
    await run.finish()
    (cleared,) = await kernel.history("t", since=1)
    assert [(op.key, op.kind, op.update) for op in cleared.ops] == [("j.mood", "clear", None)]
    assert cleared.run_id == "t:run-2"


async def test_a_record_survives_its_encoding_exactly(tmp_path: Path) -> None:
    async with SqliteThreadStore(tmp_path / "j.db") as store:
        kernel = Kernel(plugins(), thread_store=store)
        await commit_all(kernel, "t", StateCommand().update(Log, ("a", "b")).update(Mood, "x"))
        (record,) = await Kernel(plugins(), thread_store=store).history("t")
    assert isinstance(record, CommitRecord)
    assert msgspec.json.decode(record.ops[0].update or b"") == ["a", "b"]
    assert record == msgspec.msgpack.decode(msgspec.msgpack.encode(record), type=CommitRecord)


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
        for thread, cause in (("swapped", ValueError), ("changed", msgspec.DecodeError)):
            readings: list[Callable[[str], Awaitable[Any]]] = [
                kernel.start_run,  # a load
                kernel.history,
                functools.partial(kernel.state_at, revision=3),
            ]
            for reading in readings:
                with pytest.raises(DecodeFailed) as refused:
                    await reading(thread)
                error = refused.value
                assert (error.key, error.record, error.revision) == (
                    "commit record",
                    f"{thread} (revision 2)",
                    2,
                )
                assert type(error.cause) is cause
            report = await kernel.verify(thread)
            assert not report.ok and report.first_divergence == 2
        assert str(error.cause) == "the record's bytes do not match its digest: changed"
        with pytest.raises(DecodeFailed, match=r"it says revision 3"):
            await kernel.history("swapped")


# -- what a checkpoint writes -----------------------------------------------------------------


async def test_a_checkpoint_writes_what_changed_not_what_the_thread_holds(tmp_path: Path) -> None:
    """The append-only promise: a Vector that grew by one item costs one item's bytes to
    persist, whether it held 10 items or 10,000."""
    sizes: dict[int, int] = {}
    for held in (10, 10_000):
        async with SqliteThreadStore(tmp_path / f"grow-{held}.db") as store:
            kernel = Kernel(plugins(), thread_store=store)
            run = await kernel.start_run("t")
            await run.submit(StateCommand().update(Log, tuple(f"m{i}" for i in range(held))))
            await run.checkpoint()
            await run.submit(StateCommand().update(Log, ("one more",)))
            await run.checkpoint()
            await run.abandon()
            (last,) = await store.records("t", since=1)
            loaded = await store.load("t")
            assert loaded is not None and loaded.values == {}  # no snapshot was rewritten
            sizes[held] = len(last.data)
    assert sizes[10] == sizes[10_000]


async def test_a_load_is_one_snapshot_plus_a_bounded_tail(a_store: ThreadStore) -> None:
    store = a_store
    kernel = Kernel(plugins(), thread_store=store, snapshot_every=5)
    run = await kernel.start_run("t")
    for i in range(12):
        await run.submit(StateCommand().update(Count, 1).update(Log, (str(i),)))
        await run.checkpoint()
    await run.finish()
    loaded = await store.load("t")
    assert loaded is not None
    assert (loaded.snapshot_revision, len(loaded.records)) == (10, 2)
    fresh = await Kernel(plugins(), thread_store=store).start_run("t")
    assert fresh.snapshot.get(Count) == 12 and list(fresh.snapshot.get(Log)) == [
        str(i) for i in range(12)
    ]
    await fresh.abandon()


def test_a_persistent_thread_key_whose_updates_cannot_be_journaled_is_refused() -> None:
    class Handle:
        pass

    class Live(StateKey[Any, Handle]):
        key = "j.live"
        scope = KeyScope.THREAD
        default = None

    with pytest.raises(InvalidDeclaration, match=r"'j\.live'.*Handle.*persistent=False"):
        Kernel([KeysOf("live", Live)])
    Kernel([_Volatile(Live)])  # in memory only it is fine

    class RunLive(StateKey[Any, Handle]):
        key = "j.run_live"
        default = None

    Kernel([KeysOf("run live", RunLive)])  # run keys are not journaled in a store


class _Volatile(Plugin):
    id = "volatile"

    def __init__(self, key: type[StateKey[Any, Any]]) -> None:
        self.key = key

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(self.key, StateKeyOptions(persistent=False))


class Cache(StateKey[int, int]):
    key = "j.cache"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


async def test_ops_of_a_non_persistent_key_are_journaled_in_this_kernels_memory_only(
    store: ThreadStore | None,
) -> None:
    kernel = Kernel([*plugins(), _Volatile(Cache)], thread_store=store, snapshot_every=2)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Count, 1).update(Cache, 10).update(Log, ("a",)))
    await run.submit(StateCommand().update(Cache, 5))
    await run.checkpoint()
    await run.submit(StateCommand().update(Count, 2))
    await run.finish()
    await kernel.prune("t", before=0)  # a prune that keeps everything keeps these too
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Cache, 1).update(Count, 1))
    await run.finish()

    records = await kernel.history("t")
    # This kernel's history has every op of the thread's keys, in the order applied...
    assert [[(op.key, op.update) for op in r.ops] for r in records] == [
        [("j.count", b"1"), ("j.cache", b"10"), ("j.log", b'["a"]')],
        [("j.cache", b"5")],
        [("j.count", b"2")],
        [("j.cache", b"1"), ("j.count", b"1")],
    ]
    assert (await kernel.verify("t")).ok
    if store is None:
        return
    # ...but the store never had the non-persistent key: another kernel sees the rest.
    other = Kernel([*plugins(), _Volatile(Cache)], thread_store=store)
    assert [[op.key for op in r.ops] for r in await other.history("t")] == [
        ["j.count", "j.log"],
        [],
        ["j.count"],
        ["j.count"],
    ]
    assert Cache.key not in (await other.state_at("t", 4)).to_dict()
    run = await other.start_run("t")
    assert run.snapshot.get(Count) == 4 and Cache.key not in run.snapshot.to_dict()
    await run.finish()
    await kernel.prune("t", keep=1)
    kept = await kernel.history("t")
    assert [r.revision for r in kept] == [r.revision for r in await other.history("t")]
    assert kept[0].revision > 1 and [op.key for op in kept[-1].ops] == ["j.cache", "j.count"]
    run = await kernel.start_run("t")
    assert run.snapshot.get(Cache) == 16  # the value itself lives on in this kernel
    await run.finish()


# -- time travel -----------------------------------------------------------------------------


async def test_state_at_every_revision_is_the_state_that_committed_then(
    store: ThreadStore | None,
) -> None:
    kernel = Kernel(plugins(), thread_store=store, snapshot_every=3)
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
    store: ThreadStore | None,
) -> None:
    kernel = Kernel(plugins(), thread_store=store, snapshot_every=100)
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
    if store is not None:  # a load replays every record: no snapshot was due
        run = await Kernel(plugins(), thread_store=store).start_run("t")
        assert thread_values(run.snapshot) == expected
        await run.abandon()
    assert (await kernel.verify("t")).ok


async def test_revisions_never_reached_or_pruned_are_unknown(store: ThreadStore | None) -> None:
    kernel = Kernel(plugins(), thread_store=store, snapshot_every=4)
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
    with pytest.raises(UnknownRevision, match=r"no saved history"):
        await kernel.state_at("nobody", 0)
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


async def test_a_fork_has_the_sources_state_and_history_up_to_its_revision(
    store: ThreadStore | None,
) -> None:
    kernel = Kernel(plugins(), thread_store=store, snapshot_every=2)
    await commit_all(kernel, "src", *(StateCommand().update(Log, (str(i),)) for i in range(5)))
    await kernel.fork("src", 3, "copy")
    copy = await kernel.state_at("copy", 3)
    assert list(copy.get(Log)) == ["0", "1", "2"]
    history = await kernel.history("copy")
    source = await kernel.history("src")
    assert [r.revision for r in history] == [1, 2, 3]
    assert [(r.ops, r.sources, r.run_id) for r in history] == [
        (r.ops, r.sources, r.run_id) for r in source[:3]
    ]
    assert {r.thread_id for r in history} == {"copy"}
    run = await kernel.start_run("copy")  # the fork continues from its own revision
    assert run.revision == 3 and list(run.snapshot.get(Log)) == ["0", "1", "2"]
    await run.submit(StateCommand().update(Log, ("fork only",)))
    await run.finish()
    assert list((await kernel.state_at("src", 5)).get(Log)) == ["0", "1", "2", "3", "4"]
    assert (await kernel.verify("copy")).ok and (await kernel.verify("src")).ok
    with pytest.raises(StateError, match=r"into 'copy': that thread already exists"):
        await kernel.fork("src", 1, "copy")
    with pytest.raises(UnknownRevision):
        await kernel.fork("src", 9, "other")


# -- commits from outside a run -----------------------------------------------------------------


async def test_update_state_commits_outside_a_run_and_is_journaled_as_external(
    store: ThreadStore | None,
) -> None:
    kernel = Kernel(plugins(Noter()), thread_store=store)
    await commit_all(kernel, "t", StateCommand().update(Count, 1))
    revision = await kernel.update_state("t", StateCommand().update(Count, 5).update(Mood, "fixed"))
    assert revision == 2
    (record,) = await kernel.history("t", since=1)
    assert (record.sources, record.run_id, record.phase) == (("external",), None, None)
    run = await kernel.start_run("t")
    assert (run.snapshot.get(Count), run.snapshot.get(Mood), run.revision) == (6, "fixed", 2)
    with pytest.raises(StateError, match=r"live run"):
        await kernel.update_state("t", StateCommand().update(Count, 1))
    await run.suspend()
    with pytest.raises(StateError, match=r"suspended run"):
        await kernel.update_state("t", StateCommand().update(Count, 1))
    resumed, _ = await kernel.resume_run("t")
    await resumed.finish()
    with pytest.raises(StateError, match=r"1 scheduled action.*nothing was committed"):
        await kernel.update_state("t", StateCommand().update(Count, 1).schedule(Note, "x"))
    with pytest.raises(StateError, match=r"'j\.step' is run-scoped"):
        await kernel.update_state("t", StateCommand().update(Step, 1))
    assert (await kernel.state_at("t", 2)).get(Count) == 6
    assert [r.revision for r in await kernel.history("t")] == [1, 2]
    assert await kernel.update_state("new", StateCommand().update(Mood, "born")) == 1


async def test_update_state_with_many_ops_commits_them_all_and_logs_no_error(
    store: ThreadStore | None, caplog: pytest.LogCaptureFixture
) -> None:
    kernel = Kernel(plugins(), thread_store=store)
    command = StateCommand()
    for i in range(70):  # more ops than a run's journal holds before making records
        command = command.update(Count, 1).update(Log, (str(i),))
    with caplog.at_level(logging.ERROR, logger="statekernel"):
        assert await kernel.update_state("t", command) == 1
    assert not [r for r in caplog.records if r.name.startswith("statekernel")]
    (record,) = await kernel.history("t")
    assert len(record.ops) == 140 and record.sources == ("external",)
    assert (await kernel.state_at("t", 1)).get(Count) == 70


# -- verified replay ---------------------------------------------------------------------------


async def test_verify_rebuilds_the_thread_and_matches_it(store: ThreadStore | None) -> None:
    kernel = Kernel(plugins(), thread_store=store, snapshot_every=3)
    last = await commit_all(
        kernel, "t", *(StateCommand().update(Count, i).update(Log, (str(i),)) for i in range(8))
    )
    report = await kernel.verify("t")
    head = await kernel.state_at("t", last)
    assert report == ReplayReport(True, last, head.state_hash())
    with pytest.raises(UnknownRevision):
        await kernel.verify("nobody")


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
            assert "revision 3" in report.detail and "changed" in report.detail
    async with SqliteThreadStore(path) as store:  # the tail one also stops a load
        with pytest.raises(DecodeFailed, match=r"revision 10") as refused:
            await Kernel(plugins(), thread_store=store).start_run("t")
    assert refused.value.revision == 10


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
    with sqlite3.connect(path) as raw:
        raw.execute(
            "UPDATE thread_snapshots SET snapshot = ? WHERE thread_id = 't' AND revision = 8",
            (msgspec.msgpack.encode({"j.mood": b'"forged"'}),),
        )
    async with SqliteThreadStore(path) as store:
        report = await Kernel(plugins(), thread_store=store).verify("t")
    assert not report.ok and report.first_divergence == 5  # first write of j.mood after 4


def edit_snapshot(
    path: Path, thread: str, revision: int, edit: Callable[[dict[str, bytes]], None]
) -> None:
    """Change a stored snapshot's values in the file, as a tampering hand would."""
    with sqlite3.connect(path) as raw:
        (blob,) = raw.execute(
            "SELECT snapshot FROM thread_snapshots WHERE thread_id = ? AND revision = ?",
            (thread, revision),
        ).fetchone()
        values = msgspec.msgpack.decode(blob, type=dict[str, bytes])
        edit(values)
        raw.execute(
            "UPDATE thread_snapshots SET snapshot = ? WHERE thread_id = ? AND revision = ?",
            (msgspec.msgpack.encode(values), thread, revision),
        )


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

    edit_snapshot(path, "missing", 4, drop_count_and_mood)
    edit_snapshot(path, "added", 8, lambda values: values.update({"j.log": b'["forged"]'}))
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

    edit_snapshot(path, "t", 3, change_an_item)
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
    edit_snapshot(path, "t", 8, lambda values: values.update({"j.count": b'"eight"'}))
    async with SqliteThreadStore(path) as store:
        report = await Kernel(plugins(), thread_store=store).verify("t")
    assert (report.ok, report.first_divergence) == (False, 5)  # the records since revision 4
    assert report.detail.startswith(
        "stored value of key 'j.count' (record 't') does not decode into the declared type: "
        "ValidationError: Expected `int`, got `str`"
    )


async def test_verify_reports_an_apply_that_changed_meaning(store: ThreadStore | None) -> None:
    class Doubling(StateKey[int, int]):
        key = "j.count"
        scope = KeyScope.THREAD

        @staticmethod
        def apply(value: int, update: int) -> int:
            return value + 2 * update

    kernel = Kernel(plugins(), thread_store=store, snapshot_every=3)
    await commit_all(kernel, "t", *(StateCommand().update(Count, 1) for _ in range(5)))
    if store is None:
        report = await kernel.verify("t")
        assert report.ok
        return
    changed = Kernel([KeysOf("keys", Doubling, Log, Mood, Step)], thread_store=store)
    report = await changed.verify("t")
    assert not report.ok and report.first_divergence == 1


# -- thread state no plugin of this kernel can replay ------------------------------------------


async def test_ops_on_keys_this_kernel_does_not_know_are_kept_and_no_snapshot_hides_them(
    tmp_path: Path,
) -> None:
    async with SqliteThreadStore(tmp_path / "j.db") as store:
        both = Kernel(plugins(), thread_store=store, snapshot_every=2)
        await commit_all(
            both, "t", StateCommand().update(Mood, "a"), StateCommand().update(Mood, "b")
        )
        await commit_all(both, "t", StateCommand().update(Mood, "c"))  # a tail op on j.mood
        without_mood = Kernel([KeysOf("keys", Count)], thread_store=store, snapshot_every=2)
        await commit_all(without_mood, "t", *(StateCommand().update(Count, 1) for _ in range(3)))
        loaded = await store.load("t")
        assert loaded is not None and loaded.snapshot_revision == 2  # no newer snapshot
        run = await both.start_run("t")
        assert (run.snapshot.get(Mood), run.snapshot.get(Count)) == ("c", 3)
        await run.abandon()
        assert (await both.verify("t")).ok


# -- threads saved before the journal ------------------------------------------------------------

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


# -- snapshots of a growing Vector ---------------------------------------------------------------


async def _grow(store: ThreadStore, steps: int, snapshot_every: int) -> Kernel:
    kernel = Kernel(plugins(), thread_store=store, snapshot_every=snapshot_every)
    run = await kernel.start_run("t")
    for i in range(steps):
        await run.submit(StateCommand().update(Log, (f"item {i:04}",)))
        await run.checkpoint()
    await run.finish()
    return kernel


async def test_snapshots_of_a_growing_vector_write_only_the_new_items(tmp_path: Path) -> None:
    """The bytes a thread's snapshots take grow with the items added, not with the square of
    the history's length: a snapshot of a Vector that only grew refers to the previous one."""
    async with SqliteThreadStore(tmp_path / "j.db") as store:
        await _grow(store, 400, snapshot_every=10)
        item = len(b'"item 0000",')
        snapshots = []
        revision = 400
        while (found := await store.snapshot_at("t", revision)) is not None:
            snapshots.append(found)
            revision = found.revision - 1
        assert len(snapshots) == 40
        total = sum(len(s.values[Log.key]) for s in snapshots)
        assert total < 6 * 400 * item  # whole values every time would be about 20 times this
        whole = [s.revision for s in snapshots if s.values[Log.key].startswith(b"[")]
        assert 2 <= len(whole) <= 10  # rewritten whole now and then (chains stay short)
        for revision in (1, 9, 10, 11, 205, 399, 400):
            value = (await Kernel(plugins(), thread_store=store).state_at("t", revision)).get(Log)
            assert list(value) == [f"item {i:04}" for i in range(revision)]
        fresh = await Kernel(plugins(), thread_store=store).start_run("t")
        assert len(fresh.snapshot.get(Log)) == 400
        await fresh.abandon()


async def test_pruning_keeps_the_snapshots_a_kept_one_refers_to(a_store: ThreadStore) -> None:
    store = a_store
    kernel = await _grow(store, 60, snapshot_every=2)
    await kernel.prune("t", before=55)
    for revision in (55, 58, 60):
        assert len((await kernel.state_at("t", revision)).get(Log)) == revision
    assert (await kernel.verify("t")).ok
    fresh = await Kernel(plugins(), thread_store=store).start_run("t")
    assert len(fresh.snapshot.get(Log)) == 60
    await fresh.submit(StateCommand().update(Log, ("after the prune",)))
    await fresh.finish()
    assert len((await kernel.state_at("t", 61)).get(Log)) == 61
    with pytest.raises(UnknownRevision):
        await kernel.state_at("t", 1)


def is_reference(data: bytes) -> bool:
    """Whether a Vector's snapshot bytes refer to an older snapshot (else: the whole array)."""
    return data.startswith(b'{"statekernel.extends"')


async def test_a_chain_of_references_is_cut_every_64_snapshots_whoever_writes_them(
    a_store: ThreadStore,
) -> None:
    """A read follows at most 63 references: one item added at every snapshot of a large
    Vector is written whole again every 64th snapshot, in one long run as in runs that each
    load what the last one saved."""
    store = a_store

    async def append(start: int, stop: int) -> None:
        kernel = Kernel(plugins(), thread_store=store, snapshot_every=1)
        items = [StateCommand().update(Log, (f"n{i}",)) for i in range(start, stop)]
        await commit_all(kernel, "t", *items, checkpoints=True)

    await commit_all(
        Kernel(plugins(), thread_store=store, snapshot_every=1),
        "t",
        StateCommand().update(Log, tuple(f"i{i}" for i in range(1000))),
    )
    await append(0, 139)  # one run, from a whole value: revisions 2 to 140
    for start in range(139, 160, 7):  # runs that each start from a reference
        await append(start, start + 7)
    kinds = ""
    for revision in range(1, 162):
        snapshot = await store.snapshot_at("t", revision)
        assert snapshot is not None and snapshot.revision == revision
        kinds += "r" if is_reference(snapshot.values[Log.key]) else "W"
    assert kinds == ("W" + "r" * 63) * 2 + "W" + "r" * 32
    fresh = await Kernel(plugins(), thread_store=store).start_run("t")
    assert len(fresh.snapshot.get(Log)) == 1160
    await fresh.abandon()


class Tags(StateKey[Vector[str], tuple[str, ...]]):
    key = "j.tags"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[str], update: tuple[str, ...]) -> Vector[str]:
        return value.extend(update)


async def test_each_vector_in_a_snapshot_is_written_as_what_it_added(a_store: ThreadStore) -> None:
    store = a_store
    keys = [KeysOf("keys", Count, Log, Tags)]  # a key that is no Vector comes first
    kernel = Kernel(keys, thread_store=store, snapshot_every=1)
    many = tuple(f"i{i}" for i in range(1000))
    first = StateCommand().update(Count, 1).update(Log, many).update(Tags, many)
    grown = [StateCommand().update(Count, 1).update(Tags, (f"t{i}",)) for i in range(3)]
    await commit_all(kernel, "t", first, *grown, checkpoints=True)
    for revision in (2, 3, 4):
        snapshot = await store.snapshot_at("t", revision)
        assert snapshot is not None
        log, tags = snapshot.values[Log.key], snapshot.values[Tags.key]
        assert is_reference(log) and is_reference(tags)
        assert len(log) < 80 and len(tags) < 80  # the unchanged one adds nothing, one tag adds one
    fresh = await Kernel(keys, thread_store=store).start_run("t")
    assert list(fresh.snapshot.get(Log)) == list(many)
    assert list(fresh.snapshot.get(Tags)) == [*many, "t0", "t1", "t2"]
    await fresh.abandon()


class Guarded(StateKey[Vector[str], tuple[str, ...]]):
    key = "j.guarded"
    scope = KeyScope.THREAD
    most = 10_000  # what validate accepts; a stricter kernel's key says less

    @classmethod
    def apply(cls, value: Vector[str], update: tuple[str, ...]) -> Vector[str]:
        return value.extend(update)

    @classmethod
    def validate(cls, value: Vector[str]) -> None:
        if len(value) > cls.most:
            raise ValueError(f"{len(value)} items, more than {cls.most}")


class StricterGuarded(Guarded):
    most = 50


async def test_a_vector_snapshot_that_refers_to_an_older_one_is_validated_too(
    a_store: ThreadStore,
) -> None:
    store = a_store
    kernel = Kernel([KeysOf("keys", Count, Guarded)], thread_store=store, snapshot_every=1)
    items = [StateCommand().update(Guarded, tuple(f"g{i}" for i in range(100)))]
    items += [StateCommand().update(Guarded, (f"more {i}",)) for i in range(3)]
    await commit_all(kernel, "t", *items, checkpoints=True)
    snapshot = await store.snapshot_at("t", 4)
    assert snapshot is not None and is_reference(snapshot.values[Guarded.key])
    stricter_keys = [KeysOf("keys", Count, StricterGuarded)]
    stricter = Kernel(stricter_keys, thread_store=store, snapshot_every=1)
    run = await stricter.start_run("t")
    await run.submit(StateCommand().update(Count, 1))  # Guarded is not touched
    with pytest.raises(CommitRejected) as caught:
        await run.checkpoint()  # its snapshot would only refer to the one at 4
    assert (caught.value.key, caught.value.stage) == ("j.guarded", "persist")
    await run.abandon()
    loaded = await store.load("t")
    assert loaded is not None and loaded.revision == 4  # nothing was saved


class Listed(StateKey[Vector[str], str]):
    """Declared a Vector, but its apply returns a list (values are not checked at commit)."""

    key = "j.listed"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[str], update: str) -> Vector[str]:
        return [*value, update]  # type: ignore[return-value]


async def test_a_list_in_a_key_declared_a_vector_is_snapshotted_whole(a_store: ThreadStore) -> None:
    store = a_store
    kernel = Kernel([KeysOf("keys", Listed)], thread_store=store, snapshot_every=1)
    commands = [StateCommand().update(Listed, f"x{i}") for i in range(6)]
    await commit_all(kernel, "t", *commands, checkpoints=True)
    snapshot = await store.snapshot_at("t", 6)
    assert snapshot is not None
    assert snapshot.values[Listed.key] == b'["x0","x1","x2","x3","x4","x5"]'
    fresh = await Kernel([KeysOf("keys", Listed)], thread_store=store).start_run("t")
    assert list(fresh.snapshot.get(Listed)) == [f"x{i}" for i in range(6)]
    await fresh.abandon()


class Points(StateKey[Vector[tuple[int, int]], tuple[int, int]]):
    key = "j.points"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[tuple[int, int]], update: tuple[int, int]) -> Vector[tuple[int, int]]:
        return value.append(update)


class Span(StateKey[tuple[int, int], tuple[int, int]]):
    key = "j.span"
    scope = KeyScope.THREAD
    default = (0, 0)


async def test_snapshots_of_typed_items_load_travel_and_verify_as_their_types(
    a_store: ThreadStore,
) -> None:
    store = a_store
    keys = [KeysOf("keys", Points, Span)]
    kernel = Kernel(keys, thread_store=store, snapshot_every=1)
    run = await kernel.start_run("t")
    for i in range(40):
        await run.submit(StateCommand().update(Points, (i, -i)).update(Span, (0, i)))
        await run.checkpoint()
    await run.finish()
    snapshot = await store.snapshot_at("t", 40)
    assert snapshot is not None and is_reference(snapshot.values[Points.key])
    fresh = Kernel(keys, thread_store=store)
    run = await fresh.start_run("t")
    assert run.snapshot.get(Points) == Vector((i, -i) for i in range(40))
    assert run.snapshot.get(Span) == (0, 39)
    await run.abandon()
    assert (await fresh.state_at("t", 30)).get(Points) == Vector((i, -i) for i in range(30))
    assert (await fresh.verify("t")).ok


async def test_a_fork_at_a_snapshot_that_refers_to_older_ones_stands_alone(
    a_store: ThreadStore,
) -> None:
    store = a_store
    kernel = await _grow(store, 35, snapshot_every=10)
    source = await store.snapshot_at("t", 30)
    assert source is not None and is_reference(source.values[Log.key])
    for revision in (30, 35):
        await kernel.fork("t", revision, f"copy {revision}")
    await store.delete("t")
    for revision in (30, 35):
        copy = f"copy {revision}"
        forked = await store.snapshot_at(copy, revision)
        assert forked is not None and forked.revision == 30
        assert not is_reference(forked.values[Log.key])  # it holds the whole array
        fresh = await Kernel(plugins(), thread_store=store).start_run(copy)
        assert list(fresh.snapshot.get(Log)) == [f"item {i:04}" for i in range(revision)]
        await fresh.abandon()
        assert (await kernel.verify(copy)).ok


def referring_keys() -> list[Plugin]:
    return [KeysOf("keys", Count, Log, Tags)]


async def write_referring(path: Path, *threads: str) -> None:
    """Snapshots at 1 (the whole values of Log and Tags) and at 2, 3 and 4 (each an item more
    than the one before, and referring to it)."""
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(referring_keys(), thread_store=store, snapshot_every=1)
        many = tuple(f"i{i}" for i in range(100))
        for thread in threads:
            grown = [
                StateCommand().update(Log, (f"l{i}",)).update(Tags, (f"t{i}",)) for i in range(3)
            ]
            first = StateCommand().update(Log, many).update(Tags, many)
            await commit_all(kernel, thread, first, *grown, checkpoints=True)
            snapshot = await store.snapshot_at(thread, 4)
            assert snapshot is not None and is_reference(snapshot.values[Log.key])


async def test_a_reference_to_a_snapshot_the_store_no_longer_holds_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    await write_referring(path, "gap", "gone")
    with sqlite3.connect(path) as raw:  # "gap" still holds an older snapshot, "gone" none
        raw.execute("DELETE FROM thread_snapshots WHERE thread_id = 'gap' AND revision = 3")
        raw.execute("DELETE FROM thread_snapshots WHERE thread_id = 'gone' AND revision < 4")
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(referring_keys(), thread_store=store)
        for thread in ("gap", "gone"):
            readings: list[Callable[[str], Awaitable[Any]]] = [
                kernel.start_run,
                functools.partial(kernel.state_at, revision=4),
            ]
            for reading in readings:
                with pytest.raises(DecodeFailed) as refused:
                    await reading(thread)
                error = refused.value
                assert (error.key, error.record) == ("j.log", thread)
                assert type(error.cause) is ValueError and str(error.cause) == (
                    "its snapshot extends the one at revision 3, which the store no longer holds"
                )
        lenient = Kernel(
            referring_keys(), thread_store=store, restore_errors="skip", snapshot_every=1
        )
        with pytest.raises(DecodeFailed) as refused:  # a fork must stand alone
            await lenient.fork("gap", 4, "copy")
        assert (refused.value.key, refused.value.record) == ("j.log", "gap")
        before = await store.snapshot_at("gap", 4)
        run = await lenient.start_run("gap")
        assert Log not in run.snapshot and Tags not in run.snapshot  # set aside
        await run.submit(StateCommand().update(Count, 1))
        await run.finish()
        after = await store.snapshot_at("gap", 5)
        assert before is not None and after is not None and after.revision == 5
        assert after.values[Log.key] == before.values[Log.key]  # kept as they were
        assert after.values[Tags.key] == before.values[Tags.key]


async def test_a_reference_that_does_not_decode_is_refused_and_the_others_still_load(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    broken = {
        "malformed": b'{"statekernel.extends":"three"}',
        "mistyped": b'{"statekernel.extends":3,"length":102,"items":[1]}',
    }
    await write_referring(path, *broken)
    for thread, data in broken.items():
        edit_snapshot(path, thread, 4, lambda values, data=data: values.update({Log.key: data}))
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(referring_keys(), thread_store=store)
        lenient = Kernel(referring_keys(), thread_store=store, restore_errors="skip")
        for thread in broken:
            with pytest.raises(DecodeFailed) as refused:
                await kernel.start_run(thread)
            error = refused.value
            assert (error.key, error.record) == ("j.log", thread)
            assert isinstance(error.cause, msgspec.ValidationError)
            await lenient.prune(thread, before=4)  # keeps what Tags still refers to
            run = await lenient.start_run(thread)
            assert Log not in run.snapshot
            assert list(run.snapshot.get(Tags))[-3:] == ["t0", "t1", "t2"]
            await run.abandon()


async def test_of_two_kernels_saving_from_one_position_one_wins_and_no_run_id_repeats(
    a_store: ThreadStore,
) -> None:
    for stale_commits in (False, True):
        thread = f"race-{stale_commits}"
        await commit_all(
            Kernel(plugins(), thread_store=a_store), thread, StateCommand().update(Count, 1)
        )
        first, second = (
            Kernel(plugins(), thread_store=a_store),
            Kernel(plugins(), thread_store=a_store),
        )
        a = await first.start_run(thread)
        b = await second.start_run(thread)
        assert a.identity.run_id == b.identity.run_id == f"{thread}:run-2"  # both loaded run 1
        await a.suspend()  # saves no commit, but moves the position
        if stale_commits:
            await b.submit(StateCommand().update(Count, 5))
        with pytest.raises(RevisionConflict):
            await b.finish()
        resumed, _ = await first.resume_run(thread)
        await resumed.submit(StateCommand().update(Mood, "after the race"))
        await resumed.finish()
        third = await Kernel(plugins(), thread_store=a_store).start_run(thread)
        assert third.identity.run_id == f"{thread}:run-3"
        await third.submit(StateCommand().update(Count, 1))
        await third.finish()
        run_ids = [r.run_id for r in await first.history(thread)]
        assert run_ids == [f"{thread}:run-1", f"{thread}:run-2", f"{thread}:run-3"]
        assert (await first.state_at(thread, 3)).get(Count) == 2  # the stale +5 never landed
