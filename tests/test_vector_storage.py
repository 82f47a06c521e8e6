"""Vector's shared storage: growth across trie boundaries, independent forks, no leaks."""

from __future__ import annotations

import gc
import importlib.util
import itertools
import operator
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from statekernel import Vector

# -- growth across the trie's boundaries ---------------------------------------------------


def test_long_history_through_trie_growth() -> None:
    # Crosses 32 * 1,024 items, where the trie gains a level; forks taken along the way.
    v: Vector[int] = Vector()
    forks: list[tuple[Vector[int], int]] = []
    for i in range(70_000):
        v = v.append(i)
        if i % 4_999 == 0 or i in (32_767, 32_768, 32_799):
            forks.append((v.append(-i), i))
    assert v.tolist() == list(range(70_000))
    assert [v[i] for i in range(0, 70_000, 97)] == list(range(0, 70_000, 97))
    for fork, i in forks:
        assert len(fork) == i + 2
        assert fork[-1] == -i
        assert fork[i] == i
        assert fork.tolist()[:-1] == list(range(i + 1))


def test_large_extend_matches_list() -> None:
    base = Vector(range(1_000))
    big = base.extend(range(100_000))
    assert big.tolist() == list(range(1_000)) + list(range(100_000))
    assert base.tolist() == list(range(1_000))
    assert big == Vector(list(range(1_000)) + list(range(100_000)))


# Each base sits just below a boundary: the 32nd block that fills a 32,768-item trie (with
# the tail half full, or full), the 33rd block, the first block of a new 32,768-item group.
_BLOCK = 1_024


_TRIE = 32 * _BLOCK


@pytest.mark.parametrize(
    "n",
    [
        _TRIE + 31 * 32 + 20,
        _TRIE + 31 * 32 + 32,
        33 * _BLOCK + 31 * 32 + 8,
        2 * _TRIE + 31 * 32 + 10,
    ],
)
@pytest.mark.parametrize("k", [1, 50, 1_100])
def test_extend_and_append_across_trie_boundaries(n: int, k: int) -> None:
    base = Vector(range(n))
    new = range(n, n + k)
    by_extend = base.extend(new)
    by_append = base
    for x in new:
        by_append = by_append.append(x)
    expected = list(range(n + k))
    for v in (by_extend, by_append):
        assert v.tolist() == expected
        assert [v[i] for i in range(n - 1_100, n + k)] == expected[n - 1_100 :]
        assert (
            v[:40] == expected[:40] and v[_TRIE - 3 : _TRIE + 3] == expected[_TRIE - 3 : _TRIE + 3]
        )
    assert base.tolist() == expected[:n]


@pytest.fixture(scope="module")
def million() -> tuple[Vector[int], list[int]]:
    # Built just below 2**20 + 1,024 items (a three-level trie), then extended so that the
    # trie grows a fourth level; a trie of over 2**20 items is indexed by the general path.
    items = list(range((1 << 20) + 4_000))
    return Vector(items[: (1 << 20) + 1_000]).extend(items[(1 << 20) + 1_000 :]), items


def test_vector_over_a_million_items_reads_like_a_list(million: tuple[Vector[int], Any]) -> None:
    v, items = million
    assert len(v) == len(items)
    edge = 1 << 20
    picks = [*range(0, len(items), 997), *range(edge - 1_100, edge + 2_100), len(items) - 1]
    assert [v[i] for i in picks] == [items[i] for i in picks]
    assert [v[i - len(items)] for i in picks] == [items[i] for i in picks]
    assert v[edge - 40 : edge + 40] == items[edge - 40 : edge + 40]
    assert list(itertools.islice(reversed(v), 5_000)) == items[:-5_001:-1]
    assert v == items


def test_vector_over_a_million_items_keeps_growing(million: tuple[Vector[int], Any]) -> None:
    v, items = million
    more = v.extend(range(-1, -2_000, -1)).append(-2_000)
    assert more == [*items, *range(-1, -2_001, -1)]
    assert v == items


# -- forks from one base -------------------------------------------------------------------


def test_concurrent_forks_from_one_base_are_independent() -> None:
    base = Vector(range(40))  # partially filled tail: the in-place append path
    results: dict[int, Vector[int]] = {}
    barrier = threading.Barrier(8)

    def worker(t: int) -> None:
        barrier.wait()
        v = base
        for j in range(300):
            v = base.append(t * 1_000 + j) if j % 2 else base.extend([t, j, t])
            if j % 2:
                assert v.tolist() == [*range(40), t * 1_000 + j]
            else:
                assert v.tolist() == [*range(40), t, j, t]
        results[t] = v

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert base.tolist() == list(range(40))
    assert sorted(results) == list(range(8))
    for t, v in results.items():
        assert v.tolist() == [*range(40), t * 1_000 + 299]


def test_iteration_snapshot_ignores_later_forks() -> None:
    base = Vector(range(40))
    it = iter(base)
    base.append(-1)
    assert list(it) == list(range(40))


def test_reading_past_the_end_ignores_what_forks_added() -> None:
    # A fork that grows the base's storage in place must not make the base longer.
    for n in (5, 40, 1_100):
        base = Vector(range(n))
        fork = base.append(-1).append(-2)
        longer = base.extend([-3, -4, -5])
        for i in (n, n + 1, n + 2):
            with pytest.raises(IndexError):
                base[i]
        assert fork[n:] == [-1, -2] and longer[n:] == [-3, -4, -5]
        assert len(base) == n and base[-1] == n - 1


# -- forks from one base, interleaved at every point a thread switch could happen ----------


def _implementing_file() -> str:
    """The file of the module that defines Vector (its public `__module__` is `statekernel`;
    function code objects cannot tell either, since mutmut wraps them)."""
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        defines = path and path.endswith(".py") and vars(module).get("Vector") is Vector
        if defines and "class Vector(" in Path(path).read_text(encoding="utf-8"):
            return str(path)
    raise AssertionError("no loaded module defines Vector")


_VECTOR_FILE = _implementing_file()


def _run_with_switch(
    k: int,
    base: Vector[int],
    mine: Callable[[Vector[int]], Vector[int]],
    theirs: Callable[[Vector[int]], Vector[int]],
) -> tuple[Vector[int], list[Vector[int]]]:
    """Run `mine(base)`; at its k-th interpreter event inside the vector module, run all of
    `theirs(base)` first, as another thread could.  Their result is listed if it ran."""
    events = 0
    other: list[Vector[int]] = []

    def switch(frame: FrameType, event: str, arg: object) -> None:
        nonlocal events
        if frame.f_code.co_filename == _VECTOR_FILE:
            if events == k:
                sys.setprofile(None)
                other.append(theirs(base))
            events += 1

    previous = sys.getprofile()
    sys.setprofile(switch)
    try:
        result = mine(base)
    finally:
        sys.setprofile(previous)
    return result, other


def _interleavings(
    make_base: Callable[[], Vector[int]],
    mine: Callable[[Vector[int]], Vector[int]],
    theirs: Callable[[Vector[int]], Vector[int]],
) -> Iterator[tuple[Vector[int], Vector[int], Vector[int]]]:
    """(base, my result, their result) with their fork run at each point of mine in turn
    (k = 0, 1, ... until mine ends first), each from a fresh base."""
    for k in itertools.count():
        base = make_base()
        result, other = _run_with_switch(k, base, mine, theirs)
        if not other:
            return
        yield base, result, other[0]


def _append(x: int) -> Callable[[Vector[int]], Vector[int]]:
    return lambda v: v.append(x)


def _extend(xs: list[int]) -> Callable[[Vector[int]], Vector[int]]:
    return lambda v: v.extend(xs)


_RACES = [
    # base size: 40 = a partly filled tail; 31 = the tail fills up; 992 = 30 stored leaves
    # and a full tail, so the next item pushes the 31st leaf; 976 = the same reached by extend.
    (40, _append(-1), _append(-2)),
    (40, _extend([-1, -2]), _extend([-3])),
    (40, _extend([-1]), _append(-2)),
    (31, _append(-1), _append(-2)),
    (31, _append(-1), _extend([-2])),
    (992, _append(-1), _append(-2)),
    (976, _extend(list(range(-1, -41, -1))), _extend(list(range(-100, -140, -1)))),
]


@pytest.mark.parametrize(("n", "mine", "theirs"), _RACES)
def test_racing_forks_from_one_base_are_independent(
    n: int,
    mine: Callable[[Vector[int]], Vector[int]],
    theirs: Callable[[Vector[int]], Vector[int]],
) -> None:
    start = list(range(n))
    expected_mine = mine(Vector(start)).tolist()
    expected_theirs = theirs(Vector(start)).tolist()
    seen = 0
    for base, a, b in _interleavings(lambda: Vector(range(n)), mine, theirs):
        seen += 1
        assert base.tolist() == start
        assert a.tolist() == expected_mine
        assert b.tolist() == expected_theirs
        # Each keeps growing on its own: across the next leaf and the next block of leaves.
        for v, model in ((a, expected_mine), (b, expected_theirs), (base, start)):
            assert v.append(7).tolist() == [*model, 7]
            assert v.append(7).append(8) == [*model, 7, 8]
            assert v.extend(range(1_100)).tolist() == model + list(range(1_100))
        assert a.tolist() == expected_mine and b.tolist() == expected_theirs
    assert seen > 3


# -- what storage keeps alive --------------------------------------------------------------


_RETENTION_CHECK = """
import gc, sys, weakref
sys.path.insert(0, sys.argv[1])
from statekernel import Vector

class Item:
    pass

for grow in (
    lambda v, x: v.append(x),
    lambda v, x: v.extend([x]),
    lambda v, x: v + [x],
    lambda v, x: Vector([x] * 32).append(0),  # the full tail becomes the first stored leaf
    lambda v, x: Vector([x] * 31).extend([0, 1]),
):
    item = Item()
    ref = weakref.ref(item)
    grow(Vector(), item)
    del item
    gc.collect()
    assert ref() is None, "an item outlived every vector holding it"
"""


@pytest.mark.slow
def test_shared_empty_storage_keeps_nothing_alive() -> None:
    # Empty vectors share storage; growing one must never park items in that shared
    # storage.  A fresh interpreter, because the first growth in a process is what counts.
    root = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run(
        [sys.executable, "-c", _RETENTION_CHECK, root], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


class _Item:
    pass


def _fresh_vector_class() -> Any:
    """Vector from a new copy of its module: nothing has grown any vector of that copy yet,
    as in a new process (cheaper than starting one)."""
    spec = importlib.util.spec_from_file_location(Vector.__module__, _VECTOR_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Vector


def _alive(refs: list[weakref.ref[_Item]]) -> int:
    if any(r() is not None for r in refs):
        gc.collect()  # only when needed: a full collection is slow in a large test process
    return sum(r() is not None for r in refs)


@pytest.mark.parametrize(
    "grow",
    [
        lambda V, x: V().append(x),
        lambda V, x: V().extend([x]),
        lambda V, x: operator.add(V(), [x]),
        lambda V, x: V([x] * 32).append(0),  # the full tail becomes the first stored leaf
        lambda V, x: V([x] * 31).extend([0, 1]),
    ],
)
def test_first_growth_of_an_empty_vector_keeps_nothing_alive(grow: Any) -> None:
    fresh = _fresh_vector_class()
    item = _Item()
    ref = weakref.ref(item)
    grown = grow(fresh, item)
    assert item in grown
    del item, grown
    assert _alive([ref]) == 0


_GROW: dict[str, Callable[[Vector[Any], Any], Vector[Any]]] = {
    "append": lambda v, x: v.append(x),
    "extend": lambda v, x: v.extend([x]),
}


@pytest.mark.parametrize(("first", "then"), list(itertools.product(_GROW, _GROW)))
def test_discarded_forks_do_not_pile_up_in_the_base(first: str, then: str) -> None:
    # One fork takes over the end of the base's storage; thousands more are discarded.
    # The module's promise: what a vector's storage may keep for discarded forks is bounded
    # by one tail plus one run of leaves (32 + 31 * 32 references).
    base = Vector(range(40))
    kept = _GROW[first](base, -1)
    refs = []
    for _ in range(2_000):
        item = _Item()
        refs.append(weakref.ref(item))
        assert _GROW[then](base, item)[-1] is item
    del item
    assert _alive(refs) <= 32 + 31 * 32
    assert base == range(40) and kept == [*range(40), -1]
