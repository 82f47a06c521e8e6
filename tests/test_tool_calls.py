"""Tool calls as a production agent relies on them: kept, fixed once made, copied as data.

The assistant message keeps the calls it made, no hook can change what a gate approved, what
the tool receives or what the model is shown, and a tool's exception reaches the model as
`Type: message`."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from samples import Hook, Hooks, Keys

from statekernel import (
    Agent,
    Decision,
    HookFailed,
    InferenceRequest,
    InferenceResponse,
    Kernel,
    KeyScope,
    Message,
    Phase,
    PhaseContext,
    ScriptedModel,
    SetResult,
    StateCommand,
    StateError,
    StateKey,
    Suspend,
    ToolArgumentsTooDeep,
    ToolCall,
    ToolCallStatus,
    ToolOutput,
    ToolResult,
    ToolResultTooDeep,
    ToolSpec,
    ValueTooDeep,
    as_message,
    enc_hook,
)
from statekernel.stores import SqliteThreadStore


def send(*recipients: str) -> InferenceResponse:
    arguments = {"to": list(recipients), "meta": {"tags": ["x"]}}
    return InferenceResponse("sending", (ToolCall("c1", "send", arguments),))


async def test_the_assistant_message_keeps_its_tool_calls_and_they_survive_a_store(
    tmp_path: Path,
) -> None:
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        model = ScriptedModel([send("alice"), InferenceResponse("sent")])
        agent = Agent([], model, {"send": lambda a, c: "ok"}, thread_store=store)
        await agent.run("t", ["mail alice"])
        # A new agent over the same file: the history comes back from the store.
        again = Agent([], ScriptedModel([InferenceResponse("fine")]), thread_store=store)
        result = await again.run("t", ["thanks"])
    roles = [(m.role, m.tool_call_id, [c.id for c in m.tool_calls]) for m in result.messages]
    assert roles == [
        ("user", None, []),
        ("assistant", None, ["c1"]),  # the call is on the message that made it...
        ("tool", "c1", []),  # ...and its result follows it
        ("assistant", None, []),
        ("user", None, []),
        ("assistant", None, []),
    ]
    (call,) = result.messages[1].tool_calls
    assert call.arguments == {"to": ["alice"], "meta": {"tags": ["x"]}}
    with pytest.raises(TypeError, match="frozen"):
        call.arguments["to"].append("mallory")  # still frozen after decoding


async def test_a_hook_cannot_change_the_arguments_a_gate_approved() -> None:
    received: list[Any] = []
    attempts: list[str] = []

    def meddle(ctx: PhaseContext) -> None:
        assert ctx.tool_call is not None
        for attempt in (
            lambda: ctx.tool_call.arguments["to"].append("mallory"),  # type: ignore[union-attr]
            lambda: ctx.tool_call.arguments["meta"].update(tags=[]),  # type: ignore[union-attr]
            lambda: ctx.tool_call.arguments.__setitem__("to", ["mallory"]),  # type: ignore[union-attr]
        ):
            try:
                attempt()
            except TypeError as error:
                attempts.append(str(error))

    def tool(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        received.append(copy.deepcopy(arguments))
        arguments["to"].append("changed by the tool")  # the tool's copy is its own
        return "sent"

    agent = Agent(
        [Hook("hook", Phase.BEFORE_TOOL_EXECUTE, meddle)],
        ScriptedModel([send("alice"), InferenceResponse("done")]),
        {"send": tool},
    )
    result = await agent.run("t", ["go"])
    assert result.outcome == "success"
    assert received == [{"to": ["alice"], "meta": {"tags": ["x"]}}]
    assert len(attempts) == 3 and all("frozen" in a and "command" in a for a in attempts)
    assert result.tool_results[0].call.arguments == {"to": ["alice"], "meta": {"tags": ["x"]}}


async def test_a_hook_cannot_change_the_result_the_model_is_shown() -> None:
    class Report:
        def __init__(self) -> None:
            self.status = "fine"

        def __repr__(self) -> str:
            return f"Report({self.status})"

    def rewrite(ctx: PhaseContext) -> None:
        assert ctx.tool_result is not None
        result = ctx.tool_result.result
        if isinstance(result, dict):
            with pytest.raises(TypeError, match="frozen"):
                result["items"].append("forged")
        else:
            result.status = "forged"  # an object of the tool's own: harmless for the model

    model = ScriptedModel(
        [
            InferenceResponse("", (ToolCall("a", "listing", {}), ToolCall("b", "report", {}))),
            InferenceResponse("done"),
        ]
    )
    agent = Agent(
        [Hook("hook", Phase.AFTER_TOOL_EXECUTE, rewrite)],
        model,
        {"listing": lambda a, c: {"items": ["real"]}, "report": lambda a, c: Report()},
    )
    result = await agent.run("t", ["go"])
    assert result.outcome == "success"
    shown = [m.content for m in model.requests[1].messages if m.role == "tool"]
    assert shown == ['{"items":["real"]}', "Report(fine)"]


async def test_a_gate_that_changes_the_call_fails_its_run_with_one_clear_sentence() -> None:
    def tamper(ctx: PhaseContext) -> None:
        assert ctx.tool_call is not None
        ctx.tool_call.arguments["to"] = "someone else"

    model = ScriptedModel([InferenceResponse("", (ToolCall("a", "send", {"to": "me"}),))])
    agent = Agent([Hook("tamper", Phase.TOOL_GATE, tamper)], model, {"send": lambda a, c: "sent"})
    result = await agent.run("t", ["go"])
    assert result.outcome == "failure"
    error = str(result.error)
    assert "cannot change a FrozenDict" in error
    assert "return a command. Nothing of this gather round was committed." in error
    assert ".." not in error


def test_frozen_data_is_still_plain_data_to_read_compare_encode_and_copy() -> None:
    call = ToolCall("c", "send", {"to": ["a"], "n": {"k": (1, [2])}})
    assert call.arguments == {"to": ["a"], "n": {"k": (1, [2])}}
    assert msgspec.json.decode(msgspec.json.encode(call.arguments)) == {
        "to": ["a"],
        "n": {"k": [1, [2]]},
    }
    thawed = copy.deepcopy(call.arguments)
    thawed["to"].append("b")  # a deep copy is plain and mutable
    assert type(thawed) is dict and type(thawed["to"]) is list
    assert call.arguments["to"] == ["a"]
    given = {"deep": [{"x": 1}]}
    frozen = ToolCall("c", "t", given)
    given["deep"][0]["x"] = 2  # the caller's data is not the call's
    assert frozen.arguments["deep"][0]["x"] == 1
    with pytest.raises(TypeError, match="must be a mapping"):
        ToolCall("c", "t", ["not", "a", "mapping"])  # type: ignore[arg-type]


def test_a_tool_results_text_is_fixed_when_it_is_made() -> None:
    result = ToolResult(ToolCall("c", "t"), ToolCallStatus.SUCCEEDED, result={"a": [1]})
    assert result.text == '{"a":[1]}'
    assert msgspec.json.encode(result.result, enc_hook=enc_hook) == b'{"a":[1]}'
    spec = ToolSpec("t", "does t", {"type": "object", "properties": {"a": {"type": "string"}}})
    with pytest.raises(TypeError):
        spec.parameters["properties"]["a"]["type"] = "integer"
    with pytest.raises(TypeError, match="JSON Schema object"):
        ToolSpec("t", "", "object")  # type: ignore[arg-type]


def test_messages_with_tool_calls_are_plain_msgspec_values() -> None:
    message = Message("assistant", "", tool_calls=(ToolCall("c", "t", {"x": [1]}),))
    data = msgspec.json.encode(message)
    back = msgspec.json.decode(data, type=Message)
    assert back == message and back.tool_calls[0].arguments == {"x": [1]}


# -- arguments a tool or a hook cannot change ----------------------------------------------


def test_tool_call_arguments_are_read_only_and_tools_get_their_own_copy() -> None:
    given = {"path": "/tmp/a", "tags": ["x"]}
    call = ToolCall("c", "write", given)
    given["path"] = "/etc/passwd"  # the caller's dict is not the call's
    assert call.arguments["path"] == "/tmp/a"
    with pytest.raises(TypeError):
        call.arguments["path"] = "/etc/passwd"  # type: ignore[index]


async def test_a_tool_cannot_change_what_later_hooks_see() -> None:
    seen: list[Any] = []

    watch = Hook(
        "watch", Phase.AFTER_TOOL_EXECUTE, lambda ctx: seen.append(dict(ctx.tool_call.arguments))
    )

    def greedy(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        arguments["tags"].append("sneaky")
        return "ok"

    run = await Kernel([watch]).start_run("t")
    await run.handle_tool_call(ToolCall("c", "greedy", {"tags": ["x"]}), greedy)
    assert seen == [{"tags": ["x"]}]


# -- copies, pickles and hashes ------------------------------------------------------------


def test_frozen_calls_copy_pickle_and_hash_as_themselves() -> None:
    call = ToolCall("c", "send", {"to": ["a"], "meta": {"k": [1]}})
    for again in (copy.deepcopy(call), copy.copy(call), pickle.loads(pickle.dumps(call))):
        assert again == call
        with pytest.raises(TypeError, match="frozen"):
            again.arguments["to"].append("b")
    message = Message("assistant", "", tool_calls=(call,))
    assert hash(message) == hash(Message("assistant", "", tool_calls=(call,)))


def test_tool_results_copy_and_pickle_and_can_be_held_in_state() -> None:
    call = ToolCall("c", "t", {"a": [1]})
    result = ToolResult(call, ToolCallStatus.SUCCEEDED, result={"rows": [1, 2]})
    assert copy.deepcopy(result) == result == pickle.loads(pickle.dumps(result))
    assert copy.copy(result) is result


def nested(depth: int) -> dict[str, Any]:
    """`{"a": {"a": ... {}}}`: `depth` dicts inside one another (built without recursion)."""
    inner: dict[str, Any] = {}
    for _ in range(depth - 1):
        inner = {"a": inner}
    return inner


def nested_json(depth: int) -> str:
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def test_arguments_nested_too_deep_are_refused_naming_the_call_and_the_limit() -> None:
    assert ToolCall("c1", "search", nested(100)).arguments == nested(100)  # the limit holds
    for deep in (nested(101), nested(10_000), [nested(10_000)]):
        with pytest.raises(ToolArgumentsTooDeep) as refused:
            ToolCall("c1", "search", {"q": deep})
        error = refused.value
        assert isinstance(error, StateError) and isinstance(error, ValueError)
        assert (error.tool, error.call_id, error.limit) == ("search", "c1", 100)
        assert str(error).startswith(
            "tool call 'c1' of tool 'search': its arguments are nested more than 100 levels "
            "deep (dicts and lists inside one another)"
        )
        assert "Nothing of the call was kept" in str(error)
    looped: dict[str, Any] = {}
    looped["self"] = looped  # a dict inside itself: as deep as it gets, and no hang
    with pytest.raises(ToolArgumentsTooDeep):
        ToolCall("c2", "search", looped)
    with pytest.raises(ToolArgumentsTooDeep) as schema:
        ToolSpec("search", parameters={"type": "object", "properties": nested(10_000)})
    assert (schema.value.tool, schema.value.call_id) == ("search", None)
    assert "its parameter schema is nested more than 100 levels" in str(schema.value)


def test_json_arguments_nested_too_deep_are_refused_the_same_way() -> None:
    call = {"id": "c9", "type": "function", "function": {"name": "f", "arguments": ""}}
    for depth in (101, 10_000):
        call["function"]["arguments"] = nested_json(depth)
        with pytest.raises(ToolArgumentsTooDeep) as refused:
            as_message({"role": "assistant", "content": "", "tool_calls": [call]}, "input")
        assert (refused.value.tool, refused.value.call_id) == ("f", "c9")


async def test_a_model_answer_nested_too_deep_fails_the_run_and_loses_nothing(
    tmp_path: Path,
) -> None:
    """From a real Chat Completions server: the run fails with the error, the thread keeps
    what it held, and the next run goes on from there."""
    from chat_server import ChatServer, calls, text

    from statekernel.models import OpenAIChatModel

    script = [calls(("c1", "f", nested_json(10_000))), text("flat now")]
    with ChatServer(script) as server:
        model = OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="sk-local")
        async with SqliteThreadStore(tmp_path / "t.db") as store:
            agent = Agent([], model, {"f": lambda a, c: "ok"}, thread_store=store)
            failed = await agent.run("t", ["go deep"])
            assert failed.outcome == "failure"
            assert isinstance(failed.error, ToolArgumentsTooDeep)
            assert failed.error.call_id == "c1" and failed.error.limit == 100
            assert [m.content for m in failed.messages] == ["go deep"]
            again = await agent.run("t", ["try again"])
            assert again.outcome == "success"
            assert [m.content for m in again.messages] == ["go deep", "try again", "flat now"]
            assert (await agent.kernel.verify("t")).ok


class Seen(StateKey[int, int]):
    """A thread key a tool's command counts on, to show whether that command landed."""

    key = "seen"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


@dataclasses.dataclass
class Link:
    """A chain of objects: nesting the depth check does not see into, but JSON does."""

    next: Any = None


def chain(depth: int) -> Link:
    link = Link()
    for _ in range(depth - 1):
        link = Link(link)
    return link


def test_a_tool_result_nested_too_deep_is_refused_naming_the_call_and_the_limit() -> None:
    call = ToolCall("c7", "fetch")
    kept = ToolResult(call, ToolCallStatus.SUCCEEDED, result=nested(100))  # the limit holds
    assert kept.result == nested(100) and kept.text.startswith('{"a":{"a":')
    looped: list[Any] = []
    looped.append(looped)  # a list inside itself: as deep as it gets, and no hang
    for deep in (nested(101), [nested(10_000)], (nested(10_000),), looped, chain(10_000)):
        with pytest.raises(ToolResultTooDeep) as refused:
            ToolResult(call, ToolCallStatus.SUCCEEDED, result=deep)
        error = refused.value
        assert isinstance(error, ValueTooDeep) and isinstance(error, StateError)
        assert isinstance(error, ValueError)
        assert (error.tool, error.call_id, error.limit) == ("fetch", "c7", 100)
        assert str(error).startswith(
            "tool call 'c7' of tool 'fetch': its result is nested more than 100 levels deep "
            "(dicts and lists inside one another)"
        )
        assert "Nothing of the result was kept" in str(error)


@pytest.mark.parametrize("stored", [False, True], ids=["memory", "sqlite"])
async def test_a_tool_whose_result_is_nested_too_deep_fails_its_call_and_the_run_goes_on(
    tmp_path: Path, stored: bool
) -> None:
    """As a tool that raised: the model reads the error and answers, the command returned
    with the result is not committed, the thread keeps all it held, and the next run works."""
    go_deep = InferenceResponse("", (ToolCall("c1", "deep"),))
    model = ScriptedModel(
        [InferenceResponse("hi"), go_deep, InferenceResponse("sorry"), InferenceResponse("ok")]
    )
    tools = {"deep": lambda a, c: ToolOutput(nested(10_000), StateCommand().update(Seen, 1))}
    async with contextlib.AsyncExitStack() as stack:
        store = None
        if stored:
            store = await stack.enter_async_context(SqliteThreadStore(tmp_path / "t.db"))
        agent = Agent([Keys(Seen)], model, tools, thread_store=store)
        assert (await agent.run("t", "hello")).outcome == "success"
        result = await agent.run("t", "go deep")
        assert result.outcome == "success" and result.error is None
        (failed,) = result.tool_results
        assert failed.status is ToolCallStatus.FAILED and failed.result is None
        assert isinstance(failed.exception, ToolResultTooDeep)
        assert (failed.exception.tool, failed.exception.call_id) == ("deep", "c1")
        assert failed.error == f"ToolResultTooDeep: {failed.exception}"
        shown = model.requests[2].messages[-1]  # what the model read of the call
        assert (shown.role, shown.tool_call_id, shown.is_error) == ("tool", "c1", True)
        assert shown.content == failed.error
        assert result.snapshot.get(Seen) == 0  # the result's command did not land
        contents = ["hello", "hi", "go deep", "", failed.error, "sorry"]
        assert [m.content for m in result.messages] == contents
        again = await agent.run("t", "again")
        assert again.outcome == "success"
        assert [m.content for m in again.messages] == [*contents, "again", "ok"]
        if store is not None:  # read back by another kernel, from the file
            reader = Kernel([Keys(Seen)], thread_store=store)
            held = (await reader.get_state("t")).to_dict()["statekernel.messages"]
            assert [m.content for m in held] == [*contents, "again", "ok"]
            assert (await reader.verify("t")).ok


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (lambda: SetResult(nested(10_000)), ToolResultTooDeep),
        (lambda: Suspend({"why": nested(10_000)}), ValueTooDeep),
    ],
    ids=["set_result", "suspend"],
)
async def test_a_gate_answer_nested_too_deep_fails_the_run_naming_the_gate(
    tmp_path: Path, answer: Callable[[], Any], kind: type[ValueTooDeep]
) -> None:
    """A gate's `SetResult` stands for the tool's result and its `Suspend` ticket is saved:
    too deep, either is the gate's mistake (`HookFailed`, naming its plugin and the call);
    the thread keeps what it held, and the next run goes on."""
    answers = [answer()]  # once, then no opinion

    def gate(ctx: PhaseContext) -> Any:
        return answers.pop() if answers else None

    model = ScriptedModel(
        [InferenceResponse("", (ToolCall("c1", "t"),)), InferenceResponse("done")]
    )
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        plugins = [Hooks("strict", gate=gate)]
        agent = Agent(plugins, model, {"t": lambda a, c: "ran"}, thread_store=store)
        failed = await agent.run("t", "go")
        assert failed.outcome == "failure"
        error = failed.error
        assert isinstance(error, HookFailed) and error.plugin == "strict"
        assert type(error.cause) is kind and error.cause.limit == 100
        assert "tool call 'c1' of tool 't'" in str(error)
        again = await agent.run("t", "again")
        assert again.outcome == "success"
        assert again.messages[0].content == "go" and again.messages[-1].content == "done"
        assert (await agent.kernel.verify("t")).ok


def test_decisions_and_request_params_nested_too_deep_are_refused_when_made() -> None:
    assert Decision.result(nested(100)).value == nested(100)
    for make in (
        lambda: Decision.result(nested(101)),
        lambda: Decision.approve({"q": nested(10_000)}),
        lambda: InferenceRequest((), params={"stop": [nested(10_000)]}),
    ):
        with pytest.raises(ValueTooDeep) as refused:
            make()
        assert refused.value.limit == 100
        assert "nested more than 100 levels deep" in str(refused.value)


async def test_a_model_answer_too_deep_for_the_sdk_to_parse_fails_the_run_and_loses_nothing(
    tmp_path: Path,
) -> None:
    """The server's JSON itself nested deeper than a parser follows (not only the arguments'
    string): the run fails with `ValueTooDeep`, and the next run goes on."""
    from chat_server import ChatServer, raw, text

    deep = "[" * 10_000 + "]" * 10_000
    answer = (
        '{"id": "x", "object": "chat.completion", "created": 0, "model": "gpt-test", '
        f'"extra": {deep}, "choices": [{{"index": 0, "finish_reason": "stop", '
        '"message": {"role": "assistant", "content": "deep"}}]}'
    )
    from statekernel.models import OpenAIChatModel

    with ChatServer([raw(answer), text("flat now")]) as server:
        model = OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="sk-local")
        async with SqliteThreadStore(tmp_path / "t.db") as store:
            agent = Agent([], model, thread_store=store)
            failed = await agent.run("t", ["go deep"])
            assert failed.outcome == "failure"
            assert isinstance(failed.error, ValueTooDeep) and failed.error.limit == 100
            assert str(failed.error).startswith("model 'gpt-test': its answer is nested")
            again = await agent.run("t", ["try again"])
            assert again.outcome == "success"
            assert [m.content for m in again.messages] == ["go deep", "try again", "flat now"]
