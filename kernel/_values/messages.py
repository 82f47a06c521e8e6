"""Conversation messages: what the model reads and what tools answer with.

Users hand messages in in several spellings: a plain string, a `("user", "hi")` tuple, an
OpenAI-style dict. `as_message` turns each into a `Message` at the boundary where input
arrives (the Agent facade, schema commands), once, so that everything past it holds one
type; anything else is refused there with the spellings that work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, NamedTuple

import msgspec

from .._errors import StateValidationError
from .tools import ToolCall

Role = Literal["system", "user", "assistant", "tool"]


class Message(msgspec.Struct, frozen=True):
    """One message of a thread's history.

    Frozen, so histories are shared between snapshots without copying. A tool result or a
    tool error (a Block reason, a rejected command, an exception's text) is a `role="tool"`
    message carrying the call's id, with `is_error=True` for errors. An assistant message
    carries the `tool_calls` it made, so that each tool message follows the message that
    called it, as model APIs require. When `id` is not given, the Agent derives one from
    thread, run and position, so replays produce the same ids.
    """

    role: Role
    content: str
    tool_call_id: str | None = None
    is_error: bool = False
    id: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


REMOVE_ALL_MESSAGES: Final = "__remove_all__"
"""`RemoveMessage(REMOVE_ALL_MESSAGES)` in an `add_messages` update drops the whole history
before the messages that follow it (LangGraph's spelling, to trim or summarise)."""


class RemoveMessage(NamedTuple):
    """In an `add_messages` update: remove the message with this id from the history.

    A tuple, so that it journals as a two-item array beside the messages of an update (a
    history of `Message` structs can hold no second record type). Removing an id the
    history does not hold is refused, as LangGraph refuses it.
    """

    id: str


MessageLike = Message | str | tuple[str, str] | Mapping[str, Any]
"""What `as_message` turns into a Message."""

_ROLES: Mapping[str, Role] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
}
_EXPECTED = (
    'a Message, a string (a user message), a (role, content) tuple such as ("user", "hi"), '
    'or an OpenAI-style dict such as {"role": "user", "content": "hi"}'
)


def as_message(value: Any, where: str) -> Message:
    """`value` as a Message; `StateValidationError` naming `where` for anything else.

    Roles may be spelled as OpenAI (`developer` for system) or LangChain (`human`, `ai`)
    spell them. A dict may carry `id`, `tool_call_id` and OpenAI's `tool_calls` (their
    arguments a JSON string or a dict); content given as a list of text parts is joined.
    """
    if isinstance(value, Message):
        return value
    if isinstance(value, str):
        return Message("user", value)
    if is_role_pair(value):
        role, content = value
        return Message(_role(role, value, where), content)
    if isinstance(value, Mapping):
        return _from_mapping(value, where)
    raise _refused(where, value)


def is_role_pair(value: Any) -> bool:
    """A `(role, content)` tuple of two strings: one message, not a sequence of two (as
    LangGraph reads a tuple)."""
    return type(value) is tuple and len(value) == 2 and all(isinstance(part, str) for part in value)


def is_one_message(value: Any) -> bool:
    """Whether `value`, where messages are expected, is one message rather than several: a
    string, a `(role, content)` tuple, a mapping or a Message."""
    return isinstance(value, str | Message | Mapping) or is_role_pair(value)


def _from_mapping(value: Mapping[str, Any], where: str) -> Message:
    role = _role(value.get("role"), value, where)
    content = _text_of(value.get("content"), value, where)
    for name in ("id", "tool_call_id"):
        if not isinstance(value.get(name), str | None):
            raise _refused(where, value, f"its {name} must be a string")
    if not isinstance(value.get("is_error", False), bool):
        raise _refused(where, value, "its is_error must be True or False")
    try:
        calls = tuple(_tool_call(call) for call in value.get("tool_calls") or ())
    except (AttributeError, KeyError, TypeError, ValueError, msgspec.DecodeError) as error:
        detail = f"its tool_calls must be OpenAI-style tool calls ({error})"
        raise _refused(where, value, detail) from None
    return Message(
        role,
        content,
        tool_call_id=value.get("tool_call_id"),
        is_error=bool(value.get("is_error", False)),
        id=value.get("id"),
        tool_calls=calls,
    )


def _role(role: Any, value: Any, where: str) -> Role:
    if not isinstance(role, str) or role not in _ROLES:
        raise _refused(where, value, f"its role must be one of {', '.join(_ROLES)}")
    return _ROLES[role]


def _refused(where: str, value: Any, detail: str = "") -> StateValidationError:
    """The error for input `as_message` cannot take, listing the spellings that work."""
    return StateValidationError(where, _EXPECTED, value, what="message", detail=detail)


def _text_of(content: Any, value: Mapping[str, Any], where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(part, Mapping) and isinstance(part.get("text"), str) for part in content
    ):
        return "".join(part["text"] for part in content)
    raise _refused(where, value, "its content must be a string or a list of text parts")


def _tool_call(call: Mapping[str, Any]) -> ToolCall:
    if not isinstance(call, Mapping):
        raise TypeError(f"a tool call must be a dict, got {call!r}")
    function = call.get("function", call)
    if not isinstance(function, Mapping):
        raise TypeError(f"a tool call's function must be a dict, got {function!r}")
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str | bytes):
        arguments = msgspec.json.decode(arguments)
    if not isinstance(arguments, Mapping):
        raise ValueError(f"arguments must be an object, got {arguments!r}")
    return ToolCall(str(call["id"]), str(function["name"]), dict(arguments))
