"""The lock that serialises a run's calls into its engine, free when nobody else holds it.

A run is driven by one task almost always, so its lock is nearly never contended, yet an
`asyncio.Lock` costs three coroutine calls per phase even then. `RunLock.take_now()` takes a
free lock without an await; only a caller that finds it held waits, first come first served,
and a release hands the lock straight to the next waiter.
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType


class RunLock:
    """A FIFO asyncio lock with a synchronous fast path (`take_now`)."""

    __slots__ = ("_held", "_waiters")

    def __init__(self) -> None:
        self._held = False
        self._waiters: deque[asyncio.Future[None]] = deque()

    def take_now(self) -> bool:
        """Take the lock if it is free (then True), without waiting."""
        if self._held:
            return False
        self._held = True
        return True

    async def take(self) -> None:
        """Take the lock, waiting for it in turn if it is held."""
        if self.take_now():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed the lock, then cancelled: pass it on
            elif waiter in self._waiters:  # (a release may have dropped it already)
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """Hand the lock to the next waiter still waiting, or free it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # still held: it is the waiter's now
                return
        self._held = False

    async def __aenter__(self) -> None:
        await self.take()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
