"""Where a kernel's threads live between runs: one interface, two homes.

A Kernel keeps its threads either in a ThreadStore or in its own memory, and which one is
decided once, when the Kernel is made. Everything that differs between the two sits behind
a `ThreadHome`: claiming a thread for a run (loading it), saving a run's commits, reading a
key with another declaration, how a run's ops are journaled, and the journal that history,
time travel, forks and `verify` read. `StoredThreads` (`stored_threads`) is the home over
a store, where a thread is its journal and the kernel keeps only what must not be stored;
`MemoryThreads` (`memory_threads`) keeps every record and value in the kernel's memory,
where they die with it. So no other module asks whether there is a store: the run and the
history are written once, against this interface.

What both hand a run is a `HeldThread`: its values, revision, run count, and a suspended
run's record and run keys. What each keeps besides is its own. A save goes in as a
`SaveRequest` and comes back as a `Saved`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs
import msgspec

from .._engine.registry import KeyBinding
from .._errors import StateError
from .._values.run_events import RunEvent
from .journal import CommitRecord, Journaled, RunJournal
from .rebase import Rebase
from .replay import ReplayPolicy
from .store import check_name

__all__ = [
    "SNAPSHOT_EVERY",
    "HeldThread",
    "LiveRuns",
    "PendingAction",
    "Rebased",
    "ReplayBase",
    "SaveRequest",
    "Saved",
    "SuspendedRun",
    "ThreadHome",
    "ThreadJournal",
    "check_thread_id",
]


SNAPSHOT_EVERY = 1000
"""A save writes a snapshot once this many records were saved since the last one (with a
store, also once they hold as many bytes as it did: `stored_threads`)."""


class PendingAction(msgspec.Struct, frozen=True):
    """A scheduled action saved with a suspended run: its spec key, who scheduled it, and
    its payload encoded like any persisted value."""

    key: str
    origin: str | None
    payload: msgspec.Raw
    attempt: int = 1
    retries: str | None = None


class SuspendedRun(msgspec.Struct, frozen=True, kw_only=True):
    """The kernel's record of a suspended run: who it was, the actions still waiting for
    their phase, plus the suspender's own detail."""

    run_id: str
    agent: str
    step: int = 0
    parent_thread_id: str | None = None
    parent_run_id: str | None = None
    active_hook_filter: tuple[str, ...] = ()
    actions: tuple[PendingAction, ...] = ()
    detail: bytes = b""


@attrs.define
class HeldThread:
    """What a home hands a run of one thread when it claims it, and notes at every save.

    `values` holds decoded thread-scope values (non-persistent ones included): a claim
    hands all of them; between runs a home whose store holds the persistent ones keeps only
    the others. `runs` counts the thread's runs. While a run is suspended, `suspended` is
    its record and `run_values` its run keys (likewise, only the non-persistent ones
    between runs when a store holds the rest).
    """

    values: dict[str, Any] = attrs.field(factory=dict)
    revision: int = 0
    runs: int = 0
    suspended: SuspendedRun | None = None
    run_values: dict[str, Any] = attrs.field(factory=dict)

    def count_run(self) -> int:
        """Count a new run of the thread (saved with it); returns its number, from 1."""
        self.runs += 1
        return self.runs

    def note_saved(
        self,
        values: dict[str, Any],
        run_values: dict[str, Any],
        revision: int,
        suspended: SuspendedRun | None,
    ) -> None:
        """Hold what a save left: `values` and (while suspended) `run_values` as the home
        keeps them, at `revision`."""
        self.values = values
        self.run_values = run_values if suspended is not None else {}
        self.revision = revision
        self.suspended = suspended


@attrs.frozen
class Rebased:
    """How a save landed after another kernel's (`_durable.rebase`): the report the run
    gives its caller, and the thread keys as they stand at the new head (the other
    kernel's commits with this one's after them), which the run continues from."""

    report: Rebase
    values: dict[str, Any]


@attrs.frozen(kw_only=True)
class SaveRequest:
    """One save of a claimed thread (`ThreadHome.save`): its commits since its last save,
    and where it stands.

    `values` are the run's values at `revision`, `journaled` its commits since the last
    save, `touched` the keys it wrote (what it replaced of `ThreadHome.set_aside`). With
    `suspended`, the run keys in `values` are saved too, with the record.
    """

    thread_id: str
    values: Mapping[str, Any]
    revision: int
    touched: frozenset[str]
    journaled: Journaled
    suspended: SuspendedRun | None = None


@attrs.frozen
class Saved:
    """What became of a save that landed (`ThreadHome.save`).

    `revision` is where the thread now stands: the request's own, or, when the save
    landed after another kernel's, where its commits end on the new head (`rebased` then
    says how, else it is None). `cancelled`: the caller was cancelled once the save was
    under way (while the store wrote it, or pruned after it); the caller raises that
    cancellation (`raise_cancellation`) once it has noted the save.
    """

    revision: int
    rebased: Rebased | None = None
    cancelled: bool = False

    def raise_cancellation(self) -> None:
        """Raise the cancellation that arrived during the save, if one did: the caller's
        last step, once it has taken note of the save."""
        if self.cancelled:
            raise asyncio.CancelledError


@attrs.define
class ReplayBase:
    """A snapshot to replay from: decoded values (the caller's to change), and bytes this
    kernel cannot read."""

    revision: int
    values: dict[str, Any]
    raw: dict[str, bytes] = attrs.field(factory=dict)


class ThreadJournal(Protocol):
    """One thread's journal as history reads it, wherever it lives; each history operation
    is written once over these few questions."""

    @property
    def replay_policy(self) -> ReplayPolicy:
        """How its records replay (`apply_records`): whether they hold every op or the
        persistent thread keys' only, the values that no op of their commit could journal
        (a kernel's memory holds them; a store keeps every op's bytes), and whether an op
        that no longer decodes is skipped."""
        ...

    async def head(self) -> int | None:
        """The saved head revision, or None for a thread never saved."""
        ...

    async def records(
        self, since: int, until: int | None = None, limit: int | None = None
    ) -> list[CommitRecord]:
        """The records that rebuild the thread, `since < revision <= until`, oldest first."""
        ...

    async def shown(self, since: int, limit: int | None) -> list[CommitRecord]:
        """The records as `history` shows them: whole, where this kernel knows more ops of
        a commit than the journal holds."""
        ...

    async def base(self, revision: int) -> ReplayBase | None:
        """The newest snapshot at or before `revision`, decoded (None: there is none)."""
        ...

    async def snapshot_revisions(self, after: int, until: int) -> list[int]:
        """The revisions of the snapshots in `(after, until]`, oldest first."""
        ...

    async def differing(
        self, revision: int, values: Mapping[str, Any], ignore: set[str]
    ) -> set[str]:
        """The keys of the snapshot at exactly `revision` that differ from `values` (none
        when there is no snapshot there)."""
        ...

    def held_differing(self, values: Mapping[str, Any], ignore: set[str]) -> set[str]:
        """The thread keys whose held value at the head differs from `values` (none when the
        kernel does not hold the whole thread)."""
        ...

    async def check_newest(self, revision: int) -> None:
        """Raise `JournalCorrupted` when the head last read (`head`), which stands at
        `revision`, does not vouch for the newest record read there (`records`, `base`):
        the record or the head was changed."""
        ...

    async def check_whole(self) -> None:
        """Raise `JournalCorrupted` at the first revision of the held journal that cannot be
        trusted (a broken chain, `_durable.chain`)."""
        ...

    @property
    def keyed(self) -> bool:
        """Whether the journal's chain, as last read, is keyed (`_durable.chain`)."""
        ...

    def link_at(self, revision: int) -> bytes | None:
        """The chain's link at `revision`, once a read checked it (`check_whole` checks
        every held one); None where there is no chain (a kernel's memory)."""
        ...


class ThreadHome(Protocol):
    """Where a kernel's threads live between its runs; one live run per thread."""

    @property
    def durable(self) -> bool:
        """Whether a save outlives the process (a run can be resumed by another)."""
        ...

    @property
    def skip_undecodable(self) -> bool:
        """Whether bytes that no longer decode are set aside (`restore_errors="skip"`)
        rather than raised."""
        ...

    async def claim(self, thread_id: str, *, tolerate: bool = False) -> HeldThread:
        """Mark the thread as having a live run and return it as last saved.

        Raises `StateError` if it already has one in this kernel. A failed load releases
        the claim again. With `tolerate`, stored bytes that no longer decode are set aside
        whatever `skip_undecodable` says, for a caller that will replace them.
        """
        ...

    def release(self, thread_id: str) -> None:
        """End the thread's live run."""
        ...

    def is_live(self, thread_id: str) -> bool: ...

    def set_aside(self, thread_id: str) -> frozenset[str]:
        """The keys of a claimed thread whose saved bytes or records this kernel could not
        read: a run that writes them replaces them (the run tracks what it touches)."""
        ...

    def run_journal(self, thread_id: str, run_id: str | None) -> RunJournal:
        """How a run's (or an outside commit's) ops are journaled for this home."""
        ...

    async def save(self, request: SaveRequest) -> Saved:
        """Save a claimed thread's commits since its last save and where it stands
        (`SaveRequest`); returns where the save landed, and how, when it rebased after
        another kernel's (`Saved`).

        Raises before changing anything if a value cannot be saved; the run then stays
        open, so the caller can still end it cleanly.

        A save that landed returns, even when its caller was cancelled meanwhile: the
        cancellation is then reported (`Saved.cancelled`), not raised, and the caller
        raises it (`Saved.raise_cancellation`) once it has noted the save. A store write
        cut short by a cancellation may commit anyway, so the home waits for its answer
        (`through_cancellation`); were the cancellation raised from here, the caller would
        never learn that its commits are in the store: it would hold them as unsaved and
        send them again, and a rebased run would not move on to the new head and run id.
        Handing the outcome back, rather than calling the caller back before raising,
        keeps the noting in the caller, in plain sight, and nothing can come between: no
        `await` separates the return from the caller's next line. What did not land still
        raises: a cancellation before the write, or one the store did not answer in time
        (the thread is then unsettled, and the run saves nothing more).
        """
        ...

    async def read_as(self, thread_id: str, binding: KeyBinding) -> Any:
        """The thread's last saved value of `binding`'s key string, read with `binding`'s
        declaration (None when it holds none)."""
        ...

    def journal(self, thread_id: str) -> ThreadJournal:
        """The thread's journal, for history to read."""
        ...

    async def fork(
        self,
        thread_id: str,
        revision: int,
        new_thread_id: str,
        records: Sequence[CommitRecord],
        values: dict[str, Any],
    ) -> None:
        """Make `new_thread_id` (which does not exist) from the thread's `records` up to
        `revision` (labelled for it) and its newest snapshot at or before it; `values` are
        the thread keys rebuilt at `revision`, for a home that holds values."""
        ...

    async def prune(self, thread_id: str, *, before: int) -> None:
        """Forget what is older than the newest snapshot at or before `before`."""
        ...

    async def run_events(self, thread_id: str) -> list[RunEvent]:
        """The events the thread's runs journaled beside their commits, oldest first (none
        where the store does not keep them)."""
        ...

    async def threads(self, prefix: str, limit: int | None) -> list[str]:
        """The ids of the saved threads that start with `prefix`, sorted, at most `limit`."""
        ...


def check_thread_id(thread_id: object) -> None:
    if not isinstance(thread_id, str) or not thread_id:
        raise ValueError(f"thread_id must be a non-empty string, got {thread_id!r}")
    check_name("thread_id", thread_id)  # text every store can keep


class LiveRuns:
    """The threads that have a live run in one kernel: at most one each."""

    __slots__ = ("_live",)

    def __init__(self) -> None:
        self._live: set[str] = set()

    def take(self, thread_id: str) -> None:
        check_thread_id(thread_id)
        if thread_id in self._live:
            raise StateError(
                f"thread {thread_id!r} already has a live run in this kernel; finish it "
                f"(await run.finish()) before starting another."
            )
        self._live.add(thread_id)

    def drop(self, thread_id: str) -> None:
        self._live.discard(thread_id)

    def __contains__(self, thread_id: str) -> bool:
        return thread_id in self._live
