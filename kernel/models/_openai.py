"""`OpenAIChatModel`: the OpenAI Chat Completions wire format, through the official SDK.

The kernel's history already has the shape every provider requires: an assistant message
carries the tool calls it made, and each tool result follows it with the call's id. So the
mapping is one message to one message. Tool specs become `function` tools, a call's
arguments travel as the JSON string the API expects, and the answer's tool calls come back
as `ToolCall`s.

Failures split in two. A 429, a 5xx, a timeout or a dropped connection is transient: it is
retried, with exponential backoff (or the server's `Retry-After`), `max_retries` times. Any
other 4xx is a request the server will refuse again: the run fails at once with
`ModelCallFailed`, carrying what the server said. A streamed answer is retried only until
its first piece arrived; after that, a failure ends the call.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from .._errors import ModelCallFailed, ToolArgumentsTooDeep, ValueTooDeep
from .._values import options
from .._values.frozen import thaw
from .._values.messages import Message
from .._values.model import InferenceRequest, InferenceResponse
from .._values.nesting import MAX_NESTING_DEPTH
from .._values.tools import ToolCall, ToolSpec, decode_arguments

if TYPE_CHECKING:
    import openai

__all__ = ["OpenAIChatModel"]

logger = logging.getLogger("statekernel")

_MAX_WAIT = 30.0  # seconds: the longest backoff, whatever a server's Retry-After says


class OpenAIChatModel:
    """A model for `Agent` speaking OpenAI Chat Completions (also vLLM, Ollama, LM Studio,
    LiteLLM proxies: give their `base_url`).

    It speaks the wire format through the official `openai` package (the extra
    `statekernel[openai]`); without that package, constructing one raises `ImportError`
    naming the extra.

    - `model`: the model name, such as `"gpt-4o-mini"` (an empty one is a `ValueError`).
    - `params` (`temperature=0.2`, `max_tokens=...`) go with every request, and this step's
      `SetInferenceOverride` parameters override them.
    - `stream=True`: the answer streams, and `agent.stream` shows its text as `TextDelta`
      events.
    - `max_retries=3`, `backoff=0.5`: a 429, a 5xx, a timeout or a dropped connection is
      retried `max_retries` times (an int >= 0), waiting `backoff * 2**attempt` seconds (or
      the server's `Retry-After`, at most 30 s); each retry is logged at `INFO`. Any other
      4xx fails at once. Either way the error is `ModelCallFailed`, which fails the run. A
      streamed answer is retried only until its first piece arrived. `backoff` is a finite
      number of seconds >= 0 (else `ValueError`).
    - `base_url`, `api_key`, `timeout=120.0` (seconds, finite and > 0, else `ValueError`):
      the settings of the client it makes.
    - `client`: an `openai.AsyncOpenAI` of your own; then `base_url`, `api_key` and
      `timeout` are its settings (its own `max_retries` adds to ours).

    Messages map one to one: an assistant message with its `tool_calls` (arguments as a
    JSON string), each tool result as a `tool` message with its `tool_call_id`. Each
    `ToolSpec` is a `function` tool. The answer's tool calls come back as `ToolCall`s
    (arguments that are not a JSON object are logged and become `{}`).
    """

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        stream: bool = False,
        max_retries: int = 3,
        backoff: float = 0.5,
        timeout: float = 120.0,
        **params: Any,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a model name such as 'gpt-4o-mini', got {model!r}")
        options.count("max_retries", max_retries)
        options.seconds("backoff", backoff)
        options.seconds("timeout", timeout, above_zero=True)
        if client is None:
            try:
                import openai
            except ImportError as error:
                raise ImportError(
                    "OpenAIChatModel needs the openai package: pip install 'statekernel[openai]'"
                ) from error
            # Retries are ours (below): the SDK's own would multiply them.
            client = openai.AsyncOpenAI(
                base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout
            )
        self.model = model
        self.client = client
        self.streams = bool(stream)
        self.max_retries = max_retries
        self.backoff = backoff
        self.params = dict(params)

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model!r}, stream={self.streams})"

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        if self.streams:
            response: InferenceResponse | None = None
            async for piece in self.stream(request):
                if isinstance(piece, InferenceResponse):
                    response = piece
            assert response is not None
            return response
        body = self._body(request)
        for attempt in range(self.max_retries + 1):
            try:
                completion = await self.client.chat.completions.create(**body)
            except Exception as error:
                await self._retry_or_raise(error, attempt)
                continue
            choice = completion.choices[0]
            return _response(choice.message.content, choice.message.tool_calls or ())
        raise AssertionError("unreachable: the last attempt raises")

    async def stream(self, request: InferenceRequest) -> AsyncIterator[str | InferenceResponse]:
        """The answer as it arrives: text pieces (`str`), then the whole `InferenceResponse`.

        A failure is retried only until the first piece arrived; after that it ends the call
        with `ModelCallFailed`.
        """
        body = {**self._body(request), "stream": True}
        for attempt in range(self.max_retries + 1):
            text: list[str] = []
            calls: dict[int, dict[str, str]] = {}
            started = False
            try:
                chunks = await self.client.chat.completions.create(**body)
                async for chunk in chunks:
                    if not chunk.choices:
                        continue
                    delta = chunk.choices[0].delta
                    if delta.content:
                        started = True
                        text.append(delta.content)
                        yield delta.content
                    for part in delta.tool_calls or ():
                        started = True
                        call = calls.setdefault(part.index, {"id": "", "name": "", "args": ""})
                        call["id"] = part.id or call["id"]
                        if part.function is not None:
                            call["name"] += part.function.name or ""
                            call["args"] += part.function.arguments or ""
            except Exception as error:
                if started and _is_api_error(error):  # under way: it cannot be taken back
                    raise _failed(self.model, error) from error
                await self._retry_or_raise(error, attempt)
                continue
            ordered = [calls[index] for index in sorted(calls)]
            yield _response(
                "".join(text),
                [_StreamedCall(c["id"], c["name"], c["args"]) for c in ordered],
            )
            return

    def _body(self, request: InferenceRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            **self.params,
            **thaw(request.params),
            "model": self.model,
            "messages": [_wire_message(message) for message in request.messages],
        }
        if request.tools:
            body["tools"] = [_wire_tool(spec) for spec in request.tools]
        return body

    async def _retry_or_raise(self, error: Exception, attempt: int) -> None:
        """Wait before the next attempt if `error` is transient and attempts remain; else
        raise it as `ModelCallFailed`."""
        if isinstance(error, RecursionError):  # the SDK's JSON parser, on the server's answer
            raise ValueTooDeep(
                f"model {self.model!r}: its answer",
                MAX_NESTING_DEPTH,
                "Nothing of the answer was kept. Check what the server at base_url sends.",
            ) from None
        if not _is_api_error(error):
            raise error  # not the API's answer: a bug to see as it is
        status = _status_of(error)
        transient = status is None or status == 429 or status >= 500
        if not transient or attempt >= self.max_retries:
            raise _failed(self.model, error) from error
        wait = min(_retry_after(error) or self.backoff * 2**attempt, _MAX_WAIT)
        logger.info(
            "model %r: %s; retrying in %.2fs (attempt %d of %d)",
            self.model,
            _describe(error),
            wait,
            attempt + 2,
            self.max_retries + 1,
        )
        await asyncio.sleep(wait)


class _StreamedCall:
    """A tool call assembled from streamed pieces, shaped like the SDK's."""

    def __init__(self, id: str, name: str, arguments: str) -> None:
        self.id = id
        self.function = _Function(name, arguments)


class _Function:
    def __init__(self, name: str, arguments: str) -> None:
        self.name = name
        self.arguments = arguments


def _wire_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(thaw(call.arguments))},
            }
            for call in message.tool_calls
        ]
    return wire


def _wire_tool(spec: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {"name": spec.name, "parameters": thaw(spec.parameters)}
    if spec.description:
        function["description"] = spec.description
    return {"type": "function", "function": function}


def _response(content: str | None, tool_calls: Any) -> InferenceResponse:
    calls = []
    for call in tool_calls:
        name = call.function.name
        arguments = _arguments(call.function.arguments, name, call.id)
        calls.append(ToolCall(call.id, name, arguments))
    return InferenceResponse(text=content or "", tool_calls=tuple(calls))


def _arguments(raw: str | None, name: str, call_id: str) -> Mapping[str, Any]:
    """A call's arguments from the JSON string the model wrote; text that is not a JSON
    object is logged and becomes no arguments (the tool's schema check then tells the model
    what is missing). JSON nested too deep is no mistake to gloss over: it raises
    `ToolArgumentsTooDeep`, as the `ToolCall` made of it would."""
    if not raw:
        return {}
    try:
        parsed = decode_arguments(raw, tool=name, call_id=call_id)
    except ToolArgumentsTooDeep:
        raise
    except ValueError:  # not JSON (msgspec's DecodeError)
        parsed = None
    if not isinstance(parsed, dict):
        logger.warning("a model's tool call arguments are not a JSON object: %r", raw[:200])
        return {}
    return parsed


def _is_api_error(error: Exception) -> bool:
    import openai

    return isinstance(error, openai.APIError)


def _status_of(error: Exception) -> int | None:
    status = getattr(error, "status_code", None)
    return status if isinstance(status, int) else None


def _retry_after(error: Exception) -> float | None:
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _describe(error: Exception) -> str:
    status = _status_of(error)
    message = getattr(error, "message", None) or str(error)
    return (
        f"HTTP {status}: {message}" if status is not None else f"{type(error).__name__}: {message}"
    )


_FIXES = {
    400: "The server refused the request as it was; check the model name and the parameters.",
    401: "Check the api_key (or the OPENAI_API_KEY environment variable).",
    403: "The key may not use this model; check its permissions.",
    404: "Check the model name and the base_url (it usually ends in /v1).",
    429: "Rate-limited on every retry; wait, or raise max_retries or backoff.",
}


def _failed(model: str, error: Exception) -> ModelCallFailed:
    status = _status_of(error)
    if status is None:
        fix = "Check that the server at base_url is up and reachable, or raise timeout."
    else:
        fix = _FIXES.get(status, "The server failed on every retry; try again later.")
    detail = getattr(error, "message", None) or str(error) or type(error).__name__
    failed = ModelCallFailed(model, status, detail, fix)
    failed.__cause__ = error
    return failed
