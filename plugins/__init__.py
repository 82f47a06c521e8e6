"""Built-in plugins for statekernel, written only against `statekernel`'s public API.

- `RunLifecycle` (plugins.run_lifecycle): the run's phase, status, step count and pending work.
- `ContextInjection` (plugins.context): keyed, banded, throttled context messages.
- `StageWorkflow` / `StageKey` (plugins.stages): legal stage transitions and tool gates.
- `Team` (plugins.team): goals and notes shared by a parent agent and its sub-agents.
"""

from .context import (
    BANDS,
    AddContextMessage,
    Band,
    ContextEntry,
    ContextInjection,
    ContextMessage,
    ContextMessages,
    ContextStep,
    ContextThrottle,
    RemoveContextMessage,
    ThrottleMark,
    add_context,
    remove_context,
)
from .run_lifecycle import (
    Lifecycle,
    PendingWork,
    RunLifecycle,
    RunPhase,
    RunStatus,
    StepCount,
    lifecycle_of,
)
from .stages import IllegalTransition, StageKey, StageWorkflow, Transition
from .team import Team, TeamContext, TeamData, extend_team, render_team, team_scope

__all__ = [
    "BANDS",
    "AddContextMessage",
    "Band",
    "ContextEntry",
    "ContextInjection",
    "ContextMessage",
    "ContextMessages",
    "ContextStep",
    "ContextThrottle",
    "IllegalTransition",
    "Lifecycle",
    "PendingWork",
    "RemoveContextMessage",
    "RunLifecycle",
    "RunPhase",
    "RunStatus",
    "StageKey",
    "StageWorkflow",
    "StepCount",
    "Team",
    "TeamContext",
    "TeamData",
    "ThrottleMark",
    "Transition",
    "add_context",
    "extend_team",
    "lifecycle_of",
    "remove_context",
    "render_team",
    "team_scope",
]
