"""How an Agent's run ended, and what a suspended run waits on."""

from __future__ import annotations

from typing import Any, Literal

import attrs
import msgspec

from .._engine.snapshot import Snapshot
from .._values.messages import Message
from .._values.tools import ToolResult

__all__ = ["Outcome", "PendingCall", "RunResult"]

Outcome = Literal["success", "failure", "suspended", "cancelled", "superseded", "stopped"]


class PendingCall(msgspec.Struct, frozen=True):
    """A suspended tool call: what it was, and the ticket describing what it waits for.

    `PendingCall(id, name, arguments, ticket=None)`: the call's id, tool name and
    arguments, and the `Suspend` ticket it waits on. These are found in
    `RunResult.pending` and `agent.pending(thread_id)`. After a crash the ticket is
    `"interrupted"` (the tool was running) or `"not started"`. See
    [agent: suspend and resume](agent.md#suspend-and-resume).
    """

    id: str
    name: str
    arguments: dict[str, Any]
    ticket: Any = None


@attrs.frozen
class RunResult:
    """How a run ended, as `agent.run`, `agent.resume` and `agent.cancel` return it.

    `RunResult(outcome, snapshot, messages, steps, error=None, pending=(), tool_results=(),
    unsaved=())`:

    - `outcome`: `"success"` (the model answered without tool calls), `"failure"` (see
      `error`), `"suspended"` (see `pending`), `"cancelled"`, or `"superseded"`: another
      process (or Agent) saved the thread while this run went on, so nothing of the run
      after its last save was kept (`error` is the `RevisionConflict`, logged at INFO
      without a traceback: it is a race lost, not a failure; run again to continue from
      what the other saved); or `"stopped"`: a team worker that was told to stop
      (`team.serve`'s `stop`) stopped the run before its next step, leaving the thread as
      its last step saved it, and the agent's next run, in any process, carries on.
    - `snapshot`: the final state.
    - `messages`: the thread's whole history after the run, as a tuple of `Message`.
    - `steps`: how many steps were taken.
    - `error`: the exception behind a failure. A failure is also logged at ERROR on the
      `statekernel` logger, with the traceback of what failed, and a stream yields
      `RunFailed` before `RunFinished`.
    - `pending`: the `PendingCall`s that a suspended run waits on.
    - `tool_results`: the `ToolResult`s of the calls that ended during this `run` (or
      `resume`, `cancel`), in order; a tool that raised has its exception, traceback
      included, in its `exception`.
    - `unsaved`: the messages given to `run` that no save holds (the run failed, or was
      superseded, before its first save):
      `agent.run(thread_id, result.unsaved)` sends them again. Empty once any save of the
      run succeeded.

    `str(result)` says how the run ended in one line, a failure with what failed it
    (`failure after 1 step: HookFailed: hook of plugin 'settings' failed in phase
    STEP_START: ValueError: bad config. ...`). See
    [agent](agent.md#the-agent-in-ten-lines).
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
