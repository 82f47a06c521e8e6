"""What one message costs against a long history, under each message reducer.

Run: .venv/bin/python benchmarks/message_history.py

A thread's history grows by one or two messages a step, so appending must not cost more as
the history grows. For histories of N messages (N = 10 ... 100,000), printed in microseconds
per operation, the best of several interleaved repeats:

- `append`: one new message, through the reducer alone, the way a commit applies it to the
  Vector the field holds (`add_messages` and `append_messages`), beside a plain list
  (`old + [m]`, which LangGraph's `add_messages` and a copy-on-write list both pay: O(n));
- `commit`: the same append as `run.submit(schema.command(messages=m))` on a schema field
  declared `Annotated[list[Message], add_messages]`: type check, commit, snapshot, journal;
- `replace` and `remove`: `add_messages` replacing the middle message by id, and removing
  it with `RemoveMessage(id)`. Both rebuild the history, so they cost O(n) by design.

Every operation starts from the same history of N messages (the old one stays in use, as
a snapshot's does), so nothing here is amortised over a growing log.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from statekernel import (
    Kernel,
    Message,
    RemoveMessage,
    StateSchema,
    Vector,
    add_messages,
    append_messages,
)

SIZES = (10, 1_000, 10_000, 100_000)


class Chat(TypedDict):
    messages: Annotated[list[Message], add_messages]


def history(size: int) -> Vector[Message]:
    """A history as `add_messages` leaves it (ids msg-0 ... msg-N-1), its id index cached."""
    return add_messages(Vector(), [Message("user", f"m{i}") for i in range(size)])


def per_call(operation: Callable[[], Any], calls: int) -> float:
    """Microseconds per call of `operation`."""
    start = time.perf_counter()
    for _ in range(calls):
        operation()
    return (time.perf_counter() - start) / calls * 1e6


def reducer_cases(size: int) -> dict[str, Callable[[], Any]]:
    held = history(size)
    as_list = held.tolist()
    new = Message("assistant", "new")
    middle = held[size // 2]
    replaced = Message("assistant", "edited", id=middle.id)
    removal = [RemoveMessage(middle.id or "")]
    append_messages(held, [new])  # warm the id index for both reducers
    return {
        "add_messages append": lambda: add_messages(held, [new]),
        "append_messages append": lambda: append_messages(held, [new]),
        "plain list append": lambda: as_list + [new],  # noqa: RUF005 - the copy is the point
        "add_messages replace": lambda: add_messages(held, [replaced]),
        "add_messages remove": lambda: add_messages(held, removal),
    }


async def commit_case(size: int, calls: int) -> float:
    """Microseconds per committed append of one message to a history of `size`."""
    schema = StateSchema(Chat)
    run = await Kernel([schema.plugin]).start_run("history")
    await run.submit(schema.command(messages=[Message("user", f"m{i}") for i in range(size)]))
    gc.collect()
    gc.freeze()  # the history is the garbage collector's to walk, not the commit's
    base = run.snapshot.revision
    message = Message("assistant", "new")
    start = time.perf_counter()
    for _ in range(calls):
        await run.submit(schema.command(messages=message))
    seconds = time.perf_counter() - start
    assert run.snapshot.revision == base + calls
    assert len(run.snapshot.get(schema.keys["messages"])) == size + calls
    await run.finish()
    return seconds / calls * 1e6


def calls_for(size: int, case: str) -> int:
    if case.startswith("plain") or case.endswith(("replace", "remove")):
        return max(3, 200_000 // (size + 10))  # O(n) cases: keep each timing short
    return 2_000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timings (best kept)")
    parser.add_argument("--quick", action="store_true", help="N up to 10,000 and 2 repeats")
    args = parser.parse_args()
    sizes = SIZES[:-1] if args.quick else SIZES
    repeats = 2 if args.quick else args.repeats
    cases = [*reducer_cases(10), "commit add_messages append"]
    best: dict[tuple[str, int], float] = {}
    gc.freeze()
    for _ in range(repeats):
        for size in sizes:
            for case, operation in reducer_cases(size).items():
                took = per_call(operation, calls_for(size, case))
                best[case, size] = min(best.get((case, size), float("inf")), took)
            took = await commit_case(size, 500)
            key = ("commit add_messages append", size)
            best[key] = min(best.get(key, float("inf")), took)
    print(f"µs per operation on a history of N messages (best of {repeats})")
    print(f"{'operation':<28}" + "".join(f"{f'N={size:,}':>12}" for size in sizes))
    for case in cases:
        print(f"{case:<28}" + "".join(f"{best[case, size]:>12.2f}" for size in sizes))


if __name__ == "__main__":
    asyncio.run(main())
