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

from typing import Literal

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
    """One effect a phase dispatched: its spec's key, and the failure when its handler
    raised (the commit stands either way)."""

    key: str
    error: str | None = None


class PhaseRun(msgspec.Struct, frozen=True, gc=False, tag="phase"):
    """One phase of a run: the plugins whose hooks ran in its round, in order; the plugins
    whose hooks were re-run on a fresh snapshot after an exclusive conflict; its commits and
    the revision after them; its effects and scheduled actions; and when it ended (seconds
    since the epoch). A phase that failed (a hook raised, an action failed) has its
    `error` and nothing else: nothing of its failed round was committed."""

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
    """A tool gate's decision on one tool call: `"allow"` (no gate objected), `"block"`,
    `"suspend"` or `"set_result"`, with the deciding plugin and its reason."""

    run_id: str
    step: int
    call_id: str
    tool: str
    decision: Literal["allow", "block", "suspend", "set_result"]
    revision: int
    plugin: str | None = None
    reason: str | None = None
    at: float = 0.0


class ToolRun(msgspec.Struct, frozen=True, gc=False, tag="tool"):
    """How one tool call ended: its `ToolCallStatus` value, and the error a failed one
    reports to the model."""

    run_id: str
    step: int
    call_id: str
    tool: str
    status: str
    revision: int
    error: str | None = None
    at: float = 0.0


RunEvent = PhaseRun | GateRun | ToolRun

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(tuple[RunEvent, ...])


def encode_run_events(events: tuple[RunEvent, ...]) -> bytes:
    """A save's events as the bytes a store keeps (MessagePack, opaque to the store)."""
    return _encoder.encode(events)


def decode_run_events(data: bytes) -> tuple[RunEvent, ...]:
    """The events of one save, from the bytes `encode_run_events` made."""
    return _decoder.decode(data)
