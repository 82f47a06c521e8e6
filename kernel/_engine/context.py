"""What a hook is handed: the phase, who is running, and the frozen snapshot to decide on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import msgspec

from .._profile.access import ProfileAccess
from .._values.messages import Message
from .._values.model import InferenceResponse
from .._values.phases import Phase
from .._values.tools import ToolCall, ToolResult
from .snapshot import Snapshot


@attrs.frozen
class RunIdentity:
    """Who this run is: its id, thread, agent and (for sub-agents) its parent.

    `RunIdentity(run_id, thread_id, agent_id, parent_thread_id=None, parent_run_id=None)`.
    Run ids are derived as `f"{thread_id}:run-{n}"`, where `n` counts the thread's runs.
    See [agent: runs and threads](agent.md#runs-and-threads-without-the-facade).
    """

    run_id: str
    thread_id: str
    agent_id: str
    parent_thread_id: str | None = None
    parent_run_id: str | None = None


@attrs.frozen
class AgentSpec:
    """The agent a run belongs to; a non-empty `active_hook_filter` names the plugins whose
    behavioural components (hooks, tool gates, request transforms) may run.

    `AgentSpec(name="default", active_hook_filter=())`. See
    [concepts: plugins](concepts.md#plugins).
    """

    name: str = "default"
    active_hook_filter: tuple[str, ...] = ()

    def allows(self, plugin_id: str) -> bool:
        """True when `active_hook_filter` is empty or names the plugin `plugin_id`."""
        return not self.active_hook_filter or plugin_id in self.active_hook_filter


class PhaseContext(msgspec.Struct, frozen=True, weakref=True):
    """Everything a hook may read. It is frozen, and `snapshot` is frozen too: a hook changes
    state only by returning a StateCommand.

    `PhaseContext(phase, run, agent, snapshot, messages=(), profile=None, tool_call=None,
    response=None, tool_result=None)`: the frozen object that every hook, tool gate, action
    handler and tool receives.

    (A msgspec Struct rather than an attrs class, though it is never encoded: one is built
    for every phase, and a frozen Struct is built in a tenth of the time.)
    """

    phase: Phase
    """The `Phase`."""
    run: RunIdentity
    """The `RunIdentity`."""
    agent: AgentSpec
    """The `AgentSpec`."""
    snapshot: Snapshot
    """The frozen `Snapshot` that the hook decides on. Every hook of a gather round gets the
    same one."""
    messages: tuple[Message, ...] = ()
    """A tuple: the thread's history, as the caller of the phase passed it (the conversation
    so far, in the phases that have one: inference, tool calls)."""
    profile: ProfileAccess | None = None
    """Shared and profile state (`ctx.profile`); None when the kernel has no ProfileStore.

    Hooks, actions and tools get a `BufferedProfileAccess`. Tool gates get a
    `ReadOnlyProfileAccess`."""
    tool_call: ToolCall | None = None
    """The `ToolCall` being gated or executed (TOOL_GATE, BEFORE/AFTER_TOOL_EXECUTE)."""
    response: InferenceResponse | None = None
    """The model's answer, an `InferenceResponse` (AFTER_INFERENCE)."""
    tool_result: ToolResult | None = None
    """How the call ended, a `ToolResult` (AFTER_TOOL_EXECUTE)."""


PHASE_FIELDS = frozenset({"messages", "tool_call", "response", "tool_result"})
"""The context fields a caller of `run_phase` may set."""


def check_phase_fields(fields: Mapping[str, Any]) -> None:
    """Refuse fields a phase does not have, and messages that are not a tuple."""
    unknown = set(fields) - PHASE_FIELDS
    if unknown:
        raise TypeError(
            f"unknown phase field(s) {sorted(unknown)}; a phase takes {sorted(PHASE_FIELDS)}"
        )
    messages = fields.get("messages")
    if messages is not None and not isinstance(messages, tuple):
        raise TypeError(f"messages must be a tuple, got {type(messages).__name__}")
