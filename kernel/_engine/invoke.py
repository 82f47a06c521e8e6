"""Calling user code: one policy for hooks, tool gates, action and effect handlers, request
transforms, tools, schema nodes and phase listeners.

User code may be sync or async: whatever it returns is awaited if it is awaitable. A
`StateError` it raises is the kernel's own language (a rejected commit, an unknown key) and
passes through as itself. Anything else is wrapped in `HookFailed`, naming who failed and in
which phase, so a caller handles one error type that says where to look. What it returns is
checked against what its kind may return, also as a `HookFailed`: a hook that returns a dict
by mistake fails where it returned, not three frames later in the merge.

The engine's gather round calls hooks itself (sync hooks in place, async ones concurrently,
the first failure in registration order reported), and uses `reraise` and `checked` from
here for the rest of the policy.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

from .._errors import HookFailed, StateError, _preview

T = TypeVar("T")

__all__ = ["call", "checked", "outcome", "reraise", "through_cancellation"]


async def call(function: Callable[..., Any], *args: Any, owner: str, phase: str) -> Any:
    """`function(*args)`, awaited if it returns an awaitable, with failures as the policy says."""
    try:
        return await outcome(function, *args)
    except Exception as error:
        reraise(owner, phase, error)


async def outcome(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)`, awaited if it returns an awaitable; exceptions pass unchanged.

    For user code whose failure is a result rather than an error (a tool: its exception
    becomes a failed `ToolResult` for the model); everything else uses `call`."""
    result = function(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


CANCEL_PATIENCE = 0.5
"""How long, in seconds, `through_cancellation` still waits for its work once cancelled: a
local save finishes well within it, and a cancelled caller still returns within a second."""


async def through_cancellation(
    work: Awaitable[T],
    *,
    patience: float = CANCEL_PATIENCE,
    on_give_up: Callable[[], None] = lambda: None,
) -> tuple[T, bool]:
    """Await `work` to its end even if the caller is cancelled meanwhile, for up to
    `patience` seconds more; returns its result and whether the caller was cancelled (it
    then raises `CancelledError` itself, once it took note of the result: late, never
    lost). For what should not stop half-way: a store save that may commit anyway.
    `work`'s own failure is raised as it is.

    Work still going `patience` seconds after the cancellation goes on without its caller,
    who gets `CancelledError` at once, not knowing its outcome (`on_give_up` is called
    first, to say so): a cancelled caller is never held by a store that stopped answering.
    Whoever depends on that outcome must read it from the store again.

    `work` runs in a task of its own from its first step, so that what it starts (a
    timeout, a task group) belongs to it, not to the caller.
    """
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    give_up: float | None = None
    while not task.done():
        if give_up is not None and loop.time() >= give_up:
            task.add_done_callback(_consume)  # its failure has no one to go to now
            on_give_up()
            raise asyncio.CancelledError
        try:
            if give_up is None:
                await asyncio.shield(task)
            else:
                await asyncio.wait({task}, timeout=give_up - loop.time())
        except asyncio.CancelledError:
            if task.cancelled():
                break
            if give_up is None:
                give_up = loop.time() + patience
        except BaseException:
            break  # the task's own failure, read below
    if give_up is not None:  # the caller's cancellation wins over what became of `work`
        if task.cancelled():
            raise asyncio.CancelledError
        if (error := task.exception()) is not None:
            raise asyncio.CancelledError from error
    return task.result(), give_up is not None


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def reraise(owner: str, phase: str, error: Exception) -> NoReturn:
    """Raise `error` itself if it is a `StateError`, else a `HookFailed` caused by it."""
    if isinstance(error, StateError):
        raise error
    raise HookFailed(owner, phase, error) from error


def checked(
    result: Any,
    allowed: tuple[type, ...],
    *,
    owner: str,
    phase: str,
    what: str,
    expected: str,
    optional: bool = True,
    exact: bool = False,
) -> Any:
    """`result` if it is one of `allowed` (exactly that class, when `exact`; None too, when
    `optional`), else a `HookFailed` saying that `what` must return `expected`."""
    if optional and result is None:
        return result
    if type(result) in allowed if exact else isinstance(result, allowed):
        return result
    problem = TypeError(f"{what} must return {expected}, got {_preview(result)}")
    raise HookFailed(owner, phase, problem)
