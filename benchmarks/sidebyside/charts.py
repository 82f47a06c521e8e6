"""PNG charts of a results document (matplotlib, Agg backend: no screen needed).

One chart per workload, named bench_<workload>.png, each side in the same colour in every
chart. Log scales throughout: the sides differ by orders of magnitude, and what a chart
should show is how each one grows.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

STYLE: dict[str, dict[str, Any]] = {
    "statekernel": {"color": "#1f77b4", "marker": "o"},
    "floor": {"color": "#7f7f7f", "marker": ".", "linestyle": ":"},
    "langgraph": {"color": "#ff7f0e", "marker": "s"},
    "langgraph (sync)": {"color": "#ff7f0e", "marker": "s", "linestyle": "--"},
    "langgraph DeltaChannel": {"color": "#d62728", "marker": "^"},
    "evofabric": {"color": "#2ca02c", "marker": "D"},
}

Row = dict[str, Any]


def draw(document: dict[str, Any], folder: Path) -> list[Path]:
    """Write the charts of the workloads the document holds; returns their paths."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as error:  # charts are optional; the numbers are in the JSON
        print(f"no charts: matplotlib does not import ({error})", file=sys.stderr)
        return []
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, chart in CHARTS.items():
        rows = [row for row in document["rows"] if row["workload"] == name]
        if not rows:
            continue
        figure = chart(plt, rows)
        figure.text(
            0.99, 0.005, _caption(document), ha="right", va="bottom", fontsize=7, color="#555555"
        )
        path = folder / f"bench_{name}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def _caption(document: dict[str, Any]) -> str:
    info = document["machine"]
    return f"{info['cpu']}, {info['cores']} cores, {info['python']}, {info['date'][:10]}"


def _sides(rows: list[Row]) -> list[str]:
    return list(dict.fromkeys(row["side"] for row in rows))


def _line(axes: Any, rows: list[Row], x: str, metric: str) -> None:
    """One line per side: `metric` against the case field `x`, where the side has numbers."""
    for side in _sides(rows):
        points = sorted(
            (row["case"][x], row["metrics"][metric])
            for row in rows
            if row["side"] == side and row["status"] == "ok" and metric in row["metrics"]
        )
        if points:
            xs, ys = zip(*points, strict=True)
            axes.plot(xs, ys, label=side, **STYLE.get(side, {}))
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.grid(True, which="major", alpha=0.3)


def hook_width(plt: Any, rows: list[Row]) -> Any:
    figure, panes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for axes, mode in zip(panes, ("sync", "async"), strict=True):
        _line(axes, [row for row in rows if row["case"]["mode"] == mode], "width", "us_per_write")
        widths = sorted({row["case"]["width"] for row in rows})
        axes.set_xticks(widths, [str(w) for w in widths])
        axes.minorticks_off()
        axes.set_title(f"{mode} hooks")
        axes.set_xlabel("W: hooks (nodes) writing in one step")
    panes[0].set_ylabel("µs per write (step ÷ W)")
    panes[0].legend(fontsize=8)
    figure.suptitle("Hook width: cost per write (lower is better)")
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    return figure


def state_size(plt: Any, rows: list[Row]) -> Any:
    figure, panes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    small_log = min(row["case"]["log"] for row in rows)
    small_keys = min(row["case"]["keys"] for row in rows)
    _line(panes[0], [row for row in rows if row["case"]["log"] == small_log], "keys", "us_per_step")
    _line(panes[1], [r for r in rows if r["case"]["keys"] == small_keys], "log", "us_per_step")
    panes[0].set_xlabel(f"untouched keys held (log of {small_log} items)")
    panes[1].set_xlabel(f"items in the log ({small_keys} keys held)")
    panes[0].set_ylabel("µs per step")
    panes[0].legend(fontsize=8)
    figure.suptitle("State size: one step, more state held (lower and flatter is better)")
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    return figure


OPERATIONS = ("set, sequential", "get, sequential", "set, 64 tasks", "get, 64 tasks")


def profile_store(plt: Any, rows: list[Row]) -> Any:
    largest = max(row["case"]["values"] for row in rows)
    chosen = [row for row in rows if row["case"]["values"] == largest and row["status"] == "ok"]
    sides = _sides(chosen)
    figure, axes = plt.subplots(figsize=(10, 4.2))
    width = 0.8 / max(len(sides), 1)
    for index, side in enumerate(sides):
        metrics = next(row["metrics"] for row in chosen if row["side"] == side)
        xs = [i + index * width for i, op in enumerate(OPERATIONS) if op in metrics]
        ys = [metrics[op] for op in OPERATIONS if op in metrics]
        style = STYLE.get(side, {})
        hatch = "//" if style.get("linestyle") == "--" else None
        axes.bar(xs, ys, width=width, label=side, color=style.get("color"), alpha=0.85, hatch=hatch)
    axes.set_xticks([i + 0.4 - width / 2 for i in range(len(OPERATIONS))], OPERATIONS)
    axes.set_ylabel("operations per second")
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize=8)
    axes.set_title(f"Profile store in SQLite, N = {largest:,} values (higher is better)")
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    return figure


def checkpoint(plt: Any, rows: list[Row]) -> Any:
    figure, panes = plt.subplots(1, 2, figsize=(10, 4.2))
    _line(panes[0], rows, "messages", "us_per_step")
    _line(panes[1], rows, "messages", "grown_bytes_per_step")
    for axes in panes:
        axes.set_xlabel("messages already in the thread")
    panes[0].set_ylabel("µs per step (append + durable save)")
    panes[1].set_ylabel("bytes the file grew per step")
    panes[0].legend(fontsize=8)
    figure.suptitle("Per-step checkpoint to SQLite (lower is better)")
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    return figure


CHARTS = {
    "hook_width": hook_width,
    "state_size": state_size,
    "profile_store": profile_store,
    "checkpoint": checkpoint,
}
