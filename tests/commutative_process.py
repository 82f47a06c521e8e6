"""A child process for the contention tests: one Kernel whose runs only add to commutative
thread keys, all on one thread that other such processes write at the same time.

    python commutative_process.py sqlite|postgres WHERE THREAD WORKER RUNS START_AT

WHERE is a SQLite file or a PostgreSQL DSN. From the wall-clock time START_AT on (so that
every worker starts together), it runs RUNS runs of THREAD one after the other; each run's
STEP_START hook adds WORKER to `Tally` and appends "WORKER:n" to `Done`, then the run
finishes (and saves). Prints one JSON line: how many saves ended in `RevisionConflict`, and
how many rebased onto another process's save.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from statekernel import (
    Kernel,
    KeyScope,
    MergeStrategy,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    RevisionConflict,
    StateCommand,
    StateKey,
    ThreadStore,
    Vector,
)


class Tally(StateKey[int, int]):
    key = "contention.tally"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Done(StateKey[Vector[str], tuple[str, ...]]):
    key = "contention.done"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: Vector[str], update: tuple[str, ...]) -> Vector[str]:
        return value.extend(update)


class Adder(Plugin):
    """Adds `amount` to `Tally` and notes the run in `Done` at every STEP_START."""

    id = "contention"

    def __init__(self, amount: int = 1) -> None:
        self.amount = amount
        self.runs = 0

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Tally)
        registrar.register_key(Done)
        registrar.register_phase_hook(Phase.STEP_START, self.step)

    def step(self, ctx: PhaseContext) -> StateCommand:
        self.runs += 1
        done = (f"{self.amount}:{self.runs}",)
        return StateCommand().update(Tally, self.amount).update(Done, done)


def open_store(kind: str, where: str) -> ThreadStore:
    from statekernel.stores import PostgresThreadStore, SqliteThreadStore

    return SqliteThreadStore(where) if kind == "sqlite" else PostgresThreadStore(where)


async def main(kind: str, where: str, thread: str, worker: int, runs: int, start_at: float) -> None:
    conflicts = rebased = 0
    async with open_store(kind, where) as store:
        await store.threads(limit=1)  # connected (and the tables made) before the start line
        kernel = Kernel([Adder(worker)], thread_store=store)
        while time.time() < start_at:
            await asyncio.sleep(0.005)
        for _ in range(runs):
            run = await kernel.start_run(thread)
            await run.run_phase(Phase.STEP_START)
            try:
                await run.finish()
            except RevisionConflict:
                conflicts += 1
                await run.abandon()
            rebased += len(run.rebases)
    print(json.dumps({"conflicts": conflicts, "rebased": rebased}))


def contend(kind: str, where: str, thread: str, workers: int, runs: int) -> list[dict[str, Any]]:
    """Run `workers` processes of this script at once (worker 1, 2, ...), `runs` runs each;
    what each printed, once all exited 0."""
    start_at = time.time() + 2.0 + 0.25 * workers  # after every process has imported
    argv = [sys.executable, str(Path(__file__)), kind, where, thread]
    children = [
        subprocess.Popen(
            [*argv, str(worker), str(runs), str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for worker in range(1, workers + 1)
    ]
    try:
        outputs = [child.communicate(timeout=180) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    assert [child.returncode for child in children] == [0] * workers, [e for _, e in outputs]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


if __name__ == "__main__":
    kind, where, thread, worker, runs, start_at = sys.argv[1:7]
    asyncio.run(main(kind, where, thread, int(worker), int(runs), float(start_at)))
