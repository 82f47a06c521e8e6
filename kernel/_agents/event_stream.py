"""`agent.stream(...)`'s side of a run: the async iterator its caller reads events from.

The run goes on in a task of its own while the caller reads, at the caller's pace (the
sink's backpressure). The caller may stop reading at any time, and a run must still end
cleanly then: this is where leaving is noticed and handed to the run's control.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from ..events import Event
from .event_sink import EventSink
from .run_control import RunControl
from .run_result import RunResult

__all__ = ["stream"]


async def stream(start: Callable[[RunControl], Awaitable[RunResult]]) -> AsyncIterator[Event]:
    """The events of the run `start(control)` begins, ending with `RunFinished`; an error
    the run raises (not a failure: those end in `RunFinished`) is raised here after them."""
    sink = EventSink()
    control = RunControl(sink=sink, consumer=asyncio.current_task())
    task = asyncio.ensure_future(start(control))
    task.add_done_callback(lambda done: sink.end())
    try:
        while (event := await sink.next()) is not None:
            yield event
        task.result()
    finally:
        if not task.done():
            control.consumer_left()
            if not control.started:  # still waiting for its turn: nothing to end cleanly
                task.cancel()
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise  # the consumer itself is cancelled: the run ends on its own
