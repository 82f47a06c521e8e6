"""Tool calls as the kernel sees them: the call, what a tool returns, and how the call ended."""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ._commands import StateCommand


def _frozen_arguments(arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    """A private, read-only copy: every hook of a tool call sees the same call object, so
    none of them may change the arguments the others check or the tool receives."""
    return MappingProxyType(copy.deepcopy(dict(arguments)))


@attrs.frozen
class ToolCall:
    """One tool call the model asked for. `arguments` is read-only; the tool itself gets a
    fresh, mutable copy."""

    id: str
    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_arguments)


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
