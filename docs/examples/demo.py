"""The statekernel demo (`make demo`): a scripted two-run conversation on one thread.

Everything is stored in SQLite under ./.statekernel/ (the embedded default a user sees).
For each phase it prints the hooks that ran, the commits and the revision; between the runs
it shows a thread key surviving while a run key starts again from its default.

Run: .venv/bin/python docs/examples/demo.py
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec

from kernel import (
    Agent,
    Block,
    InferenceResponse,
    KeyScope,
    MergeStrategy,
    Phase,
    PhaseContext,
    PhaseReport,
    Plugin,
    PluginRegistrar,
    Run,
    RunResult,
    ScriptedModel,
    StateCommand,
    StateKey,
    ToolCall,
    ToolOutput,
    Vector,
)
from stores import SqliteThreadStore

DATA = Path(".statekernel")
THREAD = "demo-thread"


class Fact(msgspec.Struct, frozen=True):
    topic: str
    text: str


class Facts(StateKey[Vector[Fact], Fact]):
    """Thread key: what the agent learned; survives from run to run."""

    key = "demo.facts"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: Vector[Fact], update: Fact) -> Vector[Fact]:
        return value.append(update)


class StepsThisRun(StateKey[int, int]):
    """Run key: steps taken in this run; back to 0 at every run start."""

    key = "demo.steps"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Verified(StateKey[bool, bool]):
    """Run key: set by the `verify` tool; `publish` is gated on it."""

    key = "demo.verified"


class Notebook(Plugin):
    id = "notebook"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Facts)
        r.register_key(StepsThisRun)
        r.register_key(Verified)
        r.register_phase_hook(Phase.STEP_START, self.count_step)
        r.register_tool_gate(self.gate)

    def count_step(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(StepsThisRun, 1)

    def gate(self, ctx: PhaseContext) -> Block | None:
        call = ctx.tool_call
        if call is not None and call.name == "publish" and not ctx.snapshot.get(Verified):
            return Block("publish needs verified facts: call `verify` first")
        return None


def remember(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
    fact = Fact(str(arguments["topic"]), str(arguments["text"]))
    return ToolOutput(f"remembered {fact.topic}", StateCommand().update(Facts, fact))


def verify(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
    count = len(ctx.snapshot.get(Facts))
    return ToolOutput(f"{count} fact(s) verified", StateCommand().update(Verified, True))


def publish(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    return f"published {len(ctx.snapshot.get(Facts))} fact(s)"


def call(call_id: str, name: str, **arguments: Any) -> InferenceResponse:
    return InferenceResponse(tool_calls=(ToolCall(call_id, name, arguments),))


FIRST_RUN = [
    call("c1", "remember", topic="kernel", text="hooks return commands"),
    call("c2", "publish"),
    InferenceResponse(text="Noted one fact; publishing needs verification."),
]
SECOND_RUN = [
    call("c3", "remember", topic="merge", text="conflicts re-run on a fresh snapshot"),
    call("c4", "verify"),
    call("c5", "publish"),
    InferenceResponse(text="Two facts verified and published."),
]


def show_phase(run: Run, report: PhaseReport) -> None:
    assert report.phase is not None
    hooks = ", ".join(report.hooks_run) or "-"
    line = (
        f"  {report.phase.name:<20} hooks: {hooks:<9} commits: {report.commits}  "
        f"revision: {report.revision:>2}"
    )
    if report.phase is Phase.RUN_START:
        facts = [fact.topic for fact in run.snapshot.get(Facts)]
        line += f"   (demo.facts = {facts}, demo.steps = {run.snapshot.get(StepsThisRun)})"
    print(line)


def show_result(label: str, result: RunResult, seen: int) -> None:
    snapshot = result.snapshot
    print(f"{label}: {result.outcome} after {result.steps} step(s); messages of this run:")
    for message in result.messages[seen:]:
        content = message.content or "(asks for a tool call)"
        flag = " [tool error]" if message.is_error else ""
        print(f"    {message.role:>9}: {content}{flag}")
    facts = [fact.topic for fact in snapshot.get(Facts)]
    print(f"    thread key demo.facts = {facts}")
    print(f"    run key demo.steps    = {snapshot.get(StepsThisRun)}")
    print(f"    revision              = {snapshot.revision}\n")


async def conversation(store: SqliteThreadStore, script: list[InferenceResponse]) -> RunResult:
    agent = Agent(
        [Notebook()],
        ScriptedModel(script),
        {"remember": remember, "verify": verify, "publish": publish},
        thread_store=store,
        on_phase=show_phase,
    )
    return await agent.run(THREAD, ["Learn about statekernel and publish what you learn."])


async def main() -> None:
    DATA.mkdir(exist_ok=True)
    async with SqliteThreadStore(DATA / "threads.db") as store:
        await store.delete(THREAD)  # start the demo thread afresh on every `make demo`
        print(f"thread {THREAD!r} in {DATA / 'threads.db'}")
        print(
            "Each line is one phase: the hooks that ran, the commits they made, the revision\n"
            "after it. The revision also moves between phases: the Agent commits messages,\n"
            "tool-call states and tool commands through the same commit path.\n\nrun 1:"
        )
        first = await conversation(store, FIRST_RUN)
        show_result("run 1", first, 0)
        print("run 2 (a new Agent, reading the same SQLite file):")
        second = await conversation(store, SECOND_RUN)
        show_result("run 2", second, len(first.messages))
        print(
            "demo.facts (thread scope) carried over from run 1 into run 2; "
            "demo.steps (run scope) started again from 0."
        )


if __name__ == "__main__":
    asyncio.run(main())
