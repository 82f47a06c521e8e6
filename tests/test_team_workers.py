"""Workers: a team served by `statekernel worker` processes on a real PostgreSQL, as an
operator runs it: three workers finish a 200-message team that the test only waits for
(`wait_idle`), a SIGKILLed worker's agents are taken over once its lease has passed, a
SIGTERMed one drains and exits 0, and an idle one sleeps."""

from __future__ import annotations

import asyncio
import datetime
import os
import random
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import team_worker_app as app
from workers import start_workers, stop_all

from statekernel import AgentTeam
from statekernel.stores import open_stores

pytestmark = pytest.mark.slow  # workers in processes of their own


def team_env(team_id: str, lease: float) -> dict[str, str]:
    return {"TEAM_WORKER_TEAM": team_id, "TEAM_WORKER_LEASE": str(lease)}


async def spawn_plan(
    dsn: str, team_id: str, seed: int, messages: int
) -> dict[str, list[tuple[int, str]]]:
    """The plan's agents spawned into the team, from this (test) process."""
    plans = app.plan(seed, messages)
    os.environ["TEAM_WORKER_TEAM"] = team_id
    async with open_stores(dsn) as stores, app.make_team(stores) as team:
        await app.start_plans(team, plans)
    return plans


async def wait_idle(dsn: str, team_id: str, timeout: float) -> bool:
    os.environ["TEAM_WORKER_TEAM"] = team_id
    async with open_stores(dsn) as stores, app.make_team(stores) as team:
        return await team.wait_idle(timeout=timeout)


async def check_delivered(
    dsn: str, team_id: str, plans: dict[str, list[tuple[int, str]]], pings: int = 0
) -> dict[str, list[datetime.datetime]]:
    """Every planned letter in its recipient's history once, in its sender's order, and
    `pings` letters from "user" to each; every agent through its plan and answered; every
    thread verifying. Returns when each agent's pings were delivered."""
    os.environ["TEAM_WORKER_TEAM"] = team_id
    delivered_at: dict[str, list[datetime.datetime]] = {}
    received: dict[str, list[tuple[str | None, str]]] = {}
    async with open_stores(dsn) as stores, app.make_team(stores) as team:
        kernel = team.agent("peer").kernel
        infos = {i.id: i for i in team.list_agents()}
        assert sorted(infos) == sorted(app.AGENTS)
        for agent_id, info in infos.items():
            assert (await kernel.verify(info.thread_id)).ok, agent_id
            history = tuple(
                (await kernel.get_state(info.thread_id)).to_dict()["statekernel.messages"]
            )
            received[agent_id] = [
                (AgentTeam.sender_of(m), m.content.split("\n", 1)[1])
                for m in history
                if AgentTeam.sender_of(m) is not None
            ]
            sent = [m for m in history if m.role == "tool"]
            assert len(sent) == len(plans[agent_id]), (agent_id, len(sent))  # none twice
            assert history[-1].role == "assistant" and history[-1].content == "done", agent_id
            ping_texts = [f"ping {n}" for n in range(pings)]
            assert [t for who, t in received[agent_id] if who == "user"] == ping_texts
            delivered_at[agent_id] = [
                record.created_at
                for record in await kernel.history(info.thread_id)
                if "agent:mail" in record.sources and any("ping" in repr(op) for op in record.ops)
            ]
    for sender, items in plans.items():
        for n, to in items:
            assert received[to].count((sender, f"m{n}")) == 1, (sender, n, received[to])
    total = sum(len(p) for p in plans.values()) + (1 + pings) * len(app.AGENTS)  # + plans
    assert sum(len(mail) for mail in received.values()) == total
    for mail in received.values():
        for sender in app.AGENTS:
            numbers = [int(text[1:]) for who, text in mail if who == sender]
            assert numbers == sorted(numbers), (sender, mail)
    return delivered_at


async def test_three_workers_run_a_200_message_team_to_completion(postgres_dsn: str) -> None:
    team_id = f"team-{uuid.uuid4().hex[:8]}"
    workers = start_workers(postgres_dsn, 3, team_env(team_id, 10))
    try:
        plans = await spawn_plan(postgres_dsn, team_id, seed=7, messages=app.MESSAGES)
        assert await wait_idle(postgres_dsn, team_id, timeout=120)
    finally:
        codes = stop_all(workers)
    assert codes == [0, 0, 0], [w.output for w in workers]
    assert not any("failed" in w.output or "Traceback" in w.output for w in workers)
    await check_delivered(postgres_dsn, team_id, plans)
    # The work was shared: each worker ran some of the agents.
    ran = [int(w.output.split("stopped after ")[1].split()[0]) for w in workers]
    assert sum(ran) > 0 and sum(1 for n in ran if n) >= 2, ran


async def send_pings(dsn: str, team_id: str, number: int) -> None:
    """One letter from "user" to every agent (`ping <number>`), sent from this process."""
    os.environ["TEAM_WORKER_TEAM"] = team_id
    async with open_stores(dsn) as stores, app.make_team(stores) as team:
        await team.send("user", f"ping {number}", to=app.AGENTS, message_id=f"ping-{number}")


async def test_a_sigkilled_workers_agents_are_taken_over_once_its_lease_has_passed(
    postgres_dsn: str, trials: Callable[[int, int], int]
) -> None:
    """SIGKILL one of three workers at a random point of the work (between steps too),
    then send every agent a letter: each is delivered within the lease and 2 s of the kill,
    by the survivors, and every letter of the plan is delivered once, in order."""
    lease = 2.0
    rng = random.Random(4242)
    for trial in range(trials(20, 2)):
        team_id = f"kill-{trial}-{uuid.uuid4().hex[:6]}"
        workers = start_workers(postgres_dsn, 3, team_env(team_id, lease))
        victim = workers[rng.randrange(3)]
        try:
            plans = await spawn_plan(postgres_dsn, team_id, seed=trial, messages=48)
            await asyncio.sleep(rng.uniform(0.05, 0.8))
            victim.kill()
            killed_at = datetime.datetime.now(datetime.UTC)
            await send_pings(postgres_dsn, team_id, 0)
            assert await wait_idle(postgres_dsn, team_id, timeout=60)
        finally:
            codes = stop_all(workers)
        assert [c for w, c in zip(workers, codes, strict=True) if w is not victim] == [0, 0]
        delivered = await check_delivered(postgres_dsn, team_id, plans, pings=1)
        late = {
            agent: (times[0] - killed_at).total_seconds()
            for agent, times in delivered.items()
            if (times[0] - killed_at).total_seconds() > lease + 2
        }
        assert not late, (trial, late)


async def test_a_sigtermed_worker_drains_exits_0_and_releases_its_leases(postgres_dsn: str) -> None:
    """SIGTERM mid-work: the worker ends its agents' steps, exits 0, and its agents go on
    in the other worker at once (the lease is 30 s: the test would time out waiting for
    it); nothing is lost."""
    team_id = f"term-{uuid.uuid4().hex[:6]}"
    workers = start_workers(postgres_dsn, 2, team_env(team_id, 30))
    try:
        plans = await spawn_plan(postgres_dsn, team_id, seed=11, messages=app.MESSAGES)
        await asyncio.sleep(0.5)
        started = time.monotonic()
        assert workers[0].stop(signal.SIGTERM) == 0, workers[0].output
        took = time.monotonic() - started
        assert await wait_idle(postgres_dsn, team_id, timeout=25)
    finally:
        codes = stop_all(workers)
    assert codes == [0, 0], [w.output for w in workers]
    assert took < 10, took  # one step of each agent (a model call of up to 10 ms and a save)
    assert "Traceback" not in workers[0].output
    await check_delivered(postgres_dsn, team_id, plans)
    async with open_stores(postgres_dsn) as stores:
        beats = await stores.profile_store.list("statekernel.team_worker", f"{team_id}/")
    assert beats == []  # both released theirs


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time a process has used (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
async def test_an_idle_worker_sleeps(postgres_dsn: str, trials: Callable[[int, int], int]) -> None:
    """After its work, a worker with no mail uses under 1 % of a core."""
    team_id = f"idle-{uuid.uuid4().hex[:6]}"
    (worker,) = start_workers(postgres_dsn, 1, team_env(team_id, 10))
    try:
        await spawn_plan(postgres_dsn, team_id, seed=3, messages=16)
        assert await wait_idle(postgres_dsn, team_id, timeout=60)
        window = trials(10, 5)  # seconds
        before = cpu_seconds(worker.process.pid)
        await asyncio.sleep(window)
        used = cpu_seconds(worker.process.pid) - before
    finally:
        assert stop_all([worker]) == [0]
    assert used < 0.01 * window, f"{used:.3f} s of CPU in {window} s idle"
