"""Does a commit cost the same however much state is held?

Prints the time per commit of one op (a) with 10, 1,000 and 10,000 registered keys that all
hold a value, (b) on a COMMUTATIVE key whose value is a `Vector` of 10 or 100,000 items and
whose `apply` is `value.extend(update)`, and (c) the same with a bare `Vector` of dicts
(mutable items, which snapshots must keep frozen); then the ratio largest/smallest of each
series (the goal is at most 1.5). Beside it, the same commit on a plain dict copied per commit, the
naive way to get frozen snapshots, shows what structural sharing buys.

Run: .venv/bin/python benchmarks/commit_scaling.py
"""

from __future__ import annotations

import argparse
import asyncio
import time
import types
from collections.abc import Callable
from typing import Any

from statekernel import (
    Kernel,
    MergeStrategy,
    Plugin,
    PluginRegistrar,
    StateCommand,
    StateKey,
    Vector,
)
from statekernel.lowlevel import KeyRegistry, LiveState


def _add(value: int, update: int) -> int:
    return value + update


def _extend(value: Vector[int], update: tuple[int, ...]) -> Vector[int]:
    return value.extend(update)


def counter_key(index: int) -> type[StateKey[int, int]]:
    def body(namespace: dict[str, Any]) -> None:
        namespace.update(
            key=f"bench.k{index}", merge=MergeStrategy.COMMUTATIVE, apply=staticmethod(_add)
        )

    return types.new_class(f"K{index}", (StateKey[int, int],), {}, body)


class Log(StateKey[Vector[int], tuple[int, ...]]):
    key = "bench.log"
    merge = MergeStrategy.COMMUTATIVE
    apply = staticmethod(_extend)


def _extend_records(value: Vector, update: tuple[dict[str, int], ...]) -> Vector:  # type: ignore[type-arg]
    return value.extend(update)


class Records(StateKey[Vector, tuple[dict[str, int], ...]]):  # type: ignore[type-arg]
    """A bare Vector: its items may be mutable, so reads must copy them."""

    key = "bench.records"
    merge = MergeStrategy.COMMUTATIVE
    apply = staticmethod(_extend_records)


def per_call(action: Callable[[], object], calls: int, repeats: int) -> float:
    """Best-of-`repeats` mean seconds per call (best-of filters scheduler noise)."""
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            action()
        timings.append((time.perf_counter() - start) / calls)
    return min(timings)


def kernel_keys_series(sizes: list[int], calls: int, repeats: int) -> dict[int, float]:
    keys = [counter_key(i) for i in range(max(sizes))]
    results = {}
    for size in sizes:
        registry = KeyRegistry.of(*keys[:size])
        state = LiveState.of(registry, {key: 1 for key in keys[:size]})
        target = keys[size // 2]
        results[size] = per_call(
            lambda state=state, target=target: state.submit(StateCommand().update(target, 1)),
            calls,
            repeats,
        )
    return results


class KeysPlugin(Plugin):
    id = "bench-keys"

    def __init__(self, keys: list[type[StateKey[int, int]]]) -> None:
        self.keys = keys

    def register(self, registrar: PluginRegistrar) -> None:
        for key in self.keys:
            registrar.register_key(key)


def run_submit_series(sizes: list[int], calls: int, repeats: int) -> dict[int, float]:
    """The same commit through `Run.submit`: the path tools and callers use."""
    keys = [counter_key(i) for i in range(max(sizes))]

    async def measure(size: int) -> float:
        kernel = Kernel([KeysPlugin(keys[:size])])
        run = await kernel.start_run(f"bench-{size}")
        seed = StateCommand()
        for key in keys[:size]:
            seed.update(key, 1)
        await run.submit(seed)
        target = keys[size // 2]
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                await run.submit(StateCommand().update(target, 1))
            best = min(best, (time.perf_counter() - start) / calls)
        return best

    return {size: asyncio.run(measure(size)) for size in sizes}


def dict_copy_series(sizes: list[int], calls: int, repeats: int) -> dict[int, float]:
    results = {}
    for size in sizes:
        holder = {"values": {f"bench.k{i}": 1 for i in range(size)}}
        name = f"bench.k{size // 2}"

        def commit(holder: dict[str, dict[str, int]] = holder, name: str = name) -> None:
            values = dict(holder["values"])
            values[name] += 1
            holder["values"] = values

        results[size] = per_call(commit, calls, repeats)
    return results


def vector_series(lengths: list[int], calls: int, repeats: int) -> dict[int, float]:
    registry = KeyRegistry.of(Log)
    results = {}
    for length in lengths:
        state = LiveState.of(registry, {Log: Vector(range(length))})
        results[length] = per_call(
            lambda state=state: state.submit(StateCommand().update(Log, (1,))), calls, repeats
        )
    return results


def records_series(lengths: list[int], calls: int, repeats: int) -> dict[int, float]:
    registry = KeyRegistry.of(Records)
    results = {}
    for length in lengths:
        items = Vector({"n": i} for i in range(length))
        state = LiveState.of(registry, {Records: items})
        results[length] = per_call(
            lambda state=state: state.submit(StateCommand().update(Records, ({"n": 1},))),
            calls,
            repeats,
        )
    return results


def report(title: str, unit: str, series: dict[int, float]) -> float:
    print(title)
    for size, seconds in series.items():
        print(f"  {size:>7,} {unit:<6} {seconds * 1e6:8.2f} us/commit")
    ratio = series[max(series)] / series[min(series)]
    print(f"  ratio largest/smallest: {ratio:.2f}")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="commits per timing")
    parser.add_argument("--repeats", type=int, default=7, help="timings per size (best kept)")
    args = parser.parse_args()
    sizes = [10, 1_000, 10_000]
    keys_ratio = report(
        "LiveState.submit, one op, N keys held:",
        "keys",
        kernel_keys_series(sizes, args.calls, args.repeats),
    )
    submit_ratio = report(
        "Run.submit, one op, N keys held:",
        "keys",
        run_submit_series(sizes, args.calls, args.repeats),
    )
    vector_ratio = report(
        "LiveState.submit, one extend op on a Vector of N items:",
        "items",
        vector_series([10, 100_000], args.calls, args.repeats),
    )
    records_ratio = report(
        "LiveState.submit, one extend op on a bare Vector of N dicts (mutable items):",
        "items",
        records_series([10, 100_000], args.calls, args.repeats),
    )
    report(
        "baseline: plain dict copied per commit, N keys held:",
        "keys",
        dict_copy_series(sizes, max(args.calls // 10, 100), args.repeats),
    )
    print(
        f"summary: keys ratio {keys_ratio:.2f}, Run.submit ratio {submit_ratio:.2f}, "
        f"vector ratio {vector_ratio:.2f}, mutable-items vector ratio {records_ratio:.2f} "
        f"(goal <= 1.5; best of {args.repeats} timings)"
    )


if __name__ == "__main__":
    main()
