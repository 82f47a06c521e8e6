"""The mailbox across crashes: a team's process is killed (SIGKILL) at random points while
five agents exchange messages, then started again; every message is delivered exactly once,
in order per sender, and every agent's thread verifies."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from team_process import AGENTS, TEAM_ID, plan, roles

from statekernel import AgentTeam, Message
from statekernel.stores import SqliteProfileStore, SqliteThreadStore

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
    tmp_path: Path,
) -> None:
    rng = random.Random(2026)
    kills = 0
    for trial in range(10):
        tmp = tmp_path / f"trial-{trial}"
        tmp.mkdir()
        for _ in range(1 + trial % 2):  # every other trial is killed twice
            process = start(tmp, seed=trial)
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "started"
            # an unhurried process does all its work in about 0.2 s after "started": kill it
            # somewhere in the first three quarters (under load its work only takes longer)
            time.sleep(rng.uniform(0.01, 0.15))
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                kills += 1
            process.communicate(timeout=60)
        finishing = start(tmp, seed=trial)
        out, err = finishing.communicate(timeout=120)
        assert finishing.returncode == 0 and out.split() == ["started", "idle"], err
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
    assert kills >= 10  # the processes were killed mid-work, not after they finished
