"""A team of agents (`make demo` runs it after the single-agent demo): a planner spawns a
researcher and a writer; they share goals through team context and talk through the mailbox;
the writer's `publish` is gated on a review stage.

The models are scripted (no network): each role's model is a small function of what the
agent has seen, so the story runs the same every time. Everything is stored on the embedded
default, one SQLite file: ./.statekernel/team/statekernel.db (the roster, the mailbox and
team context as profile entries; each agent's thread). `statekernel inspect` shows it all.

Run: .venv/bin/python docs/examples/team.py
"""

from __future__ import annotations

import asyncio
import enum
import itertools
from pathlib import Path
from typing import Any

from statekernel import (
    AgentTeam,
    InferenceRequest,
    InferenceResponse,
    Message,
    Role,
    StateScope,
    ToolCall,
)
from statekernel.plugins import ContextInjection, StageKey, StageWorkflow, Team, TeamContext
from statekernel.stores import embedded

DATA = Path(".statekernel") / "team"  # the team's embedded store: DATA/statekernel.db
CALL_IDS = itertools.count(1)
WRITER_READ: set[str] = set()  # every message the writer's model was shown


class Doc(enum.Enum):
    DRAFT = "draft"
    REVIEWED = "reviewed"
    PUBLISHED = "published"


class DocStage(StageKey[Doc]):
    """The writer's note: Draft -> Reviewed -> Published, nothing else."""

    key = "team_demo.doc_stage"
    transitions = {Doc.DRAFT: {Doc.REVIEWED}, Doc.REVIEWED: {Doc.PUBLISHED}}


WORKFLOW = StageWorkflow(DocStage, advances={"review": Doc.REVIEWED, "publish": Doc.PUBLISHED})


def review(arguments: dict[str, Any], ctx: Any) -> str:
    return "reviewed the draft"


def publish(arguments: dict[str, Any], ctx: Any) -> str:
    return "published the note"


def call(name: str, **arguments: Any) -> InferenceResponse:
    call_id = f"call-{next(CALL_IDS)}"
    return InferenceResponse(tool_calls=(ToolCall(call_id, name, arguments),))


def script(*steps: InferenceResponse) -> Any:
    """A model that plays `steps` in order, one per request of the current task, starting
    over at each new message from outside (a task or a mail)."""

    async def model(request: InferenceRequest) -> InferenceResponse:
        done = 0
        for message in reversed(request.messages):
            if message.role == "user":
                break
            done += message.role == "assistant"
        return steps[min(done, len(steps) - 1)]

    return model


def heard_from_researcher(messages: tuple[Message, ...]) -> bool:
    return any((AgentTeam.sender_of(m) or "").startswith("researcher") for m in messages)


async def writer(request: InferenceRequest) -> InferenceResponse:
    """Waits for the researcher's facts, then tries to publish before reviewing (and is
    blocked by the stage workflow), reviews, and publishes."""
    WRITER_READ.update(m.content for m in request.messages)
    if not heard_from_researcher(request.messages):
        return InferenceResponse("Waiting for the researcher's facts.")
    steps = [call("publish"), call("review"), call("publish"), InferenceResponse("Published.")]
    return await script(*steps)(request)


ROLES = {
    "planner": Role(
        model=script(
            call("add_team_goal", goal="Explain exactly-once delivery in one note"),
            call("spawn_agent", role="researcher", task="Find the key fact about delivery."),
            call("spawn_agent", role="writer", task="Write and publish the note."),
            InferenceResponse("The researcher and the writer are on it."),
        ),
        system_prompt="You plan and delegate.",
    ),
    "researcher": Role(
        model=script(
            call(
                "send_message",
                group="writer",
                content="Fact: a delivery and its cursor are one commit.",
            ),
            InferenceResponse("Sent my fact to the writer."),
        )
    ),
    "writer": Role(
        model=writer,
        plugins=[WORKFLOW],
        tools=WORKFLOW.tools({"review": review, "publish": publish}),
    ),
}


async def main() -> None:
    for path in DATA.glob("statekernel.db*"):  # start afresh on every `make demo`
        path.unlink()
    team_plugin = Team()
    async with (
        embedded(DATA) as stores,
        AgentTeam(
            ROLES,
            plugins=[team_plugin, ContextInjection()],
            tools=team_plugin.tools(),
            stores=stores,
            spawn_tool=["planner"],
            team_id="demo-team",
        ) as team,
    ):
        team.spawn("planner", "Get a note on exactly-once delivery published.")
        report = await team.run_until_idle()
        print(f"team {team.team_id}: idle after {report.rounds} rounds")
        for info in team.list_agents():
            done = report.agents[info.id]
            under = f" under {info.parent_id}" if info.parent_id else ""
            print(
                f"  {info.id:<20} {info.status:<5} runs {done.runs}, steps {done.steps}, "
                f"messages in {done.delivered}{under}"
            )
        shared = await team.agent("planner").kernel.profile.read(  # type: ignore[union-attr]
            TeamContext, StateScope.parent_thread(team.team_id)
        )
        print(f"team context goals: {list(shared.goals)}")
        shown = any(shared.goals[0] in text for text in WRITER_READ)
        print(f"the writer's model was shown the planner's goal: {shown}")
        writer_id = next(i for i in team.list_agents() if i.role == "writer")
        for result in report.agents[writer_id.id].results:
            for tool_result in result.tool_results:
                shown = tool_result.error or tool_result.result
                print(f"  writer {tool_result.call.name}: {tool_result.status.value}: {shown}")
        state = await team.agent("writer").kernel.get_state(writer_id.thread_id)
        for message in state.to_dict()["statekernel.messages"]:
            if AgentTeam.sender_of(message):
                print(f"  writer's mail: {message.content!r}")
        print(f"note stage: {state.get(DocStage).name}")


if __name__ == "__main__":
    asyncio.run(main())
