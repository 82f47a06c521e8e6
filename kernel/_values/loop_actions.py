"""Loop actions: what a hook may change about the next model call, for one step only.

State decides which tools the model may use and how it is asked ("no publishing until a
review", "answer deterministically now"). A hook says so by scheduling an action, like
any other: `cmd.schedule(ExcludeTool, "publish")`. The actions run in BEFORE_INFERENCE's
convergence loop (scheduled from STEP_START, they wait for it), each folding its payload
into one run key; the Agent reads that key when it builds the step's request, then clears
it, so nothing carries over to the next step. Being commits, they are journaled like any
other change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from .commands import StateCommand
from .keys import RESERVED_PREFIX, MergeStrategy, StateKey
from .phases import Phase
from .specs import ScheduledActionSpec

__all__ = [
    "HANDLERS",
    "ExcludeTool",
    "IncludeOnlyTools",
    "RequestOverrides",
    "SetInferenceOverride",
    "StepRequest",
]


class ExcludeTool(ScheduledActionSpec[str]):
    """Do not offer the named tool in this step's request.

    `cmd.schedule(ExcludeTool, "publish")`: `publish` is not offered.

    A loop action, scheduled like any action, that changes the model request of the
    current step only. Loop actions run in `BEFORE_INFERENCE`, so schedule them from
    `STEP_START` or `BEFORE_INFERENCE` (scheduled later, they apply to the next step's
    request). See [tools and schemas](tools.md#tools-by-state-one-step-at-a-time).
    """

    key = f"{RESERVED_PREFIX}exclude_tool"
    phase = Phase.BEFORE_INFERENCE


class IncludeOnlyTools(ScheduledActionSpec[tuple[str, ...]]):
    """Offer only the named tools in this step's request (several: only those named by all).

    `cmd.schedule(IncludeOnlyTools, ("review", "draft"))`: only these are offered. Several
    of them offer only the tools that all of them name.

    A loop action, scheduled like any action, that changes the model request of the
    current step only. Loop actions run in `BEFORE_INFERENCE`, so schedule them from
    `STEP_START` or `BEFORE_INFERENCE` (scheduled later, they apply to the next step's
    request). See [tools and schemas](tools.md#tools-by-state-one-step-at-a-time).
    """

    key = f"{RESERVED_PREFIX}include_only_tools"
    phase = Phase.BEFORE_INFERENCE


class SetInferenceOverride(ScheduledActionSpec[dict[str, Any]]):
    """Model parameters for this step's request, merged field by field over earlier
    overrides; the last writer of a field wins.

    `cmd.schedule(SetInferenceOverride, {"temperature": 0.0})`: the parameters are passed
    in `InferenceRequest.params`.

    A loop action, scheduled like any action, that changes the model request of the
    current step only. Loop actions run in `BEFORE_INFERENCE`, so schedule them from
    `STEP_START` or `BEFORE_INFERENCE` (scheduled later, they apply to the next step's
    request). See [tools and schemas](tools.md#tools-by-state-one-step-at-a-time).
    """

    key = f"{RESERVED_PREFIX}set_inference_override"
    phase = Phase.BEFORE_INFERENCE


class RequestOverrides(msgspec.Struct, frozen=True):
    """What this step's loop actions asked for."""

    excluded: frozenset[str] = frozenset()
    only: frozenset[str] | None = None
    params: Mapping[str, Any] = msgspec.field(default_factory=dict)

    def offers(self, name: str) -> bool:
        return name not in self.excluded and (self.only is None or name in self.only)


class _Exclude(msgspec.Struct, frozen=True, tag="exclude"):
    name: str


class _IncludeOnly(msgspec.Struct, frozen=True, tag="include_only"):
    names: tuple[str, ...]


class _Override(msgspec.Struct, frozen=True, tag="override"):
    params: dict[str, Any]


class StepRequest(StateKey[RequestOverrides, _Exclude | _IncludeOnly | _Override]):
    """The loop actions of the step in progress (a run key, cleared once the request is made)."""

    key = f"{RESERVED_PREFIX}step_request"
    merge = MergeStrategy.COMMUTATIVE
    default = RequestOverrides()

    @staticmethod
    def apply(
        value: RequestOverrides, update: _Exclude | _IncludeOnly | _Override
    ) -> RequestOverrides:
        if isinstance(update, _Exclude):
            return msgspec.structs.replace(value, excluded=value.excluded | {update.name})
        if isinstance(update, _IncludeOnly):
            names = frozenset(update.names)
            only = names if value.only is None else value.only & names
            return msgspec.structs.replace(value, only=only)
        return msgspec.structs.replace(value, params={**value.params, **update.params})


def _exclude(name: str, ctx: object) -> StateCommand:
    return StateCommand().update(StepRequest, _Exclude(name))


def _include_only(names: tuple[str, ...], ctx: object) -> StateCommand:
    return StateCommand().update(StepRequest, _IncludeOnly(tuple(names)))


def _override(params: dict[str, Any], ctx: object) -> StateCommand:
    return StateCommand().update(StepRequest, _Override(dict(params)))


HANDLERS: Mapping[type[ScheduledActionSpec[Any]], Callable[[Any, Any], StateCommand]] = {
    ExcludeTool: _exclude,
    IncludeOnlyTools: _include_only,
    SetInferenceOverride: _override,
}
"""The handler of each loop action, registered by the Agent's own plugin."""
