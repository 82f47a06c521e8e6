"""The tools a team gives its agents: `send_message` and `spawn_agent`.

Both act through the calling agent's outbox (`outbox.py`): what they send or spawn is
committed with the tool's result and carried out once the step is saved, so a step done
again after a crash, with whatever call ids the model picks then, sends and spawns nothing
twice. They set `SENDING` for the call and then use the team's public `send` and `spawn`,
which read it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable

from .._engine.context import PhaseContext
from .._host.run import Tool
from .function_tools import tool
from .outbox import SENDING, Outboxes
from .roster import TeamRoster

__all__ = ["digest", "mail_tool", "spawn_tool"]

Send = Callable[..., Awaitable[int]]
Spawn = Callable[..., str]


def digest(*parts: str) -> str:
    """Eight hex digits naming `parts` (an agent spawned from a run is named with them)."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:8]


def mail_tool(roster: TeamRoster, outboxes: Outboxes, send: Send) -> Tool:
    """`send_message(content, to=None, group=None, topic=None)`, from the calling agent."""

    async def send_message(
        content: str,
        ctx: PhaseContext,
        to: str | None = None,
        group: str | None = None,
        topic: str | None = None,
    ) -> str:
        """Send a message to other agents of your team: to one agent (`to`, its id), to
        every agent of a role (`group`) or to a topic's subscribers (`topic`). Give
        exactly one of them. A message you receive starts with the sender's id.

        Args:
            content: The message.
            to: The id of the agent to send it to.
            group: A role: every agent of it gets the message.
            topic: A topic: every agent subscribed to it gets the message.
        """
        thread_id = ctx.run.thread_id
        sender = roster.agent_of_thread(thread_id) or thread_id
        token = SENDING.set((outboxes, thread_id))
        try:
            count = await send(sender, content, to=to, group=group, topic=topic)
        finally:
            SENDING.reset(token)
        return f"sent to {count} agent(s)"

    return tool(idempotent=True)(send_message)


def spawn_tool(outboxes: Outboxes, spawn: Spawn) -> Tool:
    """`spawn_agent(role, task)`: a member of the team, from the calling agent."""

    async def spawn_agent(role: str, task: str, ctx: PhaseContext) -> str:
        """Start a new agent of your team on a task; it shares the team's context.

        Args:
            role: The new agent's role.
            task: What it should do (its first message).
        """
        thread_id = ctx.run.thread_id
        # Named after the thread and the step's snapshot, so that the step done again
        # after a crash names the same agent.
        staged = outboxes.next_number(thread_id)
        name = f"{role}-{digest(thread_id, str(ctx.snapshot.revision), str(staged))}"
        token = SENDING.set((outboxes, thread_id))
        try:
            agent_id = spawn(role, task, agent_id=name)
        finally:
            SENDING.reset(token)
        return f"started {agent_id} ({role})"

    return tool(idempotent=True)(spawn_agent)
