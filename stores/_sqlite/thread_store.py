"""The SQLite ThreadStore: each thread's journal in three tables of a SQLite file.

`thread_states` holds one small head row per thread (its head revision, its write position,
the head document), `thread_records` its commit records
and `thread_snapshots` its periodic snapshots. A save appends records (and a snapshot when
the kernel sends one) and replaces the head inside one transaction that first compares the
stored write position and moves it by one, so a stale writer in another process gets
`RevisionConflict` whatever either save carried, and a save lands whole or not at all. A
checkpoint therefore writes what changed, not what is held. Concurrent checkpoints of many
threads share transactions through the connection's pipeline (`connection`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from typing import ClassVar

import attrs

from statekernel import DecodeFailed, StoreError
from statekernel.lowlevel import JournalEntry, ThreadHead, ThreadSave, ThreadSnapshot, ThreadState

from .._closing import ClosingStore
from .._key_range import prefix_upper_bound
from .._thread_codec import (
    Head,
    check_listing,
    check_position,
    check_save,
    check_since,
    check_thread_id,
    decode_head,
    decode_snapshot,
    legacy_snapshot,
    plan_save,
    prune_point,
    state_of,
)
from .connection import FILE_MODE, OtherTables, Schema, SqliteConnection, Synchronous

__all__ = ["SqliteThreadStore"]

_TABLES = (
    """
    CREATE TABLE thread_records (
        thread_id TEXT NOT NULL,
        revision  INTEGER NOT NULL,
        record    BLOB NOT NULL,
        PRIMARY KEY (thread_id, revision)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE thread_snapshots (
        thread_id TEXT NOT NULL,
        revision  INTEGER NOT NULL,
        snapshot  BLOB NOT NULL,
        PRIMARY KEY (thread_id, revision)
    ) WITHOUT ROWID
    """,
)


_EVENTS_TABLE = """
    CREATE TABLE IF NOT EXISTS thread_events (
        thread_id TEXT NOT NULL,
        position  INTEGER NOT NULL,
        revision  INTEGER NOT NULL,
        events    BLOB NOT NULL,
        PRIMARY KEY (thread_id, position)
    ) WITHOUT ROWID
    """


def _revision_apart_from_position(conn: sqlite3.Connection) -> None:
    """Version 2 kept the write position in `revision`: give it a column of its own, and
    `revision` the head revision its row's head document holds."""
    conn.execute("ALTER TABLE thread_states ADD COLUMN position INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE thread_states SET position = revision")
    for thread_id, state in conn.execute("SELECT thread_id, state FROM thread_states").fetchall():
        try:
            revision = decode_head(thread_id, bytes(state)).revision
        except DecodeFailed:
            continue  # a damaged head: its load says so, naming it
        conn.execute(
            "UPDATE thread_states SET revision = ? WHERE thread_id = ?", (revision, thread_id)
        )


_SCHEMA = Schema(
    component="thread_store",
    version=4,
    statements=(
        """
        CREATE TABLE thread_states (
            thread_id TEXT PRIMARY KEY,
            revision  INTEGER NOT NULL,
            state     BLOB NOT NULL,
            saved_at  REAL NOT NULL,
            position  INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID
        """,
        *_TABLES,
        _EVENTS_TABLE,
    ),
    # Version 1 kept each thread's whole state in its head row; such a head still loads (it
    # is its own snapshot) and its first save moves its values into thread_snapshots.
    # Version 4 keeps each save's run events (`ThreadSave.events`), for the trace.
    migrations={1: _TABLES, 2: (_revision_apart_from_position,), 3: (_EVENTS_TABLE,)},
    readable_from=3,  # version 3 lacks only the run events, which read as none
)

# `revision` is the thread's head revision, for anyone reading the file; `position` is the
# write position every save compares and moves.
_SELECT_HEAD = "SELECT state, position FROM thread_states WHERE thread_id = ?"
_REPLACE_HEAD = (
    "INSERT OR REPLACE INTO thread_states (thread_id, revision, state, saved_at, position) "
    "VALUES (?, ?, ?, ?, ?)"
)
_NEWEST_SNAPSHOT = (
    "SELECT revision, snapshot FROM thread_snapshots WHERE thread_id = ? AND revision <= ? "
    "ORDER BY revision DESC LIMIT 1"
)
_NEWEST_SNAPSHOT_REVISION = (
    "SELECT revision FROM thread_snapshots WHERE thread_id = ? AND revision <= ? "
    "ORDER BY revision DESC LIMIT 1"
)
_SNAPSHOT_REVISIONS = "SELECT revision FROM thread_snapshots WHERE thread_id = ?"
_RECORDS = (
    "SELECT revision, record FROM thread_records WHERE thread_id = ? AND revision > ? "
    "AND revision <= ? ORDER BY revision LIMIT ?"
)
_INSERT_RECORD = "INSERT INTO thread_records (thread_id, revision, record) VALUES (?, ?, ?)"
_INSERT_SNAPSHOT = (
    "INSERT OR REPLACE INTO thread_snapshots (thread_id, revision, snapshot) VALUES (?, ?, ?)"
)
_PRUNE_RECORDS = "DELETE FROM thread_records WHERE thread_id = ? AND revision <= ?"
_PRUNE_SNAPSHOTS = "DELETE FROM thread_snapshots WHERE thread_id = ? AND revision < ?"
_PRUNE_EVENTS = "DELETE FROM thread_events WHERE thread_id = ? AND revision < ?"
_DELETE = (
    "DELETE FROM thread_states WHERE thread_id = ?",
    "DELETE FROM thread_records WHERE thread_id = ?",
    "DELETE FROM thread_snapshots WHERE thread_id = ?",
    "DELETE FROM thread_events WHERE thread_id = ?",
)
_INSERT_EVENTS = (
    "INSERT OR REPLACE INTO thread_events (thread_id, position, revision, events) "
    "VALUES (?, ?, ?, ?)"
)
_EVENTS = "SELECT events FROM thread_events WHERE thread_id = ? ORDER BY position"
_HAS_EVENTS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'thread_events'"
_INLINE_BYTES = 64 * 1024  # a save at most this big may run on the loop's thread
_THREADS_FROM = (
    "SELECT thread_id FROM thread_states WHERE thread_id >= ? ORDER BY thread_id LIMIT ?"
)
_THREADS_RANGE = (
    "SELECT thread_id FROM thread_states WHERE thread_id >= ? AND thread_id < ? "
    "ORDER BY thread_id LIMIT ?"
)
_NO_LIMIT = -1  # SQLite's LIMIT -1: no limit
_NO_END = 2**63 - 1


class SqliteThreadStore(ClosingStore):
    """A `ThreadStore` in a SQLite file (created on first use, with its schema).

    It may share its file with a `SqliteProfileStore`. Each save is one transaction that
    compares the write position first. It `SupportsHead`, `SupportsLoadSince` and
    `SupportsRunEvents`.

    - `synchronous="FULL"` makes every save survive power loss too, at an fsync per commit;
      a value other than `"NORMAL"` or `"FULL"` raises `ValueError`.
    - `file_mode`: a file it creates gets it, owner-only `0o600` by default, and its
      missing folders the same with search permission (`0o700`); a file or folder that
      exists keeps its own.
    - `other_tables`: a file holding another application's tables is refused with a
      `StoreError` naming them unless `other_tables="allow"`.
    - `read_only=True` opens an existing file for reading only: nothing is created, migrated
      or written (a missing file or a write raises `StoreError`), and a file without this
      store's tables at this statekernel's schema version is refused.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        file_mode: int = FILE_MODE,
        other_tables: OtherTables = "refuse",
        read_only: bool = False,
    ) -> None:
        self._db = SqliteConnection(
            path,
            _SCHEMA,
            synchronous=synchronous,
            file_mode=file_mode,
            other_tables=other_tables,
            read_only=read_only,
        )

    @property
    def path(self) -> str:
        """The SQLite file."""
        return self._db.path

    async def load(self, thread_id: str) -> ThreadState | None:
        _check_id(thread_id)
        return await self._db.submit(_Load(thread_id))

    async def load_since(self, thread_id: str, since: int) -> ThreadState | None:
        _check_id(thread_id)
        return await self._db.submit(_LoadSince(thread_id, check_since(since)))

    async def head(self, thread_id: str) -> ThreadHead | None:
        _check_id(thread_id)
        return await self._db.submit(_HeadOf(thread_id))

    async def save(self, thread_id: str, save: ThreadSave, *, expected_position: int) -> None:
        save = check_save(thread_id, save, expected_position)
        await self._db.submit(_Save(thread_id, save, expected_position))

    async def records(
        self, thread_id: str, *, since: int = 0, until: int | None = None, limit: int | None = None
    ) -> list[JournalEntry]:
        _check_id(thread_id)
        bounds = (since, _NO_END if until is None else until, _NO_LIMIT if limit is None else limit)
        return await self._db.submit(_Records(thread_id, *bounds))

    async def snapshot_at(self, thread_id: str, revision: int) -> ThreadSnapshot | None:
        _check_id(thread_id)
        return await self._db.submit(_SnapshotAt(thread_id, revision))

    async def prune(self, thread_id: str, *, before: int) -> None:
        _check_id(thread_id)
        prune_point(before, ())  # checks the argument before anything is queued
        await self._db.submit(_Prune(thread_id, before))

    async def delete(self, thread_id: str) -> None:
        _check_id(thread_id)
        await self._db.submit(_Delete(thread_id))

    async def run_events(self, thread_id: str) -> list[bytes]:
        _check_id(thread_id)
        return await self._db.submit(_RunEvents(thread_id))

    async def threads(self, *, prefix: str = "", limit: int | None = None) -> list[str]:
        prefix, limit = check_listing(prefix, limit)
        return await self._db.submit(_Threads(prefix, _NO_LIMIT if limit is None else limit))

    async def close(self) -> None:
        """Finish pending saves and close the file; the store reopens it on next use."""
        await self._db.close()


def _check_id(thread_id: object) -> None:
    check_thread_id(thread_id)


@contextlib.contextmanager
def _reading(conn: sqlite3.Connection) -> Iterator[None]:
    """Several SELECTs that must see one state of the file: in a read transaction, unless
    the op already runs inside the batch's write transaction."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def _head(conn: sqlite3.Connection, thread_id: str) -> tuple[Head, int] | None:
    row = conn.execute(_SELECT_HEAD, (thread_id,)).fetchone()
    return None if row is None else (decode_head(thread_id, bytes(row[0])), int(row[1]))


def _newest_snapshot(
    conn: sqlite3.Connection, thread_id: str, head: Head, revision: int
) -> ThreadSnapshot | None:
    row = conn.execute(_NEWEST_SNAPSHOT, (thread_id, revision)).fetchone()
    if row is not None:
        return decode_snapshot(thread_id, int(row[0]), bytes(row[1]))
    legacy = legacy_snapshot(head)
    return legacy if legacy is not None and legacy.revision <= revision else None


def _records(
    conn: sqlite3.Connection, thread_id: str, since: int, until: int, limit: int
) -> list[JournalEntry]:
    rows = conn.execute(_RECORDS, (thread_id, since, until, limit)).fetchall()
    return [JournalEntry(int(revision), bytes(data)) for revision, data in rows]


@attrs.frozen
class _HeadOf:
    writes: ClassVar[bool] = False
    inline: ClassVar[bool] = True  # one indexed row: cheaper than a hop
    thread_id: str

    def run(self, conn: sqlite3.Connection) -> ThreadHead | None:
        found = _head(conn, self.thread_id)
        if found is None:
            return None
        head, position = found
        return ThreadHead(position, head.revision, head.seal)

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"head of thread {self.thread_id!r}", cause)


@attrs.frozen
class _Load:
    writes: ClassVar[bool] = False
    thread_id: str

    def run(self, conn: sqlite3.Connection) -> ThreadState | None:
        with _reading(conn):
            found = _head(conn, self.thread_id)
            if found is None:
                return None
            head, position = found
            snapshot = _newest_snapshot(conn, self.thread_id, head, head.revision)
            after = snapshot.revision if snapshot is not None else 0
            records = _records(conn, self.thread_id, after, _NO_END, _NO_LIMIT)
        return state_of(head, position, snapshot, records)

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"load of thread {self.thread_id!r}", cause)


@attrs.frozen
class _LoadSince:
    """`load`, less the snapshot and records a reader at revision `since` holds: when the
    newest snapshot is no newer, only its revision is read, then the records after `since`."""

    writes: ClassVar[bool] = False
    thread_id: str
    since: int

    def run(self, conn: sqlite3.Connection) -> ThreadState | None:
        with _reading(conn):
            found = _head(conn, self.thread_id)
            if found is None:
                return None
            head, position = found
            row = conn.execute(_NEWEST_SNAPSHOT_REVISION, (self.thread_id, head.revision))
            newest = row.fetchone()
            legacy = legacy_snapshot(head) is not None
            if legacy or (newest is not None and int(newest[0]) > self.since):
                snapshot = _newest_snapshot(conn, self.thread_id, head, head.revision)
                after = snapshot.revision if snapshot is not None else 0
            else:
                snapshot = ThreadSnapshot(int(newest[0]), {}) if newest is not None else None
                after = self.since
            records = _records(conn, self.thread_id, after, _NO_END, _NO_LIMIT)
        return state_of(head, position, snapshot, records)

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"load of thread {self.thread_id!r}", cause)


@attrs.frozen
class _Save:
    writes: ClassVar[bool] = True
    thread_id: str
    save: ThreadSave
    expected: int

    at_once: ClassVar[bool] = True  # see `runs_at_once`

    @property
    def inline(self) -> bool:
        """A step's save (records, no big snapshot) is cheaper than a hop to the thread."""
        size = sum(len(entry.data) for entry in self.save.records)
        if self.save.snapshot is not None:
            size += sum(len(data) for data in self.save.snapshot.values())
        return size <= _INLINE_BYTES

    def run_alone(self, conn: sqlite3.Connection) -> None:
        """In a transaction of its own (inline): a failure rolls the whole of it back."""
        self._write(conn)

    def run(self, conn: sqlite3.Connection) -> None:
        # Other ops of the batch share the transaction: this one's writes go or stay whole.
        conn.execute("SAVEPOINT thread_save")
        try:
            self._write(conn)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK TO thread_save")
                conn.execute("RELEASE thread_save")
            raise
        conn.execute("RELEASE thread_save")

    def _write(self, conn: sqlite3.Connection) -> None:
        thread_id, save = self.thread_id, self.save
        found = _head(conn, thread_id)
        position = check_position(self.expected, None if found is None else found[1])
        plan = plan_save(thread_id, save, found[0] if found is not None else None)
        if save.records:
            conn.executemany(
                _INSERT_RECORD, [(thread_id, e.revision, e.data) for e in save.records]
            )
        for revision, values in plan.snapshots:
            conn.execute(_INSERT_SNAPSHOT, (thread_id, revision, values))
        head = plan.head
        conn.execute(_REPLACE_HEAD, (thread_id, save.revision, head, time.time(), position))
        if save.events is not None:
            conn.execute(_INSERT_EVENTS, (thread_id, position, save.revision, save.events))

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"save of thread {self.thread_id!r}", cause)


@attrs.frozen
class _Records:
    writes: ClassVar[bool] = False
    thread_id: str
    since: int
    until: int
    limit: int

    def run(self, conn: sqlite3.Connection) -> list[JournalEntry]:
        return _records(conn, self.thread_id, self.since, self.until, self.limit)

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"history of thread {self.thread_id!r}", cause)


@attrs.frozen
class _SnapshotAt:
    writes: ClassVar[bool] = False
    thread_id: str
    revision: int

    def run(self, conn: sqlite3.Connection) -> ThreadSnapshot | None:
        with _reading(conn):
            found = _head(conn, self.thread_id)
            if found is None:
                return None
            return _newest_snapshot(conn, self.thread_id, found[0], self.revision)

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"snapshot of thread {self.thread_id!r}", cause)


@attrs.frozen
class _Prune:
    writes: ClassVar[bool] = True
    thread_id: str
    before: int

    def run(self, conn: sqlite3.Connection) -> None:
        rows = conn.execute(_SNAPSHOT_REVISIONS, (self.thread_id,)).fetchall()
        keep = prune_point(self.before, [int(row[0]) for row in rows])
        if keep is not None:
            conn.execute(_PRUNE_RECORDS, (self.thread_id, keep))
            conn.execute(_PRUNE_SNAPSHOTS, (self.thread_id, keep))
            conn.execute(_PRUNE_EVENTS, (self.thread_id, keep))

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"prune of thread {self.thread_id!r}", cause)


@attrs.frozen
class _Threads:
    writes: ClassVar[bool] = False
    prefix: str
    limit: int

    def run(self, conn: sqlite3.Connection) -> list[str]:
        upper = prefix_upper_bound(self.prefix)
        if upper is None:
            rows = conn.execute(_THREADS_FROM, (self.prefix, self.limit)).fetchall()
        else:
            rows = conn.execute(_THREADS_RANGE, (self.prefix, upper, self.limit)).fetchall()
        return [str(row[0]) for row in rows if str(row[0]).startswith(self.prefix)]

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"list of threads with prefix {self.prefix!r}", cause)


@attrs.frozen
class _RunEvents:
    writes: ClassVar[bool] = False
    thread_id: str

    def run(self, conn: sqlite3.Connection) -> list[bytes]:
        if conn.execute(_HAS_EVENTS).fetchone() is None:
            return []  # a version 3 file, read without migrating it: it kept none
        return [bytes(row[0]) for row in conn.execute(_EVENTS, (self.thread_id,))]

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"run events of thread {self.thread_id!r}", cause)


@attrs.frozen
class _Delete:
    writes: ClassVar[bool] = True
    thread_id: str

    def run(self, conn: sqlite3.Connection) -> None:
        for statement in _DELETE:
            conn.execute(statement, (self.thread_id,))

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"delete of thread {self.thread_id!r}", cause)
