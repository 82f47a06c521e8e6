"""Stage workflow: "review before publish" enforced by the kernel, not by the prompt.

Run: .venv/bin/python docs/examples/stage_workflow.py

The scripted model tries to publish first, is blocked with a reason naming the missing step,
reviews, publishes, then tries to review again. Last, a stale transition submitted directly
is rejected at commit and the stage stays where it was.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Any

from statekernel import (
    Agent,
    CommitRejected,
    InferenceResponse,
    Kernel,
    PhaseContext,
    ScriptedModel,
    StateCommand,
    ToolCall,
)
from statekernel.plugins import StageKey, StageWorkflow, Transition


class Doc(enum.Enum):
    DRAFT = "draft"
    REVIEWED = "reviewed"
    PUBLISHED = "published"


class DocStage(StageKey[Doc]):
    key = "doc.stage"
    transitions = {Doc.DRAFT: {Doc.REVIEWED}, Doc.REVIEWED: {Doc.PUBLISHED}}


workflow = StageWorkflow(
    DocStage,
    advances={"review": Doc.REVIEWED, "publish": Doc.PUBLISHED},
    requires={"announce": Doc.PUBLISHED},
)


def review(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    return "reviewed: two typos fixed"


def publish(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    return "published at /posts/launch"


def announce(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    return "announced"


def call(name: str) -> InferenceResponse:
    return InferenceResponse(f"calling {name}", (ToolCall(f"call-{name}", name, {}),))


async def main() -> None:
    model = ScriptedModel(
        [call("announce"), call("publish"), call("review"), call("publish"), call("review")]
    )
    tools = workflow.tools({"review": review, "publish": publish, "announce": announce})
    agent = Agent([workflow], model, tools)
    result = await agent.run("doc-1", ["Publish the launch post."])

    for message in result.messages:
        if message.role == "assistant" and message.content.startswith("calling"):
            print(message.content)
        elif message.role == "tool":
            print(f"  {'BLOCKED' if message.is_error else 'ok'}: {message.content}")
    print(f"stage after the run: {result.snapshot.get(DocStage).name}")

    run = await Kernel([workflow]).start_run("doc-2")
    await run.submit(DocStage.advance(run.snapshot, Doc.REVIEWED))
    for stale in (Transition(Doc.REVIEWED, Doc.REVIEWED), Transition(Doc.DRAFT, Doc.PUBLISHED)):
        try:
            await run.submit(StateCommand().update(DocStage, stale))
        except CommitRejected as rejected:
            print(f"rejected: {rejected.cause}")
    print(f"stage of doc-2: {run.snapshot.get(DocStage).name}")
    assert result.snapshot.get(DocStage) is Doc.PUBLISHED
    assert run.snapshot.get(DocStage) is Doc.REVIEWED


if __name__ == "__main__":
    asyncio.run(main())
