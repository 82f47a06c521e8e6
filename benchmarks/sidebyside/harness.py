"""What every workload shares: the sides, the rows, the sampling loop, the peers' imports.

A *cell* is one side on one case of a workload (say LangGraph with 16 async hooks). Its
`sample` function builds fresh state (untimed), collects garbage, times the steps, checks
the state the side ended in, and returns that sample's metrics. Cells take turns, round
after round, so that whatever else the machine does meanwhile hits every side alike; a
cell whose samples are short takes several in its turn, so that its median rests on more
than a handful of milliseconds. A row reports each metric's median over the samples.
"""

from __future__ import annotations

import functools
import gc
import importlib
import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SIDES = ("statekernel", "floor", "langgraph", "evofabric")
"""Every workload has a row for each of these, in every case (variants may add more)."""

OURS = frozenset({"statekernel", "floor"})
"""Sides whose failure is a bug to see: the suite raises instead of writing a row."""

PEER_MODULES = {
    "langgraph": ("langgraph.graph", "langgraph.checkpoint.sqlite", "langgraph.store.sqlite"),
    "evofabric": ("evofabric.core.graph",),
}

ROOT = Path(__file__).resolve().parents[2]

Metrics = dict[str, float]


class Mismatch(RuntimeError):
    """A side ended in a state other than the one the workload prescribes."""


def expect(condition: bool, message: str) -> None:
    """Refuse a sample whose final state is wrong (not `assert`, which -O removes)."""
    if not condition:
        raise Mismatch(message)


@dataclass(frozen=True)
class Settings:
    quick: bool
    repeats: int
    """Rounds: every cell gets one turn in each."""
    turn_seconds: float
    """A cell keeps sampling in its turn until its samples took this long..."""
    turn_samples: int
    """...or it took this many."""
    cell_seconds: float
    """A cell that spent this long (setup included) and has `min_samples` stops early."""
    min_samples: int


FULL = Settings(
    quick=False, repeats=5, turn_seconds=0.25, turn_samples=8, cell_seconds=12.0, min_samples=3
)
QUICK = Settings(
    quick=True, repeats=2, turn_seconds=0.002, turn_samples=2, cell_seconds=0.3, min_samples=1
)


@dataclass
class Row:
    """One side on one case: its medians, or why it has none."""

    workload: str
    case: dict[str, Any]
    side: str
    status: str = "ok"
    """"ok", "unavailable" (not installed, or no such feature) or "failed" (it raised, or
    ended in the wrong state)."""
    reason: str = ""
    note: str = ""
    samples: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class Cell:
    workload: str
    case: dict[str, Any]
    side: str
    sample: Callable[[], Metrics] | None
    note: str = ""
    unavailable: str | None = None
    collected: list[Metrics] = field(default_factory=list)
    spent: float = 0.0
    failure: str | None = None

    def finished(self, settings: Settings) -> bool:
        if self.unavailable or self.failure or self.sample is None:
            return True
        return self.spent >= settings.cell_seconds and len(self.collected) >= settings.min_samples

    def take_turn(self, settings: Settings) -> None:
        assert self.sample is not None
        turn_start = time.perf_counter()
        taken = 0
        while True:
            start = time.perf_counter()
            try:
                metrics = self.sample()
            except Exception as error:
                if self.side in OURS:
                    raise
                traceback.print_exc(file=sys.stderr)
                kind = "wrong final state" if isinstance(error, Mismatch) else "failed"
                self.failure = f"{kind}: {type(error).__name__}: {error}"
                return
            finally:
                self.spent += time.perf_counter() - start
            self.collected.append(metrics)
            taken += 1
            if taken >= settings.turn_samples:
                return
            if time.perf_counter() - turn_start >= settings.turn_seconds:
                return

    def row(self) -> Row:
        row = Row(self.workload, dict(self.case), self.side, note=self.note)
        if self.unavailable:
            row.status, row.reason = "unavailable", self.unavailable
        elif self.failure:
            row.status, row.reason = "failed", self.failure
        elif not self.collected:
            row.status, row.reason = "failed", "no samples"
        else:
            row.samples = len(self.collected)
            names = self.collected[0].keys()
            row.metrics = {
                name: statistics.median(sample[name] for sample in self.collected) for name in names
            }
        return row


def run_cells(label: str, cells: list[Cell], settings: Settings) -> list[Row]:
    """Every cell, taking turns for `settings.repeats` rounds; the rows in the cells' order.

    Everything alive before the first turn (the peers' modules, every cell's graphs and
    kernels) is frozen out of the garbage collector's sight meanwhile: in one process
    holding four frameworks, a side's collections would otherwise walk the others' objects,
    and each sample's opening `gc.collect()` would cost a tenth of a second.
    """
    gc.collect()
    gc.freeze()
    try:
        for round_index in range(settings.repeats):
            pending = [cell for cell in cells if not cell.finished(settings)]
            if not pending:
                break
            print(
                f"  {label}: round {round_index + 1}/{settings.repeats}, {len(pending)} cells",
                file=sys.stderr,
                flush=True,
            )
            for cell in pending:
                cell.take_turn(settings)
    finally:
        gc.unfreeze()
    return [cell.row() for cell in cells]


@functools.cache
def unavailable(peer: str) -> str | None:
    """Why `peer` cannot run here (it does not import), or None when it can."""
    for module in PEER_MODULES[peer]:
        try:
            importlib.import_module(module)
        except Exception as error:  # not only ImportError: a peer may fail as it imports
            return (
                f"cannot import {module} ({type(error).__name__}: {error}); "
                "install the bench extra: pip install -e '.[bench]'"
            )
    return None


PACKAGES = (
    "statekernel",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "evofabric",
    "mcp",
    "matplotlib",
    "aiosqlite",
    "immutables",
    "msgspec",
    "pydantic",
)


def machine() -> dict[str, Any]:
    """What the numbers were measured on, for the results file."""
    import sqlite3

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "sqlite": sqlite3.sqlite_version,
        "load_average_at_start": [round(load, 2) for load in os.getloadavg()],
        "packages": versions,
        "checkout": _checkout(),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _checkout() -> dict[str, Any] | None:
    """The commit measured, and whether the package's sources differed from it."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "kernel", "plugins", "stores"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"commit": commit, "package_sources_modified": bool(changed)}


def build_cell(
    workload: str,
    case: dict[str, Any],
    side: str,
    build: Callable[[], Callable[[], Metrics]],
    note: str = "",
    missing: str | None = None,
) -> Cell:
    """A cell whose sample function `build` makes (graphs, kernels: untimed, once).

    A peer that does not import, or that `missing` says has no such feature, gets a cell
    marked unavailable; one whose build raises gets a cell marked failed. Our own sides
    raise.
    """
    cell = Cell(workload, case, side, None, note=note)
    if side not in OURS:
        cell.unavailable = missing or unavailable(side.split()[0])
        if cell.unavailable:
            return cell
    try:
        cell.sample = build()
    except Exception as error:
        if side in OURS:
            raise
        traceback.print_exc(file=sys.stderr)
        cell.failure = f"failed to build: {type(error).__name__}: {error}"
    return cell
