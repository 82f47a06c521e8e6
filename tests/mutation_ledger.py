"""The mutation run's results, kept in the repository so that a run can span sessions.

A whole `make mutation` takes longer than a working session on 2 cores, and a session's
scratch folders do not survive it. mutmut keeps, per source file, each mutant's result and
a hash of each function it mutated (`.mutation/mutants/<file>.meta`); on its next run it
keeps the result of every mutant whose function's hash is unchanged and tests the others.
This saves those two things, for the decided mutants only, to `tests/mutation_ledger.json`
(`save`), and writes them back as mutmut's own files into a fresh `.mutation` (`restore`),
which `make mutation-continue` does before it runs: results of unchanged functions stand,
everything else is tested again.

Run from the mutation copy:
python tests/mutation_ledger.py save|restore|retest-uncovered [--ledger PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
LEDGER = HERE / "mutation_ledger.json"


def save(mutants: Path, ledger: Path) -> int:
    files: dict[str, dict[str, dict[str, object]]] = {}
    decided = 0
    for meta in sorted(mutants.rglob("*.meta")):
        data = json.loads(meta.read_text(encoding="utf-8"))
        results = {k: v for k, v in data["exit_code_by_key"].items() if v is not None}
        decided += len(results)
        source = str(meta.relative_to(mutants))[: -len(".meta")]
        files[source] = {
            "functions": dict(sorted(data.get("hash_by_function_name", {}).items())),
            "results": dict(sorted(results.items())),
        }
    ledger.write_text(json.dumps({"files": files}, indent=1, sort_keys=True) + "\n")
    return decided


def restore(mutants: Path, ledger: Path) -> int:
    files = json.loads(ledger.read_text(encoding="utf-8"))["files"]
    restored = 0
    for source, kept in files.items():
        meta = mutants / (source + ".meta")
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(
            json.dumps(
                {
                    "exit_code_by_key": kept["results"],
                    "hash_by_function_name": kept["functions"],
                    "type_check_error_by_key": {},
                    "durations_by_key": {},
                    "estimated_durations_by_key": {},
                }
            )
        )
        restored += len(kept["results"])
    return restored


NO_TESTS = 33
"""mutmut's exit code for a mutant of a function no test covers (in its stats)."""


def retest_uncovered(mutants: Path) -> int:
    """Make every mutant judged covered by no test undecided again. Such a verdict holds
    only for the stats run it was made with: mutmut finds a function's tests in a whole
    stats run, or for tests new since the last one, so a function that a change added
    between two stats runs seemed covered by none. `make mutation-continue` has mutmut
    collect its stats anew, then tests these mutants with them."""
    reopened = 0
    for meta in sorted(mutants.rglob("*.meta")):
        data = json.loads(meta.read_text(encoding="utf-8"))
        results = data["exit_code_by_key"]
        uncovered = [key for key, code in results.items() if code == NO_TESTS]
        for key in uncovered:
            results[key] = None
        if uncovered:
            meta.write_text(json.dumps(data))
            reopened += len(uncovered)
    return reopened


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["save", "restore", "retest-uncovered"])
    parser.add_argument("--ledger", type=Path, default=LEDGER)
    parser.add_argument("--mutants", type=Path, default=Path("mutants"))
    args = parser.parse_args()
    if args.action == "save":
        print(f"saved {save(args.mutants, args.ledger)} decided mutants to {args.ledger}")
    elif args.action == "retest-uncovered":
        print(f"{retest_uncovered(args.mutants)} mutants judged covered by no test to test again")
    else:
        count = restore(args.mutants, args.ledger)
        print(f"restored {count} decided mutants from {args.ledger}")


if __name__ == "__main__":
    main()
