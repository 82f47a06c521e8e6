"""A commit's working copy of the keys it touches: what each op starts from, and what is named
when an op is refused (a CLEAR of a key nobody registered, an item changed in place by a
later op of the same commit, a committed value that cannot be copied)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from statekernel import (
    CommitRejected,
    StateCommand,
    StateKey,
    StateValidationError,
    UnknownStateKey,
    Vector,
)
from statekernel.lowlevel import KeyRegistry, LiveState


class Total(StateKey[int, int]):
    key = "w.total"
    default = 5

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Stray(StateKey[int, int]):
    key = "w.stray"  # never registered


class Poked(StateKey[Vector[dict[str, int]], Any]):
    """Appends an item, or (for "poke") changes the first item in place."""

    key = "w.poked"

    @staticmethod
    def apply(value: Vector[dict[str, int]], update: Any) -> Vector[dict[str, int]]:
        if update == "poke":
            value[0]["n"] = -1
            return value
        return value.append(update)


def test_clearing_a_key_nobody_registered_names_the_plugin() -> None:
    state = LiveState(KeyRegistry.of(Total))
    with pytest.raises(UnknownStateKey) as caught:
        state.submit(StateCommand().clear(Stray), origin="sweeper")
    assert caught.value.key == "w.stray"
    assert "plugin 'sweeper'" in str(caught.value)
    assert state.revision == 0


def test_an_op_after_a_clear_starts_from_the_default() -> None:
    state = LiveState.of(KeyRegistry.of(Total), {Total: 40})
    state.submit(StateCommand().update(Total, 2).clear(Total).update(Total, 1))
    assert state.snapshot.get(Total) == 6
    state.submit(StateCommand().clear(Total))
    assert Total not in state.snapshot


def test_an_item_changed_in_place_by_a_later_op_of_the_commit_names_key_and_plugin() -> None:
    state = LiveState.of(KeyRegistry.of(Poked), {Poked: Vector([{"n": 0}])})
    before = state.snapshot
    with pytest.raises(CommitRejected, match="changed an item of the vector in place") as caught:
        state.submit(StateCommand().update(Poked, {"n": 1}).update(Poked, "poke"), origin="poker")
    assert (caught.value.key, caught.value.plugin, caught.value.stage) == (
        "w.poked",
        "poker",
        "apply",
    )
    assert state.snapshot is before
    assert before.get(Poked) == [{"n": 0}]


class Holder(StateKey[dict[str, Any], str]):
    """An apply that puts a live resource in state, which no later op can start from."""

    key = "w.holder"

    @staticmethod
    def apply(value: dict[str, Any], update: str) -> dict[str, Any]:
        return {**value, update: threading.Lock() if update == "lock" else 1}


def test_a_committed_value_an_op_cannot_copy_is_refused_naming_its_key() -> None:
    state = LiveState(KeyRegistry.of(Holder))
    state.submit(StateCommand().update(Holder, "lock"))
    with pytest.raises(StateValidationError, match="a value the kernel can copy") as caught:
        state.submit(StateCommand().update(Holder, "more"))
    assert caught.value.key == "w.holder"
    message = str(caught.value)
    assert message.startswith("value for 'w.holder' must be a value the kernel can copy, got dict")
    assert "copying it raised TypeError: " in message
    assert "in a closure, and keep plain data in state. Pass a value" in message
    assert state.revision == 1


def test_reading_a_committed_value_that_cannot_be_copied_names_its_key() -> None:
    state = LiveState(KeyRegistry.of(Holder))
    state.submit(StateCommand().update(Holder, "lock"))
    with pytest.raises(StateValidationError) as caught:
        state.snapshot.get(Holder)
    assert caught.value.key == "w.holder"
    assert str(caught.value).startswith(
        "value for 'w.holder' must be a value the kernel can copy, got dict"
    )
    with pytest.raises(StateValidationError) as whole:  # every key at once, for display
        state.snapshot.to_dict()
    assert whole.value.key == "w.holder"


class Tree(StateKey[list[Any], list[Any]]):
    """A value of arbitrary depth, replaced whole by each update."""

    key = "w.tree"

    @staticmethod
    def apply(value: list[Any], update: list[Any]) -> list[Any]:
        return update


def test_a_value_nested_too_deeply_to_copy_is_refused_naming_its_key() -> None:
    deep: list[Any] = []
    for _ in range(100_000):  # far past the interpreter's recursion limit
        deep = [deep]
    with pytest.raises(StateValidationError) as caught:
        LiveState.of(KeyRegistry.of(Tree), {Tree: deep})
    assert caught.value.key == "w.tree"
    message = str(caught.value)
    assert message.startswith("value for 'w.tree' must be a value the kernel can copy, got list")
    assert ": it is nested too deeply to copy; keep state values shallower. Pass a" in message
