"""Roles: what every agent of a role is made of, and how a role's choices combine with the
team's defaults into the one `Agent` that runs all agents of the role."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import attrs

from .._durable.retention import Retention
from .._durable.store import ThreadStore
from .._durable.threads import SNAPSHOT_EVERY
from .._engine.plugin import Plugin
from .._errors import StateError
from .._host.run import PhaseListener, Tool
from .._profile.store import ProfileStore
from .._values import options
from .._values.model import Model
from .addresses import checked_text
from .agent import Agent, named_tools

__all__ = ["AgentOptions", "Role", "RoleDefaults"]


def _checked_topics(topics: Iterable[str]) -> tuple[str, ...]:
    """A role's topics, each a name every store keeps (they are saved with each agent)."""
    return tuple(checked_text("topic", topic) for topic in topics)


def _checked_max_steps(instance: object, attribute: object, value: int | None) -> None:
    if value is not None:
        options.positive_int("max_steps", value, fix="Leave it None for the team's.")


@attrs.frozen
class Role:
    """What every agent of a role is made of, as `AgentTeam(roles=...)` takes it.

    `Role(plugins=(), model=None, tools=None, system_prompt=None, topics=(), max_steps=None)`.
    Anything left None (or empty) comes from the team's defaults: `plugins` and `tools` are
    added to the team's (a role's plugin or tool replaces the team's of the same id or
    name); `model`, `system_prompt` and `max_steps` replace the team's when given.
    `topics`: every agent of the role subscribes to them when spawned (each checked as
    `team.subscribe` checks a topic, when the role is made). A `max_steps` that is not a
    positive int (a bool is not one) raises `ValueError` when the role is made. A role with
    no model, in a team with none, raises `StateError`. See [teams](team.md).
    """

    plugins: Sequence[Plugin] = ()
    model: Model | None = None
    tools: Mapping[str, Tool] | Iterable[Tool] | None = None
    system_prompt: str | None = None
    topics: tuple[str, ...] = attrs.field(default=(), converter=_checked_topics)
    max_steps: int | None = attrs.field(default=None, validator=_checked_max_steps)


@attrs.frozen
class AgentOptions:
    """The options of its `Kernel` a team gives every role's `Agent` alike (each checked
    where the agent's kernel is made, by the same checks as a kernel of its own)."""

    max_phase_rounds: int = 16
    restore_errors: Literal["raise", "skip"] = "raise"
    unknown_keys: Literal["keep", "refuse"] = "keep"
    snapshot_every: int = SNAPSHOT_EVERY
    retention: Retention | None = None
    on_phase: PhaseListener | None = None
    chain_key: bytes | None = None


@attrs.frozen
class RoleDefaults:
    """The team's defaults, and how a role's choices combine with them."""

    model: Model | None
    tools: dict[str, Tool]
    plugins: tuple[Plugin, ...]
    system_prompt: str | None
    max_steps: int
    options: AgentOptions = AgentOptions()

    def agent(
        self,
        name: str,
        role: Role,
        extra: Mapping[str, Tool],
        *,
        profile_store: ProfileStore,
        thread_store: ThreadStore | None,
    ) -> Agent:
        model = role.model if role.model is not None else self.model
        if model is None:
            raise StateError(
                f"role {name!r} has no model, and the team gives none: pass "
                f"AgentTeam(..., model=...) or Role(..., model=...)"
            )
        plugins = {p.id: p for p in self.plugins}
        plugins.update({p.id: p for p in role.plugins})
        tools = {**self.tools, **extra, **named_tools(role.tools)}
        return Agent(
            plugins.values(),
            model,
            tools,
            system_prompt=self.system_prompt if role.system_prompt is None else role.system_prompt,
            profile_store=profile_store,
            thread_store=thread_store,
            max_steps=role.max_steps if role.max_steps is not None else self.max_steps,
            name=name,
            **attrs.asdict(self.options, recurse=False),
        )
