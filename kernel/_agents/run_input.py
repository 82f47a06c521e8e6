"""What `agent.run` and `agent.stream` are given, checked and put in one shape.

Both take the same arguments, spelled as loosely as a caller finds natural (one message or
many, each a string, a tuple, a dict or a Message; one dead letter or many, or their ids).
They are checked when the call is made, before anything waits or runs, so that a mistake
is raised where it was written: for a stream, that is before its first event. That includes
what the run's first commit would refuse: with a ThreadStore, a message the store cannot
keep exactly is refused here, so that no thread is made for a run that could not start.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import msgspec

from .._errors import StateValidationError, cause_clause
from .._values.codec import CODEC_ERRORS, dec_hook, decodes_back, enc_hook
from .._values.dead_letters import DeadLetter
from .._values.messages import Message, MessageLike, as_message, is_one_message
from .._values.names import check_name

__all__ = ["RunInput"]

_encode_message = msgspec.json.Encoder(enc_hook=enc_hook).encode
_message_decoder = msgspec.json.Decoder(Message, dec_hook=dec_hook)


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
        *,
        stored: bool,
    ) -> RunInput:
        """The run's input, checked; with `stored` (the agent keeps threads in a store),
        each message must also be one the store keeps exactly (`_storable`). A
        `parent_thread_id` must be a name every store keeps, as a thread id must, with or
        without a store: the same call must not work in a test and fail in production."""
        if parent_thread_id is not None:
            check_name("parent_thread_id", parent_thread_id)  # as the kernel checks thread ids
        incoming = _messages(messages)
        if stored:
            for message in incoming:
                _storable(message)
        return cls(incoming, parent_thread_id, tuple(active_hook_filter), _letters(retry))


def _storable(message: Message) -> None:
    """Refuse a message a ThreadStore cannot keep exactly, as the run's first commit (which
    appends it to the history) would, but before the thread is claimed: text that is not
    valid Unicode (a lone surrogate), tool call arguments that do not encode or do not
    come back equal (a set, a tuple, an object)."""
    try:
        exact = decodes_back(_encode_message(message), _message_decoder, message)
        problem = "it would not read back equal (a tuple or set in arguments comes back a list)"
    except CODEC_ERRORS as error:
        exact, problem = False, f"it cannot be encoded ({cause_clause(error)})"
    if not exact:
        raise StateValidationError(
            "agent input",
            "a message a thread store keeps exactly",
            message,
            what="message",
            detail=(
                f"{problem}; no run started, and no thread was made or changed. Give text "
                f"that is valid "
                f"Unicode (no lone surrogates) and tool call arguments of JSON types"
            ),
        )


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
