"""Merge: commutative ops concatenate in registration order; exclusive overlap partitions."""

from __future__ import annotations

import random
from collections import deque

from hypothesis import given
from hypothesis import strategies as st
from sample_keys import Counter, Log, Msg, Title

from statekernel import StateCommand, StateKey
from statekernel.lowlevel import Contribution, KeyRegistry, LiveState, Partition, partition


class Other(StateKey[str, str]):
    key = "t.other"


def _log(text: str) -> StateCommand:
    return StateCommand().update(Log, Msg("user", text)).update(Counter, 1)


def test_commutative_ops_concatenate_in_the_given_order() -> None:
    contributions = [Contribution(f"p{i}", _log(str(i))) for i in range(5)]
    assert partition(contributions).deferred == ()
    state = LiveState(KeyRegistry.of(Log, Counter))
    state.commit(contributions)
    assert [m.text for m in state.snapshot.get(Log)] == ["0", "1", "2", "3", "4"]
    assert state.snapshot.get(Counter) == 5 and state.revision == 1


def test_result_depends_on_registration_order_not_on_completion_order() -> None:
    """Commands arriving in any completion order are put back in registration order first."""
    registered = [Contribution(f"p{i}", _log(str(i))) for i in range(6)]
    expected = None
    for seed in range(20):
        arrived = registered[:]
        random.Random(seed).shuffle(arrived)
        in_order = sorted(arrived, key=registered.index)
        state = LiveState(KeyRegistry.of(Log, Counter))
        state.commit(partition(in_order).kept)
        result = (state.revision, tuple(state.snapshot.get(Log)))
        expected = expected or result
        assert result == expected


def test_exclusive_overlap_keeps_a_greedy_prefix_and_defers_the_rest() -> None:
    a = Contribution("a", StateCommand().update(Title, "a"))
    b = Contribution("b", StateCommand().update(Title, "b").update(Counter, 1))
    c = Contribution("c", StateCommand().update(Counter, 1))
    d = Contribution("d", StateCommand().update(Title, "d"))
    split = partition([a, b, c, d])
    assert split.kept == (a, c)
    assert split.deferred == (b, d)


def test_disjoint_exclusive_writes_are_all_kept() -> None:
    a = Contribution("a", StateCommand().update(Title, "a"))
    c = Contribution("c", StateCommand().update(Counter, 1).update(Counter, 2))
    assert partition([a, c]).kept == (a, c)


def test_a_clear_claims_an_exclusive_key_and_commutative_ops_claim_none() -> None:
    clearing = Contribution("a", StateCommand().clear(Title).update(Counter, 1))
    writing = Contribution("b", StateCommand().update(Title, "b").update(Counter, 1))
    counting = Contribution("c", StateCommand().update(Counter, 5))
    split = partition([clearing, writing, counting])
    assert split.kept == (clearing, counting) and split.deferred == (writing,)


def test_every_exclusive_key_of_a_command_claims_it() -> None:
    """A command is deferred when any of its exclusive keys, not only the first, is taken."""
    first = Contribution("a", StateCommand().update(Title, "a"))
    second = Contribution("b", StateCommand().update(Other, "b").update(Title, "b"))
    third = Contribution("c", StateCommand().update(Other, "c"))
    split = partition([first, second, third])
    assert split.kept == (first, third) and split.deferred == (second,)


def test_zero_or_one_command_is_kept_as_it_is() -> None:
    only = Contribution("a", StateCommand().update(Title, "a"))
    assert partition([only]) == Partition((only,), ())
    assert partition([]) == Partition((), ())


def test_commands_before_the_first_claim_are_kept_whatever_follows() -> None:
    """Commands that claim nothing stay kept, in order, before and after the first one that
    claims a key; a later claim on that key is deferred."""
    counts = [Contribution(f"c{i}", StateCommand().update(Counter, i)) for i in range(2)]
    title = Contribution("t", StateCommand().update(Counter, 1).update(Title, "t"))
    again = Contribution("u", StateCommand().update(Title, "u"))
    after = Contribution("v", StateCommand().update(Counter, 9))
    split = partition([*counts, title, again, after])
    assert split == Partition((*counts, title, after), (again,))
    assert partition(deque([*counts, title, again, after])) == split  # any Sequence


_WRITES = st.lists(st.sampled_from([Counter, Title, Other, None]), max_size=4)
"""One command's ops: a key's update each, None for a CLEAR of Title."""


@given(st.lists(_WRITES, max_size=6))
def test_partition_keeps_each_command_whose_claims_are_still_free(
    commands: list[list[type[StateKey[object, object]] | None]],
) -> None:
    """Against a model: walking in order, a command is kept when none of its exclusive keys
    (updated or cleared) is claimed by a command kept before it."""
    contributions: list[Contribution] = []
    for index, writes in enumerate(commands):
        command = StateCommand()
        for key in writes:
            if key is None:
                command.clear(Title)
            else:
                command.update(key, 1 if key is Counter else "x")  # type: ignore[arg-type]
        contributions.append(Contribution(f"p{index}", command))
    kept, deferred, claimed = [], [], set()
    for contribution, writes in zip(contributions, commands, strict=True):
        claims = {(key or Title).key for key in writes if key is not Counter}
        if claims & claimed:
            deferred.append(contribution)
        else:
            claimed |= claims
            kept.append(contribution)
    assert partition(contributions) == Partition(tuple(kept), tuple(deferred))


def test_a_contribution_names_its_source_for_the_journal() -> None:
    """A given source is kept; without one, a plugin's command is `plugin:<id>` and an
    origin-less one a submission."""
    command = StateCommand().update(Counter, 1)
    assert Contribution("p", command, "tool:search").journal_source() == "tool:search"
    assert Contribution("p", command).journal_source() == "plugin:p"
    assert Contribution(None, command).journal_source() == "submit"
