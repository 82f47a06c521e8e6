"""Snapshots are frozen: nothing done to what a snapshot hands out reaches any other view."""

from __future__ import annotations

import dataclasses
from typing import Any

import attrs
import msgspec
import pytest
from sample_keys import Counter, Handle, Items, LiveHandle, Log, Msg, Settings, Title

from statekernel import MergeStrategy, StateCommand, StateKey, UnknownStateKey, enc_hook
from statekernel.lowlevel import KeyRegistry, LiveState
from statekernel.testing import snapshot_of


def test_get_returns_default_until_a_value_is_set(state: LiveState) -> None:
    snap = state.snapshot
    assert snap.get(Counter) == 0
    assert Counter not in snap
    state.submit(StateCommand().update(Counter, 5))
    assert state.snapshot.get(Counter) == 5
    assert Counter in state.snapshot
    assert snap.get(Counter) == 0 and snap.revision == 0


def test_clear_returns_a_key_to_its_default(state: LiveState) -> None:
    state.submit(StateCommand().update(Title, "draft"))
    state.submit(StateCommand().clear(Title))
    assert Title not in state.snapshot
    assert state.snapshot.get(Title) == ""
    assert state.revision == 2


def test_a_snapshot_refuses_to_be_changed_and_says_how_state_changes(state: LiveState) -> None:
    snapshot = state.snapshot
    with pytest.raises(AttributeError) as refused_set:
        snapshot.revision = 7  # type: ignore[misc]
    assert str(refused_set.value) == (
        "a Snapshot is frozen (cannot set 'revision'); change state with a StateCommand"
    )
    with pytest.raises(AttributeError) as refused_delete:
        del snapshot.revision  # type: ignore[misc]
    assert str(refused_delete.value) == "a Snapshot is frozen (cannot delete 'revision')"
    assert snapshot.revision == 0


def test_reading_an_unregistered_key_is_an_error(state: LiveState) -> None:
    class Stranger(StateKey[int, int]):
        key = "t.stranger"

    with pytest.raises(UnknownStateKey, match=r"t\.stranger.*register_key"):
        state.snapshot.get(Stranger)


def test_apply_that_mutates_its_input_does_not_change_earlier_snapshots(state: LiveState) -> None:
    state.submit(StateCommand().update(Items, 1))
    before = state.snapshot
    state.submit(StateCommand().update(Items, 2))
    assert before.get(Items) == [1]
    assert state.snapshot.get(Items) == [1, 2]


def test_mutating_a_read_value_changes_nothing_anyone_else_sees(state: LiveState) -> None:
    state.submit(StateCommand().update(Items, 1).update(Settings, {"a": [1]}))
    snap = state.snapshot
    items = snap.get(Items)
    items.append(99)
    settings = snap.get(Settings)
    settings["a"].append(99)
    settings["b"] = [0]
    assert snap.get(Items) == [1]
    assert snap.get(Settings) == {"a": [1]}
    state.submit(StateCommand().update(Counter, 1))
    assert state.snapshot.get(Items) == [1]
    assert state.snapshot.get(Settings) == {"a": [1]}


def test_mutating_a_mutable_default_does_not_change_the_default(state: LiveState) -> None:
    state.snapshot.get(Items).append(7)
    assert state.snapshot.get(Items) == []


def test_nested_mutable_model_is_copied_on_read() -> None:
    import msgspec

    class Profile(msgspec.Struct):
        tags: list[str]

    class ProfileKey(StateKey[Profile, Profile]):
        key = "t.profile"
        default_factory = lambda: Profile([])  # noqa: E731

    state = LiveState(KeyRegistry.of(ProfileKey))
    state.submit(StateCommand().update(ProfileKey, Profile(["a"])))
    read = state.snapshot.get(ProfileKey)
    read.tags.append("evil")
    assert state.snapshot.get(ProfileKey).tags == ["a"]


def test_immutable_values_are_shared_not_copied(state: LiveState) -> None:
    msg = Msg("user", "hi")
    state.submit(StateCommand().update(Log, msg))
    assert state.snapshot.get(Log)[0] is msg
    assert state.snapshot.get(Log) is state.snapshot.get(Log)


def test_taking_a_snapshot_returns_the_same_object_until_a_commit(state: LiveState) -> None:
    assert state.snapshot is state.snapshot
    state.submit(StateCommand().update(Counter, 1))
    first = state.snapshot
    assert first is state.snapshot


def test_to_dict_shows_held_values(state: LiveState) -> None:
    state.submit(StateCommand().update(Counter, 2).update(Title, "t"))
    assert state.snapshot.to_dict() == {"test.counter": 2, "test.title": "t"}
    assert set(state.snapshot) == {Counter, Title}


def test_seeded_state_is_validated_and_copied() -> None:
    class Nonneg(StateKey[int, int]):
        key = "t.nonneg"
        merge = MergeStrategy.EXCLUSIVE

        @staticmethod
        def validate(value: int) -> None:
            if value < 0:
                raise ValueError("negative")

    registry = KeyRegistry.of(Nonneg, Items)
    seed = [1]
    state = LiveState.of(registry, {Nonneg: 3, Items: seed}, revision=7)
    seed.append(2)
    assert state.snapshot.get(Items) == [1]
    assert state.revision == 7
    from statekernel import CommitRejected

    with pytest.raises(CommitRejected, match="negative"):
        LiveState.of(registry, {Nonneg: -1})


# -- mutable defaults, and record classes unfrozen or frozen -------------------------------


class Tags(StateKey[list[str], str]):
    key = "promise.tags"
    default = ["seed"]  # deliberately mutable: the kernel must copy it

    @staticmethod
    def apply(value: list[str], update: str) -> list[str]:
        value.append(update)
        return value


def test_a_mutable_default_is_a_fresh_copy_for_every_read_and_commit() -> None:
    state = LiveState(KeyRegistry.of(Tags))
    read = state.snapshot.get(Tags)
    read.append("mutated by a hook")
    assert state.snapshot.get(Tags) == ["seed"]

    state.submit(StateCommand().update(Tags, "a"))  # apply appends to the default in place
    assert state.snapshot.get(Tags) == ["seed", "a"]
    state.submit(StateCommand().clear(Tags))
    assert state.snapshot.get(Tags) == ["seed"]
    assert Tags.default == ["seed"]

    fresh = LiveState(KeyRegistry.of(Tags))
    fresh.submit(StateCommand().update(Tags, "b"))
    assert fresh.snapshot.get(Tags) == ["seed", "b"]


@attrs.define
class AttrsBox:
    count: int
    label: str


@dataclasses.dataclass
class DataBox:
    count: int
    label: str


@attrs.frozen
class FrozenBox:
    count: int
    label: str


class AttrsState(StateKey[AttrsBox, AttrsBox]):
    key = "promise.attrs_box"
    default_factory = staticmethod(lambda: AttrsBox(0, ""))


class DataState(StateKey[DataBox, DataBox]):
    key = "promise.data_box"
    default_factory = staticmethod(lambda: DataBox(0, ""))


class FrozenState(StateKey[FrozenBox, FrozenBox]):
    key = "promise.frozen_box"
    default = FrozenBox(0, "")


@pytest.mark.parametrize(
    ("key", "box"), [(AttrsState, AttrsBox), (DataState, DataBox)], ids=["attrs", "dataclass"]
)
def test_mutating_an_unfrozen_record_read_from_a_snapshot_changes_no_state(
    key: type[StateKey[Any, Any]], box: type
) -> None:
    state = LiveState(KeyRegistry.of(key, Counter))
    given = box(1, "one")
    state.submit(StateCommand().update(key, given))
    given.count = 100  # the caller keeps its object: the committed value must not follow
    before = state.snapshot

    read = before.get(key)
    read.count = 99
    read.label = "tampered"
    assert before.get(key) == box(1, "one")
    state.submit(StateCommand().update(Counter, 1))  # a later commit carries the value over
    assert state.snapshot.get(key) == box(1, "one")


def test_a_frozen_record_is_shared_without_copying() -> None:
    state = LiveState(KeyRegistry.of(FrozenState))
    value = FrozenBox(3, "three")
    state.submit(StateCommand().update(FrozenState, value))
    assert state.snapshot.get(FrozenState) is value
    assert state.snapshot.get(FrozenState) is state.snapshot.get(FrozenState)


def test_a_snapshot_encodes_a_value_json_cannot_hold_as_its_repr() -> None:
    """A snapshot inside an event or a result must always encode: a value JSON cannot hold
    (a live object in a memory-only key) is shown by its repr, never silently as null."""
    snapshot = snapshot_of([Counter, LiveHandle], {Counter: 3, LiveHandle: Handle()})
    shown = msgspec.json.decode(msgspec.json.encode(snapshot, enc_hook=enc_hook))
    assert shown["test.counter"] == 3
    assert str(shown["t.handle"]).startswith("<sample_keys.Handle object at 0x")
