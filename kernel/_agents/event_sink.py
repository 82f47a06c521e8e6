"""The events of one streamed run on their way to the task reading them, with backpressure.

A run can produce events far faster than a web page reads them. Rather than buffer without
bound, the run waits at its safe points until the consumer has taken everything so far;
the queue here is what both sides share. What the run does when the consumer leaves (stop)
is its control's business (`run_control.py`): the sink only holds the events and tells
each side when the other moved.
"""

from __future__ import annotations

import asyncio
import collections

from ..events import Event

__all__ = ["EventSink"]


class EventSink:
    """The events on their way, and how far the consumer has got."""

    def __init__(self) -> None:
        self._events: collections.deque[Event] = collections.deque()
        self._ready = asyncio.Event()  # events are waiting, or the run ended
        self._changed = asyncio.Event()  # the consumer waits, left, or a cancel came
        self._waiting = False  # the consumer waits for the next event
        self._ended = False
        self._closed = False

    def emit(self, event: Event) -> None:
        if not self._closed:
            self._events.append(event)
            self._ready.set()

    def end(self) -> None:
        """The run ended: once the consumer took what is left, there is nothing more."""
        self._ended = True
        self._ready.set()

    def close(self) -> None:
        """The consumer left: what it did not take is dropped, and nothing more is kept."""
        self._closed = True
        self._events.clear()
        self._changed.set()

    def wake(self) -> None:
        """Let a run waiting for the consumer look again (a cancel came)."""
        self._changed.set()

    def caught_up(self) -> bool:
        """Whether the consumer took every event so far (or left)."""
        return self._closed or (self._waiting and not self._events)

    async def changed(self) -> None:
        """Wait until the consumer waits again or leaves, or `wake` is called."""
        self._changed.clear()
        await self._changed.wait()

    async def next(self) -> Event | None:
        """The next event, or None once the run ended and every event was taken."""
        while not self._events:
            if self._ended:
                return None
            self._waiting = True
            self._changed.set()
            self._ready.clear()
            await self._ready.wait()
        self._waiting = False
        return self._events.popleft()
