"""What a commit leaves in the journal: its ops as `JournalOp`s, written as it applies them.

Every change goes through one commit path, so the ops a commit applies *are* the history.
The live state has its `OpWriter` write a commit's ops right as it applies them
(`OpWriter.write`, just before the ops run). In the common case every op is an update of a
key journaled as it is (its update type always decodes back equal; its route is its key
string, `OpWriter.routes`): the writer's loop then only gathers the key strings and updates,
and encodes the updates together, as one JSON array (`PackedOps`), split into `JournalOp`s
only when a save or a listener reads them. A commit with any other op (a CLEAR, an update of
an inexact type, a key whose ops are set aside or not kept, an update that does not encode)
is written op by op, each through its `Route`. No command, update or value is held after
the commit, and the journal later only dates and labels what was written here
(`CommitRecord`, made by `_durable.journal.records_of`).

Which ops a writer keeps is chosen once, where the thread's home is: a `StoreOpWriter` for a
thread a ThreadStore keeps (the ops of persistent thread keys), an `EveryOpWriter` for one
only the kernel's memory keeps (every op).

The commit notes what was written as a `PendingCommit`, kept until a save.

An `Overwrite` (a schema field's value replaced whole) is written as a `"value"` op holding
that value, which replay sets as it is. An op that cannot be journaled as its update makes
its key `failed` for that commit: once the commit has applied its ops, all of the key's
ops in it become one `"value"` op holding the value they made (`OpWriter.complete`), so
every op replays.
"""

from __future__ import annotations

import abc
import datetime
import enum
import itertools
import time
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, ClassVar, Literal

import msgspec

from .._errors import StateValidationError
from .._values.codec import (
    CODEC_ERRORS,
    NOT_EXACT,
    STORABLE_TYPES,
    dec_hook,
    decodes_back,
    enc_hook,
)
from .._values.commands import CLEAR, Overwrite
from .._values.keys import KeyScope
from .._values.phases import Phase
from .merge import Contribution
from .registry import KeyBinding, KeyRegistry

encode_update = msgspec.json.Encoder(enc_hook=enc_hook).encode
"""An update as a JournalOp holds it: msgspec JSON."""


class JournalOp(msgspec.Struct, frozen=True, gc=False):
    """One op of a commit, as applied: the key string, what kind of op, and its bytes.

    A frozen msgspec Struct, in `CommitRecord.ops`:

    - `key`: the key string.
    - `kind` and `update`: `"update"` (`update` holds the update as msgspec JSON, replayed
      with the key's `apply`), `"clear"` (no bytes), or `"value"` (`update` holds a value,
      set as it is on replay: an `Overwrite`'s new value, or, for a key whose update cannot
      be encoded, the key's value right after the commit). A `"value"` op's `update` is
      None only in the kernel's memory, which then holds the value itself, or in a thread
      saved by an earlier statekernel.

    A ThreadStore journals the ops of persistent thread keys only; without a store, the
    kernel's memory journals every op. See [durability and history](durability.md).
    """

    key: str
    kind: Literal["update", "clear", "value"]
    update: bytes | None = None


class CommitRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One commit that moved a thread's revision: who made it, when, and what it applied.

    A frozen msgspec Struct, as `kernel.history` returns them:

    - `thread_id`, `revision`: the thread and the revision the commit made.
    - `run_id`: the run that made it (None for `kernel.update_state`).
    - `phase`: a `Phase`, or None for a commit made outside a phase (a tool's command,
      `run.submit`, `kernel.update_state`).
    - `step`: how many `STEP_START` phases the run had begun (0 before the first).
    - `sources`: the contributions, in merge order: `"plugin:<id>"`, `"action:<key>"`,
      `"tool:<name>"`, `"submit"` or `"external"`.
    - `ops`: its `JournalOp`s, in the order they were applied.
    - `created_at`: when it was made, a UTC `datetime`.

    See [durability and history](durability.md).
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


class Route(enum.Enum):
    """Where the ops of a key not journaled as it is go.

    A key journaled as it is (its updates always decode back equal, and its writer keeps its
    ops) has its key string for a route instead: `OpWriter.write` journals its ops inline,
    the common case. Every other route goes through `OpWriter._write`.
    """

    SKIP = "skip"
    """Not journaled: a run key, for a `StoreOpWriter` (or a key the registry does not know:
    the commit refuses it)."""
    CHECKED = "checked"
    """Journaled once each update is checked to decode back equal (an inexact update type)."""
    SET_ASIDE = "set aside"
    """A memory-only (`persistent=False`) thread key, for a `StoreOpWriter`: its ops go into
    the commit's `thread_ops`, not its `ops`."""


_split_updates = msgspec.json.Decoder(list[msgspec.Raw]).decode


class PackedOps(msgspec.Struct, frozen=True, gc=False):
    """A commit's ops when each is an update of a key journaled as it is: their key strings,
    and their updates encoded together as one JSON array.

    Most commits are only such ops, and most are never read again op by op before a save:
    two objects per commit instead of two per op keep the commit cheap and the journal
    small. Each element of the array is exactly the bytes its update encodes to alone (JSON
    does not depend on where a value sits), so `unpack` gives the JournalOps that writing
    op by op would have."""

    keys: tuple[str, ...]
    updates: bytes

    def unpack(self) -> tuple[JournalOp, ...]:
        """The ops, one `"update"` JournalOp each, in the order they were applied."""
        kinds: itertools.repeat[Literal["update"]] = itertools.repeat("update")
        return tuple(map(JournalOp, self.keys, kinds, map(bytes, _split_updates(self.updates))))


_NOTHING_FAILED: AbstractSet[str] = frozenset()


class PendingCommit(msgspec.Struct, frozen=True, gc=False):
    """A commit the live state journaled, to become a `CommitRecord` when it is saved.

    Its ops were written as the commit applied them (`OpWriter.write`), so it holds no
    command, update or value: only small encoded ops (`written`: JournalOps, or PackedOps
    while every op is an update journaled as it is; read them as `ops`), in the order they
    were applied, and the sources of the contributions that had ops, in merge order.
    `every_op` says which ops `ops` holds: every op (an `EveryOpWriter` wrote it), or the
    persistent thread keys' only (a `StoreOpWriter`). `thread_ops` is None unless a
    `StoreOpWriter` set some ops aside: then it holds every thread key's op, memory-only ones
    included, for the kernel's memory. `failed` names keys some op of which could not be
    journaled, even as the key's value (`OpWriter.complete`). (A frozen msgspec Struct: one
    is built for every commit.)
    """

    revision: int
    phase: Phase | None
    step: int
    sources: tuple[str, ...]
    written: tuple[JournalOp, ...] | PackedOps
    thread_ops: tuple[JournalOp, ...] | None
    failed: AbstractSet[str]
    every_op: bool
    at: float = msgspec.field(default_factory=time.time)
    held: Mapping[str, Any] | None = None
    """For the keys still in `failed` (their value could not be journaled either), their
    value right after the commit, held as it is: only a kernel's memory keeps these."""

    @property
    def ops(self) -> tuple[JournalOp, ...]:
        """The ops, as JournalOps (packed ones unpacked anew: read them once)."""
        written = self.written
        return written.unpack() if isinstance(written, PackedOps) else written


class OpWriter(abc.ABC):
    """How one live state writes its ops: where each key's ops go, and how.

    Which ops a writer keeps depends on where the thread lives, chosen once with the
    thread's home (its `run_journal`):

    - `StoreOpWriter`, for a thread a ThreadStore keeps: the ops of persistent thread keys
      (those a thread keeps between runs; run keys start afresh in every run, and a key's
      scope may differ in the next kernel that reads the thread). A `persistent=False`
      thread key's ops are set aside into the commit's `thread_ops`, which the kernel's
      memory keeps beside the others; a run key's are dropped.
    - `EveryOpWriter`, for a thread only the kernel's memory keeps: every op. A run whose
      record listener wants every op (`RunJournal.write_every_op`) writes with one too,
      whatever its home; a save then sorts them as the home's writer keeps them
      (`StoreOpWriter.as_kept`).

    Both write the same way (`write`); they differ only in each key's route (`_route_of`).
    """

    __slots__ = ("_checks", "_registry", "routes", "to_store")

    every_op: ClassVar[bool]
    """Whether this writer's commits hold every op (`PendingCommit.every_op`)."""

    def __init__(self, registry: KeyRegistry, *, to_store: bool) -> None:
        self._registry = registry
        self.to_store = to_store
        """Whether the persistent thread keys' ops go to a ThreadStore (then each must have
        its bytes: `complete`)."""
        self.routes: dict[Any, str | Route] = {}
        """Key class -> its key string, for a key journaled as it is (`write` inlines
        those), or its `Route`; filled as keys are first seen."""
        self._checks: dict[tuple[str, str], msgspec.json.Decoder[Any]] = {}

    @abc.abstractmethod
    def _route_of(self, binding: KeyBinding) -> str | Route:
        """Where a registered key's ops go, for this kind of writer."""

    @abc.abstractmethod
    def every_op_writer(self) -> OpWriter:
        """A writer keeping every op of the same thread (a record listener wants them)."""

    @abc.abstractmethod
    def as_kept(self, pending: PendingCommit) -> PendingCommit:
        """`pending` with the ops this writer keeps, whichever writer wrote it."""

    def write(
        self, contributions: Sequence[Contribution], revision: int, phase: Phase | None, step: int
    ) -> PendingCommit:
        """Journal the ops of the commit that is to make `revision`, in the order it applies
        them, just before it does: the update an op was given, whatever an `apply` later
        does with it. Nothing of the commands is held after this, so a long stretch between
        saves keeps only these small encoded ops. (A key the registry does not know is left
        out: the commit refuses it, and with it what was written here.)

        This runs on every commit. While every op is an update of a key journaled as it is
        (its route is its key string), the loop only gathers key strings and updates, and
        they are encoded together (`PackedOps`); a commit with any other op, or with an
        update that does not encode, is written op by op (`_write_each`).
        """
        routes = self.routes
        sources: list[str] = []
        names: list[str] = []
        updates: list[Any] = []
        one_by_one = False
        for contribution in contributions:
            applied = contribution.command.patch.ops
            if not applied:
                continue
            source = contribution.source  # (set for a hook's: made once, with the hook)
            sources.append(source if source is not None else contribution.journal_source())
            if one_by_one:
                continue
            for key, update in applied:
                try:
                    route = routes[key]
                except KeyError:
                    route = self._route(key)
                if type(route) is str and update is not CLEAR:
                    names.append(route)
                    updates.append(update)
                elif route is not Route.SKIP:
                    one_by_one = True
                    break
        if not one_by_one:
            written = _written(names, updates)
            if written is not None:
                return PendingCommit(
                    revision,
                    phase,
                    step,
                    tuple(sources),
                    written,
                    None,
                    _NOTHING_FAILED,
                    self.every_op,
                )
        return self._write_each(contributions, revision, phase, step, tuple(sources))

    def _write_each(
        self,
        contributions: Sequence[Contribution],
        revision: int,
        phase: Phase | None,
        step: int,
        sources: tuple[str, ...],
    ) -> PendingCommit:
        """`write`, op by op, for a commit with an op other than an update journaled as it
        is: each op through its route (`_write`)."""
        routes = self.routes
        ops: list[JournalOp] = []
        thread_ops: list[JournalOp] | None = None
        failed: set[str] = set()
        for contribution in contributions:
            for key, update in contribution.command.patch.ops:
                route = routes.get(key) or self._route(key)
                if route is not Route.SKIP:
                    thread_ops = self._write(route, key, update, ops, thread_ops, failed)
        return PendingCommit(
            revision,
            phase,
            step,
            sources,
            tuple(ops),
            None if thread_ops is None else tuple(thread_ops),
            failed,  # (handed over, never changed again)
            self.every_op,
        )

    def _route(self, key: Any) -> str | Route:
        """The route of a key first seen, worked out once (`routes`)."""
        binding = self._registry.by_class.get(key)
        if binding is None:  # unknown: nothing of the commit is kept
            return Route.SKIP
        route = self.routes[key] = self._route_of(binding)
        return route

    def _write(
        self,
        route: str | Route,
        key: Any,
        update: Any,
        ops: list[JournalOp],
        thread_ops: list[JournalOp] | None,
        failed: set[str],
    ) -> list[JournalOp] | None:
        """Journal one op of a commit written op by op, by its `route` (never `SKIP`): an
        op set aside, and any op after one was, joins `thread_ops` too. Returns the
        commit's thread ops so far (None while no op was set aside)."""
        op = self._op(self._registry.by_class[key], update, failed)
        if route is Route.SET_ASIDE:
            if thread_ops is None:
                thread_ops = list(ops)  # every op kept so far is a thread key's
            thread_ops.append(op)
            return thread_ops
        ops.append(op)
        if thread_ops is not None:
            thread_ops.append(op)
        return thread_ops

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
                    raise ValueError(NOT_EXACT)
                return JournalOp(binding.name, "value", data)
            data = encode_update(update)
            if not binding.exact.updates and not self._comes_back(binding, data, update, "update"):
                raise ValueError(NOT_EXACT)
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
            declared = getattr(binding, f"{kind}_type")  # its `update_type` or `value_type`
            decoder = self._checks[binding.name, kind] = msgspec.json.Decoder(
                declared, dec_hook=dec_hook
            )
        return decodes_back(data, decoder, given)

    def complete(self, pending: PendingCommit, values: Mapping[str, Any]) -> PendingCommit:
        """`pending`, whose ops some keys could not journal as their updates (`failed`),
        with each such key's ops made one `"value"` op holding its value right after the
        commit (`values`, by key string; a key absent there is cleared). That keeps every
        op replayable: `state_at` and `verify` never meet an op without bytes.

        A value that cannot be journaled either (it does not encode, or would not decode
        back equal) is refused for a key a ThreadStore keeps, before the commit publishes
        anything: it could never be saved. For any other key the value is held as it is
        (`PendingCommit.held`), for the kernel's memory.
        """
        filled: dict[str, JournalOp] = {}
        held: dict[str, Any] = {}
        for name in pending.failed:
            binding = self._registry.by_name[name]
            if name not in values:
                filled[name] = JournalOp(name, "clear")
                continue
            value = values[name]
            try:
                data = encode_update(value)
                if not binding.exact.values and not self._comes_back(binding, data, value, "value"):
                    raise ValueError(NOT_EXACT)
            except CODEC_ERRORS as error:
                if self.to_store and binding.stored:
                    raise StateValidationError(
                        name,
                        "a value a thread store keeps exactly",
                        value,
                        what="value",
                        detail=(
                            f"neither its update nor the value it made can be journaled, so "
                            f"nothing was committed; the value cannot be encoded for "
                            f"persistence: {error}. {STORABLE_TYPES}"
                        ),
                    ) from error
                held[name] = value
                continue
            filled[name] = JournalOp(name, "value", data)
        return msgspec.structs.replace(
            pending,
            written=_filled(as_values(pending.ops, pending.failed), filled),
            thread_ops=(
                None
                if pending.thread_ops is None
                else _filled(as_values(pending.thread_ops, pending.failed), filled)
            ),
            failed=frozenset(held),
            held=held or None,
        )


class StoreOpWriter(OpWriter):
    """The writer of a thread a ThreadStore keeps: the persistent thread keys' ops in a
    commit's `ops`, for the store; a `persistent=False` thread key's set aside (into
    `thread_ops`, with every other thread key's, for the kernel's memory); a run key's
    dropped."""

    __slots__ = ()
    every_op = False

    def __init__(self, registry: KeyRegistry) -> None:
        super().__init__(registry, to_store=True)

    def _route_of(self, binding: KeyBinding) -> str | Route:
        if binding.stored:
            return _as_is_or_checked(binding)
        if binding.scope is KeyScope.THREAD:
            return Route.SET_ASIDE
        return Route.SKIP

    def every_op_writer(self) -> OpWriter:
        """An `EveryOpWriter` whose values must still reach the store (`complete`)."""
        return EveryOpWriter(self._registry, to_store=True)

    def as_kept(self, pending: PendingCommit) -> PendingCommit:
        """`pending` as this writer would have written it: a commit an `EveryOpWriter` wrote
        (for a record listener) sorted by each key's route; one of ours as it is."""
        if not pending.every_op:
            return pending
        by_name = self._registry.by_name
        ops: list[JournalOp] = []
        thread_ops: list[JournalOp] = []
        for op in pending.ops:
            route = self._route_of(by_name[op.key])
            if route is Route.SKIP:
                continue
            thread_ops.append(op)
            if route is not Route.SET_ASIDE:
                ops.append(op)
        return msgspec.structs.replace(
            pending,
            written=tuple(ops),
            thread_ops=tuple(thread_ops) if len(thread_ops) > len(ops) else None,
            every_op=False,
        )


class EveryOpWriter(OpWriter):
    """The writer of a thread only the kernel's memory keeps: every op, in a commit's `ops`.
    Also what a run writes with once a record listener wants every op (`to_store` when the
    thread's home is a store all the same)."""

    __slots__ = ()
    every_op = True

    def __init__(self, registry: KeyRegistry, *, to_store: bool = False) -> None:
        super().__init__(registry, to_store=to_store)

    def _route_of(self, binding: KeyBinding) -> str | Route:
        return _as_is_or_checked(binding)

    def every_op_writer(self) -> OpWriter:
        return self

    def as_kept(self, pending: PendingCommit) -> PendingCommit:
        return pending  # every op: whichever writer wrote it, it holds no op we would not


def _written(names: list[str], updates: list[Any]) -> tuple[JournalOp, ...] | PackedOps | None:
    """Updates of keys journaled as they are, written: packed from two on (a lone op is one
    encode either way, and packing it would only add the split). None if some update does
    not encode: the commit is then written op by op, which says which."""
    if not names:
        return ()
    try:
        data = encode_update(updates if len(names) > 1 else updates[0])
    except CODEC_ERRORS:
        return None
    if len(names) > 1:
        return PackedOps(tuple(names), data)
    return (JournalOp(names[0], "update", data),)


def _as_is_or_checked(binding: KeyBinding) -> str | Route:
    """The route of a key whose ops a writer keeps: its key string when its updates always
    decode back equal (journaled as they are), else `CHECKED`."""
    return binding.name if binding.exact.updates else Route.CHECKED


def _filled(ops: tuple[JournalOp, ...], filled: Mapping[str, JournalOp]) -> tuple[JournalOp, ...]:
    """`ops` with each byte-less op of a key in `filled` replaced by that key's op."""
    return tuple(
        filled[op.key] if op.update is None and op.kind == "value" and op.key in filled else op
        for op in ops
    )


def as_values(ops: tuple[JournalOp, ...], failed: AbstractSet[str]) -> tuple[JournalOp, ...]:
    """Each key in `failed` keeps one op, a `"value"` op without bytes, where its last op
    was (every earlier op of the key in this commit is in that value already)."""
    last = {op.key: index for index, op in enumerate(ops)}
    return tuple(
        op if op.key not in failed else JournalOp(op.key, "value")
        for index, op in enumerate(ops)
        if op.key not in failed or last[op.key] == index
    )
