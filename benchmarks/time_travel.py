"""How long does time travel take on a long thread?

Builds a thread of S steps on a SQLite file, one checkpoint per step, each step appending one
message to a thread-scoped `Vector[Message]` and adding 1 to a counter (S = 10,000 by
default), with the default snapshot policy (a snapshot every 1,000 records), keeping the whole
journal (`Retention.keep_all()`: the default keeps the newest 1,000 revisions). Then it times,
on a fresh kernel: `state_at` at revisions spread over the thread (the worst case is just
before a snapshot: the most records to replay), `history` of 100 records, a load (a new run
on the thread), and `verify` over the whole thread. Medians of the repeated calls, in ms.

Run: .venv/bin/python benchmarks/time_travel.py [--steps 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from statekernel import (
    Kernel,
    KeyScope,
    MergeStrategy,
    Message,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    Retention,
    StateCommand,
    StateKey,
    Vector,
)
from statekernel.stores import SqliteThreadStore


class History(StateKey[Vector[Message], tuple[Message, ...]]):
    key = "bench.history"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: Vector[Message], update: tuple[Message, ...]) -> Vector[Message]:
        return value.extend(update)


class Steps(StateKey[int, int]):
    key = "bench.steps"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Conversation(Plugin):
    id = "conversation"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(History)
        registrar.register_key(Steps)
        registrar.register_phase_hook(Phase.STEP_START, self.step)

    def step(self, ctx: PhaseContext) -> StateCommand:
        count = ctx.snapshot.get(Steps)
        message = Message(role="user", content=f"message {count}: lorem ipsum dolor sit amet")
        return StateCommand().update(History, (message,)).update(Steps, 1)


async def build(path: Path, steps: int) -> None:
    async with SqliteThreadStore(path) as store:
        kernel = Kernel([Conversation()], thread_store=store, retention=Retention.keep_all())
        run = await kernel.start_run("t")
        for _ in range(steps):
            await run.run_phase(Phase.STEP_START)
            await run.checkpoint()
        await run.finish()


async def median_ms(call: Callable[[], Awaitable[Any]], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def measure(path: Path, steps: int) -> list[tuple[str, float]]:
    async with SqliteThreadStore(path) as store:
        kernel = Kernel([Conversation()], thread_store=store, retention=Retention.keep_all())
        chance = random.Random(7)
        spread = [chance.randint(1, steps) for _ in range(50)]
        worst = [r for r in range(999, steps, 1000)] or [steps]

        async def at(revisions: list[int]) -> None:
            for revision in revisions:
                snapshot = await kernel.state_at("t", revision)
                assert snapshot.get(Steps) == revision

        async def load() -> None:
            run = await kernel.start_run("t")
            assert run.snapshot.get(Steps) == steps
            await run.abandon()

        async def verify() -> None:
            assert (await kernel.verify("t")).ok

        rows = [
            (
                "state_at, 50 random revisions (per call)",
                await median_ms(lambda: at(spread), 3) / 50,
            ),
            (
                "state_at, just before a snapshot (per call)",
                await median_ms(lambda: at(worst), 3) / len(worst),
            ),
            ("history, 100 records", await median_ms(lambda: kernel.history("t", limit=100), 20)),
            ("load (start a run)", await median_ms(load, 10)),
            ("verify the whole thread", await median_ms(verify, 3)),
        ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "travel.db"
        started = time.perf_counter()
        asyncio.run(build(path, args.steps))
        built = time.perf_counter() - started
        rows = asyncio.run(measure(path, args.steps))
    print(f"thread of {args.steps:,} steps, one checkpoint each (built in {built:.1f} s)\n")
    print("| operation | ms |")
    print("|---|---:|")
    for name, ms in rows:
        print(f"| {name} | {ms:.2f} |")


if __name__ == "__main__":
    main()
