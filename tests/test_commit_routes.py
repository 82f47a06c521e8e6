"""Where each op of a commit goes in the journal (the routes its writer works out per key),
as the history shows it: an update journaled as it is, an update of an inexact type checked
first, a value that replaces a field whole, the ops after a command that had none, and a
live state that keeps no journal."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel

from statekernel import (
    EffectSpec,
    Kernel,
    KeyScope,
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


def test_a_live_state_that_keeps_no_journal_notes_no_commit() -> None:
    state = LiveState(KeyRegistry.of(Total))
    state.submit(StateCommand().update(Total, 1))
    assert state.revision == 1
    assert state.pending_commits() == ()
    assert state.noted_commit(1) is None
