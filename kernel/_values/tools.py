"""Tool calls as the kernel sees them: what a tool offers, the call, what a tool returns,
and how the call ended."""

from __future__ import annotations

import enum
import reprlib
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import msgspec

from .._errors import ToolArgumentsTooDeep, ToolResultTooDeep
from .codec import CODEC_ERRORS, as_json_data, enc_hook
from .commands import StateCommand
from .frozen import FrozenDict, freeze, thaw
from .nesting import MAX_NESTING_DEPTH, nested_deeper

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "ToolCall",
    "ToolCallStatus",
    "ToolOutput",
    "ToolResult",
    "ToolSpec",
    "decode_arguments",
]

MAX_ARGUMENT_DEPTH = MAX_NESTING_DEPTH
"""How many levels of dicts and lists inside one another a tool call's arguments (and a
tool's parameter schema, and a tool's result) may have: the kernel's one limit for
free-form data (`MAX_NESTING_DEPTH`). Every hand a call passes through copies, encodes or
sends its arguments and its result by recursion (freezing, `copy.deepcopy`, JSON, the
journal), so deeper ones would end in a `RecursionError` somewhere on the way; they are
refused where the call (`ToolArgumentsTooDeep`) or its result (`ToolResultTooDeep`) is made
instead. Real tool schemas, arguments and results nest a few levels."""


def _frozen_arguments(arguments: Any, tool: str, call_id: str | None) -> FrozenDict:
    """A private, deeply frozen copy: every hook of a tool call sees the same call object,
    so none of them may change the arguments the others check or the tool receives. The one
    place the depth policy applies (`MAX_ARGUMENT_DEPTH`), before anything copies them."""
    if isinstance(arguments, FrozenDict):
        return arguments  # frozen already, by this function (which checked it)
    if not isinstance(arguments, Mapping):
        raise TypeError(
            f"tool call arguments must be a mapping, got {type(arguments).__name__} "
            f"{reprlib.repr(arguments)}"
        )
    if nested_deeper(arguments, MAX_ARGUMENT_DEPTH):
        raise ToolArgumentsTooDeep(tool, call_id, MAX_ARGUMENT_DEPTH)
    frozen: FrozenDict = freeze(thaw(dict(arguments)))
    return frozen


def _call_arguments(arguments: Any, call: Any) -> FrozenDict:
    """`ToolCall.arguments`' converter: attrs hands it the call being made (its `id` and
    `name` already set), so that an error can name it."""
    return _frozen_arguments(arguments, call.name, call.id)


def _frozen_schema(parameters: Any, spec: Any) -> FrozenDict:
    if not isinstance(parameters, Mapping):
        raise TypeError(
            f"ToolSpec.parameters must be a JSON Schema object (a mapping such as "
            f'{{"type": "object", "properties": {{...}}}}), got {reprlib.repr(parameters)}'
        )
    return _frozen_arguments(parameters, spec.name, None)


def decode_arguments(raw: str | bytes, *, tool: str, call_id: str) -> Any:
    """A call's arguments from the JSON text a model wrote (what `msgspec.json.decode`
    makes of it; text that is not JSON raises its `msgspec.DecodeError`, a `ValueError`).
    JSON nested deeper than a parser can follow is `ToolArgumentsTooDeep`, as the `ToolCall`
    made of anything deeper than `MAX_ARGUMENT_DEPTH` is."""
    try:
        return msgspec.json.decode(raw)
    except RecursionError:
        raise ToolArgumentsTooDeep(tool, call_id, MAX_ARGUMENT_DEPTH) from None


@attrs.frozen
class ToolSpec:
    """What a model is told about one tool: its name, what it does, and its arguments.

    `ToolSpec(name, description="", parameters={"type": "object"})`. The arguments are a
    JSON Schema object (`{"type": "object", "properties": ...}`).
    `statekernel.tool` builds one from a function; a plain callable tool gets
    `{"type": "object"}`. See [tools and schemas](tools.md).
    """

    name: str
    """The tool's name."""
    description: str = ""
    """What the tool does, as the model is told."""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object"},
        converter=attrs.Converter(_frozen_schema, takes_self=True),  # type: ignore[misc]
    )
    """A JSON Schema object, frozen like a call's arguments; anything but a mapping raises
    `TypeError`, one nested more than 100 levels deep `ToolArgumentsTooDeep`. Default:
    `{"type": "object"}`."""
    __statekernel_frozen__: ClassVar[bool] = True


@attrs.frozen
class ToolCall:
    """One tool call the model asked for: its `id`, the tool's `name` and its `arguments`.

    `ToolCall(id, name, arguments={})`.
    See [tools and schemas](tools.md).
    """

    id: str
    """The call's id."""
    name: str
    """The name of the tool called."""
    arguments: Mapping[str, Any] = attrs.field(
        factory=dict,
        converter=attrs.Converter(_call_arguments, takes_self=True),  # type: ignore[misc]
    )
    """A private copy of the arguments, frozen all the way down.

    Nested dicts and lists are frozen too (still equal to, and encoded as, plain dicts and
    lists), and changing any of them raises `TypeError`. So no hook can change what a gate
    approved or what the tool receives. `copy.deepcopy` of the arguments gives plain,
    mutable data, and that is what the tool itself receives (a fresh copy for every run of
    it). A call decoded from a store is frozen the same way.

    Arguments that are not a mapping raise `TypeError`; arguments nested more than 100
    levels deep (dicts and lists inside one another) raise `ToolArgumentsTooDeep`, naming
    the call, and nothing of the call is made."""
    __statekernel_frozen__: ClassVar[bool] = True  # the arguments are frozen all the way

    def __attrs_post_init__(self) -> None:
        # A call decoded from storage bypasses the converter; it is frozen all the same.
        if not isinstance(self.arguments, FrozenDict):
            object.__setattr__(self, "arguments", _call_arguments(self.arguments, self))

    def __copy__(self) -> ToolCall:
        return self  # frozen all the way: a copy would be the same

    def __deepcopy__(self, memo: dict[int, Any]) -> ToolCall:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (ToolCall, (self.id, self.name, thaw(self.arguments)))


@attrs.frozen
class ToolOutput:
    """What a tool may return instead of a plain value: its result plus a command to commit.

    `ToolOutput(result, command=None)`. The command goes through the same commit path as
    any hook's. If it is rejected
    (`CommitRejected` or `RevisionConflict`), the call fails with the rejection reason as
    the tool's error, and state is untouched.
    See [concepts: tool gates and tool commands](concepts.md#tool-gates-and-tool-commands).
    """

    result: Any
    """The tool's result."""
    command: StateCommand | None = None
    """The `StateCommand` to commit with it, or None."""


class ToolCallStatus(enum.Enum):
    """Where a tool call is in its life; a run's status is derived from its calls'.

    See `run_status`.
    """

    NEW = "new"
    """Asked for by the model; not started yet."""
    RUNNING = "running"
    """The tool is running."""
    SUSPENDED = "suspended"
    """Waiting for an outside decision (a gate answered `Suspend`)."""
    RESUMING = "resuming"
    """An outside decision on the suspended call is being carried out."""
    SUCCEEDED = "succeeded"
    """Ended with a result."""
    FAILED = "failed"
    """Ended with an error the model sees."""
    CANCELLED = "cancelled"
    """Ended because the run was cancelled; an error, like `FAILED`."""


class ToolResult:
    """How one call ended: its result, the error the model sees, or the ticket it waits on.

    As returned by `run.handle_tool_call` and `run.execute_tool`. Frozen; equal when call,
    status, result, error and ticket are. See [tools and schemas](tools.md).
    """

    # A plain slotted class rather than an attrs one: msgspec encodes attrs classes field
    # by field, and a result that is not JSON must encode (in an event) as its text.
    __slots__ = ("call", "error", "exception", "result", "status", "text", "ticket")
    call: ToolCall
    """The `ToolCall`."""
    status: ToolCallStatus
    """How the call ended, a `ToolCallStatus`."""
    result: Any
    """The result, frozen like a call's arguments (the dicts, lists and sets in it; any
    other object is kept as it is). A result nested more than 100 levels deep (dicts and
    lists inside one another) raises `ToolResultTooDeep`, naming the call, and nothing of
    the result is made."""
    error: str | None
    """The text the model sees for a failed call; for a tool that raised it is
    `"ExceptionType: message"`."""
    ticket: Any
    """What a suspended call waits on (the gate's `Suspend.ticket`)."""
    exception: BaseException | None
    """The exception a tool raised, traceback included; None otherwise."""
    text: str
    """What the model is shown: the error, or the result itself if it is a string, else the
    result as JSON (its `repr` if it does not encode). It is made when the result is made,
    so no hook that sees the result later can change what the model reads."""

    def __init__(
        self,
        call: ToolCall,
        status: ToolCallStatus,
        result: Any = None,
        error: str | None = None,
        ticket: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        if nested_deeper(result, MAX_ARGUMENT_DEPTH):
            raise ToolResultTooDeep(call.name, call.id, MAX_ARGUMENT_DEPTH)
        put = object.__setattr__
        put(self, "call", call)
        put(self, "status", status)
        put(self, "result", freeze(result))
        put(self, "error", error)
        put(self, "ticket", ticket)
        put(self, "exception", exception)
        put(self, "text", (error or "") if self.is_error else _as_text(self.result, call))

    @property
    def is_error(self) -> bool:
        """True for `FAILED` and `CANCELLED`."""
        return self.status is ToolCallStatus.FAILED or self.status is ToolCallStatus.CANCELLED

    def _key(self) -> tuple[Any, ...]:
        return (self.call, self.status, self.result, self.error, self.ticket)

    def __eq__(self, other: object) -> bool:
        if type(other) is not ToolResult:
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # results are often dicts

    def __copy__(self) -> ToolResult:
        return self  # frozen: a copy would be the same

    def __deepcopy__(self, memo: dict[int, Any]) -> ToolResult:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            ToolResult,
            (self.call, self.status, thaw(self.result), self.error, self.ticket, self.exception),
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a ToolResult is frozen (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a ToolResult is frozen (cannot delete {name!r})")

    def __repr__(self) -> str:
        shown = f", error={self.error!r}" if self.error is not None else ""
        return (
            f"ToolResult(call={self.call!r}, status={self.status}, result={self.result!r}{shown})"
        )

    def __statekernel_encode__(self) -> dict[str, Any]:
        """How `enc_hook` encodes a result (in an event, a `RunResult`): a result that is
        not JSON-shaped data appears as its text, what the model was shown."""
        return {
            "call": self.call,
            "status": self.status,
            "result": as_json_data(self.result, self.text),
            "error": self.error,
            "ticket": as_json_data(self.ticket, repr(self.ticket)),
            "exception": self.exception,
            "text": self.text,
        }


def _as_text(result: Any, call: ToolCall) -> str:
    """What the model is shown of a result. Objects the depth check cannot see into (a
    chain of dataclasses or models) can still nest too deep to encode or show: that is the
    same `ToolResultTooDeep`."""
    if isinstance(result, str):
        return result
    try:
        return msgspec.json.encode(result, enc_hook=enc_hook).decode()
    except RecursionError:
        raise ToolResultTooDeep(call.name, call.id, MAX_ARGUMENT_DEPTH) from None
    except CODEC_ERRORS:
        pass
    try:
        return repr(result)
    except RecursionError:
        raise ToolResultTooDeep(call.name, call.id, MAX_ARGUMENT_DEPTH) from None
