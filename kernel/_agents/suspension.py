"""A suspended run, as it is saved and as it is continued.

A run stops waiting for an outside decision when a gate says Suspend, and it is saved as if
stopped that way just before a tool with effects runs, so that a crash brings it back
waiting instead of running the tool twice unseen. Both write the same record: the step, the
calls still waiting (each with the ticket saying what for) and the tools the step offered,
so that `resume`, from any process, carries the step on as it was. `Decision` is the answer
from outside.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
import msgspec

from .._errors import ValueTooDeep
from .._values.codec import enc_hook
from .._values.frozen import thaw
from .._values.nesting import MAX_NESTING_DEPTH, nested_deeper
from .._values.tools import ToolCall
from .run_result import PendingCall

__all__ = ["INTERRUPTED", "NOT_STARTED", "Decision", "Step", "Suspension", "pending"]

INTERRUPTED = "interrupted"
"""The ticket of a call that was running when its process died: its outcome is unknown."""

NOT_STARTED = "not started"
"""The ticket of a call the model asked for alongside an interrupted one, never started."""


def pending(call: ToolCall, ticket: str) -> PendingCall:
    """`call` as a suspended run saves it, waiting for what `ticket` says."""
    return PendingCall(call.id, call.name, thaw(call.arguments), ticket)


class Suspension(msgspec.Struct, frozen=True):
    """What a suspended run saves, as the detail of its record in the thread store."""

    step: int
    pending: tuple[PendingCall, ...]
    offered: tuple[str, ...] | None = None  # the tools the step offered (None: all)

    @classmethod
    def decode(cls, detail: bytes) -> Suspension:
        return msgspec.json.decode(detail, type=cls)

    def encode(self) -> bytes:
        return msgspec.json.encode(self, enc_hook=enc_hook)


@attrs.define
class Step:
    """The step a run is at: its number, and the tools it offered the model. The run's loop
    moves it on; its tool calls read it, and save it with every suspension."""

    number: int
    offered: frozenset[str]

    def suspended_on(self, calls: tuple[PendingCall, ...]) -> bytes:
        """The record of this step suspended on `calls`."""
        return Suspension(self.number, calls, tuple(sorted(self.offered))).encode()


@attrs.frozen
class Decision:
    """An outside decision on a suspended call, for `agent.resume` and `team.resume`.

    Build it with the class methods, not the constructor:

    - `Decision.approve(arguments=None)`: run the tool, with replaced arguments if given.
    - `Decision.deny(reason)`: fail the call with `reason`.
    - `Decision.result(value)`: use `value` as the tool's result.

    Arguments or a value nested more than 100 levels deep (dicts and lists inside one
    another) raise `ValueTooDeep` when the decision is made, as they would for the call.

    See [agent: suspend and resume](agent.md#suspend-and-resume).
    """

    kind: Literal["approve", "deny", "result"]
    arguments: dict[str, Any] | None = None
    reason: str = ""
    value: Any = None

    def __attrs_post_init__(self) -> None:
        for data, what in ((self.arguments, "arguments"), (self.value, "value")):
            if nested_deeper(data, MAX_NESTING_DEPTH):
                where = f"Decision.{self.kind}(...): its {what}"
                raise ValueTooDeep(where, MAX_NESTING_DEPTH, plural=what == "arguments")

    @classmethod
    def approve(cls, arguments: dict[str, Any] | None = None) -> Decision:
        """Run the tool, with `arguments` replacing the original ones if given."""
        return cls("approve", arguments=arguments)

    @classmethod
    def deny(cls, reason: str) -> Decision:
        """Fail the call; the model sees `reason` as the tool's error."""
        return cls("deny", reason=reason)

    @classmethod
    def result(cls, value: Any) -> Decision:
        """Skip the tool and use `value` as its result."""
        return cls("result", value=value)
