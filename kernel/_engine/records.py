"""What a commit leaves in the journal: its ops as `JournalOp`s, written as it applies them.

Every change goes through one commit path, so the ops a commit applies *are* the history.
The live state writes each op it applies as a `JournalOp` right there, in the same pass:
a key journaled as it is (the common case: its update type always decodes back equal)
costs one encode and one small struct, inlined in the commit's loop (`OpWriter.routes`);
everything else (a CLEAR, an update of an inexact type, a key a store does not journal, an
update that does not encode) goes through `OpWriter.write`. No command, update or value is
held after the commit, and the journal later only dates and labels what was written here
(`CommitRecord`, made by `_journal.records_of`).

An `Overwrite` (a schema field's value replaced whole) is written as a `"value"` op holding
that value, which replay sets as it is. An op that cannot be journaled as its update is
written as a `"value"` op without bytes,
and its key is `failed` for that commit: all of the key's ops in the commit then become one
such op (`as_values`), and the save writes a snapshot to rebuild the key from.
"""

from __future__ import annotations

import datetime
from typing import Any, Final, Literal

import msgspec

from .._values.codec import CODEC_ERRORS, dec_hook, decodes_back, enc_hook
from .._values.commands import CLEAR, Overwrite
from .._values.keys import KeyScope
from .._values.phases import Phase
from .registry import KeyBinding, KeyRegistry

encode_update = msgspec.json.Encoder(enc_hook=enc_hook).encode
"""An update as a JournalOp holds it: msgspec JSON."""


class JournalOp(msgspec.Struct, frozen=True, gc=False):
    """One op of a commit, as applied: the key string, what kind of op, and its bytes.

    `kind` is `"update"` (`update` holds the update as msgspec JSON, replayed with the key's
    `apply`), `"clear"` (no bytes), or `"value"` (an `Overwrite`, whose new value `update`
    holds, set as it is on replay; or, with `update` None, an update that cannot be encoded,
    for which the save writes a snapshot instead).
    """

    key: str
    kind: Literal["update", "clear", "value"]
    update: bytes | None = None


class CommitRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
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
    # (gc=False: records hold only strings, bytes and other records, never a cycle, and a
    # kernel may hold many; the garbage collector need not walk them.)


SKIP: Final = 0
"""A route: the key's ops are not journaled (a run key, when a store keeps the thread)."""
_WRITE: Final = 1  # a route: through `OpWriter.write`


class OpWriter:
    """How one live state writes its ops: where each key's ops go, and how.

    With a store (`for_store`), only persistent thread keys are journaled in the record the
    store keeps (run keys start afresh in every run, and a key's scope may differ in the
    next kernel that reads the thread); a `persistent=False` thread key's ops go into a
    whole record kept in the kernel's memory, beside the stored ones. Without a store, every
    op is journaled. After `write_every_op()` (a record listener wants every op), every op
    is written even with a store, and a save sorts them (`_journal.records_of`).
    """

    __slots__ = ("_checks", "_registry", "every_op", "hook_sources", "routes")

    def __init__(self, registry: KeyRegistry, *, for_store: bool) -> None:
        self._registry = registry
        self.routes: dict[Any, str | int] = {}
        """Key class -> its key string, for a key journaled as it is (the commit inlines
        those), or `SKIP`, or another route for `write`; filled as keys are first seen."""
        self.hook_sources: dict[str | None, str] = {}
        """A hook's source string (`"plugin:<id>"`) by plugin, made once."""
        self._checks: dict[tuple[str, str], msgspec.json.Decoder[Any]] = {}
        self.every_op = not for_store
        """Whether every op is written to the commit's ops (no store, or a listener)."""

    def write_every_op(self) -> None:
        """From now on write every op, as without a store; commits noted from then on say so
        (`PendingCommit.every_op`)."""
        if not self.every_op:
            self.every_op = True
            self.routes.clear()

    def route(self, key: Any) -> str | int:
        """The key's route, worked out once."""
        found = self.routes.get(key)
        if found is None:
            binding = self._registry.by_class[key]
            if not self.every_op and not binding.stored:
                found = _WRITE if binding.scope is KeyScope.THREAD else SKIP
            elif binding.exact.updates:
                found = binding.name
            else:
                found = _WRITE
            self.routes[key] = found
        return found

    def write(
        self,
        key: Any,
        update: Any,
        ops: list[JournalOp],
        whole: list[JournalOp] | None,
        failed: set[str],
    ) -> list[JournalOp] | None:
        """Journal one applied op the commit did not inline; returns the commit's whole
        record so far (for a store: with its memory-only ops too), None while it needs none."""
        route = self.route(key)
        if route == SKIP:
            return whole
        binding = self._registry.by_class[key]
        op = self._op(binding, update, failed)
        if not self.every_op and not binding.stored:  # a `persistent=False` thread key
            if whole is None:
                whole = list(ops)
            whole.append(op)
            return whole
        ops.append(op)
        if whole is not None:
            whole.append(op)
        return whole

    def _op(self, binding: KeyBinding, update: Any, failed: set[str]) -> JournalOp:
        """One applied op, encoded; an update that cannot be stored as it is puts its key in
        `failed` (all of its ops in the commit become one `"value"` op)."""
        if update is CLEAR:
            return JournalOp(binding.name, "clear")
        try:
            if type(update) is Overwrite:  # the new value, whole: journaled as that value
                data = encode_update(update.value)
                if not binding.exact.values and not self._comes_back(
                    binding, data, update.value, "value"
                ):
                    raise ValueError("does not decode back equal")
                return JournalOp(binding.name, "value", data)
            data = encode_update(update)
            if not binding.exact.updates and not self._comes_back(binding, data, update, "update"):
                raise ValueError("does not decode back equal")
            return JournalOp(binding.name, "update", data)
        except CODEC_ERRORS:
            failed.add(binding.name)
            return JournalOp(binding.name, "value")

    def _comes_back(
        self, binding: KeyBinding, data: bytes, given: Any, kind: Literal["update", "value"]
    ) -> bool:
        """Whether `data` decodes to an update or value (`kind`) equal to `given` (a float
        infinity becomes null, a tuple typed `Any` a list): what replay would apply must be
        what the commit did."""
        decoder = self._checks.get((binding.name, kind))
        if decoder is None:
            declared = binding.update_type if kind == "update" else binding.value_type
            decoder = self._checks[binding.name, kind] = msgspec.json.Decoder(
                declared, dec_hook=dec_hook
            )
        return decodes_back(data, decoder, given)


def as_values(ops: tuple[JournalOp, ...], failed: frozenset[str]) -> tuple[JournalOp, ...]:
    """Each key in `failed` keeps one op, a `"value"` op without bytes, where its last op
    was (every earlier op of the key in this commit is in that value already)."""
    last = {op.key: index for index, op in enumerate(ops)}
    return tuple(
        op if op.key not in failed else JournalOp(op.key, "value")
        for index, op in enumerate(ops)
        if op.key not in failed or last[op.key] == index
    )
