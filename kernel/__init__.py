"""statekernel: a snapshot-and-command state kernel for agent runtimes.

This module re-exports the public API and nothing else.
"""

from .actions import EffectSpec, ScheduledActionSpec
from .agent import Agent, Decision, PendingCall, RunResult, run_status
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
    UnknownProfileKey,
    UnknownSchemaField,
    UnknownStateKey,
    VersionConflict,
)
from .keys import KeyScope, MergeStrategy, StateKey, StateKeyOptions
from .merge import Contribution, Partition, partition
from .messages import Message
from .model import InferenceRequest, InferenceResponse, ScriptedModel
from .phases import Phase
from .plugin import Plugin, PluginRegistrar
from .profile import (
    BufferedProfileAccess,
    Entry,
    ProfileAccess,
    ProfileKey,
    ProfileStore,
    ReadOnlyProfileAccess,
    StateScope,
    SupportsAtomicUpdate,
)
from .reducers import StateUpdater
from .registry import KeyRegistry
from .runtime import Kernel, Run
from .schema import Commutative, Ephemeral, StateSchema
from .snapshot import Snapshot
from .state import LiveState
from .threads import ThreadState, ThreadStore
from .toolgate import Block, SetResult, Suspend
from .tools import ToolCall, ToolCallStatus, ToolOutput, ToolResult
from .vector import Vector

__all__ = [
    "Agent",
    "AgentSpec",
    "Block",
    "BufferedProfileAccess",
    "CommitRejected",
    "Commutative",
    "Contribution",
    "Decision",
    "DecodeFailed",
    "DuplicateRegistration",
    "EffectSpec",
    "Entry",
    "Ephemeral",
    "HookFailed",
    "InferenceRequest",
    "InferenceResponse",
    "InvalidDeclaration",
    "Kernel",
    "KeyRegistry",
    "KeyScope",
    "LiveState",
    "MergeStrategy",
    "Message",
    "MutationBatch",
    "Partition",
    "PendingCall",
    "Phase",
    "PhaseContext",
    "PhaseReport",
    "PhaseRunLoopExceeded",
    "Plugin",
    "PluginRegistrar",
    "ProfileAccess",
    "ProfileKey",
    "ProfileStore",
    "ReadOnlyProfileAccess",
    "RevisionConflict",
    "Run",
    "RunIdentity",
    "RunResult",
    "ScheduledActionSpec",
    "ScriptedModel",
    "SetResult",
    "Snapshot",
    "StateCommand",
    "StateError",
    "StateKey",
    "StateKeyOptions",
    "StateSchema",
    "StateScope",
    "StateUpdater",
    "StateValidationError",
    "StoreError",
    "SupportsAtomicUpdate",
    "Suspend",
    "ThreadState",
    "ThreadStore",
    "ToolCall",
    "ToolCallStatus",
    "ToolOutput",
    "ToolResult",
    "UnknownActionHandler",
    "UnknownEffectHandler",
    "UnknownProfileKey",
    "UnknownSchemaField",
    "UnknownStateKey",
    "Vector",
    "VersionConflict",
    "dec_hook",
    "enc_hook",
    "partition",
    "run_status",
]
