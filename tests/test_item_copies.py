"""A Vector of mutable items stays frozen at the cost of what is read or added, not of its
length: a commit copies only the items `apply` reads, and reads copy the items read."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from statekernel import StateCommand, StateKey, Vector
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


def test_an_item_changed_in_place_by_apply_changes_no_snapshot() -> None:
    state = _state(Vandal, 3)
    before = state.snapshot
    state.submit(StateCommand().update(Vandal, {"n": 3}))
    assert before.get(Vandal).tolist() == [{"n": 0}, {"n": 1}, {"n": 2}]
    # The change went to a copy: apply must return a new vector with a new item instead.
    assert state.snapshot.get(Vandal).tolist() == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}]


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
