"""What does one durable checkpoint cost when the thread already holds N messages?

One step of the workload: a hook appends one message to a thread-scoped message history
(beside 100 other thread-scoped keys holding small ints, never touched), then the thread is
checkpointed to a SQLite file. For each history size N (10, 1,000, 10,000; `--full` adds
100,000) the thread is first built up to N messages untimed (one bulk extend, then a few
warm-up steps), then M steps are timed. Three sides run in one process, taking turns:

- statekernel: a `Plugin` registering a COMMUTATIVE thread key `StateKey[Vector[Message],
  tuple[Message, ...]]` and the 100 other thread keys, `Kernel(..., thread_store=
  SqliteThreadStore(path), snapshot_every=100)`; a step is `run.run_phase(Phase.STEP_START)`
  (one hook returns the append) and then `run.checkpoint()`, which appends the step's
  record and, every 100 records, writes a snapshot of the whole thread (10 times as often
  as the default, so that the timed steps pay for snapshots as DeltaChannel's do).
- langgraph: a `StateGraph` with `messages: Annotated[list, operator.add]` and 100 int
  channels, one node that appends one message, compiled with `SqliteSaver`; a step is one
  `graph.invoke({}, config)` on the same thread_id, which also loads the thread's latest
  checkpoint back (statekernel's run keeps it in memory). `durability="exit"` by default, so
  each step writes one checkpoint like the other sides (`--durability async`, LangGraph's
  default, writes three per invoke: input, start and node). A message is a plain (role,
  content) pair, the cheapest form LangGraph stores; `--messages langchain` makes it a
  langchain `HumanMessage` with an id, as a LangGraph application holds it (much slower).
- langgraph DeltaChannel: the same graph with `messages: Annotated[list,
  DeltaChannel(extend_all)]` (beta, langgraph 1.1+), which stores each step's writes, plus a
  full snapshot every 100 updates of the channel, and rebuilds the value from them on load.
  Its row says so when the installed langgraph has no DeltaChannel.

Every repeat of every side gets a fresh SQLite file (WAL, synchronous=NORMAL on all sides).
Before its timing counts, each side must end with N + M messages, checked by reopening the
file from a fresh kernel / saver, and the last one must be the message of the last step.

Columns:
- us/step: the mean of the M timed steps of one repeat; the median over `--repeats` is
  printed. M is 200, or 100 from N = 10,000 on; both are multiples of the DeltaChannel
  snapshot frequency, so its full snapshots are paid for in the mean as often as they occur.
- grown B/step: how much the file grew per step, measured with the WAL folded in: before and
  after the timed steps `PRAGMA wal_checkpoint(TRUNCATE)` empties the -wal file into the
  database, then the sizes of the database and its -wal (now 0) are added. Storage kept.
- written B/step: bytes this process passed to write() during the steps and that final
  TRUNCATE (Linux `/proc/self/io` wchar; n/a elsewhere): WAL frames plus their copy into the
  database, so about twice what a step changes. I/O paid, even when nothing is kept.

A peer that is not installed, or that fails, is reported in its row; the others still run.

`--keyed` adds a fourth side: statekernel with a keyed chain (`chain_key=`), to hold a keyed
link's cost against the unkeyed one's.

Run: .venv/bin/python benchmarks/journal_checkpoint.py [--full] [--keyed] [--repeats N]
  [--json PATH]
(LangGraph sides need `.venv/bin/pip install -e '.[bench]'`)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import importlib.metadata
import itertools
import json
import operator
import sqlite3
import statistics
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from statekernel import (
    Kernel,
    KeyScope,
    MergeStrategy,
    Message,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    StateCommand,
    StateKey,
    Vector,
)
from statekernel.stores import SqliteThreadStore

OTHER_KEYS = 100
WARMUP_STEPS = 5
SNAPSHOT_EVERY = 100
SIZES = [10, 1_000, 10_000]
FULL_SIZES = [*SIZES, 100_000]
THREAD = "t"
FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod"


def steps_for(history: int) -> int:
    """Timed steps at this history size: fewer where each step is slow, never below 100."""
    return 200 if history < 10_000 else 100


def message_text(index: int) -> str:
    """The content of message `index`, the same on every side (about 90 bytes)."""
    return f"message {index:07d}: {FILLER}"


@dataclass
class Measurement:
    """One repeat of one side at one history size."""

    seconds_per_step: float
    grown_per_step: float
    written_per_step: float | None
    final_messages: int
    last_content: str


@dataclass
class Row:
    """One line of the table: a side's median over repeats, or why it has no numbers."""

    history: int
    side: str
    steps: int
    us_per_step: float | None = None
    grown_bytes_per_step: float | None = None
    written_bytes_per_step: float | None = None
    final_messages: int | None = None
    note: str = ""


# --- the SQLite file -------------------------------------------------------------------


def settled_size(path: Path) -> int:
    """Database plus -wal size, after folding the WAL into the database and truncating it.

    Without the TRUNCATE the -wal file keeps its high-water mark after SQLite's automatic
    checkpoints, so db + wal would over- or under-count by up to its size.
    """
    with closing(sqlite3.connect(path)) as conn:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        raise RuntimeError(f"{path}: wal_checkpoint(TRUNCATE) was blocked by a reader")
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def bytes_written() -> int | None:
    """Bytes this process has passed to write() so far (all threads), or None off Linux."""
    try:
        with open("/proc/self/io") as io:
            fields = dict(line.split(": ") for line in io.read().splitlines())
    except OSError:
        return None
    return int(fields["wchar"])


class Window:
    """Times the steps and measures what they cost the file, settled before and after."""

    def __init__(self, path: Path, steps: int) -> None:
        self.path = path
        self.steps = steps

    def __enter__(self) -> Window:
        self.size_before = settled_size(self.path)
        gc.collect()  # leave no collection owed by the untimed build-up
        self.written_before = bytes_written()
        self.start = time.perf_counter()
        return self

    def __exit__(self, error_type: type[BaseException] | None, *rest: object) -> None:
        self.seconds = time.perf_counter() - self.start
        if error_type is not None:
            return  # the steps failed: let their error through, measure nothing
        self.grown = settled_size(self.path) - self.size_before
        after = bytes_written()
        before = self.written_before
        self.written = None if after is None or before is None else after - before

    def measurement(self, final_messages: int, last_content: str) -> Measurement:
        written = None if self.written is None else self.written / self.steps
        return Measurement(
            self.seconds / self.steps,
            self.grown / self.steps,
            written,
            final_messages,
            last_content,
        )


# --- statekernel ---------------------------------------------------------------------


class History(StateKey[Vector[Message], tuple[Message, ...]]):
    """The workload's message history: appended to, never rewritten."""

    key = "bench.messages"
    merge = MergeStrategy.COMMUTATIVE
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[Message], update: tuple[Message, ...]) -> Vector[Message]:
        return value.extend(update)


def other_key(index: int) -> type[StateKey[int, int]]:
    """One of the untouched thread keys: it is saved at every checkpoint, never changed."""

    def body(namespace: dict[str, Any]) -> None:
        namespace.update(key=f"bench.k{index}", scope=KeyScope.THREAD)

    return types.new_class(f"Other{index}", (StateKey[int, int],), {}, body)


OTHERS = [other_key(i) for i in range(OTHER_KEYS)]


class Conversation(Plugin):
    """Registers the keys, and a STEP_START hook that appends the next message."""

    id = "bench-conversation"

    def __init__(self, next_index: int = 0) -> None:
        self.counter = itertools.count(next_index)

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(History)
        for key in OTHERS:
            registrar.register_key(key)
        registrar.register_phase_hook(Phase.STEP_START, self.append)

    def append(self, ctx: PhaseContext) -> StateCommand:
        message = Message(role="user", content=message_text(next(self.counter)))
        return StateCommand().update(History, (message,))


def seed_command(count: int) -> StateCommand:
    """Messages 0..count-1 in one extend, and a small value in every other key."""
    messages = tuple(Message(role="user", content=message_text(i)) for i in range(count))
    command = StateCommand().update(History, messages)
    for index, key in enumerate(OTHERS):
        command.update(key, index)
    return command


CHAIN_KEY = bytes(range(32))
"""The key of the `--keyed` side's chain (any 32 bytes: what is measured is the hashing)."""


async def statekernel_steps(
    path: Path, history: int, steps: int, chain_key: bytes | None = None
) -> Measurement:
    seeded = history - WARMUP_STEPS
    store = SqliteThreadStore(path)
    try:
        # A snapshot every 100 records (the default is 1,000), like DeltaChannel's: each timed
        # window then includes its snapshots, so the mean pays for them as often as they occur.
        kernel = Kernel(
            [Conversation(next_index=seeded)],
            thread_store=store,
            snapshot_every=SNAPSHOT_EVERY,
            chain_key=chain_key,
        )
        run = await kernel.start_run(THREAD)
        await run.submit(seed_command(seeded))
        await run.checkpoint()
        for _ in range(WARMUP_STEPS):
            await run.run_phase(Phase.STEP_START)
            await run.checkpoint()
        with Window(path, steps) as window:
            for _ in range(steps):
                await run.run_phase(Phase.STEP_START)
                await run.checkpoint()
        await run.finish()
    finally:
        await store.close()
    messages = await statekernel_reloaded(path, chain_key)
    return window.measurement(len(messages), messages[-1].content)


async def statekernel_reloaded(path: Path, chain_key: bytes | None = None) -> Vector[Message]:
    """The history as a fresh kernel on the same file restores it: proof the steps are saved."""
    async with SqliteThreadStore(path) as store:
        kernel = Kernel([Conversation()], thread_store=store, chain_key=chain_key)
        run = await kernel.start_run(THREAD)
        messages = run.snapshot.get(History)
        await run.finish()
    return messages


def statekernel_side(path: Path, history: int, steps: int) -> Measurement:
    return asyncio.run(statekernel_steps(path, history, steps))


def statekernel_keyed_side(path: Path, history: int, steps: int) -> Measurement:
    return asyncio.run(statekernel_steps(path, history, steps, CHAIN_KEY))


# --- LangGraph -----------------------------------------------------------------------


def pair_message(index: int) -> tuple[str, str]:
    """A message as a plain (role, content) pair: the cheapest form LangGraph stores.

    Not a {"role", "content"} dict: LangGraph turns those into langchain HumanMessage objects
    with fresh ids when it writes them to a DeltaChannel (but not to operator.add), so the
    two LangGraph sides would store different data.
    """
    return ("user", message_text(index))


def langchain_message(index: int) -> Any:
    """A message as a LangGraph application holds it: a langchain HumanMessage with an id."""
    from langchain_core.messages import HumanMessage

    return HumanMessage(content=message_text(index), id=f"m{index}")


MESSAGE_FORMS: dict[str, Callable[[int], Any]] = {
    "pair": pair_message,
    "langchain": langchain_message,
}


def content_of(message: Any) -> str:
    """The text of a message read back: a pair comes back as a list, a langchain one as is."""
    return str(message[1] if isinstance(message, list | tuple) else message.content)


@dataclass(frozen=True)
class LangGraphWorkload:
    """What differs between LangGraph runs: the messages channel, durability, message form."""

    channel: Any
    durability: str
    make_message: Callable[[int], Any]


def extend_all(state: list[Any], writes: Sequence[list[Any]]) -> list[Any]:
    """DeltaChannel's batch reducer: a new list, like operator.add, so no blob is shared."""
    return [*state, *itertools.chain.from_iterable(writes)]


def langgraph_state(channel: Any) -> Any:
    """A TypedDict with the messages channel and the 100 untouched int channels."""
    fields: dict[str, Any] = {"messages": Annotated[list, channel]}
    fields.update({f"k{i}": int for i in range(OTHER_KEYS)})
    return TypedDict("BenchState", fields)  # type: ignore[operator]


def langgraph_steps(
    path: Path, history: int, steps: int, workload: LangGraphWorkload
) -> Measurement:
    from langgraph.checkpoint.sqlite import SqliteSaver

    seeded = history - WARMUP_STEPS
    config = {"configurable": {"thread_id": THREAD}}
    durability = workload.durability
    conn = langgraph_connection(path)
    try:
        graph = langgraph_graph(SqliteSaver(conn), workload, next_index=seeded - 1)
        seed: dict[str, Any] = {f"k{i}": i for i in range(OTHER_KEYS)}
        seed["messages"] = [workload.make_message(i) for i in range(seeded - 1)]
        graph.invoke(seed, config, durability=durability)  # the node appends message seeded-1
        for _ in range(WARMUP_STEPS):
            graph.invoke({}, config, durability=durability)
        with Window(path, steps) as window:
            for _ in range(steps):
                graph.invoke({}, config, durability=durability)
    finally:
        conn.close()
    messages = langgraph_reloaded(path, workload, config)
    return window.measurement(len(messages), content_of(messages[-1]))


def langgraph_connection(path: Path) -> sqlite3.Connection:
    """A connection set like statekernel's store (WAL, synchronous=NORMAL), for SqliteSaver."""
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def langgraph_graph(checkpointer: Any, workload: LangGraphWorkload, next_index: int = 0) -> Any:
    """START -> append -> END, where `append` adds the next message."""
    from langgraph.graph import END, START, StateGraph

    counter = itertools.count(next_index)

    def append(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [workload.make_message(next(counter))]}

    builder: Any = StateGraph(langgraph_state(workload.channel))
    builder.add_node("append", append)
    builder.add_edge(START, "append")
    builder.add_edge("append", END)
    return builder.compile(checkpointer=checkpointer)


def langgraph_reloaded(path: Path, workload: LangGraphWorkload, config: Any) -> list[Any]:
    """The history as a fresh saver and graph on the same file read it back."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        graph = langgraph_graph(SqliteSaver(conn), workload)
        messages: list[Any] = graph.get_state(config).values["messages"]
    finally:
        conn.close()
    return messages


# --- the sides -----------------------------------------------------------------------


@dataclass
class Side:
    """A name, why it cannot run here (None when it can), and how to run one repeat."""

    name: str
    unavailable: str | None
    run: Callable[[Path, int, int], Measurement]


def langgraph_sides(durability: str, form: str) -> list[Side]:
    """The two LangGraph sides, each marked unavailable rather than failing on import."""
    default, delta = "langgraph", "langgraph DeltaChannel"
    try:
        for module in ("langgraph.graph", "langgraph.checkpoint.sqlite"):
            importlib.import_module(module)
    except ImportError as error:
        reason = f"not installed ({error.name}): pip install -e '.[bench]'"
        return [Side(default, reason, _never), Side(delta, reason, _never)]

    def run_default(path: Path, history: int, steps: int) -> Measurement:
        workload = LangGraphWorkload(operator.add, durability, MESSAGE_FORMS[form])
        return langgraph_steps(path, history, steps, workload)

    sides = [Side(default, None, run_default)]
    try:
        from langgraph.channels import DeltaChannel
    except ImportError:
        reason = f"not available in langgraph {importlib.metadata.version('langgraph')}"
        return [*sides, Side(delta, reason, _never)]

    def run_delta(path: Path, history: int, steps: int) -> Measurement:
        workload = LangGraphWorkload(DeltaChannel(extend_all), durability, MESSAGE_FORMS[form])
        return langgraph_steps(path, history, steps, workload)

    return [*sides, Side(delta, None, run_delta)]


def _never(path: Path, history: int, steps: int) -> Measurement:
    raise AssertionError("an unavailable side is never run")


def check(measurement: Measurement, history: int, steps: int) -> None:
    """Refuse a repeat whose thread does not end as the workload says (not `assert`: -O)."""
    expected = history + steps
    last = message_text(expected - 1)
    if measurement.final_messages != expected or measurement.last_content != last:
        raise RuntimeError(
            f"ended with {measurement.final_messages} messages, last {measurement.last_content!r};"
            f" expected {expected}, last {last!r}"
        )


def run_all(sizes: list[int], sides: list[Side], repeats: int, folder: Path) -> list[Row]:
    """Every side at every size, repeat after repeat, taking turns so noise hits all alike."""
    samples: dict[tuple[int, str], list[Measurement]] = {}
    failures: dict[tuple[int, str], str] = {}
    for repeat, history, side in itertools.product(range(repeats), sizes, sides):
        cell = (history, side.name)
        if side.unavailable or cell in failures:
            continue
        print(f"  repeat {repeat + 1}/{repeats}: {side.name}, N={history:,}", file=sys.stderr)
        steps = steps_for(history)
        path = folder / f"{repeat}-{history}-{side.name.replace(' ', '-')}.db"
        try:
            measurement = side.run(path, history, steps)
            check(measurement, history, steps)
        except Exception as error:
            if side.name == "statekernel":
                raise  # our own side failing is a bug to see, not a row
            traceback.print_exc(file=sys.stderr)
            failures[cell] = f"failed: {type(error).__name__}: {error}"
            continue
        samples.setdefault(cell, []).append(measurement)
    return [
        summarise(history, side, samples.get((history, side.name), []), failures)
        for history, side in itertools.product(sizes, sides)
    ]


def summarise(
    history: int, side: Side, samples: list[Measurement], failures: dict[tuple[int, str], str]
) -> Row:
    row = Row(history, side.name, steps_for(history))
    if side.unavailable or not samples:
        row.note = side.unavailable or failures.get((history, side.name), "no samples")
        return row
    row.us_per_step = statistics.median(m.seconds_per_step for m in samples) * 1e6
    row.grown_bytes_per_step = statistics.median(m.grown_per_step for m in samples)
    written = [m.written_per_step for m in samples if m.written_per_step is not None]
    row.written_bytes_per_step = statistics.median(written) if written else None
    row.final_messages = samples[0].final_messages  # check() made every repeat end alike
    return row


def check_same_counts(rows: list[Row]) -> None:
    """Every side that ran at a size must have ended with the same number of messages."""
    for history in {row.history for row in rows}:
        counts = {r.final_messages for r in rows if r.history == history and r.final_messages}
        if len(counts) > 1:
            raise RuntimeError(f"N={history:,}: the sides ended with different counts {counts}")


# --- output --------------------------------------------------------------------------


def render(rows: list[Row]) -> str:
    """The results as a markdown table."""
    headers = ["N", "side", "steps", "us/step", "grown B/step", "written B/step", "note"]
    lines = [
        [
            f"{row.history:,}",
            row.side,
            f"{row.steps}",
            *(
                _number(value, missing="" if row.note else "n/a")
                for value in (row.us_per_step, row.grown_bytes_per_step, row.written_bytes_per_step)
            ),
            row.note,
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [headers, *lines]) for i in range(len(headers))]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"]
    rules = ["-" * (w + 1) + ":" for w in widths[:-1]]  # numbers right-aligned, note left
    out.append("|" + "|".join([*rules, "-" * (widths[-1] + 2)]) + "|")
    for line in lines:
        cells = [c.rjust(w) for c, w in zip(line[:-1], widths[:-1], strict=True)]
        out.append("| " + " | ".join([*cells, line[-1].ljust(widths[-1])]) + " |")
    return "\n".join(out)


def _number(value: float | None, missing: str) -> str:
    return missing if value is None else f"{value:,.0f}"


def versions() -> dict[str, str]:
    """What was measured, for the JSON file."""
    found = {"python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version}
    for name in ("statekernel", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def write_json(path: Path, rows: list[Row], args: argparse.Namespace) -> None:
    document = {
        "benchmark": "journal_checkpoint",
        "versions": versions(),
        "settings": {
            "repeats": args.repeats,
            "full": args.full,
            "durability": args.durability,
            "langgraph_messages": args.messages,
            "other_keys": OTHER_KEYS,
            "warmup_steps": WARMUP_STEPS,
            "bytes_grown": "db + wal after PRAGMA wal_checkpoint(TRUNCATE), before and after",
            "bytes_written": "/proc/self/io wchar over the steps and the final TRUNCATE",
        },
        "results": [asdict(row) for row in rows],
    }
    path.write_text(json.dumps(document, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also N = 100,000 (minutes)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per side and size (median)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    parser.add_argument(
        "--durability",
        choices=["exit", "sync", "async"],
        default="exit",
        help="LangGraph's durability mode (exit: one checkpoint per invoke, as measured here)",
    )
    parser.add_argument(
        "--messages",
        choices=list(MESSAGE_FORMS),
        default="pair",
        help="how LangGraph holds a message (pair: (role, content); langchain: HumanMessage)",
    )
    parser.add_argument("--dir", type=Path, help="where the SQLite files go (default: a temp dir)")
    parser.add_argument(
        "--keyed",
        action="store_true",
        help="also statekernel with a keyed chain (chain_key=), taking turns with the others",
    )
    args = parser.parse_args()
    sizes = FULL_SIZES if args.full else SIZES
    sides = [
        Side("statekernel", None, statekernel_side),
        *([Side("statekernel keyed", None, statekernel_keyed_side)] if args.keyed else []),
        *langgraph_sides(args.durability, args.messages),
    ]
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        rows = run_all(sizes, sides, args.repeats, Path(folder))
    check_same_counts(rows)
    print(
        f"per-step checkpoint to SQLite with N messages of history and {OTHER_KEYS} other keys;"
        f" median of {args.repeats} repeats, each the mean over its steps (lower is better)\n"
    )
    print(render(rows))
    if args.json:
        write_json(args.json, rows, args)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
