"""Per-operation cost of kernel.Vector beside a plain list and pyrsistent's pvector.

Run: python benchmarks/vector_ops.py

Why these columns: a state value that grows by append is the case SPEC §11 cares about
("a 100,000-item log must not make a commit measurably slower than 10 items").  A plain
list has to be copied before each append to keep older snapshots intact, so its cost
grows with the length; a persistent vector's must not.  pyrsistent's pvector (C) is the
obvious off-the-shelf alternative, shown raw and behind the same immutable wrapper a
Vector would need, which is the fair comparison for "should Vector just wrap pvector?".

"grow" chains operations (v = v.append(x)), the amortised cost of a log that keeps growing
(restarted from the base every 64 operations so the size stays near n).
"fork" applies the operation to the same base over and over (the old version stays in use,
as a snapshot does), averaged over 32 bases of sizes n..n+31 so every tail fill level of
the trie is covered.  Best of several interleaved repeats (so background noise hits every
column alike); timings in nanoseconds per operation.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from statekernel import Vector

pvector: Any
try:
    from pyrsistent import pvector
except ImportError:  # pragma: no cover - optional comparison only
    pvector = None

REPEATS = 9
GROW_RUN = 64  # covers two full tails of 32, so every fill level is in the average


class ListCopy:
    """A list used immutably: every append copies it first (the naive baseline)."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[Any] = ()) -> None:
        self.items = list(items)

    def append(self, x: Any) -> ListCopy:
        new = ListCopy.__new__(ListCopy)
        items = self.items.copy()
        items.append(x)
        new.items = items
        return new

    def extend(self, xs: Iterable[Any]) -> ListCopy:
        new = ListCopy.__new__(ListCopy)
        new.items = self.items + list(xs)
        return new

    def __iter__(self) -> Any:
        return iter(self.items)

    def __getitem__(self, i: int) -> Any:
        return self.items[i]


class PVectorWrapped:
    """pvector behind an immutable slotted wrapper: what Vector would be if it wrapped it."""

    __slots__ = ("_pv",)
    _pv: Any

    def __init__(self, items: Iterable[Any] = ()) -> None:
        _set_pv(self, pvector(items))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(name)

    def append(self, x: Any) -> PVectorWrapped:
        v = object.__new__(PVectorWrapped)
        _set_pv(v, self._pv.append(x))
        return v

    def extend(self, xs: Iterable[Any]) -> PVectorWrapped:
        v = object.__new__(PVectorWrapped)
        _set_pv(v, self._pv.extend(xs))
        return v

    def __iter__(self) -> Any:
        return iter(self._pv)

    def __getitem__(self, i: int) -> Any:
        return self._pv[i]


_set_pv: Any = PVectorWrapped.__dict__["_pv"].__set__

IMPLS: list[tuple[str, Callable[[Iterable[Any]], Any]]] = [("Vector", Vector)]
if pvector is not None:
    IMPLS += [("pvector(C)", pvector), ("pvector+wrapper", PVectorWrapped)]
IMPLS.append(("list copy", ListCopy))


Run = Callable[[], int]  # performs some operations, returns how many
Make = Callable[[Iterable[Any]], Any]


def compare(runs: list[Run]) -> list[float]:
    """Best seconds per operation of each run; repeats interleave so noise hits all alike."""
    result = [float("inf")] * len(runs)
    for _ in range(REPEATS):
        for k, run in enumerate(runs):
            t0 = time.perf_counter()
            n = run()
            result[k] = min(result[k], (time.perf_counter() - t0) / n)
    return result


def grow(make: Make, size: int, ops: int, op: str) -> Run:
    # Restart from the base every GROW_RUN operations so the size stays near `size`.
    base = make(range(size))
    ten = list(range(10))
    rounds = max(1, ops // GROW_RUN)

    def run() -> int:
        for _ in range(rounds):
            v = base
            if op == "append":
                for i in range(GROW_RUN):
                    v = v.append(i)
            else:
                for _ in range(GROW_RUN):
                    v = v.extend(ten)
        return rounds * GROW_RUN

    return run


def grow_append(make: Make, size: int, ops: int) -> Run:
    return grow(make, size, ops, "append")


def grow_extend(make: Make, size: int, ops: int) -> Run:
    return grow(make, size, ops, "extend")


def fork_append(make: Make, size: int, ops: int) -> Run:
    return fork(make, size, ops, "append")


def fork_extend(make: Make, size: int, ops: int) -> Run:
    return fork(make, size, ops, "extend")


def fork(make: Make, size: int, ops: int, op: str) -> Run:
    bases = [make(range(size + j)) for j in range(32)]
    ten = list(range(10))
    rounds = max(1, ops // 32)

    def run() -> int:
        for _ in range(rounds):
            for b in bases:
                if op == "append":
                    b.append(0)
                else:
                    b.extend(ten)
        return rounds * 32

    return run


def iterate(make: Make, size: int) -> Run:
    v = make(range(size))

    def run() -> int:
        for _ in v:
            pass
        return 1

    return run


def index(make: Make, size: int) -> Run:
    v = make(range(size))
    rng = random.Random(0)
    idx = [rng.randrange(size) for _ in range(10_000)]

    def run() -> int:
        for i in idx:
            v[i]
        return len(idx)

    return run


def main() -> None:
    print(f"Python {sys.version.split()[0]}; best of {REPEATS}; ns per operation")
    names = [name for name, _ in IMPLS]
    print(f"{'operation':32}" + "".join(f"{name:>17}" for name in names))

    def row(label: str, values: list[float], scale: float = 1e9, fmt: str = "{:17,.0f}") -> None:
        print(f"{label:32}" + "".join(fmt.format(v * scale) for v in values))

    def ops_for(name: str, size: int, ops: int) -> int:
        # copying a 100,000-item list per operation is slow: fewer reps keep runtime sane
        return 256 if name == "list copy" and size > 1000 else ops

    for label, measure, ops in (
        ("append grow", grow_append, 20_000),
        ("extend-by-10 grow", grow_extend, 10_000),
        ("append fork", fork_append, 10_000),
        ("extend-by-10 fork", fork_extend, 10_000),
    ):
        small = compare([measure(make, 10, ops_for(name, 10, ops)) for name, make in IMPLS])
        large = compare(
            [measure(make, 100_000, ops_for(name, 100_000, ops)) for name, make in IMPLS]
        )
        row(f"{label} @10", small)
        row(f"{label} @100,000", large)
        row(
            "  ratio large/small", [b / a for a, b in zip(small, large, strict=True)], 1, "{:17.2f}"
        )

    # Reads need no copying, so the list column reads a plain list here.
    readers = [list if make is ListCopy else make for _, make in IMPLS]
    row("iterate 100,000 (ms)", compare([iterate(m, 100_000) for m in readers]), 1e3, "{:17.2f}")
    row("random index @100,000", compare([index(m, 100_000) for m in readers]))


if __name__ == "__main__":
    main()
