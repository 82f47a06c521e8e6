"""Replay: rebuilding a thread's state from its journal, and checking it against what was saved.

Replay is how a thread is loaded (the newest snapshot plus the records after it), how
`state_at` travels back in time, and how `verify` proves that the journal still means what
it meant: it re-applies each op with its key's `apply`, exactly as the commit did. Only
thread-scoped keys are rebuilt; run keys start afresh in every run, so their ops are history
only. A key replay cannot rebuild here (a key no plugin of this kernel registered, a value
that did not decode) is reported as *stale*, and one that an op journaled without bytes
left unknown as *lost* (`Replayed`), rather than guessed at. Its caller says how the records
were written, and what to do with such ops, in a `ReplayPolicy`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import immutables
import msgspec

from .._engine.registry import KeyBinding, KeyRegistry
from .._engine.snapshot import Snapshot
from .._errors import DecodeFailed, ReplayFailed
from .._values.codec import CODEC_ERRORS, dec_hook
from .._values.declared_types import copy_of
from .._values.keys import KeyScope
from .journal import CommitRecord

__all__ = ["ReplayPolicy", "ReplayReport", "Replayed", "apply_records", "hash_of"]


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


@attrs.frozen(kw_only=True)
class ReplayPolicy:
    """How the records replayed were written, and what replay does with an op it cannot
    rebuild a value from.

    - `every_op`: the records hold every op (the kernel's memory journals them all; a run
      key's op is history only), rather than the persistent thread keys' only (a
      ThreadStore's: an op of a key this kernel declares otherwise is stale).
    - `held`: for an op journaled without bytes, the value the kernel's memory held, by
      (revision, key string). Without one (a store written before every op had its bytes)
      the key is lost from that op on (`Replayed.lost`).
    - `skip_undecodable`: an update or value that no longer decodes drops its key, stale,
      rather than raising `DecodeFailed`.
    - `shared`: the values replayed onto are also a live run's (a rebase, or a load that
      catches up the values a run holds): a mutable one is copied before the first `apply`
      on it, which may change it in place, as a commit would.
    """

    every_op: bool
    held: Mapping[tuple[int, str], Any] = attrs.field(factory=dict)
    skip_undecodable: bool = False
    shared: bool = False


@attrs.frozen
class Replayed:
    """What a replay could not rebuild (`apply_records`).

    - `stale`: keys whose values here are not the thread's: a key held as bytes this
      kernel cannot read (`unreadable`) that an op touched, a key no plugin registered, a
      key whose update or value no longer decodes (`skip_undecodable`), and a key the
      records' writer kept as a persistent thread key that this kernel declares otherwise.
    - `lost`: keys that an op journaled without bytes, with no value held for it, left
      unknown, by that op's revision: nothing any kernel could rebuild until a snapshot.
    """

    stale: frozenset[str]
    lost: dict[str, int]


def apply_records(
    registry: KeyRegistry,
    values: dict[str, Any],
    records: Iterable[CommitRecord],
    *,
    thread_id: str,
    policy: ReplayPolicy,
    unreadable: Iterable[str] = (),
) -> Replayed:
    """Apply `records` to `values` (thread keys by key string, changed in place), oldest
    first, as `policy` says; returns the keys it could not rebuild.

    Each op is replayed as its commit applied it: a clear drops the value, a `"value"` op
    sets it, an update goes through the key's `apply` (one that raises is `ReplayFailed`).
    An update that a later clear of its key in `records` supersedes is not decoded at all:
    its value could not survive the clear, and a key whose type changed is migrated exactly
    so, by a clear (`update_state(..., replacing=[K])`) after updates of the old type.
    """
    records = list(records)
    last_clear = _last_clears(records)
    replay = _Replay(registry, values, policy, thread_id, unreadable)
    applied = replay.applied  # looked up first: the keys found to apply so far
    position = -1
    for record in records:
        for op in record.ops:
            position += 1
            name = op.key
            binding = applied.get(name) or replay.binding_to_apply(name)
            if binding is None:
                continue
            if op.kind == "clear":
                values.pop(name, None)
            elif position < last_clear.get(name, -1):
                continue  # cleared later on: whatever it did is gone by then
            elif op.update is None:
                replay.set_held(record.revision, binding)
            else:
                decoded = replay.decoded(record.revision, binding, op.kind, op.update)
                if decoded is _UNREADABLE:
                    continue
                if op.kind == "value":
                    values[name] = decoded
                else:
                    replay.apply(record.revision, binding, decoded)
    return Replayed(frozenset(replay.stale), replay.lost)


_MISSING: Any = object()
_UNREADABLE: Any = object()


class _Replay:
    """One replay under way: the values it rebuilds, the keys it gave up on, and one
    decoder per key and kind of op."""

    def __init__(
        self,
        registry: KeyRegistry,
        values: dict[str, Any],
        policy: ReplayPolicy,
        thread_id: str,
        unreadable: Iterable[str],
    ) -> None:
        self._by_name = registry.by_name
        self._values = values
        self._policy = policy
        self._thread_id = thread_id
        self._cannot_read = set(unreadable)
        self._decoders: dict[tuple[str, str], msgspec.json.Decoder[Any]] = {}
        self._owned: set[str] = set()  # with `shared`: the values this replay owns already
        self.stale: set[str] = set()
        self.lost: dict[str, int] = {}
        self.applied: dict[str, KeyBinding] = {}
        """The keys whose ops this replay applies (so far: a key can be lost or stale
        later on), with their bindings; filled by `binding_to_apply`."""

    def binding_to_apply(self, name: str) -> KeyBinding | None:
        """The binding of the key an op is on, when this replay applies its ops; None when
        it does not: a key lost or stale already, or made stale now (one no plugin of
        this kernel registered, or one the records' writer kept as a persistent thread key
        and this kernel does not), or a run key's op (history only)."""
        if name in self.lost:
            return None  # unknown until a snapshot says
        binding = self._by_name.get(name)
        if binding is None or name in self._cannot_read:
            self.stale.add(name)
            return None
        every_op = self._policy.every_op
        if binding.scope is KeyScope.THREAD and (every_op or binding.persistent):
            self.applied[name] = binding
            return binding
        if not every_op:  # the writer kept it as a persistent thread key; we do not
            self.stale.add(name)
            self._values.pop(name, None)
        return None

    def set_held(self, revision: int, binding: KeyBinding) -> None:
        """An op journaled without bytes: the value the kernel's memory held for it, or
        (held nowhere) its key dropped and lost from here until a snapshot."""
        name = binding.name
        kept = self._policy.held.get((revision, name), _MISSING)
        if kept is _MISSING:
            self._values.pop(name, None)
            self.lost.setdefault(name, revision)
            del self.applied[name]
            return
        copies = binding.copy_values or binding.copy_items
        self._values[name] = copy_of(kept, name) if copies else kept

    def decoded(self, revision: int, binding: KeyBinding, kind: str, data: bytes) -> Any:
        """An op's bytes as its key's update (`kind` `"update"`) or value (`"value"`).
        Bytes that no longer decode are `DecodeFailed`, or, if the policy skips them,
        `_UNREADABLE` with the key dropped and stale."""
        name = binding.name
        decoder = self._decoders.get((name, kind))
        if decoder is None:
            declared = binding.value_type if kind == "value" else binding.update_type
            decoder = self._decoders[name, kind] = msgspec.json.Decoder(declared, dec_hook=dec_hook)
        try:
            return decoder.decode(data)
        except CODEC_ERRORS as error:
            if not self._policy.skip_undecodable:
                where = f"{self._thread_id} (journal, revision {revision})"
                raise DecodeFailed(name, where, error) from error
            self._values.pop(name, None)
            self._cannot_read.add(name)
            self.stale.add(name)
            del self.applied[name]
            return _UNREADABLE

    def apply(self, revision: int, binding: KeyBinding, update: Any) -> None:
        """`update` applied with the key's `apply`, as its commit did: to the key's default
        when it holds no value, and, with `shared`, to a copy of a mutable value the first
        time (the live run's must not change)."""
        name = binding.name
        current = self._values.get(name, _MISSING)
        if current is _MISSING:
            current = binding.make_default()
        elif self._policy.shared and binding.copy_values and name not in self._owned:
            current = copy_of(current, name)
        self._owned.add(name)
        try:
            self._values[name] = binding.key.apply(current, update)
        except Exception as error:
            raise ReplayFailed(self._thread_id, revision, name, error) from error


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


def hash_of(registry: KeyRegistry, revision: int, values: Mapping[str, Any]) -> str:
    """`Snapshot.state_hash` of these values: the one comparison replay uses."""
    return Snapshot(revision, immutables.Map(values), registry).state_hash()
