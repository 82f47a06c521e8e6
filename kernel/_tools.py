"""Tool calls as the kernel sees them: what a tool offers, the call, what a tool returns,
and how the call ended."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import msgspec

from ._codec import CODEC_ERRORS, enc_hook
from ._commands import StateCommand
from ._frozen import FrozenDict, freeze, thaw


def _frozen_arguments(arguments: Mapping[str, Any]) -> FrozenDict:
    """A private, deeply frozen copy: every hook of a tool call sees the same call object,
    so none of them may change the arguments the others check or the tool receives."""
    if isinstance(arguments, FrozenDict):
        return arguments
    if not isinstance(arguments, Mapping):
        raise TypeError(f"tool call arguments must be a mapping, got {arguments!r}")
    frozen: FrozenDict = freeze(thaw(dict(arguments)))
    return frozen


def _frozen_result(result: Any) -> Any:
    return freeze(result)


def _frozen_schema(parameters: Mapping[str, Any]) -> FrozenDict:
    if not isinstance(parameters, Mapping):
        raise TypeError(
            f"ToolSpec.parameters must be a JSON Schema object (a mapping such as "
            f'{{"type": "object", "properties": {{...}}}}), got {parameters!r}'
        )
    return _frozen_arguments(parameters)


@attrs.frozen
class ToolSpec:
    """What a model is told about one tool: its name, what it does, and its arguments as a
    JSON Schema object (`{"type": "object", "properties": ...}`). `statekernel.tool` builds
    one from a function; a plain callable tool gets `{"type": "object"}`."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object"}, converter=_frozen_schema
    )
    __statekernel_frozen__: ClassVar[bool] = True


@attrs.frozen
class ToolCall:
    """One tool call the model asked for. `arguments` is deeply frozen (nested dicts and
    lists too: changing them raises `TypeError`); the tool itself gets a fresh, mutable copy."""

    id: str
    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_arguments)
    __statekernel_frozen__: ClassVar[bool] = True  # the arguments are frozen all the way

    def __attrs_post_init__(self) -> None:
        # A call decoded from storage bypasses the converter; it is frozen all the same.
        if not isinstance(self.arguments, FrozenDict):
            object.__setattr__(self, "arguments", _frozen_arguments(self.arguments))


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
    """How one call ended: its result, the error the model sees, or the ticket it waits on.

    `result` is deeply frozen like a call's arguments (dicts, lists and sets in it; other
    objects are kept as they are), and `text`, what the model is shown, is made from it
    when the result is made: no hook that sees the result later can change what the model
    reads. A tool that raised has its exception in `exception` (the model sees
    `"ExceptionType: message"` as `error`).
    """

    call: ToolCall
    status: ToolCallStatus
    result: Any = attrs.field(default=None, converter=_frozen_result)
    error: str | None = None
    ticket: Any = None
    exception: BaseException | None = attrs.field(default=None, eq=False)
    text: str = attrs.field(init=False, eq=False)

    def __attrs_post_init__(self) -> None:
        text = (self.error or "") if self.is_error else _as_text(self.result)
        object.__setattr__(self, "text", text)

    @property
    def is_error(self) -> bool:
        return self.status is ToolCallStatus.FAILED or self.status is ToolCallStatus.CANCELLED


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    try:
        return msgspec.json.encode(result, enc_hook=enc_hook).decode()
    except CODEC_ERRORS:
        return repr(result)
