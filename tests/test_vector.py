"""Behaviour of kernel.Vector and the msgspec hooks that users and the kernel rely on."""

from __future__ import annotations

import copy
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from statekernel import Vector, dec_hook, enc_hook

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


# -- model-based: every version stays valid, forks included ----------------------------------


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


# -- sequence behaviour --------------------------------------------------------------------


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


def test_input_containers_are_not_aliased() -> None:
    source = [1, 2, 3]
    v = Vector(source)
    xs = [4, 5]
    w = v.extend(xs)
    source.append(99)
    xs.append(99)
    assert v == [1, 2, 3]
    assert w == [1, 2, 3, 4, 5]


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


def test_shared_empty_storage_keeps_nothing_alive() -> None:
    # Empty vectors share storage; growing one must never park items in that shared
    # storage.  A fresh interpreter, because the first growth in a process is what counts.
    root = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run(
        [sys.executable, "-c", _RETENTION_CHECK, root], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_iteration_snapshot_ignores_later_forks() -> None:
    base = Vector(range(40))
    it = iter(base)
    base.append(-1)
    assert list(it) == list(range(40))


def test_add_rejects_strings_and_non_iterables() -> None:
    with pytest.raises(TypeError):
        Vector([1]) + "ab"  # type: ignore[operator]
    with pytest.raises(TypeError):
        Vector([1]) + 3  # type: ignore[operator]


def test_generic_alias_and_copies() -> None:
    v = Vector[int]([1, 2])
    assert v == [1, 2] and type(v) is Vector
    assert copy.copy(v) is v
    deep = copy.deepcopy(Vector([[1], [2]]))
    assert deep == [[1], [2]]


# -- equality however a vector was built ---------------------------------------------------


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


# -- msgspec -------------------------------------------------------------------------------


class Msg(msgspec.Struct, frozen=True):
    role: str
    text: str


class Thread(msgspec.Struct):
    log: Vector[int]
    messages: Vector[Msg] = msgspec.field(default_factory=Vector)
    loose: Vector = msgspec.field(default_factory=Vector)  # type: ignore[type-arg]


@pytest.mark.parametrize("proto", [msgspec.json, msgspec.msgpack])
@pytest.mark.parametrize("n", [0, 3, 33, 2_000])
def test_msgspec_round_trip_top_level(proto: Any, n: int) -> None:
    v = Vector(range(n))
    data = proto.encode(v, enc_hook=enc_hook)
    assert data == proto.encode(list(range(n)))  # a plain array on the wire
    back = proto.decode(data, type=Vector[int], dec_hook=dec_hook)
    assert type(back) is Vector and back == v
    bare = proto.decode(data, type=Vector, dec_hook=dec_hook)
    assert type(bare) is Vector and bare == v


@pytest.mark.parametrize("proto", [msgspec.json, msgspec.msgpack])
def test_msgspec_round_trip_in_struct(proto: Any) -> None:
    t = Thread(
        log=Vector(range(50)),
        messages=Vector([Msg("user", "hi"), Msg("assistant", "hello")]),
        loose=Vector([1, "a", None]),
    )
    data = proto.encode(t, enc_hook=enc_hook)
    back = proto.decode(data, type=Thread, dec_hook=dec_hook)
    assert back == t
    assert type(back.log) is Vector and type(back.messages) is Vector
    assert back.messages[1] == Msg("assistant", "hello")
    nested = proto.encode({"threads": [t], "v": Vector([Vector([1])])}, enc_hook=enc_hook)
    assert proto.decode(nested)["v"] == [[1]]


def test_msgspec_convert_and_to_builtins() -> None:
    t = Thread(log=Vector([1, 2]), messages=Vector([Msg("user", "x")]))
    raw = msgspec.to_builtins(t, enc_hook=enc_hook)
    assert raw == {"log": [1, 2], "messages": [{"role": "user", "text": "x"}], "loose": []}
    assert msgspec.convert(raw, Thread, dec_hook=dec_hook) == t
    msgs = msgspec.convert([{"role": "u", "text": "t"}], Vector[Msg], dec_hook=dec_hook)
    assert msgs == [Msg("u", "t")]
    assert msgspec.convert(Vector([1, 2]), Vector[int], dec_hook=dec_hook) == [1, 2]
    nested = msgspec.json.decode(b"[[1],[2,3]]", type=Vector[Vector[int]], dec_hook=dec_hook)
    assert nested == [[1], [2, 3]] and type(nested[1]) is Vector


def test_msgspec_decode_wrong_item_type_raises_validation_error() -> None:
    with pytest.raises(msgspec.ValidationError, match="Expected `int`, got `str`"):
        msgspec.json.decode(b'[1, "x"]', type=Vector[int], dec_hook=dec_hook)
    with pytest.raises(msgspec.ValidationError, match=r"\$\.log"):
        msgspec.json.decode(b'{"log": [1, "x"]}', type=Thread, dec_hook=dec_hook)
    with pytest.raises(msgspec.ValidationError, match="Expected `array`"):
        msgspec.json.decode(b'{"log": "abc"}', type=Thread, dec_hook=dec_hook)
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(
            msgspec.msgpack.encode({"log": [], "messages": [{"role": 1}]}),
            type=Thread,
            dec_hook=dec_hook,
        )
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert([1, "x"], Vector[int], dec_hook=dec_hook)


def test_hooks_refuse_unknown_types() -> None:
    class Unknown:
        pass

    with pytest.raises(NotImplementedError, match="Unknown"):
        enc_hook(Unknown())
    with pytest.raises(NotImplementedError):
        msgspec.json.encode(Unknown(), enc_hook=enc_hook)
    with pytest.raises(NotImplementedError):
        dec_hook(Unknown, 1)


# -- pydantic ------------------------------------------------------------------------------


class PMsg(pydantic.BaseModel):
    role: str


class History(pydantic.BaseModel):
    steps: Vector[int]
    messages: Vector[PMsg] = Vector()


@pytest.mark.parametrize("steps", [[1, 2, 3], (1, 2, 3), Vector([1, 2, 3]), ["1", 2, 3]])
def test_pydantic_validates_items_from_list_tuple_or_vector(steps: Any) -> None:
    h = History.model_validate({"steps": steps, "messages": [{"role": "user"}]})
    assert type(h.steps) is Vector and h.steps == [1, 2, 3]
    assert type(h.messages) is Vector and h.messages == [PMsg(role="user")]


def test_pydantic_rejects_bad_items() -> None:
    with pytest.raises(pydantic.ValidationError):
        History.model_validate({"steps": ["x"]})
    with pytest.raises(pydantic.ValidationError):
        History.model_validate({"steps": [1], "messages": [{"nope": 1}]})
    with pytest.raises(pydantic.ValidationError):
        History.model_validate({"steps": 5})


def test_pydantic_round_trip() -> None:
    h = History(steps=Vector(range(40)), messages=Vector([PMsg(role="a"), PMsg(role="b")]))
    dumped = h.model_dump()
    assert dumped == {"steps": list(range(40)), "messages": [{"role": "a"}, {"role": "b"}]}
    assert type(dumped["steps"]) is list
    assert History.model_validate(dumped) == h
    assert History.model_validate_json(h.model_dump_json()) == h
    assert History.model_json_schema()["properties"]["steps"]["type"] == "array"


def test_pydantic_models_round_trip_through_the_codec_hooks() -> None:
    import pydantic

    class Note(pydantic.BaseModel):
        text: str
        tags: list[str] = []

    raw = msgspec.json.encode({"one": Note(text="a", tags=["x"])}, enc_hook=enc_hook)
    assert raw == b'{"one":{"text":"a","tags":["x"]}}'
    back = msgspec.json.decode(b'[{"text":"b"}]', type=Vector[Note], dec_hook=dec_hook)
    assert back == [Note(text="b")]
    with pytest.raises(msgspec.ValidationError, match="text"):
        msgspec.json.decode(b'{"text": 3}', type=Note, dec_hook=dec_hook)


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
