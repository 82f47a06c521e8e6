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
    kept_by: OpWriter,
    thread_id: str,
    run_id: str | None,
    events: tuple[RunEvent, ...] = (),
) -> Journaled:
    """The pending commits as records of `thread_id` and `run_id` (with the run's `events`).

    The records keep the ops that `kept_by`, the writer the thread's home chose, keeps
    (`OpWriter.as_kept`): for a store, the ops of persistent thread keys, and a commit that
    also wrote `persistent=False` thread keys is also kept whole in `whole`. A key some op
    of which could not be journaled as its update keeps one `"value"` op without bytes in
    that commit, where its last op was; it is `unrecorded` (if replay is what rebuilds it),
    and the save must write a snapshot.
    """
    records: list[CommitRecord] = []
    whole_records: list[CommitRecord] = []
    unrecorded: set[str] = set()
    held: dict[tuple[int, str], Any] = {}
    for commit in pending:
        commit = kept_by.as_kept(commit)  # a listener's commit with every op: sorted now
        if commit.held:
            held.update(((commit.revision, name), value) for name, value in commit.held.items())
        ops, failed, whole = commit.ops, commit.failed, commit.thread_ops
        if failed:
            ops = as_values(ops, failed)
            # Replay rebuilds the thread keys whose ops the records keep (every thread key
            # without a store, the persistent ones with one): those need the save's snapshot.
            kept = {op.key for op in ops}
            by_name = registry.by_name
            unrecorded.update(
                n for n in failed if n in kept and by_name[n].scope is KeyScope.THREAD
            )
        record = _record_of(commit, ops, thread_id, run_id)
        records.append(record)
        if whole is not None:
            whole = as_values(whole, failed) if failed else whole
            whole_records.append(msgspec.structs.replace(record, ops=whole))
    return Journaled(records, frozenset(unrecorded), tuple(whole_records), held, events)


def _record_of(
    commit: PendingCommit, ops: tuple[JournalOp, ...], thread_id: str, run_id: str | None
) -> CommitRecord:
    """`commit`, holding `ops`, dated and labelled as a record of the thread and run."""
    return CommitRecord(
        thread_id=thread_id,
        revision=commit.revision,
        run_id=run_id,
        phase=commit.phase,
        step=commit.step,
        sources=commit.sources,
        ops=ops,
        created_at=datetime.datetime.fromtimestamp(commit.at, _UTC),
    )


class RunJournal:
    """How one run's commits reach the journal: the `writer` its live state writes each op
    with as the commit applies it, and the records a save makes of the commits noted since
    the last one (dated and labelled with the run's thread and id).

    The thread's home gives the writer (`StoreOpWriter` or `EveryOpWriter`): what it keeps
    is what the home's records keep, whichever writer the run later writes with."""

    def __init__(
        self,
        registry: KeyRegistry,
        writer: OpWriter,
        *,
        thread_id: str,
        run_id: str | None,
    ) -> None:
        self._registry = registry
        self._thread_id = thread_id
        self._run_id = run_id
        self._kept_by = writer
        self.writer = writer
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

    def write_every_op(self) -> OpWriter:
        """Have the run write every op from now on, for a record listener: `writer` becomes
        one that keeps every op (the home's own, when it keeps every op already), which is
        returned for the live state to write with. A save still keeps what the home's writer
        keeps (`records_of` sorts the commits)."""
        if self.writer is self._kept_by:
            self.writer = self._kept_by.every_op_writer()
        return self.writer

    def journaled(self, pending: Iterable[PendingCommit]) -> Journaled:
        """The commits noted since the last save, as records, with the run's events."""
        return records_of(
            pending,
            self._registry,
            kept_by=self._kept_by,
            thread_id=self._thread_id,
            run_id=self._run_id,
            events=tuple(self._events),
        )

    def forget_events(self, count: int) -> None:
        """Drop the first `count` events: a save holds them now."""
        del self._events[:count]

    def whole_record(self, commit: PendingCommit) -> CommitRecord:
        """One commit as a record with every op it holds, whatever a save keeps of it: what
        a record listener sees (of a commit written after `write_every_op()`)."""
        ops = as_values(commit.ops, commit.failed) if commit.failed else commit.ops
        return _record_of(commit, ops, self._thread_id, self._run_id)


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


_MAP_HEADERS = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}
"""The first byte of a MessagePack map: what a record's body begins with."""


def _is_legacy(data: bytes) -> bool:
    """Whether a stored record was stored before the chain: its own digest's first bytes,
    then its body. A chained record's link rarely has a map's header where that body would
    begin, so nearly every one is told apart without hashing it (every read of a record
    asks, several times per record in a `verify`)."""
    if len(data) <= _LEGACY_DIGEST or data[_LEGACY_DIGEST] not in _MAP_HEADERS:
        return False
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
