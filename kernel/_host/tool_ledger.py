"""A run's books on its tool calls: what a gate's decision answers a call with, and how
each call ended.

The host runs a tool call (`Run.handle_tool_call`); the ledger keeps its account. A decision
that answers the call without its tool (a block, a suspension, a result set) becomes that
call's `ToolResult`. Each way a call ends is noted once as a `ToolRun`, however many paths
report it: the host's own, and the Agent's for calls that end elsewhere (an outside
decision, a tool it does not have, a run that stopped).
"""

from __future__ import annotations

from .._values.toolgate import Block, GateDecision, Suspend
from .._values.tools import ToolCall, ToolCallStatus, ToolResult
from .run_notes import RunNotes

__all__ = ["ToolLedger"]


class ToolLedger:
    """The tool calls of one run, as its notes record them."""

    __slots__ = ("_ends", "_notes")

    def __init__(self, notes: RunNotes) -> None:
        self._notes = notes
        self._ends: dict[str, str] = {}  # the status last noted of each tool call

    def decided(self, call: ToolCall, decision: GateDecision) -> ToolResult:
        """The result a gate's `decision` gives `call` without its tool running, noted as
        how the call ended: a `Block` fails it with its reason, a `Suspend` suspends it
        with its ticket, a `SetResult` succeeds it with its result."""
        if isinstance(decision, Block):
            result = ToolResult(call, ToolCallStatus.FAILED, error=decision.reason)
        elif isinstance(decision, Suspend):
            result = ToolResult(call, ToolCallStatus.SUSPENDED, ticket=decision.ticket)
        else:
            result = ToolResult(call, ToolCallStatus.SUCCEEDED, result=decision.result)
        return self.ended(result)

    def ended(self, result: ToolResult) -> ToolResult:
        """Note how a tool call ended (`ToolRun`), unless it was noted with the same status
        already; returns `result`."""
        call_id, status = result.call.id, result.status.value
        if self._ends.get(call_id) == status:
            return result
        self._ends[call_id] = status
        self._notes.tool(result)
        return result
