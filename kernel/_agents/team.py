"""AgentTeam: many agents of several roles, one mailbox, one `async with`.

Each role is one `Agent` (its plugins, model, tools), and each spawned agent of the role is
a thread of it whose parent thread is the team's (or its parent agent's), so team context
kept under `StateScope.parent_thread(...)` is shared by construction. This module is the
face; each concept behind it has its module:

- **roles** (`roles.py`): what each role's `Agent` is made of; the agents' own tools
  (`team_tools.py`);
- the **roster** (`roster.py`): agents, threads and subscriptions, in the ProfileStore,
  changed only by compare-and-set; `spawning.py`: one agent id, one thread, in any process;
- **addresses** (`addresses.py`): `to`, `group` or `topic`, checked at the call and resolved
  when sending, for `send` and the `send_message` tool alike;
- the **mailbox** (`mailbox.py`): inboxes, delivered into each recipient's history exactly
  once, in order per sender; the **outbox** (`outbox.py`): what a running agent sends or
  spawns, committed with the step that made it and posted once a save holds it;
- **rounds** (`rounds.py`): who has work, running it, statuses and the restart policy;
- **snapshots** (`team_snapshots.py`).

`spawn`, `subscribe` and `unsubscribe` are plain calls that check their arguments and
return at once; the team records them (in order) at its next awaited call, before that call
does anything else. A change the store refuses then is dropped and raised once.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Literal

import attrs

from .._durable.retention import Retention
from .._durable.store import ThreadStore
from .._durable.threads import SNAPSHOT_EVERY
from .._engine.plugin import Plugin
from .._errors import StateError, UnknownAgent, cause_text
from .._host.kernel import Kernel
from .._host.run import PhaseListener, Tool
from .._host.stores import Stores, chosen_stores
from .._observe.spans import current_traceparent
from .._profile.access import ProfileAccess
from .._profile.store import ProfileStore
from .._values import options
from .._values.commands import StateCommand
from .._values.messages import Message
from .._values.model import Model
from .._values.reserved_keys import OutLetter, OutSpawn
from . import team_tools
from .addresses import Address, checked_agent_id, checked_text
from .agent import Agent, named_tools
from .leases import Leases
from .mailbox import TASK_SENDER, LetterOf, Mailbox, sender_of
from .outbox import SENDING, Outboxes, post_following
from .roles import AgentOptions, Role, RoleDefaults
from .roster import AgentRecord, AgentStatus, TeamRoster, TeamSnapshot, role_clash
from .rounds import AgentReport, RestartPolicy, Rounds, TeamReport
from .run_result import RunResult
from .serving import Worker, inbox_changes
from .spawning import Spawner, check_seed
from .suspension import Decision
from .team_snapshots import TeamSnapshots
from .team_tools import digest
from .workload import Workload

__all__ = ["AgentInfo", "AgentReport", "AgentTeam", "Role", "TeamReport", "TeamSnapshot"]

IDLE_LOOK_EVERY = 0.1
"""How long `wait_idle` waits between looks at the team when no letter is posted meanwhile
(seconds): runs in other processes change threads, which no feed reports."""


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
class _Spawn:
    """A spawn made outside any run, to be recorded."""

    record: AgentRecord
    task: str
    seed: StateCommand | None

    @property
    def agent_id(self) -> str:
        return self.record.id

    async def make(self, team: AgentTeam) -> None:
        await team._spawner.spawn(self.record, self.task, self.seed)

    def refused(self, error: Exception) -> StateError:
        return StateError(
            f"spawn of agent {self.record.id!r} (role {self.record.role!r}) was not "
            f"recorded, and the team forgot it: {cause_text(error)}"
        )


@attrs.frozen
class _Subscription:
    """A subscription (or its end) to be recorded."""

    agent_id: str
    topic: str
    on: bool

    async def make(self, team: AgentTeam) -> None:
        await team._roster.change(lambda r: r.subscribing(self.agent_id, self.topic, self.on))

    def refused(self, error: Exception) -> StateError:
        what = "subscription" if self.on else "unsubscription"
        return StateError(
            f"{what} of agent {self.agent_id!r} to topic {self.topic!r} was not recorded, "
            f"and the team dropped it: {cause_text(error)}"
        )


_Change = _Spawn | _Subscription


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
      without it, a new id is made (`team.team_id`). A reopened team continues what a
      crash cut: a run killed between steps runs on, an agent a crash left suspended on a
      call is `"waiting"` for `team.resume`, and what the agents sent is delivered.
    - `restart_policy`: `"on_failure"` (the default) runs a failed agent again, up to
      `max_restarts` times in a row (default 3; a success starts the count again), before
      reporting it `"failed"`; `"never"` reports it at once. A failed agent stays failed in
      every process. A run that lost a save race to another process running the same agent
      is not a failure: its outcome is `"superseded"`, and it spends no restart.
    - `local_roles`: the roles whose agents this process runs (default: all). Processes
      sharing a PostgreSQL database split a team this way; each message is still
      delivered once. A role the team does not have raises `StateError`.
    - `lease_seconds` (default 10): how long after a worker (`team.serve`) stops beating
      the other workers take its agents over; a finite number > 0, else `ValueError`. See
      [teams: workers](team.md#workers-a-team-that-runs-itself).
    - `mail_tool` (default True): every agent gets the tool `send_message(content,
      to=None, group=None, topic=None)`, which sends from the calling agent through its
      outbox: the letter is saved with the step that sent it, and delivered once.
    - `spawn_tool` (default False): True (every role) or the roles whose agents get the
      tool `spawn_agent(role, task)`, which spawns a member of the team through the
      calling agent's outbox (a step done again after a crash spawns no twin).
    - `max_phase_rounds`, `restore_errors`, `unknown_keys`, `snapshot_every`, `retention`
      and `chain_key`: every role's `Agent` gets them, and so its `Kernel` (see
      [Kernel](reference.md#statekernel.Kernel)), with the same defaults and the same
      checks: e.g. `snapshot_every=50` snapshots each agent's thread every 50 records, and
      `chain_key` chains the agents' threads with it.
    - `on_phase(run, report)`: every role's `Agent` calls it after every phase of its runs,
      as `Agent(on_phase=...)` does (the run's `agent` name is the role).

    Every option is checked when the team is made, by the rules of the `Kernel`'s: a bool
    is not an int, a number of seconds is finite; a value of the wrong kind raises
    `TypeError` (also a `ValueError`), one out of range `ValueError`, naming the option.
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
        lease_seconds: float = 10,
        snapshot_every: int = SNAPSHOT_EVERY,
        retention: Retention | None = None,
        max_phase_rounds: int = 16,
        restore_errors: Literal["raise", "skip"] = "raise",
        unknown_keys: Literal["keep", "refuse"] = "keep",
        on_phase: PhaseListener | None = None,
        chain_key: bytes | None = None,
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
        options.choice("restart_policy", restart_policy, ("never", "on_failure"))
        options.count("max_restarts", max_restarts)
        options.seconds(
            "lease_seconds",
            lease_seconds,
            above_zero=True,
            fix="It is how long after a worker stops beating its agents are taken over.",
        )
        if team_id is not None and (not isinstance(team_id, str) or not team_id):
            raise TypeError(f"team_id must be a non-empty string, got {team_id!r}")
        self.team_id = checked_text("team_id", team_id or f"team-{uuid.uuid4().hex[:12]}")
        self.restart_policy: RestartPolicy = restart_policy
        self.max_restarts = max_restarts
        self.lease_seconds = float(lease_seconds)
        profile = ProfileAccess(profile_store)
        self._profile = profile
        self._roster = TeamRoster(profile, self.team_id)
        mailbox = Mailbox(profile)
        self.roles: dict[str, Role] = {}
        self._spawner = Spawner(self._roster, mailbox, self.roles, self._kernel_of)
        self._outboxes = Outboxes(self._roster, mailbox, self._spawner)
        options.positive_int("max_steps", max_steps)
        kernel_options = AgentOptions(
            max_phase_rounds,
            restore_errors,
            unknown_keys,
            snapshot_every,
            retention,
            on_phase,
            chain_key,
        )
        defaults = RoleDefaults(
            model, named_tools(tools), tuple(plugins), system_prompt, max_steps, kernel_options
        )
        if mail_tool:
            defaults.tools.setdefault(
                "send_message", team_tools.mail_tool(self._roster, self._outboxes, self.send)
            )
        spawners = (
            frozenset(roles if spawn_tool else ())
            if isinstance(spawn_tool, bool)
            else frozenset(spawn_tool)
        )
        self._agents: dict[str, Agent] = {}
        for name, role in roles.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"role names must be non-empty strings, got {name!r}")
            checked_text("role name", name)  # it names the role's agents and their threads
            if not isinstance(role, Role):
                raise TypeError(f"role {name!r} must be a statekernel.Role, got {role!r}")
            self.roles[name] = role
            extra = {}
            if name in spawners:
                extra["spawn_agent"] = team_tools.spawn_tool(self._outboxes, self.spawn)
            self._agents[name] = defaults.agent(
                name,
                role,
                extra,
                profile_store=profile_store,
                thread_store=thread_store,
            )
        local = tuple(self.roles) if local_roles is None else tuple(local_roles)
        unknown = [r for r in local if r not in self.roles]
        if unknown:
            raise StateError(
                f"local_roles names roles the team does not have: {unknown}; its roles are "
                f"{sorted(self.roles)}"
            )
        for agent in self._agents.values():
            agent.team = self._outboxes
        self._rounds = Rounds(
            self._roster,
            self._outboxes,
            self._agents,
            local=frozenset(local),
            restart_policy=restart_policy,
            max_restarts=max_restarts,
        )
        self._local = tuple(local)
        observer = Leases(profile, self.team_id, (), lease_seconds=self.lease_seconds)
        self._workload = Workload(self._roster, mailbox, self._agents, observer, profile)
        self._snapshots = TeamSnapshots(profile, self._roster, self._outboxes, self._kernel_of)
        self.worker_id: str | None = None
        """This process's worker id while it serves the team (its heartbeat and leases name
        it, and so do the logs of the other workers), else None."""
        self._serving = asyncio.Event()  # set once serve's first heartbeat landed
        self._changes: list[_Change] = []
        self._loaded = False
        self._syncing = asyncio.Lock()

    def _kernel_of(self, role: str) -> Kernel:
        return self._agents[role].kernel

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
        call; from inside a run of one of the team's agents (a tool or hook), recorded in
        that agent's outbox with the step, and carried out once the step is saved.

        `agent_id` names the agent (default: `<role>-<8 hex digits>`); spawning an id the
        team has already, with the same role, returns it and changes nothing, in any
        process: of two processes spawning one id at once, one spawns it and the other
        adopts it (one thread). Everything is checked here, before anything is queued: an
        unknown role, a seed the role's plugins cannot commit (or any seed inside a run),
        or an `agent_id` the team has with another role raises `StateError`; an unknown
        `parent_id`, `UnknownAgent`; a name no store can keep, `TypeError` or
        `ValueError`."""
        if role not in self.roles:
            raise StateError(
                f"team {self.team_id!r} has no role {role!r}; its roles are {sorted(self.roles)}"
            )
        if not isinstance(task, str):
            raise TypeError(f"task must be a string (the agent's first message), got {task!r}")
        checked_text("task", task, empty=True)
        if seed is not None:
            if not isinstance(seed, StateCommand):
                raise TypeError(f"seed must be a StateCommand of thread keys, got {seed!r}")
            check_seed(self._kernel_of(role).components, seed, role)
        if parent_id is not None:
            self._known(parent_id)
        if agent_id is not None:
            agent_id = checked_agent_id(agent_id)
            known = self._known_or_none(agent_id)
            if known is not None:
                if known.role != role:
                    raise role_clash(self.team_id, known, role)
                return agent_id
        sending = self._sending()
        if sending is not None:
            return self._spawn_in_run(sending, role, task, parent_id, seed, agent_id)
        agent_id = agent_id or f"{role}-{uuid.uuid4().hex[:8]}"
        record = self._spawner.record(agent_id, role, parent_id)
        self._changes.append(_Spawn(record, task, seed))
        return agent_id

    def _spawn_in_run(
        self,
        thread_id: str,
        role: str,
        task: str,
        parent_id: str | None,
        seed: StateCommand | None,
        agent_id: str | None,
    ) -> str:
        """A spawn from the run of `thread_id`, staged in its outbox; without an id, the
        agent is named after the thread and the entry's number there (the same when the
        step is done again after a crash)."""
        if seed is not None:
            raise StateError(
                "a spawn from inside an agent's run cannot carry a seed: it travels in the "
                "agent's outbox, which holds plain data. Put what the new agent needs in its "
                "task, or spawn it with a seed from outside the team's runs."
            )
        number = self._outboxes.next_number(thread_id)
        agent_id = agent_id or f"{role}-{digest(thread_id, str(number))}"
        self._outboxes.stage(thread_id, OutSpawn(0, role, agent_id, task, parent_id))
        return agent_id

    def subscribe(self, agent_id: str, topic: str) -> None:
        """Deliver messages sent to `topic` from now on to `agent_id` as well.

        A role's `topics` are subscribed at spawn. Recorded at the team's next awaited
        call. A topic no store can keep raises `TypeError` or `ValueError`, an unknown
        agent `UnknownAgent`, here and before anything is queued."""
        self._subscription(agent_id, topic, True)

    def unsubscribe(self, agent_id: str, topic: str) -> None:
        """Stop delivering `topic`'s messages to `agent_id` (a no-op if not subscribed).

        Recorded at the team's next awaited call."""
        self._subscription(agent_id, topic, False)

    def _subscription(self, agent_id: str, topic: str, on: bool) -> None:
        checked_text("topic", topic)
        self._known(agent_id)
        self._changes.append(_Subscription(agent_id, topic, on))

    def list_agents(self) -> list[AgentInfo]:
        """Every agent of the team known to this process, in spawn order (those spawned
        and not yet recorded last)."""
        infos = [
            AgentInfo(r.id, r.role, r.thread_id, r.parent_id, self._rounds.status_of(r))
            for r in self._roster.agents.values()
        ]
        for change in self._changes:
            if isinstance(change, _Spawn) and change.agent_id not in self._roster.agents:
                r = change.record
                infos.append(AgentInfo(r.id, r.role, r.thread_id, r.parent_id, "idle"))
        return infos

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
        the sender excepted). An unknown agent raises `UnknownAgent`; everything is checked
        before anything is stored.

        Stored in each recipient's inbox before this returns, and delivered into its history
        before its next step, exactly once and in order per sender, across crashes, as a
        user message whose content starts with `[message from <sender>]`
        (`[message from <sender> (topic t)]`). A `message_id` makes the send idempotent:
        the same id from the same sender reaches a recipient once when sent again (retry a
        send whose answer was lost with the same id; an inbox remembers each sender's last 8
        ids).

        From inside a run of one of the team's agents (a tool or hook of it), the letter
        goes into that agent's outbox instead: committed with the step that sent it,
        stored in the inboxes once the step is saved, and never sent by a step a crash
        lost (`message_id` is not needed there, and ignored)."""
        if not isinstance(sender_id, str) or not sender_id:
            raise TypeError(f"sender_id must be a non-empty string, got {sender_id!r}")
        checked_text("sender_id", sender_id)
        if sender_id == TASK_SENDER:
            raise StateError(
                f"sender_id {TASK_SENDER!r} is reserved for spawned agents' tasks; send as "
                f"an agent id or any other name (such as 'user')"
            )
        if not isinstance(content, str):
            raise TypeError(f"content must be a string, got {content!r}")
        checked_text("content", content, empty=True)
        if message_id is not None:
            checked_text("message_id", message_id)
        address = Address.of(to, group, topic)
        sending = self._sending()
        if sending is None:  # (inside a run, the round recorded the queue before it began)
            await self._sync()
        recipients = await self._recipients(address, sender_id)
        if sending is not None:
            if recipients:
                ids = tuple(r.id for r in recipients)
                letter = OutLetter(0, sender_id, ids, content, address.via)
                self._outboxes.stage(sending, letter)
            return len(recipients)
        letter_of = LetterOf(sender_id, content, address.via, traceparent=current_traceparent())
        roster, mailbox = self._roster, self._outboxes.mailbox
        for record in recipients:
            await post_following(roster, mailbox, record.id, letter_of, message_id)
        self._rounds.mail_arrived(recipients)
        return len(recipients)

    async def _recipients(self, address: Address, sender_id: str) -> list[AgentRecord]:
        if not address.to or any(n not in self._roster.agents for n in address.to):
            await self._roster.load()
        return address.recipients(
            self._roster.agents, roles=self.roles, sender=sender_id, team_id=self.team_id
        )

    def _sending(self) -> str | None:
        """The thread of this team's agent whose run the caller is part of, if any."""
        sending = SENDING.get()
        if sending is None or sending[0] is not self._outboxes:
            return None
        return sending[1]

    # -- running ---------------------------------------------------------------------------

    async def run_until_idle(self, *, max_rounds: int = 100) -> TeamReport:
        """Run rounds until no agent of this process has work, at most `max_rounds`.

        An agent has work when it has its task, new mail, a restart due, or a run a crash
        cut between steps. In each round every such agent runs once, concurrently with the
        others. A suspended agent waits (status `"waiting"`) for `team.resume` without
        holding the rest up; a failed one follows the restart policy. A `max_rounds` below
        1 raises `ValueError`."""
        options.positive_int("max_rounds", max_rounds)
        self._rounds.refuse_inside("run_until_idle")
        await self._sync()
        async with self._rounds.lock:
            return await self._rounds.run(max_rounds)

    async def serve(self, *, stop: asyncio.Event | None = None) -> TeamReport:
        """Run this process's agents as work arrives, until `stop` is set (or the task is
        cancelled); returns a `TeamReport` of what ran.

        This process is one worker of the team; any number of processes, on any hosts
        sharing the stores, may serve it at once. A worker runs an agent only while it holds
        the agent's lease, so at most one worker runs an agent at a time; it runs each agent
        of `local_roles` that has work as soon as it has it, each in a task of its own.
        Between work it sleeps: a letter posted in any process wakes the worker that holds
        its recipient within milliseconds on PostgreSQL (`LISTEN`/`NOTIFY`); on SQLite at
        once within the process that posted it, and within the store's poll interval from
        another process. A worker that stops beating for `lease_seconds` (killed, cut off)
        is judged dead, and its agents are taken over by the others.

        Set `stop` to drain: no run starts, each running one stops before its next step (its
        last step saved: its outcome is `"stopped"`, and the agent's next run, here or in
        another process, carries on), and the leases are released at once, so that the
        other workers take the agents without waiting for a lease. Cancelling the task
        drains the same way (cancelling it again cancels the runs). `TeamReport.idle` says
        whether nothing was left to do when it stopped; `rounds` counts its looks at the
        agents; each `AgentReport` keeps the agent's last 16 runs (`outcomes`, `results`).
        A store failure while it looks at its agents is logged once, and it tries again at
        its next beat. Serving from inside one of the team's own runs raises `StateError`."""
        if stop is not None and not isinstance(stop, asyncio.Event):
            raise TypeError(f"stop must be an asyncio.Event, got {stop!r}")
        self._rounds.refuse_inside("serve")
        await self._sync()
        async with self._rounds.lock:
            leases = Leases(
                self._profile,
                self.team_id,
                self._local,
                lease_seconds=self.lease_seconds,
                clock=asyncio.get_running_loop().time,  # the clock the worker sleeps by
            )
            worker = Worker(self._rounds, self._roster, leases, self._profile.store)
            self.worker_id = leases.worker_id
            try:
                return await worker.serve(
                    asyncio.Event() if stop is None else stop, started=self._serving
                )
            finally:
                self.worker_id = None
                self._serving.clear()

    def _limit_roles(self, roles: Iterable[str]) -> None:
        """Run only `roles` of the local ones (`statekernel worker --roles`)."""
        roles = tuple(roles)
        unknown = [r for r in roles if r not in self._local]
        if unknown:
            raise StateError(
                f"--roles names roles this team does not run here: {unknown}; it runs "
                f"{sorted(self._local)} (its roles, less any its local_roles leave out)"
            )
        self._local = roles
        self._rounds.local_roles = frozenset(roles)

    async def wait_idle(self, *, timeout: float | None = None) -> bool:
        """Wait until no agent of the team, in any process, has work; True then, or False
        once `timeout` seconds passed (None: no limit).

        An agent has work while its inbox holds undelivered letters (its task included), its
        run is in progress or was cut between steps by a crash, what it sent is not yet
        posted, or a restart is due. An agent waiting on a decision (`team.resume`) or failed
        for good has none. It reads the stores only, so it waits for workers in other
        processes as for this one; it returns once two looks in a row found the team idle
        and unchanged."""
        if timeout is not None:
            options.seconds("timeout", timeout, fix="Or None to wait as long as it takes.")
        self._rounds.refuse_inside("wait_idle")
        await self._sync()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        async with inbox_changes(self._profile.store) as feed:
            while True:
                if await self._workload.idle():
                    return True
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    return False
                pause = IDLE_LOOK_EVERY if left is None else min(IDLE_LOOK_EVERY, left)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await feed.next()

    async def resume(self, agent_id: str, call_id: str, decision: Decision) -> RunResult:
        """Continue a waiting agent's suspended run with `decision` on its call `call_id`.

        See `Agent.resume`."""
        await self._sync()
        return await self._rounds.resume(self._roster.record(agent_id), call_id, decision)

    async def cancel(self, agent_id: str) -> RunResult:
        """Cancel an agent's run: a waiting agent's suspended run ends with its pending calls
        cancelled; a running one stops at its next safe point (see `Agent.cancel`)."""
        await self._sync()
        return await self._rounds.cancel(self._roster.record(agent_id))

    # -- snapshots -------------------------------------------------------------------------

    async def save_snapshot(self, name: str | None = None) -> TeamSnapshot:
        """Every agent's thread revision and inbox (the undelivered mail) as one point in
        time, stored under `name` (default: a new one) and returned.

        Take it while the team is between rounds (this process waits for its own
        `run_until_idle`), with no agent waiting on a decision, and with other processes of
        the team quiet. An agent waiting on a decision raises `StateError` (resume it
        first); a `name` no store can keep (a lone surrogate, a NUL character) `ValueError`,
        before anything is stored."""
        if name is not None:
            checked_text("snapshot name", name, empty=True)
        self._rounds.refuse_inside("save_snapshot")
        await self._sync()
        async with self._rounds.lock:
            await self._roster.load()
            waiting = [
                r.id for r in self._roster.agents.values() if self._rounds.status_of(r) == "waiting"
            ]
            return await self._snapshots.save(name, waiting)

    async def restore_snapshot(self, snapshot: TeamSnapshot | str | None = None) -> TeamSnapshot:
        """Return every agent and the mailbox to a snapshot; returns the snapshot.

        `snapshot` is a `TeamSnapshot`, its name, or None: the newest. Each agent's thread
        is forked at its revision into a new thread (`AgentInfo.thread_id` changes; the old
        one stays, with its history), its inbox is set as it was, and agents spawned since
        leave the roster. Team context and other profile state are not rolled back. A name
        no store can keep (a lone surrogate, a NUL character) raises `ValueError` at once."""
        if isinstance(snapshot, str):
            checked_text("snapshot name", snapshot, empty=True)
        self._rounds.refuse_inside("restore_snapshot")
        await self._sync()
        async with self._rounds.lock:
            restored = await self._snapshots.restore(snapshot)
            self._rounds.forget()
            await self._roster.load()
            return restored

    # -- keeping the roster ------------------------------------------------------------------

    async def _sync(self) -> None:
        """Load the roster once, then record the spawns and subscriptions made since, in
        order (one task at a time: concurrent calls wait for the first). A change the store
        refuses is dropped, and raised here once."""
        if self._loaded and not self._changes:
            return
        async with self._syncing:
            if not self._loaded:
                await self._roster.load()
                self._loaded = True
            while self._changes:
                change = self._changes[0]  # left queued until made: see the fast path above
                try:
                    await change.make(self)
                except Exception as error:  # refused: dropped, said once (a cancel keeps it)
                    self._changes.pop(0)
                    raise change.refused(error) from error
                self._changes.pop(0)

    def _known_or_none(self, agent_id: str) -> AgentRecord | None:
        """The agent's record in the roster, or in a spawn not yet recorded."""
        record = self._roster.agents.get(agent_id)
        if record is not None:
            return record
        for change in self._changes:
            if isinstance(change, _Spawn) and change.agent_id == agent_id:
                return change.record
        return None

    def _known(self, agent_id: str) -> AgentRecord:
        record = self._known_or_none(agent_id)
        if record is None:
            raise UnknownAgent(agent_id, self.team_id, self._roster.agents)
        return record
