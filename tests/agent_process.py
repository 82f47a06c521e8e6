"""A child process for the cross-process tests: one Agent on a SQLite file, driven by argv.

    python agent_process.py run DB THREAD SCRIPT      SCRIPT: comma-separated tool names
    python agent_process.py resume DB THREAD CALL_ID

Each model step calls the next tool of SCRIPT (one per step), then answers "done". Prints
one JSON line describing the result. The tool "hang" prints "hanging" and never returns, so
the parent can kill the process mid-step; "pay" is suspended by a gate until resumed, and
appends to PAYLOG (an environment variable naming a file) each time it really runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from statekernel import (
    Agent,
    Decision,
    InferenceResponse,
    KeyScope,
    MergeStrategy,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScriptedModel,
    StateCommand,
    StateKey,
    Suspend,
    ToolCall,
)
from statekernel.stores import SqliteThreadStore


class Journal(StateKey[tuple[str, ...], str]):
    """Thread key: what happened, across runs."""

    key = "proc.journal"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: tuple[str, ...], update: str) -> tuple[str, ...]:
        return (*value, update)


class Steps(StateKey[int, int]):
    """Run key: steps of this run."""

    key = "proc.steps"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Recorder(Plugin):
    id = "recorder"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Journal)
        r.register_key(Steps)
        r.register_phase_hook(Phase.STEP_START, self.step)
        r.register_tool_gate(self.gate)

    def step(self, ctx: PhaseContext) -> StateCommand:
        number = ctx.snapshot.get(Steps) + 1
        return StateCommand().update(Steps, 1).update(Journal, f"{ctx.run.run_id} step {number}")

    def gate(self, ctx: PhaseContext) -> Suspend | None:
        assert ctx.tool_call is not None
        return Suspend({"needs": "approval"}) if ctx.tool_call.name == "pay" else None


async def hang(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    print("hanging", flush=True)
    await asyncio.sleep(3600)
    return "never"


def pay(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    with open(os.environ["PAYLOG"], "a") as log:
        log.write("paid\n")
    return "paid"


def note(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    return "noted"


async def main(argv: list[str]) -> None:
    command, db, thread = argv[:3]
    script = [name for name in argv[3].split(",") if name] if command == "run" else []
    responses = [
        InferenceResponse(text="", tool_calls=(ToolCall(f"call-{i}-{name}", name, {}),))
        for i, name in enumerate(script)
    ]
    async with SqliteThreadStore(db) as store:
        agent = Agent(
            [Recorder()],
            ScriptedModel(responses),
            {"hang": hang, "pay": pay, "note": note},
            thread_store=store,
        )
        if command == "run":
            result = await agent.run(thread, [f"go {thread}"])
        else:
            result = await agent.resume(thread, argv[3], Decision.approve())
        print(
            json.dumps(
                {
                    "outcome": result.outcome,
                    "error": str(result.error) if result.error else None,
                    "journal": list(result.snapshot.get(Journal)),
                    "steps": result.snapshot.get(Steps),
                    "revision": result.snapshot.revision,
                    "tool_messages": [m.content for m in result.messages if m.role == "tool"],
                    "pending": [p.id for p in result.pending],
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
