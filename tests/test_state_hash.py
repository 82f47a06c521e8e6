"""`snapshot.state_hash()`: equal state, equal hash, whatever the history and the process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from statekernel import (
    KeyScope,
    MergeStrategy,
    Message,
    StateCommand,
    StateKey,
    StateKeyOptions,
    StateValidationError,
    Vector,
)
from statekernel.lowlevel import KeyBinding, KeyRegistry, LiveState

HERE = Path(__file__).resolve().parent


class Tags(StateKey[frozenset[str], frozenset[str]]):
    key = "h.tags"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: frozenset[str], update: frozenset[str]) -> frozenset[str]:
        return value | update


class Scores(StateKey[dict[str, int], dict[str, int]]):
    key = "h.scores"

    @staticmethod
    def apply(value: dict[str, int], update: dict[str, int]) -> dict[str, int]:
        return {**value, **update}


class Log(StateKey[Vector[Message], Message]):
    key = "h.log"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[Message], update: Message) -> Vector[Message]:
        return value.append(update)


class Title(StateKey[str, str]):
    key = "h.title"
    default = ""


class Loose(StateKey[object, object]):
    key = "h.loose"
    default = None


KEYS = (Tags, Scores, Log, Title)


def _state(*commands: StateCommand) -> LiveState:
    state = LiveState(KeyRegistry.of(*KEYS))
    for command in commands:
        state.submit(command)
    return state


def test_the_same_state_by_different_histories_has_the_same_hash() -> None:
    hello = Message("user", "hello", id="m1")
    one = _state(
        StateCommand().update(Tags, frozenset({"b", "a"})).update(Scores, {"x": 1}),
        StateCommand().update(Scores, {"y": 2}).update(Log, hello).update(Title, "draft"),
        StateCommand().update(Title, "final"),
    )
    other = _state(
        StateCommand().update(Title, "first"),
        StateCommand().update(Title, "final").update(Log, hello),
        StateCommand().update(Scores, {"y": 2}).update(Tags, frozenset({"a"})),
        StateCommand().update(Scores, {"x": 1}).update(Tags, frozenset({"b"})),
    )
    assert one.revision != other.revision
    assert one.snapshot.state_hash() == other.snapshot.state_hash()
    assert len(one.snapshot.state_hash()) == 64


def test_any_difference_in_state_changes_the_hash() -> None:
    base = _state(StateCommand().update(Scores, {"x": 1}).update(Title, "a"))
    hashes = {
        base.snapshot.state_hash(),
        _state(StateCommand().update(Scores, {"x": 2}).update(Title, "a")).snapshot.state_hash(),
        _state(StateCommand().update(Scores, {"x": 1}).update(Title, "b")).snapshot.state_hash(),
        _state(StateCommand().update(Scores, {"x": 1})).snapshot.state_hash(),
        _state().snapshot.state_hash(),
    }
    assert len(hashes) == 5


def test_a_cleared_key_hashes_as_one_never_set() -> None:
    cleared = _state(StateCommand().update(Title, "x").update(Scores, {"a": 1}))
    cleared.submit(StateCommand().clear(Title))
    never = _state(StateCommand().update(Scores, {"a": 1}))
    assert cleared.snapshot.state_hash() == never.snapshot.state_hash()


def test_a_value_that_cannot_be_encoded_is_named() -> None:
    registry = KeyRegistry([KeyBinding.of(Loose, StateKeyOptions(persistent=False))])
    state = LiveState(registry)
    state.submit(StateCommand().update(Loose, object()))
    with pytest.raises(StateValidationError, match="h.loose"):
        state.snapshot.state_hash()


@pytest.mark.slow
def test_the_hash_is_the_same_in_another_process_with_another_hash_seed() -> None:
    command = StateCommand().update(Tags, frozenset(f"tag{i}" for i in range(50)))
    here = _state(command.update(Scores, {f"k{i}": i for i in range(50)})).snapshot.state_hash()
    script = textwrap.dedent(
        """
        from test_state_hash import KEYS, Scores, Tags, _state
        from statekernel import StateCommand
        command = StateCommand().update(Tags, frozenset(f"tag{i}" for i in reversed(range(50))))
        command.update(Scores, {f"k{i}": i for i in reversed(range(50))})
        print(_state(command).snapshot.state_hash())
        """
    )
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(HERE)}
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == here


def test_the_hash_is_the_documented_digest() -> None:
    """Pinned by its definition, so a hash taken by one version still verifies in the next:
    SHA-256 over, per key in sorted order, the 8-byte big-endian length and bytes of the key
    string, then of its value's canonical JSON."""
    import hashlib

    import msgspec

    state = _state(StateCommand().update(Title, "t").update(Scores, {"b": 2, "a": 1}))
    expected = hashlib.sha256()
    for name, value in (("h.scores", {"a": 1, "b": 2}), ("h.title", "t")):
        for part in (name.encode(), msgspec.json.encode(value, order="sorted")):  # builtins
            expected.update(len(part).to_bytes(8, "big") + part)
    assert state.snapshot.state_hash() == expected.hexdigest()


def test_an_unencodable_value_error_says_what_and_why() -> None:
    registry = KeyRegistry([KeyBinding.of(Loose, StateKeyOptions(persistent=False))])
    state = LiveState(registry)
    held = object()
    state.submit(StateCommand().update(Loose, held))
    with pytest.raises(StateValidationError) as caught:
        state.snapshot.state_hash()
    error = caught.value
    assert error.key == "h.loose" and error.expected == "a value with a canonical encoding"
    assert error.given == "object"
    assert str(error).startswith("value to hash for 'h.loose' must be a value with a canonical")
    assert "state_hash() needs every held value msgspec-encodable" in str(error)
    assert error.__cause__ is not None


def test_dicts_with_other_keys_hash_canonically_too() -> None:
    class ById(StateKey[dict[int, str], dict[int, str]]):
        key = "h.by_id"

    one = LiveState(KeyRegistry.of(ById))
    one.submit(StateCommand().update(ById, {2: "b", 1: "a"}))
    other = LiveState(KeyRegistry.of(ById))
    other.submit(StateCommand().update(ById, {1: "a", 2: "b"}))
    assert one.snapshot.state_hash() == other.snapshot.state_hash()
