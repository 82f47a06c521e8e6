"""A local HTTP server speaking the OpenAI Chat Completions wire format, for model tests.

It listens on 127.0.0.1 (a free port), answers `POST /v1/chat/completions` from a script
of replies (text, tool calls, or an HTTP error such as a 429), streamed as server-sent
events when the request asks for it, and checks every request the way a provider does:
the schema of messages and tools, and the ordering rule that each tool message answers a
call of the assistant message before it, and that every call is answered before the
conversation goes on. A request that breaks a rule gets the 400 a provider would send.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def text(content: str) -> dict[str, Any]:
    return {"content": content}


def calls(
    *made: tuple[str, str, dict[str, Any] | str], content: str | None = None
) -> dict[str, Any]:
    """A reply making tool calls: (id, name, arguments) each; arguments given as a string
    are sent as they are (JSON text the model wrote)."""
    return {"content": content, "tool_calls": list(made)}


def raw(body: str) -> dict[str, Any]:
    """A reply sent as this JSON text, byte for byte: an answer no well-behaved server sends
    (JSON nested deeper than a parser follows, say), which `json.dumps` could not even make."""
    return {"raw": body}


def error(status: int, message: str = "slow down", retry_after: str | None = "0") -> dict[str, Any]:
    return {"status": status, "message": message, "retry_after": retry_after}


class ChatServer:
    def __init__(self, replies: list[dict[str, Any]] | None = None) -> None:
        self.replies = list(replies or [])
        self.requests: list[dict[str, Any]] = []
        self.refused: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                server._handle(self)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # shutdown() waits for the serving loop's next poll: a short one ends each test sooner
        serve = functools.partial(self._httpd.serve_forever, poll_interval=0.01)
        self._thread = threading.Thread(target=serve, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- one request ---------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.path != "/v1/chat/completions":
            return _send_json(handler, 404, _error_body(f"no route {handler.path}"))
        length = int(handler.headers.get("content-length", "0"))
        try:
            body = json.loads(handler.rfile.read(length))
        except ValueError:
            return _send_json(handler, 400, _error_body("the body is not JSON"))
        with self._lock:
            self.requests.append(body)
            problem = check_request(body)
            if problem is not None:
                self.refused.append(problem)
                return _send_json(handler, 400, _error_body(problem))
            if not self.replies:
                return _send_json(handler, 500, _error_body("the script has no more replies"))
            reply = self.replies.pop(0)
        if "raw" in reply:
            return _send_bytes(handler, 200, reply["raw"].encode())
        if "status" in reply:
            headers = {"retry-after": reply["retry_after"]} if reply.get("retry_after") else {}
            return _send_json(handler, reply["status"], _error_body(reply["message"]), headers)
        if body.get("stream"):
            return _send_stream(handler, body["model"], reply)
        return _send_json(handler, 200, _completion(body["model"], reply))


def check_request(body: Any) -> str | None:
    """What a provider would refuse in this request, or None."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return "'model' is required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    tools = body.get("tools", [])
    for tool in tools:
        function = tool.get("function", {}) if isinstance(tool, dict) else {}
        if tool.get("type") != "function" or not _NAME.match(str(function.get("name", ""))):
            return f"invalid tool {tool!r}"
        parameters = function.get("parameters")
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            return f"tool {function.get('name')!r}: 'parameters' must be a JSON Schema object"
    open_calls: set[str] | None = None  # the calls of the last assistant message, unanswered
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            return f"messages[{index}]: invalid role {role!r}"
        if role == "tool":
            if open_calls is None:
                return (
                    f"messages[{index}]: messages with role 'tool' must be a response to a "
                    f"preceding message with 'tool_calls'"
                )
            call_id = message.get("tool_call_id")
            if call_id not in open_calls:
                return f"messages[{index}]: tool_call_id {call_id!r} answers no open tool call"
            open_calls.discard(call_id)
            if not isinstance(message.get("content"), str):
                return f"messages[{index}]: a tool message needs string content"
            continue
        if open_calls:
            return (
                f"messages[{index}]: an assistant message with 'tool_calls' must be followed by "
                f"tool messages responding to each 'tool_call_id' (missing: {sorted(open_calls)})"
            )
        open_calls = None
        if role == "assistant" and message.get("tool_calls"):
            open_calls = set()
            for call in message["tool_calls"]:
                function = call.get("function", {})
                if call.get("type") != "function" or not isinstance(call.get("id"), str):
                    return f"messages[{index}]: invalid tool call {call!r}"
                try:
                    json.loads(function.get("arguments", ""))
                except ValueError:
                    return f"messages[{index}]: tool call arguments must be a JSON string"
                open_calls.add(call["id"])
        elif not isinstance(message.get("content"), str):
            return f"messages[{index}]: 'content' must be a string"
    if open_calls:
        return f"the last assistant message's tool calls were not answered: {sorted(open_calls)}"
    return None


def _wire_calls(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": call_id,
            "type": "function",
            "function": {
                "name": name,
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            },
        }
        for call_id, name, arguments in reply.get("tool_calls", [])
    ]


def _completion(model: str, reply: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if reply.get("tool_calls"):
        message["tool_calls"] = _wire_calls(reply)
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.get("tool_calls") else "stop",
            }
        ],
    }


def _chunks(model: str, reply: dict[str, Any]) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-local",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    yield chunk({"role": "assistant", "content": ""})
    content = reply.get("content") or ""
    for start in range(0, len(content), 4):  # the text in pieces of four characters
        yield chunk({"content": content[start : start + 4]})
    for index, call in enumerate(_wire_calls(reply)):
        head = {"index": index, "id": call["id"], "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call["function"]["name"]}}]})
        arguments = call["function"]["arguments"]
        for start in range(0, len(arguments), 5):  # the arguments' JSON in pieces too
            piece = {"index": index, "function": {"arguments": arguments[start : start + 5]}}
            yield chunk({"tool_calls": [piece]})
    yield chunk({}, "tool_calls" if reply.get("tool_calls") else "stop")


def _send_stream(handler: BaseHTTPRequestHandler, model: str, reply: dict[str, Any]) -> None:
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("connection", "close")
    handler.end_headers()
    for chunk in _chunks(model, reply):
        handler.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        handler.wfile.flush()
    handler.wfile.write(b"data: [DONE]\n\n")
    handler.wfile.flush()
    handler.close_connection = True


def _error_body(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


def _send_json(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> None:
    _send_bytes(handler, status, json.dumps(body).encode(), headers)


def _send_bytes(
    handler: BaseHTTPRequestHandler,
    status: int,
    data: bytes,
    headers: dict[str, str] | None = None,
) -> None:
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)
