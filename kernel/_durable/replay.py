"""Replay: rebuilding a thread's state from its journal, and checking it against what was saved.

Replay is how a thread is loaded (the newest snapshot plus the records after it), how
`state_at` travels back in time, and how `verify` proves that the journal still means what
it meant: it re-applies each op with its key's `apply`, exactly as the commit did. Only
thread-scoped keys are rebuilt; run keys start afresh in every run, so their ops are history
only. A key replay cannot rebuild here (a key no plugin of this kernel registered, a value
that did not decode, an op journaled without bytes) is reported as *stale* rather than
guessed at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import immutables
import msgspec

from .._engine.registry import KeyRegistry
from .._engine.snapshot import Snapshot
from .._errors import DecodeFailed, ReplayFailed
from .._values.codec import CODEC_ERRORS, dec_hook
from .._values.declared_types import copy_of
from .._values.keys import KeyScope
from .journal import CommitRecord

__all__ = ["ReplayReport", "apply_records", "hash_of"]


@attrs.frozen
class ReplayReport:
    """What `kernel.verify(thread_id)` found.

    - `ok`: True when the state rebuilt from the journal alone equals, at every stored
      snapshot and at the head, what was stored.
    - `revision`: the head revision replayed.
    - `state_hash`: the hash of the rebuilt state there (as `Snapshot.state_hash`).
    - `first_divergence`: on a divergence, the first revision whose commit wrote a key that
      differs; None when `ok`.
    - `detail`: on a divergence, which keys differ and where; when `ok`, the keys this
      kernel could not rebuild, if any.
    - `keyed`: whether the thread's chain is keyed (written by a kernel given `chain_key=`),
      so that only the key's holder could have re-chained it; False for an unkeyed chain
      (or a kernel without a thread store).
    - `head_digest`: the chain's digest at the head, `"<revision>:<32 hex digits>"`, once
      the chain up to it checked out (else ""): keep it elsewhere, and
      `verify(thread_id, expect_head=...)` tells later whether the journal still holds
      exactly that history.
    """

    ok: bool
    revision: int
    state_hash: str
    first_divergence: int | None = None
    detail: str = ""
    keyed: bool = False
    head_digest: str = ""


def apply_records(
    registry: KeyRegistry,
    values: dict[str, Any],
    records: Iterable[CommitRecord],
    *,
    thread_id: str,
    unreadable: Iterable[str] = (),
    skip_undecodable: bool = False,
    persistent_only: bool = True,
    held: Mapping[tuple[int, str], Any] | None = None,
    lost: dict[str, int] | None = None,
    shared: bool = False,
) -> set[str]:
    """Apply `records` to `values` (thread keys by key string, changed in place), oldest first.

    Returns the stale keys: those in `unreadable` (held as bytes this kernel cannot read)
    that an op touched, and keys no plugin registered that an op touched. Their values here
    are not the thread's. Records `persistent_only` hold only ops of keys their writer kept as
    persistent thread keys, so an op on a key this kernel declares otherwise is stale too;
    records from the kernel's memory hold every op, and run keys' ops are history only. An
    update that no longer decodes is `DecodeFailed` (with `skip_undecodable`, its key is
    dropped and stale instead); an `apply` that raises is `ReplayFailed`. An op journaled
    without bytes sets the value the kernel's memory `held` for it; without one (a store
    written before every op had its bytes), its key is dropped from there on and, given
    `lost`, goes there with the op's revision rather than among the stale keys (its value
    is simply unknown until a snapshot: nothing another kernel could rebuild either).

    An update that a later clear of its key in `records` supersedes is not decoded at all:
    its value could not survive the clear, and a key whose type changed is migrated exactly
    so, by a clear (`update_state(..., replacing=[K])`) after updates of the old type.

    With `shared`, the values in `values` are also a live run's (a rebase applies records
    to the state it holds): a mutable one is copied before the first `apply` on it, which
    may change it in place, as a commit would.
    """
    records = list(records)
    last_clear = _last_clears(records)
    by_name = registry.by_name
    decoders: dict[tuple[str, str], msgspec.json.Decoder[Any]] = {}  # one per key and kind
    cannot_read = set(unreadable)
    stale: set[str] = set()
    copied: set[str] = set()  # with `shared`: the values this replay owns already
    position = -1
    for record in records:
        for op in record.ops:
            position += 1
            name = op.key
            binding = by_name.get(name)
            if lost is not None and name in lost:
                continue  # unknown until a snapshot says
            if binding is None or name in cannot_read:
                stale.add(name)
                continue
            if binding.scope is not KeyScope.THREAD or (persistent_only and not binding.persistent):
                if persistent_only:  # the writer kept it as a persistent thread key; we do not
                    stale.add(name)
                    values.pop(name, None)
                continue
            if op.kind == "clear":
                values.pop(name, None)
                continue
            if position < last_clear.get(name, -1):
                continue  # cleared later on: whatever it did is gone by then
            if op.update is None:
                kept = _MISSING if held is None else held.get((record.revision, name), _MISSING)
                if kept is not _MISSING:  # the value as the kernel's memory held it
                    copies = binding.copy_values or binding.copy_items
                    values[name] = copy_of(kept, name) if copies else kept
                    continue
                values.pop(name, None)  # never recorded: lost from here until a snapshot
                cannot_read.add(name)
                if lost is None:
                    stale.add(name)
                else:
                    lost.setdefault(name, record.revision)
                continue
            try:
                decoder = decoders.get((name, op.kind))
                if decoder is None:
                    declared = binding.value_type if op.kind == "value" else binding.update_type
                    decoder = msgspec.json.Decoder(declared, dec_hook=dec_hook)
                    decoders[name, op.kind] = decoder
                decoded = _decoded(decoder, op.update, name, record, thread_id)
                if op.kind == "value":
                    values[name] = decoded
                    continue
                update = decoded
            except DecodeFailed:
                if not skip_undecodable:
                    raise
                values.pop(name, None)
                cannot_read.add(name)
                stale.add(name)
                continue
            current = values.get(name, _MISSING)
            if current is _MISSING:
                current = binding.make_default()
            elif shared and binding.copy_values and name not in copied:
                current = copy_of(current, name)
            copied.add(name)
            try:
                values[name] = binding.key.apply(current, update)
            except Exception as error:
                raise ReplayFailed(thread_id, record.revision, name, error) from error
    return stale


_MISSING: Any = object()


def _last_clears(records: list[CommitRecord]) -> dict[str, int]:
    """Where each key's last clear is, counting the ops of `records` in order."""
    found: dict[str, int] = {}
    position = -1
    for record in records:
        for op in record.ops:
            position += 1
            if op.kind == "clear":
                found[op.key] = position
    return found


def _decoded(
    decoder: msgspec.json.Decoder[Any], data: bytes, name: str, record: CommitRecord, thread_id: str
) -> Any:
    try:
        return decoder.decode(data)
    except CODEC_ERRORS as error:
        where = f"{thread_id} (journal, revision {record.revision})"
        raise DecodeFailed(name, where, error) from error


def hash_of(registry: KeyRegistry, revision: int, values: Mapping[str, Any]) -> str:
    """`Snapshot.state_hash` of these values: the one comparison replay uses."""
    return Snapshot(revision, immutables.Map(values), registry).state_hash()
