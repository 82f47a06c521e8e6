"""The PostgreSQL stores beside the raw driver, SQLite and LangGraph's PostgreSQL store and
saver, all on one throwaway local server (the machine's PostgreSQL binaries, fsync on) in one
run. Four parts (`--only profile|checkpoint|fleet|contention` runs one):

**profile**: N small values (`--ops`, 2,000), four workloads: sequential set, sequential get,
and the same from 64 tasks at once. Subjects, each in a fresh schema:

- `PostgresProfileStore` (pool of 10),
- raw asyncpg: the same upsert and select, one statement per operation on a pooled
  connection with nothing around them (pool of 10, no reset query on release): the floor
  of one operation at a time (statekernel's store sends concurrent operations together,
  which this floor does not),
- `SqliteProfileStore` on a file in a temporary folder (WAL, synchronous=NORMAL),
- LangGraph's `AsyncPostgresStore` (`from_conn_string`, pool of 10).

**checkpoint**: benchmarks/journal_checkpoint.py's per-step workload (a step appends one
message to a history of N, beside 100 untouched keys, then saves durably) at N = 10 and
10,000, on PostgreSQL: statekernel's `PostgresThreadStore` (a snapshot every 100 records)
beside LangGraph's `AsyncPostgresSaver` with its default channel and with `DeltaChannel`
(`durability="exit"`: one checkpoint per step). Each side's history is read back from a fresh
saver before its time counts.

**fleet**: T threads (`--threads`, 1,000) step at once against the server, every step a
phase (a hook adds 1 to a commutative thread key and appends a message) and a durable
checkpoint, S steps each (`--steps`, 10), from one process and then from 4 processes (T/4
threads each), each process with one Kernel and a `PostgresThreadStore`. Reports aggregate
steps/s and p50/p99 step latency, then reads every thread back: each must be at revision S
with its counter at S (0 lost, 0 repeated). To say what limits it, also the CPU the client
processes and the server's processes spent per step (Linux: /proc) and the transactions
the database committed meanwhile.

**contention**: P processes (`--processes`, 4) each run R runs (`--runs`, 250) of ONE
thread, all at once, each with its own Kernel: every run's STEP_START hook adds to a
commutative thread key, then the run finishes (a save). Every save another process's save
overtook rebases onto it. On a SQLite file (WAL) and on PostgreSQL: runs/s over all
processes, how many saves rebased, and how many ended in `RevisionConflict` (the goal: 0),
then the thread read back (the sum whole, `verify` ok).

Run: .venv-bench/bin/python benchmarks/postgres_stores.py [--only PART] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import operator
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import journal_checkpoint as journal
from journal_checkpoint import (
    WARMUP_STEPS,
    Conversation,
    History,
    LangGraphWorkload,
    extend_all,
    langgraph_graph,
    message_text,
    pair_message,
    seed_command,
)
from postgres_drivers import timed  # ops/s of one operation over N tasks

from statekernel import (
    Kernel,
    KeyScope,
    MergeStrategy,
    Message,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    RevisionConflict,
    StateCommand,
    StateKey,
    Vector,
)
from statekernel.stores import (
    PostgresProfileStore,
    PostgresThreadStore,
    SqliteProfileStore,
    SqliteThreadStore,
)
from statekernel.testing.postgres import PostgresServer, throwaway_postgres

CONCURRENCY = 64
POOL = 10
NAMESPACE = "bench"
VALUE = {"v": 1, "name": "item", "tags": ["a", "b"]}

_schemas = itertools.count(1)


async def fresh_schema(server_dsn: str) -> str:
    name = f"bench_{next(_schemas)}"
    conn = await asyncpg.connect(server_dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}")
    finally:
        await conn.close()
    return f"{server_dsn}?search_path={name}"


# --- profile ---------------------------------------------------------------------------


class Subject:
    async def set(self, key: str) -> None: ...

    async def get(self, key: str) -> Any: ...


class Ours(Subject):
    def __init__(self, store: Any) -> None:
        self.store = store

    async def set(self, key: str) -> None:
        await self.store.set(NAMESPACE, key, VALUE)

    async def get(self, key: str) -> Any:
        return await self.store.get(NAMESPACE, key)


class RawAsyncpg(Subject):
    SET = (
        "INSERT INTO kv VALUES ($1, $2, $3, 1) ON CONFLICT (ns, key) DO UPDATE "
        "SET value = EXCLUDED.value, version = kv.version + 1"
    )
    GET = "SELECT value, version FROM kv WHERE ns = $1 AND key = $2"

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.value = json.dumps(VALUE)

    async def set(self, key: str) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute(self.SET, NAMESPACE, key, self.value)

    async def get(self, key: str) -> Any:
        async with self.pool.acquire() as conn:
            return await conn.fetchrow(self.GET, NAMESPACE, key)


class LangGraph(Subject):
    def __init__(self, store: Any) -> None:
        self.store = store

    async def set(self, key: str) -> None:
        await self.store.aput((NAMESPACE,), key, VALUE)

    async def get(self, key: str) -> Any:
        return await self.store.aget((NAMESPACE,), key)


@asynccontextmanager
async def postgres_subject(server_dsn: str, folder: Path) -> AsyncIterator[Subject]:
    async with PostgresProfileStore(await fresh_schema(server_dsn), pool_size=POOL) as store:
        await store.get(NAMESPACE, "warm-up")
        yield Ours(store)


@asynccontextmanager
async def raw_subject(server_dsn: str, folder: Path) -> AsyncIterator[Subject]:
    async def keep_session(conn: Any) -> None:
        """No reset query on release (as statekernel's pool): the floor is one round trip."""

    pool = await asyncpg.create_pool(
        await fresh_schema(server_dsn), min_size=POOL, max_size=POOL, reset=keep_session
    )
    try:
        await pool.execute(
            'CREATE TABLE kv (ns text COLLATE "C", key text COLLATE "C", value text, '
            "version bigint, PRIMARY KEY (ns, key))"
        )
        yield RawAsyncpg(pool)
    finally:
        await pool.close()


@asynccontextmanager
async def sqlite_subject(server_dsn: str, folder: Path) -> AsyncIterator[Subject]:
    async with SqliteProfileStore(folder / f"profile-{next(_schemas)}.db") as store:
        await store.get(NAMESPACE, "warm-up")
        yield Ours(store)


@asynccontextmanager
async def langgraph_subject(server_dsn: str, folder: Path) -> AsyncIterator[Subject]:
    from langgraph.store.postgres.aio import AsyncPostgresStore

    dsn = await fresh_schema(server_dsn)
    # psycopg takes the schema as a libpq option rather than as a query parameter
    dsn = dsn.replace("?search_path=", "?options=-csearch_path%3D")
    async with AsyncPostgresStore.from_conn_string(
        dsn, pool_config={"min_size": POOL, "max_size": POOL}
    ) as store:
        await store.setup()
        yield LangGraph(store)


PROFILE_SUBJECTS = {
    "statekernel PostgreSQL": postgres_subject,
    "raw asyncpg": raw_subject,
    "statekernel SQLite": sqlite_subject,
    "LangGraph AsyncPostgresStore": langgraph_subject,
}


async def profile_part(server_dsn: str, ops: int, repeats: int) -> dict[str, dict[str, float]]:
    best: dict[str, dict[str, float]] = {name: {} for name in PROFILE_SUBJECTS}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(repeats):
            for name, make in PROFILE_SUBJECTS.items():
                for concurrency in (1, CONCURRENCY):
                    label = "seq" if concurrency == 1 else f"{concurrency} tasks"
                    async with make(server_dsn, Path(folder)) as subject:
                        rates = {
                            f"set, {label}": await timed(
                                ops, concurrency, lambda i: subject.set(f"k{i}")
                            ),
                            f"get, {label}": await timed(
                                ops, concurrency, lambda i: subject.get(f"k{i}")
                            ),
                        }
                    for workload, rate in rates.items():
                        best[name][workload] = max(best[name].get(workload, 0.0), rate)
    return best


def render_profile(best: dict[str, dict[str, float]], ops: int, repeats: int) -> str:
    workloads = list(next(iter(best.values())))
    lines = [
        f"Profile store on PostgreSQL, {ops:,} ops per workload, best of {repeats} (ops/s)",
        "",
        "| subject | " + " | ".join(workloads) + " |",
        "|---|" + "---:|" * len(workloads),
    ]
    for name, rates in best.items():
        lines.append(f"| {name} | " + " | ".join(f"{rates[w]:,.0f}" for w in workloads) + " |")
    ours, theirs = best["statekernel PostgreSQL"], best["LangGraph AsyncPostgresStore"]
    raw = best["raw asyncpg"]
    lines += [
        "",
        "ours / LangGraph: " + ", ".join(f"{w} {ours[w] / theirs[w]:.1f}x" for w in workloads),
        "ours / raw asyncpg: " + ", ".join(f"{w} {ours[w] / raw[w]:.2f}" for w in workloads),
    ]
    return "\n".join(lines)


# --- checkpoint ------------------------------------------------------------------------


async def statekernel_checkpoint(server_dsn: str, history: int, steps: int) -> float:
    dsn = await fresh_schema(server_dsn)
    seeded = history - WARMUP_STEPS
    async with PostgresThreadStore(dsn) as store:
        kernel = Kernel(
            [Conversation(next_index=seeded)],
            thread_store=store,
            snapshot_every=journal.SNAPSHOT_EVERY,
        )
        run = await kernel.start_run(journal.THREAD)
        await run.submit(seed_command(seeded))
        await run.checkpoint()
        for _ in range(WARMUP_STEPS):
            await run.run_phase(Phase.STEP_START)
            await run.checkpoint()
        start = time.perf_counter()
        for _ in range(steps):
            await run.run_phase(Phase.STEP_START)
            await run.checkpoint()
        elapsed = time.perf_counter() - start
        await run.finish()
    async with PostgresThreadStore(dsn) as store:  # read back by a fresh kernel
        reader = await Kernel([Conversation()], thread_store=store).start_run(journal.THREAD)
        messages = reader.snapshot.get(History)
        await reader.finish()
    check_history(len(messages), messages[-1].content, history, steps)
    return elapsed / steps


async def langgraph_checkpoint(server_dsn: str, history: int, steps: int, channel: Any) -> float:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    dsn = (await fresh_schema(server_dsn)).replace("?search_path=", "?options=-csearch_path%3D")
    workload = LangGraphWorkload(channel, "exit", pair_message)
    seeded = history - WARMUP_STEPS
    config = {"configurable": {"thread_id": journal.THREAD}}
    async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
        graph = langgraph_graph(saver, workload, next_index=seeded - 1)
        seed: dict[str, Any] = {f"k{i}": i for i in range(journal.OTHER_KEYS)}
        seed["messages"] = [pair_message(i) for i in range(seeded - 1)]
        await graph.ainvoke(seed, config, durability="exit")
        for _ in range(WARMUP_STEPS):
            await graph.ainvoke({}, config, durability="exit")
        start = time.perf_counter()
        for _ in range(steps):
            await graph.ainvoke({}, config, durability="exit")
        elapsed = time.perf_counter() - start
    async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
        graph = langgraph_graph(saver, workload)
        messages = (await graph.aget_state(config)).values["messages"]
    check_history(len(messages), messages[-1][1], history, steps)
    return elapsed / steps


def check_history(count: int, last: str, history: int, steps: int) -> None:
    if count != history + steps or last != message_text(history + steps - 1):
        raise AssertionError(f"read back {count} messages ending {last!r}, not {history + steps}")


async def checkpoint_part(
    server_dsn: str, sizes: list[int], repeats: int
) -> dict[int, dict[str, float]]:
    from langgraph.channels import DeltaChannel

    sides: dict[str, Callable[[int, int], Awaitable[float]]] = {
        "statekernel PostgresThreadStore": lambda n, m: statekernel_checkpoint(server_dsn, n, m),
        "LangGraph AsyncPostgresSaver": lambda n, m: langgraph_checkpoint(
            server_dsn, n, m, operator.add
        ),
        "LangGraph AsyncPostgresSaver, DeltaChannel": lambda n, m: langgraph_checkpoint(
            server_dsn, n, m, DeltaChannel(extend_all)
        ),
    }
    results: dict[int, dict[str, float]] = {}
    for history in sizes:
        steps = journal.steps_for(history)
        samples: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(repeats):
            for name, side in sides.items():
                samples[name].append(await side(history, steps))
        results[history] = {name: statistics.median(s) for name, s in samples.items()}
    return results


def render_checkpoint(results: dict[int, dict[str, float]], repeats: int) -> str:
    names = list(next(iter(results.values())))
    lines = [
        f"Per-step durable checkpoint on PostgreSQL, median of {repeats} (us/step)",
        "",
        "| N messages | " + " | ".join(names) + " | default / ours | DeltaChannel / ours |",
        "|---:|" + "---:|" * (len(names) + 2),
    ]
    for history, row in results.items():
        ours = row[names[0]]
        lines.append(
            f"| {history:,} | "
            + " | ".join(f"{row[name] * 1e6:,.0f}" for name in names)
            + f" | {row[names[1]] / ours:.1f}x | {row[names[2]] / ours:.1f}x |"
        )
    return "\n".join(lines)


# --- fleet -----------------------------------------------------------------------------


class Steps(StateKey[int, int]):
    key = "fleet.steps"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Log(StateKey[Vector[Message], tuple[Message, ...]]):
    key = "fleet.log"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: Vector[Message], update: tuple[Message, ...]) -> Vector[Message]:
        return value.extend(update)


class Stepper(Plugin):
    id = "fleet"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Steps)
        registrar.register_key(Log)
        registrar.register_phase_hook(Phase.STEP_START, self.step)

    def step(self, ctx: PhaseContext) -> StateCommand:
        text = message_text(ctx.snapshot.get(Steps))
        return StateCommand().update(Steps, 1).update(Log, (Message(role="user", content=text),))


async def fleet_process(
    dsn: str, threads: list[str], steps: int, start_at: float
) -> tuple[list[float], float, float]:
    """Step every thread `steps` times at once: the latency of every step (seconds), the
    wall-clock time the last step ended, and this process's CPU seconds meanwhile."""
    latencies: list[float] = []
    async with PostgresThreadStore(dsn) as store:
        kernel = Kernel([Stepper()], thread_store=store)
        runs = [await kernel.start_run(thread) for thread in threads]
        while time.time() < start_at:
            await asyncio.sleep(0.001)
        cpu = time.process_time()

        async def drive(run: Any) -> None:
            for _ in range(steps):
                began = time.perf_counter()
                await run.run_phase(Phase.STEP_START)
                await run.checkpoint()
                latencies.append(time.perf_counter() - began)

        await asyncio.gather(*(drive(run) for run in runs))
        ended = time.time()
        cpu = time.process_time() - cpu
        for run in runs:
            await run.finish()
    return latencies, ended, cpu


def server_cpu(server: PostgresServer) -> float:
    """CPU seconds the server's processes have used so far (Linux: /proc): the postmaster,
    its live backends, and the backends that have exited (counted in the postmaster's
    children's time)."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it exited meanwhile
            continue
        if int(entry.name) == postmaster:
            ticks += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        elif int(fields[1]) == postmaster:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def committed(dsn: str) -> int:
    """Transactions committed in the database so far (statistics of closed sessions)."""
    conn = await asyncpg.connect(dsn)
    try:
        return int(
            await conn.fetchval(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            )
        )
    finally:
        await conn.close()


def fleet_worker(dsn: str, threads: list[str], steps: int, start_at: float, out: Any) -> None:
    out.put(asyncio.run(fleet_process(dsn, threads, steps, start_at)))


async def fleet_check(dsn: str, count: int, steps: int) -> tuple[int, int]:
    """(lost, repeated) steps over every thread, read back from the database."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT thread_id, revision FROM statekernel_thread_heads")
    finally:
        await conn.close()
    revisions = {row[0]: row[1] for row in rows}
    lost = repeated = 0
    async with PostgresThreadStore(dsn) as store:
        reader = Kernel([Stepper()], thread_store=store)
        for index in range(count):
            thread = f"thread-{index:05d}"
            done = (await reader.state_at(thread, revisions[thread])).get(Steps)
            lost += max(0, steps - done)
            repeated += max(0, done - steps)
    return lost, repeated


async def fleet_part(
    server: PostgresServer, count: int, steps: int, processes: int
) -> dict[str, Any]:
    dsn = await fresh_schema(server.dsn)
    async with PostgresThreadStore(dsn) as store:  # the tables, outside the timing
        await store.threads(limit=1)
    threads = [f"thread-{index:05d}" for index in range(count)]
    start_at = time.time() + 2.0 + processes * 0.5
    # Counted from before the processes start to after they end: the start and end of the
    # runs (a load, a last save) are in these two columns but not in the time.
    transactions, server_seconds = await committed(dsn), server_cpu(server)
    if processes == 1:
        latencies, ended, client_seconds = await fleet_process(dsn, threads, steps, start_at)
    else:
        context = multiprocessing.get_context("spawn")
        out = context.Queue()
        workers = [
            context.Process(
                target=fleet_worker, args=(dsn, threads[n::processes], steps, start_at, out)
            )
            for n in range(processes)
        ]
        for worker in workers:
            worker.start()
        results = [out.get(timeout=600) for _ in workers]
        for worker in workers:
            worker.join()
        latencies = [x for result, _, _ in results for x in result]
        ended = max(end for _, end, _ in results)
        client_seconds = sum(cpu for _, _, cpu in results)
    server_seconds = server_cpu(server) - server_seconds
    transactions = await committed(dsn) - transactions - 1  # less this query's own
    elapsed = ended - start_at  # every process starts its clock at the same line
    lost, repeated = await fleet_check(dsn, count, steps)
    latencies.sort()
    return {
        "processes": processes,
        "steps": len(latencies),
        "steps_per_s": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
        "lost": lost,
        "repeated": repeated,
        "client_us": client_seconds / len(latencies) * 1e6,
        "server_us": server_seconds / len(latencies) * 1e6,
        "transactions": transactions,
    }


def render_fleet(rows: list[dict[str, Any]], count: int, steps: int) -> str:
    lines = [
        f"Fleet: {count:,} threads x {steps} steps, a durable checkpoint every step",
        "",
        "| processes | steps | steps/s | p50 ms | p99 ms | lost | repeated "
        "| client CPU us/step | server CPU us/step | transactions |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['processes']} | {row['steps']:,} | {row['steps_per_s']:,.0f} | "
            f"{row['p50_ms']:.1f} | {row['p99_ms']:.1f} | {row['lost']} | {row['repeated']} | "
            f"{row['client_us']:,.0f} | {row['server_us']:,.0f} | {row['transactions']:,} |"
        )
    return "\n".join(lines)


# --- contention ------------------------------------------------------------------------


class Tally(StateKey[int, int]):
    key = "contention.tally"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Adder(Plugin):
    id = "contention"

    def __init__(self, amount: int = 1) -> None:
        self.amount = amount

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Tally)
        registrar.register_phase_hook(Phase.STEP_START, self.step)

    def step(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Tally, self.amount)


def contention_store(kind: str, where: str) -> Any:
    return SqliteThreadStore(where) if kind == "sqlite" else PostgresThreadStore(where)


async def contention_process(
    kind: str, where: str, runs: int, amount: int, start_at: float
) -> tuple[int, int, float]:
    """Run `runs` runs of the shared thread one after the other: how many saves ended in
    `RevisionConflict`, how many rebased, and the wall-clock time the last one ended."""
    conflicts = rebased = 0
    async with contention_store(kind, where) as store:
        await store.threads(limit=1)  # connected before the start line
        kernel = Kernel([Adder(amount)], thread_store=store)
        while time.time() < start_at:
            await asyncio.sleep(0.001)
        for _ in range(runs):
            run = await kernel.start_run("shared")
            await run.run_phase(Phase.STEP_START)
            try:
                await run.finish()
            except RevisionConflict:
                conflicts += 1
                await run.abandon()
            rebased += len(run.rebases)
        ended = time.time()
    return conflicts, rebased, ended


def contention_worker(
    kind: str, where: str, runs: int, amount: int, start_at: float, out: Any
) -> None:
    out.put(asyncio.run(contention_process(kind, where, runs, amount, start_at)))


async def contention_part(
    server: PostgresServer, folder: Path, processes: int, runs: int
) -> list[dict[str, Any]]:
    rows = []
    for kind in ("sqlite", "postgres"):
        where = (
            str(folder / "contention.db") if kind == "sqlite" else await fresh_schema(server.dsn)
        )
        async with contention_store(kind, where) as store:  # the tables, outside the timing
            await store.threads(limit=1)
        start_at = time.time() + 2.0 + processes * 0.5
        context = multiprocessing.get_context("spawn")
        out = context.Queue()
        workers = [
            context.Process(
                target=contention_worker, args=(kind, where, runs, amount, start_at, out)
            )
            for amount in range(1, processes + 1)
        ]
        for worker in workers:
            worker.start()
        results = [out.get(timeout=600) for _ in workers]
        for worker in workers:
            worker.join()
        elapsed = max(end for _, _, end in results) - start_at
        async with contention_store(kind, where) as store:
            reader = Kernel([Adder()], thread_store=store)
            state = await reader.get_state("shared")
            whole = state.get(Tally) == runs * processes * (processes + 1) // 2
            verified = (await reader.verify("shared")).ok
        rows.append(
            {
                "store": "SQLite (WAL)" if kind == "sqlite" else "PostgreSQL",
                "runs": runs * processes,
                "runs_per_s": runs * processes / elapsed,
                "rebased": sum(rebased for _, rebased, _ in results),
                "conflicts": sum(conflicts for conflicts, _, _ in results),
                "revision": state.revision,
                "whole": whole and verified,
            }
        )
    return rows


def render_contention(rows: list[dict[str, Any]], processes: int, runs: int) -> str:
    lines = [
        f"Contention: {processes} processes x {runs} runs of one thread, each run adding to a "
        f"commutative key and saving",
        "",
        "| store | runs | runs/s | rebased saves | RevisionConflict | head revision "
        "| sum whole, verified |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['store']} | {row['runs']:,} | {row['runs_per_s']:,.0f} | {row['rebased']:,} "
            f"| {row['conflicts']} | {row['revision']:,} | {'yes' if row['whole'] else 'NO'} |"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    parts = [args.only] if args.only else ["profile", "checkpoint", "fleet", "contention"]
    with throwaway_postgres(durable=True) as server:
        if "profile" in parts:
            best = await profile_part(server.dsn, args.ops, args.repeats)
            print(render_profile(best, args.ops, args.repeats), end="\n\n", flush=True)
        if "checkpoint" in parts:
            sizes = [10, 1_000] if args.quick else [10, 10_000]
            results = await checkpoint_part(server.dsn, sizes, args.repeats)
            print(render_checkpoint(results, args.repeats), end="\n\n", flush=True)
        if "fleet" in parts:
            rows = [
                await fleet_part(server, args.threads, args.steps, processes)
                for processes in (1, 4)
            ]
            print(render_fleet(rows, args.threads, args.steps), end="\n\n", flush=True)
        if "contention" in parts:
            with tempfile.TemporaryDirectory() as folder:
                rows = await contention_part(server, Path(folder), args.processes, args.runs)
            print(render_contention(rows, args.processes, args.runs), flush=True)
    print(f"(asyncpg {asyncpg.__version__}; Python {sys.version.split()[0]})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["profile", "checkpoint", "fleet", "contention"])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one repeat")
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--runs", type=int, default=250)
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.ops, arguments.repeats = min(arguments.ops, 500), 1
    asyncio.run(main(arguments))
