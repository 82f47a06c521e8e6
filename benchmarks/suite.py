"""statekernel beside the plain-Python floor, LangGraph and EvoFabric, in one run.

Four workloads (see docs/performance.md for what each measures and why):

- hook_width: W = 1, 4, 16 hooks (nodes) each writing a counter and a log in one step,
  sync and async;
- state_size: one step with K = 10 .. 10,000 untouched keys held, or a log of
  N = 10 .. 100,000 items;
- profile_store: sequential and 64-concurrent writes and reads of small values in SQLite;
- checkpoint: one durable per-step checkpoint to SQLite with N = 10 .. 10,000 messages of
  history.

Every side must end in the state the workload prescribes before its time counts; rows give
medians over the samples. A peer that does not import, lacks the feature, or fails is a row
marked unavailable or failed, with the reason; the run goes on. The results go to one JSON
file (with the machine and the package versions) and, unless --no-charts, PNG charts;
`benchmarks/report.py` renders the tables from the JSON.

Run: .venv-bench/bin/python benchmarks/suite.py [--quick] [--only WORKLOAD] [--no-charts]
     [--out DIR] [--charts DIR]          (`make bench` builds .venv-bench and runs it)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import report
from sidebyside import checkpoint, hook_width, profiles, state_size
from sidebyside.harness import FULL, PEER_MODULES, QUICK, ROOT, SIDES, Row, Settings, machine
from sidebyside.harness import unavailable as peer_unavailable

WORKLOADS: dict[str, Callable[[Settings], list[Row]]] = {
    hook_width.NAME: hook_width.run,
    state_size.NAME: state_size.run,
    profiles.NAME: profiles.run,
    checkpoint.NAME: checkpoint.run,
}

RESULTS = ROOT / "benchmarks" / "results"
IMAGES = ROOT / "docs" / "images"


def results_name(quick: bool, only: list[str]) -> str:
    """suite.json for a whole run; a partial or quick run never overwrites it."""
    parts = ["suite", *only]
    if quick:
        parts.append("quick")
    return "-".join(parts) + ".json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few samples (seconds)")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(WORKLOADS),
        metavar="WORKLOAD",
        help=f"run only this workload (repeatable): {', '.join(WORKLOADS)}",
    )
    parser.add_argument("--no-charts", action="store_true", help="write no PNG charts")
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help=f"where the JSON goes (default {RESULTS})"
    )
    parser.add_argument(
        "--charts",
        type=Path,
        help=f"where the PNG charts go (default {IMAGES}; with --quick, the --out folder)",
    )
    parser.add_argument("--repeats", type=int, help="rounds of turns per workload (default 5)")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    if args.repeats:
        settings = Settings(**{**asdict(settings), "repeats": args.repeats})
    only = args.only or []
    chosen = [name for name in WORKLOADS if not only or name in only]

    document: dict[str, Any] = {
        "suite": "statekernel side by side",
        "settings": {**asdict(settings), "workloads": chosen},
        "machine": machine(),
        "sides": list(SIDES),
        "peers": {peer: peer_unavailable(peer) for peer in PEER_MODULES},
        "workload_seconds": {},
        "rows": [],
    }
    started = time.perf_counter()
    for name in chosen:
        print(f"{name} ...", file=sys.stderr, flush=True)
        began = time.perf_counter()
        rows = WORKLOADS[name](settings)
        document["workload_seconds"][name] = round(time.perf_counter() - began, 1)
        document["rows"].extend(asdict(row) for row in rows)
    document["total_seconds"] = round(time.perf_counter() - started, 1)
    document["summary"] = report.summary(document)

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / results_name(args.quick, only)
    path.write_text(json.dumps(document, indent=1) + "\n")
    print(report.render(document))
    print(f"\nwrote {path} ({document['total_seconds']} s)")
    if not args.no_charts:
        from sidebyside import charts

        folder = args.charts or (args.out if args.quick else IMAGES)
        for written in charts.draw(document, folder):
            print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
