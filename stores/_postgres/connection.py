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
  asked on a connection opened after the answer was lost (`_reconnect`), after ending the
  server process that may still hold the write (`Backend`). It is re-sent only when it
  certainly did not land, and then under the same compare-and-set, which cannot pass
  twice. When the database cannot say (more than `WRITE_IDS_KEPT` other writes to the same
  entry in between, or the server still unreachable), the write fails with a `StoreError`
  saying its outcome is unknown.

When the time is up, a write that certainly did not land fails with a `StoreError` saying
"not applied", so that the caller may safely write it again.

Anything else (a constraint the store checks, a bug) is not retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import hashlib
import logging
import math
import random
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import attrs

from statekernel import OutcomeUnknown, StateError, StoreError, StoreNotOpened

from .._schema_versions import read_only_refusal

if TYPE_CHECKING:
    import asyncpg

__all__ = [
    "READ_ONLY_SERVER",
    "UNTRACEABLE",
    "WRITE_IDS_KEPT",
    "Outage",
    "Outcome",
    "PostgresConnection",
    "Schema",
    "Settled",
    "UserCodeFailed",
    "Write",
    "call_ends",
    "columns",
    "driver",
    "outcome_unknown",
    "read_components",
    "refused",
    "server_of",
    "transient",
]

logger = logging.getLogger("statekernel")

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
UNTRACEABLE = (
    f"the connection broke before the server answered, and more than {WRITE_IDS_KEPT} other "
    f"writes reached the same place since"
)
_STATEMENT_LOST = {
    "26000",  # invalid_sql_statement_name: a prepared statement is not on this server connection
    "42P05",  # duplicate_prepared_statement: another client's is
}
READ_ONLY_SERVER = "25006"  # read_only_sql_transaction


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
    """A settled write: its outcome, and when it was applied, its result. A batch of
    writes (group commit) also says what became of each of them in `parts`, by what each
    wrote (`"thread 't'"`), in batch order: one statement can move some threads' heads and
    not others', and the log names which."""

    outcome: Outcome
    result: T | None = None
    parts: Mapping[str, Outcome] = attrs.field(factory=dict)

    def said(self) -> str:
        """The outcome as the log says it: `applied`, or for a batch each outcome with how
        many writes had it and which (`applied for 2 (thread 'a', thread 'b'); not applied
        for 1 (thread 'c')`)."""
        if not self.parts:
            return self.outcome.value
        by_outcome: dict[Outcome, list[str]] = {}
        for part, outcome in self.parts.items():
            by_outcome.setdefault(outcome, []).append(part)
        return "; ".join(
            f"{outcome.value} for {len(parts)} ({_listed(parts)})"
            for outcome in Outcome
            if (parts := by_outcome.get(outcome))
        )


_NAMED_IN_LOG = 10  # the writes of a batch a log line names for each outcome, at most


def _listed(parts: Sequence[str]) -> str:
    shown = ", ".join(parts[:_NAMED_IN_LOG])
    more = len(parts) - _NAMED_IN_LOG
    return f"{shown} and {more} more" if more > 0 else shown


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


_CALL_ENDS: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "statekernel_postgres_call_ends", default=None
)
"""When the store call the current task is in ends (the event loop's clock), if any."""


def call_ends() -> float | None:
    """When the store call the current task is in ends (the event loop's clock), None
    outside one: what a group-commit batch's trips may take, at most, for this caller."""
    return _CALL_ENDS.get()


@attrs.frozen
class Clock:
    """One call's time: the call ends at `limit`'s deadline (`call_timeout`), and transient
    failures are retried until `retry_until` (`retry_for`), whichever comes first."""

    limit: asyncio.Timeout
    retry_until: float

    @classmethod
    def start(cls, call_timeout: float, retry_for: float) -> Clock:
        """A trip to the server, ending with the store call it is part of (`call`), or
        `call_timeout` from now outside one."""
        now = asyncio.get_running_loop().time()
        ends = _CALL_ENDS.get()
        end = now + call_timeout if ends is None else min(ends, now + call_timeout)
        return cls(asyncio.timeout_at(end), now + retry_for)

    def retries_over(self) -> bool:
        return asyncio.get_running_loop().time() >= self.retry_until

    def settling(self) -> Clock:
        """Asking what became of a write whose answer was lost goes on until the call's
        deadline: giving up early would leave its outcome unknown for no reason."""
        end = self.limit.when()
        return Clock(self.limit, self.retry_until if end is None else max(end, self.retry_until))


@attrs.define
class _Attempt(Generic[T]):
    """A write under way; `sent` while a try of it may have reached the server unanswered
    (what a deadline or a cancellation reaching the call then leaves unsettled)."""

    operation: str
    key: str | None
    write: Write[T]
    sent: bool = False
    backend: Backend | None = None  # the server process of a try that got no answer


@attrs.frozen
class Backend:
    """A server process, as its connection said when it opened: its pid and start time
    (together, one process: a pid is reused, a start time with it is not)."""

    pid: int
    started: Any  # (a timestamp, as the server gave it)

    async def end(self, conn: Any) -> None:
        """End this process if it still runs (it may hold a write: waiting on a lock, or
        still running), and wait a little for it to be gone, so that the write cannot land
        after it was found not to have."""
        with contextlib.suppress(Exception):  # (not ours to end, or the server is away)
            await conn.fetchval(_END_BACKEND, self.pid, self.started)
            for _ in range(100):  # at most about 2 s: then the write id tells anyway
                if not await conn.fetchval(_BACKEND_RUNS, self.pid, self.started):
                    return
                await asyncio.sleep(0.02)


_BACKEND_OF_CONNECTION = (
    "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
)
_END_BACKEND = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND backend_start = $2"
)
_BACKEND_RUNS = "SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = $1 AND backend_start = $2"


@attrs.frozen
class _Unsettled:
    """A write whose outcome is not known yet (its answer lost, its call out of time or
    cancelled), and the server process that may still hold it."""

    operation: str
    key: str | None
    write: Write[Any]
    backend: Backend | None

    async def settle(self, conn: Any) -> Settled[Any]:
        """End the process that may still hold the write, then ask by its write id."""
        if self.backend is not None:
            await self.backend.end(conn)
        return await self.write.settle(conn)


@attrs.define
class Outage:
    """The server not answering, said once in the log when it starts and once when it ends,
    rather than a traceback per failed try."""

    where: str
    since: float | None = None

    def failed(self, error: BaseException, retry_for: float) -> None:
        """A connection could not be opened (or the server said it is going down)."""
        if self.since is not None:
            return
        self.since = time.monotonic()
        logger.warning(
            "PostgreSQL at %s is not answering (%s: %s); calls retry for up to %g s",
            self.where,
            type(error).__name__,
            error,
            retry_for,
        )

    def going_down(self, error: BaseException, retry_for: float) -> None:
        """The server said it is shutting down: an outage begins (a broken connection alone
        is a stale one, replaced without a word)."""
        if getattr(error, "sqlstate", None) in _SHUTTING_DOWN:
            self.failed(error, retry_for)

    def answered(self) -> None:
        if self.since is None:
            return
        logger.warning(
            "PostgreSQL at %s answers again, after %.1f s",
            self.where,
            time.monotonic() - self.since,
        )
        self.since = None


class PostgresConnection:
    """A lazily opened, bounded asyncpg pool on one database, with the component's schema."""

    def __init__(
        self,
        dsn: str,
        schema: Schema,
        *,
        pool_size: int = 10,
        retry_for: float = 30.0,
        call_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        statement_cache_size: int | None = None,
        read_only: bool = False,
    ) -> None:
        if not isinstance(dsn, str) or not dsn:
            raise TypeError(
                f"dsn must be a PostgreSQL connection string such as "
                f"'postgresql://user@host:5432/db', got {dsn!r}"
            )
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ValueError(f"pool_size must be an int >= 1, got {pool_size!r}")
        for name, seconds in (("retry_for", retry_for), ("call_timeout", call_timeout)):
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, int | float)
                or math.isnan(seconds)
                or seconds < 0
            ):
                raise ValueError(f"{name} must be a number of seconds >= 0, got {seconds!r}")
        if call_timeout == 0:
            raise ValueError("call_timeout must be more than 0 seconds: every call needs some")
        if statement_cache_size is not None and (
            isinstance(statement_cache_size, bool)
            or not isinstance(statement_cache_size, int)
            or statement_cache_size < 0
        ):
            raise ValueError(
                f"statement_cache_size must be an int >= 0 (0 behind PgBouncer's transaction "
                f"pooling) or None, got {statement_cache_size!r}"
            )
        self._driver = driver()
        self.dsn = dsn
        self._schema = schema
        self._pool_size = pool_size
        self._retry_for = float(retry_for)
        self._call_timeout = float(call_timeout)
        self._connect_timeout = connect_timeout
        self._statement_cache_size = statement_cache_size
        self.read_only = read_only
        self._pool: asyncpg.Pool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Lock | None = None
        self._unsettled: list[_Unsettled] = []
        # Each open connection's server process, by the pid it gave (see `_note_backend`).
        self._backends: dict[int, Backend] = {}
        # Behind a transaction pooler a connection has no one server process of its own.
        self._pooled = statement_cache_size == 0
        self._closing: set[asyncio.Task[None]] = set()  # pools given up, closing gracefully
        self._outage = Outage(where=server_of(dsn))

    @property
    def retry_for(self) -> float:
        """How long, in seconds, a transient failure is retried."""
        return self._retry_for

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """One store call: every wait and every trip to the server in it share one deadline,
        `call_timeout` from its start, so that a call queued behind earlier ones (their
        turn on one entry, a group-commit batch) has only what is left. A call made inside
        another keeps the outer one's."""
        if _CALL_ENDS.get() is not None:
            yield
            return
        token = _CALL_ENDS.set(asyncio.get_running_loop().time() + self._call_timeout)
        try:
            yield
        finally:
            _CALL_ENDS.reset(token)

    async def queued(
        self,
        operation: str,
        key: str | None,
        wait: Awaitable[T],
        *,
        writes: bool = True,
        left: Callable[[], bool] = lambda: False,
    ) -> T:
        """`wait` (a turn behind earlier calls, a batch's outcome) until the call's deadline.
        Past it: `StoreError` (for a write saying "not applied"), or `OutcomeUnknown` when
        `left()` says the write is on its way (a batch runs on without its caller)."""
        ends = _CALL_ENDS.get()
        if ends is None:
            return await wait
        # A moment after the deadline: a trip to the server made for this call ends first,
        # with what it knows (applied, not, or unknown), rather than this wait.
        limit = asyncio.timeout_at(ends + 0.05)
        try:
            async with limit:
                return await wait
        except TimeoutError as error:
            if not limit.expired():
                raise
            why = (
                f"no answer within call_timeout ({self._call_timeout:g} s), waiting for the "
                f"store's earlier calls or for the batch it went with"
            )
            if left():
                raise outcome_unknown(operation, key, f"{why}; it is still on its way") from error
            said = f"not applied: {why}" if writes else why
            raise StoreError(operation, TimeoutError(said), key=key) from error

    async def read(self, operation: str, key: str | None, body: Callable[[Any], Awaitable[T]]) -> T:
        """Run a read, retried through any transient failure, ended at `call_timeout`."""
        clock = self._clock()
        with self._ending(clock, operation, key, None):
            async with clock.limit:
                await self._settle_earlier(clock)
                return await self._read(operation, key, body, clock)
        raise AssertionError("unreachable: _ending raises")  # pragma: no cover

    async def _read(
        self, operation: str, key: str | None, body: Callable[[Any], Awaitable[T]], clock: Clock
    ) -> T:
        pause = 0.01
        while True:
            try:
                result = await self._on_connection(self._in_transaction(body))
            except Exception as error:
                if not self._retryable(error) or clock.retries_over():
                    raise _store_error(operation, key, error) from error
                self._outage.going_down(error, self._retry_for)
            else:
                self._outage.answered()
                return result
            pause = await _backoff(pause)

    async def write(self, operation: str, key: str | None, write: Write[T]) -> T:
        """Run a write under the retry policy in the module's docstring, ended at
        `call_timeout`."""
        if self.read_only:
            raise StoreError(
                operation,
                PermissionError("the store was opened with read_only=True"),
                key=key,
            )
        clock = self._clock()
        attempt = _Attempt(operation, key, write)
        with self._ending(clock, operation, key, attempt):
            async with clock.limit:
                await self._settle_earlier(clock)
                return await self._write(attempt, clock)
        raise AssertionError("unreachable: _ending raises")  # pragma: no cover

    async def _write(self, attempt: _Attempt[T], clock: Clock) -> T:
        operation, key, write = attempt.operation, attempt.key, attempt.write
        pause = 0.01
        while True:
            try:
                result = await self._on_connection(write.run, attempt)
            except UserCodeFailed as failed:
                raise failed.error from None
            except Exception as error:
                if isinstance(error, StateError):
                    raise
                if _statement_lost(error):
                    self._behind_transaction_pooler()
                if attempt.sent and (_outcome_unknown(error) or _statement_lost(error)):
                    settled = await self._settle(attempt, clock, error)
                    if settled.outcome is Outcome.APPLIED:
                        self._outage.answered()
                        return settled.result  # type: ignore[return-value]
                elif not (_rolled_back(error) or (not attempt.sent and transient(error))):
                    raise _store_error(operation, key, error) from error
                attempt.sent = False  # it certainly did not land
                self._outage.going_down(error, self._retry_for)
                if clock.retries_over():
                    raise StoreError(
                        operation,
                        RuntimeError(f"not applied: {type(error).__name__}: {error}"),
                        key=key,
                    ) from error
            else:
                self._outage.answered()
                return result
            pause = await _backoff(pause)

    async def _settle(self, attempt: _Attempt[Any], clock: Clock, error: Exception) -> Settled[Any]:
        """What became of a write whose answer was lost; a StoreError saying its outcome is
        unknown when the database cannot say (or cannot be asked before the deadline: then
        the next call asks again)."""
        operation, key = attempt.operation, attempt.key
        unsettled = _Unsettled(operation, key, attempt.write, attempt.backend)
        await self._reconnect()
        try:
            settled = await self._read(
                f"{operation} (checking a lost answer)", key, unsettled.settle, clock.settling()
            )
        except StoreError:
            self._unsettled.append(unsettled)
            raise outcome_unknown(
                operation,
                key,
                "the connection broke before the server answered, and the server could not "
                "be asked (the store's next call asks again)",
            ) from error
        if settled.outcome is Outcome.UNKNOWN:
            raise outcome_unknown(operation, key, UNTRACEABLE) from error
        logger.info(
            "PostgreSQL store: the %s whose answer was lost (%s) was %s",
            operation,
            type(error).__name__,
            settled.said(),
        )
        return settled

    async def _settle_earlier(self, clock: Clock) -> None:
        """Ask what became of writes whose calls ended without an answer (a deadline, a
        cancellation), by their write ids, and say it in the log: never assumed."""
        if self._unsettled:
            await self._reconnect()
        while self._unsettled:
            earlier = self._unsettled.pop(0)  # (another call asks about the next one)
            try:
                settled = await self._read(
                    f"{earlier.operation} (checking an earlier call's outcome)",
                    earlier.key,
                    earlier.settle,
                    clock,
                )
            except StateError as error:  # (a save another one took the place of did not land)
                if isinstance(error, StoreError):
                    self._unsettled.insert(0, earlier)
                    raise
                settled = Settled(Outcome.NOT_APPLIED)
            except BaseException:
                self._unsettled.insert(0, earlier)  # asked again by the next call
                raise
            logger.warning(
                "PostgreSQL store: the %s whose call ended without an answer was %s",
                earlier.operation,
                settled.said(),
            )

    async def _reconnect(self) -> None:
        """Before asking what became of a write whose answer was lost: every later trip goes
        on a connection opened from now on. A crash can catch a commit half-way (its record
        written, the transaction not yet visible) while the server's other sessions still
        answer for a moment, and asked there the write would read as not applied; recovery
        then commits it. A new connection is only answered by a server that is not going
        down, and after a crash only once recovery has decided every commit."""
        if self._pool is not None and self._loop is asyncio.get_running_loop():
            await self._pool.expire_connections()

    async def _on_connection(
        self, work: Callable[[Any], Awaitable[T]], attempt: _Attempt[Any] | None = None
    ) -> T:
        """`work` on a pooled connection. A connection left in the middle of a statement (the
        call's deadline, a cancellation) is closed, not pooled: its answer may still come.

        Only a connection that cannot be opened is an outage to log: a pooled one a restart
        broke fails its next statement and is replaced, which is nobody's concern."""
        try:
            pool = await self._open()
            conn = await pool.acquire()
        except Exception as error:
            if transient(error):
                self._outage.failed(error, self._retry_for)
            raise
        # Asked now: once the connection breaks, asyncpg's pool detaches it, and asking
        # then raises (an InterfaceError in place of the error that broke it).
        pid = conn.get_server_pid()
        try:
            if attempt is not None:
                attempt.sent = True
                attempt.backend = None
            return await work(conn)
        except BaseException as error:
            if attempt is not None and not self._pooled:
                attempt.backend = self._backends.get(pid)
            if isinstance(error, asyncio.CancelledError):
                self._backends.pop(pid, None)
                with contextlib.suppress(driver().InterfaceError):  # (closed already)
                    conn.terminate()
            raise
        finally:
            await pool.release(conn)

    async def _note_backend(self, conn: Any) -> None:
        """Note which server process a new connection talks to, so that a write it leaves
        unanswered can be ended there (not behind a pooler: no connection has its own)."""
        if self._pooled or self.read_only:
            return
        row = await conn.fetchrow(_BACKEND_OF_CONNECTION)
        if row is not None:
            self._backends[conn.get_server_pid()] = Backend(int(row[0]), row[1])

    def _in_transaction(self, body: Callable[[Any], Awaitable[T]]) -> Callable[[Any], Awaitable[T]]:
        """A read as it runs on a read-only store: in a read-only transaction (set per
        transaction, not per session, which a transaction pooler such as PgBouncer refuses)."""
        if not self.read_only:
            return body

        async def read_only(conn: Any) -> T:
            async with conn.transaction(readonly=True):
                return await body(conn)

        return read_only

    def _retryable(self, error: BaseException) -> bool:
        if _statement_lost(error):
            self._behind_transaction_pooler()
            return True
        return transient(error)

    def _behind_transaction_pooler(self) -> None:
        """A prepared statement vanished between two messages: a transaction pooler (such
        as PgBouncer) sits in front. From now on, no statement is kept prepared."""
        if self._statement_cache_size == 0:
            return
        logger.warning(
            "PostgreSQL store at %s: a prepared statement vanished, so a transaction pooler "
            "(such as PgBouncer) is in front; statements are no longer cached (give "
            "statement_cache_size=0 to start that way)",
            self._outage.where,
        )
        self._statement_cache_size = 0
        self._pooled = True
        if self._pool is not None:  # calls on it finish there; new ones take a new pool
            old, self._pool = self._pool, None
            closing = asyncio.get_running_loop().create_task(old.close())
            closing.add_done_callback(lambda task: task.cancelled() or task.exception())
            self._closing.add(closing)
            self._closing = {task for task in self._closing if not task.done()}

    def _clock(self) -> Clock:
        return Clock.start(self._call_timeout, self._retry_for)

    @contextlib.contextmanager
    def _ending(
        self, clock: Clock, operation: str, key: str | None, attempt: _Attempt[Any] | None
    ) -> Iterator[None]:
        """A call that ran out of `call_timeout` (or was cancelled) with a write in flight
        leaves that write to be settled by the next call."""
        try:
            yield
        except TimeoutError as error:
            if not clock.limit.expired():
                raise
            why = f"no answer within call_timeout ({self._call_timeout:g} s)"
            if attempt is not None and attempt.sent:
                self._unsettled.append(_Unsettled(operation, key, attempt.write, attempt.backend))
                raise outcome_unknown(
                    operation, key, f"{why}; the store's next call asks what became of it"
                ) from error
            outcome = "" if attempt is None else "not applied: "
            raise StoreError(operation, TimeoutError(f"{outcome}{why}"), key=key) from error
        except asyncio.CancelledError:
            if attempt is not None and attempt.sent:
                self._unsettled.append(_Unsettled(operation, key, attempt.write, attempt.backend))
            raise

    async def close(self) -> None:
        """Close the pool's connections; the store reopens them on next use."""
        pool, self._pool = self._pool, None
        closing, self._closing = self._closing, set()
        if self._loop is asyncio.get_running_loop():
            await asyncio.gather(*closing, return_exceptions=True)
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
                cache = self._statement_cache_size
                pool = await self._driver.create_pool(
                    self.dsn,
                    # No floor: asyncpg would keep reopening it through an outage, with a
                    # traceback in the log each time (the calls' own retries say it once).
                    min_size=0,
                    max_size=self._pool_size,
                    timeout=self._connect_timeout,
                    command_timeout=None,
                    reset=_keep_session,
                    init=self._note_backend,
                    **({} if cache is None else {"statement_cache_size": cache}),
                )
                try:
                    async with pool.acquire() as conn:
                        if self.read_only:
                            async with conn.transaction(readonly=True):
                                await _check_read_only(conn, self._schema)
                        else:
                            await _ensure_schema(conn, self._schema)
                except BaseException:
                    pool.terminate()
                    raise
                self._pool = pool
        return self._pool


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
        conn = await driver().connect(dsn, timeout=timeout, statement_cache_size=0)
    except Exception as error:
        raise StoreNotOpened("read-only open", error) from error
    try:
        async with conn.transaction(readonly=True):
            return await components(conn)
    finally:
        conn.terminate()


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
    """Create or migrate the component's tables, only when they are missing or older: a
    database already at this version is only read, so that a read-only server (a replica, a
    demoted primary) opens. One at an older version this code reads as it is
    (`Schema.readable_from`) opens there too, unmigrated: its primary migrates it."""
    current = await _current_version(conn, schema.component)
    if current == schema.version:
        return
    try:
        await _create_or_migrate(conn, schema)
    except driver().PostgresError as error:
        readable = current is not None and schema.readable_from <= current <= schema.version
        if getattr(error, "sqlstate", None) != READ_ONLY_SERVER or not readable:
            raise


async def _create_or_migrate(conn: Any, schema: Schema) -> None:
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


async def _current_version(conn: Any, component: str) -> int | None:
    """The component's schema version in the database, None when it has none (yet)."""
    if await conn.fetchval("SELECT to_regclass('statekernel_schema') IS NULL"):
        return None
    found = await conn.fetchval(
        "SELECT version FROM statekernel_schema WHERE component = $1", component
    )
    return None if found is None else int(found)


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


def outcome_unknown(operation: str, key: str | None, why: str) -> OutcomeUnknown:
    """The error of a write that may or may not have landed, `why` it cannot be told."""
    return OutcomeUnknown(
        operation,
        RuntimeError(
            f"outcome unknown: {why}, so this write may or may not have landed: read it back "
            f"before writing it again"
        ),
        key=key,
    )


def refused(error: BaseException) -> bool:
    """The server refused the statement itself (a constraint it broke, a value it cannot
    take): nothing was applied, and sending it unchanged would fail again."""
    return isinstance(error, driver().PostgresError) and not transient(error)


def transient(error: BaseException) -> bool:
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


def _statement_lost(error: BaseException) -> bool:
    """A prepared statement was not where the client left it: a transaction pooler in front
    gave the next message another server connection. The statement did not run."""
    return getattr(error, "sqlstate", None) in _STATEMENT_LOST


def _rolled_back(error: BaseException) -> bool:
    return getattr(error, "sqlstate", None) in _ROLLED_BACK


def _store_error(operation: str, key: str | None, error: BaseException) -> BaseException:
    if isinstance(error, StateError):
        return error
    if getattr(error, "sqlstate", None) == READ_ONLY_SERVER:
        error = PermissionError(
            f"the server is read-only (a replica, a demoted primary, or "
            f"default_transaction_read_only is on), so it refused the write ({error}); send "
            f"writes to the primary"
        )
    return StoreError(operation, error, key=key)


def server_of(dsn: str) -> str:
    """Where a DSN (a URI: the stores hand over `as_uri`'s) points, `host:port/db`, for
    the log: nothing of its user, password or options."""
    parts = urllib.parse.urlsplit(dsn)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.hostname or 'localhost'}{port}{parts.path}"


async def _backoff(pause: float) -> float:
    await asyncio.sleep(random.uniform(pause / 2, pause))
    return min(pause * 2, 0.5)
