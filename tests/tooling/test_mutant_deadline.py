"""The per-test deadline `make mutation` relies on (`mutant_deadline.py`): under a mutant a
test that hangs fails within its deadline, so the mutant counts as killed; outside a
mutation run nothing is armed. Run in a pytest subprocess on a throwaway test file, with
the deadline shortened to a second."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # pytest in a subprocess, waiting out deadlines

TESTS = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider"]
PYTEST += ["-o", "asyncio_mode=auto"]

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import mutant_deadline
mutant_deadline._SLACK_S = 1.0
mutant_deadline._TIMES = 0.0
mutant_deadline._AGAIN_S = 0.5
from mutant_deadline import pytest_runtest_call, pytest_runtest_setup, pytest_runtest_teardown
"""

HANGING = """
import asyncio

def test_a_loop_that_swallows_every_exception():
    while True:
        try:
            sum(range(100))
        except Exception:
            pass

async def test_an_await_that_never_ends():
    await asyncio.Event().wait()

def test_a_quick_one():
    assert True
"""


def run(folder: Path, tests: str, mutant: str) -> subprocess.CompletedProcess[str]:
    """pytest on `tests`, as mutmut runs it with `mutant` named in the environment."""
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_sample.py").write_text(tests)
    return subprocess.run(
        [*PYTEST, "test_sample.py"],
        cwd=folder,
        env={**os.environ, "MUTANT_UNDER_TEST": mutant, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_under_a_mutant_a_hanging_test_fails_at_its_deadline(tmp_path: Path) -> None:
    done = run(tmp_path, HANGING, "statekernel.example.x_f__mutmut_1")
    assert done.returncode == 1 and "2 failed, 1 passed" in done.stdout, done.stdout
    for name in ("test_a_loop_that_swallows_every_exception", "test_an_await_that_never_ends"):
        assert f"FAILED test_sample.py::{name} - mutant_deadline.MutantDeadline" in done.stdout


def test_outside_a_mutation_run_nothing_is_armed(tmp_path: Path) -> None:
    slow = "import time\n\ndef test_slow():\n    time.sleep(2)\n"
    done = run(tmp_path, slow, "stats")  # mutmut's own runs of the whole suite
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout
