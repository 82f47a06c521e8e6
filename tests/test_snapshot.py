"""Snapshots are frozen: nothing done to what a snapshot hands out reaches any other view."""

from __future__ import annotations

import pytest
from sample_keys import Counter, Items, Log, Msg, Settings, Title

from statekernel import MergeStrategy, StateCommand, StateKey, UnknownStateKey
from statekernel.lowlevel import KeyRegistry, LiveState


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
