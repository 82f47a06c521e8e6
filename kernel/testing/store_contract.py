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
`pytest_asyncio.fixture`). Each test says in its name what a user relies on. Every failure is
a `ContractBroken` that names the promise (the protocol method and the input), what the
contract expected and what the store did instead, e.g. `ProfileStore.get of an entry that
no longer decodes (...): expected DecodeFailed(key='ns', record='bad'), got KeyError('bad')`;
an exception the store raised is its cause, so pytest shows where. The docs page "Writing a
store" builds a store that passes, with the helpers of `statekernel.lowlevel`
(`check_name`, `encode_entry`, `Entry`, ...), and lists every promise.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

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
from .._profile.store import Entry, ProfileStore, SupportsAtomicUpdate, SupportsNamespaces
from .._values.commands import StateCommand
from .._values.keys import KeyScope, MergeStrategy, StateKey
from .._values.phases import Phase
from .._values.run_events import decode_run_events
from .expectations import ContractBroken, expect, expect_error, expect_that, explained, shown

__all__ = [
    "HOSTILE_NAMES",
    "REFUSED_NAMES",
    "ContractBroken",
    "EditRecord",
    "ProfileStoreContract",
    "ThreadStoreContract",
]

T = TypeVar("T")

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


def _held(value: T | None, promise: str, what: str) -> T:
    """`value`, which the store must have returned (not None)."""
    __tracebackhide__ = True
    expect_that(value is not None, promise, expected=what, got=value)
    return cast(T, value)


async def _verifies(kernel: Kernel, thread_id: str, promise: str) -> None:
    __tracebackhide__ = True
    report = await kernel.verify(thread_id)
    expect_that(
        report.ok,
        promise,
        expected=f"Kernel.verify({thread_id!r}) to pass (ok=True)",
        got=f"ok=False at revision {report.first_divergence}: {report.detail}",
    )


@explained
@_MARK
class ThreadStoreContract:
    """The ThreadStore contract (`statekernel.lowlevel.ThreadSave` and friends): subclass it
    and give it a `thread_store` fixture yielding a fresh, empty store, and `edit_record`,
    an async function `(thread_id, revision, data)` that deletes (`data` None) or writes one
    stored record behind the store's back, the way a hand edit of the backend would.

    Each failure is a `ContractBroken` naming the promise, what the contract expected and
    what the store did. What it asserts of a ThreadStore:

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
        """A thread never saved is absent from every read, and deleting or pruning it is a
        no-op."""
        never = "of a thread never saved"
        expect(await thread_store.load("never"), None, f"ThreadStore.load {never}")
        expect(await thread_store.records("never"), [], f"ThreadStore.records {never}")
        expect(
            await thread_store.snapshot_at("never", 10),
            None,
            f"ThreadStore.snapshot_at {never}",
        )
        expect(await thread_store.threads(), [], "ThreadStore.threads() of an empty store")
        await thread_store.delete("never")  # a no-op
        await thread_store.prune("never", before=5)  # a no-op

    async def test_a_save_loads_back_byte_for_byte(self, thread_store: ThreadStore) -> None:
        """What a save stored, a load returns as it was given."""
        save = _save("t", 1, 3, Chain(), runs=2, run_values={"r": b"1"}, suspended=b"waiting")
        await thread_store.save("t", save, expected_position=0)
        loaded = "ThreadStore.load after one save (records 1 to 3, runs 2, a suspended run)"
        state = _held(await thread_store.load("t"), loaded, "a ThreadState")
        expect(
            (state.revision, state.runs, state.position),
            (3, 2, 1),
            f"{loaded}: (revision, runs, position) as saved, the position moved from 0 to 1",
        )
        expect(
            (state.run_values, state.suspended, state.seal),
            ({"r": b"1"}, b"waiting", save.seal),
            f"{loaded}: (run_values, suspended, seal) as saved",
        )
        expect(  # the chain needs every byte as it was given
            state.records,
            save.records,
            f"{loaded}: the records, a tuple of JournalEntry, byte for byte as saved",
        )
        expect(
            (state.values, state.snapshot_revision),
            ({}, 0),
            f"{loaded}: no snapshot was saved, so values {{}} and snapshot_revision 0",
        )

    async def test_a_head_is_the_loaded_position_and_seal(self, thread_store: ThreadStore) -> None:
        """`head()` says what a load would say of the position, revision and seal."""
        if not isinstance(thread_store, SupportsHead):
            pytest.skip(f"{type(thread_store).__name__} does not offer head() (optional)")
        expect(await thread_store.head("t"), None, "SupportsHead.head of a thread never saved")
        first = _save("t", 1, 2, Chain())
        await thread_store.save("t", first, expected_position=0)
        expect(
            await thread_store.head("t"),
            ThreadHead(1, 2, first.seal),
            "SupportsHead.head after a first save to revision 2: (position 1, revision 2, "
            "the save's seal)",
        )
        empty = ThreadSave(revision=2, seal=b"another seal")
        await thread_store.save("t", empty, expected_position=1)
        loaded = "ThreadStore.load after a second save that carries only a seal"
        state = _held(await thread_store.load("t"), loaded, "a ThreadState")
        expect(
            await thread_store.head("t"),
            ThreadHead(state.position, 2, state.seal),
            "SupportsHead.head is the position, revision and seal that load returns",
        )
        expect((state.position, state.seal), (2, b"another seal"), f"{loaded}: (position, seal)")
        await thread_store.delete("t")
        expect(await thread_store.head("t"), None, "SupportsHead.head of a deleted thread")

    async def test_load_since_leaves_out_what_the_reader_holds(
        self, thread_store: ThreadStore
    ) -> None:
        """`load_since` gives a reader at a revision only what it does not hold."""
        if not isinstance(thread_store, SupportsLoadSince):
            pytest.skip(f"{type(thread_store).__name__} does not offer load_since() (optional)")
        store = thread_store
        expect(await store.load_since("t", 0), None, "load_since of a thread never saved")
        chain = Chain()
        first = _save("t", 1, 3, chain, snapshot={"contract.count": b"3"}, runs=1)
        await store.save("t", first, expected_position=0)
        chain = chain_records([_record("t", r, 1) for r in range(1, 4)], chain)[1]
        second = _save("t", 4, 6, chain, runs=2, suspended=b"waiting")
        await store.save("t", second, expected_position=1)
        # The reader holds the snapshot at 3 and record 4.
        since = "SupportsLoadSince.load_since('t', 4) (a snapshot at 3, records 4 to 6 saved)"
        state = _held(await store.load_since("t", 4), since, "a ThreadState")
        expect(
            (state.revision, state.position, state.runs),
            (6, 2, 2),
            f"{since}: the head's (revision, position, runs)",
        )
        expect(
            (state.suspended, state.seal),
            (b"waiting", second.seal),
            f"{since}: the head's (suspended, seal)",
        )
        expect(
            (state.values, state.snapshot_revision),
            ({}, 3),
            f"{since}: no snapshot values, and snapshot_revision still naming the one at 3",
        )
        expect(state.records, second.records[1:], f"{since}: only the records after 4")
        at_head = "SupportsLoadSince.load_since('t', 6), a reader at the head"
        state = _held(await store.load_since("t", 6), at_head, "a ThreadState")
        expect((state.records, state.values), ((), {}), f"{at_head}: (records, values)")
        expect(
            await store.load_since("t", 2),
            await store.load("t"),
            "SupportsLoadSince.load_since('t', 2), a reader from before the newest snapshot, "
            "returns what load returns",
        )
        await expect_error(
            store.load_since("t", "4"),  # type: ignore[arg-type]
            TypeError,
            "SupportsLoadSince.load_since with a revision that is not an int",
        )

    async def test_run_events_are_kept_in_save_order_if_supported(
        self, thread_store: ThreadStore
    ) -> None:
        """Run events are kept per save, in save order, byte for byte."""
        if not isinstance(thread_store, SupportsRunEvents):
            pytest.skip(f"{type(thread_store).__name__} does not keep run events (optional)")
        store = thread_store
        expect(await store.run_events("t"), [], "SupportsRunEvents.run_events of no thread")
        first = _save("t", 1, 2, Chain(), events=b"first")
        await store.save("t", first, expected_position=0)
        await store.save("t", ThreadSave(revision=2, seal=first.seal), expected_position=1)
        third = _save("t", 3, 3, Chain(), events=b"\x00third")
        await store.save("t", third, expected_position=2)
        await expect_error(
            store.save("t", _save("t", 3, 3, Chain(), events=b"lost"), expected_position=2),
            RevisionConflict,
            "ThreadStore.save from a write position another save moved on",
        )
        expect(
            await store.run_events("t"),
            [b"first", b"\x00third"],
            "SupportsRunEvents.run_events: the events of each landed save that had some, in "
            "save order, byte for byte (none of the save that did not land)",
        )
        await store.save("u", _save("u", 1, 1, Chain(), events=b"other"), expected_position=0)
        await store.delete("t")
        expect(await store.run_events("t"), [], "SupportsRunEvents.run_events of a deleted thread")
        expect(
            await store.run_events("u"),
            [b"other"],
            "SupportsRunEvents.run_events: deleting one thread keeps another's events",
        )

    async def test_prune_drops_the_run_events_of_what_it_forgets(
        self, thread_store: ThreadStore
    ) -> None:
        """`prune` drops the run events of the saves it forgets, and only those."""
        if not isinstance(thread_store, SupportsRunEvents):
            pytest.skip(f"{type(thread_store).__name__} does not keep run events (optional)")
        store = thread_store
        kernel = Kernel([_Keys()], thread_store=store, snapshot_every=5)
        for _ in range(4):  # each run: 5 commits, a snapshot, one batch of events at its end
            run = await kernel.start_run("t")
            await run.run_phase(Phase.RUN_START)
            for _ in range(5):
                await run.submit(StateCommand().update(_Count, 1))
            await run.finish()
        expect(
            len(await store.run_events("t")),
            4,
            "SupportsRunEvents.run_events after four runs of one save each: four batches",
        )
        await store.prune("t", before=12)  # keeps the snapshot at 10 on
        saved_at = [
            max(event.revision for event in decode_run_events(data))
            for data in await store.run_events("t")
        ]
        expect(
            saved_at,
            [10, 15, 20],
            "ThreadStore.prune(before=12) with snapshots at 5, 10, 15 and 20 keeps the one at "
            "10 on, and with it the run events of the saves at 10, 15 and 20 only",
        )

    async def test_only_the_first_of_two_saves_from_one_position_lands(
        self, thread_store: ThreadStore
    ) -> None:
        """A save is a compare-and-set on the write position, which every save moves."""
        first = _save("t", 1, 1, Chain())
        await thread_store.save("t", first, expected_position=0)
        await expect_error(
            thread_store.save("t", _save("t", 1, 1, Chain()), expected_position=0),
            RevisionConflict,
            "ThreadStore.save expecting position 0 (never saved) of a thread saved once, raised "
            "as RevisionConflict(expected_position, position, what='thread save', "
            "position=True)",
        )
        refused = "ThreadStore.load after a save that was refused"
        state = _held(await thread_store.load("t"), refused, "a ThreadState")
        expect(
            (state.revision, state.position),
            (1, 1),
            f"{refused}: the first save's (revision, position)",
        )
        empty = ThreadSave(revision=1, seal=first.seal)  # moves the position, carries nothing
        await thread_store.save("t", empty, expected_position=1)
        await expect_error(
            thread_store.save("t", empty, expected_position=1),
            RevisionConflict,
            "ThreadStore.save expecting position 1 after a save that carried no records "
            "moved it to 2 (every save moves the position)",
        )
        moved = "ThreadStore.load after two landed saves"
        state = _held(await thread_store.load("t"), moved, "a ThreadState")
        expect(state.position, 2, f"{moved}: the position")

    async def test_concurrent_savers_of_one_position_yield_exactly_one_winner(
        self, thread_store: ThreadStore
    ) -> None:
        """Of eight concurrent saves from one position, exactly one lands."""
        await thread_store.save("t", _save("t", 1, 1, Chain()), expected_position=0)
        outcomes = await asyncio.gather(
            *(
                thread_store.save("t", _save("t", 2, 2, Chain()), expected_position=1)
                for _ in range(8)
            ),
            return_exceptions=True,
        )
        expect_that(
            sum(outcome is None for outcome in outcomes) == 1
            and all(o is None or isinstance(o, RevisionConflict) for o in outcomes),
            "ThreadStore.save: eight concurrent saves from position 1",
            expected="exactly one to land (return None) and seven to raise RevisionConflict",
            got=["landed" if o is None else shown(o) for o in outcomes],
        )

    async def test_records_must_follow_the_head_one_by_one(self, thread_store: ThreadStore) -> None:
        """A save whose records leave a gap or repeat a revision is refused whole."""
        await thread_store.save("t", _save("t", 1, 2, Chain()), expected_position=0)
        await expect_error(
            thread_store.save("t", _save("t", 4, 4, Chain()), expected_position=1),
            StoreError,
            "ThreadStore.save whose records leave a gap (the head at 2, a record of 4), raised "
            "as StoreError('thread save', ValueError(why), key=thread_id)",
        )
        await expect_error(
            thread_store.save("t", _save("t", 2, 3, Chain()), expected_position=1),
            StoreError,
            "ThreadStore.save whose records repeat a stored revision (the head at 2, records "
            "from 2), raised as StoreError('thread save', ValueError(why), key=thread_id)",
        )
        refused = "ThreadStore.load after two refused saves"
        state = _held(await thread_store.load("t"), refused, "a ThreadState")
        expect(
            (state.revision, state.position),
            (2, 1),
            f"{refused}: (revision, position) as before them",
        )

    async def test_records_and_snapshots_are_read_by_revision(
        self, thread_store: ThreadStore
    ) -> None:
        """Records are read by revision range, snapshots as the newest at or before one."""
        chain = Chain()
        for position, first in enumerate((1, 4, 7)):
            save = _save("t", first, first + 2, chain)
            values = {"contract.count": str(first + 2).encode()}
            save = msgspec.structs.replace(save, snapshot=values)
            await thread_store.save("t", save, expected_position=position)
            chain = chain_records([_record("t", r, 1) for r in range(first, first + 3)], chain)[1]
        saved = "(records 1 to 9 and snapshots at 3, 6 and 9 saved)"
        expect(
            [entry.revision for entry in await thread_store.records("t", since=2, until=6)],
            [3, 4, 5, 6],
            f"ThreadStore.records('t', since=2, until=6) {saved}: the revisions",
        )
        expect(
            [entry.revision for entry in await thread_store.records("t", since=5, limit=2)],
            [6, 7],
            f"ThreadStore.records('t', since=5, limit=2) {saved}: the revisions",
        )
        expect(
            [entry.revision for entry in await thread_store.records("t")],
            list(range(1, 10)),
            f"ThreadStore.records('t') {saved}: every revision, oldest first",
        )
        at = f"ThreadStore.snapshot_at('t', 8) {saved}"
        snapshot = _held(await thread_store.snapshot_at("t", 8), at, "a ThreadSnapshot")
        expect(snapshot.revision, 6, f"{at}: the newest snapshot at or before 8")
        expect(
            await thread_store.snapshot_at("t", 2),
            None,
            f"ThreadStore.snapshot_at('t', 2) {saved}: none at or before 2",
        )
        loaded = f"ThreadStore.load {saved}"
        state = _held(await thread_store.load("t"), loaded, "a ThreadState")
        expect(
            (state.snapshot_revision, state.records),
            (9, ()),
            f"{loaded}: the newest snapshot (at 9) and no records after it",
        )

    async def test_prune_keeps_the_newest_snapshot_at_or_before_the_cut(
        self, thread_store: ThreadStore
    ) -> None:
        """`prune(before=n)` keeps the newest snapshot at or before `n` and all after it."""
        kernel = Kernel([_Keys()], thread_store=thread_store, snapshot_every=5)
        await _commits(kernel, "t", 20, every=1)  # snapshots at 5, 10, 15, 20
        await thread_store.prune("t", before=12)
        pruned = "after ThreadStore.prune('t', before=12) with snapshots at 5, 10, 15 and 20"
        held = await thread_store.records("t")
        expect(
            held[0].revision if held else None,
            11,
            f"{pruned}: the first record ThreadStore.records holds (from the snapshot at 10 on)",
        )
        expect(
            (await kernel.state_at("t", 10)).get(_Count),
            10,
            f"{pruned}: the count at revision 10, rebuilt from the snapshot kept",
        )
        await _verifies(kernel, "t", f"{pruned}: the thread verifies")

    async def test_threads_are_listed_sorted_by_literal_prefix(
        self, thread_store: ThreadStore
    ) -> None:
        """`threads()` lists thread ids sorted, by a literal prefix, at most `limit`."""
        for thread in ("b-2", "a_1", "b-1", "a%1", "c"):
            await thread_store.save(thread, _save(thread, 1, 1, Chain()), expected_position=0)
        expect(
            await thread_store.threads(),
            ["a%1", "a_1", "b-1", "b-2", "c"],
            "ThreadStore.threads(): every thread id, sorted",
        )
        expect(
            await thread_store.threads(prefix="a_"),
            ["a_1"],
            "ThreadStore.threads(prefix='a_'): the prefix taken literally ('_' no wildcard)",
        )
        expect(
            await thread_store.threads(prefix="b", limit=1),
            ["b-1"],
            "ThreadStore.threads(prefix='b', limit=1): the first of them",
        )
        await thread_store.delete("c")
        expect(
            await thread_store.threads(prefix="c"),
            [],
            "ThreadStore.threads(prefix='c') after ThreadStore.delete('c')",
        )
        expect(await thread_store.load("c"), None, "ThreadStore.load of a deleted thread")

    async def test_hostile_thread_ids_are_kept_as_they_are(self, thread_store: ThreadStore) -> None:
        """Thread ids of SQL metacharacters, wildcards and odd text are kept as they are."""
        for name in HOSTILE_NAMES:
            await thread_store.save(name, _save(name, 1, 1, Chain()), expected_position=0)
            state = await thread_store.load(name)
            expect(
                None if state is None else state.revision,
                1,
                f"ThreadStore.load of thread id {shown(name)}, saved once: its revision",
            )
        expect(
            await thread_store.threads(),
            sorted(HOSTILE_NAMES),
            "ThreadStore.threads(): the hostile ids as they were given, sorted",
        )

    async def test_ids_no_store_can_keep_are_refused_alike(self, thread_store: ThreadStore) -> None:
        """A thread id that is not a string is a TypeError, one no store can keep a
        ValueError naming why, from every method, before anything is stored."""
        calls: list[tuple[str, Callable[[Any], Awaitable[Any]]]] = [
            ("load", thread_store.load),
            ("records", thread_store.records),
            ("delete", thread_store.delete),
            ("snapshot_at", lambda name: thread_store.snapshot_at(name, 1)),
            ("prune", lambda name: thread_store.prune(name, before=1)),
            (
                "save",
                lambda name: thread_store.save(
                    name, _save("x", 1, 1, Chain()), expected_position=0
                ),
            ),
        ]
        if isinstance(thread_store, SupportsLoadSince):
            store = thread_store
            calls.append(("load_since", lambda name: store.load_since(name, 0)))
        for method, call in calls:
            await expect_error(
                call(123),
                TypeError,
                f"ThreadStore.{method} of the thread id 123 (not a string), refused by check_name",
            )
            for name, why in REFUSED_NAMES:
                await expect_error(
                    call(name),
                    ValueError,
                    f"ThreadStore.{method} of the thread id {name!r} (a {why}), refused by "
                    f"check_name",
                    holding=why,
                )
        expect(await thread_store.threads(), [], "ThreadStore.threads() after those refusals")

    async def test_the_kernel_catches_a_record_the_store_was_handed_altered(
        self, thread_store: ThreadStore
    ) -> None:
        """The chain works over the store: a thread saved with one record altered (a bad
        restore would leave one) is refused on load, naming the revision."""
        kernel = Kernel([_Keys()], thread_store=thread_store)
        await _commits(kernel, "source", 5)
        loaded = "ThreadStore.load of a thread of five commits"
        state = _held(await thread_store.load("source"), loaded, "a ThreadState")
        expect_that(
            state.seal is not None,
            f"{loaded}: the seal the kernel saved",
            expected="bytes",
            got=state.seal,
        )
        records = list(state.records)
        third = records[2]
        records[2] = JournalEntry(
            third.revision, third.data.replace(b"update\xc4\x011", b"update\xc4\x017")
        )
        expect_that(
            records[2] != third,
            f"{loaded}: the record of revision 3 as the kernel encoded it",
            expected="the bytes of an update by 1",
            got=third.data,
        )
        copy = ThreadSave(revision=state.revision, records=tuple(records), seal=state.seal)
        await thread_store.save("copy", copy, expected_position=0)
        altered = "a thread saved with its record of revision 3 altered"
        await expect_error(
            kernel.start_run("copy"),
            JournalCorrupted,
            f"Kernel.start_run (a load) of {altered}",
            revision=3,
        )
        report = await kernel.verify("copy")
        expect(
            (report.ok, report.first_divergence),
            (False, 3),
            f"Kernel.verify of {altered}: (ok, first_divergence)",
        )
        await _verifies(kernel, "source", "Kernel.verify of the thread it was copied from")

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
        damaged = (
            f"a thread of 5 commits whose {gone.removeprefix('no ')} edit_record deleted "
            f"(ThreadStore.load returns the records it holds, the head still naming 5)"
        )
        kernel = Kernel([_Keys()], thread_store=thread_store)  # it reads what the store holds
        reads: dict[str, Callable[[], Awaitable[Any]]] = {
            "start_run": lambda: kernel.start_run("t"),
            "history": lambda: kernel.history("t"),
            "get_state": lambda: kernel.get_state("t"),
            "state_at": lambda: kernel.state_at("t", 5),
            "export_state": lambda: kernel.export_state("t"),
        }
        for name, read in reads.items():
            await expect_error(
                read(),
                JournalCorrupted,
                f"Kernel.{name} of {damaged}",
                holding=f"its head names revision 5, but the store holds {gone}",
                revision=6 - lost,  # the first one missing
            )
        report = await kernel.verify("t")
        expect(report.ok, False, f"Kernel.verify of {damaged}: ok")
        expect(
            (await kernel.state_at("t", 5 - lost)).get(_Count),
            5 - lost,
            f"Kernel.state_at of the revision before those lost, of {damaged}: the count",
        )
        expect(
            (await kernel.get_state("u")).get(_Count),
            2,
            f"Kernel.get_state of another thread than {damaged}: the count",
        )

    @pytest.mark.parametrize("forged", [1, 2])
    async def test_a_record_beyond_the_head_is_journal_corrupted(
        self, thread_store: ThreadStore, edit_record: EditRecord, forged: int
    ) -> None:
        """A record past the head (or a few), well formed and chained to the newest: no save
        leaves one, so it was put there by hand or the head was restored from an older
        backup. A load, `history` and `get_state` report it on every backend; none ignores
        it."""
        await _commits(Kernel([_Keys()], thread_store=thread_store), "t", 5)
        loaded = "ThreadStore.load of a thread of five commits"
        state = _held(await thread_store.load("t"), loaded, "a ThreadState")
        expect(
            state.records[-1].revision if state.records else None,
            5,
            f"{loaded}: the revision of its newest record",
        )
        extra = [_record("t", revision, 1) for revision in range(6, 6 + forged)]
        entries, _ = chain_records(extra, Chain(link_of(state.records[-1].data)))
        for entry in entries:
            await edit_record("t", entry.revision, entry.data)
        beyond = "a record of revision 6" if forged == 1 else "records of revisions 6 to 7"
        damaged = (
            f"a thread of 5 commits with {beyond} added by edit_record (ThreadStore.load must "
            f"return every record it holds, also those past the head)"
        )
        kernel = Kernel([_Keys()], thread_store=thread_store)
        reads: dict[str, Callable[[], Awaitable[Any]]] = {
            "start_run": lambda: kernel.start_run("t"),
            "history": lambda: kernel.history("t"),
            "get_state": lambda: kernel.get_state("t"),
        }
        for name, read in reads.items():
            await expect_error(
                read(),
                JournalCorrupted,
                f"Kernel.{name} of {damaged}",
                holding=f"{beyond} beyond its head (revision 5)",
                revision=6,
            )
        report = await kernel.verify("t")
        expect(
            (report.ok, report.first_divergence),
            (False, 6),
            f"Kernel.verify of {damaged}: (ok, first_divergence)",
        )

    async def test_two_kernels_adding_to_one_thread_both_land(
        self, thread_store: ThreadStore
    ) -> None:
        """Two kernels' runs that only add to one thread both land; an exclusive write from
        a stale position conflicts."""
        await _commits(Kernel([_Keys()], thread_store=thread_store), "t", 1)
        first = await Kernel([_Keys()], thread_store=thread_store).start_run("t")
        second = await Kernel([_Keys()], thread_store=thread_store).start_run("t")
        await first.submit(StateCommand().update(_Count, 10))
        await second.submit(StateCommand().update(_Count, 100))
        await first.finish()
        await second.finish()  # rebases: it only added
        reader = Kernel([_Keys()], thread_store=thread_store)
        both = "two kernels' runs that added 10 and 100 to a count of 1"
        expect((await reader.state_at("t", 3)).get(_Count), 111, f"{both}: the count at 3")
        await _verifies(reader, "t", f"{both}: the thread verifies")
        exclusive = await Kernel([_Keys()], thread_store=thread_store).start_run("t")
        other = await Kernel([_Keys()], thread_store=thread_store).start_run("t")
        await exclusive.submit(StateCommand().update(_Note, "mine"))
        await other.submit(StateCommand().update(_Note, "theirs"))
        await exclusive.finish()
        await expect_error(
            other.finish(),
            RevisionConflict,
            "Run.finish of the second of two runs that set one exclusive key from one "
            "position (ThreadStore.save from a position another save moved on)",
        )

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
            cut = (
                f"a save to revision {revision + 2} cut by its caller's deadline ({limit} s), "
                f"then sent again from the same position"
            )
            state = await thread_store.load("t")
            expect(
                None if state is None else state.revision,
                revision + 2,
                f"ThreadStore.load after {cut}: the revision",
            )
            expect(
                [r.revision for r in await thread_store.records("t")],
                list(range(1, revision + 3)),
                f"ThreadStore.records after {cut}: every revision once",
            )

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
            cancelled = f"a run of three commits cancelled {turns} loop turns into its save"
            reader = Kernel([_Keys()], thread_store=thread_store)
            count = await _count(reader, "t")
            expect_that(
                count in (total, total + 3),
                f"{cancelled}: the count (its commits whole or not at all)",
                expected=f"{total} or {total + 3}",
                got=count,
            )
            after = await Kernel([_Keys()], thread_store=thread_store).start_run("t")
            await after.submit(StateCommand().update(_Count, 1))
            await after.finish()  # (it rebases over a cancelled save that landed meanwhile)
            now = await _count(reader, "t")
            expect_that(
                now in (total + 1, total + 4),
                f"the next run after {cancelled}, adding 1: the count",
                expected=f"{total + 1} or {total + 4}",
                got=now,
            )
            await _verifies(reader, "t", f"after {cancelled} and the next run")
            total = now


def _value_of(entry: Entry | None) -> Any:
    """An entry's value for a failure to show, or that there was none."""
    return _NO_ENTRY if entry is None else entry.value


class _NoEntry:
    def __repr__(self) -> str:
        return "no entry (None)"


_NO_ENTRY = _NoEntry()


@explained
@_MARK
class ProfileStoreContract:
    """The ProfileStore contract: subclass it and give it a `profile_store` fixture yielding
    a fresh, empty store (with the default size limit), and `break_entry`, an async function
    `(namespace, key)` that makes one stored entry no longer decode, the way the backend
    could come to hold it.

    Each failure is a `ContractBroken` naming the promise, what the contract expected and
    what the store did. What it asserts of a ProfileStore:

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
        """An entry is created at version 1, each write adds one, and it reads back as
        JSON."""
        expect(await profile_store.get("ns", "k"), None, "ProfileStore.get of an absent entry")
        first = await profile_store.set("ns", "k", {"a": [1, 2]})
        expect(
            (first.value, first.version),
            ({"a": [1, 2]}, 1),
            "ProfileStore.set of a new entry returns its Entry: (value, version)",
        )
        second = await profile_store.set("ns", "k", (1, 2))
        expect(second.version, 2, "ProfileStore.set of an entry at version 1: the new version")
        got = await profile_store.get("ns", "k")
        expect(
            None if got is None else (got.value, got.version),
            ([1, 2], 2),
            "ProfileStore.get after a set of (1, 2): (value, version), the tuple back as a "
            "JSON list",
        )

    async def test_compare_and_set_refuses_and_keeps_what_is_stored(
        self, profile_store: ProfileStore
    ) -> None:
        """`set(..., expected_version=n)` writes only at version `n` (`0`: absent) and
        raises `VersionConflict` otherwise, writing nothing."""
        await profile_store.set("ns", "k", 1, expected_version=0)  # must not exist: it does not
        for stale in (0, 5):
            await expect_error(
                profile_store.set("ns", "k", 2, expected_version=stale),
                VersionConflict,
                f"ProfileStore.set(..., expected_version={stale}) of an entry at version 1, "
                f"raised as VersionConflict(namespace, key, expected_version, version found)",
                namespace="ns",
                key="k",
                expected=stale,
                actual=1,
            )
        entry = await profile_store.set("ns", "k", 3, expected_version=1)
        expect(
            entry.version,
            2,
            "ProfileStore.set(..., expected_version=1) of an entry at version 1 (the refused "
            "writes wrote nothing): the new version",
        )
        expect(
            _value_of(await profile_store.get("ns", "k")),
            3,
            "ProfileStore.get after those writes: the value",
        )

    async def test_a_value_that_is_not_json_is_refused(self, profile_store: ProfileStore) -> None:
        """A value JSON cannot hold is refused at `set` (`encode_entry` does it)."""
        await expect_error(
            profile_store.set("ns", "k", object()),
            StateValidationError,
            "ProfileStore.set of a value that is not JSON (an object()), refused by encode_entry",
        )
        expect(
            await profile_store.get("ns", "k"),
            None,
            "ProfileStore.get of an entry whose set was refused",
        )

    async def test_a_value_over_the_size_limit_is_refused_and_ten_megabytes_kept(
        self, profile_store: ProfileStore
    ) -> None:
        """A 10 MB value is kept whole; one over the 16 MiB default limit is refused with
        `StoreError` (`encode_entry` does it) and nothing is written."""
        big = "x" * (10 * 1024 * 1024)
        await profile_store.set("ns", "big", big)
        got = _value_of(await profile_store.get("ns", "big"))
        expect_that(
            got == big,
            "ProfileStore.get of a 10 MB string set before",
            expected="it whole",
            got=got,
        )
        await expect_error(
            profile_store.set("ns", "huge", "x" * (17 * 1024 * 1024)),
            StoreError,
            "ProfileStore.set of a 17 MB value (the default limit is 16 MiB of JSON), refused "
            "by encode_entry",
        )
        expect(
            await profile_store.get("ns", "huge"),
            None,
            "ProfileStore.get of an entry whose set was refused",
        )

    async def test_list_is_sorted_by_literal_prefix_and_clear_empties_one_namespace(
        self, profile_store: ProfileStore
    ) -> None:
        """`list` gives a namespace's entries sorted by key, by a literal prefix; `clear`
        empties one namespace only."""
        for key in ("b-2", "a_1", "b-1", "a%1", "c"):
            await profile_store.set("ns", key, key)
        await profile_store.set("other", "a_1", 0)
        expect(
            [e.key for e in await profile_store.list("ns")],
            ["a%1", "a_1", "b-1", "b-2", "c"],
            "ProfileStore.list('ns'): the keys of its entries, sorted",
        )
        expect(
            [e.key for e in await profile_store.list("ns", "a_")],
            ["a_1"],
            "ProfileStore.list('ns', 'a_'): the prefix taken literally ('_' no wildcard)",
        )
        await profile_store.delete("ns", "c")
        await profile_store.delete("ns", "c")  # a no-op
        await profile_store.clear("ns")
        expect(await profile_store.list("ns"), [], "ProfileStore.list('ns') after clear('ns')")
        expect(
            [e.key for e in await profile_store.list("other")],
            ["a_1"],
            "ProfileStore.list('other') after clear('ns'): the keys it held",
        )

    async def test_namespaces_lists_those_holding_entries_if_supported(
        self, profile_store: ProfileStore
    ) -> None:
        """`namespaces()` lists the namespaces holding entries, sorted, by literal prefix."""
        if not isinstance(profile_store, SupportsNamespaces):
            pytest.skip("the store does not have the optional SupportsNamespaces")
        store = profile_store
        expect(await store.namespaces(), [], "SupportsNamespaces.namespaces() of an empty store")
        for namespace in ("team_a", "b", "team_%", "team_b"):
            await store.set(namespace, "k", 1)
        await store.set("gone", "k", 1)
        await store.delete("gone", "k")
        expect(
            await store.namespaces(),
            ["b", "team_%", "team_a", "team_b"],
            "SupportsNamespaces.namespaces(): those holding entries (not 'gone', whose one "
            "entry was deleted), sorted",
        )
        expect(
            await store.namespaces("team_%"),
            ["team_%"],
            "SupportsNamespaces.namespaces('team_%'): the prefix taken literally",
        )
        await store.clear("b")
        expect(
            await store.namespaces(),
            ["team_%", "team_a", "team_b"],
            "SupportsNamespaces.namespaces() after clear('b')",
        )

    async def test_hostile_names_are_kept_as_they_are(self, profile_store: ProfileStore) -> None:
        """Namespaces and keys of SQL metacharacters, wildcards and odd text are kept as
        they are."""
        for name in HOSTILE_NAMES:
            await profile_store.set(name, name, name)
            expect(
                _value_of(await profile_store.get(name, name)),
                name,
                f"ProfileStore.get of the entry set as {shown(name)} in the namespace of that "
                f"name: its value",
            )
        expect(
            [e.key for e in await profile_store.list(HOSTILE_NAMES[0])],
            [HOSTILE_NAMES[0]],
            f"ProfileStore.list({shown(HOSTILE_NAMES[0])}): the keys of that namespace only",
        )

    async def test_names_no_store_can_keep_are_refused_alike(
        self, profile_store: ProfileStore
    ) -> None:
        """A name that is not a string is a TypeError, one no store can keep a ValueError
        naming why (`check_name` does both), before anything is stored."""
        for name, why in REFUSED_NAMES:
            await expect_error(
                profile_store.set("ns", name, 1),
                ValueError,
                f"ProfileStore.set of the key {name!r} (a {why}), refused by check_name",
                holding=why,
            )
            await expect_error(
                profile_store.get(name, "k"),
                ValueError,
                f"ProfileStore.get in the namespace {name!r} (a {why}), refused by check_name",
                holding=why,
            )
        await expect_error(
            profile_store.get("ns", 123),  # type: ignore[arg-type]
            TypeError,
            "ProfileStore.get of the key 123 (not a string), refused by check_name",
        )
        expect(await profile_store.list("ns"), [], "ProfileStore.list('ns') after those refusals")

    async def test_one_entry_that_no_longer_decodes_costs_only_itself(
        self,
        profile_store: ProfileStore,
        break_entry: Callable[[str, str], Awaitable[None]],
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """An entry that no longer decodes fails its own `get` with `DecodeFailed` (the
        namespace as `key`, the entry's key as `record`), `list` leaves it out with a
        warning naming it, and a `set` repairs it."""
        await profile_store.set("ns", "bad", 1)
        await profile_store.set("ns", "good", 2)
        await break_entry("ns", "bad")
        await expect_error(
            profile_store.get("ns", "bad"),
            DecodeFailed,
            "ProfileStore.get of an entry that no longer decodes (break_entry('ns', 'bad')), "
            "raised as DecodeFailed(namespace, key, cause)",
            key="ns",
            record="bad",
        )
        with caplog.at_level(logging.WARNING), caplog.at_level(logging.WARNING, "statekernel"):
            listed = [entry.key for entry in await profile_store.list("ns")]
        expect(
            listed,
            ["good"],
            "ProfileStore.list('ns') holding one entry that no longer decodes: the others",
        )
        expect_that(
            "'bad'" in caplog.text,
            "ProfileStore.list('ns') leaving out the entry 'bad': a logged warning",
            expected="a warning naming 'bad' (its repr)",
            got=caplog.text or "nothing logged",
        )
        await profile_store.set("ns", "bad", "repaired")
        expect(
            _value_of(await profile_store.get("ns", "bad")),
            "repaired",
            "ProfileStore.get of an entry that no longer decoded, after a set repaired it",
        )

    async def test_concurrent_writers_lose_no_update(self, profile_store: ProfileStore) -> None:
        """Fifty concurrent increments of one entry (by `update`, else compare-and-set) all
        land."""
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
        how = "SupportsAtomicUpdate.update" if update is not None else "compare-and-set"
        expect(
            _value_of(await profile_store.get("ns", "n")),
            50,
            f"ProfileStore.get after 50 concurrent increments by {how}: the value",
        )

    async def test_a_change_feed_reports_every_kind_of_write_after_it_is_entered(
        self, profile_store: ProfileStore
    ) -> None:
        """A feed reports each kind of write made after it was entered, by key or as
        None."""
        store = _with_changes(profile_store)
        await profile_store.set("ns", "gone", 0)
        await profile_store.set("ns", "cleared", 0)
        async with store.changes("ns") as feed:
            await profile_store.set("ns", "set", 1)
            await _reported(feed, {"set"}, "a set")
            await profile_store.set("ns", "created", 1, expected_version=0)
            await profile_store.set("ns", "set", 2, expected_version=1)
            await _reported(feed, {"created", "set"}, "two compare-and-sets")
            if isinstance(profile_store, SupportsAtomicUpdate):
                await profile_store.update("ns", "updated", lambda entry: 1)
                await _reported(feed, {"updated"}, "an update")
            await profile_store.delete("ns", "gone")
            await _reported(feed, {"gone"}, "a delete")
            await profile_store.clear("ns")
            await _reported(feed, {"cleared", "set", "created"}, "a clear")

    async def test_a_cancelled_next_of_a_change_feed_loses_nothing(
        self, profile_store: ProfileStore
    ) -> None:
        """A `next()` cancelled before or while it waits loses no key."""
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
            await _reported(feed, written - told, "sets whose next() was cancelled")

    async def test_a_change_feed_never_names_a_key_written_in_another_namespace(
        self, profile_store: ProfileStore
    ) -> None:
        """A feed of one namespace never names a key written in another."""
        store = _with_changes(profile_store)
        async with store.changes("ns") as feed:
            await profile_store.set("other", "elsewhere", 1)
            await profile_store.set("ns.sub", "nested", 1)
            await profile_store.set("ns", "here", 1)
            seen = await _reported(feed, {"here"}, "a set")
        expect_that(
            not seen & {"elsewhere", "nested"},
            "ChangeFeed.next of the namespace 'ns', after sets in 'other' and 'ns.sub'",
            expected="no key of those namespaces",
            got=sorted(seen),
        )


_FEED_PATIENCE = 30.0  # seconds: only so that a feed that never reports fails, not hangs


def _with_changes(store: ProfileStore) -> SupportsChanges:
    if not isinstance(store, SupportsChanges):
        pytest.skip("the store does not have the optional SupportsChanges")
    return store


async def _reported(feed: ChangeFeed, keys: set[str], writes: str) -> set[str]:
    """Wait until the feed has reported every one of `keys`, or None (which stands for
    any); what it named meanwhile."""
    __tracebackhide__ = True
    seen: set[str] = set()
    try:
        async with asyncio.timeout(_FEED_PATIENCE):
            while not keys <= seen:
                got = await feed.next()
                if got is None:
                    return seen
                seen |= got
    except TimeoutError:
        raise ContractBroken(
            f"ChangeFeed.next after {writes} in its namespace",
            f"the keys {sorted(keys)} (or None) within {_FEED_PATIENCE:.0f} s",
            f"only {sorted(seen)}",
        ) from None
    return seen
