"""Run lifecycle: where the run is, as another plugin's hooks see it at every phase.

Run: .venv/bin/python docs/examples/run_lifecycle.py

A tracer plugin prints `lifecycle_of(ctx)` from a hook on every phase; a downloads plugin
counts a unit of pending work around each tool call. Offline: the model is scripted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from statekernel import (
    Agent,
    InferenceResponse,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScriptedModel,
    StateCommand,
    ToolCall,
)
from statekernel.plugins import PendingWork, RunLifecycle, RunPhase, lifecycle_of


class Tracer(Plugin):
    """Prints the lifecycle from its own hooks: the view of any other plugin."""

    id = "tracer"

    def register(self, registrar: PluginRegistrar) -> None:
        for phase in Phase:
            registrar.register_phase_hook(phase, self.show)

    def show(self, ctx: PhaseContext) -> None:
        life = lifecycle_of(ctx)
        committed = ctx.snapshot.get(RunPhase)
        print(
            f"  {ctx.phase.name:<19} step {life.step}  {life.status:<7}  "
            f"pending work {life.pending_work}   (RunPhase key still: "
            f"{committed.name if committed else None})"
        )


class Downloads(Plugin):
    """Counts a download as pending work from before the tool runs until after it ran."""

    id = "downloads"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_phase_hook(Phase.BEFORE_TOOL_EXECUTE, self.start)
        registrar.register_phase_hook(Phase.AFTER_TOOL_EXECUTE, self.finish)

    def start(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(PendingWork, 1)

    def finish(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(PendingWork, -1)


def fetch(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    life = lifecycle_of(ctx)
    phase = life.phase.name if life.phase else None
    print(f"  -> the tool runs in {phase}, step {life.step}, pending work {life.pending_work}")
    return f"contents of {arguments['url']}"


async def main() -> None:
    model = ScriptedModel(
        [
            InferenceResponse("fetching", (ToolCall("c1", "fetch", {"url": "report.txt"}),)),
            InferenceResponse("Here is the report."),
        ]
    )
    agent = Agent([RunLifecycle(), Downloads(), Tracer()], model, {"fetch": fetch})
    print("phase by phase, from the tracer's hooks:")
    result = await agent.run("thread-1", ["fetch the report"])
    final = lifecycle_of(result.snapshot)
    print(f"after the run: {final}")
    assert final.status == "done" and final.step == 2 and final.pending_work == 0


if __name__ == "__main__":
    asyncio.run(main())
