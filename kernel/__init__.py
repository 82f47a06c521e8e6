"""statekernel: a snapshot-and-command state kernel for agent runtimes.

This module re-exports the public API and nothing else.
"""

from .actions import EffectSpec, ScheduledActionSpec
from .codec import dec_hook, enc_hook
from .commands import MutationBatch, StateCommand
from .context import AgentSpec, PhaseContext, RunIdentity
from .engine import PhaseReport
from .errors import (
    CommitRejected,
    DecodeFailed,
    DuplicateRegistration,
    HookFailed,
    InvalidDeclaration,
    PhaseRunLoopExceeded,
    RevisionConflict,
    StateError,
    StateValidationError,
    StoreError,
    UnknownActionHandler,
    UnknownEffectHandler,
    UnknownStateKey,
    VersionConflict,
)
from .keys import KeyScope, MergeStrategy, StateKey, StateKeyOptions
from .merge import Contribution, Partition, partition
from .phases import Phase
from .plugin import Plugin, PluginRegistrar
from .registry import KeyRegistry
from .runtime import Kernel, Run
from .snapshot import Snapshot
from .state import LiveState
from .toolgate import Block, SetResult, Suspend
from .tools import ToolCall, ToolCallStatus, ToolOutput, ToolResult
from .vector import Vector

__all__ = [
    "AgentSpec",
    "Block",
    "CommitRejected",
    "Contribution",
    "DecodeFailed",
    "DuplicateRegistration",
    "EffectSpec",
    "HookFailed",
    "InvalidDeclaration",
    "Kernel",
    "KeyRegistry",
    "KeyScope",
    "LiveState",
    "MergeStrategy",
    "MutationBatch",
    "Partition",
    "Phase",
    "PhaseContext",
    "PhaseReport",
    "PhaseRunLoopExceeded",
    "Plugin",
    "PluginRegistrar",
    "RevisionConflict",
    "Run",
    "RunIdentity",
    "ScheduledActionSpec",
    "SetResult",
    "Snapshot",
    "StateCommand",
    "StateError",
    "StateKey",
    "StateKeyOptions",
    "StateValidationError",
    "StoreError",
    "Suspend",
    "ToolCall",
    "ToolCallStatus",
    "ToolOutput",
    "ToolResult",
    "UnknownActionHandler",
    "UnknownEffectHandler",
    "UnknownStateKey",
    "Vector",
    "VersionConflict",
    "dec_hook",
    "enc_hook",
    "partition",
]
