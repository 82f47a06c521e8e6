"""Markdown tables from a results file of benchmarks/suite.py.

Prints every table; with --update FILE, rewrites the tables inside FILE between markers

    <!-- suite:NAME -->
    ...
    <!-- /suite:NAME -->

where NAME is `machine` or a workload (hook_width, state_size, profile_store, checkpoint),
leaving the prose around them alone. That is how docs/performance.md is regenerated after a
run.

With --charts DIR it also draws the PNG charts again from the same file.

Run: python benchmarks/report.py [RESULTS.json] [--update docs/performance.md] [--charts DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).resolve().parent / "results" / "suite.json"

Row = dict[str, Any]


# --- cells -----------------------------------------------------------------------------


def number(value: float) -> str:
    """Three significant figures or so, with thousands separators."""
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


TIMES = "\u00d7"  # the multiplication sign


def times(value: float) -> str:
    return f"{value:,.0f}{TIMES}" if value >= 100 else f"{value:.1f}{TIMES}"


def cell(row: Row | None, metric: str) -> str:
    if row is None:
        return ""
    if row["status"] == "unavailable":
        return "n/a"
    if row["status"] == "failed":
        return "failed"
    found = row["metrics"].get(metric)
    return "n/a" if found is None else number(found)


def value_of(row: Row | None, metric: str) -> float | None:
    if row is None or row["status"] != "ok":
        return None
    found: float | None = row["metrics"].get(metric)
    return found


# --- tables ----------------------------------------------------------------------------


def sides_of(rows: list[Row]) -> list[str]:
    """The sides in the order the rows first name them."""
    return list(dict.fromkeys(row["side"] for row in rows))


def table(headers: list[str], lines: list[list[str]], left: int) -> str:
    """A markdown table; the first `left` columns left-aligned, the others right-aligned."""
    rule = ["---" if i < left else "---:" for i in range(len(headers))]
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(rule) + "|"]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


Label = tuple[str, Callable[[dict[str, Any]], str]]
Ratio = tuple[str, str, str]  # (header, numerator side, denominator side)


def pivot(rows: list[Row], labels: list[Label], metric: str, ratios: Iterable[Ratio] = ()) -> str:
    """One line per case, one column per side (and per ratio) for `metric`."""
    sides = sides_of(rows)
    ratios = list(ratios)
    cases: dict[tuple[str, ...], dict[str, Row]] = {}
    for row in rows:
        key = tuple(show(row["case"]) for _, show in labels)
        cases.setdefault(key, {})[row["side"]] = row
    lines = []
    for key, by_side in cases.items():
        line = [*key, *(cell(by_side.get(side), metric) for side in sides)]
        for _, top, bottom in ratios:
            a, b = value_of(by_side.get(top), metric), value_of(by_side.get(bottom), metric)
            line.append(times(a / b) if a is not None and b else "")
        lines.append(line)
    headers = [name for name, _ in labels] + sides + [header for header, _, _ in ratios]
    return table(headers, lines, left=1)


def footnotes(rows: list[Row]) -> str:
    """Why a side has no numbers, and how each side was run, once per distinct text."""
    seen: dict[str, None] = {}
    for row in rows:
        if row["status"] != "ok":
            seen.setdefault(f"- **{row['side']}**: {row['status']}: {row['reason']}", None)
    for row in rows:
        if row["status"] == "ok" and row["note"]:
            seen.setdefault(f"- {row['side']}: {row['note']}", None)
    return "\n".join(seen)


def samples(rows: list[Row]) -> str:
    counts = [row["samples"] for row in rows if row["status"] == "ok"]
    if not counts:
        return ""
    return f"Medians of {min(counts)} to {max(counts)} samples per cell."


def section(*parts: str) -> str:
    return "\n\n".join(part for part in parts if part)


# --- the workloads ---------------------------------------------------------------------


def hook_width(rows: list[Row]) -> str:
    labels: list[Label] = [("mode", lambda c: c["mode"]), ("W", lambda c: str(c["width"]))]
    ratios = [
        ("langgraph ÷ statekernel", "langgraph", "statekernel"),
        ("evofabric ÷ statekernel", "evofabric", "statekernel"),
    ]
    steps = rows[0]["case"]["steps"]
    return section(
        f"µs per write (one hook's command: the step's time ÷ W), {steps} steps per sample:",
        pivot(rows, labels, "us_per_write", ratios),
        "µs per step (statekernel: one phase; LangGraph: one invoke; EvoFabric: one run):",
        pivot(rows, labels, "us_per_phase"),
        samples(rows),
        footnotes(rows),
    )


def series(rows: list[Row], axis: str, fixed: str) -> list[Row]:
    """The rows of one series: `axis` varies, `fixed` stays at its smallest value."""
    smallest = min(row["case"][fixed] for row in rows)
    return [row for row in rows if row["case"][fixed] == smallest]


def ratios(rows: list[Row], axis: str, fixed: str) -> dict[str, float | None]:
    """Per side: the step at the largest `axis` ÷ the step at the smallest."""
    chosen = series(rows, axis, fixed)
    out: dict[str, float | None] = {}
    for side in sides_of(chosen):
        mine = [row for row in chosen if row["side"] == side]
        small = min(mine, key=lambda row: row["case"][axis])
        large = max(mine, key=lambda row: row["case"][axis])
        a, b = value_of(large, "us_per_step"), value_of(small, "us_per_step")
        out[side] = a / b if a is not None and b else None
    return out


def state_size(rows: list[Row]) -> str:
    labels: list[Label] = [
        ("keys held", lambda c: f"{c['keys']:,}"),
        ("log items", lambda c: f"{c['log']:,}"),
    ]
    ordered = series(rows, "keys", "log") + [
        row for row in series(rows, "log", "keys") if row not in series(rows, "keys", "log")
    ]
    steps = rows[0]["case"]["steps"]
    lines = []
    for axis, fixed, name in (("keys", "log", "keys held"), ("log", "keys", "log items")):
        chosen = series(rows, axis, fixed)
        low = min(row["case"][axis] for row in chosen)
        high = max(row["case"][axis] for row in chosen)
        found = ratios(rows, axis, fixed)
        lines.append(
            [f"{name}: {high:,} ÷ {low:,}"]
            + [times(r) if (r := found.get(side)) is not None else "n/a" for side in sides_of(rows)]
        )
    return section(
        f"µs per step (one counter increment and one log append), {steps} steps per sample:",
        pivot(ordered, labels, "us_per_step"),
        "Growth, the largest case's step ÷ the smallest's, per series:",
        table(["series", *sides_of(rows)], lines, left=1),
        samples(rows),
        footnotes(rows),
    )


OPERATIONS = ("set, sequential", "get, sequential", "set, 64 tasks", "get, 64 tasks")


def profile_store(rows: list[Row]) -> str:
    sides = sides_of(rows)
    lines = []
    for n in dict.fromkeys(row["case"]["values"] for row in rows):
        by_side = {row["side"]: row for row in rows if row["case"]["values"] == n}
        for operation in OPERATIONS:
            line = [operation, f"{n:,}", *(cell(by_side.get(side), operation) for side in sides)]
            ours = value_of(by_side.get("statekernel"), operation)
            for peer in ("langgraph", "langgraph (sync)"):
                theirs = value_of(by_side.get(peer), operation)
                line.append(times(ours / theirs) if ours is not None and theirs else "")
            lines.append(line)
    headers = ["operation", "N", *sides, "statekernel ÷ langgraph", "statekernel ÷ (sync)"]
    return section(
        "Operations per second (higher is better):",
        table(headers, lines, left=1),
        samples(rows),
        footnotes(rows),
    )


def checkpoint(rows: list[Row]) -> str:
    labels: list[Label] = [
        ("messages", lambda c: f"{c['messages']:,}"),
        ("steps", lambda c: str(c["steps"])),
    ]
    ratios = [
        ("langgraph ÷ statekernel", "langgraph", "statekernel"),
        ("DeltaChannel ÷ statekernel", "langgraph DeltaChannel", "statekernel"),
    ]
    return section(
        "µs per step (append one message, then a durable save):",
        pivot(rows, labels, "us_per_step", ratios),
        "Bytes the file grew per step (database and WAL, settled):",
        pivot(rows, labels[:1], "grown_bytes_per_step"),
        samples(rows),
        footnotes(rows),
    )


RENDERERS: dict[str, Callable[[list[Row]], str]] = {
    "hook_width": hook_width,
    "state_size": state_size,
    "profile_store": profile_store,
    "checkpoint": checkpoint,
}


def machine(document: dict[str, Any]) -> str:
    info = document["machine"]
    packages = ", ".join(
        f"{name} {version}" for name, version in info["packages"].items() if version is not None
    )
    checkout = info.get("checkout") or {}
    commit = checkout.get("commit", "unknown")[:12]
    if checkout.get("package_sources_modified"):
        commit += " (with uncommitted changes to the package)"
    settings = document["settings"]
    spent = ", ".join(
        f"{name} {seconds:.0f} s" for name, seconds in document["workload_seconds"].items()
    )
    lines = [
        ["date", info["date"]],
        ["CPU", f"{info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB"],
        ["system", info["platform"]],
        ["Python, SQLite", f"{info['python']}, SQLite {info['sqlite']}"],
        ["packages", packages],
        ["checkout", commit],
        ["load average at start", " ".join(str(load) for load in info["load_average_at_start"])],
        [
            "run",
            f"{'quick' if settings['quick'] else 'full'}, {settings['repeats']} rounds; {spent}",
        ],
    ]
    return table(["", "this run"], lines, left=2)


# --- the document ----------------------------------------------------------------------


def rows_of(document: dict[str, Any], workload: str) -> list[Row]:
    return [row for row in document["rows"] if row["workload"] == workload]


def sections(document: dict[str, Any]) -> dict[str, str]:
    """Each marker's name and its tables."""
    out = {"machine": machine(document)}
    for name, render_rows in RENDERERS.items():
        rows = rows_of(document, name)
        if rows:
            out[name] = render_rows(rows)
    return out


def render(document: dict[str, Any]) -> str:
    return "\n\n".join(f"## {name}\n\n{text}" for name, text in sections(document).items())


def summary(document: dict[str, Any]) -> dict[str, Any]:
    """The figures worth a glance, for the results file: the state-size growth ratios."""
    rows = rows_of(document, "state_size")
    if not rows:
        return {}
    return {
        "state_size_growth": {
            "keys": ratios(rows, "keys", "log"),
            "log": ratios(rows, "log", "keys"),
        }
    }


def update(path: Path, document: dict[str, Any]) -> list[str]:
    """Rewrite the marked regions of `path`; returns the names of those rewritten."""
    text = path.read_text()
    done = []
    for name, body in sections(document).items():
        begin, end = f"<!-- suite:{name} -->", f"<!-- /suite:{name} -->"
        pattern = re.compile(rf"{re.escape(begin)}\n.*?{re.escape(end)}", re.DOTALL)
        region = f"{begin}\n\n{body}\n\n{end}"  # blank lines: the tables stand as blocks
        text, count = pattern.subn(lambda _, region=region: region, text)
        if count:
            done.append(name)
    path.write_text(text)
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="?", default=DEFAULT)
    parser.add_argument("--update", type=Path, metavar="FILE", help="rewrite its marked tables")
    parser.add_argument("--charts", type=Path, metavar="DIR", help="also draw the PNG charts here")
    args = parser.parse_args()
    document = json.loads(args.results.read_text())
    if args.update:
        done = update(args.update, document)
        print(f"updated {', '.join(done) or 'nothing'} in {args.update}")
    else:
        print(render(document))
    if args.charts:
        from sidebyside import charts

        for written in charts.draw(document, args.charts):
            print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
