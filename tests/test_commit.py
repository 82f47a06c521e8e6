"""Commits are atomic: every op applies and validates, or nothing changes; ops apply in order."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sample_keys import Counter, Items, Log, Msg, Positive, Title

from statekernel import (
    CommitRejected,
    EffectSpec,
    Phase,
    RevisionConflict,
    ScheduledActionSpec,
    StateCommand,
    StateError,
    StateKey,
    UnknownStateKey,
    Vector,
)
from statekernel.lowlevel import Contribution, KeyRegistry, LiveState


class Fragile(StateKey[int, int]):
    """Raises in apply when the update is the poison value."""

    key = "t.fragile"
    POISON = -999

    @staticmethod
    def apply(value: int, update: int) -> int:
        if update == Fragile.POISON:
            raise RuntimeError("poisoned update")
        return value + update


KEYS = (Counter, Title, Items, Log, Positive, Fragile)


def test_revision_grows_once_per_commit_with_state_ops(state: LiveState) -> None:
    state.submit(StateCommand().update(Counter, 1).update(Counter, 2).update(Title, "x"))
    assert state.revision == 1
    assert state.snapshot.get(Counter) == 3
    state.submit(StateCommand().update(Title, "x"))  # same value: still a commit
    assert state.revision == 2


def test_a_command_without_state_ops_does_not_move_the_revision(state: LiveState) -> None:
    before = state.snapshot
    assert state.submit(StateCommand()) is before
    assert state.revision == 0


def test_validate_refuses_the_whole_commit(state: LiveState) -> None:
    state.submit(StateCommand().update(Counter, 1))
    before = state.snapshot
    with pytest.raises(CommitRejected) as caught:
        state.commit(
            [
                Contribution("good", StateCommand().update(Counter, 10)),
                Contribution("bad", StateCommand().update(Positive, -1)),
            ]
        )
    error = caught.value
    assert error.key == "test.positive" and error.plugin == "bad" and error.stage == "validate"
    assert "must stay >= 0" in str(error)
    assert state.snapshot is before and state.revision == 1
    assert state.snapshot.get(Counter) == 1


def test_apply_error_names_key_plugin_and_cause(state: LiveState) -> None:
    registry = KeyRegistry.of(*KEYS)
    state = LiveState(registry)
    with pytest.raises(CommitRejected) as caught:
        state.submit(StateCommand().update(Fragile, Fragile.POISON), origin="plug")
    assert caught.value.key == "t.fragile" and caught.value.plugin == "plug"
    assert isinstance(caught.value.cause, RuntimeError)
    assert "poisoned update" in str(caught.value) and "unchanged" in str(caught.value)


def test_stale_base_revision_is_a_revision_conflict(state: LiveState) -> None:
    command = StateCommand(base_revision=state.revision).update(Counter, 1)
    state.submit(StateCommand().update(Counter, 1))
    with pytest.raises(RevisionConflict) as caught:
        state.submit(command)
    assert (caught.value.expected, caught.value.actual) == (0, 1)
    assert state.snapshot.get(Counter) == 1
    state.submit(StateCommand(base_revision=1).update(Counter, 1))
    assert state.snapshot.get(Counter) == 2


def test_unregistered_key_is_refused_before_anything_commits() -> None:
    state = LiveState(KeyRegistry.of(Counter))
    with pytest.raises(UnknownStateKey, match=r"test\.title") as caught:
        state.submit(StateCommand().update(Counter, 1).update(Title, "x"), origin="p")
    assert caught.value.plugin == "p"
    assert state.revision == 0 and Counter not in state.snapshot


def test_commit_listeners_see_the_new_snapshot(state: LiveState) -> None:
    seen: list[tuple[int, int]] = []
    state.add_listener(lambda snap: seen.append((snap.revision, snap.get(Counter))))
    state.add_listener(lambda snap: 1 / 0)  # a failing listener is logged, not fatal
    state.submit(StateCommand().update(Counter, 4))
    state.submit(StateCommand())
    assert seen == [(1, 4)]


def test_clear_then_update_in_one_commit_starts_from_default(state: LiveState) -> None:
    state.submit(StateCommand().update(Counter, 5))
    state.submit(StateCommand().clear(Counter).update(Counter, 2))
    assert state.snapshot.get(Counter) == 2


# A random op: (key, update) drawn so that it always type-checks.
_op = st.one_of(
    st.tuples(st.just(Counter), st.integers(-5, 5)),
    st.tuples(st.just(Title), st.text(max_size=3)),
    st.tuples(st.just(Items), st.integers(0, 9)),
    st.tuples(st.just(Log), st.builds(Msg, st.just("user"), st.text(max_size=3))),
    st.tuples(st.just(Fragile), st.integers(0, 5)),
)


@settings(max_examples=200, deadline=None)
@given(
    history=st.lists(st.lists(_op, min_size=1, max_size=5), max_size=4),
    batch=st.lists(_op, min_size=2, max_size=8),
    poison_at=st.integers(0, 7),
    clears=st.lists(st.sampled_from([Counter, Title, Items, Log]), max_size=2),
)
def test_a_batch_with_a_failing_op_leaves_state_and_revision_exactly_as_before(
    history: list[list[tuple[Any, Any]]],
    batch: list[tuple[Any, Any]],
    poison_at: int,
    clears: list[Any],
) -> None:
    state = LiveState(KeyRegistry.of(*KEYS))
    for ops in history:
        command = StateCommand()
        for key, update in ops:
            command.update(key, update)
        state.submit(command)
    before = state.snapshot
    held_before = before.to_dict()

    command = StateCommand()
    for key in clears:
        command.clear(key)
    position = min(poison_at, len(batch))
    for index, (key, update) in enumerate(batch):
        if index == position:
            command.update(Fragile, Fragile.POISON)
        command.update(key, update)
    if position == len(batch):
        command.update(Fragile, Fragile.POISON)

    with pytest.raises(CommitRejected):
        state.submit(command)
    assert state.snapshot is before
    assert state.revision == before.revision == len(history)
    assert state.snapshot.to_dict() == held_before


# -- clears in a commit, and keys that declare validate ------------------------------------


def test_a_commit_may_update_one_key_and_clear_another() -> None:
    state = LiveState(KeyRegistry.of(Counter, Title, Positive))
    state.submit(StateCommand().update(Counter, 1).update(Title, "draft").update(Positive, 2))
    state.submit(StateCommand().update(Counter, 4).clear(Title))

    snapshot = state.snapshot
    assert snapshot.get(Counter) == 5
    assert Title not in snapshot
    assert snapshot.get(Title) == ""
    assert snapshot.get(Positive) == 2  # untouched by the second commit
    assert snapshot.to_dict() == {"test.counter": 5, "test.positive": 2}


def test_within_one_commit_later_ops_see_earlier_clears_and_updates() -> None:
    state = LiveState(KeyRegistry.of(Counter, Title))
    state.submit(StateCommand().update(Counter, 7).update(Title, "old"))
    state.submit(
        StateCommand()
        .clear(Counter)
        .update(Counter, 2)  # applies to the default after the clear
        .update(Title, "new")
        .clear(Title)  # the last op wins: cleared
    )
    assert state.snapshot.get(Counter) == 2
    assert Title not in state.snapshot
    assert state.revision == 2


class Strict(StateKey[int, int]):
    """Refuses anything that is not a non-negative int, so a placeholder would be refused."""

    key = "promise.strict"

    @staticmethod
    def validate(value: int) -> None:
        if type(value) is not int or value < 0:
            raise ValueError(f"not a non-negative int: {value!r}")


def test_clearing_a_validated_key_is_not_validated() -> None:
    state = LiveState(KeyRegistry.of(Strict, Counter))
    state.submit(StateCommand().update(Strict, 5))
    state.submit(StateCommand().clear(Strict))
    assert Strict not in state.snapshot
    assert state.snapshot.get(Strict) == 0
    state.submit(StateCommand().update(Strict, 3).update(Counter, 1))
    state.submit(StateCommand().clear(Strict).update(Counter, 1))  # the multi-key path
    assert Strict not in state.snapshot
    assert state.snapshot.get(Counter) == 2
    with pytest.raises(CommitRejected):
        state.submit(StateCommand().update(Strict, -1))


# -- seeding, staging and the details errors carry --------------------------------------------


class Nested(StateKey[dict[str, list[int]], int]):
    """apply mutates a list nested inside the value: only a deep copy keeps snapshots frozen."""

    key = "t.nested"

    @staticmethod
    def apply(value: dict[str, list[int]], update: int) -> dict[str, list[int]]:
        value.setdefault("items", []).append(update)
        return value


def test_an_apply_that_mutates_nested_values_leaves_older_snapshots_alone() -> None:
    state = LiveState(KeyRegistry.of(Nested))
    state.submit(StateCommand().update(Nested, 1))
    first = state.snapshot
    state.submit(StateCommand().update(Nested, 2))
    assert first.get(Nested) == {"items": [1]}
    assert state.snapshot.get(Nested) == {"items": [1, 2]}


def test_seeding_validates_and_copies_mutable_values_but_shares_immutable_ones() -> None:
    registry = KeyRegistry.of(Nested, Log, Positive)
    given = {"items": [1]}
    log = Vector([Msg("a", "b"), Msg("c", "d")])
    state = LiveState.of(registry, {Nested: given, Log: log})
    given["items"].append(99)
    assert state.revision == 0
    assert state.snapshot.get(Nested) == {"items": [1]}
    assert state.snapshot.get(Log) is log
    assert LiveState.of(registry, {Positive: 1}, revision=7).revision == 7
    with pytest.raises(CommitRejected) as caught:
        LiveState.of(registry, {Positive: -1})
    assert (caught.value.key, caught.value.stage) == ("test.positive", "validate")
    assert "must stay >= 0" in str(caught.value)


def test_a_staged_round_publishes_all_its_commits_at_once_in_order() -> None:
    state = LiveState(KeyRegistry.of(Counter, Title))
    state.track_touched()
    state.submit(StateCommand().update(Counter, 1))
    seen: list[int] = []
    state.add_listener(lambda snap: seen.append(snap.revision))
    fork = state.stage()
    fork.submit(StateCommand().update(Title, "a"))
    fork.submit(StateCommand().update(Counter, 1))
    assert fork.revision == 3 and state.revision == 1  # the fork continues the revision
    assert state.touched_names == {"test.counter"}
    assert state.publish(fork) == 2
    assert seen == [2, 3] and state.revision == 3
    assert state.snapshot is fork.snapshot
    assert state.touched_names == {"test.counter", "test.title"}


def test_touched_names_are_tracked_only_when_asked() -> None:
    state = LiveState(KeyRegistry.of(Counter, Title))
    state.submit(StateCommand().update(Counter, 1))
    fork = state.stage()
    fork.submit(StateCommand().update(Title, "a"))
    state.publish(fork)
    assert state.touched_names == frozenset()
    state.track_touched()
    state.track_touched()  # asking twice keeps what was tracked
    state.submit(StateCommand().clear(Counter))
    state.track_touched()
    assert state.touched_names == {"test.counter"}


def test_a_stale_staged_round_is_a_revision_conflict_naming_both_revisions() -> None:
    state = LiveState(KeyRegistry.of(Counter))
    state.submit(StateCommand().update(Counter, 1))
    fork = state.stage()
    fork.submit(StateCommand().update(Counter, 1))
    state.submit(StateCommand().update(Counter, 1))
    with pytest.raises(RevisionConflict) as caught:
        state.publish(fork)
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    assert str(caught.value).startswith("staged round expected revision 1 ")
    assert state.snapshot.get(Counter) == 2
    with pytest.raises(RevisionConflict) as not_a_fork:
        state.publish(LiveState(KeyRegistry.of(Counter)))
    assert (not_a_fork.value.expected, not_a_fork.value.actual) == (-1, 2)


def test_an_unknown_key_error_lists_the_registered_keys() -> None:
    state = LiveState(KeyRegistry.of(Counter, Log))
    with pytest.raises(UnknownStateKey) as caught:
        state.submit(StateCommand().update(Title, "x"), origin="writer")
    assert caught.value.key == "test.title"
    assert "Registered keys: test.counter, test.log." in str(caught.value)
    assert "plugin 'writer'" in str(caught.value)


def test_a_failing_commit_listener_is_logged_with_the_listener_and_revision(
    state: LiveState, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(snapshot: Any) -> None:
        raise RuntimeError("listener bug")

    state.add_listener(broken)
    with caplog.at_level("ERROR", logger="statekernel"):
        state.submit(StateCommand().update(Counter, 1))
    (record,) = caplog.records
    assert record.getMessage().startswith("commit listener <function ")
    assert "broken" in record.getMessage()
    assert record.getMessage().endswith(" failed at revision 1")
    assert record.exc_info is not None and "listener bug" in str(record.exc_info[1])


def test_an_op_added_by_hand_that_is_no_key_is_refused_naming_it() -> None:
    state = LiveState(KeyRegistry.of(Counter))
    command = StateCommand().update(Counter, 1)
    command.patch.ops.append(("counter", 1))  # type: ignore[arg-type]
    with pytest.raises(UnknownStateKey) as caught:
        state.submit(command, origin="hand")
    assert caught.value.key == "'counter'"
    assert state.revision == 0


class Notice(EffectSpec[str]):
    key = "t.notice"


class FollowUp(ScheduledActionSpec[int]):
    key = "t.follow_up"
    phase = Phase.STEP_END


@pytest.mark.parametrize(
    "extra",
    [lambda c: c.emit(Notice, "hi"), lambda c: c.schedule(FollowUp, 1)],
    ids=["effect", "action"],
)
def test_live_state_refuses_a_command_whose_effects_or_actions_it_cannot_dispatch(
    state: LiveState, extra: Any
) -> None:
    command = StateCommand().update(Counter, 1)
    extra(command)
    with pytest.raises(StateError, match=r"Use `await run.submit\(command\)`"):
        state.submit(command)
    assert state.revision == 0 and Counter not in state.snapshot
