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

import pytest
import team_worker_app as app
from workers import start_workers, stop_all

from statekernel import AgentTeam
from statekernel.stores import open_stores

FULL_TRIALS = os.environ.get("STATEKERNEL_FULL_TRIALS") == "1"
"""`.ci/run` sets it: every trial the issue asks for; `make test` runs a few of each."""


def team_env(team_id: str, lease: float) -> dict[str, str]:
    return {"TEAM_WORKER_TEAM": team_id, "TEAM_WORKER_LEASE": str(lease)}


async def spawn_plan(
    dsn: str, team_id: str, seed: int, messages: int
) -> dict[str, list[tuple[int, str]]]:
    """The plan's agents spawned into the team, from this (test) process."""
    plans = app.plan(seed, messages)
    os.environ["TEAM_WORKER_TEAM"] = team_id
    async with open_stores(dsn) as stores, app.make_team(stores) as team:
        for agent_id in app.AGENTS:
            team.spawn("peer", app.task(plans, agent_id), agent_id=agent_id)
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
    total = sum(len(p) for p in plans.values()) + pings * len(app.AGENTS)
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
