"""A Vector of mutable items stays frozen at the cost of what is read or added, not its length.

A commit copies only the items `apply` reads, and reads copy the items read."""

from __future__ import annotations

import copy
from typing import Annotated, Any

import pytest

from statekernel import CommitRejected, StateCommand, StateKey, Vector
from statekernel.lowlevel import KeyRegistry, LiveState, key_info


class Records(StateKey[Vector, dict[str, int]]):  # type: ignore[type-arg]
    key = "ic.records"

    @staticmethod
    def apply(value: Vector, update: dict[str, int]) -> Vector:  # type: ignore[type-arg]
        return value.append(update)


class Vandal(StateKey[Vector[dict[str, int]], dict[str, int]]):
    """An impure apply: it changes the item it read, in place, before appending."""

    key = "ic.vandal"

    @staticmethod
    def apply(value: Vector[dict[str, int]], update: dict[str, int]) -> Vector[dict[str, int]]:
        value[0]["n"] = -1
        return value.append(update)


class Same(StateKey[Vector[Any], int]):
    key = "ic.same"

    @staticmethod
    def apply(value: Vector[Any], update: int) -> Vector[Any]:
        return value  # returns what it was given: the view is unwrapped


def _state(key: type[StateKey[Any, Any]], length: int) -> LiveState:
    return LiveState.of(KeyRegistry.of(key), {key: Vector({"n": i} for i in range(length))})


@pytest.mark.parametrize("key", [Records, Vandal, Same])
def test_vectors_of_mutable_items_copy_items_not_the_vector(key: type[StateKey[Any, Any]]) -> None:
    info = key_info(key)
    assert info.copy_items and info.copy_values


def test_vectors_of_immutable_items_copy_nothing() -> None:
    class Frozen(StateKey[Vector[int], int]):
        key = "ic.frozen"

    info = key_info(Frozen)
    assert not info.copy_items and not info.copy_values


def test_a_commit_on_a_long_vector_copies_only_what_it_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = _state(Records, 10_000)
    calls = 0
    real = copy.deepcopy

    def counting(value: Any, memo: Any = None, _nil: Any = []) -> Any:  # noqa: B006
        nonlocal calls
        calls += 1
        return real(value, memo)

    monkeypatch.setattr(copy, "deepcopy", counting)
    state.submit(StateCommand().update(Records, {"n": 10_000}))
    monkeypatch.undo()
    assert calls < 20  # the update's copy, not ten thousand items
    assert len(state.snapshot.get(Records)) == 10_001


def test_an_item_changed_in_place_by_apply_is_refused_not_lost() -> None:
    state = _state(Vandal, 3)
    before = state.snapshot
    with pytest.raises(CommitRejected, match="changed an item of the vector in place") as caught:
        state.submit(StateCommand().update(Vandal, {"n": 3}), origin="vandals")
    assert (caught.value.key, caught.value.plugin, caught.value.stage) == (
        "ic.vandal",
        "vandals",
        "apply",
    )
    assert state.snapshot is before and state.revision == 0
    assert before.get(Vandal).tolist() == [{"n": 0}, {"n": 1}, {"n": 2}]


def test_reads_hand_out_copies_and_apply_may_return_its_input() -> None:
    state = _state(Same, 2)
    state.submit(StateCommand().update(Same, 1))
    value = state.snapshot.get(Same)
    assert type(value) is Vector and value == [{"n": 0}, {"n": 1}]
    value[0]["n"] = 99
    assert state.snapshot.get(Same)[0] == {"n": 0}


def test_apply_reads_items_as_copies_through_every_sequence_method() -> None:
    seen: list[Any] = []

    class Reader(StateKey[Vector, int]):  # type: ignore[type-arg]
        key = "ic.reader"

        @staticmethod
        def apply(value: Vector, update: int) -> Vector:  # type: ignore[type-arg]
            seen.extend([value[0], value[-1], *value, *reversed(value), *value[:1]])
            seen.extend(value.tolist() + list(value.totuple()))
            assert {"n": 1} in value and value.index({"n": 1}) == 1 and value.count({"n": 0}) == 1
            assert value == [{"n": 0}, {"n": 1}] and len(value) == 2
            return value[:1] + [{"n": update}]  # noqa: RUF005 (tests __add__)

    state = _state(Reader, 2)
    stored = state.stored_values()["ic.reader"]
    state.submit(StateCommand().update(Reader, 7))
    assert all(item is not stored[0] and item is not stored[1] for item in seen)
    assert state.snapshot.get(Reader) == [{"n": 0}, {"n": 7}]


class Nested(StateKey[Vector[dict[str, dict[str, int]]], dict[str, dict[str, int]]]):
    """An impure apply reaching into nested items through every way of reading."""

    key = "ic.nested"

    @staticmethod
    def apply(
        value: Vector[dict[str, dict[str, int]]], update: dict[str, dict[str, int]]
    ) -> Vector[dict[str, dict[str, int]]]:
        value[0]["inner"]["x"] = -1
        for item in value:
            item["inner"]["x"] = -2
        for item in reversed(value):
            item["inner"]["x"] = -3
        return value.append(update)


def test_items_are_copied_all_the_way_down_however_apply_reads_them() -> None:
    registry = KeyRegistry.of(Nested)
    state = LiveState.of(registry, {Nested: Vector([{"inner": {"x": 0}}, {"inner": {"x": 1}}])})
    before = state.snapshot
    with pytest.raises(CommitRejected, match="in place"):
        state.submit(StateCommand().update(Nested, {"inner": {"x": 2}}))
    assert before.get(Nested) == [{"inner": {"x": 0}}, {"inner": {"x": 1}}]
    assert state.snapshot.get(Nested) == [{"inner": {"x": 0}}, {"inner": {"x": 1}}]


def test_every_op_of_one_commit_and_validate_get_copies_too() -> None:
    seen: list[dict[str, int]] = []

    class Guarded(StateKey[Vector[dict[str, int]], dict[str, int]]):
        key = "ic.guarded"

        @staticmethod
        def apply(value: Vector[dict[str, int]], update: dict[str, int]) -> Vector[dict[str, int]]:
            seen.append(value[0])  # a later op of the same commit reads through a view too
            return value.append(update)

        @staticmethod
        def validate(value: Vector[dict[str, int]]) -> None:
            if len(value) > 1:  # (not at seeding, where it checks the seed itself)
                value[0]["n"] = -9  # a validate that writes reaches a copy only

    state = LiveState.of(KeyRegistry.of(Guarded), {Guarded: Vector([{"n": 0}])})
    stored = state.stored_values()["ic.guarded"][0]
    state.submit(StateCommand().update(Guarded, {"n": 1}).update(Guarded, {"n": 2}))
    assert state.snapshot.get(Guarded) == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert len(seen) == 2 and all(item == stored and item is not stored for item in seen)


def test_a_view_finds_items_within_bounds_and_equals_what_it_shows() -> None:
    found: dict[str, Any] = {}

    class Search(StateKey[Vector, int]):  # type: ignore[type-arg]
        key = "ic.search"

        @staticmethod
        def apply(value: Vector, update: int) -> Vector:  # type: ignore[type-arg]
            item = {"n": update}
            found["first"] = value.index({"n": 0})
            found["from 2"] = value.index(item, 2)
            found["in 1..3"] = value.index(item, 1, 3)
            with pytest.raises(ValueError):
                value.index(item, 0, 1)
            found["self"] = value == value[:]
            found["other"] = value == value[1:]
            return value

    items = Vector([{"n": 0}, {"n": 1}, {"n": 1}, {"n": 1}])
    state = LiveState.of(KeyRegistry.of(Search), {Search: items})
    state.submit(StateCommand().update(Search, 1))
    assert found == {"first": 0, "from 2": 2, "in 1..3": 1, "self": True, "other": False}


@pytest.mark.parametrize(
    ("annotation", "copies_items"),
    [
        (Vector, True),
        (Vector[Any], True),
        (Vector[dict[str, int]], True),
        (Annotated[Vector[dict[str, int]], "meta"], True),
        (Vector[int], False),
        (Annotated[Vector[int], "meta"], False),
        (list[dict[str, int]], False),
        (dict[str, int], False),
    ],
)
def test_which_declared_types_copy_items_not_the_vector(
    annotation: Any, copies_items: bool
) -> None:
    class Declared(StateKey[annotation, Any]):  # type: ignore[valid-type]
        key = "ic.declared"
        default_factory = staticmethod(lambda: None)

    assert key_info(Declared).copy_items is copies_items


def test_a_view_hashes_shows_and_extends_like_the_vector() -> None:
    seen: dict[str, Any] = {}

    class Pairs(StateKey[Vector, tuple[int, int]]):  # type: ignore[type-arg]
        key = "ic.pairs"

        @staticmethod
        def apply(value: Vector, update: tuple[int, int]) -> Vector:  # type: ignore[type-arg]
            seen["hash"] = hash(value) == hash(((0, 0), (1, 1)))
            seen["repr"] = repr(value)
            return value.extend([update, update])

    state = LiveState.of(KeyRegistry.of(Pairs), {Pairs: Vector([(0, 0), (1, 1)])})
    state.submit(StateCommand().update(Pairs, (2, 2)))
    assert seen == {"hash": True, "repr": repr(Vector([(0, 0), (1, 1)]))}
    assert state.snapshot.get(Pairs) == [(0, 0), (1, 1), (2, 2), (2, 2)]


def test_a_vector_key_whose_apply_returns_another_sequence_stays_frozen() -> None:
    class Loose(StateKey[Vector, dict[str, int]]):  # type: ignore[type-arg]
        key = "ic.loose"

        @staticmethod
        def apply(value: Any, update: dict[str, int]) -> Any:
            return [*value, update] if len(value) < 2 else value.append(update)

    state = LiveState(KeyRegistry.of(Loose))
    state.submit(StateCommand().update(Loose, {"n": 1}))  # held as a list, not a Vector
    first = state.snapshot
    state.submit(StateCommand().update(Loose, {"n": 2}))
    second = state.snapshot
    state.submit(StateCommand().update(Loose, {"n": 3}))  # list.append would mutate in place
    assert first.get(Loose) == [{"n": 1}] and second.get(Loose) == [{"n": 1}, {"n": 2}]
