"""The pure merge step: how one phase's commands become commits.

Hooks of a phase all read one snapshot, so two writes to one EXCLUSIVE key cannot both be
right: the second was computed without seeing the first. `partition` walks the commands in
registration order and keeps each one whose claimed keys (those whose `MergeStrategy`
`claims_key`) do not overlap what is already kept; the rest are deferred, to be re-run alone
on a fresh snapshot. Ops on COMMUTATIVE keys never conflict: they claim nothing here, so
every command that carries them is kept, and the commit (`LiveState.commit`) applies the
kept commands' ops in registration order. The result therefore does not depend on which hook
finished first. The strategy, not this module, says which keys claim: a save's rebase
(`_durable/rebase.py`) reads the same strategy, so that what merges here merges across
processes too.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import msgspec

from .._values.commands import StateCommand


class Contribution(msgspec.Struct, frozen=True):
    """One command and who produced it (a plugin id; None for a direct submission).

    `Contribution(origin, command, source=None)`: `origin` is the id of the plugin that
    produced `command`, None for a direct submission. Part of the pure merge step (`partition`),
    exposed for tools and tests.

    `source` is what the journal records as its origin (`"plugin:<id>"` for a phase hook's,
    `"action:<key>"`, `"tool:<name>"`, `"submit"`, `"external"`); None stands for
    `"plugin:<origin>"`, or `"submit"` when `origin` is None. (A frozen msgspec Struct: one
    is built for every command, and it builds in a tenth of the time of an attrs class.)
    """

    origin: str | None
    command: StateCommand
    source: str | None = None

    def journal_source(self) -> str:
        return self.source if self.source is not None else hook_source(self.origin)


def hook_source(plugin: str | None) -> str:
    """What the journal records as the origin of a command `plugin`'s hook returned
    (`"plugin:<id>"`), or of a direct submission (None)."""
    return "submit" if plugin is None else f"plugin:{plugin}"


class Partition(msgspec.Struct, frozen=True):
    """The commands that can commit together, and those that must re-run afterwards.

    `Partition(kept, deferred)`: what `partition` returns, as two tuples of `Contribution`.
    COMMUTATIVE ops never cause a deferral. (A frozen msgspec Struct: one is built for every
    phase with more than one command, in a quarter of the time of an attrs class.)
    """

    kept: tuple[Contribution, ...]
    deferred: tuple[Contribution, ...]


def partition(contributions: Sequence[Contribution]) -> Partition:
    """Greedily keep, in the given order, each command compatible with those already kept.

    Walks the contributions in the given order. It keeps each one whose claimed keys (an
    EXCLUSIVE key claims, see `MergeStrategy.claims_key`) do not overlap those already kept,
    and defers the rest. COMMUTATIVE ops claim nothing, so they never cause a deferral.
    This is the pure merge step, exposed for tools and tests.

    See [concepts: merge](concepts.md#merge-commutative-and-exclusive).
    """
    if len(contributions) < 2:
        return Partition(tuple(contributions), ())
    # Every command before the first that writes a key that claims is kept: often that is
    # every command, found by this one scan.
    for first, contribution in enumerate(contributions):
        for key, _ in contribution.command.patch.ops:
            if key.merge.claims_key:
                return _greedy(contributions, first)
    return Partition(tuple(contributions), ())


def _greedy(contributions: Sequence[Contribution], first: int) -> Partition:
    """`partition` from `contributions[first]`, the first command that claims a key."""
    kept = list(itertools.islice(contributions, first))  # (any Sequence: a deque too)
    deferred: list[Contribution] = []
    claimed: set[str] = set()
    for contribution in itertools.islice(contributions, first, None):
        mine: list[str] | None = None
        for key, _ in contribution.command.patch.ops:
            if key.merge.claims_key:
                if mine is None:
                    mine = [key.key]
                else:
                    mine.append(key.key)
        if mine is None:
            kept.append(contribution)
        elif claimed.isdisjoint(mine):
            claimed.update(mine)
            kept.append(contribution)
        else:
            deferred.append(contribution)
    return Partition(tuple(kept), tuple(deferred))
