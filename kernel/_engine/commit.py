"""The live state: the one place where committed state changes.

A commit applies every op to a working copy of only the keys it touches, validates every
touched value, and only then publishes a new snapshot. If any `apply` or `validate` raises,
the working copy is thrown away: state and revision stay exactly as they were, and the error
is a `CommitRejected` naming the key, the plugin and the cause. Nothing between "apply
started" and "snapshot published" is ever visible.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import immutables
import msgspec

from .._errors import CommitRejected, RevisionConflict, StateError, UnknownStateKey
from .._values.commands import CLEAR, StateCommand
from .._values.declared_types import copy_of
from .._values.keys import StateKey
from .._values.phases import Phase
from .._values.vector import Vector
from .item_copies import ItemCopies
from .merge import Contribution
from .records import OpWriter, PendingCommit
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


class LiveState:
    """Current state of one run: an O(1) `snapshot`, and an atomic `commit`.

    The one place where committed state changes: `values` are the committed values by key
    string, `revision` the revision they are at. This is low-level: a `Run` owns one, so
    you rarely need your own (`LiveState.of` seeds one by key class).

    See [concepts: commits are atomic](concepts.md#commits-are-atomic).
    """

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
        self._journal: list[PendingCommit] = []
        self._writer: OpWriter | None = None  # journaling while set (`keep_journal`)
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
        """Live state seeded with values given by key class, each checked by its `validate`.

        A value its key's `validate` refuses raises `CommitRejected`."""
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
        """The current snapshot."""
        return self._snapshot

    @property
    def revision(self) -> int:
        """The current snapshot's revision."""
        return self._snapshot.revision

    @property
    def registry(self) -> KeyRegistry:
        """The key registry this state was made with."""
        return self._registry

    def stored_values(self) -> Mapping[str, Any]:
        """The committed values by key string, as held: not copied, so never mutate them.

        For persistence, which encodes them; readers use `snapshot.get`, which copies a
        mutable value."""
        return self._snapshot._stored_values()

    def rebase(self, values: Mapping[str, Any], revision: int) -> None:
        """Continue from `revision`, where the persistent thread keys hold `values`: what a
        save that rebased after another kernel's found (its commits and this run's). Run
        keys and `persistent=False` keys stay as they are; nothing is journaled."""
        stored = self._snapshot._stored_values().mutate()
        for name in self._registry.stored_names:
            if name in values:
                stored[name] = values[name]
            elif name in stored:
                del stored[name]
        self._snapshot = Snapshot(revision, stored.finish(), self._registry)

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
        small encoded ops, so a long stretch between saves keeps nothing of the commands.
        Called again, the new writer writes the commits from then on (a fork already
        staged keeps the one it was staged with)."""
        self._writer = writer

    def pending_commits(self) -> tuple[PendingCommit, ...]:
        """The commits noted and not yet saved, oldest first."""
        return tuple(self._journal)

    def noted_commit(self, revision: int) -> PendingCommit | None:
        """The noted commit that made `revision`, while it is still noted (commit listeners
        find theirs: a commit is noted before they are called)."""
        for pending in reversed(self._journal):
            if pending.revision == revision:
                return pending
            if pending.revision < revision:
                break
        return None

    def forget_commits(self, count: int) -> None:
        """Forget the oldest `count` noted commits: a save has made them durable."""
        del self._journal[:count]

    def add_listener(self, listener: CommitListener) -> None:
        """Call `listener(snapshot)` after every commit that moved the revision.

        A listener that raises is logged, and the others are still called."""
        self._listeners.append(listener)

    def commit(self, contributions: Sequence[Contribution]) -> Snapshot:
        """Apply the commands' patches atomically, in order; return the resulting snapshot.

        A commit with no state op (only effects or actions) leaves the revision alone.
        It journals the ops (if journaling), runs them on a working copy, checks what they
        touched, then publishes the changes as the next snapshot and notes the commit.

        If an `apply` or `validate` raises, this raises `CommitRejected` and nothing changes.
        A stale `base_revision` raises `RevisionConflict`. `commit` applies patches only: the
        engine, not live state, dispatches the effects and actions the commands carry.
        """
        current = self._snapshot
        revision = current.revision + 1  # the commit's, if it has any op
        pending = None
        if self._writer is not None:
            pending = self._writer.write(contributions, revision, self.phase, self.step)
        working = _WorkingCopy(self._registry, current._stored_values())
        working.apply(contributions, current.revision)
        if not working.values:
            return current
        changes = working.changes(contributions)
        stored = _with_changes(working.stored, changes)
        if pending is not None and pending.failed:  # before anything is published
            assert self._writer is not None
            pending = self._writer.complete(pending, stored)
        snapshot = Snapshot(revision, stored, self._registry)
        if self._touched is not None:
            self._touched.update(changes)
        if pending is not None:
            self._journal.append(pending)
        self._snapshot = snapshot
        if self._listeners:
            self._notify(snapshot)
        return snapshot

    def submit(self, command: StateCommand, *, origin: str | None = None) -> Snapshot:
        """Commit a single command's patch (`commit([Contribution(origin, command)])`).

        Live state has no handlers to dispatch effects or run actions, so a command carrying
        any raises `StateError` before anything commits, rather than committed without them
        (use `await run.submit(command)`).
        """
        if command.effects or command.scheduled_actions:
            raise StateError(
                f"LiveState.submit commits state ops only, but this command also carries "
                f"{len(command.effects)} effect(s) and {len(command.scheduled_actions)} "
                f"scheduled action(s), which need a run to dispatch; nothing was committed. "
                f"Use `await run.submit(command)` on a Run of a Kernel that registers their "
                f"handlers."
            )
        return self.commit((Contribution(origin, command),))

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
        fork._writer = self._writer
        fork.phase, fork.step = self.phase, self.step
        return fork

    def publish(self, fork: LiveState) -> int:
        """Make a staged fork's commits live, in order; returns how many there were.

        All of the fork's commits become live at once. If this state moved since `stage()`
        made the fork, this raises `RevisionConflict` and nothing is published."""
        if fork._staged_from is not self._snapshot:
            raise RevisionConflict(
                fork._staged_from.revision if fork._staged_from else -1,
                self.revision,
                what="staged round",
            )
        self._journal.extend(fork._journal)  # noted before the listeners are told
        for snapshot in fork._history:
            self._snapshot = snapshot
            self._notify(snapshot)
        if fork._touched:  # a fork tracks touched keys only when this state does
            assert self._touched is not None
            self._touched.update(fork._touched)
        return len(fork._history)

    def _notify(self, snapshot: Snapshot) -> None:
        for listener in self._listeners:
            try:
                listener(snapshot)
            except Exception:
                logger.exception(
                    "commit listener %r failed at revision %d", listener, snapshot.revision
                )


class _WorkingCopy(msgspec.Struct, gc=False):
    """One commit's working copy: the keys its ops touch, each with its binding and working
    value, and what to check once the ops ran. Nothing of it is visible until the commit
    publishes its changes; a failure throws it away.

    Keyed by key class while the ops run (one class per key string), so that an op on a key
    already touched in this commit needs no registry lookup. (A msgspec Struct: one is built
    for every commit, in a third of the time of a class with an `__init__`.)
    """

    registry: KeyRegistry
    stored: immutables.Map[str, Any]
    values: dict[Any, Any] = msgspec.field(default_factory=dict)  # _MISSING once cleared
    bindings: dict[Any, KeyBinding] = msgspec.field(default_factory=dict)
    viewed: set[Any] = msgspec.field(default_factory=set)
    """Touched keys whose Vector items are copied as they are read."""
    views: list[tuple[ItemCopies, str, str | None]] = msgspec.field(default_factory=list)
    """The views handed to `apply`, to check for items changed in place."""
    checked: list[KeyBinding] = msgspec.field(default_factory=list)
    """Touched keys that copy items or validate."""

    def apply(self, contributions: Sequence[Contribution], revision: int) -> None:
        """Run the contributions' ops in order, each on the value the last one left."""
        values = self.values
        viewed = self.viewed
        for contribution in contributions:
            patch = contribution.command.patch
            if patch.base_revision is not None and patch.base_revision != revision:
                raise RevisionConflict(patch.base_revision, revision)
            origin = contribution.origin
            for key, update in patch.ops:
                if update is CLEAR:
                    self._clear(key, origin)
                    continue
                value = values.get(key, _MISSING)
                if value is _MISSING or (viewed and key in viewed and type(value) is Vector):
                    value = self._starting_value(key, value, origin)
                try:
                    values[key] = key.apply(value, update)
                except Exception as error:
                    name = self.bindings[key].name
                    raise CommitRejected(name, error, plugin=origin) from error

    def _touch(self, key: Any, origin: str | None) -> KeyBinding:
        """Resolve a key's binding on its first op in this commit (an unknown key is
        refused), and note what it needs checked."""
        binding = self.registry.by_class.get(key)
        if binding is None:
            raise UnknownStateKey(
                getattr(key, "key", repr(key)), origin, tuple(self.registry.by_name)
            )
        self.bindings[key] = binding
        if binding.checks:
            self.checked.append(binding)
            if binding.copy_items:
                self.viewed.add(key)
        return binding

    def _clear(self, key: Any, origin: str | None) -> None:
        """A CLEAR: the key is removed when the commit publishes, unless a later op sets it
        again (from its default)."""
        if key not in self.bindings:
            self._touch(key, origin)
        self.values[key] = _MISSING

    def _starting_value(self, key: Any, value: Any, origin: str | None) -> Any:
        """The value an op starts from when it is not simply what the last op left: on the
        key's first op, its committed value (copied, or a view that copies items as they
        are read) or its default; after a CLEAR, its default; after an earlier op on a
        vector whose items are copied as read, a new view of it, as that op's was."""
        binding = self.bindings.get(key)
        if binding is not None:  # an earlier op of this commit touched the key
            if value is _MISSING:
                return binding.make_default()
            return self._view(value, binding.name, origin)
        binding = self._touch(key, origin)
        value = self.stored.get(binding.name, _MISSING)
        if value is _MISSING:
            return binding.make_default()
        if binding.copy_items and type(value) is Vector:
            return self._view(value, binding.name, origin)
        return copy_of(value, binding.name) if binding.copy_values else value

    def _view(self, vector: Vector[Any], name: str, origin: str | None) -> ItemCopies:
        view = ItemCopies(vector)
        self.views.append((view, name, origin))
        return view

    def changes(self, contributions: Sequence[Contribution]) -> dict[str, Any]:
        """The new values by key string (`_MISSING` for a key cleared), once checked."""
        bindings = self.bindings
        changes: dict[str, Any] = {}
        for key, value in self.values.items():  # (a loop: cheaper than a comprehension)
            changes[bindings[key].name] = value
        if self.views or self.checked:
            self._check(changes, contributions)
        return changes

    def _check(self, values: dict[str, Any], contributions: Sequence[Contribution]) -> None:
        """After the ops ran: no item changed in place, every value unwrapped from the view
        it was handed in, and each touched key's `validate` passes. (Keys that neither
        copy items nor validate cost nothing here.)"""
        for view, name, origin in self.views:
            if view.changed_in_place():
                raise CommitRejected(name, _IN_PLACE, plugin=origin)
        for binding in self.checked:
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
