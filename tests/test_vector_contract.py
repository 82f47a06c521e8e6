"""Vector promises that tests/test_vector.py leaves open: very large and boundary-crossing
vectors, forks that race for shared storage, what storage keeps alive, the sequence
helpers' edge cases and error messages, and the pydantic field type."""

from __future__ import annotations

import collections
import gc
import importlib.util
import itertools
import operator
import sys
import weakref
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekernel import Vector

# -- growth across the trie's boundaries ---------------------------------------------------

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


# -- reading -------------------------------------------------------------------------------


def _list_error(exc_type: type[Exception], read: Callable[[], object]) -> str:
    with pytest.raises(exc_type) as info:
        read()
    return str(info.value).replace("list", "Vector")


@pytest.mark.parametrize("n", [0, 5, 40, 1_100])
def test_out_of_range_index_is_reported_like_list(n: int) -> None:
    v, items = Vector(range(n)), list(range(n))
    for bad in (n, n + 1, -n - 1, -n - 40):
        with pytest.raises(IndexError) as info:
            v[bad]
        assert str(info.value) == _list_error(IndexError, partial(items.__getitem__, bad))


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


@settings(max_examples=60, deadline=None)
@given(
    n=st.sampled_from([1, 31, 32, 33, 100, 1_055, 1_100]),
    modulo=st.integers(1, 200),
    value=st.integers(-1, 200),
    start=st.none() | st.integers(-1_200, 1_200),
    stop=st.none() | st.integers(-1_200, 1_200),
)
def test_index_matches_list(
    n: int, modulo: int, value: int, start: int | None, stop: int | None
) -> None:
    items = [i % modulo for i in range(n)]
    v = Vector(items)
    args: tuple[int, ...] = () if start is None else (start,)
    if stop is not None:
        args = (start or 0, stop)
    try:
        expected: int | str = items.index(value, *args)
    except ValueError as exc:
        expected = str(exc).replace("list", "Vector")
    try:
        got: int | str = v.index(value, *args)
    except ValueError as exc:
        got = str(exc)
    assert got == expected


def test_index_finds_every_item_and_stops_at_stop() -> None:
    items = list(range(1_100))
    v = Vector(items)
    assert [v.index(x) for x in items] == items
    assert Vector([7, 1, 7]).index(7) == 0
    for value, lo, hi in ((90, 0, 40), (1_000, 0, 32), (1_000, 33, 999), (5, 6, 1_100)):
        with pytest.raises(ValueError) as info:
            v.index(value, lo, hi)
        assert str(info.value) == _list_error(ValueError, partial(items.index, value, lo, hi))
    with pytest.raises(ValueError) as info:
        Vector(["a"]).index("z")
    assert str(info.value) == _list_error(ValueError, lambda: ["a"].index("z"))


# -- equality and concatenation with other sequences ---------------------------------------


def test_equality_compares_items_with_other_sequences() -> None:
    v = Vector([1, 2, 3])
    assert v != (1, 2, 4) and v != (0, 2, 3) and v != [1, 2, 4]
    assert v == collections.UserList([1, 2, 3])
    assert v != collections.UserList([1, 2, 4])
    assert v != collections.UserList([1, 2])
    assert Vector(range(3)) != range(4) and Vector(range(4)) != range(3)
    assert Vector(range(1_100)) == range(1_100) and Vector(range(1_100)) != range(1, 1_101)
    # Equal but distinct items compare by value; the same object equals itself (as in list).
    assert Vector([[1], [2]]) == collections.UserList([[1], [2]])
    nan = float("nan")
    for other in ([nan], (nan,), collections.UserList([nan]), Vector([nan])):
        assert Vector([nan]) == other
    for other in ([float("nan")], (float("nan"),), collections.UserList([float("nan")])):
        assert Vector([nan]) != other


@pytest.mark.parametrize(
    "make",
    [
        lambda: range(2, 5),
        lambda: (x for x in [2, 3, 4]),
        lambda: collections.deque([2, 3, 4]),
        lambda: {2: 0, 3: 0, 4: 0}.keys(),
    ],
)
def test_add_accepts_any_iterable(make: Callable[[], Any]) -> None:
    v = Vector([1])
    assert (v + make()).tolist() == [1, 2, 3, 4]
    assert v == [1]


def test_deleting_an_attribute_names_it() -> None:
    v = Vector([1])
    with pytest.raises(AttributeError, match="immutable.*'tolist'"):
        del v.tolist
    with pytest.raises(AttributeError, match="immutable.*'extra'"):
        v.extra = 1


# -- pydantic: a Vector[T] field behaves like a list[T] field ------------------------------


def _twin_models() -> tuple[Any, Any]:
    # Defined per test: pydantic builds a model's schema once, when the class is created.
    class Item(pydantic.BaseModel):
        role: str

    # An item type whose serialised form differs from the validated value.
    Tag = Annotated[int, pydantic.PlainSerializer(lambda x: f"#{x}", return_type=str)]

    class WithVector(pydantic.BaseModel):
        steps: Vector[int]
        items: Vector[Item] = Vector()
        loose: Vector = Vector()  # type: ignore[type-arg]
        tags: Vector[Tag] = Vector()

    class WithList(pydantic.BaseModel):
        steps: list[int]
        items: list[Item] = []
        loose: list = []  # type: ignore[type-arg]
        tags: list[Tag] = []

    return WithVector, WithList


_GOOD = [
    {"steps": [1, "2"], "items": [{"role": "user"}], "loose": [1, "a", None], "tags": [1, "2"]},
    {"steps": (3,), "items": ({"role": "a"}, {"role": "b"})},
    {"steps": []},
]
_BAD = [
    {"steps": ["x"]},
    {"steps": [1, None]},
    {"steps": 5},
    {"steps": "12"},
    {"steps": [1], "items": [{"nope": 1}]},
    {"steps": [1], "loose": 3},
    {"steps": [1], "tags": ["#1"]},
]


def _errors(model: type[pydantic.BaseModel], data: Any, **kw: Any) -> Any:
    try:
        return model.model_validate(data, **kw).model_dump()
    except pydantic.ValidationError as exc:
        return exc.errors(include_url=False)


@pytest.mark.parametrize("data", _GOOD + _BAD)
def test_pydantic_validates_like_list(data: dict[str, Any]) -> None:
    with_vector, with_list = _twin_models()
    assert _errors(with_vector, data) == _errors(with_list, data)
    if data in _GOOD:
        m = with_vector.model_validate(data)
        assert type(m.steps) is Vector and type(m.loose) is Vector
        assert all(type(x).__name__ == "Item" for x in m.items)


def test_pydantic_strict_mode_accepts_vectors() -> None:
    with_vector, with_list = _twin_models()
    m = with_vector.model_validate({"steps": Vector([1, 2]), "loose": Vector(["a"])}, strict=True)
    assert m.steps == [1, 2] and type(m.steps) is Vector
    assert m.loose == ["a"]
    for data in ({"steps": (1,)}, {"steps": ["1"]}, {"steps": [1]}):
        assert _errors(with_vector, data, strict=True) == _errors(with_list, data, strict=True)


def test_pydantic_serialises_and_describes_like_list() -> None:
    with_vector, with_list = _twin_models()
    data = _GOOD[0]
    v, lst = with_vector.model_validate(data), with_list.model_validate(data)
    dumped = v.model_dump()
    assert dumped == lst.model_dump()
    assert all(type(dumped[name]) is list for name in ("steps", "items", "loose", "tags"))
    assert v.model_dump_json() == lst.model_dump_json()
    plain = with_vector.model_validate(_GOOD[1])  # no tags: its dump is valid input again
    assert with_vector.model_validate_json(plain.model_dump_json()) == plain
    assert with_vector.model_validate(plain.model_dump()) == plain
    for mode in ("validation", "serialization"):
        schema = with_vector.model_json_schema(mode=mode)
        twin = with_list.model_json_schema(mode=mode)
        assert schema["properties"] == twin["properties"]
        assert schema.get("$defs") == twin.get("$defs")
    # A field assigned a plain sequence afterwards (no validate_assignment) still dumps as one.
    v.steps = (5, 6)
    assert v.model_dump()["steps"] == [5, 6] and type(v.model_dump()["steps"]) is list
    raw = with_vector.model_construct(steps=[7], items=(), loose=range(2), tags=(3,))
    assert raw.model_dump() == {"steps": [7], "items": [], "loose": [0, 1], "tags": ["#3"]}


def test_pydantic_type_adapter() -> None:
    ints = pydantic.TypeAdapter(Vector[int])
    assert ints.validate_python(["1", 2]) == [1, 2]
    assert ints.dump_python(Vector([1, 2])) == [1, 2]
    assert ints.dump_json(Vector([1, 2])) == pydantic.TypeAdapter(list[int]).dump_json([1, 2])
    with pytest.raises(pydantic.ValidationError):
        ints.validate_python([None])
    anything = pydantic.TypeAdapter(Vector)
    assert anything.validate_python(Vector([None, "a"])) == [None, "a"]
    assert anything.json_schema() == pydantic.TypeAdapter(list).json_schema()


@pytest.mark.parametrize("n", [5, 40, 1_100])
def test_stepped_slices_take_every_step_th_item(n: int) -> None:
    items = list(range(n))
    v = Vector(items)
    for s in (
        slice(None, None, 2),
        slice(1, n - 1, 2),
        slice(None, None, 3),
        slice(None, None, -2),
    ):
        assert v[s].tolist() == items[s]
