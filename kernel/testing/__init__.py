"""Tools for plugin authors' own tests: no kernel, no run, just hooks and keys.

- `snapshot_of(plugin_or_keys, {Key: value})`: a snapshot holding the given values.
- `await run_hooks(plugin, phase, values={...})`: call one plugin's hooks for a phase against
  such a snapshot and get back the commands they returned, without committing anything.
- `assert_commutative(Key, base, updates)`: apply a COMMUTATIVE key's updates in many orders
  and fail with the first two orders that disagree. Declaring a key COMMUTATIVE is a promise
  that order does not matter; this checks the promise.
- `await assert_deterministic(plugins, phase)`: run a phase on fresh kernels many times with
  every hook held back by a random number of event-loop turns, and fail with the first run
  that ends in another state. The kernel promises that hook timing never changes the
  result; this checks that a plugin does not break the promise behind its back.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import itertools
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from .._engine.commit import LiveState
from .._engine.context import AgentSpec, PhaseContext, RunIdentity, check_phase_fields
from .._engine.plugin import Components, Plugin
from .._engine.registry import KeyBinding, KeyRegistry
from .._engine.snapshot import Snapshot
from .._values.commands import StateCommand
from .._values.keys import StateKey, key_info
from .._values.phases import Phase
from .determinism import assert_deterministic as assert_deterministic

__all__ = [
    "TEST_RUN",
    "assert_commutative",
    "assert_deterministic",
    "run_hooks",
    "run_hooks_sync",
    "snapshot_of",
]

V = TypeVar("V")
U = TypeVar("U")

TEST_RUN = RunIdentity(run_id="test:run-1", thread_id="test", agent_id="test-agent")
"""The run `run_hooks` gives its hooks' `PhaseContext`: run `"test:run-1"` of thread
`"test"`, agent `"test-agent"`."""


def snapshot_of(
    source: Plugin | Iterable[type[StateKey[Any, Any]]],
    values: Mapping[type[StateKey[Any, Any]], Any] | None = None,
    *,
    revision: int = 0,
) -> Snapshot:
    """A snapshot of the keys a plugin registers (or the given keys) holding `values`.

    `source` is a `Plugin` (its registered keys) or the key classes themselves; `values` is
    `{K: value}`, and `revision` the snapshot's revision. Each value is checked by its key's
    `validate`; a refusal raises `CommitRejected`.
    """
    return LiveState.of(_registry(source), values or {}, revision=revision).snapshot


async def run_hooks(
    plugin: Plugin,
    phase: Phase,
    *,
    values: Mapping[type[StateKey[Any, Any]], Any] | None = None,
    snapshot: Snapshot | None = None,
    **fields: Any,
) -> list[StateCommand]:
    """The commands `plugin`'s hooks for `phase` return against one snapshot, in order.

    Calls the hooks in registration order against the given `snapshot`, or
    `snapshot_of(plugin, values)`. Hooks that return None contribute nothing to the list.
    Nothing is committed. `fields` become `PhaseContext` fields (for example
    `tool_call=...` or `profile=...`). The run is `statekernel.testing.TEST_RUN`
    (`run_id="test:run-1"`, `thread_id="test"`, `agent_id="test-agent"`).
    """
    components = Components.build([plugin])
    if snapshot is None:
        snapshot = snapshot_of(plugin, values)
    check_phase_fields(fields)
    context = PhaseContext(phase, TEST_RUN, AgentSpec("test-agent"), snapshot, **fields)
    commands: list[StateCommand] = []
    for hook in components.hooks[phase]:
        result = hook.function(context)
        if inspect.isawaitable(result):
            result = await result
        if result is not None:
            commands.append(result)
    return commands


def run_hooks_sync(
    plugin: Plugin,
    phase: Phase,
    *,
    values: Mapping[type[StateKey[Any, Any]], Any] | None = None,
    snapshot: Snapshot | None = None,
    **fields: Any,
) -> list[StateCommand]:
    """`run_hooks` for code with no event loop running: same arguments, same commands."""
    return asyncio.run(run_hooks(plugin, phase, values=values, snapshot=snapshot, **fields))


def assert_commutative(
    key: type[StateKey[V, U]],
    base: V,
    updates: Sequence[U],
    *,
    max_orders: int = 720,
    seed: int = 0,
) -> None:
    """Fail unless applying `updates` to `base` in every tried order gives one result.

    All orders are tried when there are at most `max_orders` of them, otherwise a seeded
    (`seed`) random sample of `max_orders` orders. Each application starts from a fresh copy
    of `base`, so an `apply` that mutates its input is judged fairly. Raises
    `AssertionError` showing two orders that disagree.
    """
    key_info(key)
    orders = _orders(len(updates), max_orders, seed)
    first_order: tuple[int, ...] | None = None
    first_result: Any = None
    for order in orders:
        value: Any = copy.deepcopy(base)
        for index in order:
            value = key.apply(value, copy.deepcopy(updates[index]))
        if first_order is None:
            first_order, first_result = order, value
        elif value != first_result:
            raise AssertionError(
                f"{key.__qualname__} ({key.key!r}) is declared COMMUTATIVE but its updates do not "
                f"commute:\n  order {[updates[i] for i in first_order]!r} gives {first_result!r}\n"
                f"  order {[updates[i] for i in order]!r} gives {value!r}\n"
                f"Make apply order-independent, or declare the key EXCLUSIVE."
            )


def _orders(count: int, max_orders: int, seed: int) -> list[tuple[int, ...]]:
    indexes = tuple(range(count))
    total = 1
    for n in range(2, count + 1):
        total *= n
        if total > max_orders:
            break
    if total <= max_orders:
        return list(itertools.permutations(indexes))
    rng = random.Random(seed)
    sample = [indexes, indexes[::-1]]
    while len(sample) < max_orders:
        order = list(indexes)
        rng.shuffle(order)
        sample.append(tuple(order))
    return sample


def _registry(source: Plugin | Iterable[type[StateKey[Any, Any]]]) -> KeyRegistry:
    if isinstance(source, Plugin):
        return Components.build([source]).keys
    return KeyRegistry(KeyBinding.of(key) for key in source)


def __getattr__(name: str) -> Any:
    """`statekernel.testing.store_contract`, the store conformance suite, imported on first
    use: it needs pytest, which the rest of this module does not."""
    if name == "store_contract":
        import importlib

        return importlib.import_module(f"{__name__}.store_contract")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
