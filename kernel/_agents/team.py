"""AgentTeam: many agents of several roles, one mailbox, one `async with`.

Each role is one `Agent` (its plugins, model, tools), and each spawned agent of the role is
a thread of it whose parent thread is the team's (or its parent agent's), so team context
kept under `StateScope.parent_thread(...)` is shared by construction. The team adds three
things to what an Agent already does:

- a **roster** (`roster.py`): agents, threads and subscriptions, in the ProfileStore;
- a **mailbox** (`mailbox.py`): a message is stored before `send` returns and delivered
  into the recipient's history before its next step, exactly once, in order per sender;
- **`run_until_idle`**: rounds in which every agent with work runs concurrently, failures
  follow the restart policy, and suspended agents wait for `team.resume`.

`spawn`, `subscribe` and `unsubscribe` are plain calls that return at once; the team records
them (in order) at its next awaited call, before that call does anything else.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import attrs
import msgspec

from .._durable.store import ThreadStore
from .._engine.context import PhaseContext
from .._engine.plugin import Plugin
from .._engine.snapshot import Snapshot
from .._errors import RevisionConflict, StateError, UnknownAgent, UnknownThread, cause_text
from .._host.run import Tool
from .._host.stores import Stores, chosen_stores
from .._profile.access import ProfileAccess
from .._profile.store import ProfileStore
from .._values.commands import StateCommand
from .._values.messages import Message
from .._values.model import Model
from .._values.reserved_keys import MailCursor
from .agent import Agent, _named_tools
from .function_tools import tool
from .mailbox import (
    PRUNE_AT,
    TASK_SENDER,
    Delivery,
    InboxData,
    InboxMoved,
    LetterOf,
    Mailbox,
    deliverable,
    sender_of,
)
from .roster import AgentRecord, AgentStatus, Roster, RosterData, Snapshots, TeamSnapshot
from .run_result import Outcome, RunResult
from .suspension import Decision

__all__ = ["AgentInfo", "AgentReport", "AgentTeam", "Role", "TeamReport", "TeamSnapshot"]

RestartPolicy = Literal["never", "on_failure"]

_MOVES = 3  # how many restores a send follows before it gives up

_ROUND: contextvars.ContextVar[AgentTeam | None] = contextvars.ContextVar(
    "statekernel_team_round", default=None
)
"""The team whose rounds the current task runs in (its agents' runs inherit it)."""


@attrs.frozen
class Role:
    """What every agent of a role is made of, as `AgentTeam(roles=...)` takes it.

    `Role(plugins=(), model=None, tools=None, system_prompt=None, topics=(), max_steps=None)`.
    Anything left None (or empty) comes from the team's defaults: `plugins` and `tools` are
    added to the team's (a role's plugin or tool replaces the team's of the same id or
    name); `model`, `system_prompt` and `max_steps` replace the team's when given.
    `topics`: every agent of the role subscribes to them when spawned. A role with no
    model, in a team with none, raises `StateError`. See [teams](team.md).
    """

    plugins: Sequence[Plugin] = ()
    model: Model | None = None
    tools: Mapping[str, Tool] | Iterable[Tool] | None = None
    system_prompt: str | None = None
    topics: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    max_steps: int | None = None


@attrs.frozen
class AgentInfo:
    """One agent of the team as `team.list_agents()` shows it.

    `AgentInfo(id, role, thread_id, parent_id, status)`: the agent's id, its role, its
    thread (which `team.restore_snapshot` changes), the id of the agent it was spawned
    under (or None), and its `status`: `"idle"` (has work or may get some), `"running"`,
    `"waiting"` (suspended: `team.resume`), `"failed"` (out of restarts) or `"done"` (its
    last run answered and nothing new came).
    """

    id: str
    role: str
    thread_id: str
    parent_id: str | None
    status: AgentStatus


@attrs.frozen
class AgentReport:
    """What one agent did in one `run_until_idle`, in `TeamReport.agents`.

    `AgentReport(id, role, status, runs, steps, delivered, restarts, outcomes, error,
    results)`:

    - `id`, `role`, `status`: the agent, its role and its status now (as in `AgentInfo`).
    - `runs`, `steps`: its runs, and the steps they took.
    - `delivered`: the messages delivered into its runs, its task included (a run that
      failed before saving delivers them again later, and they count again).
    - `restarts`: its restarts in a row.
    - `outcomes`: each run's outcome; `results`: each run's `RunResult`.
    - `error`: the error of its last failed run (or None).
    """

    id: str
    role: str
    status: AgentStatus
    runs: int
    steps: int
    delivered: int
    restarts: int
    outcomes: tuple[Outcome, ...]
    error: BaseException | None
    results: tuple[RunResult, ...]


@attrs.frozen
class TeamReport:
    """How `run_until_idle` ended.

    `TeamReport(idle, rounds, agents)`: `idle` is True when no agent had work left (False:
    `max_rounds` stopped it), `rounds` the rounds it ran, and `agents` maps each agent that
    ran to its `AgentReport`.
    """

    idle: bool
    rounds: int
    agents: Mapping[str, AgentReport]

    def failed(self) -> tuple[str, ...]:
        """The ids of the agents whose status is `"failed"`."""
        return tuple(a.id for a in self.agents.values() if a.status == "failed")

    def waiting(self) -> tuple[str, ...]:
        """The ids of the agents whose status is `"waiting"`."""
        return tuple(a.id for a in self.agents.values() if a.status == "waiting")


@attrs.define
class _Spawn:
    """A spawn not yet recorded: its record, task and seed, and how far recording got."""

    record: AgentRecord
    task: str
    seed: StateCommand | None
    seeded: bool = False
    posted: bool = False


@attrs.define
class _Tally:
    """One agent's counts during one `run_until_idle`."""

    runs: int = 0
    steps: int = 0
    outcomes: list[Outcome] = attrs.field(factory=list)
    results: list[RunResult] = attrs.field(factory=list)
    error: BaseException | None = None


class _TeamMail:
    """The team's mailbox as its agents' runs collect from it (`MailDrop`)."""

    def __init__(self, mailbox: Mailbox) -> None:
        self.mailbox = mailbox
        self.threads: set[str] = set()
        self.prefetched: dict[str, InboxData] = {}
        self.delivered: Counter[str] = Counter()

    async def collect(self, thread_id: str, snapshot: Snapshot) -> Delivery | None:
        if thread_id not in self.threads:
            return None
        inbox = self.prefetched.pop(thread_id, None)
        if inbox is None:
            inbox = await self.mailbox.read(thread_id)
        delivery = deliverable(inbox, snapshot.get(MailCursor))
        if delivery is not None:
            self.delivered[thread_id] += len(delivery.messages)
        return delivery


class AgentTeam:
    """Agents of several roles sharing team context and a durable mailbox.

    Use it as `async with AgentTeam(...) as team:`. See [teams](team.md).

    - `roles`: maps a role name to its `Role` (a non-empty mapping, else `TypeError`).
    - `model`, `tools`, `plugins`, `system_prompt` and `max_steps`: the team's defaults
      for every role (see `Role` for how a role overrides them). Each role is one `Agent`
      (`team.agent(role)`), whose kernel reads the threads of every agent of the role.
    - `profile_store`: required, although it defaults to None like `Agent`'s: the roster
      and the inboxes live there, and the kernel never imports a store, so it cannot make
      an in-memory one for you. Without it, `StateError` says which store to pass.
    - `thread_store`: where threads live (without one, in memory, like `Agent`'s).
    - `stores`: both stores as one `Stores`; `stores=statekernel.stores.embedded()` gives
      one SQLite file in a folder.
    - `team_id`: reopens a team saved in those stores (its agents, mail and snapshots);
      without it, a new id is made (`team.team_id`).
    - `restart_policy`: `"on_failure"` (the default) runs a failed agent again, up to
      `max_restarts` times in a row (default 3; a success starts the count again), before
      reporting it `"failed"`; `"never"` reports it at once. A failed agent stays failed in
      every process. A run that lost a save race to another process running the same agent
      (`RevisionConflict`) is not a failure.
    - `local_roles`: the roles whose agents this process runs (default: all). Processes
      sharing a PostgreSQL database split a team this way; each message is still
      delivered once. A role the team does not have raises `StateError`.
    - `mail_tool` (default True): every agent gets the tool `send_message(content,
      to=None, group=None, topic=None)`, which sends from the calling agent with a
      `message_id` made of its call's id, so a tool run again after a crash sends once.
    - `spawn_tool` (default False): True (every role) or the roles whose agents get the
      tool `spawn_agent(role, task)`, which spawns a member of the team named after its
      call's id (a call run again spawns no twin).
    """

    def __init__(
        self,
        roles: Mapping[str, Role],
        *,
        model: Model | None = None,
        tools: Mapping[str, Tool] | Iterable[Tool] | None = None,
        plugins: Iterable[Plugin] = (),
        system_prompt: str | None = None,
        stores: Stores | None = None,
        profile_store: ProfileStore | None = None,
        thread_store: ThreadStore | None = None,
        team_id: str | None = None,
        restart_policy: RestartPolicy = "on_failure",
        max_restarts: int = 3,
        max_steps: int = 25,
        local_roles: Iterable[str] | None = None,
        mail_tool: bool = True,
        spawn_tool: bool | Iterable[str] = False,
    ) -> None:
        if not isinstance(roles, Mapping) or not roles:
            raise TypeError(f"roles must be a non-empty mapping name -> Role, got {roles!r}")
        profile_store, thread_store = chosen_stores(
            stores, profile_store, thread_store, owner="AgentTeam"
        )
        if profile_store is None:
            raise StateError(
                "an AgentTeam keeps its mailbox and roster in a ProfileStore, and none was "
                "given: pass stores=statekernel.stores.embedded() (one SQLite file in a folder), "
                "stores=statekernel.stores.open_stores(dsn) for many hosts, or "
                "profile_store=MemoryProfileStore() for a test"
            )
        if restart_policy not in ("never", "on_failure"):
            raise ValueError(
                f"restart_policy must be 'never' or 'on_failure', got {restart_policy!r}"
            )
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
            raise ValueError(f"max_restarts must be an int >= 0, got {max_restarts!r}")
        if team_id is not None and (not isinstance(team_id, str) or not team_id):
            raise TypeError(f"team_id must be a non-empty string, got {team_id!r}")
        self.team_id = team_id or f"team-{uuid.uuid4().hex[:12]}"
        self.restart_policy: RestartPolicy = restart_policy
        self.max_restarts = max_restarts
        self._profile = ProfileAccess(profile_store)
        self._mail = _TeamMail(Mailbox(self._profile))
        defaults = _Defaults(model, _named_tools(tools), tuple(plugins), system_prompt, max_steps)
        if mail_tool:
            defaults.tools.setdefault("send_message", self._mail_tool())
        spawners = (
            frozenset(roles if spawn_tool else ())
            if isinstance(spawn_tool, bool)
            else frozenset(spawn_tool)
        )
        self.roles: dict[str, Role] = {}
        self._agents: dict[str, Agent] = {}
        for name, role in roles.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"role names must be non-empty strings, got {name!r}")
            if not isinstance(role, Role):
                raise TypeError(f"role {name!r} must be a statekernel.Role, got {role!r}")
            self.roles[name] = role
            extra = {"spawn_agent": self._spawn_tool()} if name in spawners else {}
            self._agents[name] = defaults.agent(
                name, role, extra, profile_store=profile_store, thread_store=thread_store
            )
            self._agents[name].mail = self._mail
        local = tuple(self.roles) if local_roles is None else tuple(local_roles)
        unknown = [r for r in local if r not in self.roles]
        if unknown:
            raise StateError(
                f"local_roles names roles the team does not have: {unknown}; its roles are "
                f"{sorted(self.roles)}"
            )
        self._local = frozenset(local)
        self._records: dict[str, AgentRecord] = {}
        self._status: dict[str, AgentStatus] = {}
        self._agent_of_thread: dict[str, str] = {}
        # Each thread's mail cursor as its store holds it, by thread id (a restore moves an
        # agent to a new thread, whose cursor is another).
        self._saved_cursor: dict[str, dict[str, int]] = {}
        self._restart_due: set[str] = set()
        self._changes: list[_Spawn | tuple[str, str, bool]] = []
        self._loaded = False
        self._stepping = asyncio.Lock()
        self._syncing = asyncio.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> AgentTeam:
        await self._sync()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self._sync()

    # -- the roster --------------------------------------------------------------------------

    def spawn(
        self,
        role: str,
        task: str,
        *,
        parent_id: str | None = None,
        seed: StateCommand | None = None,
        agent_id: str | None = None,
    ) -> str:
        """A new agent of `role` on its own thread (`<team id>/<agent id>`); returns its id.

        `task` is its first message, `Message("user", task)`. Its runs' parent thread is
        the team's (`team_id`), or `parent_id`'s thread, which decides the team context it
        shares (`StateScope.parent_thread(...)`). `seed`, a `StateCommand` of thread keys,
        is committed to its thread before the task. Recorded at the team's next awaited
        call.

        `agent_id` names the agent (default: `<role>-<8 hex digits>`); spawning an id the
        team has already, with the same role, returns it and changes nothing, so a spawn
        can be repeated safely. An unknown role, or an `agent_id` the team has with another
        role, raises `StateError`; an unknown `parent_id`, `UnknownAgent`."""
        if role not in self.roles:
            raise StateError(
                f"team {self.team_id!r} has no role {role!r}; its roles are {sorted(self.roles)}"
            )
        if not isinstance(task, str):
            raise TypeError(f"task must be a string (the agent's first message), got {task!r}")
        if seed is not None and not isinstance(seed, StateCommand):
            raise TypeError(f"seed must be a StateCommand of thread keys, got {seed!r}")
        if parent_id is not None:
            self._record(parent_id)
        if agent_id is not None:
            if not isinstance(agent_id, str) or not agent_id or "/" in agent_id:
                raise TypeError(
                    f"agent_id must be a non-empty string without '/', got {agent_id!r}"
                )
            known = self._records.get(agent_id)
            if known is not None:
                if known.role != role:
                    raise StateError(
                        f"team {self.team_id!r} has agent {agent_id!r} already, of role "
                        f"{known.role!r}, not {role!r}; choose another agent_id"
                    )
                return agent_id
        agent_id = agent_id or f"{role}-{uuid.uuid4().hex[:8]}"
        record = AgentRecord(
            agent_id,
            role,
            f"{self.team_id}/{agent_id}",
            parent_id,
            topics=tuple(dict.fromkeys(self.roles[role].topics)),
        )
        self._changes.append(_Spawn(record, task, seed))
        self._know(record)
        return agent_id

    def subscribe(self, agent_id: str, topic: str) -> None:
        """Deliver messages sent to `topic` from now on to `agent_id` as well.

        A role's `topics` are subscribed at spawn. Recorded at the team's next awaited
        call."""
        self._subscription(agent_id, topic, True)

    def unsubscribe(self, agent_id: str, topic: str) -> None:
        """Stop delivering `topic`'s messages to `agent_id` (a no-op if not subscribed).

        Recorded at the team's next awaited call."""
        self._subscription(agent_id, topic, False)

    def _subscription(self, agent_id: str, topic: str, on: bool) -> None:
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"a topic is a non-empty string, got {topic!r}")
        record = self._record(agent_id)
        self._know(_with_topic(record, topic, on))
        self._changes.append((agent_id, topic, on))

    def list_agents(self) -> list[AgentInfo]:
        """Every agent of the team known to this process, in spawn order."""
        return [
            AgentInfo(r.id, r.role, r.thread_id, r.parent_id, self._status_of(r))
            for r in self._records.values()
        ]

    def agent(self, role: str) -> Agent:
        """The `Agent` that runs every agent of `role` (its kernel reads their threads)."""
        if role not in self._agents:
            raise StateError(
                f"team {self.team_id!r} has no role {role!r}; its roles are {sorted(self.roles)}"
            )
        return self._agents[role]

    @staticmethod
    def sender_of(message: Message) -> str | None:
        """Who sent a message the mailbox delivered: the sender id given to `send`.

        None for any other message. The message's content also starts with
        `[message from <sender>]`, so that a model can tell."""
        return sender_of(message)

    # -- the mailbox -----------------------------------------------------------------------

    async def send(
        self,
        sender_id: str,
        content: str,
        *,
        to: str | Iterable[str] | None = None,
        group: str | None = None,
        topic: str | None = None,
        message_id: str | None = None,
    ) -> int:
        """Send `content` from `sender_id` (an agent id, or any name such as "user");
        returns how many recipients it was stored for.

        Give exactly one address (else `StateError`): `to` (an agent id, or several),
        `group` (a role: its agents, the sender excepted) or `topic` (its subscribers now,
        the sender excepted). An unknown agent raises `UnknownAgent`.

        Stored in each recipient's inbox before this returns, and delivered into its history
        before its next step, exactly once and in order per sender, across crashes, as a
        user message whose content starts with `[message from <sender>]`
        (`[message from <sender> (topic t)]`). A `message_id` makes the send idempotent:
        the same id from the same sender reaches a recipient once, however often it is sent
        (retry a send whose answer was lost with the same id)."""
        if not isinstance(sender_id, str) or not sender_id:
            raise TypeError(f"sender_id must be a non-empty string, got {sender_id!r}")
        if sender_id == TASK_SENDER:
            raise StateError(
                f"sender_id {TASK_SENDER!r} is reserved for spawned agents' tasks; send as "
                f"an agent id or any other name (such as 'user')"
            )
        if not isinstance(content, str):
            raise TypeError(f"content must be a string, got {content!r}")
        if sum(x is not None for x in (to, group, topic)) != 1:
            raise StateError(
                "send needs exactly one address: to=<agent id or ids>, group=<role> or "
                "topic=<topic>"
            )
        await self._sync()
        via: str | None = None
        if to is not None:
            names = (to,) if isinstance(to, str) else tuple(to)
            if not names:
                raise StateError("send(to=...) names no agent; give one agent id or several")
            if any(n not in self._records for n in names):
                await self._load()
            recipients = [self._record(n) for n in dict.fromkeys(names)]
        else:
            await self._load()
            if group is not None:
                if group not in self.roles:
                    raise StateError(
                        f"group {group!r} is not a role of team {self.team_id!r}; groups are "
                        f"roles: {sorted(self.roles)}"
                    )
                recipients = [r for r in self._records.values() if r.role == group]
                via = f"group {group}"
            else:
                recipients = [r for r in self._records.values() if topic in r.topics]
                via = f"topic {topic}"
            recipients = [r for r in recipients if r.id != sender_id]
        letter = LetterOf(sender_id, content, via)
        if len(recipients) == 1:
            await self._post(recipients[0], letter, message_id)
        else:
            await asyncio.gather(*(self._post(r, letter, message_id) for r in recipients))
        for record in recipients:
            if self._status.get(record.id) == "done":
                self._status[record.id] = "idle"
        return len(recipients)

    async def _post(self, record: AgentRecord, letter: LetterOf, message_id: str | None) -> None:
        """Post to the agent's inbox; one a restore moved is followed to the agent's thread
        as the stored roster has it now."""
        for _ in range(_MOVES):
            try:
                await self._mail.mailbox.post(record.thread_id, letter, message_id)
                return
            except InboxMoved:
                await self._load()
                record = self._record(record.id)  # UnknownAgent: the restore dropped it
        raise StateError(
            f"the inbox of agent {record.id!r} kept moving ({_MOVES} restores of team "
            f"{self.team_id!r} while sending); send again once they are done"
        )

    # -- running ---------------------------------------------------------------------------

    async def run_until_idle(self, *, max_rounds: int = 100) -> TeamReport:
        """Run rounds until no agent of this process has work, at most `max_rounds`.

        An agent has work when it has its task, new mail, or a restart due. In each round
        every such agent runs once, concurrently with the others. A suspended agent waits
        (status `"waiting"`) for `team.resume` without holding the rest up; a failed one
        follows the restart policy. A `max_rounds` below 1 raises `ValueError`."""
        if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
            raise ValueError(f"max_rounds must be a positive int, got {max_rounds!r}")
        self._refuse_inside_a_round("run_until_idle")
        await self._sync()
        tallies: dict[str, _Tally] = {}
        async with self._stepping:
            token = _ROUND.set(self)  # the agents' runs (tools, hooks) inherit it
            try:
                return await self._rounds(tallies, max_rounds)
            finally:
                _ROUND.reset(token)

    async def _rounds(self, tallies: dict[str, _Tally], max_rounds: int) -> TeamReport:
        rounds = 0
        await self._load()  # agents other processes spawned join from the next call on
        while True:
            ready = await self._ready()
            if not ready or rounds == max_rounds:
                return self._report(tallies, idle=not ready, rounds=rounds)
            rounds += 1
            steps = (self._step(a, tallies.setdefault(a, _Tally())) for a in ready)
            await asyncio.gather(*steps)

    async def resume(self, agent_id: str, call_id: str, decision: Decision) -> RunResult:
        """Continue a waiting agent's suspended run with `decision` on its call `call_id`.

        See `Agent.resume`."""
        await self._sync()
        record = self._record(agent_id)
        result = await self._agents[record.role].resume(record.thread_id, call_id, decision)
        await self._after_run(record, result, _Tally())
        return result

    async def cancel(self, agent_id: str) -> RunResult:
        """Cancel an agent's run: a waiting agent's suspended run ends with its pending calls
        cancelled; a running one stops at its next safe point (see `Agent.cancel`)."""
        await self._sync()
        record = self._record(agent_id)
        result = await self._agents[record.role].cancel(record.thread_id)
        await self._after_run(record, result, _Tally())
        return result

    async def _ready(self) -> list[str]:
        """The agents of this process with work: a restart due, or letters beyond the cursor
        their thread saved (read together; delivered letters are pruned on the way)."""
        candidates = [
            r
            for r in self._records.values()
            if r.role in self._local and self._status_of(r) not in ("waiting", "failed")
        ]
        self._mail.prefetched.clear()
        found = await asyncio.gather(*(self._has_work(r) for r in candidates))
        return [r.id for r, has in zip(candidates, found, strict=True) if has]

    async def _has_work(self, record: AgentRecord) -> bool:
        if record.id in self._restart_due:
            return True
        mailbox = self._mail.mailbox
        inbox = await mailbox.read(record.thread_id)
        if not inbox.letters:
            return False
        cursor = self._saved_cursor.get(record.thread_id)
        if cursor is None:
            cursor = await self._read_cursor(record)
        fresh = inbox.undelivered(cursor)
        if len(inbox.letters) - len(fresh.letters) >= PRUNE_AT:
            await mailbox.prune(record.thread_id, cursor)
        if not fresh.letters:
            return False
        self._mail.prefetched[record.thread_id] = inbox
        return True

    async def _read_cursor(self, record: AgentRecord) -> dict[str, int]:
        saved = await self._agents[record.role].kernel.read_stored(record.thread_id, MailCursor)
        cursor = dict(saved or ())
        self._saved_cursor[record.thread_id] = cursor
        return cursor

    async def _step(self, agent_id: str, tally: _Tally) -> None:
        record = self._records[agent_id]
        self._status[agent_id] = "running"
        self._restart_due.discard(agent_id)
        parent = self._records.get(record.parent_id) if record.parent_id else None
        agent = self._agents[record.role]
        try:
            result = await agent.run(
                record.thread_id,
                parent_thread_id=self.team_id if parent is None else parent.thread_id,
            )
        except asyncio.CancelledError:
            self._status[agent_id] = "idle"  # run_until_idle was cancelled: it may run again
            self._saved_cursor.pop(record.thread_id, None)
            raise
        except Exception as error:  # refused before it began: the thread was not loaded
            tally.error = error
            self._saved_cursor.pop(record.thread_id, None)
            await self._failed(record, error, tally)
            return
        await self._after_run(record, result, tally)

    async def _after_run(self, record: AgentRecord, result: RunResult, tally: _Tally) -> None:
        tally.runs += 1
        tally.steps += result.steps
        tally.outcomes.append(result.outcome)
        tally.results.append(result)
        agent_id = record.id
        if result.outcome in ("success", "suspended"):  # both end with a save that landed
            cursor: tuple[tuple[str, int], ...] = result.snapshot.get(MailCursor)
            self._saved_cursor[record.thread_id] = dict(cursor)
        else:  # what a failed or cancelled run saved last is unknown: read it when needed
            self._saved_cursor.pop(record.thread_id, None)
        if isinstance(result.error, RevisionConflict):
            # Another process ran this agent meanwhile and saved first: nothing failed, and
            # the next round looks again at what the store holds.
            tally.error = result.error
            self._status[agent_id] = "idle"
            return
        if result.outcome == "failure":
            tally.error = result.error
            await self._failed(record, result.error, tally)
            return
        if result.outcome == "suspended":
            self._status[agent_id] = "waiting"
            await self._change(agent_id, held="waiting")
            return
        self._status[agent_id] = "done"
        current = self._records[agent_id]
        if current.held == "waiting" or current.restarts:  # resumed or cancelled; recovered
            await self._change(agent_id, held=None, restarts=0)

    async def _failed(
        self, record: AgentRecord, error: BaseException | None, tally: _Tally
    ) -> None:
        current = self._records[record.id]
        if self.restart_policy == "on_failure" and current.restarts < self.max_restarts:
            self._status[record.id] = "idle"
            self._restart_due.add(record.id)
            # (a resumed run that failed waits on nothing any more)
            await self._change(record.id, restarts=current.restarts + 1, held=None)
            return
        self._status[record.id] = "failed"
        text = "failed" if error is None else cause_text(error)
        await self._change(record.id, held="failed", error=text)

    def _report(self, tallies: Mapping[str, _Tally], *, idle: bool, rounds: int) -> TeamReport:
        agents = {}
        for agent_id, tally in tallies.items():
            record = self._records[agent_id]
            agents[agent_id] = AgentReport(
                id=agent_id,
                role=record.role,
                status=self._status_of(record),
                runs=tally.runs,
                steps=tally.steps,
                delivered=self._mail.delivered.pop(record.thread_id, 0),
                restarts=record.restarts,
                outcomes=tuple(tally.outcomes),
                error=tally.error,
                results=tuple(tally.results),
            )
        return TeamReport(idle=idle, rounds=rounds, agents=agents)

    # -- snapshots -------------------------------------------------------------------------

    def _refuse_inside_a_round(self, call: str) -> None:
        """`call` waits for the team's rounds to end: from inside one (a tool or hook of an
        agent's run) it would wait forever."""
        if _ROUND.get() is self:
            raise StateError(
                f"team.{call}() was called from inside one of the team's own runs (a tool or "
                f"hook of an agent), and it waits for the round to end, which waits for that "
                f"run: it would wait forever. Call it between rounds, outside the agents."
            )

    async def save_snapshot(self, name: str | None = None) -> TeamSnapshot:
        """Every agent's thread revision and inbox (the undelivered mail) as one point in
        time, stored under `name` (default: a new one) and returned.

        Take it while the team is between rounds (this process waits for its own
        `run_until_idle`), with no agent waiting on a decision, and with other processes of
        the team quiet. An agent waiting on a decision raises `StateError` (resume it
        first)."""
        self._refuse_inside_a_round("save_snapshot")
        await self._sync()
        async with self._stepping:
            await self._load()
            waiting = [r.id for r in self._records.values() if self._status_of(r) == "waiting"]
            if waiting:
                raise StateError(
                    f"agents {waiting} wait on a decision, and a team snapshot cannot hold a "
                    f"suspended run; resume (or cancel) them first. Nothing was saved."
                )
            name = name or f"snapshot-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
            records = dict(self._records)
            heads = await asyncio.gather(*(self._head(r) for r in records.values()))
            inboxes = await asyncio.gather(
                *(self._mail.mailbox.read(r.thread_id) for r in records.values())
            )
            snapshot = TeamSnapshot(
                name,
                self.team_id,
                time.time(),
                records,
                dict(zip(records, heads, strict=True)),
                dict(zip(records, inboxes, strict=True)),
            )
            await self._profile.write(Snapshots, f"{self.team_id}/{name}", snapshot)
            await self._profile.update(
                Roster,
                self.team_id,
                lambda r: RosterData(r.agents, (*r.snapshots, name)),
            )
            return snapshot

    async def restore_snapshot(self, snapshot: TeamSnapshot | str | None = None) -> TeamSnapshot:
        """Return every agent and the mailbox to a snapshot; returns the snapshot.

        `snapshot` is a `TeamSnapshot`, its name, or None: the newest. Each agent's thread
        is forked at its revision into a new thread (`AgentInfo.thread_id` changes; the old
        one stays, with its history), its inbox is set as it was, and agents spawned since
        leave the roster. Team context and other profile state are not rolled back."""
        self._refuse_inside_a_round("restore_snapshot")
        await self._sync()
        async with self._stepping:
            snapshot = await self._snapshot(snapshot)
            if snapshot.team_id != self.team_id:
                raise StateError(
                    f"snapshot {snapshot.name!r} is of team {snapshot.team_id!r}, not of "
                    f"{self.team_id!r}; restore it with AgentTeam(..., "
                    f"team_id={snapshot.team_id!r}). Nothing was changed."
                )
            await self._load()
            before = dict(self._records)
            token = uuid.uuid4().hex[:8]
            restored: dict[str, AgentRecord] = {}
            for agent_id, record in snapshot.agents.items():
                thread_id = f"{self.team_id}/{agent_id}/{token}"
                revision = snapshot.revisions.get(agent_id)
                if revision is not None:
                    await self._agents[record.role].kernel.fork(
                        record.thread_id, revision, thread_id
                    )
                await self._mail.mailbox.replace(thread_id, snapshot.inboxes[agent_id])
                restored[agent_id] = _replace(record, thread_id=thread_id)
            await self._profile.update(
                Roster, self.team_id, lambda r: RosterData(restored, r.snapshots)
            )
            # Senders elsewhere still hold the old threads: their next send to one finds it
            # moved, reads the roster again and sends to the new thread.
            for agent_id, record in before.items():
                moved = restored.get(agent_id)
                await self._mail.mailbox.move(record.thread_id, moved.thread_id if moved else "")
            self._forget()
            await self._load()
            return snapshot

    async def _snapshot(self, given: TeamSnapshot | str | None) -> TeamSnapshot:
        if isinstance(given, TeamSnapshot):
            return given
        if given is None:
            names = (await self._profile.read(Roster, self.team_id)).snapshots
            if not names:
                raise StateError(f"team {self.team_id!r} has no snapshot to restore")
            given = names[-1]
        if not isinstance(given, str):
            raise TypeError(f"restore_snapshot takes a TeamSnapshot or its name, got {given!r}")
        found = await self._profile.read(Snapshots, f"{self.team_id}/{given}")
        if found is None:
            names = (await self._profile.read(Roster, self.team_id)).snapshots
            raise StateError(
                f"team {self.team_id!r} has no snapshot named {given!r}; its snapshots are "
                f"{list(names)}"
            )
        return found

    async def _head(self, record: AgentRecord) -> int | None:
        try:
            return (await self._agents[record.role].kernel.get_state(record.thread_id)).revision
        except UnknownThread:
            return None

    # -- keeping the roster ------------------------------------------------------------------

    async def _sync(self) -> None:
        """Load the roster once, then record the spawns and subscriptions made since, in
        order (one task at a time: concurrent calls wait for the first)."""
        if self._loaded and not self._changes:
            return
        async with self._syncing:
            if not self._loaded:
                await self._load()
            while self._changes:
                change = self._changes[0]
                if isinstance(change, _Spawn):
                    try:
                        await self._record_spawn(change)
                    except StateError as error:
                        self._changes.pop(0)
                        self._unknow(change.record)
                        raise StateError(
                            f"spawn of agent {change.record.id!r} (role "
                            f"{change.record.role!r}) was not recorded, and the team forgot "
                            f"it: {cause_text(error)}"
                        ) from error
                else:
                    await self._profile.update(
                        Roster, self.team_id, functools.partial(_subscribed, change=change)
                    )
                self._changes.pop(0)

    async def _record_spawn(self, spawn: _Spawn) -> None:
        record = spawn.record
        if not (spawn.seeded or spawn.posted) and await self._taken(record):
            # A thread (or inbox) of that name is left from an agent a restore dropped, or
            # from a spawn a crash cut short: the new agent starts on a thread of its own.
            record = spawn.record = _replace(
                record, thread_id=f"{record.thread_id}/{uuid.uuid4().hex[:8]}"
            )
            self._know(record)
        if spawn.seed is not None and not spawn.seeded:
            await self._agents[record.role].kernel.update_state(record.thread_id, spawn.seed)
        spawn.seeded = True
        if not spawn.posted:
            letter = LetterOf(TASK_SENDER, spawn.task)
            await self._mail.mailbox.post(record.thread_id, letter, message_id="task")
        spawn.posted = True
        await self._profile.update(Roster, self.team_id, lambda r: r.with_record(record))

    async def _taken(self, record: AgentRecord) -> bool:
        """Whether the record's thread, or its inbox, is already held by anything."""
        kernel = self._agents[record.role].kernel
        if record.thread_id in await kernel.threads(prefix=record.thread_id):
            return True
        return await self._mail.mailbox.exists(record.thread_id)

    async def _load(self) -> None:
        """Take in the roster as stored (agents other processes spawned, subscriptions)."""
        stored = await self._profile.read(Roster, self.team_id)
        changing = {c.record.id if isinstance(c, _Spawn) else c[0] for c in self._changes}
        for record in stored.agents.values():
            if record.id not in changing:  # else this process's copy is ahead of the store's
                self._know(record)
        for gone in [r for i, r in self._records.items() if i not in stored.agents]:
            if gone.id not in changing:  # a restore elsewhere dropped it
                self._unknow(gone)
        self._loaded = True

    async def _change(self, agent_id: str, **changes: Any) -> None:
        """Change one agent's stored record (and this process's copy) atomically."""

        def change(roster: RosterData) -> RosterData:
            record = roster.agents.get(agent_id)
            return roster if record is None else roster.with_record(_replace(record, **changes))

        stored = await self._profile.update(Roster, self.team_id, change)
        if agent_id in stored.agents:
            self._know(stored.agents[agent_id])

    def _know(self, record: AgentRecord) -> None:
        old = self._records.get(record.id)
        if old is not None and old.thread_id != record.thread_id:
            self._mail.threads.discard(old.thread_id)
            self._agent_of_thread.pop(old.thread_id, None)
        self._records[record.id] = record
        self._agent_of_thread[record.thread_id] = record.id
        self._mail.threads.add(record.thread_id)

    def _unknow(self, record: AgentRecord) -> None:
        """Forget an agent this process spawned and could not record."""
        self._records.pop(record.id, None)
        self._status.pop(record.id, None)
        self._agent_of_thread.pop(record.thread_id, None)
        self._mail.threads.discard(record.thread_id)

    def _forget(self) -> None:
        self._records.clear()
        self._status.clear()
        self._agent_of_thread.clear()
        self._mail.threads.clear()
        self._saved_cursor.clear()
        self._restart_due.clear()

    def _record(self, agent_id: str) -> AgentRecord:
        record = self._records.get(agent_id)
        if record is None:
            raise UnknownAgent(agent_id, self.team_id, self._records)
        return record

    def _status_of(self, record: AgentRecord) -> AgentStatus:
        if record.held is not None:
            return record.held
        return self._status.get(record.id, "idle")

    # -- the agents' own tool ------------------------------------------------------------------

    def _mail_tool(self) -> Tool:
        team = self

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
            sender = team._agent_of_thread.get(ctx.run.thread_id, ctx.run.thread_id)
            call = ctx.tool_call
            message_id = None if call is None else f"{ctx.run.thread_id}:{call.id}"
            count = await team.send(
                sender, content, to=to, group=group, topic=topic, message_id=message_id
            )
            return f"sent to {count} agent(s)"

        return tool(idempotent=True)(send_message)

    def _spawn_tool(self) -> Tool:
        team = self

        async def spawn_agent(role: str, task: str, ctx: PhaseContext) -> str:
            """Start a new agent of your team on a task; it shares the team's context.

            Args:
                role: The new agent's role.
                task: What it should do (its first message).
            """
            call = ctx.tool_call
            # Named after the call, so that the call run again after a crash spawns no twin.
            name = None if call is None else f"{role}-{_digest(ctx.run.thread_id, call.id)}"
            agent_id = team.spawn(role, task, agent_id=name)
            await team._sync()
            return f"started {agent_id} ({role})"

        return tool(idempotent=True)(spawn_agent)


@attrs.frozen
class _Defaults:
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
    ) -> Agent:
        model = role.model if role.model is not None else self.model
        if model is None:
            raise StateError(
                f"role {name!r} has no model, and the team gives none: pass "
                f"AgentTeam(..., model=...) or Role(..., model=...)"
            )
        plugins = {p.id: p for p in self.plugins}
        plugins.update({p.id: p for p in role.plugins})
        tools = {**self.tools, **extra, **_named_tools(role.tools)}
        return Agent(
            plugins.values(),
            model,
            tools,
            system_prompt=self.system_prompt if role.system_prompt is None else role.system_prompt,
            profile_store=profile_store,
            thread_store=thread_store,
            max_steps=role.max_steps if role.max_steps is not None else self.max_steps,
            name=name,
        )


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:8]


def _replace(record: AgentRecord, **changes: Any) -> AgentRecord:
    return msgspec.structs.replace(record, **changes)


def _with_topic(record: AgentRecord, topic: str, on: bool) -> AgentRecord:
    topics = tuple(t for t in record.topics if t != topic)
    return _replace(record, topics=(*topics, topic) if on else topics)


def _subscribed(roster: RosterData, change: tuple[str, str, bool]) -> RosterData:
    agent_id, topic, on = change
    record = roster.agents.get(agent_id)
    if record is None:
        return roster
    return roster.with_record(_with_topic(record, topic, on))
