"""The engine up close: two plugins, one run, in memory, every phase printed.

Run: .venv/bin/python docs/examples/engine_tour.py

It shows the loop the whole kernel is built around: hooks read one frozen snapshot and return
commands; the loop merges them (COMMUTATIVE ops concatenated, EXCLUSIVE conflicts re-run on a
fresh snapshot), commits atomically, dispatches effects and runs scheduled actions.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from statekernel import (
    Block,
    CommitRejected,
    EffectSpec,
    Kernel,
    KeyScope,
    MergeStrategy,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    Run,
    ScheduledActionSpec,
    Snapshot,
    StateCommand,
    StateKey,
    StateValidationError,
    ToolCall,
    ToolOutput,
    Vector,
)


class Note(msgspec.Struct, frozen=True):
    author: str
    text: str


class StepCounter(StateKey[int, int]):
    key = "demo.steps"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Notes(StateKey[Vector[Note], Note]):
    key = "demo.notes"
    merge = MergeStrategy.COMMUTATIVE
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[Note], update: Note) -> Vector[Note]:
        return value.append(update)


class Focus(StateKey[str, str]):
    """EXCLUSIVE: two hooks setting it in one phase cannot both be right."""

    key = "demo.focus"
    default = "nothing yet"


class Reviewed(StateKey[bool, bool]):
    key = "demo.reviewed"


class Budget(StateKey[int, int]):
    """Spending below zero is refused by validate, which rejects the whole commit."""

    key = "demo.budget"
    default = 3

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update

    @staticmethod
    def validate(value: int) -> None:
        if value < 0:
            raise ValueError(f"budget would drop to {value}")


class Audit(EffectSpec[str]):
    key = "demo.audit"


class Remind(ScheduledActionSpec[str]):
    key = "demo.remind"
    phase = Phase.STEP_END


class Bookkeeping(Plugin):
    id = "bookkeeping"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(StepCounter)
        r.register_key(Notes)
        r.register_key(Reviewed)
        r.register_key(Budget)
        r.register_phase_hook(Phase.STEP_START, self.count_step)
        r.register_phase_hook(Phase.STEP_START, self.choose_focus)
        r.register_effect(Audit, self.audit)
        r.register_action(Remind, self.remind)
        r.register_tool_gate(self.gate)

    def count_step(self, ctx: PhaseContext) -> StateCommand:
        return (
            StateCommand()
            .update(StepCounter, 1)
            .update(Notes, Note("bookkeeping", "step started"))
            .schedule(Remind, "tidy up at step end")
            .emit(Audit, "step counted")
        )

    def choose_focus(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Focus, "bookkeeping")

    def audit(self, payload: str, snapshot: Snapshot) -> None:
        print(f"    effect  audit: {payload!r} (sees revision {snapshot.revision})")

    def remind(self, payload: str, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Notes, Note("reminder", payload))

    def gate(self, ctx: PhaseContext) -> Block | None:
        call = ctx.tool_call
        if call is not None and call.name == "publish" and not ctx.snapshot.get(Reviewed):
            return Block("publish needs review first: call `review` before `publish`")
        return None


class Planner(Plugin):
    id = "planner"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Focus)
        r.register_phase_hook(Phase.STEP_START, self.plan)

    async def plan(self, ctx: PhaseContext) -> StateCommand:
        await asyncio.sleep(0)
        focus = ctx.snapshot.get(Focus)
        return (
            StateCommand()
            .update(StepCounter, 1)
            .update(Notes, Note("planner", f"focus was {focus!r}"))
            .update(Focus, "planning")
        )


def _show(title: str, run: Run, report: object) -> None:
    print(f"{title}")
    print(f"    {report}")
    for name, value in run.snapshot.to_dict().items():
        shown = [f"{n.author}: {n.text}" for n in value] if isinstance(value, Vector) else value
        print(f"    {name} = {shown!r}")


async def main() -> None:
    kernel = Kernel([Bookkeeping(), Planner()])
    run = await kernel.start_run("demo-thread")
    print(f"run {run.identity.run_id!r} starts at revision {run.revision}\n")
    _show(
        "STEP_START (planner conflicts with bookkeeping on demo.focus):",
        run,
        await run.run_phase(Phase.STEP_START),
    )

    def publish(arguments: dict[str, object], ctx: PhaseContext) -> str:
        return "published"

    def review(arguments: dict[str, object], ctx: PhaseContext) -> ToolOutput:
        return ToolOutput("reviewed", StateCommand().update(Reviewed, True))

    for call, tool in (
        (ToolCall("call-1", "publish"), publish),
        (ToolCall("call-2", "review"), review),
        (ToolCall("call-3", "publish"), publish),
    ):
        result = await run.handle_tool_call(call, tool)
        outcome = result.error if result.is_error else result.result
        print(f"\ntool {call.name} -> {result.status.value}: {outcome!r}")

    _show(
        "\nSTEP_END (runs the Remind action scheduled at STEP_START):",
        run,
        await run.run_phase(Phase.STEP_END),
    )
    try:
        not_a_bool: Any = "yes"
        StateCommand().update(Reviewed, not_a_bool)
    except StateValidationError as error:
        print(f"\na wrong update type is refused when the command is built:\n    {error}")
    try:
        await run.submit(StateCommand().update(StepCounter, 10).update(Budget, -5))
    except CommitRejected as error:
        print(f"a value refused by validate rejects the whole commit:\n    {error}")
    _show("\nafter the rejected commit, nothing of it is visible:", run, f"revision {run.revision}")
    await run.finish()


if __name__ == "__main__":
    asyncio.run(main())
