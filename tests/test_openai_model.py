"""OpenAIChatModel against a real HTTP server on 127.0.0.1 that speaks Chat Completions.

The server (tests/chat_server.py) checks every request as a provider does: an approval
conversation end to end, streamed and not, through `agent.run` and `agent.stream`; retries
of transient errors; a clear error for a refused request."""

from __future__ import annotations

import contextlib
import enum
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
from chat_server import ChatServer, calls, check_request, error, text

from statekernel import (
    Agent,
    ModelCallFailed,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    SetInferenceOverride,
    StateCommand,
    tool,
)
from statekernel.events import (
    ModelResponded,
    RunFinished,
    TextDelta,
    ToolCallEnded,
    ToolCallStarted,
)
from statekernel.models import OpenAIChatModel
from statekernel.plugins import StageKey, StageWorkflow
from statekernel.stores import SqliteThreadStore


class Doc(enum.Enum):
    DRAFT = "draft"
    REVIEWED = "reviewed"
    PUBLISHED = "published"


class DocStage(StageKey[Doc]):
    key = "test.openai_doc_stage"
    transitions = {Doc.DRAFT: {Doc.REVIEWED}, Doc.REVIEWED: {Doc.PUBLISHED}}


@tool
def review(notes: str) -> str:
    """Review the draft.

    Args:
        notes: What the reviewer found.
    """
    return f"reviewed: {notes}"


@tool
def publish(title: str) -> str:
    """Publish the document.

    Args:
        title: The document's title.
    """
    return f"published {title!r}"


def approval_script() -> list[dict[str, Any]]:
    return [
        calls(("c1", "publish", {"title": "Q3 report"}), content="Publishing now."),
        calls(("c2", "review", {"notes": "numbers check out"})),
        calls(("c3", "publish", {"title": "Q3 report"})),
        text("The Q3 report is reviewed and published."),
    ]


def approval_agent(model: OpenAIChatModel, **options: Any) -> Agent:
    flow = StageWorkflow(DocStage, advances={"review": Doc.REVIEWED, "publish": Doc.PUBLISHED})
    return Agent(
        [flow],
        model,
        flow.tools({"review": review, "publish": publish}),
        system_prompt="You publish documents, after a review.",
        **options,
    )


def model_for(server: ChatServer, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="sk-local", **options)


@pytest.mark.parametrize("stream", [False, True])
async def test_an_approval_conversation_runs_end_to_end_against_the_wire_format(
    stream: bool,
) -> None:
    with ChatServer(approval_script()) as server:
        agent = approval_agent(model_for(server, stream=stream, backoff=0.01))
        result = await agent.run("doc", ["Publish the Q3 report."])
    assert server.refused == []  # every request met the provider's rules
    assert result.outcome == "success", result.error
    assert result.snapshot.get(DocStage) is Doc.PUBLISHED
    assert len(server.requests) == 4 and all(
        r.get("stream", False) is stream for r in server.requests
    )
    first, second, _, last = server.requests
    assert first["messages"][0] == {
        "role": "system",
        "content": "You publish documents, after a review.",
    }
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert offered["publish"]["description"] == "Publish the document."
    assert offered["publish"]["parameters"]["properties"]["title"]["type"] == "string"
    assert offered["publish"]["parameters"]["required"] == ["title"]
    # The blocked publish came back to the model as a tool error after the call that made it.
    assistant, blocked = second["messages"][-2:]
    assert assistant["role"] == "assistant" and assistant["content"] == "Publishing now."
    assert assistant["tool_calls"][0]["function"] == {
        "name": "publish",
        "arguments": '{"title": "Q3 report"}',
    }
    assert blocked["role"] == "tool" and blocked["tool_call_id"] == "c1"
    assert "REVIEWED" in blocked["content"]
    roles = [m["role"] for m in last["messages"]]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert result.messages[-1].content == "The Q3 report is reviewed and published."
    assert [c.name for m in result.messages for c in m.tool_calls] == [
        "publish",
        "review",
        "publish",
    ]


async def test_the_conversation_streams_as_events_with_text_deltas() -> None:
    with ChatServer(approval_script()) as server:
        agent = approval_agent(model_for(server, stream=True))
        events = [e async for e in agent.stream("doc", ["Publish the Q3 report."])]
    assert server.refused == []
    watched = [
        type(e).__name__
        for e in events
        if isinstance(e, ModelResponded | ToolCallStarted | ToolCallEnded | RunFinished)
    ]
    assert watched == [
        *["ModelResponded", "ToolCallStarted", "ToolCallEnded"] * 3,
        "ModelResponded",
        "RunFinished",
    ]
    deltas = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert deltas == "Publishing now." + "The Q3 report is reviewed and published."
    statuses = [e.status.value for e in events if isinstance(e, ToolCallEnded)]
    assert statuses == ["failed", "succeeded", "succeeded"]
    final = events[-1]
    assert isinstance(final, RunFinished) and final.result.snapshot.get(DocStage) is Doc.PUBLISHED


async def test_leaving_the_stream_after_the_first_tool_call_leaves_a_thread_the_api_accepts(
    tmp_path: Path,
) -> None:
    script = [*approval_script()[:1], text("Resumed; nothing was published.")]
    with ChatServer(script) as server:
        async with SqliteThreadStore(tmp_path / "threads.db") as store:
            agent = approval_agent(model_for(server), thread_store=store)
            async with contextlib.aclosing(agent.stream("doc", ["Publish it."])) as events:
                async for event in events:
                    if isinstance(event, ToolCallStarted):
                        break
            assert (await agent.kernel.verify("doc")).ok
            # The next run sends the history back: the server checks its ordering.
            again = approval_agent(model_for(server), thread_store=store)
            result = await again.run("doc", ["What happened?"])
    assert server.refused == []
    assert result.outcome == "success"
    assert result.snapshot.get(DocStage) is Doc.DRAFT
    # The run stopped before the call's gates: the call has a result, "cancelled".
    (cancelled,) = [m for m in result.messages if m.role == "tool"]
    assert cancelled.tool_call_id == "c1" and cancelled.content == "cancelled"
    assert [m.content for m in result.messages][-1] == "Resumed; nothing was published."


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [429, 503])
async def test_transient_errors_are_retried_with_backoff(
    stream: bool, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    with ChatServer([error(status), error(status), text("finally")]) as server:
        agent = Agent([], model_for(server, stream=stream, backoff=0.01))
        with caplog.at_level(logging.INFO, logger="statekernel"):
            result = await agent.run("t", ["hello"])
    assert result.outcome == "success" and result.messages[-1].content == "finally"
    assert len(server.requests) == 3
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2 and f"HTTP {status}" in retries[0]


async def test_a_refused_request_fails_the_run_at_once_saying_what_the_server_said() -> None:
    with ChatServer([error(400, "Unknown parameter: 'temprature'.", None)]) as server:
        result = await Agent([], model_for(server, backoff=0.01)).run("t", ["hello"])
    assert len(server.requests) == 1  # a 400 is not retried
    assert result.outcome == "failure" and isinstance(result.error, ModelCallFailed)
    assert result.error.status == 400
    message = str(result.error)
    assert "gpt-test" in message and "Unknown parameter: 'temprature'." in message
    assert "check the model name and the parameters" in message


async def test_errors_that_persist_fail_after_the_last_retry() -> None:
    with ChatServer([error(429)] * 3) as server:
        model = model_for(server, max_retries=2, backoff=0.01)
        result = await Agent([], model).run("t", ["hello"])
    assert len(server.requests) == 3
    assert isinstance(result.error, ModelCallFailed) and result.error.status == 429
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = OpenAIChatModel(
        "gpt-test", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=1, backoff=0.01
    )
    result = await Agent([], down).run("t", ["hello"])
    assert isinstance(result.error, ModelCallFailed) and result.error.status is None
    assert "reachable" in str(result.error)


async def test_parameters_and_this_steps_overrides_reach_the_server() -> None:
    class Precise(Plugin):
        id = "precise"

        def register(self, r: PluginRegistrar) -> None:
            r.register_phase_hook(Phase.STEP_START, self.steer)

        def steer(self, ctx: PhaseContext) -> StateCommand:
            return StateCommand().schedule(SetInferenceOverride, {"temperature": 0.0})

    with ChatServer([text("ok")]) as server:
        model = model_for(server, temperature=0.7, max_tokens=50)
        await Agent([Precise()], model).run("t", ["hello"])
    (sent,) = server.requests
    assert (sent["temperature"], sent["max_tokens"]) == (0.0, 50)


def test_the_servers_checks_catch_the_mistakes_providers_refuse() -> None:
    tool_without_call = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": ""},
            {"role": "tool", "tool_call_id": "call_1", "content": "x"},
        ],
    }
    problem = check_request(tool_without_call)
    assert problem is not None and "must be a response to a preceding message" in problem
    unanswered = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "user", "content": "again"},
        ],
    }
    assert "must be followed by tool messages" in str(check_request(unanswered))
    bad_tool = {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]}
    assert "invalid tool" in str(check_request(bad_tool))
