"""Tools a real model can call: schemas from type hints and docstrings, arguments checked
before the tool runs, the specs offered in each request, the agent's system prompt, and
the loop actions that change one step's request."""

from __future__ import annotations

import logging
from typing import Any, Literal

import pydantic
import pytest

from statekernel import (
    Agent,
    ExcludeTool,
    IncludeOnlyTools,
    InferenceRequest,
    InferenceResponse,
    InvalidDeclaration,
    InvalidToolArguments,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScriptedModel,
    SetInferenceOverride,
    StateCommand,
    StateError,
    ToolCall,
    ToolSpec,
    tool,
)


class Address(pydantic.BaseModel):
    city: str
    zip: str | None = None


@tool
def send_letter(to: list[str], address: Address, urgent: bool = False) -> str:
    """Send a letter to everyone in `to`.

    Posted the same day.

    Args:
        to: The recipients' names.
        address: Where it goes,
            street not needed.
        urgent: Send it first class.

    Returns:
        A tracking note.
    """
    return f"sent to {', '.join(to)} in {address.city}{' (urgent)' if urgent else ''}"


@tool(name="look_up", idempotent=True)
async def lookup(topic: Literal["weather", "news"], ctx: PhaseContext) -> str:
    """Look something up."""
    return f"{topic} for {ctx.run.thread_id}"


def test_a_decorated_tool_has_a_json_schema_from_its_signature_and_docstring() -> None:
    spec = send_letter.spec
    assert isinstance(spec, ToolSpec) and spec.name == "send_letter" == send_letter.name
    assert spec.description == "Send a letter to everyone in `to`."
    parameters = spec.parameters
    assert parameters["type"] == "object" and parameters["required"] == ["to", "address"]
    properties = parameters["properties"]
    assert properties["to"]["type"] == "array" and properties["to"]["items"] == {"type": "string"}
    assert properties["to"]["description"] == "The recipients' names."
    assert properties["address"]["description"] == "Where it goes, street not needed."
    assert properties["urgent"]["default"] is False
    assert "Address" in parameters["$defs"]  # a pydantic model argument, by reference
    assert send_letter.__name__ == "send_letter" and send_letter.__doc__ is not None
    # The context parameter is not an argument; the name and idempotence are as declared.
    assert lookup.spec.name == "look_up" and lookup.idempotent is True
    assert lookup.spec.parameters["properties"] == {
        "topic": {"enum": ["weather", "news"], "title": "Topic", "type": "string"}
    }
    assert send_letter.idempotent is False


def test_a_tool_whose_signature_no_schema_can_say_is_refused_when_declared() -> None:
    with pytest.raises(InvalidDeclaration, match=r"tool 'spread'.*\*args"):

        @tool
        def spread(*items: str) -> None: ...

    with pytest.raises(InvalidDeclaration, match=r"tool 'only'.*positional-only"):

        @tool
        def only(a: int, /) -> None: ...


async def test_arguments_are_validated_before_the_tool_runs_and_the_model_is_told_which(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[Any] = []

    @tool
    def book(nights: int, guest: str) -> str:
        """Book a room."""
        ran.append((nights, guest))
        return "booked"

    model = ScriptedModel(
        [
            InferenceResponse("", (ToolCall("c1", "book", {"nights": "many", "extra": 1}),)),
            InferenceResponse("", (ToolCall("c2", "book", {"nights": "2", "guest": "ada"}),)),
            InferenceResponse("done"),
        ]
    )
    with caplog.at_level(logging.INFO, logger="statekernel"):
        result = await Agent([], model, [book]).run("t", ["book"])
    assert result.outcome == "success"
    assert ran == [(2, "ada")]  # the bad call never ran; "2" was validated into 2
    first = next(m for m in result.messages if m.tool_call_id == "c1")
    assert first.is_error and first.content.startswith("invalid arguments for tool 'book'")
    for named in ("'nights'", "'guest'", "'extra'"):
        assert named in first.content
    failure = result.tool_results[0]
    assert isinstance(failure.exception, InvalidToolArguments)
    assert failure.exception.tool == "book"
    assert {where for where, _ in failure.exception.problems} == {"nights", "guest", "extra"}
    # The model's mistake is logged without a traceback, at INFO.
    (logged,) = [r for r in caplog.records if "invalid arguments" in r.getMessage()]
    assert logged.levelno == logging.INFO and logged.exc_info is None


async def test_the_request_carries_specs_and_the_system_prompt_comes_first() -> None:
    def plain(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        """Do the plain thing.

        More words."""
        return "plain"

    model = ScriptedModel(
        [InferenceResponse("", (ToolCall("l", "look_up", {"topic": "news"}),)), InferenceResponse()]
    )
    agent = Agent([], model, {"plain": plain, "look_up": lookup}, system_prompt="Be brief.")
    result = await agent.run("t", ["hi"])
    first, second = model.requests
    assert first.tools == (ToolSpec("plain", "Do the plain thing."), lookup.spec)
    assert first.tool_names == ("plain", "look_up")
    shown = [(m.role, m.content) for m in first.messages]
    assert shown == [("system", "Be brief."), ("user", "hi")]
    assert second.messages[0].content == "Be brief."
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    assert result.messages[2].content == "news for t"  # the context parameter got the context


def test_tools_given_as_a_list_must_know_their_names() -> None:
    with pytest.raises(TypeError, match="@statekernel.tool"):
        Agent([], ScriptedModel(), [lambda a, c: None])
    with pytest.raises(ValueError, match="two tools are named 'send_letter'"):
        Agent([], ScriptedModel(), [send_letter, send_letter])
    with pytest.raises(TypeError, match="system_prompt must be a string"):
        Agent([], ScriptedModel(), system_prompt=["no"])  # type: ignore[arg-type]


class Steering(Plugin):
    """Schedules loop actions from the phases a user would."""

    id = "steering"

    def __init__(self, **by_phase: Any) -> None:
        self.by_phase = by_phase

    def register(self, r: PluginRegistrar) -> None:
        for phase_name, make in self.by_phase.items():
            r.register_phase_hook(Phase[phase_name], make)


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
    agent = Agent([Steering(STEP_START=no_publishing_on_the_first_step)], model, [publish, review])
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
    agent = Agent([Steering(STEP_START=steer, BEFORE_INFERENCE=narrow)], model, tools)
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
