"""How an Agent's run ended, and what a suspended run waits on."""

from __future__ import annotations

from typing import Any, Literal

import attrs
import msgspec

from .._engine.snapshot import Snapshot
from .._values.messages import Message
from .._values.tools import ToolResult

__all__ = ["Outcome", "PendingCall", "RunResult"]

Outcome = Literal["success", "failure", "suspended", "cancelled"]


class PendingCall(msgspec.Struct, frozen=True):
    """A suspended tool call: what it was, and the ticket describing what it waits for."""

    id: str
    name: str
    arguments: dict[str, Any]
    ticket: Any = None


@attrs.frozen
class RunResult:
    """How a run ended.

    `outcome` is "success" (the model answered without tool calls), "failure" (see
    `error`), "suspended" (see `pending`) or "cancelled". `messages` is the thread's whole
    history after the run; `steps` counts the steps taken. `tool_results` are the calls
    that ended during this `run` (or `resume`, `cancel`), in order; a tool that raised has
    its exception, traceback included, in its `exception`. `unsaved` are the messages given
    to `run` that no save holds (the run failed before its first save, for example on a
    `RevisionConflict` with another process): `agent.run(thread_id, result.unsaved)` sends
    them again. `str(result)` says it in one line, a failure with what failed it.
    """

    outcome: Outcome
    snapshot: Snapshot
    messages: tuple[Message, ...]
    steps: int
    error: BaseException | None = None
    pending: tuple[PendingCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    unsaved: tuple[Message, ...] = ()

    def __str__(self) -> str:
        steps = f"{self.steps} step" + ("" if self.steps == 1 else "s")
        said = f"{self.outcome} after {steps}"
        if self.error is not None:
            text = str(self.error)
            said += (
                f": {type(self.error).__name__}: {text}"
                if text
                else f": {type(self.error).__name__}"
            )
        if self.pending:
            said += f"; waiting on {', '.join(call.name for call in self.pending)}"
        return said
