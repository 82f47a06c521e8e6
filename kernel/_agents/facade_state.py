"""The state the Agent facade keeps for itself, in keys under the reserved prefix `statekernel.`.

The facade has no memory of its own between phases: what it must know after a crash or in
another process (the thread's messages, where each tool call of the run stands) is state
like any plugin's, committed, journaled and saved with the rest. Hooks read it the same way,
and `run_status` derives a run's status from it rather than from a flag that could drift.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .._engine.plugin import Plugin, PluginRegistrar
from .._engine.snapshot import Snapshot
from .._values.keys import RESERVED_PLUGIN_ID, StateKey
from .._values.loop_actions import HANDLERS as LOOP_ACTIONS
from .._values.loop_actions import StepRequest
from .._values.reserved_keys import History, MailCursor
from .._values.tools import ToolCallStatus

__all__ = ["CallState", "FacadeState", "History", "MailCursor", "ToolCalls", "run_status"]


class CallState(msgspec.Struct, frozen=True):
    """Where one tool call of the run stands."""

    id: str
    name: str
    status: ToolCallStatus
    error: str | None = None


class ToolCalls(StateKey[tuple[CallState, ...], CallState]):
    """The life of each tool call of this run; an update replaces the call's entry by id."""

    key = "statekernel.tool_calls"

    @staticmethod
    def apply(value: tuple[CallState, ...], update: CallState) -> tuple[CallState, ...]:
        for index, call in enumerate(value):
            if call.id == update.id:
                return (*value[:index], update, *value[index + 1 :])
        return (*value, update)


def run_status(snapshot: Snapshot) -> Literal["running", "waiting", "done"]:
    """The run's status, derived from the Agent's tool-call states in `snapshot`.

    `"running"` if any call is Running or Resuming; else `"waiting"` if any call is
    Suspended; else `"done"` (the step's calls are done). See
    [agent](agent.md#the-agent-in-ten-lines).
    """
    statuses = {call.status for call in snapshot.get(ToolCalls)}
    if statuses & {ToolCallStatus.RUNNING, ToolCallStatus.RESUMING}:
        return "running"
    if ToolCallStatus.SUSPENDED in statuses:
        return "waiting"
    return "done"


class FacadeState(Plugin):
    """The reserved plugin every Agent's kernel starts with: it registers the keys above and
    the loop actions' key and handlers, so that a user's plugins can read and schedule them.
    (The thread keys `History` and `MailCursor` every kernel registers, so that any kernel
    reads an Agent's thread.)"""

    id = RESERVED_PLUGIN_ID

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(ToolCalls)
        registrar.register_key(StepRequest)
        for action, handler in LOOP_ACTIONS.items():
            registrar.register_action(action, handler)
