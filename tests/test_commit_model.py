"""Property tests: commits behave exactly like a reference model, and snapshots stay frozen.

The reference model is the simplest thing that could be right: a dict of values, and for each
commit a deep copy on which the same reducers are applied one op at a time, then every touched
key validated; if anything raises, the copy is thrown away. The kernel must agree with it on
every value, every revision and every refusal, while sharing immutable values, copying
mutable ones, and never letting anything a reader does to a value reach committed state.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sample_keys import Counter, Items, Log, Msg, Positive, Settings, Title
from samples import Hook, Keys

from statekernel import (
    CommitRejected,
    Kernel,
    MergeStrategy,
    Phase,
    PhaseContext,
    Plugin,
    StateCommand,
    StateKey,
    Vector,
)
from statekernel.lowlevel import Contribution, KeyRegistry, LiveState


class Bag(StateKey[list[int], int]):
    """Mutable, validated, with a mutable declared default: every path that must copy."""

    key = "model.bag"
    default = [0]  # deliberately mutable
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: list[int], update: int) -> list[int]:
        value.append(update)
        return value

    @staticmethod
    def validate(value: list[int]) -> None:
        if len(value) > 6:
            raise ValueError(f"bag holds {len(value)} items, at most 6")


KEYS: tuple[type[StateKey[Any, Any]], ...] = (Counter, Title, Items, Settings, Log, Positive, Bag)


def _default(key: type[StateKey[Any, Any]]) -> Any:
    """The default as the reference model sees it: the declared one or the zero value."""
    return {Counter: 0, Title: "", Items: [], Settings: {}, Log: (), Positive: 0, Bag: [0]}[key]


def _reference_apply(key: type[StateKey[Any, Any]], value: Any, update: Any) -> Any:
    """What each key's reducer means, written without the kernel's code."""
    if key in (Counter, Positive):
        return value + update
    if key is Title:
        return update
    if key in (Items, Bag):
        return [*value, update]
    if key is Settings:
        return {**value, **update}
    if key is Log:
        return (*value, update)
    raise AssertionError(key)


def _reference_valid(key: type[StateKey[Any, Any]], value: Any) -> bool:
    if key is Positive:
        return bool(value >= 0)
    if key is Bag:
        return len(value) <= 6
    return True


def _comparable(value: Any) -> Any:
    return tuple(value) if isinstance(value, Vector) else value


_CLEAR = object()

_update = st.one_of(
    st.tuples(st.just(Counter), st.integers(-3, 3)),
    st.tuples(st.just(Title), st.sampled_from(["", "a", "b"])),
    st.tuples(st.just(Items), st.integers(0, 9)),
    st.tuples(
        st.just(Settings),
        st.dictionaries(st.sampled_from("xy"), st.lists(st.integers(0, 3), max_size=2), max_size=2),
    ),
    st.tuples(st.just(Log), st.builds(Msg, st.just("user"), st.sampled_from(["hi", "yo"]))),
    st.tuples(st.just(Positive), st.integers(-4, 3)),
    st.tuples(st.just(Bag), st.integers(0, 9)),
)
_op = st.one_of(_update, st.tuples(st.sampled_from(KEYS), st.just(_CLEAR)))
_commit = st.lists(st.lists(_op, min_size=1, max_size=4), min_size=1, max_size=3)
"""One commit: one to three contributions (plugins), each with a few ops."""


class Model:
    """The reference: values by key class, a revision, and the rule for a commit."""

    def __init__(self) -> None:
        self.values: dict[type[StateKey[Any, Any]], Any] = {}
        self.revision = 0

    def commit(self, contributions: list[list[tuple[Any, Any]]]) -> str | None:
        """Apply like the kernel should; returns the refused key's string, or None."""
        working = copy.deepcopy(self.values)
        touched: list[type[StateKey[Any, Any]]] = []
        for ops in contributions:
            for key, update in ops:
                if key not in touched:
                    touched.append(key)
                if update is _CLEAR:
                    working.pop(key, None)
                else:
                    value = working.get(key, _default(key))
                    working[key] = _reference_apply(key, value, update)
        for key in touched:
            if key in working and not _reference_valid(key, working[key]):
                return key.key
        self.values = working
        self.revision += 1
        return None

    def as_dict(self) -> dict[str, Any]:
        return {key.key: value for key, value in self.values.items()}


def _command(ops: list[tuple[Any, Any]]) -> StateCommand:
    command = StateCommand()
    for key, update in ops:
        if update is _CLEAR:
            command.clear(key)
        else:
            command.update(key, copy.deepcopy(update))
    return command


def _held(snapshot: Any) -> dict[str, Any]:
    return {name: _comparable(value) for name, value in snapshot.to_dict().items()}


def _vandalise(snapshot: Any) -> None:
    """Everything a badly behaved hook could do to the values it read."""
    for key in KEYS:
        value = snapshot.get(key)
        if isinstance(value, list):
            value.append(666)
            value.insert(0, -666)
        elif isinstance(value, dict):
            value["vandal"] = [666]
            for inner in value.values():
                if isinstance(inner, list):
                    inner.append(666)


@settings(max_examples=120, deadline=None)
@given(commits=st.lists(_commit, max_size=8))
def test_commits_agree_with_the_reference_model_and_snapshots_never_change(
    commits: list[list[list[tuple[Any, Any]]]],
) -> None:
    state = LiveState(KeyRegistry.of(*KEYS))
    model = Model()
    taken: list[tuple[Any, dict[str, Any]]] = [(state.snapshot, {})]
    for contributions in commits:
        refused = model.commit(contributions)
        batch = [
            Contribution(f"p{index}", _command(ops)) for index, ops in enumerate(contributions)
        ]
        before = state.snapshot
        try:
            state.commit(batch)
        except CommitRejected as error:
            assert refused == error.key, (refused, error)
            assert state.snapshot is before
        else:
            assert refused is None
        assert state.revision == model.revision
        assert _held(state.snapshot) == {
            name: _comparable(value) for name, value in model.as_dict().items()
        }
        for key in KEYS:
            assert (key in state.snapshot) == (key in model.values)
            expected = model.values.get(key, _default(key))
            assert _comparable(state.snapshot.get(key)) == expected
        _vandalise(state.snapshot)
        taken.append((state.snapshot, _held(state.snapshot)))
        for snapshot, held in taken:
            assert _held(snapshot) == held


# -- the same through the phase engine, with hooks that vandalise what they read ------------


def _vandal_hook(ops: list[tuple[Any, Any]], delay: float) -> Callable[[PhaseContext], Any]:
    async def hook(ctx: PhaseContext) -> StateCommand:
        _vandalise(ctx.snapshot)
        await asyncio.sleep(delay)
        _vandalise(ctx.snapshot)
        return _command(ops)

    return hook


_commutative_update = st.one_of(
    st.tuples(st.just(Counter), st.integers(-3, 3)),
    st.tuples(st.just(Items), st.integers(0, 9)),
    st.tuples(st.just(Log), st.builds(Msg, st.just("user"), st.sampled_from(["hi", "yo"]))),
)


@settings(max_examples=30, deadline=None)
@given(
    rounds=st.lists(
        st.lists(
            st.tuples(st.lists(_commutative_update, min_size=1, max_size=3), st.integers(0, 3)),
            min_size=1,
            max_size=4,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_a_phase_of_vandal_hooks_commits_the_registration_order_result(
    rounds: list[list[tuple[list[tuple[Any, Any]], int]]],
) -> None:
    """Hooks on commutative keys finish in random order and mutate everything they read; the
    phase still commits exactly the registration-order concatenation of their ops."""

    async def scenario() -> None:
        model = Model()
        for hooks in rounds:
            plugins: list[Plugin] = [Keys(*KEYS)]
            plugins += [
                Hook(f"h{index}", Phase.STEP_START, _vandal_hook(ops, delay / 2000))
                for index, (ops, delay) in enumerate(hooks)
            ]
            kernel = Kernel(plugins)
            run = await kernel.start_run("t")
            # Seed the run with the model's state, then run the phase.
            seed = StateCommand()
            for key, value in model.values.items():
                seed.clear(key)
                for item in value if key in (Items, Log) else [value]:
                    seed.update(key, item)
            await run.submit(seed)
            seeded = run.snapshot
            held = _held(seeded)
            report = await run.run_phase(Phase.STEP_START)
            assert model.commit([ops for ops, _ in hooks]) is None
            assert report.conflicts == 0
            assert _held(run.snapshot) == {
                name: _comparable(value) for name, value in model.as_dict().items()
            }
            assert _held(seeded) == held
            await run.finish()

    asyncio.run(scenario())


# -- a key written more than once in one commit, beside a Vector of mutable items ----------


class Docs(StateKey[Vector[dict[str, int]], dict[str, int]]):
    """A Vector of mutable items: its items are copied as apply reads them."""

    key = "model.docs"

    @staticmethod
    def apply(value: Vector[dict[str, int]], update: dict[str, int]) -> Vector[dict[str, int]]:
        return value.append(update)


class Names(StateKey[Vector[str], str | None]):
    """A Vector of immutable items; None leaves it as it is."""

    key = "model.names"

    @staticmethod
    def apply(value: Vector[str], update: str | None) -> Vector[str]:
        return value if update is None else value.append(update)


def test_later_ops_of_a_commit_see_their_value_as_it_is() -> None:
    """Only a Vector of mutable items is handed to apply as a copying view: a second op on
    an int or on a Vector of strings in the same commit gets the value itself, and what it
    returns is what the key holds."""
    state = LiveState(KeyRegistry.of(Docs, Names, Counter))
    command = (
        StateCommand()
        .update(Docs, {"a": 1})
        .update(Counter, 1)
        .update(Counter, 1)
        .update(Names, "x")
        .update(Names, None)
    )
    snapshot = state.commit([Contribution("p", command)])
    assert snapshot.get(Counter) == 2
    names = snapshot.get(Names)
    assert type(names) is Vector and list(names) == ["x"]
    assert list(snapshot.get(Docs)) == [{"a": 1}]
