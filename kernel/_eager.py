"""Running a coroutine eagerly: its first step now, a task only if it really suspends.

Most async hooks never wait for anything: they are `async def` for style, or they await
something that is already done. Making a task for each (what `asyncio.gather` does) costs
more than the hook itself. So the engine runs each coroutine's first step at once, and
only a coroutine that suspends gets a task, which carries on from where it stopped. What
a hook may observe stays as with a task: it runs in a context of its own (a copy, as a task
would have), and hooks still run concurrently.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any

__all__ = ["first_step"]


def first_step(awaitable: Awaitable[Any]) -> tuple[bool, Any]:
    """Run `awaitable`'s first step now. Returns `(True, value)` if that finished it, else
    `(False, task)` with a task for the rest. An exception of the first step is raised."""
    if not isinstance(awaitable, Coroutine):
        return False, asyncio.ensure_future(awaitable)
    context = contextvars.copy_context()
    try:
        yielded = context.run(awaitable.send, None)
    except StopIteration as done:
        return True, done.value
    loop = asyncio.get_running_loop()
    return False, loop.create_task(_Rest(awaitable, yielded), context=context)


class _Rest(Coroutine[Any, Any, Any]):
    """The rest of a started coroutine, for a task: first what it already yielded, then
    whatever the loop sends or throws goes straight to it. (A class rather than a generator:
    a cancellation thrown before the task's first step must reach the coroutine too.)"""

    __slots__ = ("_coroutine", "_yielded")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self._coroutine = coroutine
        self._yielded: tuple[Any] | None = (yielded,)

    def send(self, value: Any) -> Any:
        if self._yielded is not None:  # the task's first step: what the coroutine waits on
            (yielded,) = self._yielded
            self._yielded = None
            return yielded
        return self._coroutine.send(value)

    def throw(self, *error: Any) -> Any:
        self._yielded = None
        return self._coroutine.throw(*error)

    def close(self) -> None:
        self._yielded = None
        self._coroutine.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        raise TypeError("only a task runs the rest of an eagerly started coroutine")
