"""The journal at its edges, each found by a review of its first cut: ops that cannot be
encoded, values set aside at restore, kernels that declare a key differently, deleted
threads, forks of pruned threads and of keys the forking kernel cannot read, memory held
between saves, and `apply` functions that change their input."""

from __future__ import annotations

import gc
import logging
import sqlite3
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from statekernel import (
    Agent,
    DecodeFailed,
    InvalidDeclaration,
    Kernel,
    KeyScope,
    MergeStrategy,
    Phase,
    Plugin,
    PluginRegistrar,
    ReplayFailed,
    ScriptedModel,
    StateCommand,
    StateError,
    StateKey,
    StateKeyOptions,
    ThreadStore,
    UnknownRevision,
    Vector,
)
from statekernel.stores import MemoryThreadStore, SqliteThreadStore


class Total(StateKey[int, int]):
    key = "e.total"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Notes(StateKey[str, str]):
    key = "e.notes"
    scope = KeyScope.THREAD
    default = ""


class KeysOf(Plugin):
    def __init__(
        self, *keys: type[StateKey[Any, Any]], options: StateKeyOptions | None = None
    ) -> None:
        self.id = "keys"
        self.keys = keys
        self.options = options

    def register(self, r: PluginRegistrar) -> None:
        for key in self.keys:
            r.register_key(key, self.options if key is self.keys[0] else None)


@pytest.fixture(params=["memory store", "sqlite store"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ThreadStore]:
    made: ThreadStore = (
        MemoryThreadStore()
        if request.param == "memory store"
        else SqliteThreadStore(tmp_path / "e.db")
    )
    async with made:
        yield made


async def write(kernel: Kernel, thread: str, *commands: StateCommand) -> None:
    run = await kernel.start_run(thread)
    for command in commands:
        await run.submit(command)
        await run.checkpoint()
    await run.finish()


async def read(kernel: Kernel, thread: str, key: type[StateKey[Any, Any]]) -> Any:
    run = await kernel.start_run(thread)
    try:
        return run.snapshot.get(key)
    finally:
        await run.abandon()


# -- updates that cannot be encoded -------------------------------------------------------------


class Score(StateKey[int, Any]):
    """Takes a number to add, or a function of the value (which no codec can store)."""

    key = "e.score"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: Any) -> int:
        return int(update(value)) if callable(update) else value + int(update)


class Doubler(Plugin):
    id = "doubler"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Score)
        r.register_phase_hook(
            Phase.STEP_START, lambda ctx: StateCommand().update(Score, lambda v: v * 2)
        )


class AddTen(Plugin):
    id = "add ten"

    def register(self, r: PluginRegistrar) -> None:
        r.register_phase_hook(Phase.STEP_START, lambda ctx: StateCommand().update(Score, 10))


@pytest.mark.parametrize("with_store", [False, True])
async def test_a_key_written_twice_in_a_commit_by_an_unencodable_update_replays_right(
    with_store: bool, tmp_path: Path
) -> None:
    store = SqliteThreadStore(tmp_path / "e.db") if with_store else None
    kernel = Kernel([Doubler(), AddTen()], thread_store=store)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Score, 1))
    await run.run_phase(Phase.STEP_START)  # one commit: 1 * 2, then + 10
    assert run.snapshot.get(Score) == 12
    await run.finish()
    (_, doubled) = await kernel.history("t")
    assert [(op.kind, op.update) for op in doubled.ops] == [("value", None)]  # one for both
    if store is not None:
        assert await read(Kernel([Doubler(), AddTen()], thread_store=store), "t", Score) == 12
    else:
        assert (await kernel.state_at("t", 2)).get(Score) == 12  # from a snapshot
    assert (await kernel.verify("t")).ok
    if store is not None:
        await store.close()


class Blob(StateKey[Any, Any]):
    key = "e.blob"
    scope = KeyScope.THREAD
    default = None


async def test_an_unencodable_value_fails_its_checkpoint_and_the_run_can_still_save(
    store: ThreadStore,
) -> None:
    kernel = Kernel([KeysOf(Blob)], thread_store=store)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Blob, object()))
    with pytest.raises(StateError, match=r"'e\.blob' cannot be encoded.*persistent=False"):
        await run.checkpoint()
    assert await store.load("t") is None  # nothing was saved
    await run.submit(StateCommand().update(Blob, "fine now"))
    await run.checkpoint()  # the unencodable revision is covered by a snapshot
    await run.finish()
    assert await read(Kernel([KeysOf(Blob)], thread_store=store), "t", Blob) == "fine now"
    first, _ = await kernel.history("t")
    assert (first.ops[0].kind, first.ops[0].update) == ("value", None)
    assert (await kernel.state_at("t", 2)).get(Blob) == "fine now"
    assert Blob not in await kernel.state_at("t", 1)  # that value could not be kept
    assert (await kernel.verify("t")).ok


class Floats(StateKey[Vector[float], Vector[float]]):
    """Floats are inexact (JSON has no infinity): each update is checked before it is kept."""

    key = "e.floats"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[float], update: Vector[float]) -> Vector[float]:
        return value.extend(update)


async def test_an_update_of_an_inexact_type_that_decodes_back_is_journaled_as_itself(
    store: ThreadStore,
) -> None:
    kernel = Kernel([KeysOf(Score, Floats)], thread_store=store)
    await write(kernel, "t", StateCommand().update(Score, 3).update(Floats, Vector([1.5, 2.0])))
    loaded = await store.load("t")
    assert loaded is not None and loaded.values == {}  # no snapshot was needed
    (record,) = await Kernel([KeysOf(Score, Floats)], thread_store=store).history("t")
    assert [(op.key, op.kind, op.update) for op in record.ops] == [
        ("e.score", "update", b"3"),
        ("e.floats", "update", b"[1.5,2.0]"),
    ]


async def test_the_other_ops_of_a_commit_with_an_unencodable_update_replay_and_load(
    store: ThreadStore,
) -> None:
    kernel = Kernel([KeysOf(Score, Total)], thread_store=store)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Score, 10))
    await run.submit(StateCommand().update(Score, lambda v: v * 2).update(Total, 1))
    await run.submit(StateCommand().update(Score, 1).update(Total, 1))
    await run.submit(StateCommand().update(Total, 1))
    await run.finish()  # one save: the snapshot at 4 covers the unencodable update
    _, doubled, _, _ = await kernel.history("t")
    assert [(op.key, op.kind, op.update) for op in doubled.ops] == [
        ("e.score", "value", None),
        ("e.total", "update", b"1"),
    ]
    await kernel.fork("t", 3, "copy")  # no snapshot at or before 3: records 1 to 3 only
    # Score is unknown from revision 2 on (missing, not its older value); Total replays.
    assert (await kernel.state_at("copy", 3)).to_dict() == {"e.total": 2}
    run = await kernel.start_run("copy")
    assert run.snapshot.to_dict() == {"e.total": 2}
    await run.abandon()


class Jot(StateKey[int, Any]):
    """A thread key kept in memory only, whose update may be a function."""

    key = "e.jot"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: Any) -> int:
        return int(update(value)) if callable(update) else value + int(update)


class Hook(Plugin):
    def __init__(self, id: str, command: StateCommand) -> None:
        self.id = id
        self.command = command

    def register(self, r: PluginRegistrar) -> None:
        r.register_phase_hook(Phase.STEP_START, lambda ctx: self.command)


@pytest.mark.parametrize("with_store", [False, True])
async def test_a_non_persistent_key_with_an_unencodable_update_is_journaled_in_memory(
    with_store: bool,
) -> None:
    store = MemoryThreadStore() if with_store else None
    kernel = Kernel(
        [
            KeysOf(Jot, Total, options=StateKeyOptions(persistent=False)),
            Hook("adds", StateCommand().update(Jot, 10).update(Total, 1)),
            Hook("doubles", StateCommand().update(Jot, lambda v: v * 2)),
        ],
        thread_store=store,
        snapshot_every=100,
    )
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Jot, 3))
    await run.run_phase(Phase.STEP_START)  # one commit: + 10, then * 2, with Total + 1
    assert run.snapshot.get(Jot) == 26
    await run.finish()
    records = await kernel.history("t")
    assert [[(op.key, op.kind, op.update) for op in r.ops] for r in records] == [
        [("e.jot", "update", b"3")],
        [("e.total", "update", b"1"), ("e.jot", "value", None)],  # one op for both
    ]
    if store is not None:
        loaded = await store.load("t")
        assert loaded is not None and loaded.values == {}  # the store needs no snapshot for it
        return
    # Without a store the kernel's memory is all there is: a snapshot keeps the value.
    assert (await kernel.state_at("t", 2)).to_dict() == {"e.jot": 26, "e.total": 1}
    assert (await kernel.verify("t")).ok


class Tokens(int):
    """A user's own int subclass: an int to the type check, but not to the codec."""


class Tally(StateKey[int, int]):
    key = "e.tally"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + int(update)


async def test_an_update_of_an_int_subclass_that_cannot_be_encoded_is_still_kept(
    store: ThreadStore,
) -> None:
    """An update of a key declared to take ints that cannot be encoded all the same is
    journaled as a "value" op, and the save writes a snapshot to load the key from."""
    kernel = Kernel([KeysOf(Tally, Total)], thread_store=store, snapshot_every=1_000)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Tally, 1))
    await run.submit(StateCommand().update(Tally, Tokens(2)).update(Total, 1))
    await run.submit(StateCommand().update(Tally, 4))
    assert run.snapshot.get(Tally) == 7
    await run.finish()
    _, second, _ = await kernel.history("t")
    assert [(op.key, op.kind, op.update) for op in second.ops] == [
        ("e.tally", "value", None),
        ("e.total", "update", b"1"),
    ]
    assert await read(Kernel([KeysOf(Tally, Total)], thread_store=store), "t", Tally) == 7
    assert (await Kernel([KeysOf(Tally, Total)], thread_store=store).verify("t")).ok


# -- memory held between saves ----------------------------------------------------------------


class Box(msgspec.Struct, frozen=True, weakref=True):
    count: int


class Counter(StateKey[Box, int]):
    key = "e.counter"
    scope = KeyScope.THREAD
    default_factory = lambda: Box(0)  # noqa: E731

    @staticmethod
    def apply(value: Box, update: int) -> Box:
        return Box(value.count + update)


async def test_with_a_store_values_replaced_before_the_save_are_not_held_until_it(
    store: ThreadStore,
) -> None:
    run = await Kernel([KeysOf(Counter)], thread_store=store).start_run("t")
    await run.submit(StateCommand().update(Counter, 1))
    first = weakref.ref(run.snapshot.get(Counter))
    await run.submit(StateCommand().update(Counter, 1))
    gc.collect()
    assert first() is None  # only the journal's ops wait for the save, not every value
    await run.finish()
    assert (await read(Kernel([KeysOf(Counter)], thread_store=store), "t", Counter)).count == 2


class Step(msgspec.Struct, frozen=True, weakref=True):
    by: int


class Stepped(StateKey[Box, Step]):
    key = "e.stepped"
    scope = KeyScope.THREAD
    default_factory = lambda: Box(0)  # noqa: E731

    @staticmethod
    def apply(value: Box, update: Step) -> Box:
        return Box(value.count + update.by)


async def test_a_long_stretch_between_saves_holds_records_not_the_updates_themselves(
    store: ThreadStore, caplog: pytest.LogCaptureFixture
) -> None:
    run = await Kernel([KeysOf(Stepped)], thread_store=store).start_run("t")
    first = Step(1)
    held = weakref.ref(first)
    await run.submit(StateCommand().update(Stepped, first))
    del first
    with caplog.at_level(logging.ERROR, logger="statekernel"):
        for _ in range(69):  # past the 64 ops after which pending commits become records
            await run.submit(StateCommand().update(Stepped, Step(1)))
    gc.collect()
    assert held() is None  # the commits since the save are records by now, not references
    assert not [r for r in caplog.records if r.name.startswith("statekernel")]
    await run.finish()
    assert (await read(Kernel([KeysOf(Stepped)], thread_store=store), "t", Stepped)).count == 70
    records = await Kernel([KeysOf(Stepped)], thread_store=store).history("t")
    assert [op.update for r in records for op in r.ops] == [b'{"by":1}'] * 70


async def test_an_unencodable_update_made_a_record_before_the_save_still_gets_its_snapshot(
    store: ThreadStore,
) -> None:
    """The keys that need a snapshot are remembered across the records made on the way."""
    kernel = Kernel([KeysOf(Score, Total)], thread_store=store, snapshot_every=1_000)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Score, 10))
    await run.submit(StateCommand().update(Score, lambda v: v * 2))
    for _ in range(70):  # past the 64 ops after which pending commits become records
        await run.submit(StateCommand().update(Total, 1))
    await run.finish()
    loaded = await store.load("t")
    assert loaded is not None and loaded.values != {}  # the snapshot covers the lambda
    assert await read(Kernel([KeysOf(Score, Total)], thread_store=store), "t", Score) == 20
    assert await read(Kernel([KeysOf(Score, Total)], thread_store=store), "t", Total) == 70


async def test_memory_only_ops_made_records_before_the_save_stay_in_the_history(
    store: ThreadStore,
) -> None:
    kernel = Kernel(
        [KeysOf(Jot, Total, options=StateKeyOptions(persistent=False))], thread_store=store
    )
    run = await kernel.start_run("t")
    for _ in range(40):  # 80 ops: the first 64 become records before the save
        await run.submit(StateCommand().update(Jot, 1).update(Total, 1))
    await run.finish()
    records = await kernel.history("t")
    assert [[op.key for op in r.ops] for r in records] == [["e.jot", "e.total"]] * 40


# -- values set aside at restore ----------------------------------------------------------------


class NotesAsNumber(StateKey[int, int]):
    key = "e.notes"
    scope = KeyScope.THREAD


async def test_a_key_set_aside_at_restore_and_written_again_keeps_the_new_value(
    store: ThreadStore, caplog: pytest.LogCaptureFixture
) -> None:
    await write(
        Kernel([KeysOf(Notes, Total)], thread_store=store),
        "t",
        StateCommand().update(Notes, "hello"),
    )
    lenient = Kernel(
        [KeysOf(NotesAsNumber, Total)], thread_store=store, restore_errors="skip", snapshot_every=3
    )
    with caplog.at_level(logging.ERROR, logger="statekernel"):
        await write(lenient, "t", StateCommand().update(NotesAsNumber, 5))
        assert await read(lenient, "t", NotesAsNumber) == 5
        assert (await lenient.state_at("t", 2)).get(NotesAsNumber) == 5
        for _ in range(10):
            await write(lenient, "t", StateCommand().update(Total, 1))
    loaded = await store.load("t")
    assert loaded is not None and loaded.revision == 12
    assert len(loaded.records) < 3  # snapshots go on: a load replays a bounded tail
    report = await lenient.verify("t")
    assert report.ok and "e.notes" in report.detail  # not rebuilt from its old bytes


# -- kernels that declare a key differently ---------------------------------------------------


@pytest.mark.parametrize(
    "options", [StateKeyOptions(persistent=False), StateKeyOptions(scope=KeyScope.RUN)]
)
async def test_a_kernel_keeping_a_key_otherwise_does_not_hide_its_newer_records(
    store: ThreadStore, options: StateKeyOptions
) -> None:
    owner = Kernel([KeysOf(Notes, Total)], thread_store=store, snapshot_every=2)
    await write(owner, "t", StateCommand().update(Total, 1), StateCommand().update(Total, 1))
    run = await owner.start_run("t")
    await run.submit(StateCommand().update(Notes, "after the snapshot"))
    await run.finish()
    other = Kernel([KeysOf(Notes, Total, options=options)], thread_store=store, snapshot_every=1)
    await write(other, "t", StateCommand().update(Total, 1))
    assert await read(owner, "t", Notes) == "after the snapshot"
    assert await read(owner, "t", Total) == 3


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
    await write(kernel, thread, StateCommand().update(Lines, many).update(Marks, many), *more)


@pytest.mark.parametrize(
    "options", [StateKeyOptions(persistent=False), StateKeyOptions(scope=KeyScope.RUN)]
)
async def test_a_vector_snapshot_reference_of_a_key_kept_otherwise_is_left_to_its_owner(
    store: ThreadStore, options: StateKeyOptions
) -> None:
    owner = Kernel([KeysOf(Lines, Marks, Total)], thread_store=store, snapshot_every=1)
    await grow_lines(owner, "t")
    other = Kernel(
        [KeysOf(Lines, Marks, Total, options=options)], thread_store=store, snapshot_every=1
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


class LinesAsNumbers(StateKey[Vector[int], tuple[int, ...]]):
    key = "e.lines"
    scope = KeyScope.THREAD


async def test_a_skipped_vector_starts_from_its_default_with_a_warning(
    store: ThreadStore, caplog: pytest.LogCaptureFixture
) -> None:
    owner = Kernel([KeysOf(Lines)], thread_store=store, snapshot_every=1)
    await write(owner, "t", StateCommand().update(Lines, ("a",)))
    lenient = Kernel([KeysOf(LinesAsNumbers)], thread_store=store, restore_errors="skip")
    with caplog.at_level(logging.WARNING, logger="statekernel"):
        assert await read(lenient, "t", LinesAsNumbers) == Vector()
    (warning,) = [r for r in caplog.records if r.name == "statekernel"]
    assert "'t'" in warning.getMessage() and "'e.lines'" in warning.getMessage()


# -- journaled updates this kernel cannot replay --------------------------------------------------


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
    store: ThreadStore,
) -> None:
    first = Kernel([KeysOf(Amount)], thread_store=store, snapshot_every=1)
    await write(first, "t", StateCommand().update(Amount, 1))
    later = Kernel([KeysOf(Amount)], thread_store=store, snapshot_every=100)
    await write(later, "t", StateCommand().update(Amount, "2"), StateCommand().update(Amount, 1))
    loaded = await store.load("t")
    assert loaded is not None and (loaded.snapshot_revision, len(loaded.records)) == (1, 2)
    strict = Kernel([KeysOf(WholeAmount)], thread_store=store)
    for reading in (lambda: strict.start_run("t"), lambda: strict.state_at("t", 3)):
        with pytest.raises(DecodeFailed) as refused:
            await reading()
        error = refused.value
        assert (error.key, error.record) == ("e.amount", "t (journal, revision 2)")
        assert isinstance(error.cause, msgspec.ValidationError)
    lenient = Kernel([KeysOf(WholeAmount)], thread_store=store, restore_errors="skip")
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
    store: ThreadStore,
) -> None:
    first = Kernel([KeysOf(Total)], thread_store=store, snapshot_every=1)
    await write(first, "t", StateCommand().update(Total, 1))
    later = Kernel([KeysOf(Total)], thread_store=store, snapshot_every=100)
    await write(later, "t", StateCommand().update(Total, 10))  # in the tail a load replays
    picky = Kernel([KeysOf(PickyTotal)], thread_store=store)
    for reading in (lambda: picky.start_run("t"), lambda: picky.state_at("t", 2)):
        with pytest.raises(ReplayFailed) as refused:
            await reading()
        error = refused.value
        assert (error.thread_id, error.revision, error.key) == ("t", 2, "e.total")
        assert isinstance(error.cause, ValueError)
        assert "a step of 10 is too big" in str(error)
    report = await picky.verify("t")
    assert (report.ok, report.first_divergence) == (False, 2)


# -- deleted threads --------------------------------------------------------------------------


class Scratch(StateKey[int, int]):
    key = "e.scratch"
    scope = KeyScope.THREAD


async def test_a_thread_deleted_from_the_store_starts_afresh_in_a_kernel_that_held_it(
    store: ThreadStore,
) -> None:
    kernel = Kernel(
        [KeysOf(Scratch, Total, options=StateKeyOptions(persistent=False))], thread_store=store
    )
    await write(kernel, "t", StateCommand().update(Total, 1).update(Scratch, 7))
    await store.delete("t")
    run = await kernel.start_run("t")
    assert (run.revision, run.snapshot.to_dict()) == (0, {})
    await run.submit(StateCommand().update(Total, 2))
    await run.finish()
    assert await kernel.update_state("t", StateCommand().update(Total, 1)) == 2
    assert await read(Kernel([KeysOf(Total)], thread_store=store), "t", Total) == 3


# -- forks ------------------------------------------------------------------------------------


async def test_a_fork_by_a_kernel_without_a_keys_plugin_keeps_that_key(store: ThreadStore) -> None:
    full = Kernel([KeysOf(Notes, Total)], thread_store=store, snapshot_every=2)
    await write(full, "t", StateCommand().update(Total, 1), StateCommand().update(Total, 1))
    await write(full, "t", StateCommand().update(Notes, "important"))  # after the snapshot
    partial = Kernel([KeysOf(Total)], thread_store=store)
    await partial.fork("t", 3, "copy")
    assert await read(full, "copy", Notes) == "important"
    assert (await full.state_at("copy", 3)).get(Notes) == "important"
    assert (await full.verify("copy")).ok


@pytest.mark.parametrize("with_store", [False, True])
async def test_a_fork_of_a_pruned_thread_travels_and_verifies_where_it_can(
    with_store: bool,
) -> None:
    kernel = Kernel(
        [KeysOf(Total)], thread_store=MemoryThreadStore() if with_store else None, snapshot_every=3
    )
    await write(kernel, "src", *(StateCommand().update(Total, 1) for _ in range(8)))
    await kernel.prune("src", before=4)  # keeps the snapshot at 3 and everything after
    await kernel.fork("src", 7, "copy")
    assert [r.revision for r in await kernel.history("copy")] == [4, 5, 6, 7]
    with pytest.raises(UnknownRevision) as unknown:
        await kernel.state_at("copy", 2)
    low, high = unknown.value.held or (None, None)
    assert high == 7 and low is not None and low <= 6
    for revision in range(low, 8):
        assert (await kernel.state_at("copy", revision)).get(Total) == revision
    assert (await kernel.verify("copy")).ok


# -- decoding and apply in time travel ----------------------------------------------------------


async def test_time_travel_refuses_a_stored_value_that_does_not_decode(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with SqliteThreadStore(path) as store:
        kernel = Kernel([KeysOf(Total)], thread_store=store, snapshot_every=2)
        await write(kernel, "t", *(StateCommand().update(Total, 1) for _ in range(3)))
    with sqlite3.connect(path) as raw:
        (blob,) = raw.execute("SELECT snapshot FROM thread_snapshots WHERE revision = 2").fetchone()
        values = msgspec.msgpack.decode(blob)
        values["e.total"] = b'"two"'
        raw.execute(
            "UPDATE thread_snapshots SET snapshot = ? WHERE revision = 2",
            (msgspec.msgpack.encode(values),),
        )
    async with SqliteThreadStore(path) as store:
        kernel = Kernel([KeysOf(Total)], thread_store=store)
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
    kernel = Kernel([KeysOf(Appended)], snapshot_every=2)
    await write(kernel, "t", *(StateCommand().update(Appended, text) for text in "abc"))
    for _ in range(2):
        assert (await kernel.state_at("t", 2)).get(Appended) == ["a", "b"]
        assert (await kernel.state_at("t", 3)).get(Appended) == ["a", "b", "c"]
    await kernel.fork("t", 3, "copy")
    assert await read(kernel, "copy", Appended) == ["a", "b", "c"]
    assert (await kernel.verify("t")).ok
    assert (await kernel.state_at("copy", 2)).get(Appended) == ["a", "b"]


async def test_without_a_store_revision_0_of_a_known_thread_is_the_empty_state() -> None:
    kernel = Kernel([KeysOf(Total)])
    run = await kernel.start_run("t")
    await run.finish()
    assert (await kernel.state_at("t", 0)).to_dict() == {}
    assert (await kernel.verify("t")).ok


# -- what registration refuses -----------------------------------------------------------------


class Opaque:
    pass


def test_registration_looks_inside_vectors_and_at_dict_keys() -> None:
    class Items(StateKey[Vector[Any], Vector[Opaque]]):
        key = "e.items"
        scope = KeyScope.THREAD

    class Pairs(StateKey[Any, dict[tuple[int, int], int]]):
        key = "e.pairs"
        scope = KeyScope.THREAD
        default = None

    with pytest.raises(InvalidDeclaration, match=r"'e\.items'.*items of a Vector.*Opaque"):
        Kernel([KeysOf(Items)])
    with pytest.raises(InvalidDeclaration, match=r"'e\.pairs'.*keys are neither strings"):
        Kernel([KeysOf(Pairs)])


def test_the_agent_takes_the_snapshot_policy() -> None:
    with pytest.raises(ValueError, match=r"snapshot_every must be a positive int"):
        Agent([], ScriptedModel([]), snapshot_every=0)


# -- found by a second review ---------------------------------------------------------------------


class MaybeLog(StateKey[Vector[str] | None, str]):
    key = "e.maybe_log"
    scope = KeyScope.THREAD
    default = None

    @staticmethod
    def apply(value: Vector[str] | None, update: str) -> Vector[str]:
        return (value or Vector()).append(update)


class AnyLog(StateKey[Any, str]):
    key = "e.any_log"
    scope = KeyScope.THREAD
    default = None

    @staticmethod
    def apply(value: Any, update: str) -> Any:
        return (value or Vector()).append(update)


async def test_a_vector_behind_an_optional_type_snapshots_and_loads(store: ThreadStore) -> None:
    kernel = Kernel([KeysOf(MaybeLog)], thread_store=store, snapshot_every=1)
    await write(kernel, "t", *(StateCommand().update(MaybeLog, f"m{i}") for i in range(6)))
    loaded = await read(Kernel([KeysOf(MaybeLog)], thread_store=store), "t", MaybeLog)
    assert list(loaded) == [f"m{i}" for i in range(6)]
    assert (await kernel.verify("t")).ok


async def test_a_vector_in_a_key_typed_any_is_refused_rather_than_stored_as_something_else(
    store: ThreadStore,
) -> None:
    run = await Kernel([KeysOf(AnyLog)], thread_store=store, snapshot_every=1).start_run("t")
    await run.submit(StateCommand().update(AnyLog, "m0"))
    with pytest.raises(StateError, match=r"'e\.any_log'.*typed Any comes back a list"):
        await run.checkpoint()
    await run.abandon()
    assert await store.load("t") is None


@pytest.mark.parametrize(
    "options", [StateKeyOptions(persistent=False), StateKeyOptions(scope=KeyScope.RUN)]
)
async def test_a_kernel_writing_a_key_it_keeps_otherwise_still_hides_nothing(
    store: ThreadStore, options: StateKeyOptions
) -> None:
    owner = Kernel([KeysOf(Notes, Total)], thread_store=store, snapshot_every=2)
    await write(owner, "t", StateCommand().update(Total, 1), StateCommand().update(Total, 10))
    await write(owner, "t", StateCommand().update(Notes, "the owner's"))  # after the snapshot
    other = Kernel([KeysOf(Notes, Total, options=options)], thread_store=store, snapshot_every=1)
    await write(other, "t", StateCommand().update(Notes, "mine").update(Total, 5))
    assert await read(owner, "t", Notes) == "the owner's"
    assert await read(owner, "t", Total) == 16
    assert (await owner.verify("t")).ok


class Fn(StateKey[int, Any]):
    key = "e.fn"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: Any) -> int:
        return int(update(value)) if callable(update) else value + int(update)


async def test_a_fork_after_an_unrecorded_op_lacks_the_key_and_snapshots_again(
    store: ThreadStore,
) -> None:
    kernel = Kernel([KeysOf(Fn, Total)], thread_store=store, snapshot_every=2)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Fn, 10))
    await run.checkpoint()
    await run.submit(StateCommand().update(Fn, lambda v: v * 2))  # journaled without bytes
    await run.submit(StateCommand().update(Fn, 1))
    await run.submit(StateCommand().update(Total, 1))
    await run.finish()  # the snapshot at 4 covers it
    assert await read(kernel, "t", Fn) == 21
    await kernel.fork("t", 3, "copy")
    assert Fn not in await kernel.state_at("copy", 3)  # unknown there: missing, not wrong
    await write(kernel, "copy", *(StateCommand().update(Total, 1) for _ in range(3)))
    loaded = await store.load("copy")
    assert loaded is not None and loaded.snapshot_revision >= 5  # not held back
    assert (await kernel.verify("copy")).ok


async def test_a_fork_at_a_snapshot_with_no_records_before_it(store: ThreadStore) -> None:
    kernel = Kernel([KeysOf(Total)], thread_store=store, snapshot_every=3)
    await write(kernel, "t", *(StateCommand().update(Total, 1) for _ in range(7)))
    await kernel.prune("t", before=6)
    await kernel.fork("t", 6, "copy")
    assert (await kernel.state_at("copy", 6)).get(Total) == 6
    assert await read(kernel, "copy", Total) == 6


class Peak(StateKey[float, float]):
    key = "e.peak"
    scope = KeyScope.THREAD
    default = 0.0

    @staticmethod
    def apply(value: float, update: float) -> float:
        return max(value, update)


class Pair(StateKey[tuple[int, int], Any]):
    key = "e.pair"
    scope = KeyScope.THREAD
    default = (0, 0)

    @staticmethod
    def apply(value: tuple[int, int], update: Any) -> tuple[int, int]:
        assert type(update) is tuple, update  # a list would be a different update
        return (int(update[0]), int(update[1]))


async def test_updates_that_would_not_decode_back_equal_are_covered_by_a_snapshot(
    store: ThreadStore,
) -> None:
    kernel = Kernel([KeysOf(Peak, Pair)], thread_store=store)
    await write(
        kernel,
        "t",
        StateCommand().update(Peak, float("-inf")),  # JSON would say null
        StateCommand().update(Peak, 2.5).update(Pair, (1, 2)),  # a tuple under Any: a list
    )
    fresh = Kernel([KeysOf(Peak, Pair)], thread_store=store)
    assert await read(fresh, "t", Peak) == 2.5
    assert await read(fresh, "t", Pair) == (1, 2)
    assert (await fresh.verify("t")).ok


async def test_a_command_changed_after_it_committed_does_not_change_its_record(
    store: ThreadStore,
) -> None:
    kernel = Kernel([KeysOf(Total)], thread_store=store)
    run = await kernel.start_run("t")
    command = StateCommand().update(Total, 1)
    await run.submit(command)
    command.update(Total, 10)  # too late: revision 1 applied one op
    await run.submit(StateCommand().update(Total, 100))
    await run.finish()
    assert run.snapshot.get(Total) == 101
    assert await read(Kernel([KeysOf(Total)], thread_store=store), "t", Total) == 101


async def test_a_fork_into_an_id_deleted_earlier_holds_nothing_of_the_old_thread(
    store: ThreadStore,
) -> None:
    kernel = Kernel(
        [KeysOf(Scratch, Total, options=StateKeyOptions(persistent=False))], thread_store=store
    )
    await write(kernel, "old", StateCommand().update(Scratch, 42).update(Total, 1))
    await store.delete("old")
    await write(kernel, "src", StateCommand().update(Total, 7))
    await kernel.fork("src", 1, "old")
    run = await kernel.start_run("old")
    assert run.snapshot.to_dict() == {"e.total": 7}
    await run.abandon()


class RunCount(StateKey[int, int]):
    key = "e.run_count"  # a run key

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Both(Plugin):
    """A persistent thread key, a `persistent=False` thread key and a run key."""

    id = "both"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Total)
        r.register_key(Notes, StateKeyOptions(persistent=False))
        r.register_key(RunCount)


async def test_a_record_listener_gets_every_op_and_the_store_keeps_what_it_always_kept(
    store: ThreadStore,
) -> None:
    """With a store, a record listener (what `agent.stream` uses) still sees the ops of run
    keys and `persistent=False` keys; listening changes nothing the store or the kernel's
    history keeps."""

    async def commit_three(kernel: Kernel, thread: str, heard: list[Any] | None) -> None:
        run = await kernel.start_run(thread)
        if heard is not None:
            run.add_record_listener(heard.append)
        for step in range(3):
            await run.submit(
                StateCommand().update(Total, step).update(Notes, f"n{step}").update(RunCount, 1)
            )
        await run.finish()

    heard: list[Any] = []
    listened = Kernel([Both()], thread_store=store)
    await commit_three(listened, "heard", heard)
    await commit_three(Kernel([Both()], thread_store=store), "quiet", None)
    assert [[(op.key, op.update) for op in r.ops] for r in heard] == [
        [("e.total", b"%d" % step), ("e.notes", b'"n%d"' % step), ("e.run_count", b"1")]
        for step in range(3)
    ]

    def ops(records: list[Any]) -> list[list[tuple[str, bytes | None]]]:
        return [[(op.key, op.update) for op in r.ops] for r in records]

    fresh = Kernel([Both()], thread_store=store)
    assert ops(await fresh.history("heard")) == ops(await fresh.history("quiet"))
    assert ops(await fresh.history("heard")) == [[("e.total", b"%d" % s)] for s in range(3)]
    # The kernel that made them keeps the memory-only ops beside the stored ones.
    assert ops(await listened.history("heard")) == [
        [("e.total", b"%d" % s), ("e.notes", b'"n%d"' % s)] for s in range(3)
    ]
