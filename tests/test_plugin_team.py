"""Team context: a parent and its children share one record; other teams never see it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from statekernel import (
    Agent,
    InferenceResponse,
    ProfileAccess,
    ProfileStore,
    ScriptedModel,
    StateScope,
    ToolCall,
)
from statekernel.lowlevel import Entry
from statekernel.plugins import (
    ContextInjection,
    Team,
    TeamContext,
    TeamData,
    extend_team,
    team_scope,
)
from statekernel.stores import MemoryProfileStore, SqliteProfileStore


class Interleaving:
    """A ProfileStore that yields to other tasks before every call it delegates, so that
    concurrent read-modify-writes really interleave (a blind write would lose updates)."""

    def __init__(self, store: ProfileStore) -> None:
        self.store = store

    async def get(self, namespace: str, key: str) -> Entry | None:
        await asyncio.sleep(0)
        return await self.store.get(namespace, key)

    async def set(
        self, namespace: str, key: str, value: Any, *, expected_version: int | None = None
    ) -> Entry:
        await asyncio.sleep(0)
        return await self.store.set(namespace, key, value, expected_version=expected_version)

    async def delete(self, namespace: str, key: str) -> None:
        await self.store.delete(namespace, key)

    async def list(self, namespace: str, prefix: str = "") -> list[Entry]:
        return await self.store.list(namespace, prefix)

    async def clear(self, namespace: str) -> None:
        await self.store.clear(namespace)

    async def close(self) -> None:
        await self.store.close()

    async def __aenter__(self) -> Interleaving:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


StoreFactory = Callable[[Path], ProfileStore]


@pytest.fixture(
    params=[
        lambda path: Interleaving(MemoryProfileStore()),
        lambda path: SqliteProfileStore(path / "profile.db"),
    ],
    ids=["memory", "sqlite"],
)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ProfileStore]:
    factory: StoreFactory = request.param
    async with factory(tmp_path) as opened:
        yield opened


def adds_goal(goal: str) -> ScriptedModel:
    call = ToolCall("call-goal", "add_team_goal", {"goal": goal})
    return ScriptedModel([InferenceResponse("adding", (call,)), InferenceResponse("done")])


def child(model: ScriptedModel, store: ProfileStore) -> Agent:
    team = Team()
    return Agent([ContextInjection(), team], model, team.tools(), profile_store=store)


def team_messages(model: ScriptedModel) -> list[list[str]]:
    return [
        [m.content for m in request.messages if m.id == "context:team"]
        for request in model.requests
    ]


async def test_children_extend_the_parents_record_concurrently_and_lose_nothing(
    store: ProfileStore,
) -> None:
    parent_model = ScriptedModel([InferenceResponse("delegating")])
    parent = Agent(
        [ContextInjection(), Team(goals=["launch v1"])], parent_model, profile_store=store
    )
    await parent.run("p", ["plan the launch"])

    models = [adds_goal(f"goal from child {i}") for i in range(3)]
    results = await asyncio.gather(
        *(
            child(model, store).run(f"child-{i}", ["help"], parent_thread_id="p")
            for i, model in enumerate(models)
        )
    )
    assert [r.outcome for r in results] == ["success"] * 3

    team = await ProfileAccess(store).read(TeamContext, StateScope.parent_thread("p"))
    assert team.goals[0] == "launch v1"
    assert sorted(team.goals[1:]) == [f"goal from child {i}" for i in range(3)]

    for i, model in enumerate(models):
        first, second = team_messages(model)
        assert len(first) == 1 and "- launch v1" in first[0]  # seeded by the parent
        assert f"- goal from child {i}" in second[0]  # its own addition, one step later

    outsider_model = adds_goal("a goal for team q")
    await child(outsider_model, store).run("child-q", ["help"], parent_thread_id="q")
    first, second = team_messages(outsider_model)
    assert first == [] and "launch v1" not in second[0]
    assert (await ProfileAccess(store).read(TeamContext, StateScope.parent_thread("p"))) == team


async def test_the_parent_reads_what_its_children_added_in_its_next_run() -> None:
    store = MemoryProfileStore()
    parent_model = ScriptedModel()
    parent = Agent(
        [ContextInjection(), Team(goals=["launch v1"])], parent_model, profile_store=store
    )
    await parent.run("p", ["plan"])
    await child(adds_goal("write the docs"), store).run("c", ["help"], parent_thread_id="p")
    await parent.run("p", ["status?"])

    (before,), (after,) = team_messages(parent_model)
    assert "write the docs" not in before and "- write the docs" in after
    team = await ProfileAccess(store).read(TeamContext, StateScope.parent_thread("p"))
    assert team.goals == ("launch v1", "write the docs")  # seeding again added no duplicate


async def test_notes_and_helpers() -> None:
    store = MemoryProfileStore()
    access = ProfileAccess(store)
    scope = StateScope.parent_thread("p")
    await extend_team(access, scope, goals=["a", "b"], notes=["n1"])
    await extend_team(access, scope, goals=["b", "c"], notes=["n1", "n2"])
    assert await access.read(TeamContext, scope) == TeamData(("a", "b", "c"), ("n1", "n2"))

    note = ToolCall("call-note", "add_team_note", {"note": "the API is flaky"})
    model = ScriptedModel([InferenceResponse("noting", (note,))])
    await child(model, store).run("c", ["x"], parent_thread_id="p")
    assert (await access.read(TeamContext, scope)).notes[-1] == "the API is flaky"


async def test_team_scope_follows_the_parent_thread() -> None:
    seen: list[StateScope] = []
    where = InferenceResponse("x", (ToolCall("c", "where", {}),))
    agent = Agent(
        [],
        ScriptedModel([where, InferenceResponse("ok"), where]),
        {"where": lambda a, ctx: seen.append(team_scope(ctx.run))},
    )
    await agent.run("solo", ["x"])
    await agent.run("kid", ["x"], parent_thread_id="boss")
    assert seen == ["parent_thread::solo", "parent_thread::boss"]


async def test_a_bad_tool_call_is_a_tool_error_the_model_can_fix() -> None:
    call = ToolCall("call-goal", "add_team_goal", {"text": "oops"})
    model = ScriptedModel([InferenceResponse("adding", (call,))])
    result = await child(model, MemoryProfileStore()).run("c", ["x"], parent_thread_id="p")
    (message,) = [m for m in result.messages if m.role == "tool"]
    assert message.is_error and "invalid arguments for tool 'add_team_goal'" in message.content
    assert "'goal': Field required" in message.content and "'text'" in message.content


async def test_without_a_profile_store_the_run_fails_saying_how_to_fix_it() -> None:
    agent = Agent([ContextInjection(), Team()], ScriptedModel())
    result = await agent.run("c", ["x"], parent_thread_id="p")
    assert result.outcome == "failure"
    assert "needs a ProfileStore" in str(result.error)
    assert "profile_store=" in str(result.error)
