"""statekernel: a snapshot-and-command state kernel for agent runtimes.

This module is the user API and nothing else: declaring state, plugins and hooks, runs and
the Agent, shared and profile state, schemas and errors. The machinery underneath (the
commit path, the key registry, merge partitions, profile views) is in `statekernel.lowlevel`
for store authors and tests; every other module is private and may change.
"""

import importlib.metadata as _metadata

from ._agents.agent import Agent
from ._agents.facade_state import run_status
from ._agents.function_tools import tool
from ._agents.run_result import PendingCall, RunResult
from ._agents.suspension import Decision
from ._agents.team import AgentInfo, AgentReport, AgentTeam, Role, TeamReport, TeamSnapshot
from ._durable.export import ExportedState
from ._durable.journal import CommitRecord, JournalOp
from ._durable.rebase import Rebase
from ._durable.replay import ReplayReport
from ._durable.retention import Retention
from ._durable.store import ThreadStore
from ._engine.context import AgentSpec, PhaseContext, RunIdentity
from ._engine.phase_engine import PhaseReport
from ._engine.plugin import Plugin, PluginRegistrar
from ._engine.snapshot import Snapshot
from ._errors import (
    ChainKeyMismatch,
    ChainKeyMissing,
    CommitRejected,
    DecodeFailed,
    DuplicateRegistration,
    HookFailed,
    InvalidDeclaration,
    InvalidName,
    InvalidToolArguments,
    JournalCorrupted,
    ModelCallFailed,
    NameNotAString,
    OutcomeUnknown,
    PhaseRunLoopExceeded,
    ReplayFailed,
    RevisionConflict,
    StateError,
    StateValidationError,
    StoreError,
    StoreNotOpened,
    ToolArgumentsTooDeep,
    ToolResultTooDeep,
    UnknownActionHandler,
    UnknownAgent,
    UnknownEffectHandler,
    UnknownProfileKey,
    UnknownRevision,
    UnknownSchemaField,
    UnknownStateKey,
    UnknownThread,
    UnknownUpdater,
    ValueTooDeep,
    VersionConflict,
)
from ._host.kernel import Kernel
from ._host.run import Run
from ._host.stores import Stores
from ._profile.access import ProfileAccess
from ._profile.keys import ProfileKey
from ._profile.scope import StateScope
from ._profile.store import ProfileStore
from ._public import publish
from ._schema.markers import Commutative, Ephemeral
from ._schema.message_reducers import add_messages, append_messages
from ._schema.reducers import StateUpdater
from ._schema.schema import StateSchema
from ._values.codec import dec_hook, enc_hook
from ._values.commands import MutationBatch, Overwrite, StateCommand
from ._values.dead_letters import DeadLetter, DeadLetters
from ._values.keys import KeyScope, MergeStrategy, StateKey, StateKeyOptions
from ._values.loop_actions import ExcludeTool, IncludeOnlyTools, SetInferenceOverride
from ._values.messages import REMOVE_ALL_MESSAGES, Message, MessageLike, RemoveMessage, as_message
from ._values.model import InferenceRequest, InferenceResponse, ScriptedModel
from ._values.phases import Phase
from ._values.run_events import EffectRun, GateRun, PhaseRun, RunEvent, ToolRun
from ._values.specs import EffectSpec, ScheduledActionSpec
from ._values.toolgate import Block, SetResult, Suspend
from ._values.tools import ToolCall, ToolCallStatus, ToolOutput, ToolResult, ToolSpec
from ._values.vector import Vector

__all__ = [
    "REMOVE_ALL_MESSAGES",
    "Agent",
    "AgentInfo",
    "AgentReport",
    "AgentSpec",
    "AgentTeam",
    "Block",
    "ChainKeyMismatch",
    "ChainKeyMissing",
    "CommitRecord",
    "CommitRejected",
    "Commutative",
    "DeadLetter",
    "DeadLetters",
    "Decision",
    "DecodeFailed",
    "DuplicateRegistration",
    "EffectRun",
    "EffectSpec",
    "Ephemeral",
    "ExcludeTool",
    "ExportedState",
    "GateRun",
    "HookFailed",
    "IncludeOnlyTools",
    "InferenceRequest",
    "InferenceResponse",
    "InvalidDeclaration",
    "InvalidName",
    "InvalidToolArguments",
    "JournalCorrupted",
    "JournalOp",
    "Kernel",
    "KeyScope",
    "MergeStrategy",
    "Message",
    "MessageLike",
    "ModelCallFailed",
    "MutationBatch",
    "NameNotAString",
    "OutcomeUnknown",
    "Overwrite",
    "PendingCall",
    "Phase",
    "PhaseContext",
    "PhaseReport",
    "PhaseRun",
    "PhaseRunLoopExceeded",
    "Plugin",
    "PluginRegistrar",
    "ProfileAccess",
    "ProfileKey",
    "ProfileStore",
    "Rebase",
    "RemoveMessage",
    "ReplayFailed",
    "ReplayReport",
    "Retention",
    "RevisionConflict",
    "Role",
    "Run",
    "RunEvent",
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
    "StoreNotOpened",
    "Stores",
    "Suspend",
    "TeamReport",
    "TeamSnapshot",
    "ThreadStore",
    "ToolArgumentsTooDeep",
    "ToolCall",
    "ToolCallStatus",
    "ToolOutput",
    "ToolResult",
    "ToolResultTooDeep",
    "ToolRun",
    "ToolSpec",
    "UnknownActionHandler",
    "UnknownAgent",
    "UnknownEffectHandler",
    "UnknownProfileKey",
    "UnknownRevision",
    "UnknownSchemaField",
    "UnknownStateKey",
    "UnknownThread",
    "UnknownUpdater",
    "ValueTooDeep",
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

__version__: str = _metadata.version("statekernel")
"""The installed distribution's version (`pyproject.toml`'s)."""
del _metadata

# Imported here so that the engine parts show their public path (`statekernel.lowlevel.X`)
# in reprs even when only `statekernel` was imported.
from . import lowlevel as lowlevel  # noqa: E402
