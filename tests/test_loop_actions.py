"""Loop actions (ExcludeTool, IncludeOnlyTools, SetInferenceOverride) change one request."""

from __future__ import annotations

import pytest
from samples import Hooks

from statekernel import (
    Agent,
    ExcludeTool,
    IncludeOnlyTools,
    InferenceRequest,
    InferenceResponse,
    PhaseContext,
    ScriptedModel,
    SetInferenceOverride,
    StateCommand,
    StateError,
    ToolCall,
    tool,
)


async def test_exclude_tool_removes_the_tool_from_that_steps_request_only() -> None:
    @tool
    def publish() -> str:
        """Publish."""
        return "published"

    @tool
    def review() -> str:
        """Review."""
        return "reviewed"

    def no_publishing_on_the_first_step(ctx: PhaseContext) -> StateCommand | None:
        if any(m.role == "tool" for m in ctx.messages):
            return None
        return StateCommand().schedule(ExcludeTool, "publish")

    model = ScriptedModel(
        [
            InferenceResponse("", (ToolCall("p1", "publish", {}),)),  # not offered: refused
            InferenceResponse("", (ToolCall("p2", "publish", {}),)),
            InferenceResponse("done"),
        ]
    )
    agent = Agent(
        [Hooks("steering", STEP_START=no_publishing_on_the_first_step)], model, [publish, review]
    )
    result = await agent.run("t", ["go"])
    assert [r.tool_names for r in model.requests] == [
        ("review",),
        ("publish", "review"),
        ("publish", "review"),
    ]
    refused, published = (m for m in result.messages if m.role == "tool")
    assert refused.is_error and "not offered in this step" in refused.content
    assert published.content == "published"


async def test_include_only_and_inference_overrides_merge_and_last_one_step() -> None:
    def steer(ctx: PhaseContext) -> StateCommand | None:
        if ctx.messages[-1].role != "user":
            return None
        return (
            StateCommand()
            .schedule(IncludeOnlyTools, ("a", "b"))
            .schedule(SetInferenceOverride, {"temperature": 0.0, "top_p": 0.5})
        )

    def narrow(ctx: PhaseContext) -> StateCommand | None:
        if ctx.messages[-1].role != "user":
            return None
        return (
            StateCommand()
            .schedule(IncludeOnlyTools, ("b", "c"))
            .schedule(SetInferenceOverride, {"top_p": 0.9})
        )

    tools = {name: (lambda a, c, name=name: name) for name in ("a", "b", "c")}
    model = ScriptedModel([InferenceResponse("", (ToolCall("x", "b", {}),)), InferenceResponse()])
    agent = Agent([Hooks("steering", STEP_START=steer, BEFORE_INFERENCE=narrow)], model, tools)
    result = await agent.run("t", ["go"])
    assert result.outcome == "success"
    first, second = model.requests
    assert first.tool_names == ("b",)  # only what both allowed
    assert dict(first.params) == {"temperature": 0.0, "top_p": 0.9}  # field by field, last wins
    assert second.tool_names == ("a", "b", "c") and dict(second.params) == {}
    with pytest.raises(TypeError):
        first.params["temperature"] = 1.0  # type: ignore[index]


async def test_a_loop_action_with_a_wrong_payload_is_refused_where_it_is_scheduled() -> None:
    with pytest.raises(StateError, match="IncludeOnlyTools|include_only_tools"):
        StateCommand().schedule(IncludeOnlyTools, "not-a-tuple")  # type: ignore[arg-type]


def test_an_inference_request_freezes_its_params() -> None:
    request = InferenceRequest((), params={"stop": ["\n"]})
    with pytest.raises(TypeError, match="frozen"):
        request.params["stop"].append("x")
