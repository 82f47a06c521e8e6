"""AgentTeam: spawning, team context, the mailbox's routing and delivery, rounds, the
restart policy, suspension, and team snapshots, on every store backend where it matters."""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from statekernel import (
    AgentTeam,
    Decision,
    InferenceRequest,
    InferenceResponse,
    InvalidName,
    KeyScope,
    Message,
    ModelCallFailed,
    NameNotAString,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ProfileStore,
    Role,
    StateCommand,
    StateError,
    StateKey,
    StateScope,
    Suspend,
    ThreadStore,
    ToolCall,
    UnknownAgent,
    VersionConflict,
    tool,
)
from statekernel.plugins import ContextInjection, Team, TeamContext
from statekernel.stores import (
    MemoryProfileStore,
    MemoryThreadStore,
    SqliteProfileStore,
    SqliteThreadStore,
)


async def answer_ok(request: InferenceRequest) -> InferenceResponse:
    return InferenceResponse("ok")


def calling(name: str, arguments: Callable[[InferenceRequest], dict[str, Any]]) -> Any:
    """A model that calls tool `name` once per run (when the last message is not a tool
    result), then answers "done"."""

    async def model(request: InferenceRequest) -> InferenceResponse:
        last = request.messages[-1]
        if last.role == "tool":
            return InferenceResponse("done")
        call = ToolCall(f"call-{len(request.messages)}", name, arguments(request))
        return InferenceResponse("", (call,))

    return model


def mail(messages: tuple[Message, ...]) -> list[tuple[str | None, str]]:
    """The mailbox's messages in a history: (sender, text after the header)."""
    return [
        (AgentTeam.sender_of(m), m.content.split("\n", 1)[1])
        for m in messages
        if AgentTeam.sender_of(m) is not None
    ]


async def history(team: AgentTeam, agent_id: str) -> tuple[Message, ...]:
    info = next(a for a in team.list_agents() if a.id == agent_id)
    state = await team.agent(info.role).kernel.get_state(info.thread_id)
    return tuple(state.to_dict().get("statekernel.messages", ()))


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[ProfileStore, ThreadStore]]:
    async with (
        SqliteProfileStore(tmp_path / "profiles.db") as profiles,
        SqliteThreadStore(tmp_path / "threads.db") as threads,
    ):
        yield profiles, threads


def team_of(
    stores: tuple[ProfileStore, ThreadStore], roles: dict[str, Role], **kw: Any
) -> AgentTeam:
    profiles, threads = stores
    return AgentTeam(roles, profile_store=profiles, thread_store=threads, **kw)


# -- spawning and team context -----------------------------------------------------------------


async def test_three_children_append_goals_concurrently_and_another_team_sees_none(
    profile_store: ProfileStore,
) -> None:
    goal_of = calling("add_team_goal", lambda r: {"goal": f"goal of {r.messages[-1].content}"})
    team_plugin = Team()
    roles = {"child": Role(model=goal_of, tools=team_plugin.tools())}
    plugins = [team_plugin, ContextInjection()]
    async with AgentTeam(roles, plugins=plugins, profile_store=profile_store) as team:
        children = [team.spawn("child", f"task {n}") for n in range(3)]
        report = await team.run_until_idle()
        assert report.idle and report.rounds == 1  # all three ran in one round, concurrently
        assert {a.outcomes for a in report.agents.values()} == {("success",)}
        shared = await team.agent("child").kernel.profile.read(  # type: ignore[union-attr]
            TeamContext, StateScope.parent_thread(team.team_id)
        )
        assert sorted(shared.goals) == [f"goal of task {n}" for n in range(3)]
        assert {a.parent_id for a in team.list_agents()} == {None}
        assert len(set(children)) == 3

    async with AgentTeam(roles, plugins=plugins, profile_store=profile_store) as other:
        other.spawn("child", "look around")
        await other.run_until_idle()
        theirs = await other.agent("child").kernel.profile.read(  # type: ignore[union-attr]
            TeamContext, StateScope.parent_thread(other.team_id)
        )
        assert theirs.goals == ("goal of look around",)


class Notes(StateKey[tuple[str, ...], str]):
    key = "team_test.notes"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: tuple[str, ...], update: str) -> tuple[str, ...]:
        return (*value, update)


class NotesPlugin(Plugin):
    id = "notes"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Notes)


async def test_spawn_seeds_state_gives_the_task_first_and_nests_under_a_parent(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    seen: list[InferenceRequest] = []

    async def model(request: InferenceRequest) -> InferenceResponse:
        seen.append(request)
        return InferenceResponse("ok")

    roles = {"lead": Role(), "helper": Role(system_prompt="You help.", max_steps=3)}
    async with team_of(
        stores, roles, model=model, plugins=[NotesPlugin()], system_prompt="Team work."
    ) as team:
        lead = team.spawn("lead", "plan it")
        helper = team.spawn(
            "helper", "help", parent_id=lead, seed=StateCommand().update(Notes, "seeded")
        )
        await team.run_until_idle()
        infos = {a.id: a for a in team.list_agents()}
        assert infos[helper].parent_id == lead
        assert infos[lead].status == infos[helper].status == "done"
        state = await team.agent("helper").kernel.get_state(infos[helper].thread_id)
        assert state.get(Notes) == ("seeded",)
        runs = state.to_dict()["statekernel.messages"]
        assert [m.content for m in runs] == ["help", "ok"]
        prompts = {r.messages[0].content for r in seen}
        assert prompts == {"Team work.", "You help."}  # the role's own replaces the team's
        assert team.agent("helper").max_steps == 3 and team.agent("lead").max_steps == 25
        # The helper's runs name the lead's thread as parent: its team context is the lead's.
        helper_runs = await team.agent("helper").kernel.history(infos[helper].thread_id)
        assert helper_runs


async def test_bad_spawns_and_sends_are_refused_with_what_to_do(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    async with team_of(stores, {"a": Role(model=answer_ok)}) as team:
        with pytest.raises(StateError, match="no role 'b'"):
            team.spawn("b", "x")
        with pytest.raises(UnknownAgent, match="no agent 'ghost'"):
            team.spawn("a", "x", parent_id="ghost")
        one = team.spawn("a", "x")
        with pytest.raises(UnknownAgent):
            await team.send(one, "hi", to="ghost")
        with pytest.raises(StateError, match="exactly one address"):
            await team.send(one, "hi", to=one, topic="t")
        with pytest.raises(StateError, match="groups are roles"):
            await team.send(one, "hi", group="nobody")
    with pytest.raises(StateError, match="ProfileStore"):
        AgentTeam({"a": Role(model=answer_ok)})
    with pytest.raises(StateError, match="no model"):
        AgentTeam({"a": Role()}, profile_store=MemoryProfileStore())


# -- the mailbox -------------------------------------------------------------------------------


async def test_send_routes_to_agents_groups_and_topic_subscribers_at_the_time_of_sending(
    profile_store: ProfileStore,
) -> None:
    roles = {"writer": Role(model=answer_ok), "reader": Role(model=answer_ok, topics=("news",))}
    async with AgentTeam(roles, profile_store=profile_store) as team:
        w1, w2 = team.spawn("writer", "w"), team.spawn("writer", "w")
        r1, r2 = team.spawn("reader", "r"), team.spawn("reader", "r")
        assert await team.send(w1, "to w2", to=w2) == 1
        assert await team.send(w1, "to writers", group="writer") == 1  # not back to itself
        assert await team.send("user", "news 1", topic="news") == 2
        team.subscribe(w2, "news")
        team.unsubscribe(r2, "news")
        assert await team.send(r1, "news 2", topic="news") == 1  # w2 now; r1 is the sender
        assert await team.send("user", "both", to=[r1, r2]) == 2
        await team.run_until_idle()
        assert mail(await history(team, w2)) == [
            (w1, "to w2"),
            (w1, "to writers"),
            (r1, "news 2"),
        ]
        assert mail(await history(team, r1)) == [("user", "news 1"), ("user", "both")]
        assert mail(await history(team, r2)) == [("user", "news 1"), ("user", "both")]
        assert mail(await history(team, w1)) == []
        headers = [m.content.split("\n")[0] for m in await history(team, w2)]
        assert "[message from " + r1 + " (topic news)]" in headers


async def test_a_message_id_makes_a_repeated_send_reach_each_recipient_once(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    async with team_of(stores, {"a": Role(model=answer_ok)}) as team:
        one, two = team.spawn("a", "x"), team.spawn("a", "y")
        for _ in range(3):
            await team.send(one, "once", to=two, message_id="m-1")
        await team.send(one, "again", to=two, message_id="m-2")
        await team.send(one, "plain", to=two)
        await team.send(one, "plain", to=two)
        await team.run_until_idle()
        assert mail(await history(team, two)) == [
            (one, "once"),
            (one, "again"),
            (one, "plain"),
            (one, "plain"),
        ]


async def test_agents_talk_through_their_send_message_tool(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    ids: dict[str, str] = {}
    speaker = calling("send_message", lambda r: {"content": "hello there", "to": ids["listener"]})
    roles = {"speaker": Role(model=speaker), "listener": Role(model=answer_ok)}
    async with team_of(stores, roles) as team:
        ids["listener"] = team.spawn("listener", "listen")
        talker = team.spawn("speaker", "speak")
        report = await team.run_until_idle()
        assert report.idle and report.rounds == 2  # the listener ran again for the message
        assert report.agents[ids["listener"]].delivered == 2  # its task, then the message
        assert mail(await history(team, ids["listener"])) == [(talker, "hello there")]


async def test_a_thousand_messages_between_five_agents_arrive_once_each_in_sender_order(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    rng = random.Random(7)

    async def slow(request: InferenceRequest) -> InferenceResponse:
        await asyncio.sleep(rng.random() * 0.002)
        return InferenceResponse("ok")

    async with team_of(stores, {"peer": Role(model=slow)}) as team:
        agents = [team.spawn("peer", f"peer {n}") for n in range(5)]
        plan = [
            (agents[n % 5], rng.choice(agents[: n % 5] + agents[n % 5 + 1 :])) for n in range(1000)
        ]
        sent_done = asyncio.Event()

        async def sender(me: str) -> None:
            for n, (who, to) in enumerate(plan):
                if who == me:
                    await team.send(me, f"m{n}", to=to)
                    await asyncio.sleep(rng.random() * 0.001)

        async def stepper() -> None:
            while not sent_done.is_set():
                await team.run_until_idle(max_rounds=3)
                await asyncio.sleep(0)

        stepping = asyncio.create_task(stepper())
        await asyncio.gather(*(sender(a) for a in agents))
        sent_done.set()
        await stepping
        assert (await team.run_until_idle()).idle
        received: dict[str, list[tuple[str | None, str]]] = {}
        for agent_id in agents:
            received[agent_id] = mail(await history(team, agent_id))
        for n, (who, to) in enumerate(plan):
            assert received[to].count((who, f"m{n}")) == 1, (n, who, to)
        assert sum(len(got) for got in received.values()) == 1000
        for got in received.values():
            for sender_id in agents:
                numbers = [int(text[1:]) for who, text in got if who == sender_id]
                assert numbers == sorted(numbers)
        for agent_id in agents:
            info = next(a for a in team.list_agents() if a.id == agent_id)
            report = await team.agent("peer").kernel.verify(info.thread_id)
            assert report.ok, report


# -- failures and suspension -------------------------------------------------------------------


class Flaky:
    """A model that fails its first `failures` calls."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        self.calls += 1
        if self.calls <= self.failures:
            raise ModelCallFailed("flaky", 500, "try again", "it will pass")
        return InferenceResponse("recovered")


async def test_a_failing_agent_is_restarted_then_reported_failed_while_the_others_finish(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    once, always = Flaky(1), Flaky(1000)
    roles = {"once": Role(model=once), "always": Role(model=always), "fine": Role(model=answer_ok)}
    async with team_of(stores, roles, restart_policy="on_failure", max_restarts=2) as team:
        a, b, c = team.spawn("once", "x"), team.spawn("always", "y"), team.spawn("fine", "z")
        report = await team.run_until_idle()
        assert report.idle
        assert (
            report.agents[a].outcomes == ("failure", "success")
            and report.agents[a].status == "done"
        )
        assert report.agents[b].outcomes == ("failure",) * 3 and report.agents[b].status == "failed"
        assert isinstance(report.agents[b].error, ModelCallFailed)
        assert report.agents[a].restarts == 0  # recovered: the count starts again
        assert report.agents[b].restarts == 2
        assert report.agents[c].outcomes == ("success",)
        assert report.failed() == (b,)
        assert always.calls == 3  # the first run and max_restarts=2 more
        # The task reached the history once, though its run was restarted.
        assert [m.content for m in await history(team, a)] == ["x", "recovered"]
        # Failed is for good, across processes: a new team object on the stores says so.
    async with team_of(stores, roles, team_id=team.team_id) as again:
        statuses = {i.id: i.status for i in again.list_agents()}
        assert statuses[b] == "failed"
        assert (await again.run_until_idle()).agents == {}

    never = Flaky(1)
    async with team_of(stores, {"n": Role(model=never)}, restart_policy="never") as team:
        n = team.spawn("n", "x")
        report = await team.run_until_idle()
        assert report.agents[n].status == "failed" and never.calls == 1


class Approval(Plugin):
    """Suspends every call of the tool "publish" until decided."""

    id = "approval"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_tool_gate(self.gate)

    async def gate(self, ctx: PhaseContext) -> Suspend | None:
        call = ctx.tool_call
        return Suspend("needs approval") if call is not None and call.name == "publish" else None


@tool
async def publish(text: str) -> str:
    """Publish the text.

    Args:
        text: What to publish.
    """
    return f"published {text}"


async def test_a_suspended_agent_waits_while_the_others_finish_and_team_resume_completes_it(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    publisher = calling("publish", lambda r: {"text": "the post"})
    roles = {
        "pub": Role(model=publisher, plugins=[Approval()], tools=[publish]),
        "other": Role(model=answer_ok),
    }
    async with team_of(stores, roles) as team:
        p, o = team.spawn("pub", "post it"), team.spawn("other", "chat")
        await team.send("user", "more for pub", to=p)
        report = await team.run_until_idle()
        assert report.idle
        assert report.agents[p].status == "waiting" and report.waiting() == (p,)
        assert report.agents[o].status == "done"
        pending = report.agents[p].results[-1].pending
        assert [c.name for c in pending] == ["publish"]
        with pytest.raises(StateError, match="wait on a decision"):
            await team.save_snapshot()
        result = await team.resume(p, pending[0].id, Decision.approve())
        assert result.outcome == "success"
        assert {i.id: i.status for i in team.list_agents()}[p] == "done"
        texts = [m.content for m in result.messages]
        assert "published the post" in texts


# -- snapshots ---------------------------------------------------------------------------------


async def test_restore_snapshot_returns_every_agent_and_the_mailbox_to_the_snapshot(
    thread_store: ThreadStore, tmp_path: Path
) -> None:
    async with SqliteProfileStore(tmp_path / "p.db") as profiles:
        roles = {"a": Role(model=answer_ok), "b": Role(model=answer_ok)}
        team = AgentTeam(roles, profile_store=profiles, thread_store=thread_store)
        async with team:
            a, b = team.spawn("a", "start a"), team.spawn("b", "start b")
            await team.send(a, "before", to=b)
            await team.run_until_idle()
            await team.send(a, "undelivered at the snapshot", to=b)
            snapshot = await team.save_snapshot("s1")
            hashes = {}
            for info in team.list_agents():
                state = await team.agent(info.role).kernel.get_state(info.thread_id)
                hashes[info.id] = state.state_hash()
            # Further work: more mail, more runs, a new agent.
            await team.send(b, "after", to=a)
            team.spawn("a", "late")
            await team.run_until_idle()
            restored = await team.restore_snapshot("s1")
            assert restored.name == "s1" == snapshot.name
            assert {i.id for i in team.list_agents()} == {a, b}
            for info in team.list_agents():
                state = await team.agent(info.role).kernel.get_state(info.thread_id)
                assert state.state_hash() == hashes[info.id]
                assert info.thread_id != snapshot.agents[info.id].thread_id
            # The mail undelivered at the snapshot is delivered once, after the restore.
            await team.run_until_idle()
            assert mail(await history(team, b)) == [
                (a, "before"),
                (a, "undelivered at the snapshot"),
            ]
            assert mail(await history(team, a)) == []
        # The newest snapshot by default, from a new team object on the same stores.
        again = AgentTeam(
            roles, profile_store=profiles, thread_store=thread_store, team_id=team.team_id
        )
        async with again:
            await again.send(a, "x", to=b)
            await again.run_until_idle()
            await again.restore_snapshot()
            for info in again.list_agents():
                state = await again.agent(info.role).kernel.get_state(info.thread_id)
                assert state.state_hash() == hashes[info.id]


async def test_a_team_reopened_by_id_carries_on_its_mail_and_agents(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    roles = {"a": Role(model=answer_ok)}
    async with team_of(stores, roles) as team:
        one, two = team.spawn("a", "x"), team.spawn("a", "y")
        await team.send(one, "first", to=two)
    # The spawns and the mail are stored: a new team object (another process) delivers.
    async with team_of(stores, roles, team_id=team.team_id) as again:
        assert {i.id for i in again.list_agents()} == {one, two}
        await again.send(one, "second", to=two)
        report = await again.run_until_idle()
        assert report.agents[two].delivered == 3
        assert mail(await history(again, two)) == [(one, "first"), (one, "second")]


async def test_an_inbox_is_pruned_of_delivered_mail_once_a_save_holds_its_cursor(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    profiles, _ = stores
    async with team_of(stores, {"a": Role(model=answer_ok)}) as team:
        one = team.spawn("a", "x")
        thread_id = team.list_agents()[0].thread_id
        for n in range(40):
            await team.send("user", f"m{n}", to=one)
        await team.run_until_idle()  # delivers, then finds 41 delivered letters: pruned
        entry = await profiles.get("statekernel.team_inbox", thread_id)
        assert entry is not None and entry.value["letters"] == []
        for n in range(5):
            await team.send("user", f"late {n}", to=one)
        await team.run_until_idle()  # a few delivered letters stay until there are more
        entry = await profiles.get("statekernel.team_inbox", thread_id)
        assert entry is not None and len(entry.value["letters"]) == 5
        assert len(mail(await history(team, one))) == 45


async def test_a_backlog_is_kept_in_pages_delivered_in_order_once_then_pruned(
    profile_store: ProfileStore, tmp_path: Path
) -> None:
    async with AgentTeam({"a": Role(model=answer_ok)}, profile_store=profile_store) as team:
        one = team.spawn("a", "x")
        thread_id = team.list_agents()[0].thread_id
        await asyncio.gather(
            *(
                team.send(sender, f"{sender} {n}", to=one)
                for sender in ("s1", "s2")
                for n in range(100)
            )
        )
        head = await profile_store.get("statekernel.team_inbox", thread_id)
        pages = await profile_store.list("statekernel.team_inbox_page", thread_id + "#")
        assert head is not None and len(head.value["letters"]) < 32  # a send writes little
        assert len(pages) >= 5
        await team.run_until_idle()
        got = mail(await history(team, one))
        assert len(got) == 200
        for sender in ("s1", "s2"):
            numbers = [int(text.split()[1]) for who, text in got if who == sender]
            assert sorted(numbers) == list(range(100))  # each once
        assert await profile_store.list("statekernel.team_inbox_page", thread_id + "#") == []


async def test_a_letter_both_in_a_page_and_the_head_is_delivered_once(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    """What a sender that died between writing a page and trimming the head leaves."""
    profiles, _ = stores
    async with team_of(stores, {"a": Role(model=answer_ok)}) as team:
        one = team.spawn("a", "x")
        thread_id = team.list_agents()[0].thread_id
        for n in range(5):
            await team.send("s", f"m{n}", to=one)
        head = await profiles.get("statekernel.team_inbox", thread_id)
        assert head is not None
        base = head.value["base"]
        await profiles.set(
            "statekernel.team_inbox_page", f"{thread_id}#{base:012d}", head.value["letters"][:4]
        )
        await team.run_until_idle()
        assert mail(await history(team, one)) == [("s", f"m{n}") for n in range(5)]


async def test_senders_racing_on_one_inbox_from_two_team_objects_lose_no_letter(
    profile_store: ProfileStore,
) -> None:
    """Two team objects (two processes' worth of stale copies of the inbox) and many senders
    at once on one recipient: every letter lands once, in order per sender."""
    roles = {"a": Role(model=answer_ok)}
    async with AgentTeam(roles, profile_store=profile_store) as team:
        target = team.spawn("a", "x")
        await team.send("warm", "up", to=target)  # each team object now holds a copy
        async with AgentTeam(roles, profile_store=profile_store, team_id=team.team_id) as other:
            await other.send("warm", "up again", to=target)

            async def sender(via: AgentTeam, name: str) -> None:
                for n in range(15):
                    await via.send(name, f"{name} {n}", to=target)

            await asyncio.gather(*(sender(team if k % 2 else other, f"s{k}") for k in range(8)))
        await team.run_until_idle()
        got = mail(await history(team, target))
        assert len(got) == 2 + 8 * 15
        for k in range(8):
            assert [text for who, text in got if who == f"s{k}"] == [f"s{k} {n}" for n in range(15)]


# -- other processes around a restore, and what must not wedge a team ---------------------------


async def test_after_a_restore_elsewhere_no_letter_is_pruned_lost_or_sent_to_the_old_thread(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    roles = {"a": Role(model=answer_ok)}
    async with team_of(stores, roles) as first:
        x = first.spawn("a", "task")
        await first.run_until_idle()
        for n in range(40):
            await first.send("user", f"m{n}", to=x)
        await first.save_snapshot("s")  # 40 letters undelivered at the snapshot
        async with team_of(stores, roles, team_id=first.team_id) as second:
            await second.run_until_idle()  # delivers the 40 into the old thread
            await second.send("user", "before the restore", to=x)
            await first.restore_snapshot("s")
            await second.run_until_idle()  # its cursor was the old thread's: not this one's
            await second.send("user", "after the restore", to=x)  # follows the moved inbox
        await first.run_until_idle()
        got = [text for _, text in mail(await history(first, x))]
        assert got == [*(f"m{n}" for n in range(40)), "after the restore"]


async def test_two_team_objects_running_one_agent_do_not_count_the_lost_race_as_a_failure(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    gate = asyncio.Event()

    async def slow(request: InferenceRequest) -> InferenceResponse:
        await gate.wait()
        return InferenceResponse("ok")

    roles = {"a": Role(model=slow)}
    async with team_of(stores, roles, max_restarts=0) as first:
        x = first.spawn("a", "task")
        async with team_of(stores, roles, team_id=first.team_id, max_restarts=0) as second:
            both = asyncio.gather(first.run_until_idle(), second.run_until_idle())
            await asyncio.sleep(0.05)
            gate.set()
            reports = await both
            statuses = [r.agents[x].status for r in reports if x in r.agents]
            assert "failed" not in statuses  # one saved first; the other lost a race
            await first.send("user", "later", to=x)
            await first.run_until_idle()
        assert mail(await history(first, x)) == [("user", "later")]
        assert {i.id: i.status for i in first.list_agents()}[x] == "done"


async def test_a_spawn_whose_seed_no_commit_could_hold_is_refused_at_the_call(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    class RunNote(StateKey[str, str]):
        key = "team_test.run_note"  # run-scoped: no seed can hold it

    class RunNotes(Plugin):
        id = "run_notes"

        def register(self, registrar: PluginRegistrar) -> None:
            registrar.register_key(RunNote)

    async with team_of(stores, {"a": Role(model=answer_ok, plugins=[RunNotes()])}) as team:
        with pytest.raises(StateError, match="'team_test.run_note' is run-scoped"):
            team.spawn("a", "x", seed=StateCommand().update(RunNote, "no"))  # refused here
        good = team.spawn("a", "y")
        report = await team.run_until_idle()  # the team goes on without it
        assert [i.id for i in team.list_agents()] == [good]
        assert report.agents[good].outcomes == ("success",)


async def test_an_agent_id_spawned_again_after_a_restore_dropped_it_starts_afresh(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    async with team_of(stores, {"a": Role(model=answer_ok)}) as team:
        team.spawn("a", "first", agent_id="keeper")
        await team.save_snapshot("empty-but-keeper")
        team.spawn("a", "old task", agent_id="w1")
        await team.run_until_idle()
        await team.restore_snapshot("empty-but-keeper")  # drops w1
        with pytest.raises(UnknownAgent):
            await team.send("user", "hi", to="w1")
        team.spawn("a", "new task", agent_id="w1")
        await team.run_until_idle()
        assert [m.content for m in await history(team, "w1")] == ["new task", "ok"]


async def test_a_failed_resume_or_a_cancel_leaves_no_agent_waiting_for_good(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    publisher = calling("publish", lambda r: {"text": "the post"})
    roles = {"pub": Role(model=publisher, plugins=[Approval()], tools=[publish])}
    async with team_of(stores, roles) as team:
        p = team.spawn("pub", "post it")
        report = await team.run_until_idle()
        assert report.waiting() == (p,)
        result = await team.cancel(p)
        assert result.outcome == "cancelled"
        assert {i.id: i.status for i in team.list_agents()}[p] == "done"
        await team.save_snapshot()  # nobody waits on a decision any more


async def test_a_send_repeated_after_a_restore_rolled_it_back_reaches_the_new_thread(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    roles = {"a": Role(model=answer_ok)}
    async with team_of(stores, roles) as first:
        x = first.spawn("a", "task")
        await first.run_until_idle()
        await first.save_snapshot("s")
        async with team_of(stores, roles, team_id=first.team_id) as second:
            await second.send("user", "hello", to=x, message_id="k")  # after the snapshot
            await first.restore_snapshot("s")  # rolls that send back
            assert await second.send("user", "hello", to=x, message_id="k") == 1
        await first.run_until_idle()
        assert mail(await history(first, x)) == [("user", "hello")]


async def test_a_snapshot_asked_for_from_inside_a_round_is_refused_not_a_hang(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    holder: list[AgentTeam] = []

    async def snapshot_now(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        await holder[0].save_snapshot()
        return "saved"

    roles = {"a": Role(model=calling("snap", lambda r: {}), tools={"snap": snapshot_now})}
    async with team_of(stores, roles) as team:
        holder.append(team)
        a = team.spawn("a", "x")
        report = await asyncio.wait_for(team.run_until_idle(), timeout=30)
        (result,) = report.agents[a].results[0].tool_results
        assert result.error is not None and "inside one of the team's own runs" in result.error
        await team.save_snapshot()  # between rounds it works


# -- calls refused at the call; a lost race is no failure ------------------------------------


@pytest.mark.parametrize(
    "refused",
    [
        lambda team, a: team.subscribe(a, "news\ud800"),
        lambda team, a: team.subscribe(a, "nul\x00"),
        lambda team, a: team.unsubscribe(a, "news\ud800"),
        lambda team, a: team.spawn("a", "task\ud800"),
        lambda team, a: team.spawn("a", "task", agent_id="x\ud800"),
        lambda team, a: team.spawn("a", "task", agent_id="x/y"),
        lambda team, a: team.spawn("a", "task", parent_id="nobody"),
        lambda team, a: team.spawn("nobody", "task"),
    ],
)
async def test_a_refused_call_raises_at_the_call_and_the_team_goes_on(
    stores: tuple[ProfileStore, ThreadStore], refused: Callable[[AgentTeam, str], object]
) -> None:
    async with team_of(stores, {"a": Role(model=answer_ok)}) as team:
        first = team.spawn("a", "first")
        await team.run_until_idle()
        with pytest.raises((StateError, TypeError, ValueError)):
            refused(team, first)
        assert [i.id for i in team.list_agents()] == [first]  # nothing was queued
        team.subscribe(first, "news")
        assert await team.send("user", "hello", topic="news") == 1
        report = await team.run_until_idle()
        assert report.agents[first].outcomes == ("success",)
    assert mail(await history(team, first)) == [("user", "hello")]


@pytest.mark.parametrize(
    "address",
    [
        {"to": "x\ud800"},
        {"topic": "t\ud800"},
        {"group": "g\x00"},
        {"to": []},
        {"to": "a", "topic": "t"},
    ],
)
async def test_a_send_refused_at_the_call_stores_nothing(
    stores: tuple[ProfileStore, ThreadStore], address: dict[str, Any]
) -> None:
    async with team_of(stores, {"a": Role(model=answer_ok)}) as team:
        first = team.spawn("a", "first", agent_id="a")
        await team.run_until_idle()
        with pytest.raises((StateError, TypeError, ValueError)):
            await team.send("user", "hello", **address)
        with pytest.raises(ValueError, match="lone surrogate"):
            await team.send("user", "bad \ud800 text", to=first)
        assert (await team.run_until_idle()).agents == {}  # nothing arrived
        assert await team.send("user", "fine", to=first) == 1


async def test_a_seed_of_a_key_no_plugin_registers_is_refused_at_the_spawn(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    class Stray(StateKey[int, int]):
        key = "team_test.stray"
        scope = KeyScope.THREAD

    async with team_of(stores, {"a": Role(model=answer_ok)}) as team:
        with pytest.raises(StateError, match="team_test.stray"):
            team.spawn("a", "task", seed=StateCommand().update(Stray, 1))
        assert team.list_agents() == []


async def test_role_names_topics_and_snapshot_names_no_store_can_keep_are_refused_at_once(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    """Checked as every other team name is, before anything is stored: a role's name and
    topics when the team or role is made, a snapshot's name when it is saved or restored."""
    for bad in ("r\ud800", "r\x00"):
        with pytest.raises(ValueError, match="^role name 'r"):
            team_of(stores, {bad: Role(model=answer_ok)})
        with pytest.raises(ValueError, match="^topic 'r"):
            Role(model=answer_ok, topics=("news", bad))
    async with team_of(stores, {"a": Role(model=answer_ok)}) as team:
        first = team.spawn("a", "first")
        await team.run_until_idle()
        for bad in ("s\ud800", "s\x00"):
            with pytest.raises(ValueError, match="^snapshot name 's"):
                await team.save_snapshot(bad)
            with pytest.raises(ValueError, match="^snapshot name 's"):
                await team.restore_snapshot(bad)
        saved = await team.save_snapshot("fine")
        assert (await team.restore_snapshot()).name == saved.name == "fine"  # the newest
        assert [i.id for i in team.list_agents()] == [first]


async def test_two_teams_running_one_agent_at_once_supersede_without_failing(
    stores: tuple[ProfileStore, ThreadStore], caplog: pytest.LogCaptureFixture
) -> None:
    """Two processes (two teams on one store) run the same agent at once: the run that
    lost the save race is superseded, spends no restart and logs no error."""
    both_in = asyncio.Event()
    entered = 0

    async def slow(request: InferenceRequest) -> InferenceResponse:
        nonlocal entered
        entered += 1
        if entered == 2:
            both_in.set()
        await asyncio.wait_for(both_in.wait(), 5)
        return InferenceResponse("ok")

    roles = {"a": Role(model=slow)}
    async with (
        team_of(stores, roles, team_id="t") as one,
        team_of(stores, roles, team_id="t") as two,
    ):
        agent_id = one.spawn("a", "task", agent_id="w")
        await one.send("user", "hi", to=agent_id)
        reports = await asyncio.gather(one.run_until_idle(), two.run_until_idle())
    outcomes = sorted(o for r in reports for o in r.agents[agent_id].outcomes)
    assert outcomes == ["success", "superseded"]
    assert all(r.agents[agent_id].restarts == 0 for r in reports)
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]
    assert mail(await history(one, agent_id)) == [("user", "hi")]


class _ReportsAtRunEnd(Plugin):
    """The worker's RUN_END hook: it sends through the team the test opened last."""

    id = "report"

    def __init__(self, teams: list[AgentTeam], sender: str, **address: Any) -> None:
        self.teams, self.sender, self.address = teams, sender, address

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_phase_hook(Phase.RUN_END, self.done)

    async def done(self, ctx: PhaseContext) -> None:
        if ctx.run.agent_id == "worker":
            await self.teams[-1].send(self.sender, f"finished {ctx.run.run_id}", **self.address)


async def test_a_hook_that_sends_at_run_end_sends_once_through_the_outbox(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    teams: list[AgentTeam] = []
    report = _ReportsAtRunEnd(teams, "worker-hook", to="boss")
    roles = {"worker": Role(model=answer_ok, plugins=[report]), "boss": Role(model=answer_ok)}
    async with team_of(stores, roles) as team:
        teams.append(team)
        team.spawn("boss", "wait", agent_id="boss")
        worker = team.spawn("worker", "work", agent_id="w")
        await team.run_until_idle()
        await team.send("user", "more", to=worker)
        await team.run_until_idle()
        got = mail(await history(team, "boss"))
        assert [text.split(":run-")[1] for _, text in got] == ["1", "2"]
        records = await team.agent("worker").kernel.history(team.list_agents()[1].thread_id)
        assert any(r.sources == ("agent:outbox",) and r.phase is Phase.RUN_END for r in records)


class _FailsOnce(MemoryProfileStore):
    """A profile store whose next write into one namespace fails, once asked to, as a store
    does when its server goes away for a moment."""

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace
        self.fail_next_write = False

    def _fails(self, namespace: str) -> bool:
        failing = namespace == self.namespace and self.fail_next_write
        self.fail_next_write = self.fail_next_write and not failing
        return failing

    async def set(self, namespace: str, key: str, value: Any, **kw: Any) -> Any:
        if self._fails(namespace):
            raise ConnectionError("the server went away")
        return await super().set(namespace, key, value, **kw)

    async def update(self, namespace: str, key: str, fn: Callable[[Any], Any]) -> Any:
        if self._fails(namespace):
            raise ConnectionError("the server went away")
        return await super().update(namespace, key, fn)


async def test_a_change_the_store_refuses_is_dropped_once_and_never_blocks_later_calls() -> None:
    store = _FailsOnce("statekernel.team_roster")
    async with AgentTeam({"a": Role(model=answer_ok)}, profile_store=store) as team:
        first = team.spawn("a", "first")
        await team.run_until_idle()
        store.fail_next_write = True
        team.subscribe(first, "news")
        with pytest.raises(StateError, match="subscription of agent .* to topic 'news'"):
            await team.send("user", "hello", to=first)  # the queued change fails here, once,
            # before this send does anything: it sent nothing
        assert await team.send("user", "hello", to=first) == 1  # and blocks nothing after
        assert await team.send("user", "news", topic="news") == 0  # it was not recorded
        team.subscribe(first, "news")
        assert await team.send("user", "news", topic="news") == 1
        report = await team.run_until_idle()
    assert report.agents[first].outcomes == ("success",)
    assert mail(await history(team, first)) == [("user", "hello"), ("user", "news")]


async def test_spawns_from_a_tool_without_ids_get_new_agents_in_every_process(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    """A tool of the team's own that spawns without an agent id: the agent is named after
    the spawner's thread and its outbox's number, which a reopened team reads from the
    thread, so a later spawn in another process never takes an earlier one's name."""
    teams: list[AgentTeam] = []

    async def hire(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        return teams[-1].spawn("helper", f"help with {len(ctx.messages)}")

    roles = {
        "boss": Role(model=calling("hire", lambda r: {}), tools={"hire": hire}),
        "helper": Role(model=answer_ok),
    }
    for _ in range(2):  # two processes, one after the other
        async with team_of(stores, roles, team_id="hiring") as team:
            teams.append(team)
            if not team.list_agents():
                team.spawn("boss", "hire someone", agent_id="boss")
            else:
                await team.send("user", "hire another", to="boss")
            await team.run_until_idle()
    helpers = [i for i in teams[-1].list_agents() if i.role == "helper"]
    assert len(helpers) == 2 and len({h.thread_id for h in helpers}) == 2
    for helper in helpers:
        tasks = [m.content for m in await history(teams[-1], helper.id) if m.role == "user"]
        assert len(tasks) == 1 and tasks[0].startswith("help with")


async def test_an_agent_another_process_runs_inside_a_tool_is_waiting_only_until_it_returns(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    """Before a tool that is not idempotent runs, the run is saved as if suspended on it. A
    second process looking then cannot tell it from a crash: it shows the agent waiting,
    but only in itself, and sees it again as it is once the tool returned."""
    inside, release = asyncio.Event(), asyncio.Event()

    async def pay(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        inside.set()
        await release.wait()
        return "paid"

    roles = {"a": Role(model=calling("pay", lambda r: {}), tools={"pay": pay})}
    async with (
        team_of(stores, roles, team_id="t") as one,
        team_of(stores, roles, team_id="t") as two,
    ):
        one.spawn("a", "pay please", agent_id="w")
        running = asyncio.ensure_future(one.run_until_idle())
        await inside.wait()
        await two.run_until_idle()  # it looks at w, and leaves it be
        assert [(i.id, i.status) for i in two.list_agents()] == [("w", "waiting")]
        release.set()
        assert (await running).agents["w"].outcomes == ("success",)
        await two.run_until_idle()
        assert [(i.id, i.status) for i in two.list_agents()] == [("w", "idle")]
        assert [(i.id, i.status) for i in one.list_agents()] == [("w", "done")]


async def test_a_letter_saved_but_not_posted_fails_nothing_and_is_posted_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = _FailsOnce("statekernel.team_inbox")
    roles = {
        "a": Role(model=calling("send_message", lambda r: {"content": "hi", "to": "b"})),
        "b": Role(model=answer_ok),
    }
    async with AgentTeam(roles, profile_store=store, team_id="t") as team:
        team.spawn("b", "wait", agent_id="b")
        await team.run_until_idle()
        team.spawn("a", "say hi", agent_id="a")
        await team._sync()
        store.fail_next_write = True  # the task is in; the letter's post fails
        report = await team.run_until_idle()
        assert report.agents["a"].outcomes == ("success",)
        assert any("not posted yet" in r.getMessage() for r in caplog.records)
        assert mail(await history(team, "b")) == [("a", "hi")]  # posted after a's next step
        await team.send("user", "again", to="a")
        await team.run_until_idle()
    assert mail(await history(team, "b")) == [("a", "hi"), ("a", "hi")]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda t: t.send("user", "x", to="a", topic="t"),
            StateError,
            "send needs exactly one address: to=<agent id or ids>, group=<role> or topic=<topic>",
        ),
        (lambda t: t.send("user", "x"), StateError, "send needs exactly one address"),
        (
            lambda t: t.send("user", "x", to=5),
            TypeError,
            "to must be an agent id or several, got 5",
        ),
        (
            lambda t: t.send("user", "x", to=[]),
            StateError,
            "send(to=...) names no agent; give one agent id or several",
        ),
        (lambda t: t.send("user", "x", to=["a", 7]), NameNotAString, "agent id must be a string"),
        (lambda t: t.send("user", "x", to=["a", ""]), InvalidName, "agent id must not be empty"),
        (lambda t: t.send("user", "x", group="g\x00"), InvalidName, "group 'g\\x00' holds a NUL"),
        (lambda t: t.send("user", "x", topic=""), InvalidName, "topic must not be empty"),
        (
            lambda t: t.send("user", "x", group="nope"),
            StateError,
            "group 'nope' is not a role of team 't'; groups are roles: ['a', 'b']",
        ),
        (lambda t: t.send("", "x", to="a"), TypeError, "sender_id must be a non-empty string"),
        (lambda t: t.send("user", "x\ud800", to="a"), InvalidName, "content 'x"),
        (
            lambda t: t.spawn("a", "t", agent_id="x/y"),
            InvalidName,
            "agent id 'x/y' holds '/', which separates a thread id's parts",
        ),
        (lambda t: t.spawn("a", "t", agent_id=""), InvalidName, "agent id must not be empty"),
        (
            lambda t: t.spawn("b", "t", agent_id="a"),
            StateError,
            "team 't' has agent 'a' already, of role 'a', not 'b'; choose another agent_id",
        ),
        (lambda t: t.subscribe("a", ""), InvalidName, "topic must not be empty"),
        (
            lambda t: t.resume("ghost", "call-1", Decision.approve()),
            UnknownAgent,
            "team 't' has no agent 'ghost'; its agents are ['a']",
        ),
        (lambda t: t.cancel("ghost"), UnknownAgent, "team 't' has no agent 'ghost'"),
    ],
)
async def test_a_refused_call_says_what_was_wrong(
    stores: tuple[ProfileStore, ThreadStore],
    call: Callable[[AgentTeam], Any],
    error: type[Exception],
    message: str,
) -> None:
    async with team_of(
        stores, {"a": Role(model=answer_ok), "b": Role(model=answer_ok)}, team_id="t"
    ) as team:
        team.spawn("a", "task", agent_id="a")
        await team.run_until_idle()
        with pytest.raises(error) as raised:
            result = call(team)
            if asyncio.iscoroutine(result):
                await result
        assert str(raised.value).startswith(message), str(raised.value)


async def test_an_unknown_recipient_is_named(stores: tuple[ProfileStore, ThreadStore]) -> None:
    async with team_of(stores, {"a": Role(model=answer_ok)}, team_id="t") as team:
        team.spawn("a", "task", agent_id="a")
        with pytest.raises(UnknownAgent) as raised:
            await team.send("user", "x", to=["a", "ghost"])
    assert raised.value.agent_id == "ghost" and raised.value.team_id == "t"
    assert "'a'" in str(raised.value)  # the agents it does have


async def test_group_and_topic_reach_all_but_the_sender_and_say_how(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    roles = {"a": Role(model=answer_ok, topics=("news",)), "b": Role(model=answer_ok)}
    async with team_of(stores, roles) as team:
        for agent_id, role in (("a1", "a"), ("a2", "a"), ("b1", "b")):
            team.spawn(role, "task", agent_id=agent_id)
        assert await team.send("a1", "to the group", group="a") == 1
        assert await team.send("a2", "to the topic", topic="news") == 1
        assert await team.send("b1", "to two", to=["a1", "a2", "a1"]) == 2
        await team.run_until_idle()
        headers = {}
        for agent_id in ("a1", "a2", "b1"):
            headers[agent_id] = [
                m.content.split("\n")[0]
                for m in await history(team, agent_id)
                if AgentTeam.sender_of(m) is not None
            ]
    assert headers == {
        "a1": ["[message from a2 (topic news)]", "[message from b1]"],
        "a2": ["[message from a1 (group a)]", "[message from b1]"],
        "b1": [],
    }


async def test_letters_a_reopened_team_posts_again_arrive_once(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    """A RUN_END hook's letter stays in the sender's outbox until its next run; a team
    opened anew (another process) posts it again, and the inbox takes it once."""
    teams: list[AgentTeam] = []
    report = _ReportsAtRunEnd(teams, "w", group="boss")
    roles = {"worker": Role(model=answer_ok, plugins=[report]), "boss": Role(model=answer_ok)}
    for _ in range(3):  # the first process, then two more that look at w's outbox afresh
        async with team_of(stores, roles, team_id="t") as team:
            teams.append(team)
            team.spawn("boss", "wait", agent_id="b1")
            team.spawn("boss", "wait", agent_id="b2")
            team.spawn("worker", "work", agent_id="w")
            await team.run_until_idle()
    for boss in ("b1", "b2"):
        assert mail(await history(teams[-1], boss)) == [("w", "finished t/w:run-1")]
        headers = [m.content.split("\n")[0] for m in await history(teams[-1], boss)]
        assert "[message from w (group boss)]" in headers


async def test_two_teams_spawning_one_id_with_two_roles_at_once_get_one_agent(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    roles = {"a": Role(model=answer_ok), "b": Role(model=answer_ok)}
    async with (
        team_of(stores, roles, team_id="t") as one,
        team_of(stores, roles, team_id="t") as two,
    ):
        one.spawn("a", "as a", agent_id="w")
        two.spawn("b", "as b", agent_id="w")
        outcomes = await asyncio.gather(
            one.send("user", "hi", to="w"), two.send("user", "hi", to="w"), return_exceptions=True
        )
        refused = [o for o in outcomes if isinstance(o, StateError)]
        assert len(refused) == 1, outcomes
        kept, lost = ("a", "b") if isinstance(outcomes[1], StateError) else ("b", "a")
        assert str(refused[0]).endswith(
            f"team 't' has agent 'w' already, of role '{kept}', not '{lost}'; choose another "
            f"agent_id"
        )
        await one.run_until_idle()
        (info,) = [i for i in one.list_agents() if i.id == "w"]
        contents = [m.content for m in await history(one, "w") if m.role == "user"]
    assert contents[0] == f"as {info.role}" and len(contents) == 2  # its task, one hi


async def test_roster_changes_from_two_teams_at_once_are_all_kept(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    """The roster is one entry: every change is a compare-and-set on the version read, so
    concurrent changes from two processes are all kept (none overwrites another)."""
    roles = {"a": Role(model=answer_ok)}
    async with (
        team_of(stores, roles, team_id="t") as one,
        team_of(stores, roles, team_id="t") as two,
    ):
        one.spawn("a", "task", agent_id="w")
        await one.run_until_idle()
        await two.run_until_idle()

        async def subscribe(team: AgentTeam, name: str) -> None:
            for n in range(8):
                team.subscribe("w", f"{name}-{n}")
                await team.send("user", "x", to="w")  # records the subscription

        await asyncio.gather(subscribe(one, "one"), subscribe(two, "two"))
        for name in ("one", "two"):
            for n in range(8):
                assert await one.send("user", "news", topic=f"{name}-{n}") == 1, (name, n)
        for _ in range(2):  # the second time subscribed already: nothing to write
            one.subscribe("w", "again")
            assert await one.send("user", "news", topic="again") == 1


@pytest.mark.slow
async def test_a_roster_that_keeps_changing_is_an_error_that_says_so() -> None:
    class Contended(MemoryProfileStore):
        contended = False

        async def set(self, namespace: str, key: str, value: Any, **kw: Any) -> Any:
            if namespace == "statekernel.team_roster" and self.contended:
                raise VersionConflict("statekernel.team_roster", key, 1, 2)
            return await super().set(namespace, key, value, **kw)

    store = Contended()
    async with AgentTeam({"a": Role(model=answer_ok)}, profile_store=store, team_id="t") as team:
        team.spawn("a", "task", agent_id="w")
        await team.run_until_idle()
        store.contended = True
        team.subscribe("w", "news")
        with pytest.raises(StateError) as raised:
            await team.run_until_idle()
        store.contended = False
    assert "the roster of team 't' kept changing under this process (64 writes" in str(raised.value)


class _SavesFail(MemoryThreadStore):
    """A thread store whose next `fail` saves fail, as a disk that filled up does."""

    fail = 0

    async def save(self, thread_id: str, save: Any, *, expected_position: int) -> None:
        if self.fail:
            self.fail -= 1
            raise OSError("no space left on device")
        await super().save(thread_id, save, expected_position=expected_position)


async def test_pruning_keeps_every_letter_no_saved_cursor_counts_as_delivered() -> None:
    """Delivered letters are pruned from an inbox by the cursor the thread store holds, so a
    run that delivered a letter and could not save it finds the letter there again."""
    threads = _SavesFail()
    calls = 0

    async def model(request: InferenceRequest) -> InferenceResponse:
        nonlocal calls
        calls += 1
        if calls == 1:  # while a's first run goes on, a letter from a sender it never met
            late = team.send("s2", "new", to="a")
            await asyncio.get_running_loop().create_task(late, context=contextvars.Context())
        if calls == 2:  # the run that delivers it saves nothing: its step and end fail
            threads.fail = 2
        return InferenceResponse("ok")

    team = AgentTeam(
        {"a": Role(model=model)}, profile_store=MemoryProfileStore(), thread_store=threads
    )
    async with team:
        team.spawn("a", "task", agent_id="a")
        for n in range(40):  # more than an inbox keeps before it is pruned
            await team.send("s1", f"old {n}", to="a")
        report = await team.run_until_idle()
        assert report.agents["a"].outcomes == ("success", "failure", "success")
    assert mail(await history(team, "a"))[-1] == ("s2", "new")


async def test_a_send_that_keeps_losing_races_takes_the_atomic_update_and_stays_once() -> None:
    """After four lost compare-and-set races a send takes the store's atomic update, which
    keeps every promise of the compare-and-set: a repeated message id is taken once."""

    class Contended(MemoryProfileStore):
        async def set(self, namespace: str, key: str, value: Any, **kw: Any) -> Any:
            if namespace == "statekernel.team_inbox" and kw.get("expected_version"):
                raise VersionConflict(namespace, key, kw["expected_version"], None)
            return await super().set(namespace, key, value, **kw)

    async with AgentTeam({"a": Role(model=answer_ok)}, profile_store=Contended()) as team:
        team.spawn("a", "task", agent_id="a")
        for _ in range(3):
            assert await team.send("user", "once", to="a", message_id="m-1") == 1
        await team.send("user", "twice", to="a")
        await team.run_until_idle()
    assert mail(await history(team, "a")) == [("user", "once"), ("user", "twice")]


async def test_a_resumed_run_that_spawns_names_a_new_agent(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    """A run resumed after a gate suspended its tool starts without collecting its mail: its
    spawns are still named after its outbox as the thread holds it."""
    teams: list[AgentTeam] = []

    async def hire(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        return teams[-1].spawn("helper", "help")

    class Approval(Plugin):
        id = "approval"

        def register(self, registrar: PluginRegistrar) -> None:
            registrar.register_tool_gate(lambda ctx: Suspend("approve the hire"))

    roles = {
        "boss": Role(
            model=calling("hire", lambda r: {}), tools={"hire": hire}, plugins=[Approval()]
        ),
        "helper": Role(model=answer_ok),
    }
    for round_ in range(3):  # three processes: the last two resume what the one before left
        async with team_of(stores, roles, team_id="t") as team:
            teams.append(team)
            if round_ == 0:
                team.spawn("boss", "hire", agent_id="boss")
            else:  # nothing has run in this process before the resume
                (pending,) = await team.agent("boss").pending("t/boss")
                resumed = await team.resume("boss", pending.id, Decision.approve())
                assert resumed.outcome == "success"
                await team.send("user", "hire again", to="boss")
            await team.run_until_idle()  # boss hires again, and waits for approval
    helpers = [i for i in teams[-1].list_agents() if i.role == "helper"]
    assert len(helpers) == 2 and len({h.id for h in helpers}) == 2


async def test_a_send_to_an_agent_a_restore_elsewhere_dropped_raises_unknown_agent(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    roles = {"a": Role(model=answer_ok)}
    async with (
        team_of(stores, roles, team_id="t") as one,
        team_of(stores, roles, team_id="t") as two,
    ):
        one.spawn("a", "task", agent_id="keeper")
        await one.save_snapshot("before-x")
        one.spawn("a", "task", agent_id="x")
        await one.run_until_idle()
        await two.run_until_idle()  # two knows x
        await one.restore_snapshot("before-x")  # x is dropped
        assert await two.send("user", "to keeper", to="keeper") == 1  # followed to its new thread
        with pytest.raises(UnknownAgent) as raised:
            await two.send("user", "to x", to="x")  # two's roster is stale: it finds out
        assert raised.value.agent_id == "x"
        await one.run_until_idle()
    assert mail(await history(one, "keeper")) == [("user", "to keeper")]


async def test_a_page_holding_a_letter_of_a_sender_no_saved_cursor_counts_is_kept() -> None:
    """An inbox page is dropped only when the saved cursor counts every letter in it: a
    letter from a sender the cursor has never met (it arrived while the run that saved the
    cursor went on) keeps its page, and is there for a later run when the run that
    delivers it first cannot save."""
    threads = _SavesFail()
    calls = 0

    async def model(request: InferenceRequest) -> InferenceResponse:
        nonlocal calls
        calls += 1
        if calls == 1:  # the inbox's 64th letter, from a new sender: it seals the 2nd page
            late = team.send("s2", "new", to="a")
            await asyncio.get_running_loop().create_task(late, context=contextvars.Context())
        if calls == 2:  # the run that delivers it saves nothing: its step and end fail
            threads.fail = 2
        return InferenceResponse("ok")

    team = AgentTeam(
        {"a": Role(model=model)}, profile_store=MemoryProfileStore(), thread_store=threads
    )
    async with team:
        team.spawn("a", "task", agent_id="a")  # the inbox's first letter
        for n in range(62):  # then 62 letters: a page of 32, and 31 in the head
            await team.send("s1", f"old {n}", to="a")
        report = await team.run_until_idle()  # prunes by the saved cursor on the way
        assert report.agents["a"].outcomes == ("success", "failure", "success")
    assert mail(await history(team, "a"))[-1] == ("s2", "new")


async def test_agents_spawned_from_a_run_are_named_after_its_thread_and_outbox_numbers() -> None:
    """A run's spawns are its outbox's entries 1, 2, ... in the order made, across its
    steps and its runs: `<role>-<digest of thread and number>`, the same however often the
    model is asked again (so a crash cannot make a second agent)."""

    def digest(thread_id: str, number: str) -> str:  # as docs/team.md gives it
        return hashlib.sha256(f"{thread_id}\x00{number}".encode()).hexdigest()[:8]

    made: list[str] = []

    async def hire(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        made.extend(team.spawn("helper", f"help {n}") for n in range(2))
        return "hired"

    async def boss(request: InferenceRequest) -> InferenceResponse:
        roles = [m.role for m in request.messages]
        last_ask = len(roles) - 1 - roles[::-1].index("user")
        if roles[last_ask:].count("tool") < 2:  # two steps of hiring a run
            call = ToolCall(f"c-{random.random()}", "hire", {})
            return InferenceResponse("", (call,))
        return InferenceResponse("done")

    roles = {"boss": Role(model=boss, tools={"hire": hire}), "helper": Role(model=answer_ok)}
    team = AgentTeam(roles, profile_store=MemoryProfileStore())
    async with team:
        team.spawn("boss", "hire", agent_id="boss")
        await team.run_until_idle()
        await team.send("user", "hire again", to="boss")
        await team.run_until_idle()
    thread = next(i.thread_id for i in team.list_agents() if i.id == "boss")
    assert made == [f"helper-{digest(thread, str(n))}" for n in range(1, 9)]
    assert {i.id for i in team.list_agents() if i.role == "helper"} == set(made)


async def test_every_message_of_an_agents_history_has_its_own_id_the_task_too() -> None:
    """A history's messages can be told apart by id (a UI's key, a trace's reference),
    whatever delivered them: the task, mail, the model's answers."""
    async with AgentTeam({"a": Role(model=answer_ok)}, profile_store=MemoryProfileStore()) as team:
        team.spawn("a", "task", agent_id="a")
        await team.send("user", "hi", to="a")
        await team.run_until_idle()
        await team.send("user", "hi", to="a")
        await team.run_until_idle()
        messages = await history(team, "a")
    assert messages[0].content == "task"
    ids = [m.id for m in messages]
    assert None not in ids and len(set(ids)) == len(ids) == 5


async def test_a_resumed_run_that_fails_waits_no_more_and_restarts() -> None:
    """An agent waiting on a decision whose resumed run fails is no longer "waiting": under
    `restart_policy="on_failure"` it is due again, runs, and is done."""
    asked = 0

    async def model(request: InferenceRequest) -> InferenceResponse:
        nonlocal asked
        asked += 1
        if asked == 2:  # the model's answer to the published post: the service is down
            raise RuntimeError("model service unavailable")
        return await calling("publish", lambda r: {"text": "the post"})(request)

    roles = {"pub": Role(model=model, plugins=[Approval()], tools=[publish])}
    team = AgentTeam(
        roles,
        profile_store=MemoryProfileStore(),
        restart_policy="on_failure",
        max_restarts=1,
    )
    async with team:
        p = team.spawn("pub", "post it")
        await team.run_until_idle()
        (pending,) = await team.agent("pub").pending(team.list_agents()[0].thread_id)
        resumed = await team.resume(p, pending.id, Decision.approve())
        assert resumed.outcome == "failure"
        assert team.list_agents()[0].status == "idle"  # due again, not "waiting"
        report = await team.run_until_idle()
        assert report.agents[p].status == "done" and report.agents[p].restarts == 0


async def test_an_outbox_empties_once_its_letters_are_posted_and_the_model_answers(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    """A letter stays in its sender's outbox (in the sender's thread) only until the model's
    next answer: the thread does not grow with every letter ever sent."""
    roles = {
        "s": Role(model=calling("send_message", lambda r: {"content": "hi", "to": "r"})),
        "r": Role(model=answer_ok),
    }
    async with team_of(stores, roles) as team:
        team.spawn("r", "listen", agent_id="r")
        team.spawn("s", "say hi", agent_id="s")
        await team.run_until_idle()
        thread = next(i.thread_id for i in team.list_agents() if i.id == "s")
        state = await team.agent("s").kernel.get_state(thread)
        assert state.to_dict()["statekernel.outbox"].entries == ()
        assert mail(await history(team, "r")) == [("s", "hi")]


async def test_a_second_team_object_spawning_an_id_another_took_adopts_its_thread(
    stores: tuple[ProfileStore, ThreadStore],
) -> None:
    """`spawn` of an id another process (here another team object) holds returns it and
    changes nothing: the task it was given is not posted, mail to it reaches the one thread."""
    roles = {"a": Role(model=answer_ok)}
    async with (
        team_of(stores, roles, team_id="t") as one,
        team_of(stores, roles, team_id="t") as two,
    ):
        await two.run_until_idle()  # two reads the roster while it is empty
        one.spawn("a", "first task", agent_id="w")
        await one.run_until_idle()
        assert two.spawn("a", "second task", agent_id="w") == "w"
        assert await two.send("user", "hi", to="w") == 1  # (the spawn is stored first)
        (info,) = two.list_agents()
        assert info.thread_id == next(i.thread_id for i in one.list_agents())
        await two.run_until_idle()
        messages = await history(two, "w")
    assert next(m.content for m in messages if m.role == "user") == "first task"
    assert mail(messages) == [("user", "hi")]


async def test_subscribing_twice_is_subscribing_once() -> None:
    async with AgentTeam({"a": Role(model=answer_ok)}, profile_store=MemoryProfileStore()) as team:
        a = team.spawn("a", "task")
        for _ in range(2):
            team.subscribe(a, "news")
            assert await team.send("user", "extra!", topic="news") == 1
        await team.run_until_idle()
        assert mail(await history(team, a)) == [("user", "extra!"), ("user", "extra!")]


async def test_a_spawn_from_a_run_that_another_process_took_first_is_logged_and_passed(
    stores: tuple[ProfileStore, ThreadStore], caplog: pytest.LogCaptureFixture
) -> None:
    """Between the step that spawned it and its posting, another process spawned the same
    id with another role: the spawn is refused for good, said once in a warning, and what
    the outbox holds after it is still posted."""
    roles = {
        "boss": Role(model=calling("hire", lambda r: {})),
        "helper": Role(model=answer_ok),
        "other": Role(model=answer_ok),
    }

    async def hire(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        team.spawn("helper", "help", agent_id="w")
        await team.send("boss", "and you, hello", to="r")
        rival.spawn("other", "mine", agent_id="w")
        await rival.run_until_idle()  # stores the rival's spawn (and runs it)
        return "hired"

    roles["boss"] = Role(model=calling("hire", lambda r: {}), tools={"hire": hire})
    async with (
        team_of(stores, roles, team_id="t") as team,
        team_of(stores, roles, team_id="t", local_roles=["other"]) as rival,
    ):
        team.spawn("helper", "listen", agent_id="r")
        team.spawn("boss", "hire", agent_id="boss")
        with caplog.at_level(logging.WARNING, logger="statekernel"):
            await team.run_until_idle()
        assert {i.id: i.role for i in team.list_agents()}["w"] == "other"
        assert mail(await history(team, "r")) == [("boss", "and you, hello")]
    warned = [r.getMessage() for r in caplog.records if "could not be spawned" in r.getMessage()]
    assert len(warned) == 1
    assert warned[0].startswith("agent 'w' could not be spawned from thread 't/boss' and never")
    assert "already, of role 'other'" in warned[0]  # why: the rival's spawn


async def test_sender_of_names_whoever_sent_and_nothing_else() -> None:
    """`sender_of` reads a delivered message's id: a sender whose name holds ":" comes back
    whole; a message without an id, a spawned agent's task, and ids that only look alike
    name nobody."""
    async with AgentTeam({"a": Role(model=answer_ok)}, profile_store=MemoryProfileStore()) as team:
        team.spawn("a", "task", agent_id="a")
        await team.send("svc:billing", "invoice ready", to="a")
        await team.run_until_idle()
        messages = await history(team, "a")
    assert [AgentTeam.sender_of(m) for m in messages if m.role == "user"] == [None, "svc:billing"]
    for lookalike in (None, "mail:x:abc", "mail::3", "other:x:3", "mail:@task:1"):
        assert AgentTeam.sender_of(Message("user", "hi", id=lookalike)) is None, lookalike


class _InboxWritesFail(MemoryProfileStore):
    """Fails the `fail_at`-th inbox write after `arm()` (1: the first), once."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.count: int | None = None

    def arm(self) -> None:
        self.count = 0

    async def set(self, namespace: str, key: str, value: Any, **kw: Any) -> Any:
        if namespace == "statekernel.team_inbox" and self.count is not None:
            self.count += 1
            if self.count == self.fail_at:
                raise OSError("the disk is full")
        return await super().set(namespace, key, value, **kw)


@pytest.mark.parametrize(("fail_at", "model_fails"), [(1, False), (2, True)])
async def test_letters_whose_posting_failed_are_posted_later_once_each(
    fail_at: int, model_fails: bool
) -> None:
    """A step sends two letters; posting one of them fails (the first, or the second after
    the first landed), and in the second case the model then fails too: both letters still
    reach their recipients, once each, posted after a later save or by the next run."""
    profiles = _InboxWritesFail(fail_at)
    asked = 0

    async def boss(request: InferenceRequest) -> InferenceResponse:
        nonlocal asked
        asked += 1
        if asked == 1:
            profiles.arm()
            calls = tuple(
                ToolCall(f"c{n}-{random.random()}", "send_message", {"content": "hi", "to": r})
                for n, r in enumerate(("r1", "r2"))
            )
            return InferenceResponse("", calls)
        if asked == 2 and model_fails:
            raise RuntimeError("model service unavailable")
        return InferenceResponse("done")

    roles = {"boss": Role(model=boss), "r": Role(model=answer_ok)}
    team = AgentTeam(roles, profile_store=profiles, restart_policy="on_failure")
    async with team:
        team.spawn("r", "listen", agent_id="r1")
        team.spawn("r", "listen", agent_id="r2")
        team.spawn("boss", "write to both", agent_id="boss")
        report = await team.run_until_idle()
        assert report.agents["boss"].status == "done"
        for r in ("r1", "r2"):
            assert mail(await history(team, r)) == [("boss", "hi")]


async def test_a_letter_to_an_agent_a_restore_dropped_after_it_was_sent_is_logged_and_dropped(
    stores: tuple[ProfileStore, ThreadStore], caplog: pytest.LogCaptureFixture
) -> None:
    """A restore elsewhere drops the recipient between the tool call that sent the letter
    and its posting: nobody can be told any more (the step is saved), so the letter is
    dropped with a warning naming its sender and recipient, and the team goes on."""

    async def send_then_restore(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        await team.send("boss", "hi", to="x")  # x is still there: accepted
        await elsewhere.restore_snapshot("before-x")  # another process drops x
        return "sent"

    roles = {
        "boss": Role(model=calling("notify", lambda r: {}), tools={"notify": send_then_restore}),
        "a": Role(model=answer_ok),
    }
    async with (
        team_of(stores, roles, team_id="t", local_roles=["a"]) as elsewhere,
        team_of(stores, roles, team_id="t", local_roles=["boss"]) as team,
    ):
        team.spawn("boss", "notify x", agent_id="boss")
        await team.send("user", "(stores the spawn)", to="boss")
        await elsewhere.save_snapshot("before-x")
        elsewhere.spawn("a", "task", agent_id="x")
        await elsewhere.run_until_idle()
        with caplog.at_level(logging.WARNING, logger="statekernel"):
            await team.run_until_idle()
    dropped = [r.getMessage() for r in caplog.records if "was dropped" in r.getMessage()]
    assert dropped == ["a letter from 'boss' to agent 'x' was dropped: the team no longer has it"]


@pytest.mark.slow
async def test_a_team_of_more_agents_than_one_process_keeps_inbox_heads_of_takes_mail_to_all() -> (
    None
):
    """A process keeps the heads of the last 1,024 inboxes it wrote (to write the next
    letter without a read); a team with more agents than that spawns and mails them all."""
    async with AgentTeam({"a": Role(model=answer_ok)}, profile_store=MemoryProfileStore()) as team:
        for n in range(1_100):
            team.spawn("a", f"task {n}")
        assert await team.send("user", "to all", group="a") == 1_100
        assert await team.send("user", "again", group="a") == 1_100


async def test_a_step_end_hooks_spawn_after_a_tools_spawn_is_another_agent() -> None:
    """Entries of one step are numbered on through its phases: a STEP_END hook's spawn
    after a tool's spawn in the same step names a new agent, not the tool's one."""

    class HiresAtStepEnd(Plugin):
        id = "hires-at-step-end"

        def register(self, registrar: PluginRegistrar) -> None:
            registrar.register_phase_hook(Phase.STEP_END, self.done)

        async def done(self, ctx: PhaseContext) -> None:
            team.spawn("helper", "wrap up")

    async def hire(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        team.spawn("helper", "help")
        return "hired"

    def digest(thread_id: str, number: int) -> str:  # as docs/team.md gives it
        return hashlib.sha256(f"{thread_id}\x00{number}".encode()).hexdigest()[:8]

    async def boss(request: InferenceRequest) -> InferenceResponse:
        if request.messages[-1].role == "tool":
            return InferenceResponse("done")
        return InferenceResponse("", (ToolCall(f"c-{random.random()}", "hire", {}),))

    roles = {
        "boss": Role(model=boss, tools={"hire": hire}, plugins=[HiresAtStepEnd()]),
        "helper": Role(model=answer_ok),
    }
    team = AgentTeam(roles, profile_store=MemoryProfileStore())
    async with team:
        team.spawn("boss", "hire", agent_id="boss")
        await team.run_until_idle()
        helpers = [i.id for i in team.list_agents() if i.role == "helper"]
        thread = next(i.thread_id for i in team.list_agents() if i.id == "boss")
    # the tool's, then one at the end of each of the two steps
    assert helpers == [f"helper-{digest(thread, n)}" for n in (1, 2, 3)]
