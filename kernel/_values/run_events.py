"""Run events: what a run did beyond its commits, kept with the thread for the trace.

A commit record says what changed and who changed it. What a person debugging a run also
needs is what ran and what was decided: each phase with the plugins whose hooks ran (and
those re-run after an exclusive conflict), the effects it dispatched and which failed, the
scheduled actions it ran; each tool gate's decision with its reason; each tool call with
its status. A run notes these as it goes and its saves journal them beside its commits
(`ThreadSave.events`), so that `statekernel trace` can draw a run long after it ended.

They are small msgspec Structs (one per phase, built on the hot path) with a tag, so that a
list of them encodes and decodes as one union.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .phases import Phase

__all__ = [
    "EffectRun",
    "GateRun",
    "PhaseRun",
    "RunEvent",
    "ToolRun",
    "decode_run_events",
    "encode_run_events",
]


class EffectRun(msgspec.Struct, frozen=True, gc=False):
    """One effect a phase dispatched, in `PhaseRun.effects`.

    `EffectRun(key, error=None)`: its spec's `key`, and the failure (`error`) when its
    handler raised (the commit stands either way).
    """

    key: str
    error: str | None = None


class PhaseRun(msgspec.Struct, frozen=True, gc=False, tag="phase"):
    """One phase of a run, as a [run event](reference.md#statekernel.RunEvent).

    `PhaseRun(run_id, step, phase, revision, commits=0, hooks=(), reruns=(), effects=(),
    actions=(), at=0.0, error=None)`:

    - `run_id`, `step`, `phase`: the run, its step, and which phase this was.
    - `revision`, `commits`: the revision after its commits, and how many there were.
    - `hooks`: the plugins whose hooks ran in its round, in order.
    - `reruns`: the plugins whose hooks were re-run on a fresh snapshot after an exclusive
      conflict.
    - `effects`: its effects, as `EffectRun`s; `actions`: its scheduled actions.
    - `at`: when it ended, in seconds since the epoch.
    - `error`: set when the phase failed (a hook raised, an action failed); such a phase
      has its `error` and nothing else: nothing of its failed round was committed.
    """

    run_id: str
    step: int
    phase: Phase
    revision: int
    commits: int = 0
    hooks: tuple[str, ...] = ()
    reruns: tuple[str, ...] = ()
    effects: tuple[EffectRun, ...] = ()
    actions: tuple[str, ...] = ()
    at: float = 0.0
    error: str | None = None


class GateRun(msgspec.Struct, frozen=True, gc=False, tag="gate"):
    """The tool gates' decision on one tool call, as a
    [run event](reference.md#statekernel.RunEvent).

    `GateRun(run_id, step, call_id, tool, decision, revision, plugin=None, reason=None,
    at=0.0, ticket=None)`: the run and step, the call's id and tool name, the `decision`
    (`"allow"`: no gate objected, `"block"`, `"suspend"` or `"set_result"`), the revision,
    the `plugin` whose gate decided and its `reason`, when (`at`, seconds since the epoch),
    and for a suspension the `Suspend` ticket that says what the call awaits, kept as plain
    JSON data (a struct, dataclass or pydantic model as a dict), so that it reads back from
    a store as it was noted.
    """

    run_id: str
    step: int
    call_id: str
    tool: str
    decision: Literal["allow", "block", "suspend", "set_result"]
    revision: int
    plugin: str | None = None
    reason: str | None = None
    at: float = 0.0
    ticket: Any = None

    def ticket_text(self) -> str | None:
        """The ticket as one line of text, for where only text fits (a span attribute, the
        trace): a string as it is, anything else as JSON; None without a ticket."""
        if self.ticket is None or isinstance(self.ticket, str):
            return self.ticket
        return msgspec.json.encode(self.ticket).decode()


class ToolRun(msgspec.Struct, frozen=True, gc=False, tag="tool"):
    """How one tool call ended, as a [run event](reference.md#statekernel.RunEvent).

    `ToolRun(run_id, step, call_id, tool, status, revision, error=None, at=0.0)`: the run
    and step, the call's id and tool name, its `status` (a `ToolCallStatus` value), the
    revision, the `error` a failed one reports to the model, and when (`at`, seconds since
    the epoch). A call ends either through the host (`run.handle_tool_call`,
    `run.execute_tool`) or otherwise (an outside decision, a tool the agent does not have,
    a call answered because its run stopped: `run.note_tool_result`).
    """

    run_id: str
    step: int
    call_id: str
    tool: str
    status: str
    revision: int
    error: str | None = None
    at: float = 0.0


RunEvent = PhaseRun | GateRun | ToolRun
"""What a run did beyond its commits: a `PhaseRun`, a `GateRun` or a `ToolRun`.

Run events are journaled beside a run's commits at every save, for the
[trace](cli.md#the-html-trace); `await kernel.run_events(thread_id)` returns them, oldest
first. They are frozen msgspec Structs, and `RunEvent` is their union.
"""

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(tuple[RunEvent, ...])


def encode_run_events(events: tuple[RunEvent, ...]) -> bytes:
    """A save's events as the bytes a store keeps (MessagePack, opaque to the store)."""
    return _encoder.encode(events)


def decode_run_events(data: bytes) -> tuple[RunEvent, ...]:
    """The events of one save, from the bytes `encode_run_events` made."""
    return _decoder.decode(data)
