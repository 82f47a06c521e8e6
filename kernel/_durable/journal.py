"""The journal: every commit that moved a thread's revision, as a durable record.

Every change goes through one commit path, so the ops a commit applied *are* the history:
keeping them is enough to tell who changed what, to rebuild any earlier state and to check
that replaying them still gives the state that was saved. The live state writes each op as
a `JournalOp` while it applies it and notes a `PendingCommit` (`_engine/records.py`,
`_engine/commit.py`); this module dates and labels those as `CommitRecord`s for the run's
thread, and turns records into the bytes a ThreadStore appends in the same transaction as
the rest of the save. A checkpoint therefore costs what changed, not what is held.

An op is journaled as its update (`"update"`, replayed with the key's `apply`) or as
`"clear"`. A persistent thread key whose declared update type cannot be encoded is refused
at registration; an update that still cannot be encoded (a value of a type declared `Any`)
is journaled as the value it made (`"value"`, `OpWriter.complete`). A value that cannot be
encoded either is refused at its commit for a key a store keeps; the kernel's memory holds
it as it is (`Journaled.held`).
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterable
from typing import Any

import attrs
import msgspec

from .._engine.records import CommitRecord, JournalOp, OpWriter, PendingCommit, as_values
from .._engine.registry import KeyRegistry
from .._errors import JournalCorrupted
from .._values.keys import KeyScope
from .._values.run_events import RunEvent

__all__ = [
    "LINK_SIZE",
    "CommitRecord",
    "JournalOp",
    "Journaled",
    "RunJournal",
    "decode_record",
    "encode_record_bytes",
    "record_prev",
    "records_of",
]

_UTC = datetime.UTC


@attrs.frozen
class Journaled:
    """Records made from pending commits, and the keys some op of which could not be
    journaled as an update (they need a snapshot to be rebuilt from).

    For a store, `records` hold the ops of persistent thread keys; `whole` holds, for
    the commits that also wrote `persistent=False` thread keys, the whole record, which the
    kernel keeps in its memory (those keys are journaled in memory only).
    """

    records: list[CommitRecord]
    unrecorded: frozenset[str]
    whole: tuple[CommitRecord, ...] = ()
    held: dict[tuple[int, str], Any] = attrs.field(factory=dict)
    """By (revision, key string): the values of keys that no op of that commit could
    journal, held as they are (`PendingCommit.held`); the kernel's memory replays them."""
    events: tuple[RunEvent, ...] = ()
    """What the run did since the last save beyond its commits (`_values.run_events`),
    journaled beside them."""


def records_of(
    pending: Iterable[PendingCommit],
    registry: KeyRegistry,
    *,
    thread_id: str,
    run_id: str | None,
    persistent_only: bool,
    events: tuple[RunEvent, ...] = (),
) -> Journaled:
    """The pending commits as records of `thread_id` and `run_id` (with the run's `events`).

    `persistent_only` says how their ops were written (`OpWriter`): `records` then hold only the
    ops of persistent thread keys, and a commit that also wrote `persistent=False` thread
    keys is also kept whole in `whole`. A key some op of which could not be journaled as its
    update keeps one `"value"` op without bytes in that commit, where its last op was; it is
    `unrecorded` (if replay is what rebuilds it), and the save must write a snapshot.
    """
    records: list[CommitRecord] = []
    whole_records: list[CommitRecord] = []
    unrecorded: set[str] = set()
    held: dict[tuple[int, str], Any] = {}
    for commit in pending:
        if commit.held:
            held.update(((commit.revision, name), value) for name, value in commit.held.items())
        ops, failed, whole = commit.ops, commit.failed, commit.thread_ops
        if persistent_only and not commit.persistent_only:  # every op, for a listener: sort now
            ops, whole = _split_persistent(ops, registry)
        if failed:
            ops = as_values(ops, failed)
            # Only a persistent thread key (any thread key without a store) is rebuilt by
            # replay: it needs the snapshot the save writes.
            by_name = registry.by_name
            unrecorded.update(
                n
                for n in failed
                if by_name[n].scope is KeyScope.THREAD
                and (by_name[n].stored or not persistent_only)
            )
        record = CommitRecord(
            thread_id=thread_id,
            revision=commit.revision,
            run_id=run_id,
            phase=commit.phase,
            step=commit.step,
            sources=commit.sources,
            ops=ops,
            created_at=datetime.datetime.fromtimestamp(commit.at, _UTC),
        )
        records.append(record)
        if whole is not None:
            whole = as_values(whole, failed) if failed else whole
            whole_records.append(msgspec.structs.replace(record, ops=whole))
    return Journaled(records, frozenset(unrecorded), tuple(whole_records), held, events)


def _split_persistent(
    ops: tuple[JournalOp, ...], registry: KeyRegistry
) -> tuple[tuple[JournalOp, ...], tuple[JournalOp, ...] | None]:
    """Every op of a commit, sorted as a store keeps them: the persistent thread keys' ops
    for the store, and the thread keys' ops for the kernel's memory when some key among them
    is `persistent=False` (None otherwise). Run keys' ops are in neither."""
    by_name = registry.by_name
    stored = tuple(op for op in ops if by_name[op.key].stored)
    thread = tuple(op for op in ops if by_name[op.key].scope is KeyScope.THREAD)
    return stored, (thread if len(thread) > len(stored) else None)


class RunJournal:
    """How one run's commits reach the journal: the `writer` its live state writes each op
    with as the commit applies it, and the records a save makes of the commits noted since
    the last one (dated and labelled with the run's thread and id)."""

    def __init__(
        self,
        registry: KeyRegistry,
        *,
        thread_id: str,
        run_id: str | None,
        persistent_only: bool,
    ) -> None:
        self._registry = registry
        self._thread_id = thread_id
        self._run_id = run_id
        self._persistent_only = persistent_only
        self.writer = OpWriter(registry, persistent_only=persistent_only)
        """How the run's live state writes its ops (`LiveState.keep_journal`)."""
        self._events: list[RunEvent] = []

    @property
    def run_id(self) -> str | None:
        return self._run_id

    def rename(self, run_id: str) -> None:
        """Journal the run's commits under `run_id` from now on (its number was taken by
        another kernel's run that saved first: `_durable.rebase`)."""
        self._run_id = run_id

    def note(self, event: RunEvent) -> None:
        """Keep `event` for the next save."""
        self._events.append(event)

    def journaled(self, pending: Iterable[PendingCommit]) -> Journaled:
        """The commits noted since the last save, as records, with the run's events."""
        return records_of(
            pending,
            self._registry,
            thread_id=self._thread_id,
            run_id=self._run_id,
            persistent_only=self._persistent_only,
            events=tuple(self._events),
        )

    def forget_events(self, count: int) -> None:
        """Drop the first `count` events: a save holds them now."""
        del self._events[:count]

    def whole_record(self, commit: PendingCommit) -> CommitRecord:
        """One commit as a record with every op, whatever a save keeps of it: what a record
        listener sees (once `writer.write_every_op()` was called)."""
        return records_of(
            (commit,),
            self._registry,
            thread_id=self._thread_id,
            run_id=self._run_id,
            persistent_only=False,
        ).records[0]


_record_encoder = msgspec.msgpack.Encoder()
_record_decoder = msgspec.msgpack.Decoder(CommitRecord)

LINK_SIZE = 16
"""Bytes of a chain link (BLAKE2b): what each stored record begins with (`_durable.chain`)."""
_LEGACY_DIGEST = 8  # records stored before the chain began with their own digest's 8 bytes


def encode_record_bytes(record: CommitRecord, prev: bytes) -> bytes:
    """The record as a store keeps it: `prev`, the link of the record before it (the chain,
    `_durable.chain`), then the body (MessagePack; the update bytes inside are JSON)."""
    return prev + _record_encoder.encode(record)


def record_prev(data: bytes) -> bytes | None:
    """The link a stored record names as its predecessor's, or None for a record stored
    before the chain (those begin with a digest of their own body instead)."""
    if _is_legacy(data):
        return None
    return data[:LINK_SIZE]


def _is_legacy(data: bytes) -> bool:
    digest = data[:_LEGACY_DIGEST]
    return hashlib.blake2b(data[_LEGACY_DIGEST:], digest_size=_LEGACY_DIGEST).digest() == digest


def decode_record(data: bytes, *, thread_id: str, revision: int) -> CommitRecord:
    """A stored record back. Bytes that do not decode as a record, or a record of another
    revision, mean the store was changed: `JournalCorrupted` naming the revision."""
    body = data[_LEGACY_DIGEST:] if _is_legacy(data) else data[LINK_SIZE:]
    try:
        record = _record_decoder.decode(body)
    except msgspec.MsgspecError as error:
        raise JournalCorrupted(
            thread_id, revision, f"the record of revision {revision} does not decode ({error})"
        ) from error
    if record.revision != revision:
        raise JournalCorrupted(
            thread_id,
            revision,
            f"the store holds the record of revision {record.revision} as revision {revision}",
        )
    return record
