"""A conformance suite for store backends: any ProfileStore or ThreadStore runs it against
itself, and every backend then behaves the same on every input it tries.

The suite is two pytest classes, `ThreadStoreContract` and `ProfileStoreContract`.
statekernel runs it against its memory, SQLite and PostgreSQL stores
(`tests/test_store_contract.py`). A backend of your own (Redis, DynamoDB, a service)
subclasses the contract in its tests (the class name starting with `Test`) and gives it a
fixture yielding a fresh, empty store per test (`thread_store` or `profile_store`). Each
also needs a way to damage what it stores, the way a hand edit or a bad restore of your
backend would: a ThreadStore `edit_record`, an async function `(thread_id, revision, data)`
that changes one stored record behind the store's back (`data` None deletes it, bytes
replace it or add it); a ProfileStore `break_entry`, an async function `(namespace, key)`
that makes one stored entry no longer decode. Every test of the contract then runs against
your store:

```python
import pytest
from statekernel.testing.store_contract import ProfileStoreContract, ThreadStoreContract


class TestMyThreadStore(ThreadStoreContract):
    @pytest.fixture
    async def thread_store(self):
        async with MyThreadStore(...) as store:
            yield store

    @pytest.fixture
    def edit_record(self, thread_store):
        async def edit(thread_id, revision, data):
            ...  # delete (data None) or write that stored record, bypassing the store

        return edit


class TestMyProfileStore(ProfileStoreContract):
    @pytest.fixture
    async def profile_store(self):
        async with MyProfileStore(...) as store:
            yield store

    @pytest.fixture
    def break_entry(self, profile_store):
        async def corrupt(namespace, key):
            ...  # make that stored entry no longer decode, the way your backend could

        return corrupt
```

It needs pytest and pytest-asyncio (async fixtures in their "auto" mode, or declared with
`pytest_asyncio.fixture`). Each test says in its name what a user relies on; a failure names
the input and what the store did with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest

from .._durable.chain import Chain, chain_records, link_of
from .._durable.journal import CommitRecord, JournalOp
from .._durable.store import (
    JournalEntry,
    SupportsHead,
    SupportsLoadSince,
    SupportsRunEvents,
    ThreadHead,
    ThreadSave,
    ThreadStore,
)
from .._engine.plugin import Plugin, PluginRegistrar
from .._errors import (
    DecodeFailed,
    JournalCorrupted,
    RevisionConflict,
    StateValidationError,
    StoreError,
    UnknownThread,
    VersionConflict,
)
from .._host.kernel import Kernel
from .._profile.changes import ChangeFeed, SupportsChanges
from .._profile.store import ProfileStore, SupportsAtomicUpdate, SupportsNamespaces
from .._values.commands import StateCommand
from .._values.keys import KeyScope, MergeStrategy, StateKey
from .._values.phases import Phase
from .._values.run_events import decode_run_events

__all__ = ["HOSTILE_NAMES", "EditRecord", "ProfileStoreContract", "ThreadStoreContract"]

HOSTILE_NAMES = (
    "'; DROP TABLE thread_states; --",
    'quote " and \\ backslash',
    "%_ wildcards_%",
    "\U0010ffff last code point",
    "tab\tnew\nline",
    "é" * 300,
)
"""Names every store keeps as they are: SQL metacharacters, LIKE wildcards, escapes, the
last code point, control characters, a long name."""

REFUSED_NAMES = (("t\ud800", "lone surrogate"), ("t\x00nul", "NUL character"))
"""Names every store refuses with ValueError, before anything is stored."""

_MARK = pytest.mark.asyncio

EditRecord = Callable[[str, int, bytes | None], Awaitable[None]]
"""`await edit_record(thread_id, revision, data)`: the stored record of `revision` deleted
(`data` None) or written as `data`, behind the store's back."""


class _Count(StateKey[int, int]):
    key = "contract.count"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class _Note(StateKey[str, str]):
    key = "contract.note"
    scope = KeyScope.THREAD
    default = ""


class _Keys(Plugin):
    id = "contract"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(_Count)
        registrar.register_key(_Note)


def _record(thread_id: str, revision: int, value: int) -> CommitRecord:
    return CommitRecord(
        thread_id=thread_id,
        revision=revision,
        run_id=None,
        phase=None,
        step=0,
        sources=("external",),
        ops=(JournalOp(_Count.key, "update", str(value).encode()),),
        created_at=datetime.datetime.fromtimestamp(0, datetime.UTC),
    )


def _save(thread_id: str, first: int, last: int, chain: Chain, **fields: Any) -> ThreadSave:
    """A save of records `first..last` (their ops add 1 each), linked on from `chain`."""
    records = [_record(thread_id, revision, 1) for revision in range(first, last + 1)]
    entries, after = chain_records(records, chain)
    return ThreadSave(revision=last, records=entries, seal=after.seal(), **fields)


async def _commits(kernel: Kernel, thread_id: str, count: int, *, every: int = 0) -> None:
    run = await kernel.start_run(thread_id)
    for index in range(count):
        await run.submit(StateCommand().update(_Count, 1))
        if every and (index + 1) % every == 0:
            await run.checkpoint()
    await run.finish()


async def _count(kernel: Kernel, thread_id: str) -> int:
    """The thread's `_Count` (0 while no save of it landed)."""
    try:
        return (await kernel.get_state(thread_id)).get(_Count)
    except UnknownThread:
        return 0


@_MARK
class ThreadStoreContract:
    """The ThreadStore contract (`statekernel.lowlevel.ThreadSave` and friends): subclass it
    and give it a `thread_store` fixture yielding a fresh, empty store, and `edit_record`,
    an async function `(thread_id, revision, data)` that deletes (`data` None) or writes one
    stored record behind the store's back, the way a hand edit of the backend would.

    What it asserts of a ThreadStore:

    - absent threads are absent everywhere;
    - a save loads back byte for byte (records, seal, run values);
    - of two saves from one write position only the first lands, also among eight
      concurrent savers;
    - records follow the head one by one;
    - reads by revision, snapshots and `prune`;
    - `threads()` sorted by literal prefix;
    - hostile ids kept as they are (`HOSTILE_NAMES`: SQL metacharacters, wildcards, the last
      code point, control characters, long names), and ids no store can keep
      (`REFUSED_NAMES`: a lone surrogate, a NUL) refused alike;
    - a record handed to the store altered is caught by the kernel's chain;
    - a thread whose newest record was lost (its head still names it) is `JournalCorrupted`
      in a load, `history`, `get_state`, `state_at` and `export_state` alike, and `verify`
      names that revision; so is a record beyond the head (no save leaves one: a store
      writes a save's records and its head in one transaction), which `load` must hand back
      for the kernel to see, never filter out;
    - two kernels adding to one thread both land, and an exclusive one conflicts;
    - of a store with the optional `SupportsHead`, `SupportsLoadSince` or
      `SupportsRunEvents` (the others skip these tests): a head is the loaded position and
      seal; `load_since` leaves out the snapshot and records a reader at that revision
      holds; run events are kept in save order, and `prune` drops those of what it forgets.
    """

    @pytest.fixture
    async def thread_store(self) -> ThreadStore:
        pytest.fail(f"{type(self).__name__} needs a `thread_store` fixture: a fresh store")

    @pytest.fixture
    def edit_record(self) -> EditRecord:
        pytest.fail(
            f"{type(self).__name__} needs an `edit_record` fixture: an async function "
            f"(thread_id, revision, data) that changes that stored record behind the store's "
            f"back (data None deletes it, bytes replace it or add it)"
        )

    async def test_a_thread_never_saved_is_absent_everywhere(
        self, thread_store: ThreadStore
    ) -> None:
        assert await thread_store.load("never") is None
        assert await thread_store.records("never") == []
        assert await thread_store.snapshot_at("never", 10) is None
        assert await thread_store.threads() == []
        await thread_store.delete("never")  # a no-op
        await thread_store.prune("never", before=5)  # a no-op

    async def test_a_save_loads_back_byte_for_byte(self, thread_store: ThreadStore) -> None:
        save = _save("t", 1, 3, Chain(), runs=2, run_values={"r": b"1"}, suspended=b"waiting")
        await thread_store.save("t", save, expected_position=0)
        state = await thread_store.load("t")
        assert state is not None
        assert (state.revision, state.runs, state.position) == (3, 2, 1)
        assert (state.run_values, state.suspended, state.seal) == (
            {"r": b"1"},
            b"waiting",
            save.seal,
        )
        assert state.records == save.records  # the chain needs every byte as it was given
        assert (state.values, state.snapshot_revision) == ({}, 0)

    async def test_a_head_is_the_loaded_position_and_seal(self, thread_store: ThreadStore) -> None:
        if not isinstance(thread_store, SupportsHead):
            pytest.skip(f"{type(thread_store).__name__} does not offer head() (optional)")
        assert await thread_store.head("t") is None
        first = _save("t", 1, 2, Chain())
        await thread_store.save("t", first, expected_position=0)
        assert await thread_store.head("t") == ThreadHead(1, 2, first.seal)
        empty = ThreadSave(revision=2, seal=b"another seal")
        await thread_store.save("t", empty, expected_position=1)
        state = await thread_store.load("t")
        assert state is not None
        assert await thread_store.head("t") == ThreadHead(state.position, 2, state.seal)
        assert (state.position, state.seal) == (2, b"another seal")
        await thread_store.delete("t")
        assert await thread_store.head("t") is None

    async def test_load_since_leaves_out_what_the_reader_holds(
        self, thread_store: ThreadStore
    ) -> None:
        if not isinstance(thread_store, SupportsLoadSince):
            pytest.skip(f"{type(thread_store).__name__} does not offer load_since() (optional)")
        assert await thread_store.load_since("t", 0) is None
        chain = Chain()
        first = _save("t", 1, 3, chain, snapshot={"contract.count": b"3"}, runs=1)
        await thread_store.save("t", first, expected_position=0)
        chain = chain_records([_record("t", r, 1) for r in range(1, 4)], chain)[1]
        second = _save("t", 4, 6, chain, runs=2, suspended=b"waiting")
        await thread_store.save("t", second, expected_position=1)
        since = await thread_store.load_since("t", 4)  # holds the snapshot at 3 and record 4
        assert since is not None
        assert (since.revision, since.position, since.runs) == (6, 2, 2)
        assert (since.suspended, since.seal) == (b"waiting", second.seal)
        assert (since.values, since.snapshot_revision) == ({}, 3)
        assert since.records == second.records[1:]
        at_head = await thread_store.load_since("t", 6)
        assert at_head is not None and (at_head.records, at_head.values) == ((), {})
        # A reader from before the newest snapshot gets what `load` gives.
        assert await thread_store.load_since("t", 2) == await thread_store.load("t")
        with pytest.raises(TypeError):
            await thread_store.load_since("t", "4")  # type: ignore[arg-type]

    async def test_run_events_are_kept_in_save_order_if_supported(
        self, thread_store: ThreadStore
    ) -> None:
        if not isinstance(thread_store, SupportsRunEvents):
            pytest.skip(f"{type(thread_store).__name__} does not keep run events (optional)")
        assert await thread_store.run_events("t") == []
        first = _save("t", 1, 2, Chain(), events=b"first")
        await thread_store.save("t", first, expected_position=0)
        await thread_store.save("t", ThreadSave(revision=2, seal=first.seal), expected_position=1)
        third = _save("t", 3, 3, Chain(), events=b"\x00third")
        await thread_store.save("t", third, expected_position=2)
        with pytest.raises(RevisionConflict):  # a save that does not land keeps no events
            await thread_store.save(
                "t", _save("t", 3, 3, Chain(), events=b"lost"), expected_position=2
            )
        assert await thread_store.run_events("t") == [b"first", b"\x00third"]
        await thread_store.save(
            "u", _save("u", 1, 1, Chain(), events=b"other"), expected_position=0
        )
        await thread_store.delete("t")
        assert await thread_store.run_events("t") == []
        assert await thread_store.run_events("u") == [b"other"]

    async def test_prune_drops_the_run_events_of_what_it_forgets(
        self, thread_store: ThreadStore
    ) -> None:
        if not isinstance(thread_store, SupportsRunEvents):
            pytest.skip(f"{type(thread_store).__name__} does not keep run events (optional)")
        kernel = Kernel([_Keys()], thread_store=thread_store, snapshot_every=5)
        for _ in range(4):  # each run: 5 commits, a snapshot, one batch of events at its end
            run = await kernel.start_run("t")
            await run.run_phase(Phase.RUN_START)
            for _ in range(5):
                await run.submit(StateCommand().update(_Count, 1))
            await run.finish()
        assert len(await thread_store.run_events("t")) == 4
        await thread_store.prune("t", before=12)  # keeps the snapshot at 10 on
        saved_at = [
            max(event.revision for event in decode_run_events(data))
            for data in await thread_store.run_events("t")
        ]
        assert saved_at == [10, 15, 20]  # the events of the saves it still holds

    async def test_only_the_first_of_two_saves_from_one_position_lands(
        self, thread_store: ThreadStore
    ) -> None:
        first = _save("t", 1, 1, Chain())
        await thread_store.save("t", first, expected_position=0)
        with pytest.raises(RevisionConflict):
            await thread_store.save("t", _save("t", 1, 1, Chain()), expected_position=0)
        state = await thread_store.load("t")
        assert state is not None and (state.revision, state.position) == (1, 1)
        empty = ThreadSave(revision=1, seal=first.seal)  # moves the position, carries nothing
        await thread_store.save("t", empty, expected_position=1)
        with pytest.raises(RevisionConflict):
            await thread_store.save("t", empty, expected_position=1)
        state = await thread_store.load("t")
        assert state is not None and state.position == 2

    async def test_concurrent_savers_of_one_position_yield_exactly_one_winner(
        self, thread_store: ThreadStore
    ) -> None:
        await thread_store.save("t", _save("t", 1, 1, Chain()), expected_position=0)
        outcomes = await asyncio.gather(
            *(
                thread_store.save("t", _save("t", 2, 2, Chain()), expected_position=1)
                for _ in range(8)
            ),
            return_exceptions=True,
        )
        assert sum(outcome is None for outcome in outcomes) == 1
        assert all(o is None or isinstance(o, RevisionConflict) for o in outcomes)

    async def test_records_must_follow_the_head_one_by_one(self, thread_store: ThreadStore) -> None:
        await thread_store.save("t", _save("t", 1, 2, Chain()), expected_position=0)
        with pytest.raises(StoreError):  # a gap: revision 3 is missing
            await thread_store.save("t", _save("t", 4, 4, Chain()), expected_position=1)
        with pytest.raises(StoreError):  # revision 2 again
            await thread_store.save("t", _save("t", 2, 3, Chain()), expected_position=1)
        state = await thread_store.load("t")
        assert state is not None and (state.revision, state.position) == (2, 1)

    async def test_records_and_snapshots_are_read_by_revision(
        self, thread_store: ThreadStore
    ) -> None:
        chain = Chain()
        for position, first in enumerate((1, 4, 7)):
            save = _save("t", first, first + 2, chain)
            values = {"contract.count": str(first + 2).encode()}
            save = msgspec.structs.replace(save, snapshot=values)
            await thread_store.save("t", save, expected_position=position)
            chain = chain_records([_record("t", r, 1) for r in range(first, first + 3)], chain)[1]
        held = await thread_store.records("t", since=2, until=6)
        assert [entry.revision for entry in held] == [3, 4, 5, 6]
        assert [e.revision for e in await thread_store.records("t", since=5, limit=2)] == [6, 7]
        assert [e.revision for e in await thread_store.records("t")] == list(range(1, 10))
        snapshot = await thread_store.snapshot_at("t", 8)
        assert snapshot is not None and snapshot.revision == 6
        assert await thread_store.snapshot_at("t", 2) is None
        state = await thread_store.load("t")  # the newest snapshot and what follows it
        assert state is not None and state.snapshot_revision == 9 and state.records == ()

    async def test_prune_keeps_the_newest_snapshot_at_or_before_the_cut(
        self, thread_store: ThreadStore
    ) -> None:
        kernel = Kernel([_Keys()], thread_store=thread_store, snapshot_every=5)
        await _commits(kernel, "t", 20, every=1)  # snapshots at 5, 10, 15, 20
        await thread_store.prune("t", before=12)
        held = await thread_store.records("t")
        assert held[0].revision == 11  # from the snapshot at 10 on
        assert (await kernel.state_at("t", 10)).get(_Count) == 10
        assert (await kernel.verify("t")).ok

    async def test_threads_are_listed_sorted_by_literal_prefix(
        self, thread_store: ThreadStore
    ) -> None:
        for thread in ("b-2", "a_1", "b-1", "a%1", "c"):
            await thread_store.save(thread, _save(thread, 1, 1, Chain()), expected_position=0)
        assert await thread_store.threads() == ["a%1", "a_1", "b-1", "b-2", "c"]
        assert await thread_store.threads(prefix="a_") == ["a_1"]
        assert await thread_store.threads(prefix="b", limit=1) == ["b-1"]
        await thread_store.delete("c")
        assert await thread_store.threads(prefix="c") == []
        assert await thread_store.load("c") is None

    async def test_hostile_thread_ids_are_kept_as_they_are(self, thread_store: ThreadStore) -> None:
        for name in HOSTILE_NAMES:
            await thread_store.save(name, _save(name, 1, 1, Chain()), expected_position=0)
            state = await thread_store.load(name)
            assert state is not None and state.revision == 1, name
        assert await thread_store.threads() == sorted(HOSTILE_NAMES)

    async def test_ids_no_store_can_keep_are_refused_alike(self, thread_store: ThreadStore) -> None:
        calls: list[Callable[[Any], Awaitable[Any]]] = [
            thread_store.load,
            thread_store.records,
            thread_store.delete,
            lambda name: thread_store.snapshot_at(name, 1),
            lambda name: thread_store.prune(name, before=1),
            lambda name: thread_store.save(name, _save("x", 1, 1, Chain()), expected_position=0),
        ]
        if isinstance(thread_store, SupportsLoadSince):
            calls.append(lambda name: thread_store.load_since(name, 0))
        for call in calls:
            with pytest.raises(TypeError):
                await call(123)
            for name, why in REFUSED_NAMES:
                with pytest.raises(ValueError, match=why):
                    await call(name)
        assert await thread_store.threads() == []

    async def test_the_kernel_catches_a_record_the_store_was_handed_altered(
        self, thread_store: ThreadStore
    ) -> None:
        """The chain works over the store: a thread saved with one record altered (a bad
        restore would leave one) is refused on load, naming the revision."""
        kernel = Kernel([_Keys()], thread_store=thread_store)
        await _commits(kernel, "source", 5)
        state = await thread_store.load("source")
        assert state is not None and state.seal is not None
        records = list(state.records)
        third = records[2]
        records[2] = JournalEntry(
            third.revision, third.data.replace(b"update\xc4\x011", b"update\xc4\x017")
        )
        assert records[2] != third
        copy = ThreadSave(revision=state.revision, records=tuple(records), seal=state.seal)
        await thread_store.save("copy", copy, expected_position=0)
        with pytest.raises(JournalCorrupted) as refused:
            await kernel.start_run("copy")
        assert refused.value.revision == 3
        report = await kernel.verify("copy")
        assert (report.ok, report.first_divergence) == (False, 3)
        assert (await kernel.verify("source")).ok

    @pytest.mark.parametrize("lost", [1, 2])
    async def test_a_thread_whose_newest_record_was_lost_is_journal_corrupted(
        self, thread_store: ThreadStore, edit_record: EditRecord, lost: int
    ) -> None:
        """The head is the commit point and names the newest record: with that record gone
        (or the newest few: deleted by hand, lost in a partial restore), every read of the
        thread says the journal is damaged and where, never that the revision is unknown;
        the revisions before, and the other threads, still read."""
        writer = Kernel([_Keys()], thread_store=thread_store)
        await _commits(writer, "t", 5)
        await _commits(writer, "u", 2)
        for revision in range(6 - lost, 6):
            await edit_record("t", revision, None)
        gone = "no record of revision 5" if lost == 1 else "no records of revisions 4 to 5"
        kernel = Kernel([_Keys()], thread_store=thread_store)  # it reads what the store holds
        reads: dict[str, Callable[[], Awaitable[Any]]] = {
            "load": lambda: kernel.start_run("t"),
            "history": lambda: kernel.history("t"),
            "get_state": lambda: kernel.get_state("t"),
            "state_at": lambda: kernel.state_at("t", 5),
            "export_state": lambda: kernel.export_state("t"),
        }
        for name, read in reads.items():
            with pytest.raises(JournalCorrupted) as refused:
                await read()
            assert refused.value.revision == 6 - lost, name  # the first one missing
            assert f"its head names revision 5, but the store holds {gone}" in (
                refused.value.problem
            ), name
        report = await kernel.verify("t")
        assert report.ok is False
        assert (await kernel.state_at("t", 5 - lost)).get(_Count) == 5 - lost
        assert (await kernel.get_state("u")).get(_Count) == 2

    @pytest.mark.parametrize("forged", [1, 2])
    async def test_a_record_beyond_the_head_is_journal_corrupted(
        self, thread_store: ThreadStore, edit_record: EditRecord, forged: int
    ) -> None:
        """A record past the head (or a few), well formed and chained to the newest: no save
        leaves one, so it was put there by hand or the head was restored from an older
        backup. A load, `history` and `get_state` report it on every backend; none ignores
        it."""
        await _commits(Kernel([_Keys()], thread_store=thread_store), "t", 5)
        state = await thread_store.load("t")
        assert state is not None and state.records[-1].revision == 5
        extra = [_record("t", revision, 1) for revision in range(6, 6 + forged)]
        entries, _ = chain_records(extra, Chain(link_of(state.records[-1].data)))
        for entry in entries:
            await edit_record("t", entry.revision, entry.data)
        beyond = "a record of revision 6" if forged == 1 else "records of revisions 6 to 7"
        kernel = Kernel([_Keys()], thread_store=thread_store)
        reads: dict[str, Callable[[], Awaitable[Any]]] = {
            "load": lambda: kernel.start_run("t"),
            "history": lambda: kernel.history("t"),
            "get_state": lambda: kernel.get_state("t"),
        }
        for name, read in reads.items():
            with pytest.raises(JournalCorrupted) as refused:
                await read()
            assert refused.value.revision == 6, name
            assert f"{beyond} beyond its head (revision 5)" in refused.value.problem, name
        report = await kernel.verify("t")
        assert (report.ok, report.first_divergence) == (False, 6)

    async def test_two_kernels_adding_to_one_thread_both_land(
        self, thread_store: ThreadStore
    ) -> None:
        await _commits(Kernel([_Keys()], thread_store=thread_store), "t", 1)
        first = await Kernel([_Keys()], thread_store=thread_store).start_run("t")
        second = await Kernel([_Keys()], thread_store=thread_store).start_run("t")
        await first.submit(StateCommand().update(_Count, 10))
        await second.submit(StateCommand().update(_Count, 100))
        await first.finish()
        await second.finish()  # rebases: it only added
        reader = Kernel([_Keys()], thread_store=thread_store)
        assert (await reader.state_at("t", 3)).get(_Count) == 111
        assert (await reader.verify("t")).ok
        exclusive = await Kernel([_Keys()], thread_store=thread_store).start_run("t")
        other = await Kernel([_Keys()], thread_store=thread_store).start_run("t")
        await exclusive.submit(StateCommand().update(_Note, "mine"))
        await other.submit(StateCommand().update(_Note, "theirs"))
        await exclusive.finish()
        with pytest.raises(RevisionConflict):
            await other.finish()

    async def test_a_save_cut_by_its_callers_deadline_lands_whole_or_not_at_all(
        self, thread_store: ThreadStore
    ) -> None:
        """A caller whose own deadline ends a save (`asyncio.wait_for`, `asyncio.timeout`)
        leaves the thread as before the save or as after it, and the store usable: the same
        save sent again from the same position either lands or names the first one's
        landing as a conflict."""
        for limit in (0, 0.0001, 0.001, 0.01, 0.1):
            state = await thread_store.load("t")
            position, revision = (0, 0) if state is None else (state.position, state.revision)
            save = _save("t", revision + 1, revision + 2, Chain())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    thread_store.save("t", save, expected_position=position), limit
                )
            with contextlib.suppress(RevisionConflict):
                await thread_store.save("t", save, expected_position=position)
            state = await thread_store.load("t")
            assert state is not None and state.revision == revision + 2
            records = await thread_store.records("t")
            assert [r.revision for r in records] == list(range(1, revision + 3))

    async def test_a_run_cancelled_while_it_saves_loses_nothing_and_keeps_the_thread_whole(
        self, thread_store: ThreadStore
    ) -> None:
        """Cancelled at any point of its final save, a run's commits are in the thread whole
        or not at all; the thread verifies, and the next run on it lands."""
        total = 0
        for turns in range(8):  # cancel after this many turns of the event loop
            run = await Kernel([_Keys()], thread_store=thread_store).start_run("t")
            for _ in range(3):
                await run.submit(StateCommand().update(_Count, 1))
            finishing = asyncio.ensure_future(run.finish())
            for _ in range(turns):
                await asyncio.sleep(0)
            finishing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await finishing
            reader = Kernel([_Keys()], thread_store=thread_store)
            assert await _count(reader, "t") in (total, total + 3)
            after = await Kernel([_Keys()], thread_store=thread_store).start_run("t")
            await after.submit(StateCommand().update(_Count, 1))
            await after.finish()  # (it rebases over a cancelled save that landed meanwhile)
            now = await _count(reader, "t")
            assert now in (total + 1, total + 4)
            assert (await reader.verify("t")).ok
            total = now


@_MARK
class ProfileStoreContract:
    """The ProfileStore contract: subclass it and give it a `profile_store` fixture yielding
    a fresh, empty store (with the default size limit), and `break_entry`, an async function
    `(namespace, key)` that makes one stored entry no longer decode, the way the backend
    could come to hold it.

    What it asserts of a ProfileStore:

    - versions and compare-and-set;
    - JSON values only;
    - a 10 MB value kept, and one over the limit refused;
    - `list` by literal prefix, and `clear` of one namespace;
    - hostile and refused names (`HOSTILE_NAMES`, `REFUSED_NAMES`);
    - one entry that no longer decodes costing only itself;
    - no update lost among 50 concurrent writers;
    - of a store with the optional `SupportsNamespaces` (the others skip this test):
      `namespaces()` lists those holding entries;
    - of a store with the optional `SupportsChanges` (the others skip these tests): a feed
      reports each kind of write made after it was entered (a `set`, a compare-and-set, an
      `update` where the store has one, a `delete`, a `clear`) by its key or as None, a
      `next()` cancelled while it waits loses nothing, and a write to another namespace is
      never reported by its key.
    """

    @pytest.fixture
    async def profile_store(self) -> ProfileStore:
        pytest.fail(f"{type(self).__name__} needs a `profile_store` fixture: a fresh store")

    @pytest.fixture
    def break_entry(self) -> Callable[[str, str], Awaitable[None]]:
        pytest.fail(
            f"{type(self).__name__} needs a `break_entry` fixture: an async function "
            f"(namespace, key) that makes that stored entry no longer decode"
        )

    async def test_an_entry_sets_gets_and_counts_versions(
        self, profile_store: ProfileStore
    ) -> None:
        assert await profile_store.get("ns", "k") is None
        first = await profile_store.set("ns", "k", {"a": [1, 2]})
        assert (first.value, first.version) == ({"a": [1, 2]}, 1)
        second = await profile_store.set("ns", "k", (1, 2))
        assert second.version == 2
        got = await profile_store.get("ns", "k")  # JSON: a tuple comes back a list
        assert got is not None and (got.value, got.version) == ([1, 2], 2)

    async def test_compare_and_set_refuses_and_keeps_what_is_stored(
        self, profile_store: ProfileStore
    ) -> None:
        await profile_store.set("ns", "k", 1, expected_version=0)  # must not exist: it does not
        with pytest.raises(VersionConflict):
            await profile_store.set("ns", "k", 2, expected_version=0)
        with pytest.raises(VersionConflict):
            await profile_store.set("ns", "k", 2, expected_version=5)
        entry = await profile_store.set("ns", "k", 3, expected_version=1)
        assert entry.version == 2
        got = await profile_store.get("ns", "k")
        assert got is not None and got.value == 3

    async def test_a_value_that_is_not_json_is_refused(self, profile_store: ProfileStore) -> None:
        with pytest.raises(StateValidationError):
            await profile_store.set("ns", "k", object())
        assert await profile_store.get("ns", "k") is None

    async def test_a_value_over_the_size_limit_is_refused_and_ten_megabytes_kept(
        self, profile_store: ProfileStore
    ) -> None:
        big = "x" * (10 * 1024 * 1024)
        await profile_store.set("ns", "big", big)
        got = await profile_store.get("ns", "big")
        assert got is not None and got.value == big
        with pytest.raises(StoreError):
            await profile_store.set("ns", "huge", "x" * (17 * 1024 * 1024))
        assert await profile_store.get("ns", "huge") is None

    async def test_list_is_sorted_by_literal_prefix_and_clear_empties_one_namespace(
        self, profile_store: ProfileStore
    ) -> None:
        for key in ("b-2", "a_1", "b-1", "a%1", "c"):
            await profile_store.set("ns", key, key)
        await profile_store.set("other", "a_1", 0)
        assert [e.key for e in await profile_store.list("ns")] == ["a%1", "a_1", "b-1", "b-2", "c"]
        assert [e.key for e in await profile_store.list("ns", "a_")] == ["a_1"]
        await profile_store.delete("ns", "c")
        await profile_store.delete("ns", "c")  # a no-op
        await profile_store.clear("ns")
        assert await profile_store.list("ns") == []
        assert [e.key for e in await profile_store.list("other")] == ["a_1"]

    async def test_namespaces_lists_those_holding_entries_if_supported(
        self, profile_store: ProfileStore
    ) -> None:
        if not isinstance(profile_store, SupportsNamespaces):
            pytest.skip("the store does not have the optional SupportsNamespaces")
        assert await profile_store.namespaces() == []
        for namespace in ("team_a", "b", "team_%", "team_b"):
            await profile_store.set(namespace, "k", 1)
        await profile_store.set("gone", "k", 1)
        await profile_store.delete("gone", "k")
        assert await profile_store.namespaces() == ["b", "team_%", "team_a", "team_b"]
        assert await profile_store.namespaces("team_%") == ["team_%"]
        await profile_store.clear("b")
        assert await profile_store.namespaces() == ["team_%", "team_a", "team_b"]

    async def test_hostile_names_are_kept_as_they_are(self, profile_store: ProfileStore) -> None:
        for name in HOSTILE_NAMES:
            await profile_store.set(name, name, name)
            got = await profile_store.get(name, name)
            assert got is not None and got.value == name, name
        assert [e.key for e in await profile_store.list(HOSTILE_NAMES[0])] == [HOSTILE_NAMES[0]]

    async def test_names_no_store_can_keep_are_refused_alike(
        self, profile_store: ProfileStore
    ) -> None:
        for name, why in REFUSED_NAMES:
            with pytest.raises(ValueError, match=why):
                await profile_store.set("ns", name, 1)
            with pytest.raises(ValueError, match=why):
                await profile_store.get(name, "k")
        with pytest.raises(TypeError):
            await profile_store.get("ns", 123)  # type: ignore[arg-type]
        assert await profile_store.list("ns") == []

    async def test_one_entry_that_no_longer_decodes_costs_only_itself(
        self,
        profile_store: ProfileStore,
        break_entry: Callable[[str, str], Awaitable[None]],
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        await profile_store.set("ns", "bad", 1)
        await profile_store.set("ns", "good", 2)
        await break_entry("ns", "bad")
        with pytest.raises(DecodeFailed) as refused:
            await profile_store.get("ns", "bad")
        assert (refused.value.key, refused.value.record) == ("ns", "bad")
        with caplog.at_level(logging.WARNING, logger="statekernel"):
            assert [entry.key for entry in await profile_store.list("ns")] == ["good"]
        assert "'bad'" in caplog.text
        await profile_store.set("ns", "bad", "repaired")
        got = await profile_store.get("ns", "bad")
        assert got is not None and got.value == "repaired"

    async def test_concurrent_writers_lose_no_update(self, profile_store: ProfileStore) -> None:
        update = getattr(profile_store, "update", None)

        async def add_one() -> None:
            if update is not None:
                await update("ns", "n", lambda entry: 1 if entry is None else entry.value + 1)
                return
            while True:  # compare-and-set, as ProfileAccess does without an atomic update
                entry = await profile_store.get("ns", "n")
                try:
                    await profile_store.set(
                        "ns",
                        "n",
                        1 if entry is None else entry.value + 1,
                        expected_version=0 if entry is None else entry.version,
                    )
                    return
                except VersionConflict:
                    continue

        await asyncio.gather(*(add_one() for _ in range(50)))
        got = await profile_store.get("ns", "n")
        assert got is not None and got.value == 50

    async def test_a_change_feed_reports_every_kind_of_write_after_it_is_entered(
        self, profile_store: ProfileStore
    ) -> None:
        store = _with_changes(profile_store)
        await profile_store.set("ns", "gone", 0)
        await profile_store.set("ns", "cleared", 0)
        async with store.changes("ns") as feed:
            await profile_store.set("ns", "set", 1)
            await _reported(feed, {"set"})
            await profile_store.set("ns", "created", 1, expected_version=0)
            await profile_store.set("ns", "set", 2, expected_version=1)
            await _reported(feed, {"created", "set"})
            if isinstance(profile_store, SupportsAtomicUpdate):
                await profile_store.update("ns", "updated", lambda entry: 1)
                await _reported(feed, {"updated"})
            await profile_store.delete("ns", "gone")
            await _reported(feed, {"gone"})
            await profile_store.clear("ns")
            await _reported(feed, {"cleared", "set", "created"})

    async def test_a_cancelled_next_of_a_change_feed_loses_nothing(
        self, profile_store: ProfileStore
    ) -> None:
        store = _with_changes(profile_store)
        async with store.changes("ns") as feed:
            written: set[str] = set()
            told: set[str] = set()
            for n in range(20):
                waiting = asyncio.ensure_future(feed.next())
                for _ in range(n % 4):  # cancelled before it waits, or while it does
                    await asyncio.sleep(0)
                await profile_store.set("ns", f"k{n}", n)
                written.add(f"k{n}")
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    keys = await waiting
                    if keys is None:  # anything may have changed: none is owed any more
                        written.clear()
                    else:
                        told |= keys
            await _reported(feed, written - told)

    async def test_a_change_feed_never_names_a_key_written_in_another_namespace(
        self, profile_store: ProfileStore
    ) -> None:
        store = _with_changes(profile_store)
        async with store.changes("ns") as feed:
            await profile_store.set("other", "elsewhere", 1)
            await profile_store.set("ns.sub", "nested", 1)
            await profile_store.set("ns", "here", 1)
            seen = await _reported(feed, {"here"})
        assert not seen & {"elsewhere", "nested"}, seen


_FEED_PATIENCE = 30.0  # seconds: only so that a feed that never reports fails, not hangs


def _with_changes(store: ProfileStore) -> SupportsChanges:
    if not isinstance(store, SupportsChanges):
        pytest.skip("the store does not have the optional SupportsChanges")
    return store


async def _reported(feed: ChangeFeed, keys: set[str]) -> set[str]:
    """Wait until the feed has reported every one of `keys`, or None (which stands for
    any); what it named meanwhile."""
    seen: set[str] = set()
    async with asyncio.timeout(_FEED_PATIENCE):
        while not keys <= seen:
            got = await feed.next()
            if got is None:
                return seen
            seen |= got
    return seen
