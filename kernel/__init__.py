"""statekernel: a snapshot-and-command state kernel for agent runtimes.

This module is the user API and nothing else: declaring state, plugins and hooks, runs and
the Agent, shared and profile state, schemas and errors. The machinery underneath (the
commit path, the key registry, merge partitions, profile views) is in `statekernel.lowlevel`
for store authors and tests; every other module is private and may change.
"""

from ._agent import Agent, Decision, run_status
from ._codec import dec_hook, enc_hook
from ._commands import MutationBatch, StateCommand
from ._context import AgentSpec, PhaseContext, RunIdentity
from ._dead_letters import DeadLetter, DeadLetters
from ._engine import PhaseReport
from ._errors import (
    CommitRejected,
    DecodeFailed,
    DuplicateRegistration,
    HookFailed,
    InvalidDeclaration,
    InvalidToolArguments,
    ModelCallFailed,
    PhaseRunLoopExceeded,
    ReplayFailed,
    RevisionConflict,
    StateError,
    StateValidationError,
    StoreError,
    UnknownActionHandler,
    UnknownEffectHandler,
    UnknownProfileKey,
    UnknownRevision,
    UnknownSchemaField,
    UnknownStateKey,
    UnknownUpdater,
    VersionConflict,
)
from ._function_tools import tool
from ._journal import CommitRecord, JournalOp
from ._keys import KeyScope, MergeStrategy, StateKey, StateKeyOptions
from ._loop_actions import ExcludeTool, IncludeOnlyTools, SetInferenceOverride
from ._messages import REMOVE_ALL_MESSAGES, Message, MessageLike, RemoveMessage, as_message
from ._model import InferenceRequest, InferenceResponse, ScriptedModel
from ._phases import Phase
from ._plugin import Plugin, PluginRegistrar
from ._profile.access import ProfileAccess
from ._profile.keys import ProfileKey
from ._profile.scope import StateScope
from ._protocols import ProfileStore, ThreadStore
from ._public import publish
from ._replay import ReplayReport
from ._run_result import PendingCall, RunResult
from ._runtime import Kernel, Run
from ._schema.markers import Commutative, Ephemeral, Overwrite
from ._schema.message_reducers import add_messages, append_messages
from ._schema.reducers import StateUpdater
from ._schema.schema import StateSchema
from ._snapshot import Snapshot
from ._specs import EffectSpec, ScheduledActionSpec
from ._toolgate import Block, SetResult, Suspend
from ._tools import ToolCall, ToolCallStatus, ToolOutput, ToolResult, ToolSpec
from ._vector import Vector

__all__ = [
    "REMOVE_ALL_MESSAGES",
    "Agent",
    "AgentSpec",
    "Block",
    "CommitRecord",
    "CommitRejected",
    "Commutative",
    "DeadLetter",
    "DeadLetters",
    "Decision",
    "DecodeFailed",
    "DuplicateRegistration",
    "EffectSpec",
    "Ephemeral",
    "ExcludeTool",
    "HookFailed",
    "IncludeOnlyTools",
    "InferenceRequest",
    "InferenceResponse",
    "InvalidDeclaration",
    "InvalidToolArguments",
    "JournalOp",
    "Kernel",
    "KeyScope",
    "MergeStrategy",
    "Message",
    "MessageLike",
    "ModelCallFailed",
    "MutationBatch",
    "Overwrite",
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
    "RemoveMessage",
    "ReplayFailed",
    "ReplayReport",
    "RevisionConflict",
    "Run",
    "RunIdentity",
    "RunResult",
    "ScheduledActionSpec",
    "ScriptedModel",
    "SetInferenceOverride",
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
    "Suspend",
    "ThreadStore",
    "ToolCall",
    "ToolCallStatus",
    "ToolOutput",
    "ToolResult",
    "ToolSpec",
    "UnknownActionHandler",
    "UnknownEffectHandler",
    "UnknownProfileKey",
    "UnknownRevision",
    "UnknownSchemaField",
    "UnknownStateKey",
    "UnknownUpdater",
    "Vector",
    "VersionConflict",
    "add_messages",
    "append_messages",
    "as_message",
    "dec_hook",
    "enc_hook",
    "run_status",
    "tool",
]

publish(__name__, globals(), __all__)
del publish

# Imported here so that the engine parts show their public path (`statekernel.lowlevel.X`)
# in reprs even when only `statekernel` was imported.
from . import lowlevel as lowlevel  # noqa: E402
