"""Rebasing: a stale save whose commits only commute lands after the newer head.

Two kernels (any processes) ran on one thread from the same write position; the first save
wins. In one process the loop already merges what commutes (§7: commutative ops
concatenate, exclusive ones re-run); across processes the later save does the same here.
When every op of its unsaved commits is an update of a key whose `MergeStrategy` `rebases`
(`COMMUTATIVE`: the strategy that claims no key in a phase's merge, `_engine/merge.py`),
the order the two writers' ops apply in cannot change the result, so the later save
*rebases*: its records are renumbered after the newer head, their ops applied (each with its
key's `apply`, each touched value validated, as any commit) to the state the newer head
holds, and saved as new records. Any other op (an exclusive key, a clear, a value set
whole) leaves the save a `RevisionConflict`: a conversation, for one, must not be merged
blind.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import msgspec

from .._engine.registry import KeyRegistry
from .._errors import RevisionConflict
from .._values.run_events import RunEvent
from .journal import CommitRecord
from .replay import ReplayPolicy, apply_records

__all__ = ["Rebase", "commutes", "merged", "renumbered", "renumbered_events"]


@attrs.frozen
class Rebase:
    """A save of a run that landed after another kernel's save of the thread (it rebased).

    What `run.rebases` holds for each such save; a frozen attrs value.

    - `onto`: the newer head it found, saved by another kernel; the save's commits now
      follow it.
    - `revision`: where this run's commits now end.
    - `run_id`: the id its records carry: a new one, `<thread>:run-<n>`, when the other
      kernel's run took this run's number (`run.identity.run_id` follows).

    See [durability: saves that merge what commutes](durability.md#saves-that-merge-what-commutes).
    """

    onto: int
    revision: int
    run_id: str | None


def commutes(registry: KeyRegistry, records: Iterable[CommitRecord]) -> bool:
    """Whether every op of `records` is an update of a key whose strategy `rebases`: what
    may rebase."""
    by_name = registry.by_name
    for record in records:
        for op in record.ops:
            binding = by_name.get(op.key)
            if op.kind != "update" or binding is None:
                return False
            if not binding.merge.rebases:
                return False
    return True


def renumbered(
    records: Sequence[CommitRecord], onto: int, run_id: str | None
) -> list[CommitRecord]:
    """`records`, oldest first, as the commits right after revision `onto`."""
    return [
        msgspec.structs.replace(record, revision=onto + index, run_id=run_id)
        for index, record in enumerate(records, start=1)
    ]


def renumbered_events(
    events: Sequence[RunEvent], shift: int, run_id: str | None
) -> tuple[RunEvent, ...]:
    """The run's `events` moved along with its records: their revisions `shift`ed, and
    under the run's id in the journal (a new one when its number was taken)."""
    return tuple(
        msgspec.structs.replace(
            event,
            revision=max(event.revision + shift, 0),
            run_id=run_id if run_id is not None else event.run_id,
        )
        for event in events
    )


def merged(
    registry: KeyRegistry,
    values: dict[str, Any],
    records: Sequence[CommitRecord],
    *,
    thread_id: str,
    expected: int,
    actual: int,
) -> dict[str, Any]:
    """`values` (the newer head's thread keys) with `records` applied, each touched value
    validated; an `apply` or `validate` that refuses makes the save a `RevisionConflict`
    (between `expected` and `actual`, the write positions), as it would have been. The
    values may be a live run's: a mutable one is copied before an `apply` changes it."""
    try:
        apply_records(
            registry,
            values,
            records,
            thread_id=thread_id,
            policy=ReplayPolicy(every_op=False, shared=True),  # a run's records for a store
        )
        by_name = registry.by_name
        for name in {op.key for record in records for op in record.ops}:
            binding = by_name[name]
            if binding.has_validate and name in values:
                binding.key.validate(values[name])
    except Exception as error:  # an apply, a validate, a value that no longer decodes
        raise RevisionConflict(
            expected,
            actual,
            what="thread save",
            position=True,
            retry=(
                f"its commutative ops could not be applied after the newer head "
                f"({type(error).__name__}: {error}); start a new run to load it again"
            ),
        ) from error
    return values
