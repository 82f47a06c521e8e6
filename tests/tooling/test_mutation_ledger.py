"""The ledger that lets a mutation run span sessions (`mutation_ledger.py`): decided results
go to the repository and come back as mutmut's own files; a verdict of "no test covers it"
is reopened before a run, whose stats are collected anew."""

from __future__ import annotations

import json
from pathlib import Path

from mutation_ledger import NO_TESTS, restore, retest_uncovered, save

KILLED, SURVIVED = 1, 0


def write_meta(path: Path, results: dict[str, int | None]) -> None:
    """A mutmut results file for one source file, as mutmut writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "exit_code_by_key": results,
        "hash_by_function_name": {"x_f": "abc", "x_g": "def"},
        "type_check_error_by_key": {},
        "durations_by_key": {},
        "estimated_durations_by_key": {},
    }
    path.write_text(json.dumps(data))


def test_decided_results_survive_a_save_and_a_restore(tmp_path: Path) -> None:
    mutants = tmp_path / "mutants"
    results = {
        "pkg.x_f__mutmut_1": KILLED,
        "pkg.x_f__mutmut_2": SURVIVED,
        "pkg.x_g__mutmut_1": None,
    }
    write_meta(mutants / "pkg" / "m.py.meta", results)
    ledger = tmp_path / "ledger.json"
    assert save(mutants, ledger) == 2  # the undecided one is not kept
    fresh = tmp_path / "fresh"
    assert restore(fresh, ledger) == 2
    restored = json.loads((fresh / "pkg" / "m.py.meta").read_text())
    assert restored["exit_code_by_key"] == {
        "pkg.x_f__mutmut_1": KILLED,
        "pkg.x_f__mutmut_2": SURVIVED,
    }
    assert restored["hash_by_function_name"] == {"x_f": "abc", "x_g": "def"}


def test_mutants_judged_covered_by_no_test_are_reopened_and_no_others(tmp_path: Path) -> None:
    mutants = tmp_path / "mutants"
    results = {
        "pkg.x_f__mutmut_1": KILLED,
        "pkg.x_f__mutmut_2": NO_TESTS,
        "pkg.x_g__mutmut_1": SURVIVED,
    }
    write_meta(mutants / "pkg" / "m.py.meta", results)
    write_meta(mutants / "pkg" / "other.py.meta", {"pkg.x_h__mutmut_1": KILLED})
    assert retest_uncovered(mutants) == 1
    reopened = json.loads((mutants / "pkg" / "m.py.meta").read_text())["exit_code_by_key"]
    assert reopened == {**results, "pkg.x_f__mutmut_2": None}
    assert retest_uncovered(mutants) == 0
