"""One argument puts a Kernel, an Agent or an AgentTeam on stores: `stores=Stores(...)`,
most often `statekernel.stores.embedded(folder)`, one SQLite file that holds both kinds of
state, or `open_stores(db)` for a file or a PostgreSQL DSN."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekernel import (
    Agent,
    AgentTeam,
    InferenceResponse,
    Kernel,
    Role,
    ScriptedModel,
    StateError,
    Stores,
)
from statekernel.stores import (
    MemoryProfileStore,
    MemoryThreadStore,
    PostgresThreadStore,
    SqliteProfileStore,
    SqliteThreadStore,
    embedded,
    open_stores,
    stored_components,
)


async def test_an_agent_on_the_embedded_default_keeps_its_thread_in_one_file(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "data"  # made on first use
    async with embedded(folder) as stores:
        assert isinstance(stores.thread_store, SqliteThreadStore)
        assert isinstance(stores.profile_store, SqliteProfileStore)
        agent = Agent([], ScriptedModel([InferenceResponse(text="hi")]), stores=stores)
        await agent.run("t", ["hello"])
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".db") == ["statekernel.db"]
    assert "thread_store" in await stored_components(folder / "statekernel.db")
    async with embedded(folder) as again:  # another agent, as a new process would
        later = Agent([], ScriptedModel([InferenceResponse(text="again")]), stores=again)
        result = await later.run("t", ["and again"])
    assert [m.content for m in result.messages] == ["hello", "hi", "and again", "again"]


async def test_a_team_on_the_embedded_default(tmp_path: Path) -> None:
    async with embedded(tmp_path) as stores:
        team = AgentTeam(
            {"solo": Role(model=ScriptedModel([InferenceResponse(text="done")]))}, stores=stores
        )
        async with team:
            team.spawn("solo", "work", agent_id="a1")
            report = await team.run_until_idle()
        assert report.agents["a1"].results[-1].outcome == "success"
        assert await stores.thread_store.threads() == [f"{team.team_id}/a1"]


async def test_a_kernel_takes_stores_and_refuses_them_twice() -> None:
    pair = Stores(MemoryThreadStore(), MemoryProfileStore())
    kernel = Kernel([], stores=pair)
    assert kernel.thread_store is pair.thread_store and kernel.profile_store is pair.profile_store
    with pytest.raises(TypeError, match="give one or the other"):
        Kernel([], stores=pair, thread_store=MemoryThreadStore())
    with pytest.raises(TypeError, match="give one or the other"):
        Agent([], ScriptedModel([]), stores=pair, profile_store=MemoryProfileStore())
    with pytest.raises(TypeError, match="takes a statekernel.Stores"):
        Kernel([], stores=MemoryThreadStore())  # type: ignore[arg-type]
    with pytest.raises(StateError, match="stores=statekernel.stores.embedded"):
        AgentTeam({"r": Role(model=ScriptedModel([]))})


def test_open_stores_picks_the_backend_by_the_string() -> None:
    on_file = open_stores("some/where.db")
    assert isinstance(on_file.thread_store, SqliteThreadStore)
    on_server = open_stores("postgresql://user@127.0.0.1:1/db")
    assert isinstance(on_server.thread_store, PostgresThreadStore)
