"""What this kernel knows of one thread in a ThreadStore, and how a save moves it on.

The store holds the thread; the kernel keeps, between its runs, only what it needs to save
the next one correctly: the write position to compare-and-set on, the bytes it could not
read (written back untouched), how much was saved since the newest snapshot (the snapshot
policy), and the whole records of commits that wrote `persistent=False` keys, which the
store never sees. `load_thread` makes one (`stored_loads`); `StoredThreads.save` notes each
save in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .chain import Chain
from .journal import CommitRecord
from .key_codec import EncodeCache
from .store import ThreadSave
from .thread_snapshots import VectorBase, holds_references
from .threads import HeldThread

__all__ = ["StoredThread", "snapshot_origin"]


@attrs.define
class StoredThread:
    """What this kernel keeps of one stored thread: what it handed the run, and what it
    knows of the store's copy.

    `position` is the store's write position for the thread as last loaded or saved, for
    compare-and-set. `foreign` and `undecodable` hold snapshot bytes this kernel may not or
    could not decode, written back untouched. `since_snapshot` and `bytes_since_snapshot`
    count what was saved since the newest snapshot, of `snapshot_bytes` bytes, whose
    Vectors (`vector_bases`) the next one may extend; `stale` names keys whose stored ops
    this kernel could not replay (no snapshot is written while there are any). `whole`
    holds, for the commits of this kernel that wrote `persistent=False` thread keys, the
    whole record (the store's lacks those ops). `cache` holds this claim's encodings.
    `chain` is where the store's journal chain stands: the next save's records link on
    from it. `unsettled` says a save was left to the store when its caller was cancelled:
    whether it landed is unknown, so nothing here describes the store any more.
    """

    held: HeldThread = attrs.field(factory=HeldThread)
    position: int = 0
    foreign: dict[str, bytes] = attrs.field(factory=dict)
    undecodable: dict[str, bytes] = attrs.field(factory=dict)
    since_snapshot: int = 0
    unsettled: bool = False
    bytes_since_snapshot: int = 0
    snapshot_bytes: int = 0
    stale: frozenset[str] = frozenset()
    vector_bases: dict[str, VectorBase] = attrs.field(factory=dict)
    dropped: frozenset[str] = frozenset()
    """Keys of an uninstalled plugin that said to drop them: gone from `held.values` and
    `foreign`; the next save's first record clears them in the journal, and the next
    snapshot leaves their bytes out."""
    drop_marker: frozenset[str] = frozenset()
    """The keys the stored snapshot lists as dropped on uninstall."""
    whole: list[CommitRecord] = attrs.field(factory=list)
    cache: EncodeCache = attrs.field(factory=EncodeCache)
    chain: Chain = attrs.field(factory=Chain)
    snapshot_origins: dict[int, int | None] = attrs.field(factory=dict)
    """The snapshots this kernel knows of (revision -> the oldest snapshot it reads, through
    Vector references; None: unknown), so that retention prunes without reading any."""
    pruned_to: int = 0
    """The revision retention last pruned before (nothing older is left)."""
    saved_values: dict[str, Any] | None = None
    """The persistent thread keys as this kernel's last save left them in the store, at
    `position` (None: not kept). A claim uses them instead of loading while the store's
    head is still at `position` with this chain's seal."""
    base: dict[str, Any] | None = None
    """While a run holds the thread: the persistent thread keys as the store holds them at
    `position` (as loaded, or as this kernel last saved them; None: unknown). A save that
    another kernel's overtook applies the newer records to them (`load_newer`) instead of
    loading the whole thread. Shared with the run, so never changed in place."""

    def note_save(
        self,
        save: ThreadSave,
        size: int,
        *,
        undecodable: dict[str, bytes],
        superseded: set[str],
        whole: tuple[CommitRecord, ...],
        bases: dict[str, VectorBase],
        drop_marker: frozenset[str],
        chain: Chain,
    ) -> None:
        """Note what the store now holds after `save` (its records of `size` bytes, which
        moved the chain to `chain`)."""
        self.position += 1
        self.chain = chain
        self.whole.extend(whole)
        self.undecodable = undecodable
        if save.records:
            self.dropped = frozenset()  # cleared by a saved record
            self.stale -= superseded
        if save.snapshot is None:
            self.since_snapshot += len(save.records)
            self.bytes_since_snapshot += size
            return
        self.drop_marker = drop_marker
        self.snapshot_origins[save.revision] = snapshot_origin(
            save.revision, bases, {**self.foreign, **undecodable}
        )
        self.since_snapshot = self.bytes_since_snapshot = 0
        self.snapshot_bytes = sum(len(data) for data in save.snapshot.values())
        self.vector_bases = bases
        self.stale = frozenset()


def snapshot_origin(
    revision: int, bases: Mapping[str, VectorBase], raw: Mapping[str, bytes]
) -> int | None:
    """The oldest snapshot the one at `revision` reads: where its Vectors' whole values are
    (`bases`); unknown (None) when bytes this kernel keeps raw refer to older snapshots."""
    if holds_references(raw):
        return None
    return min((base.origin for base in bases.values()), default=revision)
