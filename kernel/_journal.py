"""The journal: every commit that moved a thread's revision, as a durable record.

Every change goes through one commit path, so the commands a commit applied *are* the
history: keeping them is enough to tell who changed what, to rebuild any earlier state and
to check that replaying them still gives the state that was saved. A commit only notes a
`PendingCommit` (references to what it applied, no encoding), so the phase loop pays next
to nothing for the journal; a checkpoint turns the pending commits into `CommitRecord`s,
encoding each op's update once, and the ThreadStore appends them in the same transaction as
the rest of the save. A checkpoint therefore costs what changed, not what is held.

An op is journaled as its update (`"update"`, replayed with the key's `apply`) or as
`"clear"`. A persistent thread key whose declared update type cannot be encoded is refused
at registration; an update that still cannot be encoded (a value of a type declared `Any`)
is journaled as the key's value after the commit (`"value"`): with its bytes where the
kernel kept that value (without a store), else none, and the save then writes a snapshot
so that a load never needs the op.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Literal

import attrs
import msgspec

from ._codec import CODEC_ERRORS, enc_hook
from ._commands import CLEAR
from ._commit import PendingCommit
from ._errors import DecodeFailed
from ._keys import KeyScope
from ._phases import Phase
from ._registry import KeyRegistry

__all__ = [
    "CommitRecord",
    "JournalOp",
    "decode_record",
    "encode_record_bytes",
    "records_of",
]

_UTC = datetime.UTC
_update_encoder = msgspec.json.Encoder(enc_hook=enc_hook)


class JournalOp(msgspec.Struct, frozen=True):
    """One op of a commit, as applied: the key string, what kind of op, and its bytes.

    `kind` is `"update"` (`update` holds the update as msgspec JSON, replayed with the key's
    `apply`), `"clear"` (no bytes), or `"value"` (for a key whose update cannot be encoded:
    `update` holds the key's value right after the commit, or None if that cannot be
    encoded either).
    """

    key: str
    kind: Literal["update", "clear", "value"]
    update: bytes | None = None


class CommitRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One commit that moved a thread's revision: who made it, when, and what it applied.

    `phase` is None for commits made outside a phase (a tool's command, `run.submit`,
    `kernel.update_state`); `step` counts the STEP_START phases the run had begun (0 before
    the first). `sources` lists the contributions in merge order: `"plugin:<id>"`,
    `"action:<key>"`, `"tool:<name>"`, `"submit"` or `"external"`. `ops` are in the order they
    were applied.
    """

    thread_id: str
    revision: int
    run_id: str | None
    phase: Phase | None
    step: int
    sources: tuple[str, ...]
    ops: tuple[JournalOp, ...]
    created_at: datetime.datetime


@attrs.frozen
class Journaled:
    """Records made from pending commits, and the keys some op of which could not be
    journaled as an update (they need a snapshot to be rebuilt from)."""

    records: list[CommitRecord]
    unrecorded: frozenset[str]


def records_of(
    pending: Iterable[PendingCommit],
    registry: KeyRegistry,
    *,
    thread_id: str,
    run_id: str | None,
    for_store: bool,
) -> Journaled:
    """The pending commits as records.

    `for_store`: only the ops of persistent thread keys, the ones a ThreadStore keeps (run
    keys start afresh in every run, and a key's scope may differ in the next kernel that
    reads the thread); without a store, the kernel's memory journals every op.

    An op whose update cannot be encoded makes its key's ops in that commit one `"value"`
    op, where the last of them was: the value after the commit where the kernel kept it
    (in memory), else none (`unrecorded`: the save must then snapshot the key's value).
    """
    by_class = registry.by_class
    thread_scope = KeyScope.THREAD
    records: list[CommitRecord] = []
    unrecorded: set[str] = set()
    for commit in pending:
        sources: list[str] = []
        ops: list[JournalOp] = []
        failed: set[str] = set()
        for contribution in commit.contributions:
            patch_ops = contribution.command.patch.ops
            if not patch_ops:
                continue
            sources.append(contribution.journal_source())
            for key, update in patch_ops:
                binding = by_class[key]
                if for_store and not (binding.persistent and binding.scope is thread_scope):
                    continue
                if update is CLEAR:
                    ops.append(JournalOp(binding.name, "clear"))
                    continue
                try:
                    ops.append(JournalOp(binding.name, "update", _update_encoder.encode(update)))
                except CODEC_ERRORS:
                    failed.add(binding.name)
                    ops.append(JournalOp(binding.name, "value"))
        if failed:
            ops = _as_values(ops, failed, commit)
            unrecorded.update(op.key for op in ops if op.kind == "value" and op.update is None)
        records.append(
            CommitRecord(
                thread_id=thread_id,
                revision=commit.revision,
                run_id=run_id,
                phase=commit.phase,
                step=commit.step,
                sources=tuple(sources),
                ops=tuple(ops),
                created_at=datetime.datetime.fromtimestamp(commit.at, _UTC),
            )
        )
    return Journaled(records, frozenset(unrecorded))


def _as_values(ops: list[JournalOp], failed: set[str], commit: PendingCommit) -> list[JournalOp]:
    """Each key in `failed` keeps one op, where its last op was: its value after the commit
    (every earlier op of the key in this commit is in that value already)."""
    last = {op.key: index for index, op in enumerate(ops)}
    kept: list[JournalOp] = []
    for index, op in enumerate(ops):
        if op.key not in failed:
            kept.append(op)
        elif last[op.key] == index:
            kept.append(_value_op(commit, op.key))
    return kept


def _value_op(commit: PendingCommit, name: str) -> JournalOp:
    """The key's value after the commit, if the commit kept its snapshot and it encodes."""
    if commit.snapshot is None:
        return JournalOp(name, "value")
    value = commit.snapshot._stored_values().get(name, CLEAR)
    if value is CLEAR:
        return JournalOp(name, "clear")
    try:
        return JournalOp(name, "value", _update_encoder.encode(value))
    except CODEC_ERRORS:
        return JournalOp(name, "value")


_record_encoder = msgspec.msgpack.Encoder()
_record_decoder = msgspec.msgpack.Decoder(CommitRecord)


def encode_record_bytes(record: CommitRecord) -> bytes:
    """The record as a store keeps it (MessagePack; the update bytes inside are JSON)."""
    return _record_encoder.encode(record)


def decode_record(data: bytes, *, thread_id: str) -> CommitRecord:
    """A stored record back; bytes that do not decode name the thread."""
    try:
        return _record_decoder.decode(data)
    except msgspec.MsgspecError as error:
        raise DecodeFailed("commit record", thread_id, error) from error
