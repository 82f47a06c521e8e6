"""The SQLite ThreadStore: each thread's saved state as one row of a SQLite file.

A save replaces the thread's whole row inside one transaction that first compares the
stored write position (the `revision` column: it held the revision before saves had
positions, and both only ever grow) and moves it by one, so a stale writer in another
process gets `RevisionConflict` whatever either save carried, an emptied
state is saved as empty, and nothing of an older save can come back. Concurrent checkpoints
of many threads share transactions through the connection's pipeline (`_sqlite_connection`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import ClassVar

import attrs

from statekernel import StoreError
from statekernel.lowlevel import ThreadState

from ._closing import ClosingStore
from ._sqlite_connection import Schema, SqliteConnection, Synchronous
from ._thread_codec import check_position, decode_state, encode_state

__all__ = ["SqliteThreadStore"]

_SCHEMA = Schema(
    component="thread_store",
    version=1,
    statements=(
        """
        CREATE TABLE thread_states (
            thread_id TEXT PRIMARY KEY,
            revision  INTEGER NOT NULL,
            state     BLOB NOT NULL,
            saved_at  REAL NOT NULL
        ) WITHOUT ROWID
        """,
    ),
)

_SELECT = "SELECT state, revision FROM thread_states WHERE thread_id = ?"
_SELECT_REVISION = "SELECT revision FROM thread_states WHERE thread_id = ?"
_REPLACE = (
    "INSERT OR REPLACE INTO thread_states (thread_id, revision, state, saved_at) "
    "VALUES (?, ?, ?, ?)"
)
_DELETE = "DELETE FROM thread_states WHERE thread_id = ?"


class SqliteThreadStore(ClosingStore):
    """A ThreadStore in a SQLite file (created on first use, with its schema).

    May share its file with a SqliteProfileStore. `synchronous="FULL"` makes every save
    survive power loss too, at an fsync per commit.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, synchronous: Synchronous = "NORMAL"
    ) -> None:
        self._db = SqliteConnection(path, _SCHEMA, synchronous=synchronous)

    @property
    def path(self) -> str:
        return self._db.path

    async def load(self, thread_id: str) -> ThreadState | None:
        if not isinstance(thread_id, str):
            raise TypeError(f"thread_id must be a string, got {type(thread_id).__name__}")
        row = await self._db.submit(_Load(thread_id))
        return None if row is None else decode_state(thread_id, row[0], row[1])

    async def save(self, thread_id: str, state: ThreadState, *, expected_position: int) -> None:
        data = encode_state(thread_id, state, expected_position)
        await self._db.submit(_Save(thread_id, data, expected_position))

    async def delete(self, thread_id: str) -> None:
        await self._db.submit(_Delete(thread_id))

    async def close(self) -> None:
        """Finish pending saves and close the file; the store reopens it on next use."""
        await self._db.close()


@attrs.frozen
class _Load:
    writes: ClassVar[bool] = False
    thread_id: str

    def run(self, conn: sqlite3.Connection) -> tuple[bytes, int] | None:
        row = conn.execute(_SELECT, (self.thread_id,)).fetchone()
        return None if row is None else (bytes(row[0]), int(row[1]))

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"load of thread {self.thread_id!r}", cause)


@attrs.frozen
class _Save:
    writes: ClassVar[bool] = True
    thread_id: str
    data: bytes
    expected: int

    def run(self, conn: sqlite3.Connection) -> None:
        row = conn.execute(_SELECT_REVISION, (self.thread_id,)).fetchone()
        position = check_position(self.expected, None if row is None else row[0])
        conn.execute(_REPLACE, (self.thread_id, position, self.data, time.time()))

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"save of thread {self.thread_id!r}", cause)


@attrs.frozen
class _Delete:
    writes: ClassVar[bool] = True
    thread_id: str

    def run(self, conn: sqlite3.Connection) -> None:
        conn.execute(_DELETE, (self.thread_id,))

    def error(self, cause: BaseException) -> BaseException:
        return StoreError(f"delete of thread {self.thread_id!r}", cause)
