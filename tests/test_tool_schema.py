"""Tools a model can call: schemas from signatures and docstrings, checked arguments, specs."""

from __future__ import annotations

import functools
import logging
from typing import Annotated, Any, Literal

import pydantic
import pytest

from statekernel import (
    Agent,
    InferenceResponse,
    InvalidDeclaration,
    InvalidToolArguments,
    PhaseContext,
    ScriptedModel,
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


def test_tools_given_as_a_list_must_know_their_names() -> None:
    with pytest.raises(TypeError, match="@statekernel.tool"):
        Agent([], ScriptedModel(), [lambda a, c: None])
    with pytest.raises(ValueError, match="two tools are named 'send_letter'"):
        Agent([], ScriptedModel(), [send_letter, send_letter])
    with pytest.raises(TypeError, match="system_prompt must be a string"):
        Agent([], ScriptedModel(), system_prompt=["no"])  # type: ignore[arg-type]


def test_tool_methods_partials_and_any_parameter_name_work() -> None:
    class Shop:
        def __init__(self) -> None:
            self.sold: list[int] = []

        @tool
        def sell(self, n: int) -> str:
            """Sell n items."""
            self.sold.append(n)
            return f"sold {n}"

    shop = Shop()
    assert shop.sell.spec.parameters["required"] == ["n"]  # no `self` for the model
    assert shop.sell({"n": "3"}, None) == "sold 3" and shop.sold == [3]

    def search(index: str, query: str) -> str:
        """Search an index."""
        return f"{index}:{query}"

    partial = tool(name="search_docs")(functools.partial(search, "docs"))
    assert partial.spec.description == "Search an index."
    assert partial({"query": "x"}, None) == "docs:x"

    @tool
    def optional_context(x: int, ctx: PhaseContext | None = None) -> int:
        """Optional context."""
        return x

    assert list(optional_context.spec.parameters["properties"]) == ["x"]

    namespace: dict[str, Any] = {}
    exec(
        "def f(model_config: int, _private: int, schema: int) -> int:\n    '''F.'''\n"
        "    return model_config + _private + schema\n",
        namespace,
    )
    odd = tool(namespace["f"])
    assert list(odd.spec.parameters["properties"]) == ["model_config", "_private", "schema"]
    assert odd({"model_config": 1, "_private": 2, "schema": 3}, None) == 6


def test_only_methods_bind_to_their_instance() -> None:
    @tool
    def lookup(q: str) -> str:
        """Look up."""
        return f"found {q}"

    class Box:
        find = lookup  # a tool kept as a class attribute: not a method

        @tool
        @staticmethod
        def add(a: int, b: int) -> int:
            """Add."""
            return a + b

    assert Box().find({"q": "x"}, None) == "found x"
    assert Box().add({"a": 1, "b": 2}, None) == 3
    renamed = tool(name="search")(lookup)
    assert (renamed.name, renamed.spec.name) == ("search", "search")


def test_a_docstring_without_a_blank_line_before_args_describes_only_the_tool() -> None:
    @tool
    def add(x: int, y: int) -> int:
        """Add numbers.
        Args:
            x: first
            y: second
        """
        return x + y

    assert add.spec.description == "Add numbers."
    assert add.spec.parameters["properties"]["y"]["description"] == "second"


def test_a_description_in_annotated_stands() -> None:
    @tool
    def count(n: Annotated[int, pydantic.Field(description="how many")]) -> int:
        """Count."""
        return n

    assert count.spec.parameters["properties"]["n"]["description"] == "how many"


# -- arguments and requests ----------------------------------------------------------------


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
