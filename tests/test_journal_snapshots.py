"""Snapshots: what a checkpoint writes, bounded loads, growing Vectors saved as references."""

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
    Tags,
    edit_snapshot,
    is_reference,
    plugins,
    referring_keys,
    write_referring,
)
from samples import Keys, commit_all, read

from statekernel import (
    Agent,
    CommitRejected,
    DecodeFailed,
    Kernel,
    KeyScope,
    ScriptedModel,
    StateCommand,
    StateKey,
    ThreadStore,
    UnknownRevision,
    Vector,
)
from statekernel.stores import SqliteThreadStore

# -- what a checkpoint writes --------------------------------------------------------------


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


async def test_a_load_is_one_snapshot_plus_a_bounded_tail(thread_store: ThreadStore) -> None:
    store = thread_store
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


def test_the_agent_takes_the_snapshot_policy() -> None:
    with pytest.raises(ValueError, match=r"snapshot_every must be a positive int"):
        Agent([], ScriptedModel([]), snapshot_every=0)


# -- snapshots of a growing Vector ---------------------------------------------------------


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


async def test_a_snapshot_of_several_whole_vectors_loads_in_a_new_kernel_which_extends_them(
    thread_store: ThreadStore,
) -> None:
    kernel = Kernel(referring_keys(), thread_store=thread_store, snapshot_every=1)
    first = StateCommand().update(Log, ("l0", "l1")).update(Tags, ("t0", "t1"))
    await commit_all(kernel, "t", first, checkpoints=True)  # a snapshot of two whole Vectors
    fresh = Kernel(referring_keys(), thread_store=thread_store, snapshot_every=1)
    grown = StateCommand().update(Log, ("l2",)).update(Tags, ("t2",))
    assert await commit_all(fresh, "t", grown, checkpoints=True) == 2  # loaded, then saved
    snapshot = await thread_store.snapshot_at("t", 2)
    assert snapshot is not None and snapshot.revision == 2
    assert is_reference(snapshot.values[Log.key]) and is_reference(snapshot.values[Tags.key])
    again = Kernel(referring_keys(), thread_store=thread_store)
    assert list(await read(again, "t", Log)) == ["l0", "l1", "l2"]
    assert list(await read(again, "t", Tags)) == ["t0", "t1", "t2"]


async def test_pruning_keeps_the_snapshots_a_kept_one_refers_to(thread_store: ThreadStore) -> None:
    store = thread_store
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


async def test_a_chain_of_references_is_cut_every_64_snapshots_whoever_writes_them(
    thread_store: ThreadStore,
) -> None:
    """A read follows at most 63 references: one item added at every snapshot of a large
    Vector is written whole again every 64th snapshot, in one long run as in runs that each
    load what the last one saved."""
    store = thread_store

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


async def test_each_vector_in_a_snapshot_is_written_as_what_it_added(
    thread_store: ThreadStore,
) -> None:
    store = thread_store
    keys = [Keys(Count, Log, Tags)]  # a key that is no Vector comes first
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
    thread_store: ThreadStore,
) -> None:
    store = thread_store
    kernel = Kernel([Keys(Count, Guarded)], thread_store=store, snapshot_every=1)
    items = [StateCommand().update(Guarded, tuple(f"g{i}" for i in range(100)))]
    items += [StateCommand().update(Guarded, (f"more {i}",)) for i in range(3)]
    await commit_all(kernel, "t", *items, checkpoints=True)
    snapshot = await store.snapshot_at("t", 4)
    assert snapshot is not None and is_reference(snapshot.values[Guarded.key])
    stricter_keys = [Keys(Count, StricterGuarded)]
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


async def test_a_list_in_a_key_declared_a_vector_is_snapshotted_whole(
    thread_store: ThreadStore,
) -> None:
    store = thread_store
    kernel = Kernel([Keys(Listed)], thread_store=store, snapshot_every=1)
    commands = [StateCommand().update(Listed, f"x{i}") for i in range(6)]
    await commit_all(kernel, "t", *commands, checkpoints=True)
    snapshot = await store.snapshot_at("t", 6)
    assert snapshot is not None
    assert snapshot.values[Listed.key] == b'["x0","x1","x2","x3","x4","x5"]'
    fresh = await Kernel([Keys(Listed)], thread_store=store).start_run("t")
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
    thread_store: ThreadStore,
) -> None:
    store = thread_store
    keys = [Keys(Points, Span)]
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


class MaybeLog(StateKey[Vector[str] | None, str]):
    key = "e.maybe_log"
    scope = KeyScope.THREAD
    default = None

    @staticmethod
    def apply(value: Vector[str] | None, update: str) -> Vector[str]:
        return (value or Vector()).append(update)


async def test_a_vector_behind_an_optional_type_snapshots_and_loads(
    thread_store: ThreadStore,
) -> None:
    kernel = Kernel([Keys(MaybeLog)], thread_store=thread_store, snapshot_every=1)
    await commit_all(
        kernel, "t", *(StateCommand().update(MaybeLog, f"m{i}") for i in range(6)), checkpoints=True
    )
    loaded = await read(Kernel([Keys(MaybeLog)], thread_store=thread_store), "t", MaybeLog)
    assert list(loaded) == [f"m{i}" for i in range(6)]
    assert (await kernel.verify("t")).ok


async def test_a_fork_at_a_snapshot_that_refers_to_older_ones_stands_alone(
    thread_store: ThreadStore,
) -> None:
    store = thread_store
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


# -- references to snapshots that are gone or damaged --------------------------------------


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
        edit_snapshot(
            path,
            thread,
            4,
            lambda values, data=data: values.update({Log.key: data}),
            reseal=True,
        )
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
