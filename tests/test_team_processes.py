"""One team, several processes at once, on a real SQLite file and a real PostgreSQL server:
spawns of one agent id racing (one agent, one thread, one seed, every acknowledged message
delivered), and every role run by two processes at once (no message lost, twice or stalled,
no orphan thread)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import team_spawn_process as spawning
from test_team_crashes import check_exactly_once, start_agents

from statekernel.stores import open_stores

pytestmark = pytest.mark.slow  # teams in two processes at once

HERE = Path(__file__).parent


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "team.db")
    return str(request.getfixturevalue("postgres_dsn"))


async def test_two_processes_spawning_the_same_ids_at_once_get_one_agent_each(db: str) -> None:
    start_at = time.time() + 1.5  # both processes imported and connected by then
    racers = [
        subprocess.Popen(
            [sys.executable, str(HERE / "team_spawn_process.py"), db, name, str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("left", "right")
    ]
    outputs = [racer.communicate(timeout=120) for racer in racers]
    assert [r.returncode for r in racers] == [0, 0], [err for _, err in outputs]
    for out, _ in outputs:
        assert out.split() == [str(i) for i in range(spawning.SPAWNS)]  # all acknowledged
    async with open_stores(db) as stores, spawning.team(stores) as team:
        report = await team.run_until_idle()
        assert report.idle
        kernel = team.agent("r").kernel
        agents = {info.id: info for info in team.list_agents()}
        assert sorted(agents) == sorted(f"a{i}" for i in range(spawning.SPAWNS))
        for i in range(spawning.SPAWNS):
            info = agents[f"a{i}"]
            threads = await kernel.threads(prefix=f"{spawning.TEAM_ID}/a{i}")
            assert [t for t in threads if t.split("/")[1] == f"a{i}"] == [info.thread_id]
            state = await kernel.get_state(info.thread_id)
            assert state.get(spawning.Seeded) == 1  # seeded once, not once per spawner
            contents = [m.content for m in state.to_dict()["statekernel.messages"]]
            assert contents.count(f"task {i}") == 1
            for name in ("left", "right"):
                assert contents.count(f"[message from {name}]\nfrom {name}") == 1, contents


@pytest.mark.parametrize("seed", [11, 12, 13])
async def test_every_role_in_two_processes_at_once_delivers_once_and_stalls_nothing(
    postgres_dsn: str, seed: int
) -> None:
    both = [start_agents(postgres_dsn, seed, "until-complete") for _ in range(2)]
    outputs = [process.communicate(timeout=180) for process in both]
    assert [p.returncode for p in both] == [0, 0], [err for _, err in outputs]
    for out, err in outputs:
        assert out.split() == ["started", "idle"]
        assert "Traceback" not in err and "failed" not in err, err  # a lost race is no failure
    await check_exactly_once(postgres_dsn, seed)
