"""What every ThreadStore does to a thread's journal, whatever it keeps it in.

A thread is three things: a small *head* (revision, run count, a suspended run), replaced
at every save; its *records*, one per commit, only ever appended; and *snapshots* of its
persistent thread keys, written now and then. The values inside are already encoded per key
by the kernel, so a store never needs to know a key's type, and a record's bytes are opaque
to it. This module holds the rules all backends share: the checks on a save, the position
compare-and-set, the head's encoding (which still reads heads saved before there was a
journal: their values are the state at their revision), and what pruning may remove.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import msgspec

from statekernel import DecodeFailed, RevisionConflict, StoreError
from statekernel.lowlevel import (
    JournalEntry,
    ThreadSave,
    ThreadSnapshot,
    ThreadState,
    check_name,
)

__all__ = [
    "check_listing",
    "check_position",
    "check_records",
    "check_save",
    "check_thread_id",
    "decode_head",
    "decode_snapshot",
    "encode_head",
    "encode_snapshot",
    "legacy_snapshot",
    "plan_save",
    "prune_point",
    "snapshot_taken_at",
    "state_of",
]


class Head(msgspec.Struct, kw_only=True, frozen=True):
    """The head document. `snapshot_revision` -1 marks a head saved before the journal: its
    `values` are then the whole state at `revision`, with no records or snapshots."""

    revision: int
    snapshot_revision: int = -1
    values: dict[str, bytes] = msgspec.field(default_factory=dict)
    runs: int = 0
    run_values: dict[str, bytes] | None = None
    suspended: bytes | None = None
    seal: bytes | None = None  # the kernel's, kept as it came (heads before seals: None)


_ENCODER = msgspec.msgpack.Encoder()
_HEAD = msgspec.msgpack.Decoder(Head)
_VALUES = msgspec.msgpack.Decoder(dict[str, bytes])


def check_thread_id(thread_id: object) -> str:
    """A thread id every store can keep: a string of valid Unicode text (else TypeError or
    ValueError, from every backend alike)."""
    return check_name("thread_id", thread_id)


def check_since(since: object) -> int:
    """The revision `load_since` is given: an int (else TypeError, from every backend)."""
    if isinstance(since, bool) or not isinstance(since, int):
        raise TypeError(f"load_since(thread_id, since) takes a revision (int), got {since!r}")
    return since


def check_listing(prefix: object, limit: object) -> tuple[str, int | None]:
    """The arguments of `threads`, checked."""
    prefix = check_name("prefix", prefix)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or an int >= 0, got {limit!r}")
    return prefix, limit


def check_save(thread_id: object, save: object, expected_position: object) -> ThreadSave:
    """The arguments of a `save`, checked (a wrong one is a TypeError or ValueError)."""
    check_thread_id(thread_id)
    if not isinstance(save, ThreadSave):
        raise TypeError(
            f"a thread store saves statekernel.lowlevel.ThreadSave, got {type(save).__name__}"
        )
    if (
        isinstance(expected_position, bool)
        or not isinstance(expected_position, int)
        or expected_position < 0
    ):
        raise ValueError(
            f"expected_position must be the thread's write position last loaded or saved "
            f"(0: never saved), got {expected_position!r}"
        )
    return save


def check_records(thread_id: str, save: ThreadSave, stored_revision: int, *, creates: bool) -> None:
    """A save's records must continue the stored journal one revision at a time and end at
    the save's revision, so the journal has no gap and no revision twice (a `StoreError`
    from every backend alike). A save that creates a thread with a snapshot may start its
    records anywhere: the snapshot is the state, the records before it history (a fork of a
    pruned thread)."""
    snapshot_at = snapshot_taken_at(save)
    if snapshot_at > save.revision or (snapshot_at != save.revision and not creates):
        _refuse(
            thread_id,
            f"a save to revision {save.revision} may carry an older snapshot (revision "
            f"{snapshot_at}) only when it creates the thread",
        )
    expected = stored_revision
    if creates and save.snapshot is not None:
        expected = save.records[0].revision - 1 if save.records else snapshot_at
        if expected > snapshot_at:
            _refuse(
                thread_id,
                f"its records start at revision {expected + 1}, after its snapshot at "
                f"{snapshot_at}: a gap nothing could rebuild",
            )
    for entry in save.records:
        if entry.revision != expected + 1:
            _refuse(
                thread_id,
                f"a save's records must follow revision {expected} one by one, but one has "
                f"revision {entry.revision}",
            )
        expected = entry.revision
    if expected != save.revision:
        _refuse(
            thread_id,
            f"a save to revision {save.revision} must carry the records from revision "
            f"{stored_revision + 1}, but its records end at {expected}",
        )


def snapshot_taken_at(save: ThreadSave) -> int:
    """The revision a save's snapshot is taken at (its own revision unless it says)."""
    return save.revision if save.snapshot_revision is None else save.snapshot_revision


def _refuse(thread_id: str, problem: str) -> None:
    raise StoreError("thread save", ValueError(f"thread {thread_id!r}: {problem}"), key=thread_id)


def check_position(expected: int, current: int | None) -> int:
    """The position a save expecting `expected` moves the thread to, or RevisionConflict.

    A thread never saved is at position 0, so a first save passes `expected_position=0`.
    Every save moves the position by one, whatever it carries, so two savers that loaded the
    same position can never both win.
    """
    actual = 0 if current is None else current
    if actual != expected:
        raise RevisionConflict(expected, actual, what="thread save", position=True)
    return expected + 1


def encode_head(save: ThreadSave, snapshot_revision: int) -> bytes:
    return _ENCODER.encode(
        Head(
            revision=save.revision,
            snapshot_revision=snapshot_revision,
            runs=save.runs,
            run_values=save.run_values,
            suspended=save.suspended,
            seal=save.seal,
        )
    )


def decode_head(thread_id: str, data: bytes) -> Head:
    try:
        return _HEAD.decode(data)
    except msgspec.MsgspecError as exc:
        raise DecodeFailed("thread state", thread_id, exc) from exc


def encode_snapshot(values: dict[str, bytes]) -> bytes:
    return _ENCODER.encode(values)


def decode_snapshot(thread_id: str, revision: int, data: bytes) -> ThreadSnapshot:
    try:
        return ThreadSnapshot(revision, _VALUES.decode(data))
    except msgspec.MsgspecError as exc:
        raise DecodeFailed(f"thread snapshot at revision {revision}", thread_id, exc) from exc


def legacy_snapshot(head: Head) -> ThreadSnapshot | None:
    """A head saved before the journal is its own snapshot; a journal head is none."""
    return ThreadSnapshot(head.revision, head.values) if head.snapshot_revision < 0 else None


def state_of(
    head: Head,
    position: int,
    snapshot: ThreadSnapshot | None,
    records: Sequence[JournalEntry],
) -> ThreadState:
    """The loaded thread: `snapshot` (None: the empty state at revision 0) plus `records`.

    (The position lives beside the head, not in it: heads saved before there were positions
    load with the column that held their revision, which only ever grew, so their next save
    still chains.)"""
    snapshot = legacy_snapshot(head) or snapshot
    return ThreadState(
        revision=head.revision,
        values=snapshot.values if snapshot is not None else {},
        snapshot_revision=snapshot.revision if snapshot is not None else 0,
        records=tuple(records),
        runs=head.runs,
        run_values=head.run_values,
        suspended=head.suspended,
        position=position,
        seal=head.seal,
    )


@attrs.frozen
class SavePlan:
    """What a save writes beside its records: the new head, and the snapshots (revision,
    bytes) to store, the legacy values of a head saved before the journal among them."""

    head: bytes
    snapshots: tuple[tuple[int, bytes], ...]


def plan_save(thread_id: str, save: ThreadSave, old: Head | None) -> SavePlan:
    """Check a save against the stored head (`old`, None for a new thread) and plan it; a
    backend then writes the plan and the save's records, all or nothing."""
    check_records(thread_id, save, old.revision if old is not None else 0, creates=old is None)
    snapshots: list[tuple[int, bytes]] = []
    snapshot_revision = old.snapshot_revision if old is not None else 0
    legacy = legacy_snapshot(old) if old is not None else None
    if legacy is not None:  # its first save moves its values into a snapshot of their own
        snapshots.append((legacy.revision, encode_snapshot(legacy.values)))
        snapshot_revision = legacy.revision
    if save.snapshot is not None:
        snapshot_revision = snapshot_taken_at(save)
        snapshots.append((snapshot_revision, encode_snapshot(dict(save.snapshot))))
    return SavePlan(encode_head(save, snapshot_revision), tuple(snapshots))


def prune_point(before: object, snapshot_revisions: Sequence[int]) -> int | None:
    """The snapshot revision pruning keeps from, or None when nothing can go.

    Pruning keeps the newest snapshot at or before `before` and everything after it, so
    every revision from that snapshot on can still be rebuilt; records up to it and older
    snapshots go. With no snapshot at or before `before`, nothing goes.
    """
    if isinstance(before, bool) or not isinstance(before, int):
        raise TypeError(f"prune(before=...) takes a revision (int), got {before!r}")
    held = [revision for revision in snapshot_revisions if revision <= before]
    return max(held) if held else None
