"""The thread store protocol: what the kernel asks of wherever thread journals live.

The kernel defines it and never imports an implementation: `statekernel.stores` implements it
(memory, SQLite), and so can anyone. A `ThreadStore` keeps each thread's journal: its commit
records, periodic snapshots, and a small head (revision, run count, a suspended run). A load is
the newest snapshot plus the records after it; a save appends. Saving is a compare-and-set on
the thread's write position, which the store moves by one at every save, whatever the save
carries (commits, a suspension, or nothing but a run ending): `expected_position` is the
position the saver last loaded or saved (0 when the thread was never saved). Of two kernels
that loaded the same position, the first save wins and the other gets a `RevisionConflict`
instead of overwriting it. Values arrive encoded; the kernel decodes them key by key.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterator
from types import TracebackType
from typing import Protocol, runtime_checkable

import msgspec

from .._errors import StateError, StoreError
from .._values.names import check_name

__all__ = [
    "JournalEntry",
    "SupportsHead",
    "SupportsLoadSince",
    "SupportsRunEvents",
    "ThreadHead",
    "ThreadSave",
    "ThreadSnapshot",
    "ThreadState",
    "ThreadStore",
    "check_name",
    "store_failures",
]

# -- thread state ----------------------------------------------------------------------------


class JournalEntry(msgspec.Struct, frozen=True):
    """One encoded `CommitRecord` as a store keeps it: its revision, and bytes opaque to the
    store (the kernel encodes and decodes them).

    `JournalEntry(revision, data)`: part of what a `ThreadStore` loads and saves (a msgspec
    Struct; stores never interpret the bytes)."""

    revision: int
    data: bytes


class ThreadSnapshot(msgspec.Struct, frozen=True):
    """A thread's persistent thread keys as they were right after `revision` committed, each
    encoded as msgspec JSON by key string.

    `ThreadSnapshot(revision, values)`: part of what a `ThreadStore` loads and saves (a
    msgspec Struct; stores never interpret the bytes)."""

    revision: int
    values: dict[str, bytes]


class ThreadSave(msgspec.Struct, frozen=True, kw_only=True):
    """What one checkpoint of a thread writes, in one transaction.

    `ThreadSave(*, revision, records=(), snapshot=None, snapshot_revision=None, runs=0,
    run_values=None, suspended=None, seal=None, events=None)`: a msgspec Struct, built by
    keyword; stores never interpret its bytes.

    - `revision`: the new head.
    - `records`: the commits since the previous save, oldest first; their revisions follow
      the stored head revision one by one and end at `revision`.
    - `snapshot`: when the kernel's snapshot policy says so, every persistent thread key as
      of `revision` (a save without one stores only what changed). Only a save that creates
      the thread (a fork) may give an older `snapshot_revision`, with records from before it
      up to `revision`.
    - `runs`: the thread's run count.
    - `run_values` and `suspended`: while a run is suspended, its run keys and the kernel's
      opaque record of the run; the next save replaces them.
    - `seal`: the kernel's seal of the journal up to `revision` (opaque bytes). The store
      keeps it with the head and gives it back with every load, which is how a lost or
      forged record is caught (see
      [durability](durability.md#a-journal-that-cannot-lose-a-record)).
    - `events`: the run's events since the previous save (phases, tool gate decisions, tool
      calls), encoded by the kernel (opaque bytes). A store that `SupportsRunEvents` keeps
      them beside the records, for the trace; they are no part of the state, nor of the seal.
    """

    revision: int
    records: tuple[JournalEntry, ...] = ()
    snapshot: dict[str, bytes] | None = None
    snapshot_revision: int | None = None
    runs: int = 0
    run_values: dict[str, bytes] | None = None
    suspended: bytes | None = None
    seal: bytes | None = None
    events: bytes | None = None


class ThreadState(msgspec.Struct, frozen=True, kw_only=True):
    """One thread as a store loads it: the newest snapshot and the records after it.

    `ThreadState(*, revision, values={}, snapshot_revision=0, records=(), runs=0,
    run_values=None, suspended=None, position=0, seal=None)`: a msgspec Struct, built by
    keyword; stores never interpret its bytes. The kernel rebuilds the state by applying
    `records` (oldest first) to `values`, the snapshot taken at `snapshot_revision`
    (revision 0 with no snapshot: the empty state).

    - `revision`: the head revision.
    - `runs`, `run_values` and `suspended`: as last saved (see `ThreadSave`).
    - `position`: the thread's write position, kept by the store. It grows by one at every
      save, whatever the save carries; a thread saved before positions existed starts from
      its last revision.
    - `seal`: the last save's `ThreadSave.seal` (None for a thread saved before seals
      existed).
    """

    revision: int
    values: dict[str, bytes] = msgspec.field(default_factory=dict)
    snapshot_revision: int = 0
    records: tuple[JournalEntry, ...] = ()
    runs: int = 0
    run_values: dict[str, bytes] | None = None
    suspended: bytes | None = None
    position: int = 0
    seal: bytes | None = None


class ThreadHead(msgspec.Struct, frozen=True):
    """Where a stored thread stands, without its state: its write position, its head
    revision and the seal of its last save (`ThreadState.position`, `.revision`, `.seal`).

    `ThreadHead(position, revision, seal=None)`, as `SupportsHead.head` returns it."""

    position: int
    revision: int
    seal: bytes | None = None


@runtime_checkable
class SupportsRunEvents(Protocol):
    """A ThreadStore that keeps the run events of each save (`ThreadSave.events`).

    An optional, runtime-checkable protocol: `await store.run_events(thread_id)` returns
    them, oldest first. The trace (`statekernel trace`, `kernel.run_events`) reads them; with
    a store that lacks it, a trace shows the commits alone. `delete` forgets them with the
    thread, and `prune(before=...)` drops those of saves older than what it keeps. All three
    bundled thread stores have it (the SQLite stores from schema version 4, PostgreSQL's
    from version 2, both migrated on first open for writing); the store contract checks it.
    """

    async def run_events(self, thread_id: str) -> builtins.list[bytes]:
        """The `events` of the thread's saves that had some, oldest first."""
        ...


@runtime_checkable
class SupportsHead(Protocol):
    """A ThreadStore that can say where a thread stands without loading it.

    An optional, runtime-checkable protocol: `await store.head(thread_id)` returns a
    `ThreadHead` (the write position, the head revision and the seal of the last save, as
    `ThreadState` has them), or None for a thread never saved. A kernel keeps the persistent
    thread keys of the 1,024 threads it saved or loaded last; before a run of one it asks
    the store only for the head, and when the position and seal are still those it knows
    (nobody saved the thread since) it starts the run from them instead of loading and
    replaying the thread. All three bundled thread stores have it; a store without it is
    simply loaded every time. The store contract checks it.
    """

    async def head(self, thread_id: str) -> ThreadHead | None:
        """The thread's position, revision and seal, or None if never saved."""
        ...


@runtime_checkable
class SupportsLoadSince(Protocol):
    """A ThreadStore that can load a thread for a reader that already holds it at a revision.

    An optional, runtime-checkable protocol: `await store.load_since(thread_id, since)`
    returns what `load` returns, less what that reader has. When the thread's newest
    snapshot was taken at or before `since`, the `ThreadState` holds no snapshot values
    (`values` is empty; `snapshot_revision` still names that snapshot) and its `records`
    are only those after `since`; when the newest snapshot is newer, it is exactly what
    `load` returns. The head (`revision`, `position`, `runs`, `suspended`, `seal`) is
    always the thread's, read in the same transaction as the records. None if never saved.

    A save that another kernel's save overtook rebases with it: it reads only the records
    saved since the revision it ran from, however long the thread, and so tries again
    quickly while other processes keep saving. All three bundled thread stores have it; a
    store without it is loaded whole instead. The store contract checks it.
    """

    async def load_since(self, thread_id: str, since: int) -> ThreadState | None:
        """The thread as `load` returns it, without the snapshot and records a reader at
        revision `since` holds; None if never saved."""
        ...


@runtime_checkable
class ThreadStore(Protocol):
    """Async storage of `ThreadState` by thread id: a runtime-checkable protocol.

    A thread store keeps each thread's journal: its commit records (appended, never
    rewritten), periodic snapshots, and a small head (revision, run count, a suspended run).
    Record and snapshot bytes are opaque to the store.

    Whatever a store raises that is not a `StateError` (a lost connection, a full disk)
    reaches the caller of the kernel as a `StoreError` naming the operation
    (`"thread load"`, `"thread save"`, `"thread history read"`, `"thread fork"`,
    `"thread prune"`, `"thread snapshot read"`) and the thread, with the store's exception
    as its `cause`.

    Stores connect lazily on first use, close with `await store.close()` and work as
    `async with store:`. A Kernel or Agent never closes a store it was given. See
    [agent: runs and threads](agent.md#runs-and-threads-without-the-facade).
    """

    async def load(self, thread_id: str) -> ThreadState | None:
        """The thread's newest snapshot at or before its head, every record after it and
        the head, as one consistent read; or None if never saved.

        Every record: also those past the head's revision. A save writes its records and
        its head together, so none is ever there; one that is was put there by hand (or
        the head was restored from an older backup), and the kernel must see it to say so
        (`JournalCorrupted`)."""
        ...

    async def save(self, thread_id: str, save: ThreadSave, *, expected_position: int) -> None:
        """Append the save's records (and its snapshot, if any) and replace the thread's head
        in one transaction, if its write position is still `expected_position` (0: must not
        exist yet), moving the position to `expected_position + 1`; else raise
        `RevisionConflict` and change nothing.

        `save.records` must follow the stored head revision one by one and end at
        `save.revision`, else `StoreError`. Every save moves the position, whatever it
        carries, so of two savers that loaded the same position only the first lands.
        """
        ...

    async def records(
        self, thread_id: str, *, since: int = 0, until: int | None = None, limit: int | None = None
    ) -> builtins.list[JournalEntry]:
        """The held records with `since < revision <= until`, oldest first, at most `limit`."""
        ...

    async def snapshot_at(self, thread_id: str, revision: int) -> ThreadSnapshot | None:
        """The newest held snapshot taken at or before `revision`, or None."""
        ...

    async def prune(self, thread_id: str, *, before: int) -> None:
        """Forget records and snapshots older than revision `before`, keeping whatever a
        load still needs.

        Keeps the newest snapshot at or before `before` and everything after it; older
        records and snapshots go. With no such snapshot, nothing goes.
        """
        ...

    async def delete(self, thread_id: str) -> None:
        """Forget the thread, its records and snapshots. A no-op when absent."""
        ...

    async def threads(self, *, prefix: str = "", limit: int | None = None) -> builtins.list[str]:
        """The ids of the threads the store holds that start with `prefix` (literally: `%`
        and `_` are not wildcards), sorted, at most `limit` of them."""
        ...

    async def close(self) -> None:
        """Close the store's connections; `async with store:` closes it when the block ends.

        Stores connect on first use, and a closed store reopens on its next use.
        """
        ...

    async def __aenter__(self) -> ThreadStore: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


@contextlib.contextmanager
def store_failures(operation: str, thread_id: str) -> Iterator[None]:
    """Inside it, a store's own failure (a lost connection, a full disk, a bug in a third-party
    store) becomes a `StoreError` naming `operation` and the thread, so that every kernel call
    that reaches a ThreadStore raises a `StateError`; the kernel's own errors pass unchanged."""
    try:
        yield
    except StateError:
        raise
    except Exception as error:
        raise StoreError(operation, error, key=thread_id) from error
