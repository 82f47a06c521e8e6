"""statekernel: a snapshot-and-command state kernel for agent runtimes.

This module re-exports the public API and nothing else.
"""

from ._agent import Agent, Decision, PendingCall, RunResult, run_status
from ._codec import dec_hook, enc_hook
from ._commands import MutationBatch, StateCommand
from ._commit import LiveState
from ._context import AgentSpec, PhaseContext, RunIdentity
from ._engine import PhaseReport
from ._errors import (
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
from ._keys import KeyScope, MergeStrategy, StateKey, StateKeyOptions
from ._merge import Contribution, Partition, partition
from ._messages import Message
from ._model import InferenceRequest, InferenceResponse, ScriptedModel
from ._phases import Phase
from ._plugin import Plugin, PluginRegistrar
from ._profile import (
    BufferedProfileAccess,
    Entry,
    ProfileAccess,
    ProfileKey,
    ProfileStore,
    ReadOnlyProfileAccess,
    StateScope,
    SupportsAtomicUpdate,
)
from ._reducers import StateUpdater
from ._registry import KeyRegistry
from ._runtime import Kernel, Run
from ._schema import Commutative, Ephemeral, StateSchema
from ._snapshot import Snapshot
from ._specs import EffectSpec, ScheduledActionSpec
from ._threads import ThreadState, ThreadStore
from ._toolgate import Block, SetResult, Suspend
from ._tools import ToolCall, ToolCallStatus, ToolOutput, ToolResult
from ._vector import Vector

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
