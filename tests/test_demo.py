"""The demo and the engine tour run from a clean directory and show what they promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).parent.parent / "docs" / "examples"


def run_example(name: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_demo_persists_to_sqlite_and_shows_thread_and_run_scopes(tmp_path: Path) -> None:
    for _ in range(2):  # rerunnable: the demo thread starts afresh each time
        output = run_example("demo.py", tmp_path)
        assert (tmp_path / ".statekernel" / "threads.db").exists()
        assert "run 1: success" in output and "run 2: success" in output
        assert "at run start: demo.facts = ['kernel'], demo.doc_stage = DRAFT" in output
        assert "thread key demo.facts      = ['kernel', 'merge']" in output
        assert "thread key demo.doc_stage  = PUBLISHED" in output
        assert "publish needs stage REVIEWED (now DRAFT)" in output
        assert "system: Style: short, plain sentences." in output
        assert "- Collect reader questions" in output
        assert (tmp_path / ".statekernel" / "profiles.db").exists()


def test_engine_tour_runs(tmp_path: Path) -> None:
    output = run_example("engine_tour.py", tmp_path)
    assert "commit rejected" in output and "conflict" in output
