"""Roles: what every agent of a role is made of, and how a role's choices combine with the
team's defaults into the one `Agent` that runs all agents of the role."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from .._durable.store import ThreadStore
from .._engine.plugin import Plugin
from .._errors import StateError
from .._host.run import Tool
from .._profile.store import ProfileStore
from .._values.model import Model
from .addresses import checked_text
from .agent import Agent, named_tools

__all__ = ["Role", "RoleDefaults"]


def _checked_topics(topics: Iterable[str]) -> tuple[str, ...]:
    """A role's topics, each a name every store keeps (they are saved with each agent)."""
    return tuple(checked_text("topic", topic) for topic in topics)


@attrs.frozen
class Role:
    """What every agent of a role is made of, as `AgentTeam(roles=...)` takes it.

    `Role(plugins=(), model=None, tools=None, system_prompt=None, topics=(), max_steps=None)`.
    Anything left None (or empty) comes from the team's defaults: `plugins` and `tools` are
    added to the team's (a role's plugin or tool replaces the team's of the same id or
    name); `model`, `system_prompt` and `max_steps` replace the team's when given.
    `topics`: every agent of the role subscribes to them when spawned (each checked as
    `team.subscribe` checks a topic, when the role is made). A role with no
    model, in a team with none, raises `StateError`. See [teams](team.md).
    """

    plugins: Sequence[Plugin] = ()
    model: Model | None = None
    tools: Mapping[str, Tool] | Iterable[Tool] | None = None
    system_prompt: str | None = None
    topics: tuple[str, ...] = attrs.field(default=(), converter=_checked_topics)
    max_steps: int | None = None


@attrs.frozen
class RoleDefaults:
    """The team's defaults, and how a role's choices combine with them."""

    model: Model | None
    tools: dict[str, Tool]
    plugins: tuple[Plugin, ...]
    system_prompt: str | None
    max_steps: int

    def agent(
        self,
        name: str,
        role: Role,
        extra: Mapping[str, Tool],
        *,
        profile_store: ProfileStore,
        thread_store: ThreadStore | None,
        chain_key: bytes | None = None,
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
            chain_key=chain_key,
        )
