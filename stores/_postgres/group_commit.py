"""Group commit: operations that arrive while earlier ones are in flight go to the server together.

A thousand threads stepping at once each want a durable save per step. Sent one by one, every
save is a transaction of its own: a round trip, a commit, a wait for the log to reach the
disk, while the pool's few connections queue the rest. A `GroupCommit` sends an operation at
once when one of its `in_flight` slots is free; while all are busy, the operations that
arrive wait together and leave as one batch (at most `largest` of them, and at most
`budget` bytes by `size`, unless one alone is larger) when a slot frees. Alone, an operation
is not delayed at all; under load, a batch costs the server one transaction for many.

The stores keep two batches of a kind in flight: one fills while the other commits (a commit
waits for the server's log to reach the disk, the slowest step of a write). More would split
the same writes into more commits; measured with `benchmarks/postgres_stores.py`, one or two
do best.

With a `key`, operations on one key leave one at a time in the order they were handed in:
a batch holds at most one per key, and none leaves while an earlier one of its key is in
flight (one thread's saves depend on each other's outcome; one entry's writes must land in
call order). Reads need no key.

An operation that has left cannot be called back: its caller may stop waiting, but the
batch runs on and `Ticket.outcome` still comes. `Ticket.withdraw` takes back one that has
not left. `send(batch)` returns one outcome per operation, in order: its result, or the
exception its caller receives; an exception of `send` itself goes to every caller in the
batch.

**Whose deadline a batch runs on.** Each operation is handed in with its caller's context
(`contextvars`) and its call's deadline (`deadline`). A batch is sent in the context of its
operation whose caller waits longest, and so runs on that deadline: its trips to the server
go on while any of its callers still waits for the answer, and no longer; a caller that gave
up earlier does not cut the others short; and each caller still stops waiting at its own
deadline. Never in the context of the task that started the batch: as slots free, each
batch starts the next, and under sustained load every batch would run on the first
caller's deadline, long passed.

This module knows nothing of SQL; the stores say how a batch is written.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import attrs

__all__ = ["GroupCommit", "Ticket"]

W = TypeVar("W")
R = TypeVar("R")


@attrs.define(eq=False)
class Ticket(Generic[W, R]):
    """One operation handed to a `GroupCommit`: `outcome` resolves when it has been sent and
    answered, whoever still waits for it."""

    operation: W
    key: Hashable
    outcome: asyncio.Future[R]
    context: contextvars.Context  # its caller's, as it handed the operation in
    patience: float  # when its caller stops waiting (the event loop's clock; inf: never)
    left: bool = False
    withdrawn: bool = False

    def withdraw(self) -> bool:
        """Take the operation back if it has not left (True); once it has, it runs on."""
        if self.left:
            return False
        self.withdrawn = True
        return True


class GroupCommit(Generic[W, R]):
    """Batches of operations, `in_flight` at a time, each operation's own outcome to its
    caller."""

    def __init__(
        self,
        send: Callable[[Sequence[W]], Awaitable[Sequence[R | BaseException]]],
        *,
        key: Callable[[W], Hashable] | None,
        in_flight: int,
        largest: int,
        size: Callable[[W], int] | None = None,
        budget: int = 0,
        deadline: Callable[[], float | None] = lambda: None,
    ) -> None:
        self._send = send
        self._deadline = deadline
        self._key = key
        self._in_flight = in_flight
        self._largest = largest
        self._size = size
        self._budget = budget
        self._waiting: list[Ticket[W, R]] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._busy: set[Hashable] = set()  # the keys of operations in flight
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(self, operation: W) -> Ticket[W, R]:
        """Hand in `operation`: it leaves now if a slot is free, else with the next batch."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop: nothing of the old one can finish
            self._loop, self._waiting, self._sending, self._busy = loop, [], set(), set()
        outcome: asyncio.Future[R] = loop.create_future()
        # Its caller may have stopped waiting: the outcome is then read here, not lost.
        outcome.add_done_callback(_consume)
        key = None if self._key is None else self._key(operation)
        ends = self._deadline()
        patience = math.inf if ends is None else ends
        ticket = Ticket(operation, key, outcome, contextvars.copy_context(), patience)
        self._waiting.append(ticket)
        self._start()
        return ticket

    async def write(self, operation: W) -> R:
        """Hand in `operation` and wait for its outcome. Cancelled before it left, it never
        leaves; after, it runs on without its caller."""
        return await self.outcome(self.submit(operation))

    @staticmethod
    async def outcome(ticket: Ticket[W, R]) -> R:
        """Wait for `ticket`'s outcome; cancelled, take it back if it has not left."""
        try:
            return await asyncio.shield(ticket.outcome)
        except asyncio.CancelledError:
            ticket.withdraw()
            raise

    async def drain(self) -> None:
        """Wait until the operations in flight or waiting have their outcome (without
        cancelling any of them if the wait itself is cancelled)."""
        if self._loop is not asyncio.get_running_loop():
            return
        while self._sending:
            await asyncio.wait(set(self._sending))

    def _start(self) -> None:
        while self._waiting and len(self._sending) < self._in_flight:
            batch = self._next_batch()
            if not batch:  # every waiting operation's key is in flight
                return
            # (max keeps the first of equals: the newest, going backwards)
            waits_longest = max(reversed(batch), key=lambda ticket: ticket.patience)
            task = asyncio.get_running_loop().create_task(
                self._deliver(batch), context=waits_longest.context
            )
            self._sending.add(task)

    def _next_batch(self) -> list[Ticket[W, R]]:
        batch: list[Ticket[W, R]] = []
        later: list[Ticket[W, R]] = []
        keys: set[Hashable] = set()
        size = 0
        for ticket in self._waiting:
            if ticket.withdrawn:
                continue
            key = ticket.key
            held = key is not None and (key in keys or key in self._busy)
            if key is not None:
                keys.add(key)  # a later operation of this key waits for this one
            weight = 0 if self._size is None else self._size(ticket.operation)
            full = len(batch) >= self._largest or (batch and size + weight > self._budget)
            if held or full:
                later.append(ticket)
                continue
            size += weight
            ticket.left = True
            if key is not None:
                self._busy.add(key)
            batch.append(ticket)
        self._waiting = later
        return batch

    async def _deliver(self, batch: list[Ticket[W, R]]) -> None:
        outcomes: Sequence[R | BaseException]
        try:
            outcomes = await self._send([ticket.operation for ticket in batch])
        except asyncio.CancelledError:  # the event loop is closing: nothing will be sent
            for ticket in [*batch, *self._waiting]:
                ticket.outcome.cancel()
            self._waiting = []
            raise
        except Exception as error:  # handed to every caller of the batch, never dropped
            outcomes = [error] * len(batch)
        finally:
            self._sending.discard(asyncio.current_task())
            self._busy.difference_update(ticket.key for ticket in batch)
        for ticket, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                ticket.outcome.set_exception(outcome)
            else:
                ticket.outcome.set_result(outcome)
        self._start()


def _consume(outcome: asyncio.Future[Any]) -> None:
    if not outcome.cancelled():
        outcome.exception()
