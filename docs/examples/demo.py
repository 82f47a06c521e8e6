"""The statekernel demo (`make demo`): a scripted two-run conversation on one thread.

Everything is stored in SQLite under ./.statekernel/ (the embedded default a user sees):
thread state in threads.db, shared team state in profiles.db. For each phase it prints the
plugins whose hooks ran, the commits and the revision; between the runs it shows thread keys
surviving while a run key starts again from its default. Every built-in plugin takes part:
run lifecycle, context injection, the review-before-publish stage workflow, team context.

Run: .venv/bin/python docs/examples/demo.py
"""

from __future__ import annotations

import asyncio
import enum
from pathlib import Path
from typing import Any

import msgspec

from kernel import (
    Agent,
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
from plugins import (
    ContextInjection,
    ContextMessage,
    RunLifecycle,
    StageKey,
    StageWorkflow,
    StepCount,
    Team,
    TeamContext,
    add_context,
)
from stores import SqliteProfileStore, SqliteThreadStore

DATA = Path(".statekernel")
THREAD = "demo-thread"
HELPER_THREAD = "demo-helper"


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


class Doc(enum.Enum):
    DRAFT = "draft"
    REVIEWED = "reviewed"
    PUBLISHED = "published"


class DocStage(StageKey[Doc]):
    """Thread key: where the note stands. Only Draft → Reviewed → Published is legal."""

    key = "demo.doc_stage"
    transitions = {Doc.DRAFT: {Doc.REVIEWED}, Doc.REVIEWED: {Doc.PUBLISHED}}


WORKFLOW = StageWorkflow(DocStage, advances={"review": Doc.REVIEWED, "publish": Doc.PUBLISHED})


class Notebook(Plugin):
    """The demo's own plugin: a fact store, and a style guide injected as context."""

    id = "notebook"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Facts)
        r.register_phase_hook(Phase.RUN_START, self.style_guide)

    def style_guide(self, ctx: PhaseContext) -> StateCommand:
        guide = ContextMessage(key="style", content="Style: short, plain sentences.")
        return add_context(guide)


def remember(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
    fact = Fact(str(arguments["topic"]), str(arguments["text"]))
    return ToolOutput(f"remembered {fact.topic}", StateCommand().update(Facts, fact))


def review(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    return f"reviewed {len(ctx.snapshot.get(Facts))} fact(s)"


def publish(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    return f"published {len(ctx.snapshot.get(Facts))} fact(s)"


def call(call_id: str, name: str, **arguments: Any) -> InferenceResponse:
    return InferenceResponse(tool_calls=(ToolCall(call_id, name, arguments),))


FIRST_RUN = [
    call("c1", "remember", topic="kernel", text="hooks return commands"),
    call("c2", "publish"),
    InferenceResponse(text="Noted one fact; publishing has to wait for a review."),
]
SECOND_RUN = [
    call("c3", "remember", topic="merge", text="conflicts re-run on a fresh snapshot"),
    call("c4", "review"),
    call("c5", "publish"),
    InferenceResponse(text="Two facts reviewed and published."),
]
HELPER_RUN = [
    call("h1", "add_team_goal", goal="Collect reader questions"),
    InferenceResponse(text="Added a goal for the team."),
]


def show_phase(run: Run, report: PhaseReport) -> None:
    assert report.phase is not None
    plugins = ", ".join(dict.fromkeys(report.hooks_run)) or "-"
    line = (
        f"  {report.phase.name:<20} commits: {report.commits}  revision: {report.revision:>3}"
        f"  hooks of: {plugins}"
    )
    if report.phase is Phase.RUN_START:
        snapshot = run.snapshot
        facts = [fact.topic for fact in snapshot.get(Facts)]
        line += (
            f"\n{'':24}at run start: demo.facts = {facts}, "
            f"demo.doc_stage = {snapshot.get(DocStage).name}, "
            f"run_lifecycle.steps = {snapshot.get(StepCount)}"
        )
    print(line)


def show_result(label: str, result: RunResult, seen: int) -> None:
    snapshot = result.snapshot
    print(f"{label}: {result.outcome} after {result.steps} step(s); messages of this run:")
    for message in result.messages[seen:]:
        content = message.content or "(asks for a tool call)"
        flag = " [tool error]" if message.is_error else ""
        print(f"    {message.role:>9}: {content}{flag}")
    facts = [fact.topic for fact in snapshot.get(Facts)]
    print(f"    thread key demo.facts      = {facts}")
    print(f"    thread key demo.doc_stage  = {snapshot.get(DocStage).name}")
    print(f"    run key run_lifecycle.steps = {snapshot.get(StepCount)}")
    print(f"    revision                   = {snapshot.revision}\n")


def show_first_request(model: ScriptedModel) -> None:
    print("  what the model saw at its first inference (context placed in bands):")
    for message in model.requests[0].messages:
        content = message.content.replace("\n", "\n" + " " * 15)
        print(f"    {message.role:>9}: {content}")


async def writer_run(
    threads: SqliteThreadStore, profiles: SqliteProfileStore, script: list[InferenceResponse]
) -> tuple[RunResult, ScriptedModel]:
    model = ScriptedModel(script)
    team = Team(goals=["Publish a note about statekernel"])
    agent = Agent(
        [RunLifecycle(), ContextInjection(), WORKFLOW, team, Notebook()],
        model,
        WORKFLOW.tools({"remember": remember, "review": review, "publish": publish}),
        thread_store=threads,
        profile_store=profiles,
        on_phase=show_phase,
    )
    result = await agent.run(THREAD, ["Learn about statekernel and publish a short note."])
    return result, model


async def helper_run(threads: SqliteThreadStore, profiles: SqliteProfileStore) -> ScriptedModel:
    model = ScriptedModel(HELPER_RUN)
    team = Team()
    agent = Agent(
        [ContextInjection(), team],
        model,
        team.tools(),
        thread_store=threads,
        profile_store=profiles,
    )
    await agent.run(HELPER_THREAD, ["Help the writer."], parent_thread_id=THREAD)
    return model


async def main() -> None:
    DATA.mkdir(exist_ok=True)
    async with (
        SqliteThreadStore(DATA / "threads.db") as threads,
        SqliteProfileStore(DATA / "profiles.db") as profiles,
    ):
        for thread in (THREAD, HELPER_THREAD):  # start the demo afresh on every `make demo`
            await threads.delete(thread)
        await profiles.clear(TeamContext.key)

        print(f"thread {THREAD!r}, stored in {DATA}/")
        print(
            "Each line is one phase: the commits made, the revision after it, and the plugins\n"
            "whose hooks ran. The revision also moves between phases: the Agent commits\n"
            "messages, tool-call states and tool commands through the same commit path.\n"
        )
        print("run 1:")
        first, model = await writer_run(threads, profiles, FIRST_RUN)
        show_first_request(model)
        show_result("run 1", first, 0)

        print("run 2 (a new Agent, reading the same SQLite files):")
        second, _ = await writer_run(threads, profiles, SECOND_RUN)
        show_result("run 2", second, len(first.messages))
        print(
            "demo.facts and demo.doc_stage (thread scope) carried over from run 1 into run 2;\n"
            "run_lifecycle.steps (run scope) started again from 0.\n"
        )

        print(f"a helper agent on thread {HELPER_THREAD!r}, child of {THREAD!r}:")
        helper_model = await helper_run(threads, profiles)
        team_message = next(
            m for m in helper_model.requests[-1].messages if m.content.startswith("Team")
        )
        print("  the shared team context it saw at its last inference:")
        for line in team_message.content.splitlines():
            print(f"    {line}")


if __name__ == "__main__":
    asyncio.run(main())
