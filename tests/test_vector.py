"""Vector as a sequence: read, sliced, compared and added to like a list; every version kept."""

from __future__ import annotations

import collections
import copy
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from statekernel import Vector

# Sizes around the storage boundaries: tail (32), a block of leaves (1,024), trie growth.
BOUNDARY_SIZES = [0, 1, 2, 31, 32, 33, 63, 64, 65, 1023, 1024, 1025, 1056, 2047, 2048, 2080]


def check(v: Vector[Any], model: list[Any]) -> None:
    assert len(v) == len(model)
    assert bool(v) is bool(model)
    assert list(v) == model
    assert v.tolist() == model
    assert v.totuple() == tuple(model)
    assert list(reversed(v)) == model[::-1]
    assert v == model
    if model:
        for i in {0, len(model) // 2, len(model) - 1, -1, -len(model)}:
            assert v[i] == model[i]


# -- model-based: every version stays valid, forks included --------------------------------


class VectorVersions(RuleBasedStateMachine):
    """Grow a tree of versions from random older versions, compared with list models."""

    def __init__(self) -> None:
        super().__init__()
        self.versions: list[tuple[Vector[int], list[int]]] = []

    @initialize(n=st.sampled_from(BOUNDARY_SIZES) | st.integers(0, 3000))
    def start(self, n: int) -> None:
        self.versions.append((Vector(range(n)), list(range(n))))

    def _pick(self, data: st.DataObject) -> tuple[Vector[int], list[int]]:
        index = data.draw(st.integers(0, len(self.versions) - 1), label="base version")
        return self.versions[index]

    def _keep(self, v: Vector[int], model: list[int]) -> None:
        check(v, model)
        self.versions.append((v, model))
        if len(self.versions) > 40:  # bound the cost of the invariant
            del self.versions[1]

    @rule(data=st.data(), x=st.integers())
    def append(self, data: st.DataObject, x: int) -> None:
        v, model = self._pick(data)
        self._keep(v.append(x), [*model, x])

    @rule(
        data=st.data(),
        xs=st.lists(st.integers(), max_size=80),
        kind=st.sampled_from(["list", "tuple", "vector", "generator"]),
    )
    def extend(self, data: st.DataObject, xs: list[int], kind: str) -> None:
        v, model = self._pick(data)
        arg: Any
        if kind == "list":
            arg = list(xs)
        elif kind == "tuple":
            arg = tuple(xs)
        elif kind == "vector":
            arg = Vector(xs)
        else:
            arg = (x for x in xs)
        self._keep(v.extend(arg), model + xs)

    @rule(
        data=st.data(),
        xs=st.lists(st.integers(), max_size=80),
        kind=st.sampled_from([list, tuple, Vector]),
    )
    def plus(self, data: st.DataObject, xs: list[int], kind: Any) -> None:
        v, model = self._pick(data)
        self._keep(v + kind(xs), model + xs)

    @rule(data=st.data())
    def plus_vector_of_another_version(self, data: st.DataObject) -> None:
        v, model = self._pick(data)
        w, other = self._pick(data)
        self._keep(v + w, model + other)

    @rule(data=st.data(), bounds=st.tuples(st.integers(-3100, 3100), st.integers(-3100, 3100)))
    def slice_then_grow(self, data: st.DataObject, bounds: tuple[int, int]) -> None:
        v, model = self._pick(data)
        start, stop = bounds
        self._keep(v[start:stop].append(-1), [*model[start:stop], -1])

    @invariant()
    def every_version_unchanged(self) -> None:
        for v, model in self.versions:
            assert v.tolist() == model
            assert len(v) == len(model)


TestVectorVersions = VectorVersions.TestCase


TestVectorVersions.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


# -- reading -------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [*BOUNDARY_SIZES, 40_000])
def test_indexing_matches_list(n: int) -> None:
    items = list(range(n))
    v = Vector(items)
    assert [v[i] for i in range(n)] == items
    assert [v[-i] for i in range(1, n + 1)] == [items[-i] for i in range(1, n + 1)]
    for bad in (n, n + 1, -n - 1, 10**9, -(10**9)):
        with pytest.raises(IndexError):
            v[bad]


def test_index_accepts_index_like_and_rejects_others() -> None:
    v = Vector("abc")
    assert v[True] == "b"
    with pytest.raises(TypeError):
        v["0"]  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        v[1.0]  # type: ignore[call-overload]


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


@given(
    n=st.sampled_from(BOUNDARY_SIZES) | st.integers(0, 2_500),
    start=st.none() | st.integers(-2_600, 2_600),
    stop=st.none() | st.integers(-2_600, 2_600),
    step=st.none() | st.integers(-70, 70).filter(bool),
)
def test_slicing_matches_list(
    n: int, start: int | None, stop: int | None, step: int | None
) -> None:
    items = list(range(n))
    got = Vector(items)[start:stop:step]
    assert isinstance(got, Vector)
    assert got.tolist() == items[start:stop:step]


def test_slice_is_independent_of_source() -> None:
    v = Vector(range(100))
    part = v[10:20]
    grown = part.append(-1)
    assert v.tolist() == list(range(100))
    assert part.tolist() == list(range(10, 20))
    assert grown.tolist() == [*range(10, 20), -1]


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


def test_sequence_helpers() -> None:
    v = Vector(range(100)).extend([5, 7, 5])
    assert isinstance(v, Sequence)
    assert 99 in v and 5 in v and -1 not in v and None not in v
    assert v.count(5) == 3 and v.count(-1) == 0
    assert v.index(5) == 5
    assert v.index(5, 6) == 100
    assert v.index(5, -3) == 100
    assert v.index(5, 101) == 102
    with pytest.raises(ValueError):
        v.index(5, 6, 100)
    with pytest.raises(ValueError):
        v.index(-1)
    assert list(iter(Vector())) == []
    assert not Vector() and Vector([0])


@settings(max_examples=200, deadline=None)
@given(
    base=st.lists(st.integers(0, 3), max_size=80),
    more=st.lists(st.integers(0, 3), max_size=80),
    cut=st.integers(0, 200),
    flip=st.integers(0, 200),
)
def test_startswith_is_a_prefix_comparison_however_the_vectors_were_built(
    base: list[int], more: list[int], cut: int, flip: int
) -> None:
    grown = Vector(base).extend(more)  # shares base's storage
    assert grown.startswith(Vector(base)) and grown.startswith(base)
    assert Vector(base + more).startswith(Vector(base))  # built apart: compared by items
    prefix = (base + more)[: cut % (len(base) + len(more) + 2)]
    expected = (base + more)[: len(prefix)] == prefix
    assert grown.startswith(Vector(prefix)) is expected
    changed = list(prefix)
    if changed:
        changed[flip % len(changed)] += 10  # one item differs: never a prefix
        assert not grown.startswith(Vector(changed)) and not grown.startswith(changed)
    assert not Vector(base).startswith(Vector([*base, 0]))  # longer than the vector
    assert Vector().startswith(()) and grown.startswith(Vector())


def test_startswith_on_vectors_deep_enough_to_have_a_trie() -> None:
    base = Vector(range(3000))
    grown = base.extend(range(3000, 5000))
    assert grown.startswith(base) and grown.startswith(range(2500))
    assert Vector(range(5000)).startswith(base)
    for position in (0, 31, 32, 1023, 1024, 2999):
        changed = [*range(3000)]
        changed[position] = -1
        assert not grown.startswith(Vector(changed)), position


def test_hash_like_tuple() -> None:
    a = Vector(range(100))
    b = Vector(range(50)).extend(range(50, 100))
    assert a == b
    assert hash(a) == hash(b) == hash(tuple(range(100)))
    assert hash(a) == hash(a)
    assert len({a, b, tuple(range(100))}) == 1
    with pytest.raises(TypeError):
        hash(Vector([[1]]))


def test_repr() -> None:
    assert repr(Vector([1, 2, 3])) == "Vector([1, 2, 3])"
    assert repr(Vector()) == "Vector([])"
    assert repr(Vector(["a"])) == "Vector(['a'])"


# -- immutable values ----------------------------------------------------------------------


def test_immutable() -> None:
    v = Vector([1, 2, 3])
    with pytest.raises(AttributeError):
        v.x = 1
    with pytest.raises(AttributeError):
        v._s = (0, 0, [], ())
    with pytest.raises(AttributeError):
        del v._s
    with pytest.raises(TypeError):
        v[0] = 5  # type: ignore[index]
    assert v == [1, 2, 3]


def test_deleting_an_attribute_names_it() -> None:
    v = Vector([1])
    with pytest.raises(AttributeError, match="immutable.*'tolist'"):
        del v.tolist
    with pytest.raises(AttributeError, match="immutable.*'extra'"):
        v.extra = 1


def test_input_containers_are_not_aliased() -> None:
    source = [1, 2, 3]
    v = Vector(source)
    xs = [4, 5]
    w = v.extend(xs)
    source.append(99)
    xs.append(99)
    assert v == [1, 2, 3]
    assert w == [1, 2, 3, 4, 5]


def test_generic_alias_and_copies() -> None:
    v = Vector[int]([1, 2])
    assert v == [1, 2] and type(v) is Vector
    assert copy.copy(v) is v
    deep = copy.deepcopy(Vector([[1], [2]]))
    assert deep == [[1], [2]]


# -- equality and concatenation ------------------------------------------------------------


def test_equality_with_any_sequence() -> None:
    v = Vector([1, 2, 3])
    assert v == [1, 2, 3]
    assert [1, 2, 3] == v  # noqa: SIM300  (reflected comparison is the point)
    assert v == (1, 2, 3)
    assert (1, 2, 3) == v  # noqa: SIM300
    assert v == Vector([1, 2, 3])
    assert v == Vector([1, 2]).append(3)
    assert Vector(range(3)) == range(3)
    assert Vector() == [] == Vector([]) == ()
    assert not (v != [1, 2, 3])  # noqa: SIM202  (__ne__ must agree with __eq__)
    assert v != [1, 2]
    assert v != [1, 2, 4]
    assert v != (1, 2, 3, 4)
    assert Vector(range(5000)) != Vector(range(5000)).append(0)
    assert Vector(range(5000)).append(1) != Vector(range(5000)).append(2)


@pytest.mark.parametrize("other", ["abc", b"abc", {1: 1}, {1, 2, 3}, 123, None, object()])
def test_not_equal_to_strings_or_non_sequences(other: object) -> None:
    v = Vector("abc") if isinstance(other, str) else Vector([1, 2, 3])
    assert v != other
    assert not (v == other)  # noqa: SIM201
    assert Vector([97, 98, 99]) != b"abc"


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


def _builds(n: int) -> dict[str, Vector[int]]:
    appended: Vector[int] = Vector()
    for i in range(n):
        appended = appended.append(i)
    halves = Vector(range(n // 2)) + Vector(range(n // 2, n))
    return {
        "constructor": Vector(range(n)),
        "extend": Vector[int]().extend(range(n)),
        "append": appended,
        "concatenation": halves,
        "slice": Vector(range(n + 40))[:n],
        "offset slice": Vector(range(-33, n))[33:],
        "chunked extend": Vector(range(3)).extend(range(3, 40)).extend(range(40, n))
        if n >= 40
        else Vector(range(n)),
    }


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 64, 65, 1025, 1100])
def test_vectors_with_the_same_items_are_equal_however_built(n: int) -> None:
    builds = _builds(n)
    expected = list(range(n))
    for name, vector in builds.items():
        assert list(vector) == expected, name
        for other_name, other in builds.items():
            assert vector == other, (name, other_name)
            assert hash(vector) == hash(other), (name, other_name)
        assert vector == expected and vector == tuple(expected), name


@pytest.mark.parametrize("n", [1, 33, 65, 1100])
def test_vectors_differing_in_one_item_are_unequal_however_built(n: int) -> None:
    for position in sorted({0, n // 2, n - 1}):
        changed = list(range(n))
        changed[position] = -1
        other = Vector(changed)
        for name, vector in _builds(n).items():
            assert vector != other, (name, position)
            assert other != vector, (name, position)
            assert vector != changed, (name, position)
        assert Vector(range(n)) != Vector(range(n + 1))


def test_add_rejects_strings_and_non_iterables() -> None:
    with pytest.raises(TypeError):
        Vector([1]) + "ab"  # type: ignore[operator]
    with pytest.raises(TypeError):
        Vector([1]) + 3  # type: ignore[operator]


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


def test_startswith_compares_every_chunk_of_two_forks_of_one_base() -> None:
    """Two vectors extended from one base share its leaves; the first shared chunk says
    nothing of the chunks after it."""
    base = Vector(range(40))  # one full leaf of 32, shared by both forks
    mine = base.extend(range(100, 140))
    other = base.extend(range(200, 240))
    assert mine.startswith(base) and other.startswith(base)
    assert not mine.startswith(other) and not other.startswith(mine[:50])
    assert mine.startswith(mine[:50]) and mine.startswith(list(mine[:70]))
