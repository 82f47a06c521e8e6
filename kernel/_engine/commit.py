"""The live state: the one place where committed state changes.

A commit applies every op to a working copy of only the keys it touches, validates every
touched value, and only then publishes a new snapshot. If any `apply` or `validate` raises,
the working copy is thrown away: state and revision stay exactly as they were, and the error
is a `CommitRejected` naming the key, the plugin and the cause. Nothing between "apply
started" and "snapshot published" is ever visible.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import immutables

from .._errors import CommitRejected, RevisionConflict, StateError, UnknownStateKey
from .._values.codec import CODEC_ERRORS
from .._values.commands import CLEAR, StateCommand
from .._values.declared_types import copy_of
from .._values.keys import StateKey
from .._values.phases import Phase
from .._values.vector import Vector
from .item_copies import ItemCopies
from .merge import Contribution
from .records import SKIP, JournalOp, OpWriter, encode_update
from .registry import KeyBinding, KeyRegistry
from .snapshot import Snapshot

logger = logging.getLogger("statekernel")

CommitListener = Callable[[Snapshot], None]

_MISSING: Any = object()
_IN_PLACE = ValueError(
    "apply changed an item of the vector in place; items are copied as they are read, so the "
    "change would be lost. Return a new vector with the new item instead "
    "(value[:-1].append(new_item))"
)
_UNTOUCHED: Any = object()
_NO_KEYS: frozenset[str] = frozenset()
_NO_ROUTES: dict[Any, str | int] = {}


class PendingCommit:
    """A commit the live state journaled, to become a `CommitRecord` when it is saved.

    Its ops were written as JournalOps while the commit applied them (`_records`), so it
    holds no command, update or value: only small encoded ops, the sources in merge order,
    and (for a store, when the commit also wrote `persistent=False` thread keys) the whole
    list of ops kept in the kernel's memory. `failed` names keys some op of which could not
    be journaled as its update.
    """

    __slots__ = (
        "at",
        "every_op",
        "failed",
        "ops",
        "phase",
        "revision",
        "sources",
        "step",
        "whole",
    )

    def __init__(self, revision: int, sources: tuple[str, ...], ops: tuple[JournalOp, ...]) -> None:
        self.revision = revision
        self.sources = sources
        self.ops = ops
        self.whole: tuple[JournalOp, ...] | None = None
        self.failed = _NO_KEYS
        self.phase: Phase | None = None
        self.step = 0
        self.every_op = False  # every op in `ops`, even those a store does not keep
        self.at = time.time()


class LiveState:
    """Current state of one run: an O(1) `snapshot`, and an atomic `commit`."""

    __slots__ = (
        "_history",
        "_journal",
        "_listeners",
        "_registry",
        "_snapshot",
        "_staged_from",
        "_touched",
        "_writer",
        "phase",
        "step",
    )

    def __init__(
        self,
        registry: KeyRegistry,
        *,
        values: Mapping[str, Any] | immutables.Map[str, Any] | None = None,
        revision: int = 0,
    ) -> None:
        self._registry = registry
        stored = values if isinstance(values, immutables.Map) else immutables.Map(values or {})
        self._snapshot = Snapshot(revision, stored, registry)
        self._listeners: list[CommitListener] = []
        self._staged_from: Snapshot | None = None
        self._history: list[Snapshot] = []
        self._touched: set[str] | None = None
        self._journal: list[PendingCommit] | None = None
        self._writer: OpWriter | None = None
        # What the journal records with each commit; the run keeps them current.
        self.phase: Phase | None = None
        self.step = 0

    @classmethod
    def of(
        cls,
        registry: KeyRegistry,
        values: Mapping[type[StateKey[Any, Any]], Any],
        *,
        revision: int = 0,
    ) -> LiveState:
        """Live state seeded with values given by key class, each checked by its `validate`."""
        stored: dict[str, Any] = {}
        for key, value in values.items():
            binding = registry.binding(key)
            seeded = copy_of(value, binding.name) if binding.copy_values else value
            if binding.has_validate:
                try:
                    key.validate(seeded)
                except Exception as error:
                    raise CommitRejected(binding.name, error, stage="validate") from error
            stored[binding.name] = seeded
        return cls(registry, values=stored, revision=revision)

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def revision(self) -> int:
        return self._snapshot.revision

    @property
    def registry(self) -> KeyRegistry:
        return self._registry

    def stored_values(self) -> Mapping[str, Any]:
        """The committed values by key string, as held: not copied, so never mutate them.

        For persistence, which encodes them; readers use `snapshot.get`, which copies a
        mutable value."""
        return self._snapshot._stored_values()

    def track_touched(self) -> None:
        """From now on, remember the key strings every commit touches (`touched_names`)."""
        if self._touched is None:
            self._touched = set()

    @property
    def touched_names(self) -> frozenset[str]:
        """Key strings written or cleared since `track_touched()` (empty if never called)."""
        return frozenset(self._touched or ())

    def keep_journal(self, writer: OpWriter) -> None:
        """From now on, journal every commit that moves the revision (`pending_commits`),
        its ops written by `writer` as they are applied. A noted commit holds only those
        small encoded ops, so a long stretch between saves keeps nothing of the commands."""
        if self._journal is None:
            self._journal = []
        self._writer = writer

    def pending_commits(self) -> tuple[PendingCommit, ...]:
        """The commits noted and not yet saved, oldest first."""
        return tuple(self._journal or ())

    def noted_commit(self, revision: int) -> PendingCommit | None:
        """The noted commit that made `revision`, while it is still noted (commit listeners
        find theirs: a commit is noted before they are called)."""
        for pending in reversed(self._journal or ()):
            if pending.revision == revision:
                return pending
            if pending.revision < revision:
                break
        return None

    def forget_commits(self, count: int) -> None:
        """Forget the oldest `count` noted commits: a save has made them durable."""
        if self._journal:
            del self._journal[:count]

    def add_listener(self, listener: CommitListener) -> None:
        """Call `listener(snapshot)` after every commit that moved the revision."""
        self._listeners.append(listener)

    def commit(self, contributions: Sequence[Contribution]) -> Snapshot:
        """Apply the commands' patches atomically, in order; return the resulting snapshot.

        A commit with no state op (only effects or actions) leaves the revision alone.
        """
        return self._commit(contributions)

    def submit(self, command: StateCommand, *, origin: str | None = None) -> Snapshot:
        """Commit a single command's patch (`commit([Contribution(origin, command)])`).

        Live state has no handlers to dispatch effects or run actions, so a command carrying
        any is refused before anything commits, rather than committed without them.
        """
        if command.effects or command.scheduled_actions:
            raise StateError(
                f"LiveState.submit commits state ops only, but this command also carries "
                f"{len(command.effects)} effect(s) and {len(command.scheduled_actions)} "
                f"scheduled action(s), which need a run to dispatch; nothing was committed. "
                f"Use `await run.submit(command)` on a Run of a Kernel that registers their "
                f"handlers."
            )
        return self._commit((Contribution(origin, command),))

    def stage(self) -> LiveState:
        """A private fork to commit into; `publish(fork)` makes all its commits live at once.

        This is how a gather round with deferred re-runs stays atomic: the re-runs see the
        fork's fresh snapshots, and if anything in the round fails the fork is dropped.
        """
        fork = LiveState(
            self._registry, values=self._snapshot._stored_values(), revision=self.revision
        )
        fork._staged_from = self._snapshot
        fork.add_listener(fork._history.append)
        if self._touched is not None:
            fork._touched = set()
        if self._journal is not None:
            fork._journal = []
            fork._writer = self._writer
        fork.phase, fork.step = self.phase, self.step
        return fork

    def publish(self, fork: LiveState) -> int:
        """Make a staged fork's commits live, in order; returns how many there were."""
        if fork._staged_from is not self._snapshot:
            raise RevisionConflict(
                fork._staged_from.revision if fork._staged_from else -1,
                self.revision,
                what="staged round",
            )
        if fork._journal:  # likewise for the journal; noted before the listeners are told
            assert self._journal is not None
            self._journal.extend(fork._journal)
        for snapshot in fork._history:
            self._snapshot = snapshot
            self._notify(snapshot)
        if fork._touched:  # a fork tracks touched keys only when this state does
            assert self._touched is not None
            self._touched.update(fork._touched)
        return len(fork._history)

    def _commit(self, contributions: Sequence[Contribution]) -> Snapshot:
        current = self._snapshot
        revision = current.revision
        by_class = self._registry.by_class
        stored = current._stored_values()
        # Keyed by key class while the ops run (one class per key string), so that an op on
        # a key already touched this commit needs no registry lookup.
        working: dict[Any, Any] = {}
        touched: dict[Any, KeyBinding] = {}
        viewed: set[Any] = set()  # touched keys whose Vector items are copied as read
        views: list[tuple[ItemCopies, str, str | None]] = []  # handed to apply, to check
        checked: list[KeyBinding] = []  # touched keys that copy items or validate
        # The journal writes each op as it is applied (`_records`), so that nothing of the
        # command need be held until the save, and later changes to the command change
        # nothing.
        writer = self._writer if self._journal is not None else None
        journaled: list[JournalOp] = []
        whole: list[JournalOp] | None = None
        failed: set[str] = set()
        sources: list[str] = []
        routes = writer.routes if writer is not None else _NO_ROUTES
        for contribution in contributions:
            patch = contribution.command.patch
            if patch.base_revision is not None and patch.base_revision != revision:
                raise RevisionConflict(patch.base_revision, revision)
            applied = patch.ops
            if writer is not None and applied:
                source = contribution.source
                if source is None:  # a hook's: "plugin:<id>", made once per plugin
                    source = writer.hook_sources.get(contribution.origin)
                    if source is None:
                        source = contribution.journal_source()
                        writer.hook_sources[contribution.origin] = source
                sources.append(source)
            for key, update in applied:
                value = working.get(key, _UNTOUCHED)
                if value is _UNTOUCHED:
                    binding = by_class.get(key)
                    if binding is None:
                        raise UnknownStateKey(
                            getattr(key, "key", repr(key)),
                            contribution.origin,
                            tuple(self._registry.by_name),
                        )
                    touched[key] = binding
                    if binding.checks:
                        checked.append(binding)
                        if binding.copy_items:
                            viewed.add(key)
                if writer is not None:
                    route = routes.get(key)
                    if type(route) is str and whole is None and update is not CLEAR:
                        try:  # a key journaled as it is: the common case, inlined
                            journaled.append(JournalOp(route, "update", encode_update(update)))
                        except CODEC_ERRORS:
                            whole = writer.write(key, update, journaled, whole, failed)
                    elif route != SKIP:
                        whole = writer.write(key, update, journaled, whole, failed)
                if value is _UNTOUCHED:
                    binding = touched[key]
                    if update is CLEAR:
                        working[key] = _MISSING
                        continue
                    value = stored.get(binding.name, _MISSING)
                    if value is _MISSING:
                        value = binding.make_default()
                    elif binding.copy_items and type(value) is Vector:
                        value = ItemCopies(value)
                        views.append((value, binding.name, contribution.origin))
                    elif binding.copy_values:
                        value = copy_of(value, binding.name)
                elif update is CLEAR:
                    working[key] = _MISSING
                    continue
                elif value is _MISSING:
                    value = touched[key].make_default()
                elif viewed and key in viewed and type(value) is Vector:
                    value = ItemCopies(value)  # a later op of this commit: shares items too
                    views.append((value, touched[key].name, contribution.origin))
                try:
                    working[key] = key.apply(value, update)
                except Exception as error:
                    name = touched[key].name
                    raise CommitRejected(name, error, plugin=contribution.origin) from error
        if not working:
            return current
        changes = {touched[key].name: value for key, value in working.items()}
        if views or checked:
            self._check(changes, views, checked, contributions)
        snapshot = Snapshot(revision + 1, _with_changes(stored, changes), self._registry)
        if self._touched is not None:
            self._touched.update(changes)
        journal = self._journal
        if journal is not None:
            pending = PendingCommit(snapshot.revision, tuple(sources), tuple(journaled))
            pending.phase, pending.step = self.phase, self.step
            if writer is not None and writer.every_op:
                pending.every_op = True
            if whole is not None or failed:
                pending.whole = None if whole is None else tuple(whole)
                pending.failed = frozenset(failed)
            journal.append(pending)
        self._snapshot = snapshot
        if self._listeners:
            self._notify(snapshot)
        return snapshot

    @staticmethod
    def _check(
        values: dict[str, Any],
        views: list[tuple[ItemCopies, str, str | None]],
        checked: list[KeyBinding],
        contributions: Sequence[Contribution],
    ) -> None:
        """After the ops ran: no item changed in place, every value unwrapped from the view
        it was handed in, and each touched key's `validate` passes. (Keys that neither
        copy items nor validate cost nothing here.)"""
        for view, name, origin in views:
            if view.changed_in_place():
                raise CommitRejected(name, _IN_PLACE, plugin=origin)
        for binding in checked:
            name = binding.name
            value = values[name]
            if binding.copy_items:
                while type(value) is ItemCopies:  # an apply that returned the view it was given
                    value = value.vector
                values[name] = value
                # (Any other kind of sequence an apply returned holds only copies and is
                # deep-copied like any mutable value from then on: only a Vector is viewed.)
            if binding.has_validate and value is not _MISSING:
                try:
                    viewed = binding.copy_items and type(value) is Vector
                    binding.key.validate(ItemCopies(value) if viewed else value)
                except Exception as error:
                    origin = _last_writer(contributions, binding)
                    raise CommitRejected(name, error, plugin=origin, stage="validate") from error

    def _notify(self, snapshot: Snapshot) -> None:
        for listener in self._listeners:
            try:
                listener(snapshot)
            except Exception:
                logger.exception(
                    "commit listener %r failed at revision %d", listener, snapshot.revision
                )


def _last_writer(contributions: Sequence[Contribution], binding: KeyBinding) -> str | None:
    """Who wrote `binding`'s key last in a commit: the plugin a validate failure is blamed on."""
    for contribution in reversed(contributions):
        if any(key is binding.key for key, _ in contribution.command.patch.ops):
            return contribution.origin
    return None


def _with_changes(
    stored: immutables.Map[str, Any], changes: dict[str, Any]
) -> immutables.Map[str, Any]:
    if len(changes) == 1:
        ((name, value),) = changes.items()
        if value is not _MISSING:
            return stored.set(name, value)
        return stored.delete(name) if name in stored else stored
    mutation = stored.mutate()
    for name, value in changes.items():
        if value is not _MISSING:
            mutation[name] = value
        else:
            mutation.pop(name, None)
    return mutation.finish()
