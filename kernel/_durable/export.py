"""A thread's stored state as plain JSON data, every key included, typed or not.

A thread must never be readable only by the code that wrote it. A kernel types the keys its
plugins register; a key no plugin of this kernel declares (a tool reading another
application's threads, the command line) is still shown, as the JSON its bytes hold: its
value in the newest snapshot (a Vector's extension references followed), then every op
after it that says the value whole (an `Overwrite`, a clear). An update op needs the key's
own `apply`, which only its declaration has; from the first such op on, the key's value is
the one it had before it, and `ExportedState.as_of` says at which revision that was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import msgspec

from .._errors import DecodeFailed
from .._values.codec import as_json_data
from .journal import CommitRecord
from .store import ThreadSnapshot
from .thread_snapshots import RESERVED_VALUES, FetchSnapshot, plain_value

__all__ = ["ExportedState", "export_state"]


@attrs.frozen
class ExportedState:
    """A thread's keys at `revision` as plain JSON data, by key string: what
    `kernel.export_state` returns.

    - `revision`: the revision exported.
    - `values`: key string -> JSON data, sorted, for every stored key: those the reading
      kernel registers as their values encode, the others as their stored JSON.
    - `as_of`: key string -> revision, for the keys whose value is older than `revision`.

    A key that no plugin of the reading kernel declares is shown as the JSON its bytes
    hold: its value in the newest snapshot at or before the revision (a Vector's
    extensions followed), then every later op that gives the value whole (an `Overwrite`,
    a clear). An update op needs the key's own `apply`; from the first one on, the key
    keeps the value it had before, and `as_of[key]` is the revision that value is from (a
    key with no value before its first update is in `as_of` and not in `values`).
    """

    revision: int
    values: Mapping[str, Any]
    as_of: Mapping[str, int] = attrs.field(factory=dict)


async def export_state(
    revision: int,
    typed: Mapping[str, Any],
    base: ThreadSnapshot,
    records: Iterable[CommitRecord],
    fetch: FetchSnapshot,
    *,
    thread_id: str,
) -> ExportedState:
    """`typed` (the values the kernel rebuilt, by key string) as JSON data, with the untyped
    keys rebuilt as far as their bytes go from `base` (their bytes in the snapshot replay
    started from) and the `records` after it."""
    values = {name: as_json_data(value, repr(value)) for name, value in typed.items()}
    untyped: dict[str, Any] = {}
    for name, data in base.values.items():
        if name not in RESERVED_VALUES and name not in typed:
            untyped[name] = await plain_value(name, data, fetch, thread_id, base.revision)
    behind: dict[str, int] = {}
    exact = base.revision
    for record in records:
        for op in record.ops:
            if op.key in typed:
                continue
            if op.kind == "clear":
                untyped.pop(op.key, None)
                behind.pop(op.key, None)
            elif op.kind == "value" and op.update is not None:
                untyped[op.key] = _json(op.key, op.update, thread_id)
                behind.pop(op.key, None)
            else:  # an update only its declaration can apply, or a value it did not journal
                behind.setdefault(op.key, exact)
        exact = record.revision
    return ExportedState(revision, dict(sorted({**values, **untyped}.items())), behind)


def _json(name: str, data: bytes, thread_id: str) -> Any:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as error:
        raise DecodeFailed(name, thread_id, error) from error
