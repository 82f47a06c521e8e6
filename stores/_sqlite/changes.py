"""What the SQLite profile store's change feeds learn of writes it did not make: commits by
other connections to its file (another process, another store object, a
`SqliteThreadStore` sharing the file), seen by polling `PRAGMA data_version`.

Why a poll. SQLite has no notices between processes. `PRAGMA data_version` is the cheapest
question there is: it reads a counter in the shared memory of the WAL index, changed by
every commit of another connection and by none of the asking connection's own. Asked on
the connection the store writes through, it therefore never mistakes the store's own
writes (which its feeds are told of at once, with their keys) for someone else's. It
cannot say which entries changed, or even whether any profile entry did (a thread save
counts too), so a change is reported as "unknown" (None).

One poll per store object, however many feeds, running only while a feed is entered: one
small statement on the event loop's thread per interval (0.1 s by default), well under
1 % of a core.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sqlite3
from typing import ClassVar

from statekernel import StoreError

from .._changes import Watchers
from .connection import SqliteConnection

__all__ = ["CHANGE_POLL_SECONDS", "DataVersionPoll", "check_change_poll"]

logger = logging.getLogger("statekernel")

CHANGE_POLL_SECONDS = 0.1
"""How often, by default, a SQLite profile store with a feed entered asks whether another
connection committed to its file (`change_poll`)."""


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


class DataVersionPoll:
    """The `FeedSource` of a SQLite profile store: it tells the store's watchers "unknown"
    when another connection committed to the file."""

    def __init__(self, db: SqliteConnection, watchers: Watchers, interval: float) -> None:
        self._db = db
        self._watchers = watchers
        self._interval = interval
        self._feeds = 0
        self._task: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None
        self._failing = False

    async def attach(self, namespace: str) -> None:
        self._feeds += 1
        try:
            await self._start()
        except BaseException:
            self._feeds -= 1
            raise

    async def detach(self, namespace: str) -> None:
        self._feeds -= 1
        if self._feeds == 0:
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

    async def _start(self) -> None:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._task is not None and not self._task.done():
                return
            # The baseline: a commit by anyone else from here on changes the answer.
            version = await self._db.submit(_DataVersion())
            self._task = asyncio.get_running_loop().create_task(self._poll(version))

    async def _stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _poll(self, version: int) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                now = await self._db.submit(_DataVersion())
            except StoreError as error:
                # The file cannot be asked (gone, unreadable): the watchers cannot know
                # either, so they look for themselves; said once until it answers again.
                if not self._failing:
                    logger.warning("SQLite change feed cannot poll %s: %s", self._db.path, error)
                    self._failing = True
                self._watchers.unknown()
                continue
            self._failing = False
            if now != version:
                version = now
                self._watchers.unknown()


class _DataVersion:
    """`PRAGMA data_version`: changed by every commit of another connection to the file."""

    writes: ClassVar[bool] = False
    inline: ClassVar[bool] = True  # a read of shared memory: cheaper than a hop

    def run(self, conn: sqlite3.Connection) -> int:
        return int(conn.execute("PRAGMA data_version").fetchone()[0])

    def error(self, cause: BaseException) -> BaseException:
        return StoreError("poll for changes by other connections", cause)
