"""Tool calls as the kernel sees them: the call, what a tool returns, and how the call ended."""

from __future__ import annotations

import enum
from typing import Any

import attrs

from .commands import StateCommand


@attrs.frozen
class ToolCall:
    """One tool call the model asked for."""

    id: str
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ToolOutput:
    """What a tool may return: its result plus a command to commit with it.

    The command goes through the same commit path as any hook's; if it is rejected, the
    call fails with the rejection reason and state is untouched.
    """

    result: Any
    command: StateCommand | None = None


class ToolCallStatus(enum.Enum):
    """Where a tool call is in its life; a run's status is derived from its calls'."""

    NEW = "new"
    RUNNING = "running"
    SUSPENDED = "suspended"
    RESUMING = "resuming"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


@attrs.frozen
class ToolResult:
    """How one call ended: its result, the error the model sees, or the ticket it waits on."""

    call: ToolCall
    status: ToolCallStatus
    result: Any = None
    error: str | None = None
    ticket: Any = None

    @property
    def is_error(self) -> bool:
        return self.status is ToolCallStatus.FAILED or self.status is ToolCallStatus.CANCELLED
