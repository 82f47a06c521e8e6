"""A run streamed to a web page as server-sent events, from a small Starlette app.

`POST /threads/{thread_id}/runs` with a JSON body `{"message": "..."}` answers with
`text/event-stream`: one `data:` line per event of the run, each the event's own JSON
(`msgspec.json.encode(event, enc_hook=statekernel.enc_hook)`), the last one `RunFinished`.
A browser reads them with `fetch` and a stream reader (or `EventSource` for a GET route).
If the client goes away, the server stops the run cleanly (RUN_END runs, the state is
saved) instead of running it to the end for nobody.

Starlette is not a dependency of statekernel; any ASGI framework works the same way.
Run: .venv/bin/pip install starlette uvicorn && .venv/bin/uvicorn docs.examples.sse_server:app
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import statekernel
from statekernel import Agent, InferenceResponse, ScriptedModel, ToolCall


def make_agent() -> Agent:
    """An offline agent: a scripted model that looks the weather up, then answers."""
    model = ScriptedModel(
        [
            InferenceResponse("Let me look.", (ToolCall("c1", "weather", {"city": "Oslo"}),)),
            InferenceResponse("It is sunny in Oslo."),
        ]
    )
    return Agent([], model, {"weather": lambda arguments, ctx: f"sunny in {arguments['city']}"})


def make_app(agent: Agent) -> Starlette:
    async def start_run(request: Request) -> Response:
        try:
            body: Any = msgspec.json.decode(await request.body())
        except msgspec.DecodeError:
            body = None
        message = body.get("message") if isinstance(body, dict) else None
        if not isinstance(message, str) or not message:
            return JSONResponse({"error": 'send {"message": "..."}'}, status_code=400)
        thread_id = request.path_params["thread_id"]

        async def events() -> AsyncIterator[bytes]:
            # aclosing: when the client leaves, the stream is closed at once, which stops
            # the run at its next safe point.
            async with contextlib.aclosing(agent.stream(thread_id, [message])) as stream:
                async for event in stream:
                    data = msgspec.json.encode(event, enc_hook=statekernel.enc_hook)
                    yield b"data: " + data + b"\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/threads/{thread_id}/runs", start_run, methods=["POST"])])


app = make_app(make_agent())
