"""Context injection: keyed, banded, throttled context messages, step by step.

Run: .venv/bin/python docs/examples/context_injection.py

A "guide" plugin schedules context messages; the model (scripted, offline) calls a no-op
tool for four steps, then a tool that dismisses the project's messages by key prefix, then
answers. A welcome note is emitted once; a notice at step 2 is recorded in the thread's
history too (visibility "transcript"), so the user sees it. Every request the model received
is printed with each context message labelled by its key.
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
    ToolOutput,
)
from statekernel.plugins import (
    ContextInjection,
    ContextMessage,
    ContextStep,
    add_context,
    remove_context_prefix,
)


class Guide(Plugin):
    """Adds the context a coding agent should see, before every inference."""

    id = "guide"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_phase_hook(Phase.BEFORE_INFERENCE, self.guide)

    def guide(self, ctx: PhaseContext) -> StateCommand:
        step = ctx.snapshot.get(ContextStep)
        command = StateCommand()
        if step == 1:
            command.extend(
                add_context(ContextMessage(key="persona", content="You are a careful engineer."))
            )
            command.extend(
                add_context(
                    ContextMessage(
                        key="project.repo",
                        content="Repo: statekernel, Python 3.11.",
                        band="session",
                    )
                )
            )
            command.extend(
                add_context(
                    ContextMessage(
                        key="welcome",
                        content="Welcome back; last session ended green.",
                        band="conversation",
                        emit_once=True,  # in the first request only
                    )
                )
            )
            command.extend(
                add_context(
                    ContextMessage(
                        key="format",
                        content="Answer in one paragraph.",
                        band="suffix_system",
                    )
                )
            )
        if step == 2:
            command.extend(
                add_context(
                    ContextMessage(
                        key="notice",
                        content="CI started a run on this branch.",
                        band="conversation",
                        role="user",
                        visibility="transcript",  # the user sees it in the history too
                    )
                )
            )
        # Asked for at every step; the cooldown lets it through every third step only, and
        # the expiry takes it out of the request again after one step.
        reminder = ContextMessage(
            key="tests",
            content=f"Reminder (step {step}): run the tests.",
            band="conversation",
            cooldown_steps=3,
            expires_after_steps=1,
        )
        return command.extend(add_context(reminder))


def noop(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    return "ok"


def dismiss(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
    return ToolOutput("dismissed", remove_context_prefix(arguments["prefix"]))


def call(name: str, **arguments: Any) -> InferenceResponse:
    return InferenceResponse(f"calling {name}", (ToolCall(f"call-{name}", name, arguments),))


async def main() -> None:
    model = ScriptedModel(
        [
            *(call("noop") for _ in range(4)),
            call("dismiss", prefix="project."),
            InferenceResponse("Done."),
        ]
    )
    agent = Agent([ContextInjection(), Guide()], model, {"noop": noop, "dismiss": dismiss})
    result = await agent.run("thread-1", ["Fix the failing test."])

    for number, request in enumerate(model.requests, start=1):
        print(f"request of step {number}:")
        history = 0
        for message in request.messages:
            key = (message.id or "").removeprefix("context:")
            if key == message.id:  # not a context message: part of the thread's history
                history += 1
                continue
            if history:
                print(f"    ... the thread's history: {history} message(s) ...")
                history = 0
            print(f"    {key:<12} {message.content}")
    recorded = [m.content for m in result.messages if m.content.startswith("CI ")]
    print(f"thread history: {len(result.messages)} messages; context recorded in it: {recorded}")
    assert [m.content for m in model.requests[0].messages][:2] == [
        "You are a careful engineer.",
        "Repo: statekernel, Python 3.11.",
    ]
    assert sum("Reminder" in m.content for r in model.requests for m in r.messages) == 2
    assert sum("Welcome" in m.content for r in model.requests for m in r.messages) == 1
    assert recorded == ["CI started a run on this branch."]  # once, where the model read it


if __name__ == "__main__":
    asyncio.run(main())
