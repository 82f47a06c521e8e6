"""What does the phase loop cost per hook?

W hooks (1, 4, 16) each return a command with one COMMUTATIVE counter increment and one
append to a COMMUTATIVE log key; the phase runs many times. Printed: microseconds per
hook-command and per phase, for sync and for async hooks, beside a plain-Python baseline that
applies the same two reducers to a dict in a loop (no snapshots, no merge, no atomicity).

Goal (issue 3): at most 3 us per hook-command with W = 16 sync hooks.

Run: .venv/bin/python benchmarks/phase_overhead.py
"""

from __future__ import annotations

import argparse
import asyncio
import time
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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", type=int, default=3_000, help="phases per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings (best kept)")
    args = parser.parse_args()
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
