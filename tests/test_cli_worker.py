"""`statekernel worker` as a user meets it on a SQLite file: what it says when the
application is wrong (one line, exit 2, the store untouched), and that a signal drains it
and it exits 0."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from workers import HERE, Worker

from statekernel import AgentTeam, InferenceResponse, Role
from statekernel.stores import open_stores

pytestmark = pytest.mark.slow  # `statekernel worker`, run as a process


def worker(db: Path, app: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statekernel", "worker", app, "--store", str(db), *args],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("app", "says"),
    [
        ("no_such_module:make", "no module 'no_such_module'"),
        ("team_worker_app:no_such_name", "module 'team_worker_app' has no 'no_such_name'"),
        ("team_worker_app", "write it as module:attr"),
        ("team_worker_app:AGENTS", "not a factory"),
        ("team_worker_app:not_a_team", "returned str 'a team?', not an AgentTeam"),
        ("team_worker_app:failing", "raised RuntimeError when called with the Stores: the model"),
    ],
)
def test_an_application_that_is_not_a_team_factory_is_one_line_and_exit_2(
    tmp_path: Path, app: str, says: str
) -> None:
    done = worker(tmp_path / "team.db", app)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("statekernel: "), done.stderr
    assert says in lines[0]


def test_roles_the_team_does_not_have_are_refused(tmp_path: Path) -> None:
    done = worker(tmp_path / "team.db", "team_worker_app:make_team", "--roles", "peer,chef")
    assert done.returncode == 2, done.stderr
    assert "['chef']" in done.stderr and "it runs ['peer']" in done.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_drains_the_worker_and_it_exits_0(tmp_path: Path, signum: int) -> None:
    running = Worker(str(tmp_path / "team.db"), {"TEAM_WORKER_TEAM": "cli"})
    running.wait_for("serving team 'cli'")
    assert running.stop(signum) == 0, running.output
    assert "stopped after 0 runs" in running.output
    assert "Traceback" not in running.output


def test_a_worker_tunes_the_garbage_collector_for_serving(tmp_path: Path) -> None:
    """Collections at Python's default threshold cost a worker holding many agents half its
    CPU: the worker freezes what the application built and collects less often."""
    log = tmp_path / "collector.txt"
    db = str(tmp_path / "team.db")
    env = {"COLLECTOR_LOG": str(log)}
    running = Worker(db, env, app="team_worker_app:collector_team")
    try:
        running.wait_for("serving team 'collector'")
        asyncio.run(_spawn_and_wait(db))
    finally:
        assert running.stop(signal.SIGTERM) == 0, running.output
    threshold, frozen = map(int, log.read_text().split())
    assert threshold >= 50_000
    assert frozen > 0


async def _spawn_and_wait(db: str) -> None:
    async with (
        open_stores(db) as stores,
        AgentTeam(
            {"peer": Role(model=lambda request: InferenceResponse("unused"))},
            stores=stores,
            team_id="collector",
        ) as team,
    ):
        team.spawn("peer", "note the collector", agent_id="c")
        assert await team.wait_idle(timeout=60)
