"""`statekernel demo` (and `make demo`): a writer agent, two runs on one thread, a helper.

The story: a writer agent learns facts and wants to publish a note, but the stage workflow
makes "review before publish" a rule the runtime enforces, so its first attempt is blocked
with a reason the model can act on. A second run, by a new Agent reading the same SQLite
file, finds the facts and the note's stage carried over (thread keys) while its step
counter starts again (a run key). A helper agent on a child thread adds a goal to the team
context, a shared record the writer's thread reads too.

The model is a `ScriptedModel` (its answers are written below): the demo runs offline and
gives the same story every time. Every built-in plugin takes part: run lifecycle, context
injection, the stage workflow, team context. It lives among the plugins because it is
written as a user's program over them, against the public API only; it is given its
stores (a plugin never opens one), and the command line gives it the embedded default,
`statekernel.stores.embedded(folder)`: one SQLite file, <folder>/statekernel.db.

Run: statekernel demo [--dir DIR] [--trace]
(--trace adds one line per phase: its commits, the revision after it, the plugins that ran.)
"""

from __future__ import annotations

import enum
import shlex
from typing import Any

import msgspec

from statekernel import (
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
    StateScope,
    Stores,
    ToolCall,
    ToolOutput,
)

from ._context_injection import ContextInjection, ContextMessage, add_context
from ._run_lifecycle import RunLifecycle, StepCount
from ._stages import StageKey, StageWorkflow
from ._team import Team, TeamContext

THREAD = "demo-thread"
HELPER_THREAD = "demo-helper"
APP = "statekernel.plugins._demo:plugins"
"""The demo's plugins as a reading command's `--app` names them."""


class Fact(msgspec.Struct, frozen=True):
    topic: str
    text: str


class Facts(StateKey[tuple[Fact, ...], Fact]):
    """Thread key: what the agent learned; survives from run to run.

    COMMUTATIVE is a promise that the order of updates cannot change the result, so `apply`
    keeps the facts as a sorted set: any order of the same facts gives the same tuple
    (`statekernel.testing.assert_commutative` checks it).
    """

    key = "demo.facts"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: tuple[Fact, ...], update: Fact) -> tuple[Fact, ...]:
        return tuple(sorted({*value, update}, key=lambda fact: (fact.topic, fact.text)))


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
    """The --trace line of one phase."""
    assert report.phase is not None
    plugins = ", ".join(dict.fromkeys(report.hooks_run)) or "-"
    print(
        f"    [trace] {report.phase.name:<20} commits: {report.commits}  "
        f"revision: {report.revision:>3}  hooks of: {plugins}"
    )


def topics(snapshot: Any) -> list[str]:
    return [fact.topic for fact in snapshot.get(Facts)]


def show_conversation(result: RunResult, seen: int, script: list[InferenceResponse]) -> None:
    """The run's messages, with the tool calls the model asked for spelled out."""
    responses = iter(script)
    for message in result.messages[seen:]:
        if message.role == "assistant":
            response = next(responses)
            for tool_call in response.tool_calls:
                arguments = ", ".join(f"{k}={v!r}" for k, v in tool_call.arguments.items())
                print(f"  model    calls {tool_call.name}({arguments})")
            if message.content:
                print(f"  model    {message.content}")
        elif message.role == "tool":
            label = "BLOCKED" if message.is_error else "tool"
            print(f"  {label:<8} {message.content}")
        else:
            print(f"  {message.role:<8} {message.content}")
    snapshot = result.snapshot
    print(
        f"  => {result.outcome} after {result.steps} steps; facts {topics(snapshot)}, "
        f"note stage {snapshot.get(DocStage).name}\n"
    )


def show_context(request: Any) -> None:
    print("  before the user's message, the model was given (context injection, team context):")
    for message in request.messages:
        if message.role == "system":
            text = message.content.replace("\n", "\n" + " " * 14)
            print(f"    system: {text}")


def writer_plugins(team: Team) -> list[Plugin]:
    """The writer's plugins, with its team context."""
    return [RunLifecycle(), ContextInjection(), WORKFLOW, team, Notebook()]


def plugins() -> list[Plugin]:
    """Every key the demo stores is declared by one of these (the helper's plugins are
    among the writer's): `statekernel show DB --app statekernel.plugins._demo:plugins`
    reads the demo's threads typed."""
    return writer_plugins(Team())


async def writer_run(
    stores: Stores, script: list[InferenceResponse], trace: bool
) -> tuple[RunResult, ScriptedModel, Any]:
    """One run of the writer; returns its result, its model and the state at RUN_START."""
    model = ScriptedModel(script)
    team = Team(goals=["Publish a note about statekernel"])
    at_start: list[Any] = []

    def listen(run: Run, report: PhaseReport) -> None:
        if report.phase is Phase.RUN_START:
            at_start.append(run.snapshot)
        if trace:
            show_phase(run, report)

    agent = Agent(
        writer_plugins(team),
        model,
        WORKFLOW.tools({"remember": remember, "review": review, "publish": publish}),
        stores=stores,
        on_phase=listen,
    )
    result = await agent.run(THREAD, ["Learn about statekernel and publish a short note."])
    return result, model, at_start[0]


async def helper_run(stores: Stores) -> ScriptedModel:
    model = ScriptedModel(HELPER_RUN)
    team = Team()
    agent = Agent(
        [ContextInjection(), team],
        model,
        team.tools(),
        stores=stores,
    )
    await agent.run(HELPER_THREAD, ["Help the writer."], parent_thread_id=THREAD)
    return model


async def demo(stores: Stores, *, trace: bool = False) -> None:
    """Tell the story on `stores` (the command line gives it the embedded default in a
    folder); only the demo's own threads and team context start afresh."""
    path = getattr(stores.thread_store, "path", None)
    where = path or "the stores given"
    for thread in (THREAD, HELPER_THREAD):  # start the demo afresh on every `make demo`
        await stores.thread_store.delete(thread)
    # Only the demo's own entries go: the folder may be an application's embedded store.
    await stores.profile_store.delete(TeamContext.key, StateScope.parent_thread(THREAD))
    print(
        "A writer agent learns facts and publishes a note; the stage workflow requires a\n"
        "review before publishing. The model is scripted: the demo runs offline.\n"
        f"Stored in {where}, the embedded SQLite default.\n"
    )

    print(f"Run 1 on thread {THREAD!r}")
    first, model, _ = await writer_run(stores, FIRST_RUN, trace)
    show_context(model.requests[0])
    show_conversation(first, 0, FIRST_RUN)

    print("Run 2: a new Agent on the same SQLite file")
    second, _, start = await writer_run(stores, SECOND_RUN, trace)
    print(
        f"  carried over from run 1 (thread keys): facts {topics(start)}, note stage "
        f"{start.get(DocStage).name}\n"
        f"  started again (run key): step counter {start.get(StepCount)} "
        f"(run 1 ended at {first.snapshot.get(StepCount)})"
    )
    show_conversation(second, len(first.messages), SECOND_RUN)

    print(f"A helper agent on thread {HELPER_THREAD!r}, a child of {THREAD!r}")
    helper_model = await helper_run(stores)
    for response in HELPER_RUN:
        for tool_call in response.tool_calls:
            print(f"  model    calls {tool_call.name}(goal={tool_call.arguments['goal']!r})")
    team_message = next(
        m for m in helper_model.requests[-1].messages if m.content.startswith("Team")
    )
    print("  the team context is one shared record; the helper now sees:")
    for line in team_message.content.splitlines():
        print(f"    {line}")
    print("\nLook inside what it stored (--app gives the demo's plugins, which type every key):")
    app = f"--app {APP}"
    db = shlex.quote(str(path)) if path is not None else "DB"
    for command in (
        f"statekernel threads {db}",
        f"statekernel history {db} --thread {THREAD} --key demo.facts {app}",
        f"statekernel show {db} --thread {THREAD} --at 13 {app}",
        f"statekernel verify {db} --thread {THREAD} {app}",
    ):
        print(f"  {command}")
