"""Where a team message goes: one agent or several (`to`), every agent of a role (`group`),
or a topic's subscribers (`topic`), as one value that `team.send` and the agents'
`send_message` tool both check and resolve, and names every team call takes.

An address is checked when it is made, before anything is queued or stored, so a refused
call changes nothing; it is resolved against the roster when the message is sent, so a
topic reaches its subscribers at the time of sending.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import attrs

from .._errors import InvalidName, StateError, UnknownAgent
from .._values.names import check_name
from .roster import AgentRecord

__all__ = ["Address", "checked_agent_id", "checked_text"]


def checked_text(label: str, value: object, *, empty: bool = False) -> str:
    """`value` once it is text every store can keep (`check_name`'s rule: a string, no lone
    surrogate, no NUL), and not empty unless `empty`."""
    text = check_name(label, value)
    if not text and not empty:
        raise InvalidName(
            label, text, "must not be empty", f"Give a {label} of one character or more."
        )
    return text


def checked_agent_id(agent_id: object) -> str:
    """An agent id: non-empty text without `/` (it names the agent's thread, `<team>/<id>`)."""
    text = checked_text("agent id", agent_id)
    if "/" in text:
        raise InvalidName(
            "agent id",
            text,
            "holds '/', which separates a thread id's parts",
            "Leave '/' out of agent ids.",
            index=text.index("/"),
        )
    return text


@attrs.frozen
class Address:
    """Exactly one of: the agents `to`, the role `group`, the topic `topic`."""

    to: tuple[str, ...] = ()
    group: str | None = None
    topic: str | None = None

    @classmethod
    def of(cls, to: str | Iterable[str] | None, group: str | None, topic: str | None) -> Address:
        """The address `send` was given, checked; `StateError` unless exactly one part is
        given, `TypeError` or `ValueError` for a name no store can keep."""
        if (to is not None) + (group is not None) + (topic is not None) != 1:
            raise StateError(
                "send needs exactly one address: to=<agent id or ids>, group=<role> or "
                "topic=<topic>"
            )
        if to is not None:
            if isinstance(to, str):
                names: tuple[object, ...] = (to,)
            else:
                try:
                    names = tuple(to)
                except TypeError:
                    raise TypeError(f"to must be an agent id or several, got {to!r}") from None
            if not names:
                raise StateError("send(to=...) names no agent; give one agent id or several")
            return cls(to=tuple(dict.fromkeys(checked_text("agent id", n) for n in names)))
        if group is not None:
            return cls(group=checked_text("group", group))
        return cls(topic=checked_text("topic", topic))

    @property
    def via(self) -> str | None:
        """How the letter says it was addressed: `"group g"`, `"topic t"`, or None."""
        if self.group is not None:
            return f"group {self.group}"
        if self.topic is not None:
            return f"topic {self.topic}"
        return None

    def recipients(
        self,
        agents: Mapping[str, AgentRecord],
        *,
        roles: Collection[str],
        sender: str,
        team_id: str,
    ) -> list[AgentRecord]:
        """The agents of `agents` (the roster) this address reaches: each of `to` (an
        unknown one raises `UnknownAgent`), or the role's agents or the topic's subscribers
        but the sender (an unknown role raises `StateError`)."""
        if self.to:
            missing = next((n for n in self.to if n not in agents), None)
            if missing is not None:
                raise UnknownAgent(missing, team_id, agents)
            return [agents[n] for n in self.to]
        if self.group is not None:
            if self.group not in roles:
                raise StateError(
                    f"group {self.group!r} is not a role of team {team_id!r}; groups are "
                    f"roles: {sorted(roles)}"
                )
            found = [r for r in agents.values() if r.role == self.group]
        else:
            found = [r for r in agents.values() if self.topic in r.topics]
        return [r for r in found if r.id != sender]
