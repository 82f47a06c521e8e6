"""Per-step checkpoint: one step appends a message, and the thread is saved durably.

The thread holds N messages (N = 10, 1,000, 10,000) and 100 untouched int keys; a sample
builds it up untimed (one bulk write, then 5 warm-up steps), then times M steps (200, or
100 from N = 10,000 on), each followed by a durable save to a fresh SQLite file (WAL,
synchronous=NORMAL on every side). Before its time counts, each side's file, reopened by a
fresh reader, must hold N + M messages, the last one the last step's.

The statekernel and LangGraph sides are benchmarks/journal_checkpoint.py's, which also runs
N = 100,000 (`--full`) and prints its own table:

- statekernel: a COMMUTATIVE thread key `Vector[Message]` and the 100 other thread keys,
  `Kernel(..., thread_store=SqliteThreadStore(path), snapshot_every=100)`; a step is
  `run.run_phase(Phase.STEP_START)` then `run.checkpoint()`;
- langgraph: a StateGraph with `messages: Annotated[list, operator.add]` and 100 int
  channels, compiled with `SqliteSaver`; a step is `graph.invoke({}, config)` with
  `durability="exit"` (one checkpoint per step), messages as (role, content) pairs;
- langgraph DeltaChannel: the same with `messages: Annotated[list, DeltaChannel(...)]`,
  which stores each step's writes and a full snapshot every 100 updates;
- floor: one `INSERT` of the message per step, in autocommit, on a bare table: the least a
  durable per-step append can cost;
- evofabric: unavailable (it has no per-thread checkpointer).

Metrics: µs per step, and what the file grew per step (database and WAL, settled by
`PRAGMA wal_checkpoint(TRUNCATE)` before and after), and the bytes the process wrote.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
import tempfile
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import journal_checkpoint as journal
from journal_checkpoint import THREAD, WARMUP_STEPS, Measurement, Window, message_text

from sidebyside.harness import Metrics, Mismatch, Row, Settings, build_cell, run_cells, unavailable

NAME = "checkpoint"
SIDE_NAMES = ("statekernel", "floor", "langgraph", "langgraph DeltaChannel", "evofabric")

MISSING_EVOFABRIC = (
    "EvoFabric 0.1.4 has no per-thread checkpointer: GraphEngineDebugger saves one run's task "
    "tree when asked, for debugging, not a thread to resume step by step"
)
NOTES = {
    "statekernel": "SqliteThreadStore, a snapshot every 100 records",
    "floor": "one INSERT per step, autocommit",
    "langgraph": "SqliteSaver, durability=exit",
    "langgraph DeltaChannel": "SqliteSaver, DeltaChannel (beta)",
}


def sizes(settings: Settings) -> list[int]:
    return [10, 100] if settings.quick else list(journal.SIZES)


def steps_for(history: int, settings: Settings) -> int:
    return 100 if settings.quick else journal.steps_for(history)


def floor_steps(path: Path, history: int, steps: int) -> Measurement:
    seeded = history - WARMUP_STEPS
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(
            "CREATE TABLE messages (thread TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT "
            "NULL, content TEXT NOT NULL, PRIMARY KEY (thread, idx))"
        )
        insert = "INSERT INTO messages (thread, idx, role, content) VALUES (?, ?, 'user', ?)"
        conn.execute("BEGIN")
        conn.executemany(insert, ((THREAD, i, message_text(i)) for i in range(seeded)))
        conn.execute("COMMIT")
        for i in range(seeded, history):
            conn.execute(insert, (THREAD, i, message_text(i)))
        with Window(path, steps) as window:
            for i in range(history, history + steps):
                conn.execute(insert, (THREAD, i, message_text(i)))
    finally:
        conn.close()
    with closing(sqlite3.connect(path)) as reader:
        count = reader.execute("SELECT count(*) FROM messages WHERE thread = ?", (THREAD,))
        last = reader.execute(
            "SELECT content FROM messages WHERE thread = ? ORDER BY idx DESC LIMIT 1", (THREAD,)
        )
        return window.measurement(count.fetchone()[0], last.fetchone()[0])


Steps = Callable[[Path, int, int], Measurement]


def sample_for(run_steps: Steps, history: int, steps: int) -> Callable[[], Metrics]:
    def sample() -> Metrics:
        with tempfile.TemporaryDirectory() as folder:
            measurement = run_steps(Path(folder) / "thread.db", history, steps)
        try:
            journal.check(measurement, history, steps)
        except RuntimeError as error:
            raise Mismatch(str(error)) from None
        metrics = {
            "us_per_step": measurement.seconds_per_step * 1e6,
            "grown_bytes_per_step": measurement.grown_per_step,
        }
        if measurement.written_per_step is not None:
            metrics["written_bytes_per_step"] = measurement.written_per_step
        return metrics

    return sample


def side_steps() -> dict[str, tuple[Steps | None, str | None]]:
    """Each side's step function, or why it has none."""
    sides: dict[str, tuple[Steps | None, str | None]] = {
        "statekernel": (journal.statekernel_side, None),
        "floor": (floor_steps, None),
    }
    reason = unavailable("langgraph")
    if reason:
        sides["langgraph"] = sides["langgraph DeltaChannel"] = (None, reason)
    else:
        default, delta = journal.langgraph_sides("exit", "pair")
        sides["langgraph"] = (default.run, default.unavailable)
        sides["langgraph DeltaChannel"] = (delta.run, delta.unavailable)
    sides["evofabric"] = (None, MISSING_EVOFABRIC)
    return sides


def run(settings: Settings) -> list[Row]:
    sides = side_steps()
    cells = []
    for history, side in itertools.product(sizes(settings), SIDE_NAMES):
        steps = steps_for(history, settings)
        run_steps, missing = sides[side]
        build = functools.partial(sample_for, run_steps, history, steps) if run_steps else None
        cells.append(
            build_cell(
                NAME,
                {"messages": history, "steps": steps},
                side,
                build or _never,
                note=NOTES.get(side, ""),
                missing=missing,
            )
        )
    return run_cells(NAME, cells, settings)


def _never() -> Callable[[], Metrics]:
    raise AssertionError("an unavailable side is never built")
