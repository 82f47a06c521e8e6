"""The model boundary: the request a model gets, the response it gives, and a scripted model.

A model is any async callable `(InferenceRequest) -> InferenceResponse`. The kernel never
talks to a network itself; `ScriptedModel` plays back fixed responses so tests and the demo
run offline and deterministically.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import attrs

from .._errors import ValueTooDeep
from .frozen import freeze
from .messages import Message
from .nesting import MAX_NESTING_DEPTH, nested_deeper
from .tools import ToolCall, ToolSpec


def _frozen_params(params: Any) -> Any:
    """A request's parameters, frozen, and refused first if too deep to freeze or send."""
    if nested_deeper(params, MAX_NESTING_DEPTH):
        raise ValueTooDeep("InferenceRequest.params", MAX_NESTING_DEPTH, plural=True)
    return freeze(params)


@attrs.frozen
class InferenceRequest:
    """What the model sees: one side of the model boundary.

    `InferenceRequest(messages, tools=(), params={}, transcript=())`:

    - `messages`: a tuple, the system prompt first, with context messages already placed
      by the request transforms.
    - `tools`: the `ToolSpec`s on offer this step (`request.tool_names`: their names).
    - `params`: this step's model parameters (`SetInferenceOverride`), frozen; nested more
      than 100 levels deep, they raise `ValueTooDeep`.
    - `transcript`: messages a transform wants recorded in the thread's history, for
      request transforms whose placed messages users should see too. The Agent appends
      them once the model has answered, just before its answer (where the model read
      them), so they are in `RunResult.messages`, saved and streamed. The model gets
      `messages` only; a transform that wants a message both read and recorded puts it in
      both. Anything but `Message`s there raises `TypeError`.

    `request.replace(**changes)` returns a copy, which is what transforms should return.
    See [agent](agent.md#the-agent-in-ten-lines).
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    params: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_params)
    transcript: tuple[Message, ...] = attrs.field(default=(), converter=tuple)

    @transcript.validator
    def _messages_only(self, _: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
        for item in value:
            if not isinstance(item, Message):
                raise TypeError(
                    f"InferenceRequest.transcript holds Message objects only, got "
                    f"{type(item).__name__} {item!r}"
                )

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names of the tools on offer this step, in the order of `tools`."""
        return tuple(spec.name for spec in self.tools)

    def replace(self, **changes: Any) -> InferenceRequest:
        """A copy with some fields changed: what transforms should return, so that fields
        added later survive."""
        return attrs.evolve(self, **changes)


@attrs.frozen
class InferenceResponse:
    """What the model answers: text, and the tool calls it wants made.

    `InferenceResponse(text="", tool_calls=())`. With no `tool_calls`, the run is done.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


Model = Callable[[InferenceRequest], Awaitable[InferenceResponse]]


class ScriptedModel:
    """An offline model: returns the given responses in order, then
    `InferenceResponse(text="done")` forever.

    `ScriptedModel(responses=())`. Every request it was sent is kept in `model.requests`,
    so tests can check what the model saw. A response that is not an `InferenceResponse`
    raises `TypeError`. See [agent](agent.md#the-agent-in-ten-lines).
    """

    def __init__(self, responses: Iterable[InferenceResponse] = ()) -> None:
        self._responses = list(responses)
        for response in self._responses:
            if not isinstance(response, InferenceResponse):
                raise TypeError(f"ScriptedModel takes InferenceResponse objects, got {response!r}")
        self._next = 0
        self.requests: list[InferenceRequest] = []

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        self.requests.append(request)
        if self._next < len(self._responses):
            response = self._responses[self._next]
            self._next += 1
            return response
        return InferenceResponse(text="done")
