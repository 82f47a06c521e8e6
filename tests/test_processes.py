"""Across processes on one SQLite file: restore, crash recovery, suspend and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def test_a_killed_process_loses_at_most_the_step_in_flight(tmp_path: Path) -> None:
    db = str(tmp_path / "state.db")
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), "run", db, "t", "note,hang"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "hanging"  # step 2 is in flight
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    after = child("run", db, "t", "")
    # Step 1 completed (checkpointed at its STEP_END); step 2's commits died with the process.
    assert after["journal"] == ["t:run-1 step 1", "t:run-2 step 1"]
    assert after["outcome"] == "success"


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
