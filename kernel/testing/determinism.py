"""`assert_deterministic`: the kernel's promise that hook timing never changes the result,
checked for a user's own plugins.

Every hook of a phase reads the same frozen snapshot and the loop merges their commands in
registration order, so however the hooks' awaits interleave, the phase commits the same
thing. A plugin can still break that: a hook that reads a global another hook writes, a
module-level counter, the wall clock. This runs one phase many times on fresh kernels, each
time holding every hook back by a random number of event-loop turns (async hooks then finish
in another order, and sync ones run at other moments among them), and fails with the first
run that ends elsewhere: which keys differ, and in which order the hooks finished each time.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Callable, Iterable
from typing import Any, cast

from .._engine.context import PhaseContext
from .._engine.plugin import Plugin, PluginRegistrar
from .._engine.snapshot import Snapshot
from .._host.kernel import Kernel
from .._values import options
from .._values.commands import StateCommand
from .._values.phases import Phase, phase_of

__all__ = ["assert_deterministic"]

Plugins = Iterable[Plugin] | Callable[[], Iterable[Plugin]]


async def assert_deterministic(
    plugins: Plugins,
    phase: Phase | str = Phase.STEP_START,
    *,
    setup: StateCommand | None = None,
    runs: int = 50,
    seed: int = 0,
    **fields: Any,
) -> Snapshot:
    """Run `phase` over `plugins` `runs` times with randomized hook timing; fail if any run
    ends in another state than the first. Returns the first run's snapshot.

    Each run is a fresh `Kernel` (no store) and a fresh run on one thread: `setup`, if
    given, is committed first, then the phase runs with `fields`. Each time, every phase
    hook is held back by a random number of event-loop turns, so that async hooks finish in
    other orders and sync ones run at other moments. Pass a function that makes the plugins
    to get fresh plugin objects for every run (plugins that keep state of their own); a
    list is reused. `seed` makes the timings repeatable.

    Raises `AssertionError` at the first run that ends in another state than the first,
    naming the keys that differ and the order the hooks finished in both runs. `runs` below
    2 raises `ValueError`.
    """
    options.whole("runs", runs, at_least=2, fix="One run proves nothing.")
    if type(phase) is not Phase:
        phase = phase_of(phase)
    rng = random.Random(seed)
    first: tuple[Snapshot, list[str]] | None = None
    for index in range(runs):
        finished: list[str] = []
        made = plugins() if callable(plugins) else plugins
        jittered = [_Jittered(plugin, rng, finished) for plugin in made]
        run = await Kernel(jittered).start_run("determinism")
        try:
            if setup is not None:
                await run.submit(setup)
            await run.run_phase(phase, **fields)
            ended = run.snapshot
        finally:
            await run.finish()
        if first is None:
            first = (ended, finished)
            continue
        _compare(phase, first, (ended, finished), index)
    assert first is not None
    return first[0]


def _compare(
    phase: Phase,
    first: tuple[Snapshot, list[str]],
    other: tuple[Snapshot, list[str]],
    index: int,
) -> None:
    expected, got = first[0].to_dict(), other[0].to_dict()
    if expected == got:
        return
    differing = sorted(
        name for name in expected.keys() | got.keys() if expected.get(name) != got.get(name)
    )
    shown = "; ".join(
        f"{name!r}: {got.get(name, '(no value)')!r} in run {index}, "
        f"{expected.get(name, '(no value)')!r} in run 0"
        for name in differing
    )
    raise AssertionError(
        f"phase {phase.name} is not deterministic: {shown}. Its hooks finished in the order "
        f"{', '.join(first[1])} in run 0 and {', '.join(other[1])} in run {index}. A hook's "
        f"command must depend only on the snapshot and the fields it is given; look for "
        f"state shared outside the kernel (a global, a plugin attribute another hook "
        f"writes, the clock)."
    )


class _Jittered(Plugin):
    """`plugin` as registered, with each phase hook held back by random loop turns."""

    def __init__(self, plugin: Plugin, rng: random.Random, finished: list[str]) -> None:
        self.id = plugin.id
        self._plugin = plugin
        self._rng = rng
        self._finished = finished

    def register(self, registrar: PluginRegistrar) -> None:
        self._plugin.register(cast(PluginRegistrar, _JitteredRegistrar(registrar, self)))

    def wrap(self, hook: Callable[[PhaseContext], Any]) -> Callable[[PhaseContext], Any]:
        turns = self._rng
        name = f"{self.id}:{getattr(hook, '__name__', 'hook')}"

        async def jittered(context: PhaseContext) -> Any:
            for _ in range(turns.randrange(6)):
                await asyncio.sleep(0)
            result = hook(context)
            if inspect.isawaitable(result):
                result = await result
            self._finished.append(name)
            return result

        return jittered


class _JitteredRegistrar:
    """A registrar that passes everything through but wraps phase hooks."""

    def __init__(self, registrar: PluginRegistrar, plugin: _Jittered) -> None:
        self._registrar = registrar
        self._plugin = plugin

    def register_phase_hook(self, phase: Phase, hook: Callable[..., Any]) -> None:
        self._registrar.register_phase_hook(phase, self._plugin.wrap(hook))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._registrar, name)
