"""Forks: a new thread holding the source's state and history up to a revision."""

from __future__ import annotations

from typing import Any

import pytest
from journal_samples import Log, Notes, Scratch, Total, plugins
from samples import Keys, commit_all, read

from statekernel import (
    Kernel,
    KeyScope,
    StateCommand,
    StateError,
    StateKey,
    StateKeyOptions,
    ThreadStore,
    UnknownRevision,
)
from statekernel.stores import MemoryThreadStore


async def test_a_fork_has_the_sources_state_and_history_up_to_its_revision(
    thread_store_or_none: ThreadStore | None,
) -> None:
    kernel = Kernel(plugins(), thread_store=thread_store_or_none, snapshot_every=2)
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


@pytest.mark.parametrize("with_store", [False, True])
async def test_a_fork_of_a_pruned_thread_travels_and_verifies_where_it_can(
    with_store: bool,
) -> None:
    kernel = Kernel(
        [Keys(Total)], thread_store=MemoryThreadStore() if with_store else None, snapshot_every=3
    )
    await commit_all(
        kernel, "src", *(StateCommand().update(Total, 1) for _ in range(8)), checkpoints=True
    )
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


async def test_a_fork_at_a_snapshot_with_no_records_before_it(thread_store: ThreadStore) -> None:
    kernel = Kernel([Keys(Total)], thread_store=thread_store, snapshot_every=3)
    await commit_all(
        kernel, "t", *(StateCommand().update(Total, 1) for _ in range(7)), checkpoints=True
    )
    await kernel.prune("t", before=6)
    await kernel.fork("t", 6, "copy")
    assert (await kernel.state_at("copy", 6)).get(Total) == 6
    assert await read(kernel, "copy", Total) == 6


async def test_a_fork_by_a_kernel_without_a_keys_plugin_keeps_that_key(
    thread_store: ThreadStore,
) -> None:
    full = Kernel([Keys(Notes, Total)], thread_store=thread_store, snapshot_every=2)
    await commit_all(
        full,
        "t",
        StateCommand().update(Total, 1),
        StateCommand().update(Total, 1),
        checkpoints=True,
    )
    await commit_all(
        full, "t", StateCommand().update(Notes, "important"), checkpoints=True
    )  # after the snapshot
    partial = Kernel([Keys(Total)], thread_store=thread_store)
    await partial.fork("t", 3, "copy")
    assert await read(full, "copy", Notes) == "important"
    assert (await full.state_at("copy", 3)).get(Notes) == "important"
    assert (await full.verify("copy")).ok


class Fn(StateKey[int, Any]):
    key = "e.fn"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: Any) -> int:
        return int(update(value)) if callable(update) else value + int(update)


async def test_a_fork_after_an_op_journaled_as_its_value_rebuilds_the_key(
    thread_store: ThreadStore,
) -> None:
    kernel = Kernel([Keys(Fn, Total)], thread_store=thread_store, snapshot_every=2)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Fn, 10))
    await run.checkpoint()
    await run.submit(StateCommand().update(Fn, lambda v: v * 2))  # journaled as its value
    await run.submit(StateCommand().update(Fn, 1))
    await run.submit(StateCommand().update(Total, 1))
    await run.finish()
    assert await read(kernel, "t", Fn) == 21
    await kernel.fork("t", 3, "copy")
    assert (await kernel.state_at("copy", 3)).get(Fn) == 21
    await commit_all(
        kernel, "copy", *(StateCommand().update(Total, 1) for _ in range(3)), checkpoints=True
    )
    loaded = await thread_store.load("copy")
    assert loaded is not None and loaded.snapshot_revision >= 5  # not held back
    assert (await kernel.verify("copy")).ok


async def test_a_fork_into_an_id_deleted_earlier_holds_nothing_of_the_old_thread(
    thread_store: ThreadStore,
) -> None:
    kernel = Kernel(
        [Keys(Scratch, Total, options={Scratch: StateKeyOptions(persistent=False)})],
        thread_store=thread_store,
    )
    await commit_all(
        kernel, "old", StateCommand().update(Scratch, 42).update(Total, 1), checkpoints=True
    )
    await thread_store.delete("old")
    await commit_all(kernel, "src", StateCommand().update(Total, 7), checkpoints=True)
    await kernel.fork("src", 1, "old")
    run = await kernel.start_run("old")
    assert run.snapshot.to_dict() == {"e.total": 7}
    await run.abandon()
