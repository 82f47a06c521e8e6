"""A child process for the cross-process tests: one Agent on a SQLite file, driven by argv.

    python agent_process.py run DB THREAD SCRIPT      SCRIPT: comma-separated tool names
    python agent_process.py resume DB THREAD CALL_ID [approve|deny|result]
    python agent_process.py pending DB THREAD         the suspended calls and their tickets

Each model step calls the next tool of SCRIPT (one per step), then answers "done". Prints
one JSON line describing the result. The tool "hang" prints "hanging" and never returns, so
the parent can kill the process mid-step; "pay" is suspended by a gate until resumed, and
appends to PAYLOG (an environment variable naming a file) each time it really runs;
"lookup" does the same but is declared idempotent. With KILL_AT=before or KILL_AT=after
the process kills itself (SIGKILL) inside "pay" or "lookup", before or after the side
effect; with KILL_AT=end, right after the tool returned (in AFTER_TOOL_EXECUTE).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
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
        r.register_phase_hook(Phase.AFTER_TOOL_EXECUTE, self.after_tool)

    def step(self, ctx: PhaseContext) -> StateCommand:
        number = ctx.snapshot.get(Steps) + 1
        return StateCommand().update(Steps, 1).update(Journal, f"{ctx.run.run_id} step {number}")

    def after_tool(self, ctx: PhaseContext) -> None:
        _maybe_die("end")

    def gate(self, ctx: PhaseContext) -> Suspend | None:
        assert ctx.tool_call is not None
        return Suspend({"needs": "approval"}) if ctx.tool_call.name == "pay" else None


async def hang(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    print("hanging", flush=True)
    await asyncio.sleep(3600)
    return "never"


def _maybe_die(point: str) -> None:
    if os.environ.get("KILL_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _effect(line: str) -> None:
    _maybe_die("before")
    with open(os.environ["PAYLOG"], "a") as log:
        log.write(line + "\n")
    _maybe_die("after")


def pay(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    _effect("paid")
    return "paid"


def lookup(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    _effect("looked up")
    return "found"


lookup.idempotent = True  # type: ignore[attr-defined]


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
            {"hang": hang, "pay": pay, "note": note, "lookup": lookup},
            thread_store=store,
        )
        if command == "pending":
            waiting = await agent.pending(thread)
            print(json.dumps([[p.id, p.ticket] for p in waiting]), flush=True)
            return
        if command == "run":
            result = await agent.run(thread, [f"go {thread}"])
        else:
            kind = argv[4] if len(argv) > 4 else "approve"
            decision = {
                "approve": Decision.approve(),
                "deny": Decision.deny("denied after a crash"),
                "result": Decision.result("paid (confirmed by hand)"),
            }[kind]
            result = await agent.resume(thread, argv[3], decision)
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
                    "tickets": [p.ticket for p in result.pending],
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
