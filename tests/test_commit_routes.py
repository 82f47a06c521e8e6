"""Where each op of a commit goes in the journal (the routes its writer works out per key),
as the history shows it: an update journaled as it is, an update of an inexact type checked
first, a value that replaces a field whole, the ops after a command that had none, and a
live state that keeps no journal."""

from __future__ import annotations

import asyncio
import functools
import operator
from typing import Annotated, Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from samples import Hook

from statekernel import (
    EffectSpec,
    Kernel,
    KeyScope,
    MergeStrategy,
    Overwrite,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    StateCommand,
    StateKey,
    StateSchema,
)
from statekernel.lowlevel import KeyRegistry, LiveState
from statekernel.stores import MemoryThreadStore


class Total(StateKey[int, int]):
    key = "r.total"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Peak(StateKey[float, float]):
    """Floats are inexact (JSON has no infinity): each update is checked before it is kept."""

    key = "r.peak"
    scope = KeyScope.THREAD
    default = 0.0

    @staticmethod
    def apply(value: float, update: float) -> float:
        return max(value, update)


class KeysOf(Plugin):
    id = "keys"

    def __init__(self, *keys: type[StateKey[Any, Any]]) -> None:
        self.keys = keys

    def register(self, r: PluginRegistrar) -> None:
        for key in self.keys:
            r.register_key(key)


def _ops(record: Any) -> list[tuple[str, str, bytes | None]]:
    return [(op.key, op.kind, op.update) for op in record.ops]


async def test_an_inexact_update_that_would_not_come_back_is_journaled_as_its_value() -> None:
    kernel = Kernel([KeysOf(Peak, Total)])
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Peak, 1.5))
    await run.submit(StateCommand().update(Peak, float("-inf")).update(Total, 1))  # JSON: null
    await run.submit(StateCommand().update(Peak, 2.5))
    await run.finish()
    first, second, third = await kernel.history("t")
    assert _ops(first) == [("r.peak", "update", b"1.5")]
    assert _ops(second) == [("r.peak", "value", b"1.5"), ("r.total", "update", b"1")]
    assert _ops(third) == [("r.peak", "update", b"2.5")]
    assert run.snapshot.get(Peak) == 2.5


class Peaks(BaseModel):
    peak: Annotated[float, max] = 0.0


async def test_a_field_replaced_by_a_value_that_would_not_come_back_is_kept_without_bytes() -> None:
    schema = StateSchema(Peaks)
    kernel = Kernel([schema.plugin])
    run = await kernel.start_run("t")
    await run.submit(schema.command(peak=Overwrite(float("-inf"))))
    await run.submit(schema.command(peak=Overwrite(2.5)))
    await run.finish()
    first, second = await kernel.history("t")
    assert [(kind, data) for _, kind, data in _ops(first)] == [("value", None)]
    assert [(kind, data) for _, kind, data in _ops(second)] == [("value", b"2.5")]
    assert schema.view(run.snapshot).peak == 2.5


class Notes(BaseModel):
    peak: Annotated[float, max] = 0.0
    notes: Annotated[list[str], operator.add] = []


async def test_a_field_replaced_then_updated_in_one_commit_keeps_both_ops() -> None:
    """A replaced field's op holds the new value, and the update after it keeps its own op:
    a replace is no op that fails to journal (that would fold both into the value after)."""
    schema = StateSchema(Notes, scope=KeyScope.THREAD)
    kernel = Kernel([schema.plugin])
    run = await kernel.start_run("t")
    await run.submit(
        schema.command(peak=Overwrite(2.5), notes=Overwrite(["a"])).extend(
            schema.command(peak=1.0, notes=["b"])
        )
    )
    await run.finish()
    (record,) = await kernel.history("t")
    assert _ops(record) == [
        ("Notes.peak", "value", b"2.5"),
        ("Notes.notes", "value", b'["a"]'),
        ("Notes.peak", "update", b"1.0"),
        ("Notes.notes", "update", b'["b"]'),
    ]
    assert schema.view(run.snapshot) == Notes(peak=2.5, notes=["a", "b"])
    assert schema.view(await kernel.state_at("t", 1)) == Notes(peak=2.5, notes=["a", "b"])


class Notice(EffectSpec[str]):
    key = "r.notice"


class Notifier(Plugin):
    """A hook whose command carries an effect and no state op."""

    id = "notifier"

    def register(self, r: PluginRegistrar) -> None:
        r.register_effect(Notice, lambda payload, snapshot: None)
        r.register_phase_hook(Phase.STEP_START, self.notify)

    def notify(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().emit(Notice, "hi")


class Adder(Plugin):
    id = "adder"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Total)
        r.register_phase_hook(Phase.STEP_START, self.add)

    def add(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Total, 2)


async def test_the_ops_after_a_command_with_none_are_journaled_with_their_source() -> None:
    kernel = Kernel([Notifier(), Adder()])
    run = await kernel.start_run("t")
    report = await run.run_phase(Phase.STEP_START)
    await run.finish()
    assert (report.commits, report.effects_dispatched) == (1, 1)
    (record,) = await kernel.history("t")
    assert record.sources == ("plugin:adder",)
    assert _ops(record) == [("r.total", "update", b"2")]


async def test_every_hook_after_one_whose_op_is_written_alone_keeps_its_source() -> None:
    """A float is checked before it is journaled, which writes its commit op by op: the
    commit still names every hook whose command it holds, in order."""
    kernel = Kernel(
        [
            KeysOf(Peak, Sum),
            Hook("a", Phase.STEP_START, lambda ctx: StateCommand().update(Peak, 1.5)),
            Hook("b", Phase.STEP_START, lambda ctx: StateCommand().update(Sum, 2)),
            Hook("c", Phase.STEP_START, lambda ctx: StateCommand().update(Sum, 3)),
        ]
    )
    run = await kernel.start_run("t")
    await run.run_phase(Phase.STEP_START)
    await run.finish()
    (record,) = await kernel.history("t")
    assert record.sources == ("plugin:a", "plugin:b", "plugin:c")
    assert _ops(record) == [
        ("r.peak", "update", b"1.5"),
        ("r.sum", "update", b"2"),
        ("r.sum", "update", b"3"),
    ]


def test_a_live_state_that_keeps_no_journal_notes_no_commit() -> None:
    state = LiveState(KeyRegistry.of(Total))
    state.submit(StateCommand().update(Total, 1))
    assert state.revision == 1
    assert state.pending_commits() == ()
    assert state.noted_commit(1) is None


class Sum(StateKey[int, int]):
    key = "r.sum"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Tags(StateKey[tuple[str, ...], list[str]]):
    """A mutable update type, journaled as it is: each command copies its update."""

    key = "r.tags"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: tuple[str, ...], update: list[str]) -> tuple[str, ...]:
        return (*value, *update)


class Label(StateKey[str, str]):
    key = "r.label"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE
    default = ""

    @staticmethod
    def apply(value: str, update: str) -> str:
        return update


class Scratch(StateKey[int, int]):
    """A run key: a thread store keeps none of its ops."""

    key = "r.scratch"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


_UPDATES = st.one_of(
    st.tuples(st.just(Sum), st.integers()),
    st.tuples(st.just(Tags), st.lists(st.text(max_size=6), max_size=3)),
    st.tuples(st.just(Label), st.text(max_size=8)),
    st.tuples(st.just(Scratch), st.integers(-5, 5)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commands=st.lists(st.lists(_UPDATES, min_size=1, max_size=4), min_size=1, max_size=5))
def test_a_phase_journals_each_op_with_its_own_update_bytes_in_the_order_applied(
    commands: list[list[tuple[type[StateKey[Any, Any]], Any]]],
) -> None:
    """However many hooks and ops a phase's commit gathers, each op's bytes are exactly its
    update's own encoding, in the order the commit applied them, and replay rebuilds the
    state: with every op kept in memory, and with a store keeping the thread keys' only."""

    class Writers(Plugin):
        id = "writers"

        def register(self, r: PluginRegistrar) -> None:
            for key in (Sum, Tags, Label, Scratch):
                r.register_key(key)
            for ops in commands:
                r.register_phase_hook(Phase.STEP_START, functools.partial(self.write, ops))

        def write(self, ops: list[tuple[Any, Any]], ctx: PhaseContext) -> StateCommand:
            command = StateCommand()
            for key, update in ops:
                command.update(key, update)
            return command

    async def journaled(store: MemoryThreadStore | None) -> None:
        kernel = Kernel([Writers()], thread_store=store)
        run = await kernel.start_run("t")
        await run.run_phase(Phase.STEP_START)
        await run.finish()
        (record,) = await kernel.history("t")
        kept = [(k, u) for ops in commands for k, u in ops if store is None or k is not Scratch]
        assert _ops(record) == [(k.key, "update", msgspec.json.encode(u)) for k, u in kept]
        assert (await kernel.state_at("t", 1)).get(Tags) == run.snapshot.get(Tags)
        assert (await kernel.verify("t")).ok

    asyncio.run(journaled(None))
    asyncio.run(journaled(MemoryThreadStore()))


async def test_a_commit_with_an_update_that_cannot_be_encoded_journals_its_other_ops() -> None:
    """One update a commit cannot encode does not cost the commit's other ops their bytes:
    only its key's op is journaled without them (its value is held in the kernel's memory)."""
    kernel = Kernel([KeysOf(Total, Label)])
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Total, 1).update(Label, "lone \ud800").update(Total, 2))
    await run.submit(StateCommand().update(Label, "fine").update(Total, 4))
    await run.finish()
    first, _ = await kernel.history("t")
    assert _ops(first) == [
        ("r.total", "update", b"1"),
        ("r.label", "value", None),
        ("r.total", "update", b"2"),
    ]
    then = await kernel.state_at("t", 1)  # replayed: the value the kernel's memory held
    assert (then.get(Label), then.get(Total)) == ("lone \ud800", 3)
    assert (await kernel.state_at("t", 2)).get(Label) == "fine"
    assert (await kernel.verify("t")).ok


class Heard(StateKey[list[str], str]):
    """A list whose `apply` appends in place, as a user's might (commits hand it a copy)."""

    key = "r.heard"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: list[str], update: str) -> list[str]:
        value.append(update)
        return value


async def test_replaying_onto_a_held_value_leaves_the_held_value_as_it_was() -> None:
    """A value the kernel's memory holds (no codec journals it) is copied for each replay,
    so an `apply` that changes it in place changes that replay's copy only: every revision
    reads the same however often, and in whatever order, it is read."""
    kernel = Kernel([KeysOf(Heard)])
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Heard, "lone \ud800"))  # held as it is
    await run.submit(StateCommand().update(Heard, "b"))
    await run.submit(StateCommand().update(Heard, "c"))
    await run.finish()
    for revision in (2, 1, 2, 1, 3):
        expected = ["lone \ud800", "b", "c"][:revision]
        assert (await kernel.state_at("t", revision)).get(Heard) == expected
