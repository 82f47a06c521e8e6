"""Which PostgreSQL driver should the stores use: asyncpg or psycopg 3?

Both run the statements the PostgreSQL stores run, on one throwaway local server (started from
the machine's PostgreSQL binaries, fsync on), in one run, taking turns:

- profile set: one upsert statement per operation (`INSERT ... ON CONFLICT DO UPDATE`),
- profile get: one indexed SELECT per operation,
- thread save: one statement that moves a thread's head by compare-and-set and appends its
  record (a data-modifying CTE), the shape of a durable step,

each sequentially and from 64 tasks at once through a pool of 10 connections (asyncpg's own
pool; psycopg_pool's AsyncConnectionPool), with prepared statements as each driver does
them by default, and each pool as the stores would configure it: asyncpg's without its reset
query on release (the stores never change a session; psycopg_pool sends none by default).
Prints operations per second per driver and asyncpg / psycopg.

Run: .venv-bench/bin/python benchmarks/postgres_drivers.py [--ops N] [--repeats N]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import psycopg
import psycopg_pool

from statekernel.testing.postgres import throwaway_postgres

CONCURRENCY = 64
POOL = 10
VALUE = '{"v": 1, "name": "item", "tags": ["a", "b"]}'
RECORD = bytes(range(256)) * 2

SCHEMA = """
DROP TABLE IF EXISTS bench_profile, bench_heads, bench_records;
CREATE TABLE bench_profile (ns text COLLATE "C", key text COLLATE "C", value text,
    version bigint, PRIMARY KEY (ns, key));
CREATE TABLE bench_heads (thread_id text COLLATE "C" PRIMARY KEY, position bigint,
    revision bigint, head bytea);
CREATE TABLE bench_records (thread_id text COLLATE "C", revision bigint, record bytea,
    PRIMARY KEY (thread_id, revision));
"""
SET = (
    "INSERT INTO bench_profile VALUES ($1, $2, $3, 1) ON CONFLICT (ns, key) DO UPDATE "
    "SET value = EXCLUDED.value, version = bench_profile.version + 1 RETURNING version"
)
GET = "SELECT value, version FROM bench_profile WHERE ns = $1 AND key = $2"
SAVE = (
    "WITH head AS (UPDATE bench_heads SET position = position + 1, revision = $2, head = $3 "
    "WHERE thread_id = $1 AND position = $4 RETURNING thread_id) "
    "INSERT INTO bench_records SELECT thread_id, $2, $5 FROM head RETURNING revision"
)
SEED_HEAD = "INSERT INTO bench_heads VALUES ($1, 0, 0, $2)"


def psycopg_sql(statement: str) -> str:
    for index in range(5, 0, -1):
        statement = statement.replace(f"${index}", f"%(p{index})s")
    return statement


async def keep_session(conn: Any) -> None:
    """No reset query when a connection goes back to asyncpg's pool (as in the stores)."""


class Asyncpg:
    name = "asyncpg"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def open(self) -> None:
        self.pool = await asyncpg.create_pool(
            self.dsn, min_size=POOL, max_size=POOL, reset=keep_session
        )

    async def close(self) -> None:
        await self.pool.close()

    async def execute(self, statement: str, *args: Any) -> Any:
        async with self.pool.acquire() as conn:
            return await conn.fetchrow(statement, *args)


class Psycopg:
    name = "psycopg"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def open(self) -> None:
        self.pool = psycopg_pool.AsyncConnectionPool(
            self.dsn, min_size=POOL, max_size=POOL, open=False, kwargs={"autocommit": True}
        )
        await self.pool.open(wait=True)

    async def close(self) -> None:
        await self.pool.close()

    async def execute(self, statement: str, *args: Any) -> Any:
        async with self.pool.connection() as conn:
            params = {f"p{index}": arg for index, arg in enumerate(args, 1)}
            cursor = await conn.execute(psycopg_sql(statement), params, prepare=True)
            return await cursor.fetchone()


async def reset(dsn: str, threads: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SCHEMA)
        await conn.executemany(SEED_HEAD, [(f"t{i}", b"h") for i in range(threads)])
    finally:
        await conn.close()


async def timed(ops: int, concurrency: int, one: Callable[[int], Awaitable[Any]]) -> float:
    """Operations per second of `one(0..ops-1)` spread over `concurrency` tasks."""
    queue = iter(range(ops))

    async def worker() -> None:
        for index in queue:
            await one(index)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ops / (time.perf_counter() - start)


async def measure(driver: Asyncpg | Psycopg, dsn: str, ops: int) -> dict[str, float]:
    results: dict[str, float] = {}
    for concurrency in (1, CONCURRENCY):
        await reset(dsn, ops)
        await driver.open()
        try:
            label = "seq" if concurrency == 1 else f"{concurrency} tasks"
            results[f"profile set, {label}"] = await timed(
                ops, concurrency, lambda i: driver.execute(SET, "ns", f"k{i % 1000}", VALUE)
            )
            results[f"profile get, {label}"] = await timed(
                ops, concurrency, lambda i: driver.execute(GET, "ns", f"k{i % 1000}")
            )
            results[f"thread save, {label}"] = await timed(
                ops, concurrency, lambda i: driver.execute(SAVE, f"t{i}", 1, b"head", 0, RECORD)
            )
        finally:
            await driver.close()
    return results


async def main(ops: int, repeats: int) -> None:
    with throwaway_postgres(durable=True) as server:
        drivers = [Asyncpg(server.dsn), Psycopg(server.dsn)]
        best: dict[str, dict[str, float]] = {driver.name: {} for driver in drivers}
        for _ in range(repeats):
            for driver in drivers:
                for workload, rate in (await measure(driver, server.dsn, ops)).items():
                    best[driver.name][workload] = max(best[driver.name].get(workload, 0), rate)
    print(f"PostgreSQL drivers, {ops} operations per workload, best of {repeats} (ops/s)")
    print(f"{'workload':<26} {'asyncpg':>10} {'psycopg':>10} {'ratio':>7}")
    for workload, rate in best["asyncpg"].items():
        other = best["psycopg"][workload]
        print(f"{workload:<26} {rate:>10,.0f} {other:>10,.0f} {rate / other:>6.2f}x")
    print(f"(asyncpg {asyncpg.__version__}, psycopg {psycopg.__version__})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.ops, arguments.repeats))
