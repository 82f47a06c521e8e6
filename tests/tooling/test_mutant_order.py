"""The order `make mutation` runs a mutant's tests in (`mutant_order.py`): under a mutant,
fastest module first by mutmut's clean-run times, each module's tests together and in their
order; outside a mutation run, pytest's own order. Run in a pytest subprocess on throwaway
test files, with a clean run's times written where mutmut keeps them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from mutant_order import pytest_collection_modifyitems
"""

MODULE = """
def test_one():
    pass

def test_two():
    pass
"""

COLLECT = [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider"]

TIMES = {  # a slow module whose first test is quick, and a module quick as a whole
    "test_slow.py::test_one": 0.01,
    "test_slow.py::test_two": 60.0,
    "test_quick.py::test_one": 0.5,
    "test_quick.py::test_two": 0.5,
}


def collected(folder: Path, mutant: str) -> list[str]:
    """The node ids pytest would run, in order, with `mutant` named in the environment."""
    (folder / "conftest.py").write_text(CONFTEST)
    for name in ("test_slow.py", "test_quick.py"):
        (folder / name).write_text(MODULE)
    (folder / "mutmut-stats.json").write_text(json.dumps({"duration_by_test": TIMES}))
    done = subprocess.run(
        [*COLLECT, "test_slow.py", "test_quick.py"],
        cwd=folder,
        env={**os.environ, "MUTANT_UNDER_TEST": mutant},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_under_a_mutant_the_quickest_module_runs_first_and_stays_together(
    tmp_path: Path,
) -> None:
    assert collected(tmp_path, "statekernel.example.x_f__mutmut_1") == [
        "test_quick.py::test_one",
        "test_quick.py::test_two",
        "test_slow.py::test_one",
        "test_slow.py::test_two",
    ]


def test_outside_a_mutation_run_the_order_is_pytests(tmp_path: Path) -> None:
    assert collected(tmp_path, "stats") == [
        "test_slow.py::test_one",
        "test_slow.py::test_two",
        "test_quick.py::test_one",
        "test_quick.py::test_two",
    ]
