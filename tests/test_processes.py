"""Across processes on one SQLite file: restore, crash recovery, suspend and resume."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # SIGKILL trials and racing writers in processes of their own

HERE = Path(__file__).parent
SCRIPT = HERE / "agent_process.py"


def child(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_run_keys_reset_and_thread_keys_survive_in_a_new_process(tmp_path: Path) -> None:
    db = str(tmp_path / "state.db")
    first = child("run", db, "t", "note")
    second = child("run", db, "t", "")
    assert first["outcome"] == second["outcome"] == "success"
    assert first["steps"] == 2 and second["steps"] == 1  # a run key starts again
    assert second["journal"] == ["t:run-1 step 1", "t:run-1 step 2", "t:run-2 step 1"]
    assert second["revision"] > first["revision"]


def test_a_process_killed_mid_tool_comes_back_with_the_call_interrupted(tmp_path: Path) -> None:
    db = str(tmp_path / "state.db")
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), "run", db, "t", "note,hang"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "hanging"  # step 2's tool is running
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    # The tool's outcome is unknown, so it is neither lost nor run again unseen: the thread
    # waits for a decision on it, with everything committed before the tool started.
    assert pending(db, "t") == [["call-1-hang", "interrupted"]]
    after = child("resume", db, "t", "call-1-hang", "deny")
    assert after["outcome"] == "success"
    assert after["tool_messages"] == ["noted", "denied after a crash"]
    assert after["journal"] == ["t:run-1 step 1", "t:run-1 step 2", "t:run-1 step 3"]


def pending(db: str, thread: str) -> Any:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "pending", db, thread],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


KILL_POINTS = ("before", "after", "end")


def _kill_trial(source: Path, workdir: Path, point: str) -> tuple[str, str, int]:
    """One trial: the approved `pay` dies at `point`; then the caller supplies the result."""
    db = workdir / "state.db"
    shutil.copyfile(source, db)
    paylog = workdir / "pay.log"
    env = {**os.environ, "PAYLOG": str(paylog), "KILL_AT": point}
    killed = subprocess.run(
        [sys.executable, str(SCRIPT), "resume", str(db), "t", "call-0-pay", "approve"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    waiting = pending(str(db), "t")
    decided = child("resume", str(db), "t", "call-0-pay", "result", env={"PAYLOG": str(paylog)})
    paid = paylog.read_text().count("paid") if paylog.exists() else 0
    assert decided["outcome"] == "success", decided
    assert decided["tool_messages"] == ["paid (confirmed by hand)"]
    return point, json.dumps(waiting), paid


def test_an_approved_tool_killed_anywhere_never_runs_twice_and_is_never_lost(
    tmp_path: Path, trials: Callable[[int, int], int]
) -> None:
    source = tmp_path / "suspended.db"
    suspended = child("run", str(source), "t", "pay", env={"PAYLOG": str(tmp_path / "none")})
    assert suspended["pending"] == ["call-0-pay"]
    trials = [(KILL_POINTS[i % 3], tmp_path / f"trial{i}") for i in range(trials(21, 6))]
    for _, workdir in trials:
        workdir.mkdir()
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        outcomes = list(pool.map(lambda trial: _kill_trial(source, trial[1], trial[0]), trials))
    for point, waiting, paid in outcomes:
        # Killed before, during or after its side effect, the call always comes back for a
        # decision, and it ran at most once: once only if it got as far as paying.
        assert json.loads(waiting) == [["call-0-pay", "interrupted"]], point
        assert paid == (0 if point == "before" else 1), point


def test_suspend_then_resume_in_a_fresh_process_completes_the_call_once(tmp_path: Path) -> None:
    db = str(tmp_path / "state.db")
    paylog = tmp_path / "pay.log"
    env = {"PAYLOG": str(paylog)}
    suspended = child("run", db, "t", "pay", env=env)
    assert suspended["outcome"] == "suspended" and suspended["pending"] == ["call-0-pay"]
    assert not paylog.exists()
    resumed = child("resume", db, "t", "call-0-pay", env=env)
    assert resumed["outcome"] == "success"
    assert resumed["tool_messages"] == ["paid"]
    assert resumed["steps"] == 2  # the run's own keys came back from the other process
    assert paylog.read_text() == "paid\n"
    again = subprocess.run(
        [sys.executable, str(SCRIPT), "resume", db, "t", "call-0-pay"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=False,
    )
    assert again.returncode != 0 and "no suspended run" in again.stderr
    assert paylog.read_text() == "paid\n"


PLAIN_READER = """
import asyncio, json, sys
from statekernel import Kernel
from statekernel.stores import SqliteThreadStore

async def main(db, thread):
    async with SqliteThreadStore(db) as store:
        kernel = Kernel([], thread_store=store)
        state = await kernel.get_state(thread)
        report = await kernel.verify(thread)
        messages = [m.content for m in state.to_dict()["statekernel.messages"]]
        print(json.dumps({"hash": state.state_hash(), "verified": report.ok,
                          "replayed": report.state_hash, "messages": messages}))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_a_plain_kernel_in_another_process_reads_an_agents_thread_as_its_writer(
    tmp_path: Path,
) -> None:
    from statekernel import Agent, InferenceResponse, ScriptedModel, ToolCall
    from statekernel.stores import SqliteThreadStore

    db = tmp_path / "state.db"
    model = ScriptedModel(
        [InferenceResponse("", (ToolCall("c1", "echo", {"x": 1}),)), InferenceResponse("done")]
    )
    async with SqliteThreadStore(db) as store:
        agent = Agent([], model, {"echo": lambda args, ctx: args}, thread_store=store)
        result = await agent.run("t", "hello")
        written = (await agent.kernel.get_state("t")).state_hash()
    done = subprocess.run(
        [sys.executable, "-c", PLAIN_READER, str(db), "t"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)
    assert read["hash"] == written == read["replayed"] and read["verified"]
    assert read["messages"] == [m.content for m in result.messages]
    assert read["messages"][0] == "hello" and read["messages"][-1] == "done"


async def test_four_processes_adding_to_one_thread_never_conflict(tmp_path: Path) -> None:
    """Saves that only commute rebase onto one another however often they race: from four
    processes at once, every run lands, once, and the sum is whole."""
    from commutative_process import Adder, Done, Tally, contend

    from statekernel import Kernel
    from statekernel.stores import SqliteThreadStore

    runs = 100
    db = str(tmp_path / "state.db")
    outcomes = contend("sqlite", db, "shared", workers=4, runs=runs)
    assert [outcome["conflicts"] for outcome in outcomes] == [0, 0, 0, 0], outcomes
    async with SqliteThreadStore(db) as store:
        reader = Kernel([Adder()], thread_store=store)
        state = await reader.get_state("shared")
        assert state.get(Tally) == runs * (1 + 2 + 3 + 4)
        done = list(state.get(Done))
        assert sorted(done) == sorted(f"{w}:{n}" for w in range(1, 5) for n in range(1, runs + 1))
        assert state.revision == 4 * runs
        assert (await reader.verify("shared")).ok
