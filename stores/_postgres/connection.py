"""One PostgreSQL database as the PostgreSQL stores use it: a bounded pool, the schema, and
the one retry policy every operation goes through.

The pool (asyncpg's) opens on first use, at most `pool_size` connections, and is rebuilt if
the store is used from another event loop. On first use the component's tables are created,
or migrated from an older version, under an advisory lock, so that processes starting at
once do not race; a database written by a newer statekernel is refused.

**Retries that cannot apply a write twice.** A failure is retried until `retry_for` seconds
have passed when it is one of:

- the server could not be reached or would not take the connection (it is starting,
  restarting, or out of connections): nothing was sent;
- the server answered that it aborted the transaction (a serialization failure or a
  deadlock): nothing was applied;
- the connection broke, or the server said it is shutting down, after the statement was
  sent: the statement may have committed with its answer unsent. Then a read is simply
  retried, and a write asks the database what became of it (`Write.settle`): every write
  stores a random write id beside what it writes (a thread head and a profile entry keep the
  ids of their last `WRITE_IDS_KEPT` writes), so the write's own id says it landed. It is
  re-sent only when it certainly did not land, and then under the same compare-and-set,
  which cannot pass twice. When the database cannot say (more than `WRITE_IDS_KEPT` other
  writes to the same entry in between, or the server still unreachable), the write fails
  with a `StoreError` saying its outcome is unknown.

When the time is up, a write that certainly did not land fails with a `StoreError` saying
"not applied", so that the caller may safely write it again.

Anything else (a constraint the store checks, a bug) is not retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import attrs

from statekernel import StateError, StoreError, StoreNotOpened

from .._schema_versions import read_only_refusal

if TYPE_CHECKING:
    import asyncpg

__all__ = [
    "UNTRACEABLE",
    "WRITE_IDS_KEPT",
    "Outcome",
    "PostgresConnection",
    "Schema",
    "Settled",
    "UserCodeFailed",
    "Write",
    "columns",
    "outcome_unknown",
    "read_components",
    "refused",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

WRITE_IDS_KEPT = 8
"""How many of its last writes' ids a head or an entry keeps: enough to tell, after a lost
answer, whether a write landed while fewer than this many others wrote there since."""

_SCHEMA_TABLE = """
CREATE TABLE IF NOT EXISTS statekernel_schema (
    component TEXT PRIMARY KEY,
    version   INTEGER NOT NULL
)
"""
# One advisory lock for every statekernel schema change in the database.
_SCHEMA_LOCK = int.from_bytes(hashlib.blake2b(b"statekernel schema", digest_size=8).digest()) >> 1

# SQLSTATEs after which the server has certainly not applied the transaction: it aborted it,
# or it refused the connection before anything ran.
_ROLLED_BACK = {
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
    "57P03",  # cannot_connect_now
    "53300",  # too_many_connections
}
# The server is going down: a statement may have committed with its answer still unsent.
_SHUTTING_DOWN = {"57P01", "57P02"}  # admin_shutdown, crash_shutdown
UNTRACEABLE = f"more than {WRITE_IDS_KEPT} other writes reached the same place since"
_SETTLE_PATIENCE = 10.0  # seconds to keep asking what became of a write, at least


@attrs.frozen
class Schema:
    """A component's tables: created with its version row when missing; `migrations[n]`
    takes a database from version `n` to `n + 1`, in one transaction."""

    component: str
    version: int
    statements: tuple[str, ...]
    migrations: Mapping[int, tuple[str, ...]] = attrs.field(factory=dict)
    readable_from: int = attrs.field()
    """The oldest version a read-only open reads as it is (it cannot migrate): one whose
    later versions only added what its readers can do without."""

    @readable_from.default
    def _current(self) -> int:
        return self.version


class Outcome(enum.Enum):
    """What became of a write whose answer was lost."""

    APPLIED = "applied"
    NOT_APPLIED = "not applied"
    UNKNOWN = "unknown"


@attrs.frozen
class Settled(Generic[T]):
    """A settled write: its outcome, and when it was applied, its result."""

    outcome: Outcome
    result: T | None = None


class UserCodeFailed(Exception):
    """Raised by a write around an exception of the caller's own code that it ran (the
    function of a profile `update`): the store raises `error` itself, unchanged, and retries
    nothing."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


class Write(Protocol[T_co]):
    """A write: `run` performs it on a connection; `settle`, after a lost answer, reads what
    became of it (by its write id) on a fresh connection."""

    def run(self, conn: Any) -> Awaitable[T_co]: ...

    def settle(self, conn: Any) -> Awaitable[Settled[Any]]: ...


class PostgresConnection:
    """A lazily opened, bounded asyncpg pool on one database, with the component's schema."""

    def __init__(
        self,
        dsn: str,
        schema: Schema,
        *,
        pool_size: int = 10,
        retry_for: float = 30.0,
        connect_timeout: float = 10.0,
        read_only: bool = False,
    ) -> None:
        if not isinstance(dsn, str) or not dsn:
            raise TypeError(
                f"dsn must be a PostgreSQL connection string such as "
                f"'postgresql://user@host:5432/db', got {dsn!r}"
            )
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ValueError(f"pool_size must be an int >= 1, got {pool_size!r}")
        if not isinstance(retry_for, int | float) or retry_for < 0:
            raise ValueError(f"retry_for must be a number of seconds >= 0, got {retry_for!r}")
        self._driver = driver()
        self.dsn = dsn
        self._schema = schema
        self._pool_size = pool_size
        self._retry_for = float(retry_for)
        self._connect_timeout = connect_timeout
        self.read_only = read_only
        self._pool: asyncpg.Pool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Lock | None = None

    async def read(
        self,
        operation: str,
        key: str | None,
        body: Callable[[Any], Awaitable[T]],
        *,
        deadline: float | None = None,
    ) -> T:
        """Run a read, retried through any transient failure."""
        if deadline is None:
            deadline = time.monotonic() + self._retry_for
        pause = 0.01
        while True:
            try:
                pool = await self._open()
                async with pool.acquire() as conn:
                    return await body(conn)
            except Exception as error:
                if not _transient(error) or time.monotonic() >= deadline:
                    raise _store_error(operation, key, error) from error
            pause = await _backoff(pause)

    async def write(self, operation: str, key: str | None, write: Write[T]) -> T:
        """Run a write under the retry policy in the module's docstring."""
        if self.read_only:
            raise StoreError(
                operation,
                PermissionError("the store was opened with read_only=True"),
                key=key,
            )
        deadline = time.monotonic() + self._retry_for
        pause = 0.01
        while True:
            sent = False
            try:
                pool = await self._open()
                async with pool.acquire() as conn:
                    sent = True
                    return await write.run(conn)
            except UserCodeFailed as failed:
                raise failed.error from None
            except Exception as error:
                if isinstance(error, StateError):
                    raise
                if sent and _outcome_unknown(error):
                    settled = await self._settle(operation, key, write, deadline, error)
                    if settled.outcome is Outcome.APPLIED:
                        return settled.result  # type: ignore[return-value]
                elif not (_rolled_back(error) or (not sent and _transient(error))):
                    raise _store_error(operation, key, error) from error
                if time.monotonic() >= deadline:  # it certainly did not land
                    raise StoreError(
                        operation,
                        RuntimeError(f"not applied: {type(error).__name__}: {error}"),
                        key=key,
                    ) from error
            pause = await _backoff(pause)

    async def _settle(
        self, operation: str, key: str | None, write: Write[Any], deadline: float, error: Exception
    ) -> Settled[Any]:
        """What became of a write whose answer was lost; a StoreError saying its outcome is
        unknown when the database cannot say (or cannot be asked before the deadline)."""
        why = UNTRACEABLE
        try:
            settled = await self.read(
                f"{operation} (checking a lost answer)",
                key,
                write.settle,
                deadline=max(deadline, time.monotonic() + _SETTLE_PATIENCE),
            )
        except StoreError:
            settled, why = Settled(Outcome.UNKNOWN), "the server could not be asked"
        if settled.outcome is Outcome.UNKNOWN:
            raise outcome_unknown(operation, key, why) from error
        return settled

    async def close(self) -> None:
        """Close the pool's connections; the store reopens them on next use."""
        pool, self._pool = self._pool, None
        if pool is not None:
            if self._loop is asyncio.get_running_loop():
                await pool.close()
            else:
                _abandon(pool)

    async def _open(self) -> asyncpg.Pool:
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._loop is loop:
            return self._pool
        if self._opening is None or self._loop is not loop:
            if self._pool is not None:  # made on another event loop: unusable on this one
                _abandon(self._pool)
                self._pool = None
            self._opening = asyncio.Lock()
            self._loop = loop
        async with self._opening:
            if self._pool is None:
                pool = await self._driver.create_pool(
                    self.dsn,
                    min_size=1,
                    max_size=self._pool_size,
                    timeout=self._connect_timeout,
                    command_timeout=None,
                    reset=_keep_session,
                    # Read-only: the server itself refuses any write, whatever runs.
                    server_settings=_READ_ONLY if self.read_only else None,
                )
                try:
                    async with pool.acquire() as conn:
                        if self.read_only:
                            await _check_read_only(conn, self._schema)
                        else:
                            await _ensure_schema(conn, self._schema)
                except BaseException:
                    pool.terminate()
                    raise
                self._pool = pool
        return self._pool


_READ_ONLY = {"default_transaction_read_only": "on"}


async def components(conn: Any) -> dict[str, int]:
    """The statekernel components the database holds, with their schema versions; a
    StoreError for a database statekernel never wrote to."""
    if await conn.fetchval("SELECT to_regclass('statekernel_schema') IS NULL"):
        raise StoreNotOpened(
            "read-only open",
            ValueError(
                "the database holds no statekernel store (no statekernel_schema table); "
                "nothing was written to it"
            ),
        )
    rows = await conn.fetch("SELECT component, version FROM statekernel_schema")
    return {str(row[0]): int(row[1]) for row in rows}


async def read_components(dsn: str, *, timeout: float = 10.0) -> dict[str, int]:
    """`components` of the database at `dsn`, on one read-only connection."""
    try:
        conn = await driver().connect(dsn, timeout=timeout, server_settings=_READ_ONLY)
    except Exception as error:
        raise StoreNotOpened("read-only open", error) from error
    try:
        return await components(conn)
    finally:
        await conn.close()


async def _check_read_only(conn: Any, schema: Schema) -> None:
    """Refuse a read-only open of a database without this component at this schema version:
    creating or migrating it would write."""
    found = (await components(conn)).get(schema.component)
    why = read_only_refusal(
        "the database", schema.component, found, schema.version, schema.readable_from
    )
    if why is not None:
        raise StoreNotOpened("read-only open", ValueError(why))


async def _ensure_schema(conn: Any, schema: Schema) -> None:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
        await conn.execute(_SCHEMA_TABLE)
        found = await conn.fetchval(
            "SELECT version FROM statekernel_schema WHERE component = $1", schema.component
        )
        if found is None:
            for statement in schema.statements:
                await conn.execute(statement)
            await conn.execute(
                "INSERT INTO statekernel_schema (component, version) VALUES ($1, $2)",
                schema.component,
                schema.version,
            )
            return
        if found > schema.version:
            raise StoreError(
                "open",
                RuntimeError(
                    f"the database's {schema.component} tables are at schema version {found}, "
                    f"newer than this statekernel's {schema.version}: upgrade statekernel"
                ),
            )
        for version in range(found, schema.version):
            for statement in schema.migrations[version]:
                await conn.execute(statement)
        if found != schema.version:
            await conn.execute(
                "UPDATE statekernel_schema SET version = $2 WHERE component = $1",
                schema.component,
                schema.version,
            )


def _abandon(pool: asyncpg.Pool) -> None:
    """Drop a pool made on another event loop: its sockets are closed now if that loop still
    runs, else when it is collected (a closed loop cannot close them)."""
    with contextlib.suppress(RuntimeError):  # "Event loop is closed"
        pool.terminate()


async def _keep_session(conn: Any) -> None:
    """What a connection needs before it goes back to the pool: nothing more than asyncpg's
    own rollback of a transaction left open. asyncpg's default also sends a reset query
    (`RESET ALL`, `UNLISTEN *`, unlock advisory locks): a second round trip per operation
    that undoes nothing here, since the stores never change a session's settings, listen,
    or take session-level locks (the schema lock is a transaction's)."""


def driver() -> Any:
    """asyncpg, or an ImportError saying how to install it (it is an extra)."""
    try:
        import asyncpg
    except ImportError as error:
        raise ImportError(
            "the PostgreSQL stores need asyncpg: pip install 'statekernel[postgres]'"
        ) from error
    return asyncpg


def columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows as `width` parallel lists: the shape `unnest` takes, so that one statement writes
    or reads a whole batch."""
    return [[row[n] for row in rows] for n in range(width)]


def outcome_unknown(operation: str, key: str | None, why: str) -> StoreError:
    """The error of a write that may or may not have landed, `why` it cannot be told."""
    return StoreError(
        operation,
        RuntimeError(
            f"outcome unknown: the connection broke before the server answered, and {why}, "
            f"so this write may or may not have landed: read it back before writing it again"
        ),
        key=key,
    )


def refused(error: BaseException) -> bool:
    """The server refused the statement itself (a constraint it broke, a value it cannot
    take): nothing was applied, and sending it unchanged would fail again."""
    return isinstance(error, driver().PostgresError) and not _transient(error)


def _transient(error: BaseException) -> bool:
    """The server could not be reached or refused the connection for now, it rolled the
    transaction back, or the answer was lost: for a read, a retry is always safe."""
    return _outcome_unknown(error) or _rolled_back(error) or isinstance(error, asyncio.TimeoutError)


def _outcome_unknown(error: BaseException) -> bool:
    """The connection broke, or the server is going down (it may have committed a statement
    whose answer never left it): whether a write landed needs asking."""
    asyncpg = driver()
    if getattr(error, "sqlstate", None) in _SHUTTING_DOWN:
        return True
    # (asyncpg's client errors: a connection whose protocol state broke mid-statement.)
    return isinstance(
        error,
        asyncpg.ConnectionDoesNotExistError
        | asyncpg.PostgresConnectionError
        | asyncpg.InterfaceError
        | asyncpg.InternalClientError
        | OSError,
    )


def _rolled_back(error: BaseException) -> bool:
    return getattr(error, "sqlstate", None) in _ROLLED_BACK


def _store_error(operation: str, key: str | None, error: BaseException) -> BaseException:
    if isinstance(error, StateError):
        return error
    return StoreError(operation, error, key=key)


async def _backoff(pause: float) -> float:
    await asyncio.sleep(random.uniform(pause / 2, pause))
    return min(pause * 2, 0.5)
