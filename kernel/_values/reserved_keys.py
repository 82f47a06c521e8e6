"""The thread keys every kernel registers, whatever its plugins: an Agent's conversation and
its mailbox cursor (with `DeadLetters`, in `dead_letters.py`).

They are declared here, below the engine, rather than by the Agent that writes them, so that
a plain `Kernel` (no plugins, another process, the command line) reads an Agent's thread
whole: its message history decoded and typed, and the same `state_hash` as the writer's. A
thread is never readable only by the code that wrote it.
"""

from __future__ import annotations

from .keys import KeyScope, StateKey
from .messages import Message
from .vector import Vector

__all__ = ["History", "MailCursor"]


class History(StateKey[Vector[Message], tuple[Message, ...]]):
    """The thread's whole message history (a thread key: it survives across runs)."""

    key = "statekernel.messages"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[Message], update: tuple[Message, ...]) -> Vector[Message]:
        return value.extend(update)


class MailCursor(StateKey[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]):
    """Per sender, the sequence number of the last team message delivered into the thread
    (a thread key). It is committed with the messages it counts, in one commit, so a save
    holds both or neither: the mailbox delivers what lies beyond it, exactly once. An update
    raises senders' numbers and never lowers one."""

    key = "statekernel.mail_cursor"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(
        value: tuple[tuple[str, int], ...], update: tuple[tuple[str, int], ...]
    ) -> tuple[tuple[str, int], ...]:
        merged = dict(value)
        for sender, seq in update:
            merged[sender] = max(merged.get(sender, 0), seq)
        return tuple(sorted(merged.items()))
