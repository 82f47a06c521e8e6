"""What `agent.run` and `agent.stream` are given, checked and put in one shape.

Both take the same arguments, spelled as loosely as a caller finds natural (one message or
many, each a string, a tuple, a dict or a Message; one dead letter or many, or their ids).
They are checked when the call is made, before anything waits or runs, so that a mistake
is raised where it was written: for a stream, that is before its first event.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from .._values.dead_letters import DeadLetter
from .._values.messages import Message, MessageLike, as_message, is_one_message

__all__ = ["RunInput"]


@attrs.frozen
class RunInput:
    """The messages a run appends, and the options it starts with."""

    messages: tuple[Message, ...]
    parent_thread_id: str | None
    active_hook_filter: tuple[str, ...]
    retry: tuple[DeadLetter | str, ...]

    @classmethod
    def of(
        cls,
        messages: Iterable[MessageLike] | MessageLike,
        parent_thread_id: str | None,
        active_hook_filter: Iterable[str],
        retry: Iterable[DeadLetter | str] | DeadLetter | str,
    ) -> RunInput:
        incoming = _messages(messages)
        return cls(incoming, parent_thread_id, tuple(active_hook_filter), _letters(retry))


def _messages(messages: Iterable[MessageLike] | MessageLike) -> tuple[Message, ...]:
    """What a run is given, as Messages: one message (a string, a `(role, content)` tuple, a
    dict, a Message) or an iterable of them, each spelled any way `as_message` takes."""
    if is_one_message(messages):
        return (as_message(messages, "agent input"),)
    if not isinstance(messages, Iterable):
        return (as_message(messages, "agent input"),)  # refused, with the spellings that work
    return tuple(as_message(m, "agent input") for m in messages)


def _letters(retry: Iterable[DeadLetter | str] | DeadLetter | str) -> tuple[DeadLetter | str, ...]:
    """`retry=` as a tuple: one letter (or id) given alone is one letter."""
    if isinstance(retry, DeadLetter | str):
        return (retry,)
    if not isinstance(retry, Iterable):
        raise TypeError(
            f"retry takes DeadLetters or their ids, got {type(retry).__name__} {retry!r}; "
            f"read them with `await agent.dead_letters(thread_id)`"
        )
    letters = tuple(retry)
    for letter in letters:
        if not isinstance(letter, DeadLetter | str):
            raise TypeError(
                f"retry takes DeadLetters or their ids, got {type(letter).__name__} "
                f"{letter!r}; read them with `await agent.dead_letters(thread_id)`"
            )
    return letters
