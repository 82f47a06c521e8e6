"""One run at a time per thread in an Agent: a second call on a busy thread waits its turn.

Two runs of one thread at once would race to save it, and one of them would fail on a
revision conflict after doing its work. Within one agent, they queue instead (a process
elsewhere is still caught by the store's compare-and-set). The thread's live run is also
what `agent.cancel` reaches, through its `RunControl`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import attrs

from .._errors import StateError
from .run_control import RunControl

__all__ = ["Turns"]


@attrs.define
class _Slot:
    """A thread's place in line: the lock, how many hold or wait for it, and the run that
    holds it."""

    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    users: int = 0
    live: RunControl | None = None


class Turns:
    """The threads this agent is running or about to, each with its line of runs."""

    def __init__(self) -> None:
        self._slots: dict[str, _Slot] = {}

    def live(self, thread_id: str) -> RunControl | None:
        """The thread's run in progress in this agent, if any."""
        slot = self._slots.get(thread_id)
        return None if slot is None else slot.live

    @contextlib.asynccontextmanager
    async def turn(
        self, thread_id: str, control: RunControl | None = None
    ) -> AsyncIterator[RunControl]:
        """Wait for the thread's turn, then hold it as its live run (`control`, or a new
        one). Raises `StateError` at once where waiting would wait forever: the live run
        waits for this very task (a tool or hook of its own, or the loop reading its
        stream)."""
        current = asyncio.current_task()
        control = RunControl() if control is None else control
        slot = self._slots.get(thread_id)
        live = None if slot is None else slot.live
        if live is not None and live.waits_for(current, control.consumer):
            raise StateError(
                f"thread {thread_id!r} has a run in progress that waits for this very task (a "
                f"tool or hook of that run, or the loop reading its agent.stream), so waiting "
                f"for its turn would wait forever. Let that run end (or close its stream) "
                f"first, or use another thread (agent.run(other_thread_id, ..., "
                f"parent_thread_id={thread_id!r}))."
            )
        if slot is None:
            slot = self._slots[thread_id] = _Slot()
        slot.users += 1
        try:
            async with slot.lock:
                control.take_turn(current)
                slot.live = control
                try:
                    yield control
                finally:
                    slot.live = None
                    control.turn_over()
        finally:
            slot.users -= 1
            if slot.users == 0:
                del self._slots[thread_id]
