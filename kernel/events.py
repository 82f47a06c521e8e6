"""statekernel.events: what `agent.stream(...)` yields while a run happens.

Each event is a frozen msgspec Struct, tagged with its class name in the field `"event"`,
so `msgspec.json.encode(event, enc_hook=statekernel.enc_hook)` gives JSON a web page can
read as it is (a Snapshot becomes its key -> value map, an exception its type and message):
a server forwards a run as server-sent events without converting anything.

Events come in the order things happen: `PhaseStarted`, then the phase's `Committed`
records, then `PhaseEnded`; `ModelResponded` after each model call (after its
`TextDelta`s, when the model streams); `ToolCallStarted` and `ToolCallEnded` around each
tool call; and always last, `RunFinished` with the `RunResult`. More kinds may be added;
match on the ones you need and ignore the rest.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._agents.run_result import RunResult
from ._durable.journal import CommitRecord
from ._engine.phase_engine import PhaseReport
from ._public import publish
from ._values.model import InferenceResponse
from ._values.phases import Phase
from ._values.tools import ToolCall, ToolCallStatus

__all__ = [
    "Committed",
    "Event",
    "ModelResponded",
    "PhaseEnded",
    "PhaseStarted",
    "RunFailed",
    "RunFinished",
    "TextDelta",
    "ToolCallEnded",
    "ToolCallStarted",
]


class _Event(msgspec.Struct, frozen=True, tag=True, tag_field="event"):
    pass


class PhaseStarted(_Event, frozen=True):
    """A phase began (also `TOOL_GATE`, and the tool phases inside a tool call)."""

    phase: Phase
    """The phase that began."""


class PhaseEnded(_Event, frozen=True):
    """A phase ended: what it did (`PhaseReport`). Its `Committed` events came before."""

    report: PhaseReport
    """The phase's `PhaseReport`."""


class Committed(_Event, frozen=True):
    """A commit moved the thread's revision: its journal record, every op included."""

    record: CommitRecord
    """The commit's `CommitRecord`, every op included."""


class ModelResponded(_Event, frozen=True):
    """The model answered (the whole answer, after any `TextDelta`s)."""

    response: InferenceResponse
    """The model's `InferenceResponse`."""


class TextDelta(_Event, frozen=True):
    """A piece of the model's text as it arrives, before its `ModelResponded` (only from a
    model that streams)."""

    text: str
    """The piece of text."""


class ToolCallStarted(_Event, frozen=True):
    """A tool call begins its life: its gates come next."""

    call: ToolCall
    """The `ToolCall`."""


class ToolCallEnded(_Event, frozen=True):
    """A tool call ended (or was suspended): `status`, the `result`, the `error` text the
    model sees, and the `exception` of a tool that raised."""

    call: ToolCall
    """The `ToolCall`."""
    status: ToolCallStatus
    """Where the call stands (its `ToolCallStatus`): how it ended, or `SUSPENDED`."""
    result: Any = None
    """What the tool returned, or None."""
    error: str | None = None
    """The error text the model sees, or None."""
    exception: BaseException | None = None
    """The exception a tool raised, or None."""


class RunFailed(_Event, frozen=True):
    """The run failed; `RunFinished` follows. `error` is what failed it; for a hook that
    raised (`HookFailed`), `plugin` and `phase` say whose and where."""

    error: BaseException
    """The exception that failed the run."""
    plugin: str | None = None
    """For a hook that raised (`HookFailed`): the id of the plugin whose hook it was."""
    phase: str | None = None
    """For a hook that raised (`HookFailed`): the phase it raised in."""


class RunFinished(_Event, frozen=True):
    """The run ended; always the last event."""

    result: RunResult
    """The run's `RunResult`."""


Event = (
    PhaseStarted
    | PhaseEnded
    | Committed
    | ModelResponded
    | TextDelta
    | ToolCallStarted
    | ToolCallEnded
    | RunFailed
    | RunFinished
)
"""Any event a stream yields: the union of every event class, for type hints."""

publish(__name__, globals(), [n for n in __all__ if n != "Event"])
del publish
