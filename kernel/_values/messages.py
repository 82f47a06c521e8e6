"""Conversation messages: what the model reads and what tools answer with.

Users hand messages in in several spellings: a plain string, a `("user", "hi")` tuple, an
OpenAI-style dict. `as_message` turns each into a `Message` at the boundary where input
arrives (the Agent facade, schema commands), once, so that everything past it holds one
type; anything else is refused there with the spellings that work.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from typing import Any, Final, Literal, NamedTuple

import msgspec

from .._errors import StateValidationError, ToolArgumentsTooDeep
from .tools import ToolCall, decode_arguments

Role = Literal["system", "user", "assistant", "tool"]


class Message(msgspec.Struct, frozen=True):
    """One frozen message of a thread's history.

    `Message(role, content, tool_call_id=None, is_error=False, id=None, tool_calls=())`.
    `role` is `"system"`, `"user"`, `"assistant"` or `"tool"`. Frozen, so histories are
    shared between snapshots without copying.

    An assistant message carries the `ToolCall`s it made (`tool_calls`), and each tool
    result or tool error (a Block reason, a rejected command, an exception's text) is a
    `role="tool"` message after it carrying the call's id (`tool_call_id`), with
    `is_error=True` for errors: the order every model API requires. When `id` is None, the
    Agent derives one from the run id and the message's position (`"thread-1:run-1:m0"`),
    so replays produce the same ids. See [agent](agent.md#the-agent-in-ten-lines).
    """

    role: Role
    content: str
    tool_call_id: str | None = None
    is_error: bool = False
    id: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


REMOVE_ALL_MESSAGES: Final = "__remove_all__"
"""`RemoveMessage(REMOVE_ALL_MESSAGES)` in an `add_messages` update drops the whole history
before the messages that follow it (LangGraph's spelling, to trim or summarise).

See [schema: messages](schema.md#messages)."""


class RemoveMessage(NamedTuple):
    """In an `add_messages` update: remove the message with this id from the history.

    A tuple, so that it journals as a two-item array beside the messages of an update (a
    history of `Message` structs can hold no second record type). Removing an id the
    history does not hold is refused, as LangGraph refuses it: the commit fails with
    `CommitRejected`. `RemoveMessage(REMOVE_ALL_MESSAGES)` drops everything before the
    messages after it. See [schema: messages](schema.md#messages).
    """

    id: str
    """The id of the message to remove, or `REMOVE_ALL_MESSAGES`."""


MessageLike = Message | str | tuple[str, str] | Mapping[str, Any]
"""The spellings users hand messages in as, which `as_message` turns into a `Message`.

- a `Message`, taken as it is;
- a string: a user message;
- a `(role, content)` tuple such as `("user", "hi")`; a tuple of two strings is always one
  message;
- an OpenAI-style dict (`{"role": ..., "content": ...}`, with optional `id`,
  `tool_call_id`, `is_error` and `tool_calls`).

See `as_message` for the details, and [schema: messages](schema.md#messages).
"""

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

    The one coercion of the spellings users hand messages in as (`MessageLike`): a
    `Message` (as it is); a string (a user message); a `(role, content)` tuple such as
    `("user", "hi")`; an OpenAI-style dict (`{"role": ..., "content": ...}`, with optional
    `id` and `tool_call_id` (strings), `is_error` (a bool) and OpenAI's `tool_calls`, whose
    `arguments` may be a JSON string or a dict; content given as a list of text parts is
    joined). Arguments nested deeper than a `ToolCall` takes raise `ToolArgumentsTooDeep`.

    Roles may be spelled `user`/`human`, `assistant`/`ai`, `system`/`developer` or `tool`
    (as OpenAI and LangChain spell them). A tuple of two strings is always one message,
    so an unknown role is refused rather than read as two messages. Anything else, or a
    dict field of the wrong type, raises `StateValidationError` naming `where`.

    `agent.run`, `agent.stream` and `schema.command` (for fields holding `Message`s) call
    it on their input; given one of these alone (a string, a tuple, a dict or a
    `Message`), they take it as one message. See [schema: messages](schema.md#messages).
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
    except ToolArgumentsTooDeep:
        raise  # it names the call itself
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
    call_id, name = str(call["id"]), str(function["name"])
    if isinstance(arguments, str | bytes):
        arguments = decode_arguments(arguments, tool=name, call_id=call_id)
    if not isinstance(arguments, Mapping):
        raise ValueError(f"arguments must be an object, got {reprlib.repr(arguments)}")
    return ToolCall(call_id, name, dict(arguments))
