"""A ThreadStore's own failure reaches the user as a `StoreError` naming the operation and
the thread, whichever kernel call met it, and the thread is unharmed once the store is back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from journal_samples import Total
from samples import Keys, commit_all

from statekernel import Kernel, OutcomeUnknown, StateCommand, StateError, StoreError
from statekernel.lowlevel import ThreadHead, ThreadSave, ThreadSnapshot, ThreadState
from statekernel.stores import MemoryThreadStore


class FailingStore(MemoryThreadStore):
    """A store whose every call fails while `down`, as a lost connection would."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise ConnectionError("the database went away")

    async def load(self, thread_id: str) -> ThreadState | None:
        self._check()
        return await super().load(thread_id)

    async def head(self, thread_id: str) -> ThreadHead | None:
        self._check()
        return await super().head(thread_id)

    async def save(self, thread_id: str, save: ThreadSave, *, expected_position: int) -> None:
        self._check()
        await super().save(thread_id, save, expected_position=expected_position)

    async def records(self, thread_id: str, **kwargs: Any) -> Any:
        self._check()
        return await super().records(thread_id, **kwargs)

    async def snapshot_at(self, thread_id: str, revision: int) -> ThreadSnapshot | None:
        self._check()
        return await super().snapshot_at(thread_id, revision)

    async def prune(self, thread_id: str, *, before: int) -> None:
        self._check()
        await super().prune(thread_id, before=before)


Call = Callable[[Kernel], Awaitable[Any]]

# (what the user did, the failed operations it may name as (operation, thread), the call)
CALLS: list[tuple[str, set[tuple[str, str]], Call]] = [
    (  # a kernel that saved the thread asks for its head first
        "start a run",
        {("thread load", "t"), ("thread head read", "t")},
        lambda k: k.start_run("t"),
    ),
    ("history", {("thread history read", "t")}, lambda k: k.history("t")),
    ("state at a revision", {("thread history read", "t")}, lambda k: k.state_at("t", 2)),
    ("verify", {("thread history read", "t")}, lambda k: k.verify("t")),
    (  # a fork first reads whether the new thread exists, then the source's history
        "fork",
        {("thread history read", "t2"), ("thread history read", "t"), ("thread fork", "t")},
        lambda k: k.fork("t", 2, "t2"),
    ),
    ("prune", {("thread prune", "t")}, lambda k: k.prune("t", before=2)),
    ("read a stored value", {("thread load", "t")}, lambda k: k.read_stored("t", Total)),
]


@pytest.mark.parametrize(("what", "named", "call"), CALLS, ids=[c[0] for c in CALLS])
async def test_a_store_failure_is_a_store_error_naming_operation_and_thread(
    what: str, named: set[tuple[str, str]], call: Call
) -> None:
    store = FailingStore()
    kernel = Kernel([Keys(Total)], thread_store=store, snapshot_every=1)
    commands = [StateCommand().update(Total, n) for n in (1, 2, 3)]
    await commit_all(kernel, "t", *commands, checkpoints=True)
    store.down = True
    with pytest.raises(StoreError) as caught:
        await call(kernel)
    error = caught.value
    assert isinstance(error, StateError)
    assert (error.operation, error.key) in named
    assert isinstance(error.__cause__, ConnectionError)
    store.down = False
    assert [r.revision for r in await kernel.history("t")] == [1, 2, 3]


async def test_a_save_that_fails_in_the_store_is_a_store_error_and_the_run_stays_open() -> None:
    store = FailingStore()
    kernel = Kernel([Keys(Total)], thread_store=store)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Total, 5))
    store.down = True
    with pytest.raises(StoreError) as caught:
        await run.checkpoint()
    assert (caught.value.operation, caught.value.key) == ("thread save", "t")
    store.down = False
    await run.finish()
    assert [r.revision for r in await kernel.history("t")] == [1]


class AnswerLost(MemoryThreadStore):
    """Applies the next save, then says its outcome is unknown, as a store does whose
    connection broke after the write reached the database."""

    lose_next = False

    async def save(self, thread_id: str, save: ThreadSave, *, expected_position: int) -> None:
        await super().save(thread_id, save, expected_position=expected_position)
        if self.lose_next:
            self.lose_next = False
            raise OutcomeUnknown("thread save", ConnectionResetError("the answer was lost"))


async def test_a_save_whose_outcome_is_unknown_ends_the_runs_saving_and_nothing_lands_twice() -> (
    None
):
    store = AnswerLost()
    kernel = Kernel([Keys(Total)], thread_store=store)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Total, 5))
    store.lose_next = True
    with pytest.raises(OutcomeUnknown):
        await run.checkpoint()  # (it landed: the store did not say so)
    await run.submit(StateCommand().update(Total, 1))
    with pytest.raises(StoreError, match="saves nothing more"):
        await run.finish()  # sending the +5 again would rebase it onto itself: 10
    later = await kernel.start_run("t")  # reads what the store holds
    await later.submit(StateCommand().update(Total, 2))
    await later.finish()
    assert (await kernel.get_state("t")).get(Total) == 7
    assert (await kernel.verify("t")).ok
