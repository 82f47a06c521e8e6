"""The mailbox across crashes: a team's process is killed (SIGKILL) at random points while
five agents exchange messages, then started again; every message is delivered exactly once,
in order per sender, and every agent's thread verifies."""

from __future__ import annotations

import functools
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import team_agents_process as agents_process
import team_cut_process as cut_process
from team_process import AGENTS, TEAM_ID, plan, roles

from statekernel import AgentTeam, Decision, Message
from statekernel.stores import SqliteProfileStore, SqliteThreadStore, open_stores

pytestmark = pytest.mark.slow  # teams SIGKILLed at random points, trial after trial

HERE = Path(__file__).parent
SCRIPT = HERE / "team_process.py"
MESSAGES = 200


def start(tmp: Path, seed: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            str(tmp / "profiles.db"),
            str(tmp / "threads.db"),
            str(tmp / "acked.log"),
            str(MESSAGES),
            str(seed),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_then_finish(
    start: Callable[[], subprocess.Popen[str]], times: int, within: float, rng: random.Random
) -> int:
    """Start the program `times` times, each killed with SIGKILL at a random point of the
    first `within` seconds after it printed "started" (unless it finished first), then once
    more, to the end, with nothing else done in between. Returns how many were killed."""
    kills = 0
    for _ in range(times):
        process = start()
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "started"
        time.sleep(rng.uniform(0.0, within))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.communicate(timeout=60)
    finishing = start()
    out, err = finishing.communicate(timeout=120)
    assert finishing.returncode == 0 and out.split() == ["started", "idle"], err
    assert "Traceback" not in err, err
    return kills


async def delivered(tmp: Path) -> tuple[dict[str, list[tuple[str | None, str]]], list[bool]]:
    """Each agent's mail as its history holds it, and whether each thread verifies."""
    async with (
        SqliteProfileStore(tmp / "profiles.db") as profiles,
        SqliteThreadStore(tmp / "threads.db") as threads,
        AgentTeam(
            roles(random.Random()), profile_store=profiles, thread_store=threads, team_id=TEAM_ID
        ) as team,
    ):
        kernel = team.agent("peer").kernel
        received, verified = {}, []
        for info in team.list_agents():
            state = await kernel.get_state(info.thread_id)
            history: tuple[Message, ...] = tuple(state.to_dict()["statekernel.messages"])
            received[info.id] = [
                (AgentTeam.sender_of(m), m.content.split("\n", 1)[1])
                for m in history
                if AgentTeam.sender_of(m) is not None
            ]
            verified.append((await kernel.verify(info.thread_id)).ok)
        return received, verified


async def test_sigkilled_teams_deliver_every_message_exactly_once_in_sender_order(
    tmp_path: Path, trials: Callable[[int, int], int]
) -> None:
    rng = random.Random(2026)
    kills = 0
    count = trials(10, 4)
    for trial in range(count):
        tmp = tmp_path / f"trial-{trial}"
        tmp.mkdir()
        # an unhurried process does all its work in about 0.2 s after "started": kill it
        # somewhere in the first three quarters (under load its work only takes longer)
        kills += kill_then_finish(
            functools.partial(start, tmp, seed=trial), 1 + trial % 2, 0.15, rng
        )
        received, verified = await delivered(tmp)
        assert sorted(received) == AGENTS
        for n, (sender, recipient) in enumerate(plan(MESSAGES, trial)):
            assert received[recipient].count((sender, f"m{n}")) == 1, (trial, n)
        assert sum(len(mail) for mail in received.values()) == MESSAGES
        for mail in received.values():
            for sender in AGENTS:
                numbers = [int(text[1:]) for who, text in mail if who == sender]
                assert numbers == sorted(numbers), (trial, sender)
        assert all(verified), trial
        acked = (tmp / "acked.log").read_text().split()
        assert len(acked) == len(set(acked)) == MESSAGES
    assert kills >= count  # the processes were killed mid-work, not after they finished


# -- agents that send through their own tool, as real agents do ------------------------------

AGENTS_SCRIPT = HERE / "team_agents_process.py"


def start_agents(db: str, seed: int, *mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(AGENTS_SCRIPT), db, str(seed), *mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def check_exactly_once(db: str, seed: int) -> None:
    """What a user relies on after any crash: every planned letter in its recipient's
    history once, in its sender's order; the one helper p0 spawns spawned once; every agent
    done with its plan and answered (none stalled, waiting or failed); every thread
    verifying; no thread outside the roster."""
    plans = agents_process.plan(seed)
    async with (
        open_stores(db) as stores,
        agents_process.team(stores, random.Random()) as team,
    ):
        kernel = team.agent("peer").kernel
        infos = {info.id: info for info in team.list_agents()}
        helpers = [i for i in infos.values() if i.id not in agents_process.AGENTS]
        assert len(helpers) == 1 and helpers[0].role == "peer", sorted(infos)
        assert sorted(infos) == sorted([*agents_process.AGENTS, helpers[0].id])
        assert {i.status for i in infos.values()} <= {"idle", "done"}, infos
        threads = await kernel.threads(prefix=agents_process.TEAM_ID)
        assert sorted(threads) == sorted(i.thread_id for i in infos.values())  # no orphans
        received: dict[str, list[tuple[str | None, str]]] = {}
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
            expected = agents_process.tool_results(plans, agent_id)
            assert len(sent) == expected, (agent_id, sent)  # no call made twice
            assert history[-1].role == "assistant" and history[-1].content == "done", agent_id
            if agent_id == helpers[0].id:
                assert [m.content for m in history if m.role == "user"] == ["plan "]
    for sender, items in plans.items():
        for n, to in items:
            assert received[to].count((sender, f"m{n}")) == 1, (sender, n, received[to])
    assert received[helpers[0].id] == []
    assert sum(len(mail) for mail in received.values()) == sum(len(p) for p in plans.values())
    for mail in received.values():
        for sender in agents_process.AGENTS:
            numbers = [int(text[1:]) for who, text in mail if who == sender]
            assert numbers == sorted(numbers), (sender, mail)


async def test_agents_that_send_through_their_tool_deliver_once_across_sigkills(
    tmp_path: Path, trials: Callable[[int, int], int]
) -> None:
    """SIGKILL at random points, between steps too, while agents send through
    `send_message` with a model that picks fresh call ids; then the same program again,
    with nothing added for recovery."""
    rng = random.Random(4040)
    kills = 0
    count = trials(20, 6)
    for trial in range(count):
        db = str(tmp_path / f"trial-{trial}.db")
        # unhurried, the work takes about 0.15 s after "started": kill within it
        kills += kill_then_finish(
            functools.partial(start_agents, db, trial), 1 + trial % 2, 0.15, rng
        )
        await check_exactly_once(db, trial)
    assert kills >= count  # the processes were killed mid-work, not after they finished


# -- what a reopened team finds ----------------------------------------------------------------


def killed_at(db: str, mode: str, line: str) -> None:
    """Run team_cut_process.py in `mode` and SIGKILL it once it prints `line`."""
    process = subprocess.Popen(
        [sys.executable, str(HERE / "team_cut_process.py"), db, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == line
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    cut_process.HANG["on"] = False  # the team this process opens next runs to the end


async def test_a_run_killed_between_steps_is_continued_by_run_until_idle(tmp_path: Path) -> None:
    db = str(tmp_path / "team.db")
    killed_at(db, "between-steps", "asking")
    async with open_stores(db) as stores, cut_process.team(stores) as team:
        report = await team.run_until_idle()
        assert report.idle and report.agents["w"].outcomes == ("success",)
        assert [i.status for i in team.list_agents()] == ["done"]
        info = team.list_agents()[0]
        state = await team.agent("a").kernel.get_state(info.thread_id)
        history = state.to_dict()["statekernel.messages"]
        assert [(m.role, m.content) for m in history][-2:] == [
            ("tool", "looked"),
            ("assistant", "done after looked"),
        ]
        assert (await team.agent("a").kernel.verify(info.thread_id)).ok


async def test_an_agent_a_crash_left_in_its_tool_is_waiting_and_resumes(tmp_path: Path) -> None:
    db = str(tmp_path / "team.db")
    killed_at(db, "in-tool", "paying")
    async with open_stores(db) as stores, cut_process.team(stores) as team:
        report = await team.run_until_idle()
        assert report.idle
        assert [(i.id, i.status) for i in team.list_agents()] == [("w", "waiting")]
        pending = await team.agent("a").pending(team.list_agents()[0].thread_id)
        assert [(p.id, p.ticket) for p in pending] == [("call-1", "interrupted")]
        result = await team.resume("w", "call-1", Decision.result("paid by hand"))
        assert result.outcome == "success"
        assert result.messages[-1].content == "done after paid by hand"
        assert [(i.id, i.status) for i in team.list_agents()] == [("w", "done")]
    async with open_stores(db) as stores, cut_process.team(stores) as again:
        assert (await again.run_until_idle()).agents == {}  # nothing left to do
        assert [(i.id, i.status) for i in again.list_agents()] == [("w", "idle")]
