"""One argument puts a Kernel, an Agent or an AgentTeam on stores: `stores=Stores(...)`,
most often `statekernel.stores.embedded(folder)`, one SQLite file that holds both kinds of
state, or `open_stores(db)` for a file or a PostgreSQL DSN."""

from __future__ import annotations

import os
import stat
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
    StoreNotOpened,
    Stores,
)
from statekernel.stores import (
    MemoryProfileStore,
    MemoryThreadStore,
    PostgresProfileStore,
    PostgresThreadStore,
    SqliteProfileStore,
    SqliteThreadStore,
    embedded,
    open_stores,
    redacted,
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
    assert isinstance(
        open_stores("postgres://user@127.0.0.1:1/db").profile_store, PostgresProfileStore
    )


def test_libpq_key_value_pairs_are_a_dsn_and_a_file_may_look_like_one() -> None:
    pairs = "host=127.0.0.1 port=1 dbname=db user=u password=pw"
    for dsn in (pairs, "dbname=db", "  host = 127.0.0.1"):
        assert isinstance(open_stores(dsn).thread_store, PostgresThreadStore), dsn
    for path in ("./host=1.db", "notes=1.db", "data/dbname=x.db", "host.db"):
        assert isinstance(open_stores(path).thread_store, SqliteThreadStore), path
    assert PostgresThreadStore(pairs).dsn == pairs  # as given


@pytest.mark.parametrize(
    ("dsn", "said"),
    [
        ("host=x password='Xq7 Zv9", "no closing quote"),
        ("host=x password=Xq7 Zv9", "is not a key=value pair"),
        ("host=x search_path=y", "'search_path' is not a libpq connection keyword"),
        ("host=x password=Xq7 search_path=Zv9", "the key is not a libpq connection keyword"),
    ],
)
def test_pairs_that_cannot_be_read_are_refused_without_their_values(dsn: str, said: str) -> None:
    for store in (PostgresThreadStore, PostgresProfileStore):
        with pytest.raises(StoreNotOpened, match=said) as refused:
            store(dsn)
        assert "Xq7" not in str(refused.value) and "Zv9" not in str(refused.value)


def test_redacted_hides_the_password_of_any_dsn_in_any_text() -> None:
    assert redacted("postgresql://u:s3cret@db:5432/x") == "postgresql://u:***@db:5432/x"
    assert redacted("postgres://u:p@ss@db/x?password=q&sslmode=require") == (
        "postgres://u:***@db/x?password=***&sslmode=require"
    )
    assert redacted("host=db password=s3cret user=u") == "host=db password=*** user=u"
    assert redacted("host=db password = 'a \\' b' user=u") == "host=db password = *** user=u"
    assert redacted("sslpassword=k dbname=x") == "sslpassword=*** dbname=x"
    assert redacted("open of 'host=db password=s3cret' failed") == (
        "open of 'host=db password=***' failed"
    )
    for shown in ("postgresql://u@db/x", "some/file.db", "host=db user=u"):
        assert redacted(shown) == shown
    store = PostgresProfileStore("postgresql://u:s3cret@127.0.0.1:1/x")
    assert repr(store) == "PostgresProfileStore('postgresql://u:***@127.0.0.1:1/x')"


async def test_the_folders_a_store_makes_are_owner_only(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()
    kept.chmod(0o755)
    umask = os.umask(0o002)  # one that would let the group in
    try:
        async with embedded(kept / "new" / "data") as stores:
            await stores.profile_store.set("n", "k", 1)
        shared = SqliteProfileStore(tmp_path / "team" / "shared.db", file_mode=0o640)
        async with shared:  # asked to share with the group: its folder lets the group in
            await shared.set("n", "k", 1)
    finally:
        os.umask(umask)
    assert mode(kept) == 0o755  # a folder that exists keeps its own
    assert (mode(kept / "new"), mode(kept / "new" / "data")) == (0o700, 0o700)
    assert mode(kept / "new" / "data" / "statekernel.db") == 0o600
    assert (mode(tmp_path / "team"), mode(tmp_path / "team" / "shared.db")) == (0o750, 0o640)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)
