"""Print the mutation score of `make mutation`, per module and in total, with every survivor.

Run after `mutmut run` (the Makefile does both). A mutant counts as killed when a test
failed or timed out on it (a mutant that loops forever is caught too); it survives when
every test covering it passed, or when no test covers it at all. Exit status 1 when the
total score is below the goal given with `--goal` (percent).
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys

_KILLED = {"killed", "timeout"}


def _results(mutmut: str) -> list[tuple[str, str]]:
    listing = subprocess.run(
        [mutmut, "results", "--all", "true"], capture_output=True, text=True, check=True
    ).stdout
    rows = []
    for line in listing.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep:
            rows.append((name, status))
    return rows


def _module(mutant: str) -> str:
    path, _, _ = mutant.partition(".x")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mutmut", default="mutmut", help="the mutmut executable")
    parser.add_argument("--goal", type=float, default=95.0, help="required score, percent")
    args = parser.parse_args()
    rows = _results(args.mutmut)
    if not rows:
        print("no mutation results: run `mutmut run` first", file=sys.stderr)
        return 2
    by_module: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    survivors: list[tuple[str, str]] = []
    for name, status in rows:
        by_module[_module(name)][status] += 1
        if status not in _KILLED:
            survivors.append((name, status))
    print(f"{'module':<36} {'mutants':>8} {'killed':>7} {'survived':>9} {'score':>7}")
    total = killed = 0
    for module in sorted(by_module):
        counts = by_module[module]
        n = sum(counts.values())
        k = sum(counts[s] for s in _KILLED)
        total, killed = total + n, killed + k
        print(f"{module:<36} {n:>8} {k:>7} {n - k:>9} {100 * k / n:>6.1f}%")
    score = 100 * killed / total
    print(f"{'total':<36} {total:>8} {killed:>7} {total - killed:>9} {score:>6.1f}%")
    if survivors:
        print("\nsurvivors (see them with `mutmut show NAME`):")
        for name, status in survivors:
            print(f"  {name}  [{status}]")
    return 0 if score >= args.goal else 1


if __name__ == "__main__":
    sys.exit(main())
