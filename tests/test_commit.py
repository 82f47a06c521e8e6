"""Commits are atomic: every op applies and validates, or nothing changes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sample_keys import Counter, Items, Log, Msg, Positive, Title

from kernel import (
    CommitRejected,
    Contribution,
    KeyRegistry,
    LiveState,
    RevisionConflict,
    StateCommand,
    StateKey,
    UnknownStateKey,
)


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
