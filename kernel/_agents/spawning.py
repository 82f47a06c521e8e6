"""Spawning: an agent id gets one thread, whoever spawns it, in any process.

A spawn does three things: seed the agent's thread (if given a seed), post its task into its
inbox, and enter it into the roster. The roster entry comes last and decides: it is written
only if no agent of that id is held (`RosterData.adopting`), so of two processes spawning one
id at once, one writes it and the other adopts that record. The thread is named by the
agent id (`<team id>/<agent id>`), so both spawners seed and post into the same thread: the
seed is committed with the mail cursor's start, an exclusive key, so of two seeds racing on
a new thread one lands and the other is refused (`RevisionConflict`) rather than rebased on
top; the task is posted with one message id, so the inbox takes it once. A spawn a crash cut
short leaves a thread and an inbox that the next spawn of that id takes up.

Only a thread left by an agent a team restore dropped is never reused: its inbox says it
moved, and the next free name (`<team id>/<agent id>/2`, `/3`, ...) is taken instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

import msgspec

from .._engine.plugin import Components
from .._errors import RevisionConflict, StateError, UnknownStateKey
from .._host.kernel import Kernel
from .._values.commands import StateCommand
from .._values.keys import KeyScope
from .._values.reserved_keys import MailCursor, OutSpawn
from .mailbox import TASK_SENDER, LetterOf, Mailbox
from .roles import Role
from .roster import AgentRecord, TeamRoster, role_clash

__all__ = ["Spawner", "check_seed"]

TASK_ID = "task"
"""The message id of a spawned agent's task: its inbox takes it once."""


def check_seed(components: Components, seed: StateCommand, role: str) -> None:
    """Refuse a seed the role's kernel could not commit to a new thread, before anything is
    queued: a key its plugins do not register, a run key, an effect or an action."""
    if seed.effects or seed.scheduled_actions:
        raise StateError(
            "a seed commits thread keys only, but this one also carries effects or scheduled "
            "actions, which need a run; nothing was spawned. Do that work in the agent's run."
        )
    for key, _ in seed.patch.ops:
        binding = components.keys.by_class.get(key)
        if binding is None:
            raise UnknownStateKey(
                getattr(key, "key", repr(key)), known=tuple(components.keys.by_name)
            )
        if binding.scope is not KeyScope.THREAD:
            raise StateError(
                f"a seed commits thread keys only, but key {binding.name!r} is run-scoped: "
                f"run keys start afresh in every run. Nothing was spawned."
            )


class Spawner:
    """Carries out spawns, from `team.spawn` and from the outboxes of running agents.

    `roles` are the team's roles (an agent of one subscribes to its topics at spawn);
    `kernel_of` gives a role's kernel (to seed a thread)."""

    def __init__(
        self,
        roster: TeamRoster,
        mailbox: Mailbox,
        roles: Mapping[str, Role],
        kernel_of: Callable[[str], Kernel],
    ) -> None:
        self._roster = roster
        self._mailbox = mailbox
        self._roles = roles
        self._kernel_of = kernel_of

    def record(self, agent_id: str, role: str, parent_id: str | None) -> AgentRecord:
        """A new agent's record, on the thread its id names."""
        team_id = self._roster.team_id
        topics = tuple(dict.fromkeys(self._roles[role].topics))
        return AgentRecord(agent_id, role, f"{team_id}/{agent_id}", parent_id, topics=topics)

    async def spawn_entry(self, entry: OutSpawn) -> None:
        """Carry out a spawn an agent's outbox holds (`SpawnsEntries`)."""
        if entry.role not in self._roles:
            raise StateError(
                f"an outbox holds a spawn of role {entry.role!r}, which this team does not "
                f"have (its roles are {sorted(self._roles)})"
            )
        await self.spawn(self.record(entry.agent_id, entry.role, entry.parent_id), entry.task)

    async def spawn(
        self, record: AgentRecord, task: str, seed: StateCommand | None = None
    ) -> AgentRecord:
        """The roster's record of `record.id` once the spawn is done: `record` on a thread
        of its own, or the record of an agent of that id someone spawned first."""
        held = self._roster.agents.get(record.id)
        if held is None:
            await self._roster.load()
            held = self._roster.agents.get(record.id)
        if held is not None:
            if held.role != record.role:
                raise role_clash(self._roster.team_id, held, record.role)
            return held
        thread_id = await self._free_thread(record.thread_id)
        record = msgspec.structs.replace(record, thread_id=thread_id)
        if seed is not None:
            await self._seed(self._kernel_of(record.role), thread_id, seed)
        await self._mailbox.post(thread_id, LetterOf(TASK_SENDER, task), message_id=TASK_ID)
        return await self._roster.adopt(record)

    async def _free_thread(self, base: str) -> str:
        """`base`, or the first of `base/2`, `base/3`, ... no restore has left."""
        candidate, number = base, 1
        while (await self._mailbox.head(candidate))[0].moved_to is not None:
            number += 1
            candidate = f"{base}/{number}"
        return candidate

    async def _seed(self, kernel: Kernel, thread_id: str, seed: StateCommand) -> None:
        """Seed a new thread: committed only on revision 0, with the exclusive mail cursor,
        so that a thread a spawn of this id seeded already (one a crash cut short, or one
        racing in another process) refuses it instead of taking it twice."""
        command = StateCommand(base_revision=0).update(MailCursor, ()).extend(seed)
        with contextlib.suppress(RevisionConflict):
            await kernel.update_state(thread_id, command)
