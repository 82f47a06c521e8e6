"""The side-by-side benchmark suite runs anywhere, and says why a peer has no numbers.

`make bench` runs benchmarks/suite.py in a venv of its own, with LangGraph and EvoFabric.
Here it runs with --quick in the test venv, where the peers are usually not installed, and
the tests check what it wrote: a row for every workload, case and side; numbers for
statekernel and the floor; a reason for every row without numbers (a peer that does not
import is unavailable, not a crash); and the tables benchmarks/report.py renders from it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # the benchmark suite, run as a process

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "benchmarks" / "suite.py"
REPORT = ROOT / "benchmarks" / "report.py"
WORKLOADS = {"hook_width", "state_size", "profile_store", "checkpoint"}
SIDES = {"statekernel", "floor", "langgraph", "evofabric"}
OURS = {"statekernel", "floor"}
PEER_PACKAGES = {"langgraph": "langgraph", "evofabric": "evofabric"}


@pytest.fixture(scope="module")
def results_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run(
        [sys.executable, str(SUITE), "--quick", "--no-charts", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    path = out / "suite-quick.json"
    assert path.is_file(), f"the suite wrote no {path.name}: {sorted(out.iterdir())}"
    return path


@pytest.fixture(scope="module")
def results(results_file: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(results_file.read_text())
    return document


def test_every_case_of_every_workload_has_a_row_per_side(results: dict[str, Any]) -> None:
    sides_by_case: dict[tuple[str, str], set[str]] = defaultdict(set)
    for row in results["rows"]:
        case = json.dumps(row["case"], sort_keys=True)
        sides_by_case[row["workload"], case].add(row["side"])
    assert {workload for workload, _ in sides_by_case} == WORKLOADS
    for (workload, case), sides in sides_by_case.items():
        assert sides >= SIDES, f"{workload} {case} has no row for {sorted(SIDES - sides)}"


def test_statekernel_and_the_floor_have_numbers(results: dict[str, Any]) -> None:
    for row in results["rows"]:
        if row["side"] not in OURS:
            continue
        where = f"{row['workload']} {row['case']} {row['side']}"
        assert row["status"] == "ok", f"{where}: {row['status']}: {row['reason']}"
        assert row["samples"] >= 1, where
        assert row["metrics"], where
        for name, value in row["metrics"].items():
            assert math.isfinite(value) and value > 0, f"{where}: {name} = {value}"


def test_a_row_without_numbers_says_why(results: dict[str, Any]) -> None:
    for row in results["rows"]:
        assert row["status"] in {"ok", "unavailable", "failed"}, row
        if row["status"] != "ok":
            assert row["reason"].strip(), f"{row['workload']} {row['side']}: no reason"
            assert not row["metrics"], row


@pytest.mark.parametrize("peer", sorted(PEER_PACKAGES))
def test_a_peer_that_does_not_import_is_unavailable(results: dict[str, Any], peer: str) -> None:
    if importlib.util.find_spec(PEER_PACKAGES[peer]) is not None:
        pytest.skip(f"{peer} is installed here; its rows are measured")
    rows = [row for row in results["rows"] if row["side"].split()[0] == peer]
    assert rows
    assert results["peers"][peer], f"the results do not say why {peer} cannot run"
    for row in rows:
        assert row["status"] == "unavailable", row
        assert row["reason"], row


def test_the_results_name_the_machine(results: dict[str, Any]) -> None:
    machine = results["machine"]
    for field in ("date", "cpu", "cores", "python", "sqlite", "packages"):
        assert machine.get(field), f"no {field} in {machine}"
    assert machine["packages"]["statekernel"]


def test_the_report_renders_and_updates_marked_tables(results_file: Path, tmp_path: Path) -> None:
    printed = subprocess.run(
        [sys.executable, str(REPORT), str(results_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for workload in WORKLOADS:
        assert f"## {workload}" in printed
    header = next(line for line in printed.splitlines() if line.startswith("| mode | W |"))
    assert "| statekernel | floor | langgraph | evofabric |" in header
    page = tmp_path / "page.md"
    page.write_text("before\n<!-- suite:state_size -->\nold\n<!-- /suite:state_size -->\nafter\n")
    subprocess.run(
        [sys.executable, str(REPORT), str(results_file), "--update", str(page)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    text = page.read_text()
    assert text.startswith("before\n<!-- suite:state_size -->\n")
    assert text.endswith("\n<!-- /suite:state_size -->\nafter\n")
    assert "old" not in text
    assert "keys held" in text
