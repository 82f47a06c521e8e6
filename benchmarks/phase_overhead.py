"""What does the phase loop cost per hook?

W hooks (1, 4, 16) each return a command with one COMMUTATIVE counter increment and one
append to a COMMUTATIVE log key; the phase runs many times. Printed: microseconds per
hook-command and per phase, for sync and for async hooks, beside a plain-Python baseline that
applies the same two reducers to a dict in a loop (no snapshots, no merge, no atomicity).

Goal (issue 3): at most 3 us per hook-command with W = 16 sync hooks.

`--calls` prints instead where a phase's time goes: the function calls of one sync phase at
W = 1 and W = 16, counted by cProfile and grouped by module (the hooks and reducers of this
file apart), with each group's share of the profiled time. In CPython each call costs tens
of nanoseconds whatever it does, so the count says how far a design is from its floor.

Run: .venv/bin/python benchmarks/phase_overhead.py [--calls]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from statekernel import (
    Kernel,
    MergeStrategy,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    StateCommand,
    StateKey,
    Vector,
)


class Count(StateKey[int, int]):
    key = "bench.count"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Log(StateKey[Vector[int], int]):
    key = "bench.log"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: Vector[int], update: int) -> Vector[int]:
        return value.append(update)


class Keys(Plugin):
    id = "keys"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Count)
        r.register_key(Log)


class Writer(Plugin):
    def __init__(self, index: int, is_async: bool) -> None:
        self.id = f"writer-{index}"
        self.index = index
        self.is_async = is_async

    def register(self, r: PluginRegistrar) -> None:
        r.register_phase_hook(Phase.STEP_START, self.write_async if self.is_async else self.write)

    def write(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Count, 1).update(Log, self.index)

    async def write_async(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Count, 1).update(Log, self.index)


async def kernel_phase(width: int, is_async: bool, phases: int, repeats: int) -> float:
    """Best-of-`repeats` seconds per phase."""
    plugins: list[Plugin] = [Keys(), *(Writer(i, is_async) for i in range(width))]
    kernel = Kernel(plugins)
    best = float("inf")
    for repeat in range(repeats):
        run = await kernel.start_run(f"bench-{width}-{is_async}-{repeat}")
        start = time.perf_counter()
        for _ in range(phases):
            await run.run_phase(Phase.STEP_START)
        best = min(best, (time.perf_counter() - start) / phases)
        assert run.snapshot.get(Count) == width * phases
        await run.finish()
    return best


def baseline_phase(width: int, phases: int, repeats: int) -> float:
    """The same reducers on a plain dict: the floor any kernel is measured against."""
    reducers: list[tuple[str, Callable[[Any, Any], Any], int]] = []
    for index in range(width):
        reducers.append(("count", Count.apply, 1))
        reducers.append(("log", Log.apply, index))
    best = float("inf")
    for _ in range(repeats):
        state: dict[str, Any] = {"count": 0, "log": Vector()}
        start = time.perf_counter()
        for _ in range(phases):
            for name, apply, update in reducers:
                state[name] = apply(state[name], update)
        best = min(best, (time.perf_counter() - start) / phases)
    return best


async def calls_per_phase(width: int, phases: int) -> None:
    """Print the calls of one sync phase of `width` hooks, by module, with their time share."""
    kernel = Kernel([Keys(), *(Writer(i, False) for i in range(width))])
    run = await kernel.start_run(f"calls-{width}")
    for _ in range(100):  # first phases fill the kernel's caches
        await run.run_phase(Phase.STEP_START)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(phases):
        await run.run_phase(Phase.STEP_START)
    profile.disable()
    await run.finish()
    counts: dict[str, float] = defaultdict(float)
    times: dict[str, float] = defaultdict(float)
    stats: Any = pstats.Stats(profile).stats
    for (path, _line, _function), (_, calls, own_time, _, _) in stats.items():
        if path == "~":
            group = "built-ins (C)"
        elif path == __file__:
            group = "this benchmark's hooks and reducers"
        elif "statekernel" in path:
            group = "statekernel." + path.rsplit("statekernel/", 1)[-1].removesuffix(".py")
            group = group.replace("/", ".")
        elif "site-packages/" in path:  # a library: by its package
            group = path.split("site-packages/", 1)[1].split("/", 1)[0]
        else:  # the standard library: by module
            group = "Python's " + path.rsplit("/", 1)[-1].removesuffix(".py").strip("<>")
        counts[group] += calls / phases
        times[group] += own_time
    total = sum(times.values())
    print(f"\nW = {width}: {sum(counts.values()):.0f} calls per phase")
    for group in sorted(counts, key=lambda g: -times[g]):
        print(f"  {counts[group]:7.1f} calls  {times[group] / total:6.1%}  {group}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", type=int, default=3_000, help="phases per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings (best kept)")
    parser.add_argument("--calls", action="store_true", help="count the calls of a phase")
    args = parser.parse_args()
    if args.calls:
        for width in (1, 16):
            await calls_per_phase(width, args.phases)
        return
    print(f"{'hooks':>5} {'kind':<8} {'us/phase':>10} {'us/hook-command':>16}")
    for width in (1, 4, 16):
        for kind in ("sync", "async", "baseline"):
            if kind == "baseline":
                seconds = baseline_phase(width, args.phases, args.repeats)
            else:
                seconds = await kernel_phase(width, kind == "async", args.phases, args.repeats)
            per_hook = seconds / width
            print(f"{width:>5} {kind:<8} {seconds * 1e6:>10.2f} {per_hook * 1e6:>16.2f}")


if __name__ == "__main__":
    asyncio.run(main())
