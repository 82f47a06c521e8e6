"""Threads kept in the kernel's memory: the home of a Kernel without a ThreadStore.

Nothing here outlives the process, so nothing is encoded: a save keeps the run's records,
every op of every key included, and the thread values as they are (frozen values, shared,
not copies), with a snapshot of them every `snapshot_every` records so that time travel
replays a bounded tail. History reads the same lists (`MemoryJournal`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._engine.records import EveryOpWriter
from .._engine.registry import KeyBinding, KeyRegistry
from .._values.declared_types import copy_of
from .._values.keys import KeyScope
from .._values.run_events import RunEvent
from .journal import CommitRecord, RunJournal
from .replay import ReplayPolicy, hash_of
from .retention import Retention
from .threads import SNAPSHOT_EVERY, HeldThread, LiveRuns, ReplayBase, Saved, SaveRequest

__all__ = ["MAX_EVENTS", "MemoryThreads"]

MAX_EVENTS = 10_000
"""The run events a thread keeps in memory, the newest: retention prunes them with the
records, but phases that commit nothing make events and no records."""


@attrs.define
class MemoryThread:
    """All there is of one thread: what a run gets, every record, and the snapshots of
    its thread values (`(revision, values)`, oldest first)."""

    held: HeldThread = attrs.field(factory=HeldThread)
    records: list[CommitRecord] = attrs.field(factory=list)
    snapshots: list[tuple[int, dict[str, Any]]] = attrs.field(factory=list)
    since_snapshot: int = 0
    values_at: dict[tuple[int, str], Any] = attrs.field(factory=dict)
    """Values no op could journal, by (revision, key string) (`Journaled.held`)."""
    saved: bool = False
    """Whether a save (or a fork) made it: a thread only ever claimed is not held."""
    events: list[RunEvent] = attrs.field(factory=list)
    """Its runs' events (`_values.run_events`), oldest first, for the trace."""


class MemoryThreads:
    """A kernel's threads in its memory; one live run per thread."""

    durable = False

    def __init__(
        self,
        registry: KeyRegistry,
        *,
        skip_undecodable: bool,
        snapshot_every: int = SNAPSHOT_EVERY,
        retention: Retention | None = None,
    ) -> None:
        self._registry = registry
        self._snapshot_every = snapshot_every
        self._retention = retention or Retention()
        self.skip_undecodable = skip_undecodable
        self._threads: dict[str, MemoryThread] = {}
        self._live = LiveRuns()

    async def claim(self, thread_id: str, *, tolerate: bool = False) -> HeldThread:
        self._live.take(thread_id)
        kept = self._threads.get(thread_id)
        if kept is None:
            kept = self._threads[thread_id] = MemoryThread()
        return kept.held

    def release(self, thread_id: str) -> None:
        self._live.drop(thread_id)

    def is_live(self, thread_id: str) -> bool:
        return thread_id in self._live

    def set_aside(self, thread_id: str) -> frozenset[str]:
        return frozenset()  # nothing was decoded, so nothing failed to

    def run_journal(self, thread_id: str, run_id: str | None) -> RunJournal:
        writer = EveryOpWriter(self._registry)  # the kernel's memory keeps every op
        return RunJournal(self._registry, writer, thread_id=thread_id, run_id=run_id)

    async def save(self, request: SaveRequest) -> Saved:
        """Keep the run's records and values; nothing else saves here, so a save never
        rebases, and nothing in it waits, so no cancellation can come during it."""
        thread_id, revision, journaled = request.thread_id, request.revision, request.journaled
        kept = self._threads[thread_id]
        thread_values, run_values = _split_by_scope(self._registry, request.values)
        records = journaled.records
        kept.records.extend(records)
        kept.values_at.update(journaled.held)
        kept.events.extend(journaled.events)
        if len(kept.events) > MAX_EVENTS:  # phases that commit nothing never reach retention
            del kept.events[: len(kept.events) - MAX_EVENTS]
        kept.since_snapshot += len(records)
        if records and (journaled.unrecorded or kept.since_snapshot >= self._snapshot_every):
            kept.snapshots.append((revision, dict(thread_values)))
            kept.since_snapshot = 0
            before = self._retention.prune_before(revision)
            if before is not None:
                await self.prune(thread_id, before=before)
        kept.held.note_saved(thread_values, run_values, revision, request.suspended)
        kept.saved = True
        return Saved(revision)

    async def read_as(self, thread_id: str, binding: KeyBinding) -> Any:
        # Values are held decoded with this kernel's declarations: the one held is it.
        kept = self._threads.get(thread_id)
        return None if kept is None else kept.held.values.get(binding.name)

    def journal(self, thread_id: str) -> MemoryJournal:
        return MemoryJournal(
            self._threads.get(thread_id), self._registry, skip=self.skip_undecodable
        )

    async def fork(
        self,
        thread_id: str,
        revision: int,
        new_thread_id: str,
        records: Sequence[CommitRecord],
        values: dict[str, Any],
    ) -> None:
        source = self._threads.get(thread_id)
        assert source is not None  # it has the revision, so the kernel holds it
        self._threads[new_thread_id] = MemoryThread(
            HeldThread(values=values, revision=revision),
            records=list(records),
            snapshots=[(r, held) for r, held in source.snapshots if r <= revision],
            values_at={at: value for at, value in source.values_at.items() if at[0] <= revision},
            saved=True,
            events=[event for event in source.events if event.revision <= revision],
        )

    async def threads(self, prefix: str, limit: int | None) -> list[str]:
        found = sorted(
            t for t, kept in self._threads.items() if kept.saved and t.startswith(prefix)
        )
        return found if limit is None else found[:limit]

    async def run_events(self, thread_id: str) -> list[RunEvent]:
        kept = self._threads.get(thread_id)
        return [] if kept is None else list(kept.events)

    async def prune(self, thread_id: str, *, before: int) -> None:
        kept = self._threads.get(thread_id)
        if kept is None:
            return
        held = [r for r, _ in kept.snapshots if r <= before]
        if not held:
            return
        keep = held[-1]
        kept.records = [record for record in kept.records if record.revision > keep]
        kept.events = [event for event in kept.events if event.revision >= keep]
        kept.snapshots = [(r, values) for r, values in kept.snapshots if r >= keep]
        kept.values_at = {at: value for at, value in kept.values_at.items() if at[0] > keep}


class MemoryJournal:
    """A thread's journal in the kernel's memory, for history: every op of every key."""

    keyed = False  # nothing to forge: a kernel's memory is not chained

    def __init__(self, thread: MemoryThread | None, registry: KeyRegistry, *, skip: bool) -> None:
        self._thread = thread
        self._registry = registry
        self.replay_policy = ReplayPolicy(
            every_op=True,
            held={} if thread is None else thread.values_at,
            skip_undecodable=skip,
        )
        """Every op, and the values no op of their commit could journal, held as they are."""

    async def head(self) -> int | None:
        if self._thread is None or not self._thread.saved:
            return None
        return self._thread.held.revision

    async def records(
        self, since: int, until: int | None = None, limit: int | None = None
    ) -> list[CommitRecord]:
        if self._thread is None:
            return []
        found = [
            record
            for record in self._thread.records
            if record.revision > since and (until is None or record.revision <= until)
        ]
        return found if limit is None else found[:limit]

    async def shown(self, since: int, limit: int | None) -> list[CommitRecord]:
        return await self.records(since, limit=limit)  # whole already

    async def base(self, revision: int) -> ReplayBase | None:
        if self._thread is None:
            return None
        held = [(r, values) for r, values in self._thread.snapshots if r <= revision]
        if not held:
            return None
        newest, values = held[-1]
        # The held values are the thread's own; replay hands them to `apply`, which may
        # change a mutable value in place, so it gets copies, as a commit would.
        by_name = self._registry.by_name
        copied = {
            name: copy_of(value, name) if _copies(by_name.get(name)) else value
            for name, value in values.items()
        }
        return ReplayBase(newest, copied)

    async def snapshot_revisions(self, after: int, until: int) -> list[int]:
        held = self._thread.snapshots if self._thread is not None else []
        return [r for r, _ in held if after < r <= until]

    async def differing(
        self, revision: int, values: Mapping[str, Any], ignore: set[str]
    ) -> set[str]:
        held = self._thread.snapshots if self._thread is not None else []
        for at, stored in held:
            if at == revision:
                return _differing(self._registry, values, stored, ignore)
        return set()

    def held_differing(self, values: Mapping[str, Any], ignore: set[str]) -> set[str]:
        if self._thread is None:
            return set()
        return _differing(self._registry, values, self._thread.held.values, ignore)

    async def check_newest(self, revision: int) -> None:
        """Nothing to check: no hand reaches the kernel's memory."""

    def link_at(self, revision: int) -> bytes | None:
        return None

    async def check_whole(self) -> None:
        """Nothing to check: no hand reaches the kernel's memory."""


def _copies(binding: KeyBinding | None) -> bool:
    return binding is not None and (binding.copy_values or binding.copy_items)


def _differing(
    registry: KeyRegistry,
    rebuilt: Mapping[str, Any],
    held: Mapping[str, Any],
    unreadable: set[str],
) -> set[str]:
    """The thread keys whose rebuilt value differs from the held one (by hash)."""
    names = (set(rebuilt) | set(held)) - unreadable
    by_name = registry.by_name
    differing: set[str] = set()
    for name in names:
        binding = by_name.get(name)
        if binding is None or binding.scope is not KeyScope.THREAD:
            continue
        if (name in rebuilt) != (name in held) or hash_of(
            registry, 0, {name: rebuilt[name]}
        ) != hash_of(registry, 0, {name: held[name]}):
            differing.add(name)
    return differing


def _split_by_scope(
    registry: KeyRegistry, values: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Registered values split into (thread-scoped, run-scoped)."""
    thread_values: dict[str, Any] = {}
    run_values: dict[str, Any] = {}
    for name, value in values.items():
        binding = registry.by_name.get(name)
        if binding is not None:
            target = thread_values if binding.scope is KeyScope.THREAD else run_values
            target[name] = value
    return thread_values, run_values
