"""Conversation messages: what the model reads and what tools answer with."""

from __future__ import annotations

from typing import Literal

import msgspec

from ._tools import ToolCall

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
