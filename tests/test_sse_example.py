"""The server-sent events example (docs/examples/sse_server.py), driven through ASGI.

A Starlette app streams a run as JSON events, and a client that leaves stops the run
cleanly. The app is driven through the ASGI interface itself, as a server would drive it."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
from samples import Ends

from statekernel import Agent

EXAMPLE = Path(__file__).parent.parent / "docs" / "examples" / "sse_server.py"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("statekernel_sse_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def post(app: Any, path: str, body: bytes, *, leave_after: int | None = None) -> list[Any]:
    """POST `body` to `path`; with `leave_after`, the client disconnects after that many
    body chunks. Returns the ASGI messages the app sent."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    sent: list[Any] = []
    gone = asyncio.Event()
    asked = False

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        chunks = [m for m in sent if m["type"] == "http.response.body" and m.get("body")]
        if leave_after is not None and len(chunks) >= leave_after:
            gone.set()

    await asyncio.wait_for(app(scope, receive, send), timeout=30)
    return sent


def events_of(sent: list[Any]) -> list[dict[str, Any]]:
    data = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return [
        msgspec.json.decode(line[len(b"data: ") :])
        for line in data.split(b"\n\n")
        if line.startswith(b"data: ")
    ]


async def test_a_run_arrives_as_server_sent_json_events_ending_with_the_result() -> None:
    module = example()
    app = module.make_app(module.make_agent())
    sent = await post(app, "/threads/t1/runs", b'{"message": "weather in Oslo?"}')
    start = sent[0]
    assert start["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
    events = events_of(sent)
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "RunFinished" and "ToolCallEnded" in kinds and "Committed" in kinds
    (tool,) = [e for e in events if e["event"] == "ToolCallEnded"]
    assert tool["result"] == "sunny in Oslo" and tool["status"] == "succeeded"
    result = events[-1]["result"]
    assert result["outcome"] == "success"
    assert [m["content"] for m in result["messages"]][-1] == "It is sunny in Oslo."


async def test_bad_input_is_a_400_that_says_what_to_send() -> None:
    module = example()
    app = module.make_app(module.make_agent())
    for body in (b"{}", b"not json", b'{"message": 3}'):
        sent = await post(app, "/threads/t1/runs", body)
        assert sent[0]["status"] == 400
        assert "message" in msgspec.json.decode(sent[1]["body"])["error"]


async def test_a_client_that_leaves_stops_the_run_cleanly() -> None:
    module = example()
    scripted = module.make_agent()
    ends = Ends()
    agent = Agent([ends], scripted.model, scripted.tools)
    sent = await post(
        module.make_app(agent), "/threads/t1/runs", b'{"message": "hi"}', leave_after=2
    )
    assert "RunFinished" not in [e["event"] for e in events_of(sent)]
    for _ in range(100):  # the run ends on its own task once the client is gone
        if ends.ended:
            break
        await asyncio.sleep(0.01)
    assert ends.ended == 1
    # The run stopped early (the model never gave its final answer), and the thread is
    # free and consistent: the next request on it runs to its end.
    report = await agent.kernel.verify("t1")
    assert report.ok
    saved = (await agent.kernel.state_at("t1", report.revision)).to_dict()
    assert "It is sunny in Oslo." not in [m.content for m in saved["statekernel.messages"]]
    again = await agent.run("t1", ["still there?"])
    assert again.outcome == "success"
