"""The thread's message history as one run reads it and adds to it.

Every phase is given the messages, so reading them must cost nothing while they are
unchanged: the tuple is kept until the History value changes. Every message the run adds
gets an id that no other run's can have (`<run id>:m<position>`), so that a plugin can name
a message, and a replacement by id finds the right one.
"""

from __future__ import annotations

import msgspec

from .._host.run import Run
from .._values.commands import StateCommand
from .._values.messages import Message
from .._values.phases import Phase
from .._values.reserved_keys import History
from .._values.vector import Vector

__all__ = ["RunHistory"]


class RunHistory:
    """The `History` of one run's thread."""

    def __init__(self, run: Run) -> None:
        self._run = run
        self._read: Vector[Message] | None = None  # the value `_messages` was made from
        self._messages: tuple[Message, ...] = ()

    def messages(self) -> tuple[Message, ...]:
        current = self._run.snapshot.get(History)
        if current is not self._read:
            self._read, self._messages = current, current.totuple()
        return self._messages

    def stamped(self, messages: tuple[Message, ...]) -> tuple[Message, ...]:
        """`messages` as they would be appended now: those without an id get the one of the
        place each takes."""
        base = len(self._run.snapshot.get(History))
        prefix = self._run.identity.run_id
        return tuple(
            m if m.id is not None else msgspec.structs.replace(m, id=f"{prefix}:m{base + i}")
            for i, m in enumerate(messages)
        )

    async def append(
        self, *messages: Message, source: str, phase: Phase, also: StateCommand | None = None
    ) -> None:
        """Commit `messages` to the history, recorded as made by `source` in `phase`, with
        what `also` holds in the same commit."""
        if messages:
            command = StateCommand().update(History, self.stamped(messages))
            if also is not None:
                command.extend(also)
            await self._run.submit(command, source=source, phase=phase)
