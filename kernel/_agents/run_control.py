"""How a live run is stopped, paced and reported on: the cancel protocol, in one object.

A run in progress can be asked to stop from three places: `agent.cancel` in another task,
the consumer of its stream leaving, and the model call it waits on being abandoned. It must
stop only at safe points (between phases, before a tool), so that every call it made is
answered and RUN_END runs. `RunControl` holds all that one run's stopping needs to know: the
task it runs in, the task reading its stream and the stream's queue, whether a cancel was
requested, whether the run is already ending, the model call it may abandon, and the answer
to whoever waits for its end. The loop asks it at each safe point (`safe_point`); everyone
else only calls `request_cancel`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from .._engine.phase_engine import PhaseReport
from .._errors import StateError
from .._host.run import Run
from ..events import Committed, Event, PhaseEnded, PhaseStarted, RunFailed, RunFinished
from .event_sink import EventSink
from .run_result import RunResult

__all__ = ["CancelRequested", "RunControl", "StopRequested"]

T = TypeVar("T")


class CancelRequested(StateError):
    """Raised at a safe point of a run whose cancel was requested; the Agent ends the run.
    (A StateError, so that it passes through the phase listener that raises it unchanged.)"""


class StopRequested(StateError):
    """Raised where a run whose stop was requested would begin its next step; the Agent
    lets the thread go as its last save left it. (A StateError, like `CancelRequested`.)"""


class RunControl:
    """One run of a thread in this agent, from the moment it is asked for to its end.

    A streamed run has its `sink` and `consumer` from the start; `take_turn` gives it the
    task it runs in once the thread is free, and `watch` marks it begun.
    """

    def __init__(
        self, *, sink: EventSink | None = None, consumer: asyncio.Task[Any] | None = None
    ) -> None:
        self.sink = sink
        self.consumer = consumer  # the task reading the stream
        self.task: asyncio.Task[Any] | None = None  # the task the run runs in
        self.started = False  # the run has its turn and has begun
        self.cancel_requested = False
        self.stop_requested = False
        self.ending = False  # RUN_END is under way: no safe point stops it any more
        self._finished: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()
        self._in_model: asyncio.Task[Any] | None = None  # the task waiting for the model
        self._model_cancelled = False

    def take_turn(self, task: asyncio.Task[Any] | None) -> None:
        """The thread is this run's now; it runs in `task`."""
        self.task = task

    def waits_for(self, *tasks: asyncio.Task[Any] | None) -> bool:
        """Whether this run cannot end before one of `tasks` does: its own task (a tool or
        hook of it) or the task reading its stream."""
        return any(t is not None and (t is self.task or t is self.consumer) for t in tasks)

    def watch(self, run: Run) -> None:
        """The run has begun: a streamed one shows its phases and commits as they happen."""
        self.started = True
        sink = self.sink
        if sink is not None:
            run.add_phase_start_listener(lambda run, phase: sink.emit(PhaseStarted(phase)))
            run.add_record_listener(lambda record: sink.emit(Committed(record)))
            run.add_phase_listener(self._phase_ended)

    def emit(self, event: Event) -> None:
        if self.sink is not None:
            self.sink.emit(event)

    @property
    def streamed(self) -> bool:
        return self.sink is not None

    def request_cancel(self) -> None:
        """Stop the run at its next safe point, and abandon the model call it waits on."""
        self.cancel_requested = True
        if self.sink is not None:
            self.sink.wake()
        if self._in_model is not None and not self._model_cancelled:
            self._model_cancelled = True  # abandon the model call in flight
            self._in_model.cancel()

    def request_stop(self) -> None:
        """Stop the run before its next step begins, leaving the thread as that step's save
        left it: nothing is cancelled and RUN_END does not run, so that whoever runs the
        agent next carries the conversation on (what a team's draining worker asks)."""
        self.stop_requested = True

    def stop_before_step(self) -> None:
        """Stop here, where the next step would begin, if a stop was requested."""
        if self.stop_requested and not self.ending:
            raise StopRequested

    def consumer_left(self) -> None:
        """The stream's consumer stopped reading: a run that has begun stops at its next
        safe point (one still waiting for its turn is the stream's to cancel)."""
        assert self.sink is not None
        self.sink.close()
        if self.started:
            self.request_cancel()

    def end(self) -> None:
        """The run is ending (RUN_END must run): no safe point stops it from here on."""
        self.ending = True

    async def safe_point(self) -> None:
        """Wait until the consumer of a stream took the events so far, then stop here if a
        cancel was requested (or the consumer left)."""
        if self.ending:
            return
        if self.sink is not None:
            await self._keep_pace(self.sink)
        if self.cancel_requested:
            raise CancelRequested

    def stop_if_requested(self) -> None:
        """Stop here if a cancel was requested and the run is not ending anyway."""
        if self.cancel_requested and not self.ending:
            raise CancelRequested

    async def abandonable(self, answer: Awaitable[T]) -> T:
        """Await `answer` (the model's), abandoning it if a cancel is requested meanwhile.

        No task of its own: a cancel request cancels this task while (and only while) it
        waits, and that one cancellation is taken back here as a stop."""
        current = asyncio.current_task()
        self._in_model = current
        try:
            answered = await answer
        except BaseException as error:
            self._in_model = None
            if not self._took_back(current):
                raise  # not from a cancel request: a failure, or cancelled from outside
            if not isinstance(error, Exception | asyncio.CancelledError):
                raise  # KeyboardInterrupt and the like go on
            raise CancelRequested from None  # however the model reacted to it
        self._in_model = None
        if self._took_back(current) or self.cancel_requested:
            raise CancelRequested  # asked while the answer arrived: it is not used
        return answered

    def conclude(self, result: RunResult) -> None:
        """The run is over: the stream's last event, and the answer to `agent.cancel`."""
        if not self._finished.done():
            if result.error is not None and result.outcome == "failure":
                error = result.error
                plugin = getattr(error, "plugin", None)
                phase = getattr(error, "phase", None)
                self.emit(
                    RunFailed(
                        error,
                        plugin if isinstance(plugin, str) else None,
                        str(phase) if phase is not None else None,
                    )
                )
            self.emit(RunFinished(result))
            self._finished.set_result(result)

    async def ended(self) -> RunResult | None:
        """How the run ended, once it has; None if it ended before it began (nothing to
        report). Cancelling one impatient caller cancels nothing else."""
        try:
            return await asyncio.shield(self._finished)
        except asyncio.CancelledError:
            if not self._finished.cancelled():
                raise
            return None

    def turn_over(self) -> None:
        """The thread is free again: a run that never reported has nothing to report."""
        if not self._finished.done():
            self._finished.cancel()

    async def _phase_ended(self, run: Run, report: PhaseReport) -> None:
        """Keep pace with the consumer at every phase end, but stop only at the loop's own
        safe points: a phase may end in the middle of a tool call, whose result must still
        be recorded."""
        assert self.sink is not None
        self.sink.emit(PhaseEnded(report))
        if not self.ending:
            await self._keep_pace(self.sink)

    async def _keep_pace(self, sink: EventSink) -> None:
        while not (self.cancel_requested or sink.caught_up()):
            await sink.changed()

    def _took_back(self, current: asyncio.Task[Any] | None) -> bool:
        """Take back the cancellation a cancel request sent into the model call, if it
        did. Returns whether it did and nothing else cancelled this task meanwhile (then
        that cancellation must go on: `CancelledError` is raised)."""
        if not self._model_cancelled:
            return False
        self._model_cancelled = False
        if current is not None and current.uncancel() > 0:
            raise asyncio.CancelledError  # an outside cancellation (a timeout) came too
        return True
