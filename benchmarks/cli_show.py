"""How long does `statekernel show --app` take on a long thread?

Builds a thread of S commits on a SQLite file (S = 10,000 by default, every record kept:
`Retention.keep_all()`), each appending one message to a thread-scoped `Vector[Message]` and
adding 1 to a counter, with the default snapshot policy (a snapshot every 1,000 records).
Then it times the command line as a user runs it, a process of its own each time, reading
with this module's plugins (`--app cli_show:plugins`): `show` at the head, `show --json`,
`show --at` just before a snapshot (the most records to replay), `history --key`, `verify`;
and, for the floor, `statekernel --version` (starting Python and importing statekernel) and
`show` without `--app`. Medians of R runs, in ms, wall clock and CPU (user and system: less
moved by other processes on the machine), after one run to warm up.
Python caches bytecode as it does for any installed package (in a folder of the run's own,
`PYTHONPYCACHEPREFIX`, even where `PYTHONDONTWRITEBYTECODE` is set).

Run: .venv/bin/python benchmarks/cli_show.py [--steps 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from statekernel import (
    Kernel,
    KeyScope,
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

HERE = Path(__file__).parent
APP = "cli_show:plugins"


class History(StateKey[Vector[Message], tuple[Message, ...]]):
    key = "bench.history"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[Message], update: tuple[Message, ...]) -> Vector[Message]:
        return value.extend(update)


class Steps(StateKey[int, int]):
    key = "bench.steps"
    scope = KeyScope.THREAD

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


def plugins() -> list[Plugin]:
    """The application as `--app` takes it."""
    return [Conversation()]


async def build(path: Path, steps: int) -> None:
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(plugins(), thread_store=store, retention=Retention.keep_all())
        run = await kernel.start_run("t")
        for _ in range(steps):
            await run.run_phase(Phase.STEP_START)
            await run.checkpoint()
        await run.finish()


def median_ms(args: list[str], repeats: int, env: dict[str, str]) -> tuple[float, float, str]:
    """The median wall time and CPU time (user and system) of `statekernel ARGS` in a
    process of its own (after one to warm up), and its output."""
    times, cpu, out = [], [], ""
    for attempt in range(repeats + 1):
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "statekernel", *args],
            cwd=HERE,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        if attempt:
            times.append((time.perf_counter() - start) * 1000)
            now = resource.getrusage(resource.RUSAGE_CHILDREN)
            spent = now.ru_utime - used.ru_utime + now.ru_stime - used.ru_stime
            cpu.append(spent * 1000)
        out = done.stdout
    return statistics.median(times), statistics.median(cpu), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    steps, repeats = args.steps, args.repeats
    with tempfile.TemporaryDirectory() as folder:
        db = str(Path(folder) / "long.db")
        started = time.perf_counter()
        asyncio.run(build(Path(db), steps))
        built = time.perf_counter() - started
        before_snapshot = max(steps - steps % 1000 - 1, 1)
        cases = [
            ("statekernel --version (the floor)", ["--version"]),
            ("show, no --app", ["show", db, "--thread", "t"]),
            ("show --app", ["show", db, "--thread", "t", "--app", APP]),
            ("show --app --json", ["show", db, "--thread", "t", "--json", "--app", APP]),
            (
                f"show --app --at {before_snapshot} (before a snapshot)",
                ["show", db, "--thread", "t", "--at", str(before_snapshot), "--app", APP],
            ),
            (
                "history --key bench.steps --limit 100 --app",
                [
                    "history",
                    db,
                    "--thread",
                    "t",
                    "--key",
                    "bench.steps",
                    "--limit",
                    "100",
                    "--app",
                    APP,
                ],
            ),
            ("verify --app", ["verify", db, "--thread", "t", "--app", APP]),
        ]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(folder) / "pycache")
        rows = []
        for name, command in cases:
            ms, cpu, out = median_ms(command, repeats, env)
            if "--json" in command:
                assert json.loads(out)["bench.steps"] == steps
            rows.append((name, ms, cpu))
    print(f"thread of {steps:,} commits, every record kept (built in {built:.1f} s)\n")
    print(f"| command (a process each, median of {repeats}) | wall ms | CPU ms |")
    print("|---|---:|---:|")
    for name, ms, cpu in rows:
        print(f"| {name} | {ms:.0f} | {cpu:.0f} |")


if __name__ == "__main__":
    main()
