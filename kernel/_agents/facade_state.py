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
from .._values.keys import RESERVED_PLUGIN_ID, KeyScope, StateKey
from .._values.loop_actions import HANDLERS as LOOP_ACTIONS
from .._values.loop_actions import StepRequest
from .._values.messages import Message
from .._values.tools import ToolCallStatus
from .._values.vector import Vector

__all__ = ["CallState", "FacadeState", "History", "MailCursor", "ToolCalls", "run_status"]


class CallState(msgspec.Struct, frozen=True):
    """Where one tool call of the run stands."""

    id: str
    name: str
    status: ToolCallStatus
    error: str | None = None


class History(StateKey[Vector[Message], tuple[Message, ...]]):
    """The thread's whole message history (a thread key: it survives across runs)."""

    key = "statekernel.messages"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[Message], update: tuple[Message, ...]) -> Vector[Message]:
        return value.extend(update)


class ToolCalls(StateKey[tuple[CallState, ...], CallState]):
    """The life of each tool call of this run; an update replaces the call's entry by id."""

    key = "statekernel.tool_calls"

    @staticmethod
    def apply(value: tuple[CallState, ...], update: CallState) -> tuple[CallState, ...]:
        for index, call in enumerate(value):
            if call.id == update.id:
                return (*value[:index], update, *value[index + 1 :])
        return (*value, update)


class MailCursor(StateKey[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]):
    """Per sender, the sequence number of the last team message delivered into the thread
    (a thread key). It is committed with the messages it counts, in one commit, so a save
    holds both or neither: the mailbox delivers what lies beyond it, exactly once. An update
    raises senders' numbers and never lowers one."""

    key = "statekernel.mail_cursor"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(
        value: tuple[tuple[str, int], ...], update: tuple[tuple[str, int], ...]
    ) -> tuple[tuple[str, int], ...]:
        merged = dict(value)
        for sender, seq in update:
            merged[sender] = max(merged.get(sender, 0), seq)
        return tuple(sorted(merged.items()))


def run_status(snapshot: Snapshot) -> Literal["running", "waiting", "done"]:
    """The run's status, derived from its tool calls: any Running (or Resuming) → running;
    else any Suspended → waiting; else the step's calls are done."""
    statuses = {call.status for call in snapshot.get(ToolCalls)}
    if statuses & {ToolCallStatus.RUNNING, ToolCallStatus.RESUMING}:
        return "running"
    if ToolCallStatus.SUSPENDED in statuses:
        return "waiting"
    return "done"


class FacadeState(Plugin):
    """The reserved plugin every Agent's kernel starts with: it registers the keys above and
    the loop actions' key and handlers, so that a user's plugins can read and schedule them."""

    id = RESERVED_PLUGIN_ID

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(History)
        registrar.register_key(ToolCalls)
        registrar.register_key(MailCursor)
        registrar.register_key(StepRequest)
        for action, handler in LOOP_ACTIONS.items():
            registrar.register_action(action, handler)
