"""Built-in plugins for statekernel, written only against `statekernel`'s public API.

- `RunLifecycle`: the run's phase, status, step count and pending work.
- `ContextInjection`: keyed, banded, throttled context messages.
- `StageWorkflow` / `StageKey`: legal stage transitions and tool gates.
- `Team`: goals and notes shared by a parent agent and its sub-agents.

Each lives in a private module named for it; import them from here.
"""

from ._context_injection import (
    BANDS,
    LIFETIMES,
    VISIBILITIES,
    AddContextMessage,
    Band,
    ContextEntry,
    ContextInjection,
    ContextMessage,
    ContextMessages,
    ContextStep,
    ContextThrottle,
    Lifetime,
    RemoveContextMessage,
    RemoveContextPrefix,
    ThrottleMark,
    Visibility,
    add_context,
    clear_context,
    remove_context,
    remove_context_prefix,
)
from ._run_lifecycle import (
    Lifecycle,
    PendingWork,
    RunLifecycle,
    RunPhase,
    RunStatus,
    StepCount,
    lifecycle_of,
)
from ._stages import IllegalTransition, StageKey, StageWorkflow, Transition
from ._team import Team, TeamContext, TeamData, extend_team, render_team, team_scope

__all__ = [
    "BANDS",
    "LIFETIMES",
    "VISIBILITIES",
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
    "Lifetime",
    "PendingWork",
    "RemoveContextMessage",
    "RemoveContextPrefix",
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
    "Visibility",
    "add_context",
    "clear_context",
    "extend_team",
    "lifecycle_of",
    "remove_context",
    "remove_context_prefix",
    "render_team",
    "team_scope",
]
