"""Profile store: small values written and read by key in a SQLite file.

A sample opens a fresh file in a temporary folder, warms up with 100 writes and reads, then
times four operations on N values (N = 1,000 and 10,000): set one after another, get one
after another, and the same with 64 tasks at once (each key taken by one task). Metrics are
operations per second. Before its time counts, each side must read back what it wrote:
every value when N <= 1,000, otherwise 256 keys spread over each series.

- statekernel: `SqliteProfileStore` (WAL, synchronous=NORMAL; one thread hop per
  operation, concurrent operations coalesced into shared hops and transactions);
- floor: raw aiosqlite in autocommit, one statement per operation, on the same pragmas;
- langgraph: `AsyncSqliteStore` (langgraph-checkpoint-sqlite) on an aiosqlite connection
  set to WAL and synchronous=NORMAL;
- langgraph (sync): `SqliteStore` on a sqlite3 connection set the same way, called in
  place (no thread hop); sequential only, since 64 tasks on a blocking store run one at a
  time;
- evofabric: unavailable (it has no key-value store).

The subjects are benchmarks/profile_store.py's, which times more of them (an in-memory
store, one transaction for everything) and prints its own table.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import itertools
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import profile_store
from profile_store import NAMESPACE, concurrent, sequential, value

from sidebyside.harness import Metrics, Row, Settings, build_cell, expect, run_cells

NAME = "profile_store"
SIDE_NAMES = ("statekernel", "floor", "langgraph", "langgraph (sync)", "evofabric")
OPERATIONS = ("set, sequential", "get, sequential", "set, 64 tasks", "get, 64 tasks")
CHECKED = 256

MISSING_EVOFABRIC = (
    "EvoFabric 0.1.4 has no key-value store: its memories retrieve messages from a vector "
    "store, not values by key"
)
NOTES = {
    "floor": "raw aiosqlite, autocommit, one statement per operation",
    "langgraph": "AsyncSqliteStore",
    "langgraph (sync)": "SqliteStore called in place; sequential operations only",
}


def sizes(settings: Settings) -> list[int]:
    return [100] if settings.quick else [1_000, 10_000]


class SyncLangGraphStore:
    """LangGraph's blocking SqliteStore behind the async subject interface, called in place."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def set(self, key: str, item: dict[str, Any]) -> None:
        self.store.put((NAMESPACE,), key, item)

    async def get(self, key: str) -> Any:
        return self.store.get((NAMESPACE,), key)


@asynccontextmanager
async def langgraph_sync(path: Path) -> AsyncIterator[SyncLangGraphStore]:
    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        store = SqliteStore(conn)
        store.setup()
        yield SyncLangGraphStore(store)
    finally:
        conn.close()


def _ours(entry: Any) -> Any:
    return entry


def _raw(row: Any) -> Any:
    return None if row is None else msgspec.json.decode(row[0])


def _langgraph(item: Any) -> Any:
    return None if item is None else item.value


Opener = Callable[[Path], AbstractAsyncContextManager[Any]]

SUBJECTS: dict[str, tuple[Opener, Callable[[Any], Any], bool]] = {
    # side: (open a subject on a file, read back a get's answer as the value, concurrent?)
    "statekernel": (profile_store.sqlite, _ours, True),
    "floor": (profile_store.raw_autocommit, _raw, True),
    "langgraph": (profile_store.langgraph, _langgraph, True),
    "langgraph (sync)": (langgraph_sync, _langgraph, False),
}


async def measure(opener: Opener, read: Callable[[Any], Any], with_tasks: bool, n: int) -> Metrics:
    with tempfile.TemporaryDirectory() as folder:
        gc.collect()
        async with opener(Path(folder) / "profile.db") as subject:
            for i in range(100):  # warm up code paths and caches outside the timing
                await subject.set(f"w{i}", value(i))
                await subject.get(f"w{i}")
            times = {
                OPERATIONS[0]: await sequential(n, lambda i: subject.set(f"s{i}", value(i))),
                OPERATIONS[1]: await sequential(n, lambda i: subject.get(f"s{i}")),
            }
            if with_tasks:
                times[OPERATIONS[2]] = await concurrent(n, lambda i: subject.set(f"c{i}", value(i)))
                times[OPERATIONS[3]] = await concurrent(n, lambda i: subject.get(f"c{i}"))
            for prefix in ("s", "c") if with_tasks else ("s",):
                for i in _checked(n):
                    got = read(await subject.get(f"{prefix}{i}"))
                    expect(got == value(i), f"{prefix}{i} reads back {got!r}, not {value(i)!r}")
    return {operation: n / seconds for operation, seconds in times.items()}


def _checked(n: int) -> list[int]:
    if n <= 1_000:
        return list(range(n))
    return sorted({round(i * (n - 1) / (CHECKED - 1)) for i in range(CHECKED)})


def sample_for(side: str, n: int) -> Callable[[], Metrics]:
    opener, read, with_tasks = SUBJECTS[side]
    return lambda: asyncio.run(measure(opener, read, with_tasks, n))


def run(settings: Settings) -> list[Row]:
    cells = []
    for n, side in itertools.product(sizes(settings), SIDE_NAMES):
        missing = MISSING_EVOFABRIC if side == "evofabric" else None
        build = functools.partial(sample_for, side, n) if side in SUBJECTS else None
        cell = build_cell(
            NAME, {"values": n}, side, build or _never, note=NOTES.get(side, ""), missing=missing
        )
        cells.append(cell)
    return run_cells(NAME, cells, settings)


def _never() -> Callable[[], Metrics]:
    raise AssertionError("an unavailable side is never built")
