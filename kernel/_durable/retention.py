"""`Retention`: how much of a thread's journal is kept, so that nothing grows without bound.

A thread's cost per step is flat, but a journal that keeps every record grows with every
step forever: in the store, and in a kernel's memory when it has no store. So by default a
kernel keeps the last `DEFAULT_REVISIONS` revisions reachable (history, time travel, fork)
and lets older records and snapshots go, each time a save writes a snapshot (the only time
anything can go: a load needs the newest snapshot and the records after it).
"""

from __future__ import annotations

import attrs

from .._values import options

__all__ = ["DEFAULT_REVISIONS", "Retention"]

DEFAULT_REVISIONS = 1000


def _check_revisions(instance: object, attribute: object, value: int | None) -> None:
    if value is not None:
        options.positive_int(
            "Retention(revisions=...)",
            value,
            expected="an int >= 1 (how many revisions to keep reachable)",
            fix="To keep every one, use Retention.keep_all().",
        )


@attrs.frozen
class Retention:
    """How much of each thread's journal a kernel keeps, in its ThreadStore or its memory.

    `Retention(revisions=1000)`, or `Retention.keep_all()`. A frozen value, given as
    `Kernel(..., retention=...)` or `Agent(..., retention=...)`.

    - `revisions` (default 1000): at least this many of the newest revisions stay reachable
      by `history`, `state_at` and `fork`. Each time a save writes a snapshot, older
      records and snapshots go (the newest snapshot at or before the cut stays, so
      everything after it still rebuilds), as `kernel.prune` would. None keeps everything
      (`Retention.keep_all()`). Anything but an int >= 1 (or None) raises `ValueError`.

    See [durability: retention](durability.md#retention).
    """

    revisions: int | None = attrs.field(default=DEFAULT_REVISIONS, validator=_check_revisions)

    @classmethod
    def keep_all(cls) -> Retention:
        """Keep every record and snapshot, until `kernel.prune` is called."""
        return cls(revisions=None)

    def prune_before(self, head: int) -> int | None:
        """The revision before which a thread at `head` may be pruned, or None."""
        if self.revisions is None or head - self.revisions <= 0:
            return None
        return head - self.revisions
