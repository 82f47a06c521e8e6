"""The SQLite ProfileStore: shared and profile entries in one table of a SQLite file.

Safe for many tasks and several processes on one file (see `connection` for the
locking, group commit and durability story). A value is stored as JSON text, so the rows
can be read with any SQLite tool; a row whose text is no longer JSON fails with
`DecodeFailed` for that entry only. Compare-and-set checks the version inside the same
transaction that writes.

Sets that arrive together, compare-and-sets included, are applied in one transaction in one
call (on the loop's thread, or on the connection's while another process holds the lock:
see `connection`), in call order, each with its own check: a compare-and-set sees the
version an earlier set of its batch made, one that loses raises `VersionConflict` and
writes nothing while the rest land, and a batch that fails as a whole (the lock held past
`LOCK_PATIENCE_SECONDS`, a full disk) fails each of its sets with a `StoreError` naming
its entry.

Change feeds: the store's own writes are told to its feeds when their transaction commits
(the connection's `on_commit`), with their keys; other connections' commits to the file are
found by `changes.DataVersionPoll`, as "unknown".
"""

from __future__ import annotations

import builtins
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import attrs

from statekernel import StoreError, VersionConflict
from statekernel.lowlevel import DEFAULT_MAX_VALUE_BYTES, ChangeFeed, Entry, encode_entry

from .._changes import Feed, Watchers
from .._closing import ClosingStore
from .._key_range import prefix_upper_bound
from .._profile_codec import (
    check_expected,
    check_expected_version,
    check_names,
    decode_value,
    listed,
)
from .changes import CHANGE_POLL_SECONDS, DataVersionPoll, check_change_poll
from .connection import (
    FILE_MODE,
    OpFailed,
    OtherTables,
    Schema,
    SqliteConnection,
    SqliteOp,
    Synchronous,
)

__all__ = ["SqliteProfileStore"]

_INLINE_CHARS = 64 * 1024  # a set of a value at most this long may run inline

_SCHEMA = Schema(
    component="profile_store",
    version=1,
    statements=(
        """
        CREATE TABLE profile_records (
            namespace  TEXT NOT NULL,
            key        TEXT NOT NULL,
            value      TEXT NOT NULL,
            version    INTEGER NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (namespace, key)
        ) WITHOUT ROWID
        """,
    ),
)

_SELECT = "SELECT value, version, updated_at FROM profile_records WHERE namespace = ? AND key = ?"
_SELECT_VERSION = "SELECT version FROM profile_records WHERE namespace = ? AND key = ?"
_INSERT = (
    "INSERT INTO profile_records (namespace, key, value, version, updated_at) "
    "VALUES (?, ?, ?, 1, ?)"
)
_UPDATE = (
    "UPDATE profile_records SET value = ?, version = ?, updated_at = ? "
    "WHERE namespace = ? AND key = ?"
)
_VERSIONS_IN = "SELECT key, version FROM profile_records WHERE namespace = ? AND key IN"
_ROWS_IN = (
    "SELECT key, value, version, updated_at FROM profile_records WHERE namespace = ? AND key IN"
)
_DELETE = "DELETE FROM profile_records WHERE namespace = ? AND key = ?"
_CLEAR = "DELETE FROM profile_records WHERE namespace = ?"
_LIST = "SELECT key, value, version, updated_at FROM profile_records WHERE namespace = ?"
# A literal prefix as a key range: LIKE would treat % and _ as wildcards, and a range uses
# the primary key index where substr() would scan the namespace.
_LIST_FROM = _LIST + " AND key >= ? ORDER BY key"
_LIST_RANGE = _LIST + " AND key >= ? AND key < ? ORDER BY key"
_LIST_ALL = _LIST + " ORDER BY key"
_NAMESPACES = "SELECT DISTINCT namespace FROM profile_records ORDER BY namespace"


class SqliteProfileStore(ClosingStore):
    """A `ProfileStore` in a SQLite file (created on first use, with its schema).

    It uses WAL, parameterised SQL only, group commit, and `BEGIN IMMEDIATE` with busy
    retries. It is safe for many tasks and several processes, and it `SupportsAtomicUpdate`
    (also `SupportsNamespaces`, `AcceptsEncodedValues` and `SupportsChanges`). It may share
    its file with a `SqliteThreadStore`.

    - `max_value_bytes` (16 MiB by default) refuses larger values (as encoded JSON) with
      `StoreError` before any write.
    - `synchronous="FULL"` makes every commit survive power loss too, at an fsync per
      commit; a value other than `"NORMAL"` or `"FULL"` raises `ValueError`.
    - `file_mode`: a file it creates gets it, owner-only `0o600` by default, and its
      missing folders the same with search permission (`0o700`); a file or folder that
      exists keeps its own.
    - `other_tables`: a file holding another application's tables is refused with a
      `StoreError` naming them unless `other_tables="allow"`.
    - `read_only=True` opens an existing file for reading only: nothing is created, migrated
      or written (a missing file or a write raises `StoreError`), and a file without this
      store's tables at this statekernel's schema version is refused.
    - `change_poll` (seconds, 0.1 by default): while a change feed is entered
      (`store.changes(namespace)`), how often the store asks whether another connection
      (another process, another store object on the file) committed to the file; such a
      commit is reported as None within about this long. Writes through this store object
      are reported at once, with their keys. A value that is not a number > 0 raises
      `ValueError`.
    """

    accepts_encoded_values: ClassVar[bool] = True  # see statekernel.lowlevel.EncodedValue

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        synchronous: Synchronous = "NORMAL",
        file_mode: int = FILE_MODE,
        other_tables: OtherTables = "refuse",
        read_only: bool = False,
        change_poll: float = CHANGE_POLL_SECONDS,
    ) -> None:
        interval = check_change_poll(change_poll)
        self._watchers = Watchers()
        self._db = SqliteConnection(
            path,
            _SCHEMA,
            synchronous=synchronous,
            file_mode=file_mode,
            other_tables=other_tables,
            read_only=read_only,
            on_commit=self._committed,
        )
        self._max_value_bytes = max_value_bytes
        self._others = DataVersionPoll(self._db, self._watchers, interval)

    @property
    def path(self) -> str:
        """The SQLite file."""
        return self._db.path

    async def get(self, namespace: str, key: str) -> Entry | None:
        namespace, key = check_names(namespace, key)
        row = await self._db.submit(_Get(namespace, key))
        if row is None:
            return None
        data, version, updated_at = row
        return Entry(namespace, key, decode_value(namespace, key, data), version, updated_at)

    async def set(
        self, namespace: str, key: str, value: Any, *, expected_version: int | None = None
    ) -> Entry:
        namespace, key = check_names(namespace, key)
        expected = check_expected_version(expected_version)
        encoded = encode_entry(namespace, key, value, self._max_value_bytes)
        data = encoded.data.decode()
        version, updated_at = await self._db.submit(_Set(namespace, key, data, expected))
        return Entry(namespace, key, encoded.value, version, updated_at)

    async def update(self, namespace: str, key: str, fn: Callable[[Entry | None], Any]) -> Entry:
        """Set the entry to `fn(current entry or None)` in one write transaction.

        `fn` runs while the write lock is held, so no other task or process can write
        between the read and the write: it must be pure and quick. It runs on the event
        loop's thread, or on the connection's when another process held the lock (then
        it may have run once before, on a value that was not written). Its exceptions
        propagate unchanged, and nothing is written.
        """
        namespace, key = check_names(namespace, key)
        return await self._db.submit(_Update(namespace, key, fn, self._max_value_bytes))

    async def delete(self, namespace: str, key: str) -> None:
        namespace, key = check_names(namespace, key)
        await self._db.submit(_Delete(namespace, key))

    async def list(self, namespace: str, prefix: str = "") -> builtins.list[Entry]:
        namespace, prefix = check_names(namespace, prefix)
        rows = await self._db.submit(_List(namespace, prefix))
        return listed(namespace, (row for row in rows if row[0].startswith(prefix)))

    async def namespaces(self, prefix: str = "") -> builtins.list[str]:
        _, prefix = check_names("namespaces", prefix)
        found = await self._db.submit(_Namespaces())
        return [name for name in found if name.startswith(prefix)]

    async def clear(self, namespace: str) -> None:
        namespace, _ = check_names(namespace, "")
        await self._db.submit(_Clear(namespace))

    def changes(self, namespace: str) -> ChangeFeed:
        """A feed of the keys of `namespace` written from the moment it is entered
        (`async with store.changes(namespace) as feed:`): through this store object at
        once, with their keys; by any other connection to the file as None, within about
        `change_poll` seconds."""
        namespace, _ = check_names(namespace, "")
        return Feed(self._watchers, namespace, self._others)

    def _committed(self, ops: Sequence[SqliteOp[Any]]) -> None:
        """Tell the feeds what a transaction of this store's wrote (`on_commit`)."""
        if not self._watchers:
            return
        for op in ops:
            if isinstance(op, _Set | _Update | _Delete):
                self._watchers.wrote(op.namespace, (op.key,))
            elif isinstance(op, _Clear):
                self._watchers.unknown(op.namespace)

    async def close(self) -> None:
        """Finish pending writes and close the file; the store reopens it on next use.
        Entered change feeds stay entered: each reports None once, then goes on."""
        await self._others.close()
        await self._db.close()


# -- operations, run on the connection's thread or the loop's (see `connection`) -----------


@attrs.frozen
class _Get:
    writes: ClassVar[bool] = False
    inline: ClassVar[bool] = True  # one indexed row: cheaper than a hop
    namespace: str
    key: str

    @staticmethod
    def run_many(conn: sqlite3.Connection, ops: Sequence[_Get]) -> list[Any]:
        """Many gets in one query per namespace (chunked), answered in the ops' order."""
        rows = _lookup(conn, _ROWS_IN, ops)
        return [rows.get((op.namespace, op.key)) for op in ops]

    def run(self, conn: sqlite3.Connection) -> tuple[str, int, float] | None:
        row: tuple[str, int, float] | None = conn.execute(
            _SELECT, (self.namespace, self.key)
        ).fetchone()
        return row

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"get of entry {self.key!r}", cause, key=self.namespace)


@attrs.frozen
class _Set:
    writes: ClassVar[bool] = True
    namespace: str
    key: str
    data: str
    expected: int | None

    @property
    def inline(self) -> bool:
        """A small value's write is cheaper than a hop to the connection's thread."""
        return len(self.data) <= _INLINE_CHARS

    @staticmethod
    def run_many(conn: sqlite3.Connection, ops: Sequence[_Set]) -> list[Any]:
        """Many sets in a few statements: one lookup of the current versions, then one
        executemany of inserts and one of updates, in the same order as one by one."""
        versions = {record: row[0] for record, row in _lookup(conn, _VERSIONS_IN, ops).items()}
        now = time.time()
        inserts: list[tuple[str, str, str, float]] = []
        updates: list[tuple[str, int, float, str, str]] = []
        outcomes: list[Any] = []
        for op in ops:
            record = (op.namespace, op.key)
            current = versions.get(record)
            try:
                check_expected(op.namespace, op.key, op.expected, current)
            except VersionConflict as conflict:
                outcomes.append(OpFailed(conflict))
                continue
            if current is None:
                inserts.append((op.namespace, op.key, op.data, now))
            else:
                updates.append((op.data, current + 1, now, op.namespace, op.key))
            versions[record] = version = 1 if current is None else current + 1
            outcomes.append((version, now))
        # Every insert precedes every update of its entry (an entry is inserted at most
        # once in a batch of sets), and updates keep their order: the same end state.
        conn.executemany(_INSERT, inserts)
        conn.executemany(_UPDATE, updates)
        return outcomes

    def run(self, conn: sqlite3.Connection) -> tuple[int, float]:
        row = conn.execute(_SELECT_VERSION, (self.namespace, self.key)).fetchone()
        current: int | None = None if row is None else row[0]
        check_expected(self.namespace, self.key, self.expected, current)
        now = time.time()
        if current is None:
            conn.execute(_INSERT, (self.namespace, self.key, self.data, now))
            return 1, now
        conn.execute(_UPDATE, (self.data, current + 1, now, self.namespace, self.key))
        return current + 1, now

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"set of entry {self.key!r}", cause, key=self.namespace)


@attrs.frozen
class _Update:
    writes: ClassVar[bool] = True
    inline: ClassVar[bool] = True  # a read and a write of one row: cheaper than a hop
    namespace: str
    key: str
    fn: Callable[[Entry | None], Any]
    max_bytes: int

    def run(self, conn: sqlite3.Connection) -> Entry:
        namespace, key = self.namespace, self.key
        row = conn.execute(_SELECT, (namespace, key)).fetchone()
        old = None
        if row is not None:
            old = Entry(namespace, key, decode_value(namespace, key, row[0]), row[1], row[2])
        encoded = encode_entry(namespace, key, self.fn(old), self.max_bytes)
        value, data = encoded.value, encoded.data.decode()
        now = time.time()
        if old is None:
            conn.execute(_INSERT, (namespace, key, data, now))
        else:
            conn.execute(_UPDATE, (data, old.version + 1, now, namespace, key))
        return Entry(namespace, key, value, 1 if old is None else old.version + 1, now)

    def error(self, cause: BaseException) -> BaseException:
        if isinstance(cause, sqlite3.Error):
            return StoreError(f"update of entry {self.key!r}", cause, key=self.namespace)
        return cause  # the function's own exception, unchanged


@attrs.frozen
class _Delete:
    writes: ClassVar[bool] = True
    inline: ClassVar[bool] = True  # one small statement: cheaper than a hop
    namespace: str
    key: str

    def run(self, conn: sqlite3.Connection) -> None:
        conn.execute(_DELETE, (self.namespace, self.key))

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"delete of entry {self.key!r}", cause, key=self.namespace)


@attrs.frozen
class _Clear:
    writes: ClassVar[bool] = True
    namespace: str

    def run(self, conn: sqlite3.Connection) -> None:
        conn.execute(_CLEAR, (self.namespace,))

    def error(self, cause: BaseException) -> BaseException:
        return StoreError("clear", cause, key=self.namespace)


@attrs.frozen
class _List:
    writes: ClassVar[bool] = False
    inline: ClassVar[bool] = True  # a range of one index: cheaper than a hop (see the note)
    namespace: str
    prefix: str

    def run(self, conn: sqlite3.Connection) -> list[tuple[str, str, int, float]]:
        if not self.prefix:
            return conn.execute(_LIST_ALL, (self.namespace,)).fetchall()
        upper = prefix_upper_bound(self.prefix)
        if upper is None:
            return conn.execute(_LIST_FROM, (self.namespace, self.prefix)).fetchall()
        return conn.execute(_LIST_RANGE, (self.namespace, self.prefix, upper)).fetchall()

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"list of prefix {self.prefix!r}", cause, key=self.namespace)


@attrs.frozen
class _Namespaces:
    writes: ClassVar[bool] = False

    def run(self, conn: sqlite3.Connection) -> list[str]:
        return [str(row[0]) for row in conn.execute(_NAMESPACES)]

    def error(self, cause: BaseException) -> BaseException:
        return StoreError("list of namespaces", cause)


_LOOKUP_CHUNK = 500  # bound variables per statement: far below SQLite's limit (999 at least)


def _lookup(
    conn: sqlite3.Connection, select: str, ops: Sequence[_Get] | Sequence[_Set]
) -> dict[tuple[str, str], tuple[Any, ...]]:
    """`select` (which yields the key first) for every entry the ops name, in one query per
    namespace and chunk of keys; the rest of each row by (namespace, key)."""
    keys_by_namespace: dict[str, dict[str, None]] = {}
    for op in ops:
        keys_by_namespace.setdefault(op.namespace, {})[op.key] = None
    found: dict[tuple[str, str], Any] = {}
    for namespace, unique in keys_by_namespace.items():
        keys = list(unique)
        for start in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[start : start + _LOOKUP_CHUNK]
            marks = ", ".join("?" * len(chunk))  # placeholders only: values stay bound
            for key, *rest in conn.execute(f"{select} ({marks})", (namespace, *chunk)):
                found[(namespace, key)] = tuple(rest)
    return found
