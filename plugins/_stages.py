"""Stage workflows: "review before publish" as a runtime contract, not a line in the prompt.

Three parts, each enforced by the kernel rather than hoped for from the model:

1. The stage lives in a typed key, `StageKey[E]` over an Enum, declared with its legal
   transitions. It is a thread key by default: a document reviewed in one run is still
   reviewed in the next.
2. An update is a `Transition(from_, to)`: the stage it was built against and the stage it
   asks for. `apply` refuses a stale transition (`from_` is not the current stage) and an
   illegal one (`to` is not a legal next stage) by raising, so the whole commit is rejected
   (`CommitRejected`; a tool that sent it gets a tool error) and the stage is unchanged.
3. `StageWorkflow`, a plugin whose tool gate blocks each gated tool until the stage allows
   it, with a reason that tells the model the missing step ("publish needs stage REVIEWED
   (now DRAFT): call `review` first"). Tools that advance the stage return
   `ToolOutput(result, command)` carrying the transition; `StageWorkflow.tools` adds it for
   you.

The examples (a document's stages, a workflow over review and publish tools) are in the
docstrings of `StageKey` and `StageWorkflow`, which the API reference shows.
"""

from __future__ import annotations

import enum
import inspect
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Generic, TypeVar

import msgspec

from statekernel import (
    Block,
    InvalidDeclaration,
    KeyScope,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    Snapshot,
    StateCommand,
    StateKey,
    ToolOutput,
)

__all__ = ["IllegalTransition", "StageKey", "StageWorkflow", "Transition"]

E = TypeVar("E", bound=enum.Enum)

Tool = Callable[[dict[str, Any], PhaseContext], Any]


class Transition(msgspec.Struct, Generic[E], frozen=True):
    """Move a stage key from `from_` (the stage this was decided on) to `to`.

    `Transition(from_, to)`: the update type of a `StageKey`, holding the stage the change
    was decided at and the stage it asks for. A stale or illegal transition makes the key's
    `apply` raise `IllegalTransition`, so the commit is rejected and the stage is unchanged.

    See [stale and illegal transitions](howto-stage-workflow.md#stale-and-illegal-transitions).
    """

    from_: E
    to: E


class IllegalTransition(ValueError):
    """A transition that is stale or not allowed; `CommitRejected.cause` carries it.

    `IllegalTransition(key, current, transition, why)`: a `ValueError` raised by a stage
    key's `apply`. `key` is the key string, `current` the stage when it was refused,
    `transition` the `Transition` refused, and `why` the message.
    """

    def __init__(self, key: str, current: enum.Enum, transition: Transition[Any], why: str) -> None:
        self.key = key
        self.current = current
        self.transition = transition
        super().__init__(why)


class StageKey(StateKey[E, Transition[E]]):
    """A stage key over the Enum `E`; subclass as `StageKey[MyEnum]` with `key` and `transitions`.

    `transitions` maps each stage to the stages it may move to next (a stage that is no key is
    final). The initial stage is the Enum's first member unless the class sets `default`.
    Everything is checked when the class statement runs: a bad declaration raises
    `InvalidDeclaration`. The scope defaults to `KeyScope.THREAD`; set
    `scope = KeyScope.RUN` for a workflow that restarts every run. `stages` and `graph` are
    derived; `DocStage.advance(snapshot, to)` builds the command for
    `Transition(current, to)`.

    ```python
    import enum

    from statekernel.plugins import StageKey


    class Doc(enum.Enum):
        DRAFT = "draft"
        REVIEWED = "reviewed"
        PUBLISHED = "published"


    class DocStage(StageKey[Doc]):
        key = "doc.stage"
        transitions = {Doc.DRAFT: {Doc.REVIEWED}, Doc.REVIEWED: {Doc.PUBLISHED}}
    ```

    See [declare it](howto-stage-workflow.md#declare-it).
    """

    scope = KeyScope.THREAD
    transitions: ClassVar[Mapping[Any, Iterable[Any]]]
    stages: ClassVar[type[enum.Enum]]
    """The Enum of the stages (derived)."""
    graph: ClassVar[Mapping[Any, frozenset[Any]]]
    """`transitions`, checked and normalised to frozensets (derived)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        stages = _stage_enum(cls)
        if "key" in cls.__dict__ and stages is not None:
            cls.stages = stages
            cls.graph = _checked_graph(cls, stages)
            initial = getattr(cls, "default", None)
            if initial is None and not hasattr(cls, "default_factory"):
                cls.default = next(iter(stages))  # type: ignore[attr-defined]
            elif initial is not None and not isinstance(initial, stages):
                raise InvalidDeclaration(
                    cls.__qualname__,
                    f"`default` must be a {stages.__name__} member, got {initial!r}",
                    f"Set default = {stages.__name__}.<the initial stage>.",
                )
        super().__init_subclass__(**kwargs)

    @classmethod
    def apply(cls, value: E, update: Transition[E]) -> E:
        stages = cls.stages
        if not (isinstance(update.from_, stages) and isinstance(update.to, stages)):
            raise IllegalTransition(
                cls.key,
                value,
                update,
                f"transition {update!r} on {cls.key!r} must go between {stages.__name__} "
                f"members; build it with {cls.__name__}.advance(snapshot, {stages.__name__}.X).",
            )
        if update.from_ is not value:
            raise IllegalTransition(
                cls.key,
                value,
                update,
                f"stale transition {_show(update)} on {cls.key!r}: it was decided at stage "
                f"{update.from_.name}, but the stage is now {value.name}. Decide again from "
                f"the current stage ({cls.__name__}.advance(snapshot, ...)).",
            )
        legal = cls.graph.get(value, frozenset())
        if update.to not in legal:
            allowed = (
                f"from {value.name} the legal next stages are {_names(legal, cls.stages)}"
                if legal
                else f"{value.name} is a final stage"
            )
            raise IllegalTransition(
                cls.key,
                value,
                update,
                f"illegal transition {_show(update)} on {cls.key!r}: {allowed}.",
            )
        return update.to

    @classmethod
    def advance(cls, snapshot: Snapshot, to: E) -> StateCommand:
        """A command moving this stage from its value in `snapshot` to `to`."""
        return StateCommand().update(cls, Transition(snapshot.get(cls), to))


def _stage_enum(cls: type) -> type[enum.Enum] | None:
    """The Enum a StageKey subclass binds, or None while it is still generic."""
    for base in cls.__dict__.get("__orig_bases__", ()):
        origin = getattr(base, "__origin__", None)
        if isinstance(origin, type) and issubclass(origin, StageKey):
            (arg,) = base.__args__
            if isinstance(arg, type) and issubclass(arg, enum.Enum):
                return arg
            if isinstance(arg, TypeVar):
                return None
            raise InvalidDeclaration(
                cls.__qualname__,
                f"StageKey needs an Enum of stages, got {arg!r}",
                "Declare the stages as an enum.Enum and subclass StageKey[ThatEnum].",
            )
    inherited = getattr(cls, "stages", None)
    return inherited if isinstance(inherited, type) else None


def _checked_graph(cls: type, stages: type[enum.Enum]) -> Mapping[Any, frozenset[Any]]:
    owner = cls.__qualname__
    fix = (
        f"Map each {stages.__name__} member to the members it may move to, e.g. "
        f"transitions = {{{stages.__name__}.A: {{{stages.__name__}.B}}}}."
    )
    declared = getattr(cls, "transitions", None)
    if not isinstance(declared, Mapping):
        raise InvalidDeclaration(owner, f"`transitions` must be a mapping, got {declared!r}", fix)
    graph: dict[Any, frozenset[Any]] = {}
    for source, targets in declared.items():
        if isinstance(targets, stages) or not isinstance(targets, Iterable):
            raise InvalidDeclaration(
                owner, f"transitions[{source!r}] must be a set of stages, got {targets!r}", fix
            )
        nexts = frozenset(targets)
        for stage in (source, *nexts):
            if not isinstance(stage, stages):
                raise InvalidDeclaration(
                    owner, f"`transitions` mentions {stage!r}, not a {stages.__name__} member", fix
                )
        graph[source] = nexts
    return graph


def _show(transition: Transition[Any]) -> str:
    return f"{transition.from_.name} → {transition.to.name}"


def _names(stages: Iterable[enum.Enum], order: type[enum.Enum]) -> str:
    wanted = set(stages)
    return " or ".join(member.name for member in order if member in wanted)


class StageWorkflow(Plugin, Generic[E]):
    """Registers a stage key and gates tools on it.

    `StageWorkflow(key, *, requires=None, advances=None, id=None)`: plugin (`id` defaults to
    `f"stage_workflow:{key.key}"`). It registers `key` and a tool gate that blocks each
    gated tool until the stage allows it.

    `requires` maps a tool to the stage (or stages) in which it may run. `advances` maps a
    tool to the stage it moves to when it succeeds; such a tool also may run only where that
    move is legal (unless `requires` says otherwise), so it is blocked before it does
    anything rather than rejected after. Wrap the advancing tools with `tools()`.

    ```python
    from statekernel import Agent, InferenceResponse, ScriptedModel, tool
    from statekernel.plugins import StageWorkflow


    @tool
    def review(doc: str) -> str:
        "Review the document."
        return "looks good"


    @tool
    def publish(doc: str) -> str:
        "Publish the document."
        return "published"


    flow = StageWorkflow(DocStage, advances={"review": Doc.REVIEWED, "publish": Doc.PUBLISHED})
    tools = flow.tools({"review": review, "publish": publish})
    agent = Agent([flow], ScriptedModel([InferenceResponse(text="done")]), tools)
    ```

    A `key` that is not a concrete `StageKey`, or a stage that is not a member, raises
    `TypeError`. An `advances` target that no stage can reach, or a `requires` entry that
    names no stage, raises `ValueError`.

    See [what the gate does](howto-stage-workflow.md#what-the-gate-does).
    """

    def __init__(
        self,
        key: type[StageKey[E]],
        *,
        requires: Mapping[str, E | Iterable[E]] | None = None,
        advances: Mapping[str, E] | None = None,
        id: str | None = None,
    ) -> None:
        if not (isinstance(key, type) and issubclass(key, StageKey) and "graph" in vars(key)):
            raise TypeError(
                f"StageWorkflow needs a concrete StageKey subclass (with `key` and "
                f"`transitions`), got {key!r}"
            )
        self.key = key
        self.id = id or f"stage_workflow:{key.key}"
        self.advances: dict[str, E] = dict(advances or {})
        self.requires: dict[str, frozenset[E]] = {}
        for tool, target in self.advances.items():
            self._check_stage(tool, "advances", target)
            sources = frozenset(s for s, nexts in key.graph.items() if target in nexts)
            if not sources:
                raise ValueError(
                    f"{self.id}: advances[{tool!r}] is {target.name}, but no stage of "
                    f"{key.__name__} may move to {target.name}; fix `transitions` or `advances`."
                )
            self.requires[tool] = sources
        for tool, needed in (requires or {}).items():
            allowed = frozenset((needed,) if isinstance(needed, enum.Enum) else needed)
            for stage in allowed:
                self._check_stage(tool, "requires", stage)
            if not allowed:
                raise ValueError(f"{self.id}: requires[{tool!r}] names no stage")
            self.requires[tool] = allowed
        self._reasons: dict[str, dict[E, str]] = {
            tool: self._block_reasons(tool, allowed) for tool, allowed in self.requires.items()
        }

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(self.key)
        registrar.register_tool_gate(self.gate)

    def gate(self, ctx: PhaseContext) -> Block | None:
        """Block a gated tool while the stage does not allow it; no opinion on other tools."""
        assert ctx.tool_call is not None
        reasons = self._reasons.get(ctx.tool_call.name)
        if reasons is None:
            return None
        reason = reasons.get(ctx.snapshot.get(self.key))
        return None if reason is None else Block(reason)

    def tools(self, tools: Mapping[str, Tool]) -> dict[str, Tool]:
        """`tools`, with each tool named in `advances` made to carry its transition.

        The wrapped tool runs as before; when it returns, its output becomes
        `ToolOutput(result, command)` where the command is the tool's own (if it returned a
        ToolOutput with one) followed by the transition from the stage the tool saw to its
        `advances` stage. A tool that raises moves nothing.
        """
        return {
            name: self._advancing(tool, self.advances[name]) if name in self.advances else tool
            for name, tool in tools.items()
        }

    def _advancing(self, tool: Tool, target: E) -> Tool:
        key = self.key

        async def advancing(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
            output = tool(arguments, ctx)
            if inspect.isawaitable(output):
                output = await output
            command = StateCommand()
            result = output
            if isinstance(output, ToolOutput):
                result = output.result
                if output.command is not None:
                    command.extend(output.command)
            command.update(key, Transition(ctx.snapshot.get(key), target))
            return ToolOutput(result, command)

        advancing.__name__ = getattr(tool, "__name__", "tool")
        advancing.__doc__ = getattr(tool, "__doc__", None)
        # What the model is told, and whether a crash may re-run it, stay the tool's own.
        for attribute in ("spec", "idempotent"):
            if hasattr(tool, attribute):
                setattr(advancing, attribute, getattr(tool, attribute))
        return advancing

    def _check_stage(self, tool: str, table: str, stage: object) -> None:
        if not isinstance(stage, self.key.stages):
            raise TypeError(
                f"{self.id}: {table}[{tool!r}] must be a {self.key.stages.__name__} member, "
                f"got {stage!r}"
            )

    def _block_reasons(self, tool: str, allowed: frozenset[E]) -> dict[E, str]:
        """The Block reason for `tool` at each stage that does not allow it, worked out once
        so the gate itself is a dictionary lookup."""
        reasons: dict[E, str] = {}
        stages: Iterable[E] = self.key.stages
        for current in stages:
            if current in allowed:
                continue
            needs = f"{tool} needs stage {_names(allowed, self.key.stages)} (now {current.name})"
            path = self._path(current, allowed)
            if path is None:
                reasons[current] = f"{needs}, which cannot be reached from {current.name}"
            else:
                reasons[current] = f"{needs}: {self._hint(current, path)}"
        return reasons

    def _path(self, start: E, goals: frozenset[E]) -> list[E] | None:
        """The stages after `start` on a shortest path to any of `goals` (breadth first)."""
        previous: dict[E, E | None] = {start: None}
        queue = deque([start])
        while queue:
            stage = queue.popleft()
            if stage in goals:
                path: list[E] = []
                at: E | None = stage
                while at is not None and at is not start:
                    path.append(at)
                    at = previous[at]
                return path[::-1]
            for following in sorted(self.key.graph.get(stage, ()), key=_definition_order):
                if following not in previous:
                    previous[following] = stage
                    queue.append(following)
        return None

    def _hint(self, current: E, path: list[E]) -> str:
        steps: list[str] = []
        for stage in path:
            tools = sorted(tool for tool, target in self.advances.items() if target is stage)
            if not tools:
                break
            steps.append(" or ".join(f"`{tool}`" for tool in tools))
        if not steps:
            return f"the stage must first move {current.name} → {path[0].name}"
        return f"call {steps[0]} first" + "".join(f", then {step}" for step in steps[1:])


def _definition_order(stage: enum.Enum) -> int:
    return list(type(stage)).index(stage)
