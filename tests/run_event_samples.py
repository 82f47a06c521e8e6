"""Plugins whose one run makes every kind of run event: hooks of two plugins whose commands
overlap on an EXCLUSIVE key (so one is re-run), an effect that fails beside one that does
not, a scheduled action, and a tool gate that blocks with a reason. The run event tests and
the trace tests share them."""

from __future__ import annotations

from typing import Any

from statekernel import (
    Block,
    EffectSpec,
    MergeStrategy,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScheduledActionSpec,
    StateCommand,
    StateKey,
)


class Counter(StateKey[int, int]):
    key = "t.counter"
    merge = MergeStrategy.EXCLUSIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Ping(EffectSpec[str]):
    key = "t.ping"


class Boom(EffectSpec[str]):
    key = "t.boom"


class Later(ScheduledActionSpec[str]):
    key = "t.later"
    phase = Phase.STEP_END


class First(Plugin):
    id = "first"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Counter)
        r.register_effect(Ping, lambda payload, snapshot: None)
        r.register_effect(Boom, self.boom)
        r.register_action(Later, lambda payload, ctx: None)
        r.register_phase_hook(Phase.STEP_START, self.step)
        r.register_tool_gate(self.gate)

    @staticmethod
    def boom(payload: str, snapshot: Any) -> None:
        raise RuntimeError(f"cannot {payload}")

    @staticmethod
    def step(ctx: PhaseContext) -> StateCommand:
        return (
            StateCommand()
            .update(Counter, 1)
            .emit(Ping, "hi")
            .emit(Boom, "explode")
            .schedule(Later, "then")
        )

    @staticmethod
    def gate(ctx: PhaseContext) -> Block | None:
        if ctx.tool_call is not None and ctx.tool_call.name == "delete":
            return Block("delete needs an approval first")
        return None


class Second(Plugin):
    """Writes the same EXCLUSIVE key in the same phase: its hook is re-run."""

    id = "second"

    def register(self, r: PluginRegistrar) -> None:
        r.register_phase_hook(Phase.STEP_START, lambda ctx: StateCommand().update(Counter, 10))
