"""What the SQLite profile store's change feeds learn of writes it did not make: commits by
other connections to its file (another process, another store object, a
`SqliteThreadStore` sharing the file), by key, found by a poll.

How a write is told. Entering a feed of a namespace the first time (in the file's life: it
stays watched) registers it: a row in `statekernel_profile_watched` and three triggers on
`profile_records`, after each inserted, updated and deleted row, with the condition
`namespace = '<that namespace>'`, that add the row's namespace and key to
`statekernel_profile_changes`. So the change is part of the write's own transaction, made
by every writer whatever path it took (a group-commit batch, a compare-and-set, an
`update`, a delete, a `clear`, another program's SQL). A write to a watched namespace costs
one row more in its transaction (about 7 µs on a transaction of one set); one to a
namespace nobody watches costs the triggers' conditions, a comparison each; a file where
nobody ever entered a feed has no trigger at all. SQLite cannot bind a value in `CREATE TRIGGER`, so
the namespace reaches it as a quoted literal (its quotes doubled; the store refuses NUL
and lone surrogates before), and the triggers are named by a hash of it. Registering is
one write transaction, so no write that commits after the feed was entered can miss its
trigger.

The poll. SQLite has no notices between processes, but `PRAGMA data_version` is the
cheapest question there is: a counter in the shared memory of the WAL index, changed by
every commit of another connection and by none of the asking connection's own. Asked on
the connection the store writes through, in one read transaction with the changes table:

- unchanged: nobody else committed, and any new change rows are this store's own (its
  feeds were told those at once, by `on_commit`): they are skipped;
- changed: the new rows (ids above the last one read) are read, and each feed of a watched
  namespace is told its keys. A feed whose namespace has no triggers yet (a read-only
  store's, of a namespace nobody watched; a file at schema version 1 opened read-only) is
  told "unknown" (None), as is every feed when the poll finds more than `READ_AT_MOST` new
  rows, a gap (rows it had not read were trimmed), or fails. Own rows that landed between
  others' commits are told again: harmless.

The table stays small by itself: a trigger on it deletes, with every 1024th row, all but
the newest 1024, so it holds 1024 to 2047 rows. A poll reads at most 1024 new rows (a poll
further behind says "unknown"), so the trim never takes a row a poll would still read; a
gap (rows deleted some other way) says "unknown" too.

Timing. One poll per store object, however many feeds, running only while a feed is
entered, on the event loop's thread: one small read transaction (a few microseconds). It
polls again 2 ms after it told a feed something, doubling the pause with every quiet poll
up to `change_poll` (0.1 s by default): a stream of writes to a watched namespace is
followed within milliseconds (at a few % of a core while it lasts), an idle feed costs well
under 1 % of a core, and other connections' writes that no feed here watches (thread
saves, other namespaces) cost a poll each `change_poll`, as when idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import sqlite3
from collections.abc import Iterable
from typing import ClassVar

import attrs

from statekernel import StoreError

from .._changes import Watchers
from .connection import SqliteConnection

__all__ = [
    "CHANGE_POLL_SECONDS",
    "CHANGE_TABLES",
    "READ_AT_MOST",
    "ChangePoll",
    "check_change_poll",
]

logger = logging.getLogger("statekernel")

CHANGE_POLL_SECONDS = 0.1
"""How often, at the least, a SQLite profile store with a feed entered asks whether another
connection committed to its file (`change_poll`)."""

READ_AT_MOST = 1024
"""New change rows one poll reads (more are told as "unknown"), and the fewest the table keeps."""

_SOONEST = 0.002  # the pause after a poll that told a feed something

CHANGE_TABLES = (
    "CREATE TABLE statekernel_profile_watched (namespace TEXT PRIMARY KEY) WITHOUT ROWID",
    """
    CREATE TABLE statekernel_profile_changes (
        id        INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        key       TEXT NOT NULL
    )
    """,
    # An id is the newest + 1 (the trim never deletes the newest), and one writer at a time
    # with a rolled-back insert taking its id back leaves no holes: a hole is a trimmed row.
    # (No AUTOINCREMENT: its counter row would cost every watched write another page.)
    f"""
    CREATE TRIGGER statekernel_profile_changes_trimmed
    AFTER INSERT ON statekernel_profile_changes
    WHEN NEW.id % {READ_AT_MOST} = 0
    BEGIN
        DELETE FROM statekernel_profile_changes WHERE id <= NEW.id - {READ_AT_MOST};
    END
    """,
)
"""The tables of schema version 2 of the profile store, and the trigger that trims one."""


def check_change_poll(seconds: object) -> float:
    """`change_poll` as a float, or a ValueError saying what it must be."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds <= 0
    ):
        raise ValueError(
            f"change_poll must be a number of seconds > 0 (0.1 by default), got {seconds!r}"
        )
    return float(seconds)


class ChangePoll:
    """The `FeedSource` of a SQLite profile store: it tells the store's watchers the keys
    other connections wrote (or "unknown"), polling while at least one feed is entered."""

    def __init__(self, db: SqliteConnection, watchers: Watchers, interval: float) -> None:
        self._db = db
        self._watchers = watchers
        self._interval = interval
        self._feeds: dict[str, int] = {}  # namespace -> feeds entered
        self._keyed: set[str] = set()  # namespaces with triggers: told by key
        self._last = _Polled(0, None, ())  # data_version and last change row read
        self._task: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None
        self._failing = False

    async def attach(self, namespace: str) -> None:
        self._feeds[namespace] = self._feeds.get(namespace, 0) + 1
        try:
            await self._start()
            if namespace not in self._keyed:
                await self._watch(namespace)
        except BaseException:
            await self.detach(namespace)
            raise

    async def detach(self, namespace: str) -> None:
        left = self._feeds.pop(namespace, 0) - 1
        if left > 0:
            self._feeds[namespace] = left
        elif not self._feeds:
            await self._stop()

    async def running(self) -> None:
        """After `close()` (or a poll that died), start polling again, then say "unknown":
        other connections may have written while nobody looked."""
        if self._feeds and (self._task is None or self._task.done()):
            await self._start()
            self._watchers.unknown()

    async def close(self) -> None:
        """The store closes its file: stop polling (it would reopen the file). Feeds still
        entered are told "unknown", and their next `next()` starts the poll again."""
        if self._task is not None:
            await self._stop()
            self._watchers.unknown()

    async def _watch(self, namespace: str) -> None:
        """Tell the feeds of `namespace` by key from now on: register it when nobody has
        (a store that cannot write leaves it told as "unknown"; so does a failure)."""
        try:
            if not await self._db.submit(_Watched(namespace)):
                if self._db.read_only:
                    return
                await self._db.submit(_Watch(namespace))
        except StoreError as error:
            logger.warning(
                "SQLite change feed cannot watch namespace %r of %s (%s): other connections' "
                "writes to it are reported as None",
                namespace,
                self._db.path,
                error,
            )
            return
        self._keyed.add(namespace)

    async def _start(self) -> None:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._task is not None and not self._task.done():
                return
            # The baseline: a commit by anyone else from here on changes the answer.
            self._last = await self._db.submit(_Poll(None))
            self._task = asyncio.get_running_loop().create_task(self._poll())

    async def _stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _poll(self) -> None:
        pause = self._interval
        while True:
            await asyncio.sleep(pause)
            pause = min(pause * 2, self._interval)
            try:
                polled = await self._db.submit(_Poll(self._last))
            except StoreError as error:
                # The file cannot be asked (gone, unreadable): the watchers cannot know
                # either, so they look for themselves; said once until it answers again.
                if not self._failing:
                    logger.warning("SQLite change feed cannot poll %s: %s", self._db.path, error)
                    self._failing = True
                self._watchers.unknown()
                continue
            self._failing = False
            changed = polled.version != self._last.version
            self._last = polled
            if changed and self._tell(polled.rows):
                pause = min(_SOONEST, self._interval)

    def _tell(self, rows: Iterable[tuple[str, str]] | None) -> bool:
        """Tell each feed the keys of its namespace among `rows` (None: "unknown"); whether
        any feed was told anything."""
        if rows is None:
            self._watchers.unknown()
            return True
        keys: dict[str, set[str]] = {}
        for namespace, key in rows:
            keys.setdefault(namespace, set()).add(key)
        told = False
        for namespace in list(self._feeds):
            if namespace not in self._keyed:
                self._watchers.unknown(namespace)
                told = True
            elif namespace in keys:
                self._watchers.wrote(namespace, keys[namespace])
                told = True
        return told


def _trigger_statements(namespace: str) -> tuple[str, ...]:
    """The triggers that add a change row for each row of `namespace` written."""
    name = "statekernel_changed_" + hashlib.sha256(namespace.encode()).hexdigest()[:40]
    literal = "'" + namespace.replace("'", "''") + "'"  # SQL's quoting: quotes doubled
    return tuple(
        f"CREATE TRIGGER IF NOT EXISTS {name}_{suffix} AFTER {event} ON profile_records "
        f"FOR EACH ROW WHEN {row}.namespace = {literal} BEGIN "
        f"INSERT INTO statekernel_profile_changes (namespace, key) "
        f"VALUES ({row}.namespace, {row}.key); END"
        for suffix, event, row in (
            ("inserted", "INSERT", "NEW"),
            ("updated", "UPDATE", "NEW"),
            ("deleted", "DELETE", "OLD"),
        )
    )


# -- operations, run on the connection's thread or the loop's (see `connection`) -----------


@attrs.frozen
class _Polled:
    """What a poll saw: the file's `data_version`, the last change row it accounted for
    (None: the file has no changes table), and the new rows' (namespace, key), or None
    when they cannot be told (too many, a gap, no table)."""

    version: int
    seen: int | None
    rows: tuple[tuple[str, str], ...] | None


@attrs.frozen
class _Poll:
    """The poll, in one read transaction: `data_version` and the change rows agree."""

    writes: ClassVar[bool] = False
    inline: ClassVar[bool] = True  # a read of shared memory, rows only after a change
    last: _Polled | None  # None: the baseline

    def run(self, conn: sqlite3.Connection) -> _Polled:
        if conn.in_transaction:  # run in a batch's write transaction: its snapshot is one
            return self._look(conn)
        conn.execute("BEGIN")
        try:
            return self._look(conn)
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")  # a read: nothing to keep

    def _look(self, conn: sqlite3.Connection) -> _Polled:
        version = int(conn.execute("PRAGMA data_version").fetchone()[0])
        try:
            (newest,) = conn.execute("SELECT max(id) FROM statekernel_profile_changes").fetchone()
        except sqlite3.OperationalError as error:
            if "no such table" not in str(error):
                raise
            return _Polled(version, None, None)  # schema version 1, opened read-only
        if self.last is None or self.last.seen is None:  # the baseline (or a new table)
            return _Polled(version, newest or 0, None)
        seen = self.last.seen
        if newest is None:  # no row yet (or all deleted some other way: ids start again at 1,
            newest = seen  # which a later poll finds below `seen`, and says "unknown")
        if version == self.last.version:
            return _Polled(version, newest, ())  # rows since `seen` are this store's own
        if not 0 <= newest - seen <= READ_AT_MOST:
            return _Polled(version, newest, None)
        rows = conn.execute(
            "SELECT namespace, key FROM statekernel_profile_changes WHERE id > ? AND id <= ?",
            (seen, newest),
        ).fetchall()
        if len(rows) != newest - seen:
            return _Polled(version, newest, None)  # a gap: rows deleted before they were read
        return _Polled(version, newest, tuple(rows))

    def error(self, cause: BaseException) -> BaseException:
        return StoreError("poll for changes by other connections", cause)


@attrs.frozen
class _Watched:
    """Whether `namespace` has its triggers (False too for a file without the tables)."""

    writes: ClassVar[bool] = False
    inline: ClassVar[bool] = True  # one indexed row
    namespace: str

    def run(self, conn: sqlite3.Connection) -> bool:
        tables = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
            ("statekernel_profile_watched",),
        ).fetchone()
        if tables is None:
            return False
        found = conn.execute(
            "SELECT 1 FROM statekernel_profile_watched WHERE namespace = ?", (self.namespace,)
        ).fetchone()
        return found is not None

    def error(self, cause: BaseException) -> BaseException:
        return StoreError("change feed", cause, key=self.namespace)


@attrs.frozen
class _Watch:
    """Register `namespace` (idempotent): its triggers, then its row, in one transaction."""

    writes: ClassVar[bool] = True
    namespace: str

    def run(self, conn: sqlite3.Connection) -> None:
        # The row last: a watched namespace always has its triggers, even when a batch
        # this op shares commits after it failed half way.
        for statement in _trigger_statements(self.namespace):
            conn.execute(statement)
        conn.execute(
            "INSERT OR IGNORE INTO statekernel_profile_watched (namespace) VALUES (?)",
            (self.namespace,),
        )

    def error(self, cause: BaseException) -> BaseException:
        return StoreError("change feed", cause, key=self.namespace)
