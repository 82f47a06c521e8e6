"""Retention: a thread's journal stays bounded by default, in a store and in memory."""

from __future__ import annotations

import gc
import sqlite3
import tracemalloc
from pathlib import Path

import pytest
from journal_samples import Count, Log, plugins
from samples import commit_all

from statekernel import (
    Agent,
    InferenceRequest,
    InferenceResponse,
    Kernel,
    Retention,
    StateCommand,
    ThreadStore,
    UnknownRevision,
)
from statekernel.stores import SqliteThreadStore


def test_retention_keeps_the_newest_revisions_or_everything() -> None:
    assert Retention().revisions == 1000
    assert Retention.keep_all().revisions is None
    assert Retention(revisions=10).prune_before(25) == 15
    assert Retention(revisions=10).prune_before(10) is None
    assert Retention.keep_all().prune_before(10**9) is None
    for wrong in (0, -1, 1.5, True, "10"):
        with pytest.raises(ValueError, match=r"Retention\(revisions=\.\.\.\).*keep_all"):
            Retention(revisions=wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retention must be a statekernel.Retention"):
        Kernel(plugins(), retention=100)  # type: ignore[arg-type]


async def test_the_journal_keeps_the_newest_revisions_and_forgets_the_rest(
    thread_store_or_none: ThreadStore | None,
) -> None:
    kernel = Kernel(
        plugins(),
        thread_store=thread_store_or_none,
        snapshot_every=10,
        retention=Retention(revisions=25),
    )
    commands = [StateCommand().update(Count, 1) for _ in range(100)]
    head = await commit_all(kernel, "t", *commands, checkpoints=True)
    records = await kernel.history("t")
    assert records[-1].revision == head == 100
    assert 25 <= len(records) <= 25 + 10  # the newest 25, back to the snapshot before them
    assert (await kernel.state_at("t", head - 25)).get(Count) == head - 25
    with pytest.raises(UnknownRevision) as gone:
        await kernel.state_at("t", 10)
    assert gone.value.held is not None and gone.value.held[1] == head
    assert (await kernel.verify("t")).ok
    run = await kernel.start_run("t")
    assert run.snapshot.get(Count) == head
    await run.abandon()


async def test_keep_all_keeps_every_revision(thread_store_or_none: ThreadStore | None) -> None:
    kernel = Kernel(
        plugins(),
        thread_store=thread_store_or_none,
        snapshot_every=10,
        retention=Retention.keep_all(),
    )
    commands = [StateCommand().update(Count, 1) for _ in range(60)]
    await commit_all(kernel, "t", *commands, checkpoints=True)
    assert len(await kernel.history("t")) == 60
    assert (await kernel.state_at("t", 1)).get(Count) == 1


def used_bytes(path: Path) -> int:
    """The bytes a SQLite file's pages hold (freed pages are reused, not returned)."""
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = raw.execute("PRAGMA page_count").fetchone()[0]
        free = raw.execute("PRAGMA freelist_count").fetchone()[0]
        size = raw.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


async def test_a_sqlite_thread_of_20_000_steps_occupies_bounded_bytes_by_default(
    tmp_path: Path,
) -> None:
    path = tmp_path / "long.db"
    sizes: dict[int, int] = {}
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store)  # the default retention and snapshots
        run = await kernel.start_run("t")
        for step in range(1, 20_001):
            await run.submit(StateCommand().update(Count, 1))
            if step % 10 == 0:
                await run.checkpoint()
            if step in (10_000, 20_000):
                sizes[step] = used_bytes(path)
        await run.finish()
        held = await kernel.history("t")
        assert 1000 <= len(held) <= 1000 + 1000  # the newest 1,000, back to a snapshot
        assert (await kernel.verify("t")).ok
    assert sizes[20_000] - sizes[10_000] <= 16 * 1024, sizes  # flat: nothing piles up


@pytest.mark.slow
async def test_an_agent_without_a_store_runs_13_000_steps_in_bounded_memory() -> None:
    """Each step adds two messages to the conversation, which the thread keeps by design;
    the journal of those steps is bounded by the default retention, so memory grows by the
    messages alone (about 320 bytes a step here, measured; about 1,340 with keep_all).

    The growth is measured from step 11,000 to 13,000, long after the journal reached its
    window (a step commits a few revisions; the window is 1,000 of them). Tracing costs each
    step about four times its time, so the first 10,000 steps run untraced, and the first
    1,000 traced ones are not counted: they hold a one-time rise (about 0.9 MB here) that
    the steps after them do not repeat."""

    async def model(request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(text="ok")

    agent = Agent([], model)
    for _ in range(10_000):
        await agent.run("t", "hello there")
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(1_000):
            await agent.run("t", "hello there")
        gc.collect()
        settled = tracemalloc.get_traced_memory()[0]
        for _ in range(2_000):
            await agent.run("t", "hello there")
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - settled
    finally:
        tracemalloc.stop()
    assert grown / 2_000 < 600, f"{grown / 2_000:.0f} bytes per step"
    assert len(await agent.kernel.history("t")) <= 2 * 1000 + 100


async def test_retention_keeps_what_the_snapshots_of_a_growing_vector_read(
    thread_store: ThreadStore,
) -> None:
    """A Vector's snapshot extends the one that holds its whole value: pruning keeps back to
    that one, so every revision in the window still rebuilds (the whole value is written
    again once the Vector doubled, so what is kept stays about the size of the state)."""
    kernel = Kernel(
        plugins(), thread_store=thread_store, snapshot_every=10, retention=Retention(revisions=25)
    )
    commands = [StateCommand().update(Log, (f"l{i}",)) for i in range(100)]
    head = await commit_all(kernel, "t", *commands, checkpoints=True)
    records = await kernel.history("t")
    assert 25 <= len(records) < head  # pruned, but not into what the window reads
    for revision in (head - 25, records[0].revision):
        snapshot = await kernel.state_at("t", revision)
        assert list(snapshot.get(Log)) == [f"l{i}" for i in range(revision)]
    assert (await Kernel(plugins(), thread_store=thread_store).verify("t")).ok
