"""How fast is the SQLite ProfileStore, beside raw aiosqlite and LangGraph's store?

For N small values (1,000 and 10,000; `--quick`: 1,000 only) it times four workloads:
sequential set, sequential get, and the same with 64 tasks at once. Each runs against

- `MemoryProfileStore` (the ceiling: no I/O at all),
- `SqliteProfileStore` (WAL, synchronous=NORMAL; one thread hop per operation, and
  concurrent operations coalesced into shared hops and transactions),
- raw aiosqlite, autocommit, one statement (so one commit) per operation,
- raw aiosqlite, every operation inside one transaction (committed once at the end),
- LangGraph's `AsyncSqliteStore` (`pip install -e '.[bench]'`), on a connection set to
  WAL and synchronous=NORMAL like ours; skipped when not installed,

each on a fresh file in a temporary directory, all in one run so that the numbers are
comparable. Prints operations per second, and ours / LangGraph's. The goals: sequential
set and get at least 2x LangGraph's, 64-concurrent set above it.

Each subject runs `--repeats` times (default 3), taking turns, and keeps its best.

Run: .venv/bin/python benchmarks/profile_store.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import aiosqlite

from statekernel.stores import MemoryProfileStore, SqliteProfileStore

CONCURRENCY = 64
NAMESPACE = "bench"


def value(i: int) -> dict[str, Any]:
    return {"v": i, "name": f"item-{i}", "tags": ["a", "b"]}


class Subject(Protocol):
    async def set(self, key: str, item: dict[str, Any]) -> None: ...

    async def get(self, key: str) -> Any: ...


class OurStore:
    def __init__(self, store: MemoryProfileStore | SqliteProfileStore) -> None:
        self.store = store

    async def set(self, key: str, item: dict[str, Any]) -> None:
        await self.store.set(NAMESPACE, key, item)

    async def get(self, key: str) -> Any:
        entry = await self.store.get(NAMESPACE, key)
        return None if entry is None else entry.value


class RawAiosqlite:
    """The floor: one aiosqlite call per operation, nothing else."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn

    async def set(self, key: str, item: dict[str, Any]) -> None:
        await self.conn.execute(
            "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, _json(item))
        )

    async def get(self, key: str) -> Any:
        rows = await self.conn.execute_fetchall("SELECT value FROM kv WHERE key = ?", (key,))
        return next(iter(rows), None)


class LangGraphStore:
    def __init__(self, store: Any) -> None:
        self.store = store

    async def set(self, key: str, item: dict[str, Any]) -> None:
        await self.store.aput((NAMESPACE,), key, item)

    async def get(self, key: str) -> Any:
        return await self.store.aget((NAMESPACE,), key)


def _json(item: dict[str, Any]) -> str:
    import msgspec

    return msgspec.json.encode(item).decode()


async def _raw_connection(path: Path) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None)
    try:
        await conn.execute("PRAGMA journal_mode = WAL")
        await conn.execute("PRAGMA synchronous = NORMAL")
        await conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    except BaseException:
        await conn.close()  # an open aiosqlite thread would keep the process alive
        raise
    return conn


@asynccontextmanager
async def memory(_: Path) -> AsyncIterator[Subject]:
    async with MemoryProfileStore() as store:
        yield OurStore(store)


@asynccontextmanager
async def sqlite(path: Path) -> AsyncIterator[Subject]:
    async with SqliteProfileStore(path) as store:
        await store.get(NAMESPACE, "warm-up")  # open the file outside the timing
        yield OurStore(store)


@asynccontextmanager
async def raw_autocommit(path: Path) -> AsyncIterator[Subject]:
    conn = await _raw_connection(path)
    try:
        yield RawAiosqlite(conn)
    finally:
        await conn.close()


@asynccontextmanager
async def raw_one_transaction(path: Path) -> AsyncIterator[Subject]:
    conn = await _raw_connection(path)
    try:
        await conn.execute("BEGIN")
        yield RawAiosqlite(conn)
        await conn.execute("COMMIT")
    finally:
        await conn.close()


@asynccontextmanager
async def langgraph(path: Path) -> AsyncIterator[Subject]:
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    conn = await aiosqlite.connect(path, isolation_level=None)
    await conn.execute("PRAGMA journal_mode = WAL")
    await conn.execute("PRAGMA synchronous = NORMAL")
    try:
        store = AsyncSqliteStore(conn)
        await store.setup()
        yield LangGraphStore(store)
    finally:
        await conn.close()


def _langgraph_available() -> bool:
    try:
        import langgraph.store.sqlite.aio  # noqa: F401
    except ImportError:
        return False
    return True


SUBJECTS: dict[str, Callable[[Path], Any]] = {
    "memory": memory,
    "sqlite (ours)": sqlite,
    "raw, commit/op": raw_autocommit,
    "raw, 1 txn": raw_one_transaction,
    "langgraph": langgraph,
}


async def sequential(count: int, action: Callable[[int], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    for i in range(count):
        await action(i)
    return time.perf_counter() - start


async def concurrent(count: int, action: Callable[[int], Awaitable[Any]]) -> float:
    indices = iter(range(count))

    async def worker() -> None:
        for i in indices:  # a shared iterator: each index is taken by one worker
            await action(i)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return time.perf_counter() - start


WORKLOADS = ["set, sequential", "get, sequential", "set, 64 tasks", "get, 64 tasks"]


async def measure(name: str, count: int, path: Path) -> dict[str, float]:
    """Operations per second of each workload for one subject, on its own fresh file."""
    gc.collect()  # leave no collection owed by earlier work (e.g. importing LangGraph)
    opened = SUBJECTS[name](path)
    async with opened as subject:
        for i in range(100):  # warm up code paths and caches outside the timing
            await subject.set(f"w{i}", value(i))
            await subject.get(f"w{i}")
        s, c = "s", "c"
        times = {
            WORKLOADS[0]: await sequential(count, lambda i: subject.set(f"{s}{i}", value(i))),
            WORKLOADS[1]: await sequential(count, lambda i: subject.get(f"{s}{i}")),
            WORKLOADS[2]: await concurrent(count, lambda i: subject.set(f"{c}{i}", value(i))),
            WORKLOADS[3]: await concurrent(count, lambda i: subject.get(f"{c}{i}")),
        }
    return {workload: count / seconds for workload, seconds in times.items()}


def render(results: dict[tuple[str, int], dict[str, float]], names: list[str]) -> str:
    headers = ["workload", "N", *names]
    if "langgraph" in names:
        headers.append("ours/langgraph")
    rows = []
    for (workload, count), by_name in results.items():
        row = [workload, f"{count:,}", *(f"{by_name[n]:,.0f}" for n in names)]
        if "langgraph" in names:
            row.append(f"{by_name['sqlite (ours)'] / by_name['langgraph']:.1f}x")
        rows.append(row)
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = [
        " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
        "-|-".join("-" * w for w in widths),
    ]
    lines += [" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


async def main(quick: bool, repeats: int) -> None:
    counts = [1_000] if quick else [1_000, 10_000]
    names = [n for n in SUBJECTS if n != "langgraph" or _langgraph_available()]
    if "langgraph" not in names:
        print("langgraph-checkpoint-sqlite is not installed: LangGraph column skipped")
        print("(install it with: .venv/bin/pip install -e '.[bench]')\n")
    results: dict[tuple[str, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # Subjects take turns, repeat after repeat, and each keeps its best: noise from
        # whatever else the machine does then hits every column alike, and is filtered.
        for run, count, (index, name) in itertools.product(
            range(repeats), counts, enumerate(names)
        ):
            print(f"  run {run + 1}/{repeats}: {name}, N={count:,}", file=sys.stderr)
            path = Path(tmp) / f"{run}-{count}-{index}.db"
            for workload, ops in (await measure(name, count, path)).items():
                best = results.setdefault((workload, count), {})
                best[name] = max(ops, best.get(name, 0.0))
    ordered = {
        key: results[key] for key in sorted(results, key=lambda k: (k[1], WORKLOADS.index(k[0])))
    }
    print(
        f"operations per second, best of {repeats} (higher is better), "
        f"{CONCURRENCY} tasks where stated\n"
    )
    print(render(ordered, names))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N=1,000 only")
    parser.add_argument("--repeats", type=int, default=3, help="runs per subject (best kept)")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.quick, arguments.repeats))
