"""Group commit: operations that arrive while earlier ones are in flight go to the server together.

A thousand threads stepping at once each want a durable save per step. Sent one by one, every
save is a transaction of its own: a round trip, a commit, a wait for the log to reach the
disk, while the pool's few connections queue the rest. A `GroupCommit` sends a write at once
when one of its `in_flight` slots is free; while all are busy, the writes that arrive wait
together and leave as one batch (at most `largest`) when a slot frees. Alone, a write is not
delayed at all; under load, a batch costs the server one transaction for many writes.

The stores keep two batches of a kind in flight: one fills while the other commits (a commit
waits for the server's log to reach the disk, the slowest step of a write). More would split
the same writes into more commits; measured with `benchmarks/postgres_stores.py`, one or two
do best.

With a `key`, a batch holds at most one write per key (one thread's saves depend on each
other's outcome), so a second write to the same key waits, in arrival order, for the next
batch; reads need no key.
`send(batch)` returns one outcome per write, in order: its result, or the exception that
write's caller receives; an exception of `send` itself goes to every caller in the batch.

This module knows nothing of SQL; the thread store says how a batch is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

__all__ = ["GroupCommit"]

W = TypeVar("W")
R = TypeVar("R")


class GroupCommit(Generic[W, R]):
    """Batches of writes, `in_flight` of them at a time, each write's own outcome to its caller."""

    def __init__(
        self,
        send: Callable[[Sequence[W]], Awaitable[Sequence[R | BaseException]]],
        *,
        key: Callable[[W], Hashable] | None,
        in_flight: int,
        largest: int,
    ) -> None:
        self._send = send
        self._key = key
        self._in_flight = in_flight
        self._largest = largest
        self._waiting: list[tuple[W, asyncio.Future[R]]] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def write(self, write: W) -> R:
        """Send `write` now if a slot is free, else with the next batch; its outcome."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop: nothing of the old one can finish
            self._loop, self._waiting, self._sending = loop, [], set()
        outcome: asyncio.Future[R] = loop.create_future()
        self._waiting.append((write, outcome))
        self._start()
        return await outcome

    async def drain(self) -> None:
        """Wait until every write handed in so far has its outcome."""
        if self._loop is asyncio.get_running_loop():
            while self._sending:
                await asyncio.gather(*self._sending, return_exceptions=True)

    def _start(self) -> None:
        while self._waiting and len(self._sending) < self._in_flight:
            batch = self._next_batch()
            task = asyncio.get_running_loop().create_task(self._deliver(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    def _next_batch(self) -> list[tuple[W, asyncio.Future[R]]]:
        batch: list[tuple[W, asyncio.Future[R]]] = []
        later: list[tuple[W, asyncio.Future[R]]] = []
        keys: set[Hashable] = set()
        for waiting in self._waiting:
            if waiting[1].done():  # its caller was cancelled before it left
                continue
            key = None if self._key is None else self._key(waiting[0])
            if len(batch) >= self._largest or (key is not None and key in keys):
                later.append(waiting)
            else:
                keys.add(key)
                batch.append(waiting)
        self._waiting = later
        return batch

    async def _deliver(self, batch: list[tuple[W, asyncio.Future[R]]]) -> None:
        outcomes: Sequence[R | BaseException]
        try:
            outcomes = await self._send([write for write, _ in batch])
        except asyncio.CancelledError:  # the event loop is closing
            for _, future in batch:
                future.cancel()
            raise
        except Exception as error:  # handed to every caller of the batch, never dropped
            outcomes = [error] * len(batch)
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():  # its caller stopped waiting (cancelled)
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        self._sending.discard(asyncio.current_task())
        self._start()
