"""Change feeds: a profile store that tells a waiting process which entries were written, so
that a team's workers sleep between letters instead of polling the store.

A store that can tell implements `SupportsChanges`; the kernel asks nothing more of one that
cannot, and falls back to looking again on a timer. What a feed promises is deliberately
weak, so that every backend can keep it: a key written after the feed was entered is
reported by some later `next()` (possibly together with others, possibly more than once,
possibly as "unknown": `None`), never lost. It never promises that the write it reports is
the newest, or that the entry still exists: a watcher reads the entry to know.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, runtime_checkable

__all__ = ["ChangeFeed", "SupportsChanges"]


@runtime_checkable
class ChangeFeed(Protocol):
    """The keys of one namespace whose entries were written since the feed was entered.

    An async context manager: `async with store.changes(namespace) as feed:`. Entering
    starts listening (every write that commits after `__aenter__` returns is reported);
    leaving stops and releases what it held (a connection, a task).
    """

    async def next(self) -> frozenset[str] | None:
        """Wait until entries of the namespace were written since the last call (since
        entering, the first time), and return their keys.

        None means the store cannot say which keys: anything may have changed, and the
        watcher should look at everything it cares about (another process wrote to a file
        the store shares; a lost connection was made again, so notices may have been
        missed). Cancelling a waiting `next()` loses nothing: what arrived meanwhile is
        returned by the next call. Time limits are the caller's (`asyncio.timeout`).
        """
        ...

    async def __aenter__(self) -> ChangeFeed: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class SupportsChanges(Protocol):
    """A ProfileStore with change feeds: an optional, runtime-checkable protocol.

    `store.changes(namespace)` returns a `ChangeFeed` of that namespace. Every bundled
    profile store has it: the memory store reports its own writes at once; the SQLite store
    its own writes at once and other processes' writes to the same file within a stated
    poll interval (as "unknown"); the PostgreSQL store every process's writes, by
    `LISTEN`/`NOTIFY`, the notice sent in the write's own transaction, so that a watcher
    woken by it always finds the write.
    """

    def changes(self, namespace: str) -> ChangeFeed:
        """A feed of the keys of `namespace` written from the moment it is entered."""
        ...
