"""What do OpenTelemetry spans cost a phase?

One plugin's hook adds 1 to a COMMUTATIVE key at STEP_START; a run runs 20,000 such phases
in a row. Three ways, in one process, taking turns over 5 rounds (median printed):

- untraced: the kernel as it is without the extra `statekernel[otel]` (its `tracing` is
  the no-op `NO_TRACING`: a phase makes no call for tracing, nothing of OpenTelemetry is
  imported or called);
- API only: `opentelemetry-api` installed, no tracer provider configured (no-op spans);
- SDK: the SDK's `TracerProvider` set (spans made and ended, exported nowhere).

The SDK's provider can only be set once per process, so the SDK rounds come last.

Run: .venv/bin/python benchmarks/tracing_overhead.py   (needs opentelemetry-sdk, a test
dependency: `make test` installs it into .venv)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from statekernel import Kernel, MergeStrategy, Phase, PhaseContext, Plugin, StateCommand, StateKey

PHASES = 20_000
ROUNDS = 5


class Count(StateKey[int, int]):
    key = "bench.count"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Adder(Plugin):
    id = "adder"

    def register(self, r) -> None:  # type: ignore[no-untyped-def]
        r.register_key(Count)
        r.register_phase_hook(Phase.STEP_START, self.add)

    @staticmethod
    def add(ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Count, 1)


def untraced_kernel() -> Kernel:
    """A kernel made as without the extra: it finds no `opentelemetry.trace` to import."""
    saved = sys.modules.get("opentelemetry.trace")
    sys.modules["opentelemetry.trace"] = None  # type: ignore[assignment]
    try:
        return Kernel([Adder()])
    finally:
        if saved is None:
            del sys.modules["opentelemetry.trace"]
        else:
            sys.modules["opentelemetry.trace"] = saved


async def per_phase(traced: bool) -> float:
    kernel = Kernel([Adder()]) if traced else untraced_kernel()
    assert kernel.tracing.enabled is traced
    run = await kernel.start_run("bench")
    start = time.perf_counter()
    for _ in range(PHASES):
        await run.run_phase(Phase.STEP_START)
    elapsed = time.perf_counter() - start
    await run.finish()
    assert run.snapshot.get(Count) == PHASES
    return elapsed / PHASES * 1e6


async def main() -> None:
    rows: dict[str, list[float]] = {"untraced": [], "API only": [], "SDK": []}
    for _ in range(ROUNDS):
        rows["untraced"].append(await per_phase(False))
        rows["API only"].append(await per_phase(True))
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    for _ in range(ROUNDS):
        rows["SDK"].append(await per_phase(True))
    print(f"µs per phase, {PHASES:,} phases, median of {ROUNDS} rounds\n")
    print("| tracing | µs per phase |\n|---|---:|")
    for name, values in rows.items():
        print(f"| {name} | {statistics.median(values):.1f} |")


if __name__ == "__main__":
    asyncio.run(main())
