"""Team context: one shared record of goals and notes for a parent agent and its sub-agents.

A parent delegating to child agents wants them to pursue the same goals, and wants to see
what each child adds. Thread state cannot do that (each child has its own thread), so the
record lives in the ProfileStore under `StateScope.parent_thread(parent_id)`: every run
whose `parent_thread_id` is `parent_id` reads and extends the same record, and runs under
another parent never see it. A run without a parent leads its own team: it uses
`StateScope.parent_thread(its own thread id)`, which is exactly the record its children use.

Children extend the record with `ProfileAccess.update` (read-modify-write with
compare-and-set, retried on conflict), never with a blind write, so children running at the
same time lose none of each other's additions. Before each inference the plugin reads the
record and injects it as a context message through `ContextInjection`, so install
`ContextInjection` alongside it. It needs a ProfileStore (`Agent(..., profile_store=...)`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import msgspec
import pydantic

from statekernel import (
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ProfileAccess,
    ProfileKey,
    RunIdentity,
    StateCommand,
    StateError,
    StateScope,
    tool,
)

from ._context_injection import Band, ContextMessage, add_context

__all__ = ["Team", "TeamContext", "TeamData", "extend_team", "render_team", "team_scope"]


class TeamData(msgspec.Struct, frozen=True):
    """What a team shares: its goals and the notes its members leave, in the order added.

    `TeamData(goals=(), notes=())`: the team record, the value of `TeamContext`; both are
    tuples of strings.
    """

    goals: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def extended(self, *, goals: Iterable[str] = (), notes: Iterable[str] = ()) -> TeamData:
        """This record plus the goals and notes not already in it.

        Adding what is already there changes nothing, so seeding the same goals at every
        run start, or an update retried after a conflict, never duplicates an entry.
        """
        return TeamData(_joined(self.goals, goals), _joined(self.notes, notes))


def _joined(kept: tuple[str, ...], added: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*kept, *added)))


class TeamContext(ProfileKey[TeamData]):
    """The team record; its key string is `team_scope(run)`.

    Profile key `"team_context"`, with value `TeamData`.
    """

    key = "team_context"


def team_scope(run: RunIdentity) -> StateScope:
    """The team record a run belongs to: its parent's, or its own if it has no parent.

    The record a run's team shares:
    `StateScope.parent_thread(run.parent_thread_id or run.thread_id)`.
    """
    return StateScope.parent_thread(run.parent_thread_id or run.thread_id)


async def extend_team(
    profile: ProfileAccess, scope: str, *, goals: Iterable[str] = (), notes: Iterable[str] = ()
) -> TeamData:
    """Add goals and notes to the team record at `scope` without losing concurrent additions.

    It adds them with `ProfileAccess.update`, so concurrent additions are never lost, and
    returns the record with them. Inside a hook, action or tool the write is buffered and
    applied when its command commits (the returned value is then provisional); on a plain
    `ProfileAccess` it is applied at once.

    See [concurrent children](howto-team-context.md#concurrent-children-lose-nothing).
    """
    goals, notes = tuple(goals), tuple(notes)
    return await profile.update(
        TeamContext, scope, lambda team: team.extended(goals=goals, notes=notes)
    )


def render_team(team: TeamData) -> str:
    """The record as the model reads it."""
    lines = ["Team context, shared with the agents you work with:"]
    if team.goals:
        lines += ["Goals:", *(f"- {goal}" for goal in team.goals)]
    if team.notes:
        lines += ["Notes:", *(f"- {note}" for note in team.notes)]
    return "\n".join(lines)


class Team(Plugin):
    """Seeds and injects the team record; `tools()` lets the model extend it.

    `Team(*, goals=(), band="session", order=0, context_key="team")`: plugin (id `"team"`).
    `goals` are added to the run's team record at every RUN_START (adding existing goals
    changes nothing): give them to the parent. Before each inference the record, if it
    holds anything, becomes the context message `context_key` in `band` at `order`
    (expiring after the step, so every request shows the record as it is then), so install
    `ContextInjection` too. Without a ProfileStore, the first team access raises
    `StateError`.

    See [what the plugin does](howto-team-context.md#what-the-plugin-does).
    """

    id = "team"

    def __init__(
        self,
        *,
        goals: Iterable[str] = (),
        band: Band = "session",
        order: int = 0,
        context_key: str = "team",
    ) -> None:
        self.goals = tuple(goals)
        self.band: Band = band
        self.order = order
        self.context_key = context_key

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_profile_key(TeamContext)
        if self.goals:
            registrar.register_phase_hook(Phase.RUN_START, self.seed)
        registrar.register_phase_hook(Phase.BEFORE_INFERENCE, self.inject)

    async def seed(self, ctx: PhaseContext) -> None:
        await extend_team(_profile(ctx), team_scope(ctx.run), goals=self.goals)

    async def inject(self, ctx: PhaseContext) -> StateCommand | None:
        team = await _profile(ctx).read(TeamContext, team_scope(ctx.run))
        if not (team.goals or team.notes):
            return None
        message = ContextMessage(
            key=self.context_key,
            content=render_team(team),
            band=self.band,
            order=self.order,
            expires_after_steps=1,
        )
        return add_context(message)

    def tools(self) -> dict[str, Any]:
        """`add_team_goal(goal)` and `add_team_note(note)`, for the Agent's tools (each a
        `statekernel.tool`, with its schema)."""
        return {"add_team_goal": add_team_goal, "add_team_note": add_team_note}


_Text = Annotated[str, pydantic.StringConstraints(strip_whitespace=True, min_length=1)]


@tool
async def add_team_goal(goal: _Text, ctx: PhaseContext) -> str:
    """Add a goal to the record the whole team shares (every agent of the team sees it).

    Args:
        goal: The goal, in one sentence.
    """
    await extend_team(_profile(ctx), team_scope(ctx.run), goals=(goal,))
    return f"added team goal: {goal}"


@tool
async def add_team_note(note: _Text, ctx: PhaseContext) -> str:
    """Add a note to the record the whole team shares (every agent of the team sees it).

    Args:
        note: What the team should know.
    """
    await extend_team(_profile(ctx), team_scope(ctx.run), notes=(note,))
    return f"added team note: {note}"


def _profile(ctx: PhaseContext) -> ProfileAccess:
    profile = ctx.profile
    if not isinstance(profile, ProfileAccess):
        raise StateError(
            f"the team plugin needs a ProfileStore, but run {ctx.run.run_id!r} has none (phase "
            f"{ctx.phase}). Give one to the agent: Agent(..., profile_store="
            f"stores.MemoryProfileStore()) or stores.SqliteProfileStore(path)."
        )
    return profile
