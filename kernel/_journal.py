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
is journaled as a `"value"` op without bytes, and the save then writes a snapshot, so that
a load never needs the op.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterable
from typing import Any, Literal

import attrs
import msgspec

from ._codec import CODEC_ERRORS, dec_hook, decodes_back, enc_hook
from ._commands import CLEAR
from ._commit import PendingCommit
from ._errors import DecodeFailed
from ._keys import KeyScope
from ._phases import Phase
from ._registry import KeyBinding, KeyRegistry

__all__ = [
    "CommitRecord",
    "JournalOp",
    "Journaled",
    "RunJournal",
    "decode_record",
    "encode_record_bytes",
    "records_of",
]

_UTC = datetime.UTC
_update_encoder = msgspec.json.Encoder(enc_hook=enc_hook)


class JournalOp(msgspec.Struct, frozen=True, gc=False):
    """One op of a commit, as applied: the key string, what kind of op, and its bytes.

    `kind` is `"update"` (`update` holds the update as msgspec JSON, replayed with the key's
    `apply`), `"clear"` (no bytes), or `"value"` (for a key whose update cannot be encoded:
    `update` holds the key's value right after the commit, or None if that cannot be
    encoded either).
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


@attrs.frozen
class Journaled:
    """Records made from pending commits, and the keys some op of which could not be
    journaled as an update (they need a snapshot to be rebuilt from).

    For a store, `records` hold the ops of persistent thread keys; `in_memory` holds, for
    the commits that also wrote `persistent=False` thread keys, the whole record, which the
    kernel keeps in its memory (those keys are journaled in memory only).
    """

    records: list[CommitRecord]
    unrecorded: frozenset[str]
    in_memory: tuple[CommitRecord, ...] = ()


def records_of(
    pending: Iterable[PendingCommit],
    registry: KeyRegistry,
    *,
    thread_id: str,
    run_id: str | None,
    for_store: bool,
) -> Journaled:
    """The pending commits as records.

    `for_store`: `records` hold only the ops of persistent thread keys, the ones a
    ThreadStore keeps (run keys start afresh in every run, and a key's scope may differ in
    the next kernel that reads the thread), and a commit that also wrote `persistent=False`
    thread keys is whole in `in_memory` too; without a store, the kernel's memory journals
    every op.

    An op whose update cannot be encoded makes its key's ops in that commit one `"value"`
    op without bytes, where the last of them was; the key is `unrecorded`, and the save
    must then write a snapshot, which a load or time travel rebuilds it from.
    """
    checks: dict[str, msgspec.json.Decoder[Any]] = {}
    routes: dict[Any, tuple[KeyBinding, int]] = {}  # key class -> binding, _JOURNAL/...
    plain: dict[Any, str] = {}  # key class -> key string, for keys journaled as they are
    hook_sources: dict[str | None, str] = {}
    records: list[CommitRecord] = []
    in_memory: list[CommitRecord] = []
    unrecorded: set[str] = set()
    encode = _update_encoder.encode
    for commit in pending:
        sources: list[str] = []
        ops: list[JournalOp] = []
        whole: list[JournalOp] | None = None  # for a store: with memory-only ops too
        failed: set[str] = set()
        for contribution, applied in commit.parts:
            source = contribution.source
            if source is None:  # a hook's: "plugin:<id>", made once per plugin
                source = hook_sources.get(contribution.origin)
                if source is None:
                    source = hook_sources[contribution.origin] = contribution.journal_source()
            sources.append(source)
            for key, update in applied:
                name = plain.get(key)
                if name is not None and whole is None and update is not CLEAR:
                    try:  # the common case, inlined
                        ops.append(JournalOp(name, "update", encode(update)))
                        continue
                    except CODEC_ERRORS:
                        pass
                route = routes.get(key)
                if route is None:
                    route = routes[key] = _route(registry.by_class[key], for_store)
                    if route[1] == _JOURNAL and route[0].exact[1]:
                        plain[key] = route[0].name
                binding, where = route
                if where == _SKIP:
                    continue
                if update is not CLEAR and binding.exact[1]:  # the common case, inlined
                    try:
                        op = JournalOp(binding.name, "update", encode(update))
                    except CODEC_ERRORS:
                        op = _op(binding, update, failed, checks)
                else:
                    op = _op(binding, update, failed, checks)
                if where == _MEMORY_ONLY:
                    if whole is None:
                        whole = list(ops)
                    whole.append(op)
                    continue
                ops.append(op)
                if whole is not None:
                    whole.append(op)
        if failed:
            ops = _as_values(ops, failed)
            # Only a persistent thread key (any thread key without a store) is rebuilt by
            # replay: it needs the snapshot the save writes.
            by_name = registry.by_name
            unrecorded.update(
                n
                for n in failed
                if by_name[n].scope is KeyScope.THREAD and (by_name[n].stored or not for_store)
            )
        record = CommitRecord(
            thread_id=thread_id,
            revision=commit.revision,
            run_id=run_id,
            phase=commit.phase,
            step=commit.step,
            sources=tuple(sources),
            ops=tuple(ops),
            created_at=datetime.datetime.fromtimestamp(commit.at, _UTC),
        )
        records.append(record)
        if whole is not None:
            whole_ops = tuple(_as_values(whole, failed) if failed else whole)
            in_memory.append(msgspec.structs.replace(record, ops=whole_ops))
    return Journaled(records, frozenset(unrecorded), tuple(in_memory))


_JOURNAL, _MEMORY_ONLY, _SKIP = 0, 1, 2


def _route(binding: KeyBinding, for_store: bool) -> tuple[KeyBinding, int]:
    """Where a key's ops go: into the record; for a store, only into the whole record kept
    in memory (a `persistent=False` thread key); or nowhere (a run key, for a store)."""
    if for_store and not binding.stored:
        return binding, (_MEMORY_ONLY if binding.scope is KeyScope.THREAD else _SKIP)
    return binding, _JOURNAL


def _op(
    binding: KeyBinding,
    update: Any,
    failed: set[str],
    checks: dict[str, msgspec.json.Decoder[Any]],
) -> JournalOp:
    """One applied op, encoded; an update that cannot be stored as it is puts its key in
    `failed` (all of its ops in the commit become one `"value"` op)."""
    if update is CLEAR:
        return JournalOp(binding.name, "clear")
    try:
        data = _update_encoder.encode(update)
        if not binding.exact[1] and not _comes_back(binding, data, update, checks):
            raise ValueError("does not decode back equal")
        return JournalOp(binding.name, "update", data)
    except CODEC_ERRORS:
        failed.add(binding.name)
        return JournalOp(binding.name, "value")


def _comes_back(
    binding: KeyBinding, data: bytes, update: Any, checks: dict[str, msgspec.json.Decoder[Any]]
) -> bool:
    """Whether `data` decodes to an update equal to `update` (a float infinity becomes null,
    a tuple typed `Any` a list): what replay would apply must be what the commit did."""
    decoder = checks.get(binding.name)
    if decoder is None:
        decoder = checks[binding.name] = msgspec.json.Decoder(
            binding.update_type, dec_hook=dec_hook
        )
    return decodes_back(data, decoder, update)


def _as_values(ops: list[JournalOp], failed: set[str]) -> list[JournalOp]:
    """Each key in `failed` keeps one op, a `"value"` op without bytes, where its last op
    was (every earlier op of the key in this commit is in that value already)."""
    last = {op.key: index for index, op in enumerate(ops)}
    return [
        op if op.key not in failed else JournalOp(op.key, "value")
        for index, op in enumerate(ops)
        if op.key not in failed or last[op.key] == index
    ]


class RunJournal:
    """The commits of one run since its last save, on their way to the journal.

    The newest are pending commits (references, noted by the live state); once they hold
    `compact_at` ops, those are made records at once. A long stretch between saves
    then holds compact records, not every command and update, and the save encodes the
    same records it would have anyway.
    """

    def __init__(
        self,
        registry: KeyRegistry,
        *,
        thread_id: str,
        run_id: str | None,
        for_store: bool,
        compact_at: int = 64,
    ) -> None:
        self._registry = registry
        self._thread_id = thread_id
        self._run_id = run_id
        self._for_store = for_store
        self.compact_at = compact_at
        self._records: list[CommitRecord] = []
        self._unrecorded: set[str] = set()
        self._in_memory: list[CommitRecord] = []

    def compact(self, pending: Iterable[PendingCommit]) -> None:
        journaled = self._made(pending)
        self._records.extend(journaled.records)
        self._unrecorded.update(journaled.unrecorded)
        self._in_memory.extend(journaled.in_memory)

    def journaled(self, pending: Iterable[PendingCommit]) -> Journaled:
        """Everything since the last save: the records made so far, then `pending`."""
        fresh = self._made(pending)
        if not self._records and not self._in_memory:
            return fresh
        return Journaled(
            [*self._records, *fresh.records],
            frozenset(self._unrecorded | fresh.unrecorded),
            (*self._in_memory, *fresh.in_memory),
        )

    def saved(self) -> None:
        """The last `journaled()` is durable: forget it."""
        self._records.clear()
        self._unrecorded.clear()
        self._in_memory.clear()

    def _made(self, pending: Iterable[PendingCommit]) -> Journaled:
        return records_of(
            pending,
            self._registry,
            thread_id=self._thread_id,
            run_id=self._run_id,
            for_store=self._for_store,
        )


_record_encoder = msgspec.msgpack.Encoder()
_record_decoder = msgspec.msgpack.Decoder(CommitRecord)


_DIGEST_SIZE = 8


def encode_record_bytes(record: CommitRecord) -> bytes:
    """The record as a store keeps it: a digest of the body, then the body (MessagePack;
    the update bytes inside are JSON). The digest makes a record changed on disk fail to
    load, naming its revision, instead of being replayed into a state nobody committed."""
    body = _record_encoder.encode(record)
    return hashlib.blake2b(body, digest_size=_DIGEST_SIZE).digest() + body


def decode_record(data: bytes, *, thread_id: str, revision: int | None = None) -> CommitRecord:
    """A stored record back; bytes that were changed or do not decode raise `DecodeFailed`
    naming the thread and the revision (also as its `revision` attribute)."""
    where = thread_id if revision is None else f"{thread_id} (revision {revision})"
    digest, body = data[:_DIGEST_SIZE], data[_DIGEST_SIZE:]
    try:
        if hashlib.blake2b(body, digest_size=_DIGEST_SIZE).digest() != digest:
            raise msgspec.DecodeError("the record's bytes do not match its digest: changed")
        record = _record_decoder.decode(body)
    except msgspec.MsgspecError as error:
        raise DecodeFailed("commit record", where, error, revision=revision) from error
    if revision is not None and record.revision != revision:
        mismatch = ValueError(f"it says revision {record.revision}")
        raise DecodeFailed("commit record", where, mismatch, revision=revision)
    return record
