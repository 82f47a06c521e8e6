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

__all__ = [
    "JournalEntry",
    "SupportsHead",
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
    store (the kernel encodes and decodes them)."""

    revision: int
    data: bytes


class ThreadSnapshot(msgspec.Struct, frozen=True):
    """A thread's persistent thread keys as they were right after `revision` committed, each
    encoded as msgspec JSON by key string."""

    revision: int
    values: dict[str, bytes]


class ThreadSave(msgspec.Struct, frozen=True, kw_only=True):
    """What one checkpoint of a thread writes, in one transaction.

    `records`: the commits since the previous save, oldest first; their revisions follow
    the stored head revision one by one and end at `revision`, the new head. `snapshot`:
    when the kernel's snapshot policy says so, every persistent thread key as of `revision`
    (a save without one stores only what changed). Only a save that creates the thread (a
    fork) may give an older `snapshot_revision`, with records from before it up to
    `revision`. `runs` counts the thread's runs;
    `run_values` and `suspended`, while a run is suspended, are its run keys and the
    kernel's opaque record of it; the next save replaces them. `seal` is the kernel's seal
    of the journal up to `revision` (opaque to the store): the store keeps it in the head
    and gives it back with every load, which is how a lost or forged record is caught.
    `events` are the run's events since the previous save (phases, tool gate decisions,
    tool calls), encoded by the kernel: a store that `SupportsRunEvents` keeps them beside
    the records, for the trace; they are not part of the state, nor of the seal.
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

    The kernel rebuilds the state by applying `records` (oldest first) to `values`, the
    snapshot taken at `snapshot_revision`. `revision` is the head revision; `runs`,
    `run_values` and `suspended` are as last saved. `position` is the thread's write
    position, kept by the store: it grows by one at every save, whatever the save carries
    (threads saved before positions existed start from their last revision). `seal` is
    the last save's `ThreadSave.seal` (None for a thread saved before seals existed).
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
    revision and the seal of its last save (`ThreadState.position`, `.revision`, `.seal`)."""

    position: int
    revision: int
    seal: bytes | None = None


@runtime_checkable
class SupportsRunEvents(Protocol):
    """A ThreadStore that keeps the run events of each save (`ThreadSave.events`).

    Optional: the trace (`statekernel trace`, `kernel.run_events`) reads them; without them
    it shows the commits alone. `delete` forgets them with the thread, and `prune` those of
    saves whose revision is older than what it keeps. The three bundled stores have it.
    """

    async def run_events(self, thread_id: str) -> builtins.list[bytes]:
        """The `events` of the thread's saves that had some, oldest first."""
        ...


@runtime_checkable
class SupportsHead(Protocol):
    """A ThreadStore that can say where a thread stands without loading it.

    Optional: a kernel that saved a thread itself keeps its state, and before a run asks
    the store only for the head; when the position and seal are still those of its own
    last save, nothing was saved since (by anyone) and the load is skipped. The three
    bundled stores have it.
    """

    async def head(self, thread_id: str) -> ThreadHead | None:
        """The thread's position, revision and seal, or None if never saved."""
        ...


@runtime_checkable
class ThreadStore(Protocol):
    """Async storage of `ThreadState` by thread id.

    Stores connect lazily on first use, close with `await store.close()` and work as
    `async with store:`. A Kernel or Agent never closes a store it was given.
    """

    async def load(self, thread_id: str) -> ThreadState | None:
        """The thread's newest snapshot and the records after it, or None if never saved."""
        ...

    async def save(self, thread_id: str, save: ThreadSave, *, expected_position: int) -> None:
        """Append the save's records (and its snapshot, if any) and replace the thread's head
        in one transaction, if its write position is still `expected_position` (0: must not
        exist yet), moving the position to `expected_position + 1`; else raise
        `RevisionConflict` and change nothing."""
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
        load still needs (the newest snapshot and the records after it)."""
        ...

    async def delete(self, thread_id: str) -> None:
        """Forget the thread, its records and snapshots (a no-op when absent)."""
        ...

    async def threads(self, *, prefix: str = "", limit: int | None = None) -> builtins.list[str]:
        """The ids of the threads the store holds that start with `prefix` (literally: no
        wildcards), sorted, at most `limit` of them."""
        ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> ThreadStore: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


def check_name(label: str, name: object) -> str:
    """`name` itself, once it is a name every store can keep: a name that is not a string
    is a TypeError; one that is not text every database can hold (a lone surrogate, which
    UTF-8 cannot encode, or a NUL character, which PostgreSQL's text refuses) a ValueError
    naming where it breaks. Every store, and the kernel for thread ids, refuses names alike,
    before anything is stored."""
    if not isinstance(name, str):
        raise TypeError(f"{label} must be a string, got {type(name).__name__} {name!r}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{label} {name!r} is not valid Unicode text: it holds a lone surrogate at index "
            f"{error.start}, which no store can keep. Use text that encodes as UTF-8."
        ) from None
    if "\x00" in name:
        raise ValueError(
            f"{label} {name!r} holds a NUL character at index {name.index(chr(0))}, which not "
            f"every store can keep. Leave it out of names."
        )
    return name


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
