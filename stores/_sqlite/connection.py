"""One SQLite file as the stores use it: a lazily opened aiosqlite connection, and a pipeline
that turns many concurrent operations into few thread hops and few transactions.

Why a pipeline. aiosqlite runs every call on the connection's own thread, and each call is
a round trip to that thread (150-230 µs however little the SQL costs). So a store operation
is one plain function (`SqliteOp.run`) run on that thread in one hop, never a chain of
awaited calls; and operations that arrive while a hop is under way are queued and run
together in the next hop, the writes among them in one `BEGIN IMMEDIATE` transaction (group
commit): 64 concurrent sets cost about two hops and two commits instead of 64 of each. Each
operation still gets its own outcome: a compare-and-set failure fails that operation only,
because every operation checks before it writes and writes with one statement, which SQLite
keeps atomic on its own.

Durability. The journal is WAL and `synchronous` is NORMAL by default: a transaction whose
COMMIT returned is in the WAL file, handed to the operating system, so it survives the
process being killed (SIGKILL included) and the file stays consistent. What NORMAL gives up
is the last few transactions on power loss or an OS crash (the file is still never
corrupt). `synchronous="FULL"` fsyncs at every commit (once per group) and survives those too.

Several processes. Every write transaction starts with BEGIN IMMEDIATE, taking the write
lock up front so it never has to upgrade a read lock and fail half way. A lock held by
another process is waited for here, on the connection's thread, with jittered backoff
(SQLite's own busy timeout is 0, so that nothing ever waits on the event loop's thread);
"database is locked" reaches a caller only after `LOCK_PATIENCE_SECONDS` of uninterrupted
contention, as a `StoreError`.

On the loop's thread. A hop to the connection's thread and back costs more than a small
write in NORMAL mode (a few tens of microseconds: no fsync). So when the connection is
idle, an op that says it is small (`inline`: a small set, an `update`, a delete, a read of
one entry or one prefix) runs on the event loop's thread instead, in the next turn of the
loop, together with every such op submitted in this one: one transaction for all of them
(group commit without a hop), one attempt. Under load the same holds for each queued batch
made only of such ops: it runs on the loop's thread when its turn comes, so a stream of
small writers never pays a hop (measured: 4,000 concurrent sends to team inboxes went from
84 to 61 µs of CPU each). A step's save runs there at once, alone (`at_once`): it rarely
has company, and waiting a turn for some costs the step more than it saves. If another
process holds the lock, the batch goes to the connection's thread and waits there.

Told of what it wrote. A store may give `on_commit`: it is called on the loop's thread
with the write ops of every transaction that committed, right after the commit (and before
their callers resume), whichever path they took, and also with an op whose caller was
cancelled while it ran on the connection's thread (it may have landed). The SQLite profile
store tells its change feeds that way.

Schema. Each component's schema version (`profile_store`, `thread_store`) is kept in the
file, in table `statekernel_schema`, so that a later version of this package can migrate a
file, and this one refuses a file written by a newer one instead of misreading it. Both
stores may share one file.

The only SQL not parameterised is PRAGMA values (SQLite cannot bind them); they come from a
closed set of literals, never from a caller's string.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar, cast

import aiosqlite
import attrs

from statekernel import StateError, StoreError, StoreNotOpened

from .._schema_versions import read_only_refusal

__all__ = [
    "FILE_MODE",
    "FOLDER_MODE",
    "LOCK_PATIENCE_SECONDS",
    "OnCommit",
    "OpFailed",
    "OtherTables",
    "Schema",
    "SqliteConnection",
    "SqliteOp",
    "Synchronous",
    "read_components",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

LOCK_PATIENCE_SECONDS = 120.0
"""How long a busy database is retried before the operation fails with StoreError."""

_MAX_IN_FLIGHT = 1
"""Hops sent to the connection's thread and not yet answered.

One: under load the queue fills while a hop runs, so batches stay large. Two in flight
(the loop handing out one batch's results while the thread runs the next) measured no
faster on CPython, where both sides spend most of that time holding the GIL, and made
batches smaller."""

Synchronous = Literal["NORMAL", "FULL"]
OtherTables = Literal["refuse", "allow"]
OnCommit = Callable[[Sequence["SqliteOp[Any]"]], None]
"""Told the write ops of a transaction that committed (see the module's docstring)."""

FILE_MODE = 0o600
"""The permissions of a database file the stores create (and so of its -wal and -shm): the
owner's only, since a thread's journal and profiles hold what users said."""

FOLDER_MODE = 0o700
"""The permissions of a folder the stores create for a database file of `FILE_MODE`: the
owner's only. Another file mode gives its folders the same permissions, with search (x)
wherever it reads (r): 0o640 makes 0o750 folders."""


class SqliteOp(Protocol[T_co]):
    """One store operation: a plain function of the connection, run on its thread."""

    @property
    def writes(self) -> bool:
        """Whether it writes: a batch holding any write runs in one BEGIN IMMEDIATE."""
        ...

    def run(self, conn: sqlite3.Connection) -> T_co:
        """Do the work; raise a StateError (e.g. VersionConflict) to fail this op only."""
        ...

    def error(self, cause: BaseException) -> BaseException:
        """What the caller sees when this op failed with `cause` (not a StateError, which
        passes as it is): a StoreError naming the key, or the cause itself."""
        ...


def runs_inline(op: SqliteOp[Any]) -> bool:
    """Whether `op` may run on the event loop's own thread when the connection is idle: an
    op says so with an `inline` attribute (True for a small write: a set, a step's save)."""
    return bool(getattr(op, "inline", False))


def runs_at_once(op: SqliteOp[Any]) -> bool:
    """Whether an inline op runs at once, alone, rather than with the others submitted in
    the same turn of the loop: an op says so with `at_once` (a step's save: one per run and
    step, rarely in company, and every microsecond of it is the durable step's)."""
    return bool(getattr(op, "at_once", False))


@attrs.frozen
class Schema:
    """A component's tables: created together with its version row when first missing.

    `migrations[n]` are the steps that take a file from version `n` to `n + 1`: SQL
    statements, or functions of the connection for a step SQL cannot say (decoding a blob);
    a file at an older version is migrated step by step when opened, in the open's
    transaction."""

    component: str
    version: int
    statements: tuple[str, ...]
    migrations: Mapping[int, tuple[str | Callable[[sqlite3.Connection], None], ...]] = attrs.field(
        factory=dict
    )
    readable_from: int = attrs.field()
    """The oldest version a read-only open reads as it is (it cannot migrate): one whose
    later versions only added what its readers can do without."""

    @readable_from.default
    def _current(self) -> int:
        return self.version


@attrs.frozen
class OpFailed:
    """The outcome of one op of a batch that failed on its own (the batch went on)."""

    error: BaseException


class SqliteConnection:
    """One SQLite file: opened on first use, operations pipelined, closed by `close()`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: Schema,
        *,
        synchronous: Synchronous = "NORMAL",
        file_mode: int = FILE_MODE,
        other_tables: OtherTables = "refuse",
        read_only: bool = False,
        on_commit: OnCommit = lambda ops: None,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
        if (
            isinstance(file_mode, bool)
            or not isinstance(file_mode, int)
            or not 0 <= file_mode <= 0o777
        ):
            raise ValueError(f"file_mode must be permission bits such as 0o600, got {file_mode!r}")
        if other_tables not in ("refuse", "allow"):
            raise ValueError(f"other_tables must be 'refuse' or 'allow', got {other_tables!r}")
        self.path = os.fspath(path)
        self._file_mode = file_mode
        self._other_tables = other_tables
        self._schema = schema
        self._synchronous = synchronous
        self.read_only = read_only
        self._on_commit = on_commit
        # A small write in NORMAL mode (no fsync) costs a few tens of microseconds, less
        # than a hop to the connection's thread and back: it runs inline (`_inline`).
        self._inline = synchronous == "NORMAL"
        self._aio: aiosqlite.Connection | None = None
        self._raw: sqlite3.Connection | None = None
        self._execute: Callable[..., Awaitable[Any]] | None = None
        self._opening = asyncio.Lock()
        self._in_flight = 0
        self._queue: list[tuple[SqliteOp[Any], asyncio.Future[Any]]] = []
        self._on_loop: list[tuple[SqliteOp[Any], asyncio.Future[Any]]] = []  # `_run_on_loop`
        self._batches: set[asyncio.Task[None]] = set()

    async def submit(self, op: SqliteOp[T]) -> T:
        """Run `op` on the connection and return its result.

        A small op on an idle connection runs on the loop's thread (`_run_on_loop`), with
        the others submitted in this turn of the loop. Else, with nothing under way and
        nobody queued, the caller sends its op to the connection's thread at once (one hop,
        no task switch); otherwise the op joins the queue, which goes to the thread as one
        batch when the batch under way returns. Batches run in the order they were sent, so
        operations take effect in the order they were submitted.
        """
        if self.read_only and op.writes:
            raise StoreError(
                f"write to SQLite file {self.path!r}",
                PermissionError("the store was opened with read_only=True"),
            )
        if self._on_loop and not self._queue and runs_inline(op):  # the loop's batch: join
            return cast(T, await self._join(self._on_loop, op))
        if self._queue or self._in_flight >= _MAX_IN_FLIGHT:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._queue.append((op, future))
            return cast(T, await future)
        if self._raw is not None and self._inline and runs_inline(op) and runs_at_once(op):
            outcome = _inline(self._raw, [op])
            if outcome is not _BUSY:
                if isinstance(outcome[0], OpFailed):
                    raise _op_error(op, outcome[0].error)
                self._committed([op], outcome)
                return cast(T, outcome[0])
        elif self._raw is not None and self._inline and runs_inline(op):
            # Run on the loop's thread, with whatever else is submitted in this turn of the
            # loop (one transaction for all: group commit, no hop). Counted in flight, so
            # nothing reaches the connection's thread meanwhile.
            self._in_flight += 1
            asyncio.get_running_loop().call_soon(self._run_on_loop)
            return cast(T, await self._join(self._on_loop, op))
        self._in_flight += 1
        try:
            outcome = (await self._run_batch([op]))[0]
        except asyncio.CancelledError:
            # The connection's thread may still be running the op: it stays in flight
            # until a no-op sent after it comes back (the thread runs calls in order).
            self._batches.add(task := asyncio.ensure_future(self._release_after_thread(op)))
            task.add_done_callback(self._batches.discard)
            raise
        except Exception as exc:
            self._in_flight -= 1
            self._dispatch()
            raise _op_error(op, exc)  # noqa: B904 - a StoreError sets its own __cause__
        self._in_flight -= 1
        self._dispatch()
        if isinstance(outcome, OpFailed):
            raise _op_error(op, outcome.error)
        self._committed([op], [outcome])
        return cast(T, outcome)

    async def _release_after_thread(self, op: SqliteOp[Any]) -> None:
        try:
            if self._execute is not None:
                with contextlib.suppress(Exception):
                    await self._execute(_nothing)
        finally:
            self._in_flight -= 1
            self._committed([op], [None])  # its caller left: it may have landed
            self._dispatch()

    def _committed(self, ops: Sequence[SqliteOp[Any]], outcomes: Sequence[Any]) -> None:
        """Tell `on_commit` the write ops among `ops` that did not fail."""
        writes = [
            op
            for op, outcome in zip(ops, outcomes, strict=True)
            if op.writes and not isinstance(outcome, OpFailed)
        ]
        if writes:
            self._on_commit(writes)

    @staticmethod
    async def _join(batch: list[tuple[SqliteOp[Any], asyncio.Future[Any]]], op: SqliteOp[T]) -> T:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        batch.append((op, future))
        return cast(T, await future)

    def _run_on_loop(self) -> None:
        """Run the loop's batch in one transaction on the loop's thread, at once and without
        waiting for a lock: if another process holds it, the batch goes to the connection's
        thread, which waits."""
        batch, self._on_loop = self._on_loop, []
        try:
            outcomes = _inline(self._raw, [op for op, _ in batch]) if self._raw else _BUSY
            if outcomes is _BUSY:
                self._queue[:0] = batch  # first in line: they were submitted first
            else:
                _settle(batch, outcomes)
                self._committed([op for op, _ in batch], outcomes)
        except Exception as exc:  # the batch failed as a whole (COMMIT itself, say)
            for op, future in batch:
                if not future.done():
                    future.set_exception(_op_error(op, exc))
        finally:
            self._in_flight -= 1
            self._dispatch()

    async def close(self) -> None:
        """Finish queued operations, then close the connection (it reopens on next use)."""
        while self._batches:
            await asyncio.wait(set(self._batches))
        aio, self._aio, self._raw, self._execute = self._aio, None, None, None
        if aio is not None:
            await aio.close()

    def _dispatch(self) -> None:
        if self._queue and self._in_flight < _MAX_IN_FLIGHT:
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._run_queued())
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)

    async def _run_queued(self) -> None:
        """Run the queue in batches until it stays empty for one turn of the event loop."""
        batch: list[tuple[SqliteOp[Any], asyncio.Future[Any]]] = []
        cancelled = False
        try:
            while True:
                # Let the callers just woken by the previous batch queue their next op
                # (this task still counts as in flight, so they queue rather than each
                # sending a hop of one): a steady stream of writers stays in big batches.
                await asyncio.sleep(0)
                batch, self._queue = self._queue, []
                if not batch:
                    return
                await self._answer(batch)
                batch = []
        except asyncio.CancelledError:  # the loop is shutting down: release every waiter
            cancelled = True
            for _, future in batch + self._queue:
                future.cancel()
            self._queue = []
            raise
        finally:
            self._in_flight -= 1
            if not cancelled:
                self._dispatch()

    async def _answer(self, batch: list[tuple[SqliteOp[Any], asyncio.Future[Any]]]) -> None:
        ops = [op for op, _ in batch]
        try:
            outcomes = _BUSY
            if self._raw is not None and self._inline and all(map(runs_inline, ops)):
                outcomes = _inline(self._raw, ops)  # small writes under load: no hop either
            if outcomes is _BUSY:
                outcomes = await self._run_batch(ops)
        except Exception as exc:
            for op, future in batch:
                if not future.done():
                    future.set_exception(_op_error(op, exc))
            return
        _settle(batch, outcomes)
        self._committed(ops, outcomes)

    async def _run_batch(self, ops: Sequence[SqliteOp[Any]]) -> list[Any]:
        if self._execute is None:
            await self._open()
        assert self._execute is not None
        return cast(list[Any], await self._execute(_run_ops, self._raw, ops))

    async def _open(self) -> None:
        async with self._opening:
            if self._execute is not None:
                return
            if self.read_only:
                _require_file(self.path)
                target, uri = read_only_uri(self.path), True
            else:
                try:
                    _create_file(self.path, self._file_mode)
                except OSError as exc:
                    raise _cannot_write(self.path, exc) from exc
                if os.path.exists(self.path) and not os.access(self.path, os.W_OK):
                    # SQLite would open it read-only without a word, and fail at a write.
                    raise _cannot_write(self.path)
                target, uri = self.path, False
            pending = aiosqlite.connect(
                target,
                uri=uri,
                timeout=0,  # never wait inside SQLite: `_retrying` waits, off the loop
                isolation_level=None,
                check_same_thread=False,  # `_inline` uses it from the loop's thread, when idle
            )
            # aiosqlite's worker thread is not a daemon, so a store nobody closed would keep
            # the process from exiting. Every operation that returned has committed, so
            # letting the thread die with the process loses nothing a caller was told of.
            worker = getattr(pending, "_thread", None)
            if isinstance(worker, threading.Thread):
                worker.daemon = True
            try:
                aio = await pending
            except Exception as exc:
                # aiosqlite stops its thread on a failed connect but does not wait for it;
                # wait here, or the thread would answer into an event loop closed meanwhile.
                deadline = time.monotonic() + 5.0
                while (
                    isinstance(worker, threading.Thread)
                    and worker.is_alive()
                    and time.monotonic() < deadline
                ):
                    await asyncio.sleep(0.001)
                if self.read_only:
                    raise StoreError(f"open of SQLite file {self.path!r}", exc) from exc
                raise _cannot_write(self.path, exc) from exc
            # aiosqlite has no public way to run a function on its thread; `_execute` is
            # the (long-stable) internal it builds every public method on. Running a whole
            # operation in one call is what makes an operation cost one hop, not several.
            execute: Callable[..., Awaitable[Any]] = aio._execute
            raw = aio._conn
            try:
                if self.read_only:
                    await execute(_check_read_only, raw, self.path, self._schema)
                else:
                    await execute(
                        _prepare, raw, self._schema, self._synchronous, self._other_tables
                    )
            except BaseException as exc:
                await aio.close()
                if isinstance(exc, StateError) or not isinstance(exc, Exception):
                    raise
                if self.read_only:
                    raise StoreError(f"open of SQLite file {self.path!r}", exc) from exc
                raise _cannot_write(self.path, exc) from exc
            self._aio, self._raw, self._execute = aio, raw, execute


def _nothing() -> None:
    """A call that only marks its place in the connection's thread's queue."""


def _settle(batch: list[tuple[SqliteOp[Any], asyncio.Future[Any]]], outcomes: list[Any]) -> None:
    """Hand each op's caller its outcome (an `OpFailed` as its error)."""
    for (op, future), outcome in zip(batch, outcomes, strict=True):
        if future.done():  # its caller was cancelled
            continue
        if isinstance(outcome, OpFailed):
            future.set_exception(_op_error(op, outcome.error))
        else:
            future.set_result(outcome)


def _op_error(op: SqliteOp[Any], exc: BaseException) -> BaseException:
    return exc if isinstance(exc, StateError) else op.error(exc)


# -- run on the connection's thread ---------------------------------------------------------


def _run_ops(conn: sqlite3.Connection, ops: Sequence[SqliteOp[Any]]) -> list[Any]:
    if any(op.writes for op in ops):
        return _retrying(lambda: _in_transaction(conn, lambda: _all(conn, ops, True)))
    return _retrying(lambda: _all(conn, ops, False))


def _all(conn: sqlite3.Connection, ops: Sequence[SqliteOp[Any]], in_tx: bool) -> list[Any]:
    """Run a batch; a batch of one kind of op whose class offers `run_many` in one go.

    `run_many(conn, ops) -> outcomes` (an `OpFailed` for an op that failed alone) lets an
    op kind replace N statements by a few set-based ones, which is most of a big batch's
    cost. If it fails as a whole, what it wrote is rolled back to a savepoint and the ops
    run one by one, so that only the op at fault fails.
    """
    kind = type(ops[0])
    run_many = getattr(kind, "run_many", None)
    if run_many is None or len(ops) < 2 or any(type(op) is not kind for op in ops):
        return _each(conn, ops, in_tx)
    if in_tx:
        conn.execute("SAVEPOINT run_many")
    try:
        outcomes: list[Any] = run_many(conn, ops)
    except Exception as exc:
        if _is_busy(exc) or (in_tx and not conn.in_transaction):
            raise
        if in_tx:
            conn.execute("ROLLBACK TO run_many")
            conn.execute("RELEASE run_many")
        return _each(conn, ops, in_tx)
    if in_tx:
        conn.execute("RELEASE run_many")
    return outcomes


def _each(conn: sqlite3.Connection, ops: Sequence[SqliteOp[Any]], in_tx: bool) -> list[Any]:
    outcomes: list[Any] = []
    for op in ops:
        try:
            outcomes.append(op.run(conn))
        except Exception as exc:
            # Busy: retry the whole batch. Transaction gone (SQLite rolls back by itself
            # on disk full, I/O errors...): the batch failed as a whole. Else: this op only.
            if _is_busy(exc) or (in_tx and not conn.in_transaction):
                raise
            outcomes.append(OpFailed(exc))
    return outcomes


_BUSY: Any = object()


def _inline(conn: sqlite3.Connection, ops: Sequence[SqliteOp[Any]]) -> Any:
    """Run a batch on the event loop's thread, once, without waiting for a lock: one
    outcome per op (an `OpFailed` for one that failed alone), or `_BUSY` when another
    connection holds the lock.

    Safe because the connection is idle (nothing is in flight on its thread) and this runs
    to its end without yielding to the loop. Never in FULL mode (an fsync per commit would
    stall the loop)."""
    try:
        if len(ops) == 1:  # a transaction of its own: no savepoint needed
            op = ops[0]
            run = getattr(op, "run_alone", op.run) if op.writes else op.run
            try:
                return [_in_transaction(conn, lambda: run(conn)) if op.writes else run(conn)]
            except sqlite3.OperationalError:
                raise
            except Exception as exc:
                return [OpFailed(exc)]
        if any(op.writes for op in ops):
            return _in_transaction(conn, lambda: _all(conn, ops, True))
        return _all(conn, ops, False)
    except sqlite3.OperationalError as exc:
        if _is_busy(exc):
            return _BUSY
        return [OpFailed(exc) for _ in ops]


def _in_transaction(conn: sqlite3.Connection, body: Callable[[], T]) -> T:
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = body()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    return result


_FIRST_PAUSE = 0.0002
_LONGEST_PAUSE = 0.002
"""How long a write waiting for another process's lock sleeps between tries (jittered,
doubling from the first): its transactions last tens to hundreds of microseconds, so a
longer sleep would mostly be spent after the lock came free (a 50 ms cap once held a
sender idle for half of a busy second). A try costs a few microseconds on this thread."""


def _retrying(body: Callable[[], T]) -> T:
    deadline = time.monotonic() + LOCK_PATIENCE_SECONDS
    pause = _FIRST_PAUSE
    while True:
        try:
            return body()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(random.uniform(pause / 2, pause))
        pause = min(pause * 2, _LONGEST_PAUSE)


def _is_busy(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc)
    return "locked" in text or "busy" in text


def read_only_uri(path: str) -> str:
    """A URI that opens `path` for reading only: SQLite neither creates the file nor writes
    to it (reading a WAL file still leaves the -wal and -shm files every reader shares).

    On read-only media (or in a folder this user cannot write) a reader of a WAL database
    cannot make the -shm file SQLite wants; when there is none, the file is opened as
    immutable, which reads it without one and is right because nobody can write it there.
    A -wal (or rollback -journal) file there holding what is not yet in the database file
    cannot be read that way, and is refused with `StoreNotOpened` saying how to read it."""
    uri = "file:" + urllib.parse.quote(os.fsencode(os.path.abspath(path))) + "?mode=ro"
    if os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
        return uri
    if os.path.exists(path + "-shm"):
        return uri  # SQLite reads a WAL database with a -shm file it cannot write
    for end in ("-wal", "-journal"):
        with contextlib.suppress(OSError):
            if os.path.getsize(path + end) > 0:
                raise StoreNotOpened(
                    f"read-only open of SQLite file {path!r}",
                    PermissionError(
                        f"{_why_read_only(path) or 'its folder cannot be written'}, and its "
                        f"{end} file holds changes not yet in the database file, which SQLite "
                        f"cannot read without writing beside it. Copy the database with its "
                        f"-wal, -shm and -journal files to a writable folder and read it there"
                    ),
                )
    return uri + "&immutable=1"


def _why_read_only(path: str) -> str | None:
    """Why the store at `path` cannot be written, when it cannot: the media, the file or
    its folder is read-only (to this user)."""
    if path == ":memory:" or path.startswith("file:"):
        return None
    folder = os.path.dirname(os.path.abspath(path))
    with contextlib.suppress(OSError):
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "it is on read-only media (a read-only file system)"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return "the file is read-only (to this user)"
    if not os.access(folder, os.W_OK):
        return f"its folder {folder!r} is read-only (to this user)"
    return None


def _cannot_write(path: str, exc: BaseException | None = None) -> StoreError:
    """The error of an open for writing that failed with `exc` (or would: None): when the
    store is read-only, `StoreNotOpened` saying why and how to read it."""
    why = _why_read_only(path)
    if why is None and exc is not None:
        return StoreError(f"open of SQLite file {path!r}", exc)
    return StoreNotOpened(
        f"open of SQLite file {path!r}",
        PermissionError(
            f"the store cannot be opened for writing: {why or 'it is read-only'}"
            + (f" ({exc})" if exc is not None else "")
            + ". Open it with read_only=True to read it, as statekernel's reading commands do"
        ),
    )


def components(conn: sqlite3.Connection, path: str) -> dict[str, int]:
    """The statekernel components the file holds, with their schema versions; a StoreError
    for a file that is not a database, or a database statekernel did not make."""
    try:
        names = {
            str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorcode", sqlite3.SQLITE_NOTADB) & 0xFF != sqlite3.SQLITE_NOTADB:
            raise StoreNotOpened(
                f"open of SQLite file {path!r}",
                PermissionError(
                    f"it cannot be opened for reading ({exc}): check that this user may read "
                    f"the file and its folder; nothing was written to it"
                ),
            ) from exc
        raise StoreNotOpened(
            f"open of SQLite file {path!r}",
            ValueError(f"it is not a statekernel store ({exc}); nothing was written to it"),
        ) from exc
    if "statekernel_schema" not in names:
        raise StoreNotOpened(
            f"open of SQLite file {path!r}",
            ValueError(
                "it is not a statekernel store (it has no statekernel_schema table); "
                "nothing was written to it"
            ),
        )
    return {str(name): int(version) for name, version in conn.execute(_COMPONENTS)}


_COMPONENTS = "SELECT component, version FROM statekernel_schema"


def read_components(path: str) -> dict[str, int]:
    """`components` of the file at `path`, opened for reading only (nothing is created)."""
    _require_file(path)
    try:
        conn = sqlite3.connect(read_only_uri(path), uri=True, timeout=LOCK_PATIENCE_SECONDS)
    except sqlite3.Error as exc:
        raise StoreNotOpened(f"open of SQLite file {path!r}", exc) from exc
    try:
        return components(conn, path)
    finally:
        conn.close()


def _require_file(path: str) -> None:
    if os.path.isdir(path):
        raise StoreNotOpened(
            f"open of SQLite file {path!r}", IsADirectoryError("it is a folder, not a file")
        )
    if not os.path.isfile(path):
        raise StoreNotOpened(
            f"open of SQLite file {path!r}",
            FileNotFoundError("no such file; opened read-only, so none was created"),
        )


def _check_read_only(conn: sqlite3.Connection, path: str, schema: Schema) -> None:
    """Refuse a read-only open of a file without this component at a schema version this
    code reads as it is (`Schema.readable_from`): migrating it would write."""
    found = components(conn, path).get(schema.component)
    why = read_only_refusal(
        "the file", schema.component, found, schema.version, schema.readable_from
    )
    if why is not None:
        raise StoreNotOpened(f"read-only open of SQLite file {path!r}", ValueError(why))


def _create_file(path: str, mode: int) -> None:
    """Create the database file with `mode`, and its missing folders with `mode` and search
    permission (`FOLDER_MODE`), before SQLite opens it: SQLite gives its -wal and -shm files
    the database file's permissions, so all three are owner-only by default. An existing
    file keeps its own."""
    if path == ":memory:" or path.startswith("file:") or os.path.exists(path):
        return
    _create_folders(os.path.dirname(os.path.abspath(path)), mode | (mode & 0o444) >> 2)
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode)
    except FileExistsError:  # another process made it a moment ago: it keeps its own
        return
    os.close(descriptor)
    os.chmod(path, mode)  # whatever the umask took away or added


def _create_folders(folder: str, mode: int) -> None:
    """Create `folder` and its missing parents with `mode` (`FOLDER_MODE` by default: nobody
    else may list, add or replace the store's files there). A folder that exists keeps its
    own mode."""
    parent = os.path.dirname(folder)
    if parent != folder and not os.path.isdir(parent):
        _create_folders(parent, mode)
    try:
        os.mkdir(folder, mode)
    except FileExistsError:  # there already, or made a moment ago by another process
        return
    os.chmod(folder, mode)  # whatever the umask took away


def _check_other_tables(conn: sqlite3.Connection, other_tables: OtherTables) -> None:
    """Refuse a database that holds another application's tables (it has tables but not
    statekernel's schema table), unless told to share it."""
    names = [
        str(row[0])
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'"
        )
    ]
    if not names or "statekernel_schema" in names or other_tables == "allow":
        return
    raise StoreError(
        "open of SQLite file",
        ValueError(
            f"the file holds tables of another application ({', '.join(sorted(names))}) and "
            f"none of statekernel's: nothing was added to it. Give statekernel a file of its "
            f"own, or pass other_tables='allow' to keep its tables beside them"
        ),
    )


def _prepare(
    conn: sqlite3.Connection,
    schema: Schema,
    synchronous: Synchronous,
    other_tables: OtherTables = "refuse",
) -> None:
    _retrying(lambda: _check_other_tables(conn, other_tables))
    _retrying(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
    conn.execute(f"PRAGMA synchronous = {synchronous}")  # a checked literal, see module doc
    _retrying(lambda: _in_transaction(conn, lambda: _ensure_schema(conn, schema)))


def _ensure_schema(conn: sqlite3.Connection, schema: Schema) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS statekernel_schema "
        "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
    )
    row = conn.execute(
        "SELECT version FROM statekernel_schema WHERE component = ?", (schema.component,)
    ).fetchone()
    if row is None:
        for statement in schema.statements:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO statekernel_schema (component, version) VALUES (?, ?)",
            (schema.component, schema.version),
        )
    elif row[0] < schema.version and all(
        version in schema.migrations for version in range(row[0], schema.version)
    ):
        for version in range(row[0], schema.version):
            for step in schema.migrations[version]:
                if isinstance(step, str):
                    conn.execute(step)
                else:
                    step(conn)
        conn.execute(
            "UPDATE statekernel_schema SET version = ? WHERE component = ?",
            (schema.version, schema.component),
        )
    elif row[0] != schema.version:
        newer = row[0] > schema.version
        raise StoreError(
            f"open of {schema.component}",
            ValueError(
                f"the file holds {schema.component} schema version {row[0]}, but this "
                f"statekernel reads version {schema.version}. "
                + (
                    "Upgrade statekernel to read it."
                    if newer
                    else "No migration from that version exists; export and re-import."
                )
            ),
        )
