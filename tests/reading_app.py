"""The application of the reading-command tests, handed to `statekernel show DB --app
reading_app:make_agent` (and the other reading commands) the way a user's module is.

Its own plugin, `Tally`, keeps thread keys whose updates mean nothing without its `apply`:
a counter an update adds to (its RUN_START hook adds 2) and a tuple of notes an update
appends to, and a run key that a store never journals. Beside it run built-in plugins with
keys of their own (run lifecycle, context injection, a stage workflow). The same
declarations are offered in every form `--app` takes: a plugin list (`PLUGINS`), a
zero-argument factory (`plugins`), a factory of the Stores returning an `Agent`
(`make_agent`, which the tests also write with), a `Kernel` (`KERNEL`) and an `AgentTeam`
whose roles split the plugins between them (`make_team`); and two it refuses. The keyed
forms (`make_keyed_agent`, `make_keyed_team`) are built with a `chain_key=`, which `--app`
hands the reader too.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from statekernel import (
    Agent,
    AgentTeam,
    InferenceResponse,
    Kernel,
    KeyScope,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    Role,
    ScriptedModel,
    StateCommand,
    StateKey,
    StateKeyOptions,
    Stores,
    ToolCall,
    ToolOutput,
)
from statekernel.plugins import ContextInjection, RunLifecycle, StageKey, StageWorkflow


class Counter(StateKey[int, int]):
    """Thread key: an update adds to it."""

    key = "tally.count"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Note(msgspec.Struct, frozen=True):
    author: str
    text: str


class Notes(StateKey[tuple[Note, ...], Note]):
    """Thread key: an update appends a note."""

    key = "tally.notes"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: tuple[Note, ...], update: Note) -> tuple[Note, ...]:
        return (*value, update)


class Scratch(StateKey[int, int]):
    """Run key: a store keeps no op of it, so its commits show no stored ops."""

    key = "tally.scratch"

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Draft(enum.Enum):
    DRAFT = "draft"
    REVIEWED = "reviewed"


class DraftStage(StageKey[Draft]):
    key = "tally.stage"
    transitions = {Draft.DRAFT: {Draft.REVIEWED}}


WORKFLOW = StageWorkflow(DraftStage, advances={"review": Draft.REVIEWED})


class Tally(Plugin):
    id = "tally"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Counter)
        registrar.register_key(Notes)
        registrar.register_key(Scratch)
        registrar.register_phase_hook(Phase.RUN_START, self.started)
        registrar.register_phase_hook(Phase.STEP_START, self.stepped)

    def started(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Counter, 2)

    def stepped(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Scratch, 1)


def note(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
    added = Note(str(arguments["author"]), str(arguments["text"]))
    return ToolOutput("noted", StateCommand().update(Notes, added).update(Counter, 1))


def review(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    return f"reviewed {len(ctx.snapshot.get(Notes))} notes"


def call(call_id: str, name: str, **arguments: Any) -> InferenceResponse:
    return InferenceResponse(tool_calls=(ToolCall(call_id, name, arguments),))


SCRIPT = [
    call("c1", "note", author="ana", text="counters add up"),
    call("c2", "note", author="bo", text="notes append"),
    InferenceResponse(text="two notes"),
    call("c3", "review"),
    call("c4", "note", author="ana", text="reviewed: 数え上げ"),
    InferenceResponse(text="reviewed"),
]
"""Two runs: the first takes three answers, the second the rest."""


def plugins() -> list[Plugin]:
    return [RunLifecycle(), ContextInjection(), WORKFLOW, Tally()]


PLUGINS = plugins()


def make_agent(stores: Stores, chain_key: bytes | None = None) -> Agent:
    return Agent(
        plugins(),
        ScriptedModel(list(SCRIPT)),
        WORKFLOW.tools({"note": note, "review": review}),
        stores=stores,
        chain_key=chain_key,
    )


CHAIN_KEY = bytes(range(32))
"""The key of the keyed application: its threads are read only with it."""


def make_keyed_agent(stores: Stores) -> Agent:
    """The application built with its own `chain_key=`: `--app` gives the reader the key."""
    return make_agent(stores, CHAIN_KEY)


def make_keyed_team(stores: Stores) -> AgentTeam:
    """The same key given to a team: every role's agent chains with it."""
    return AgentTeam(
        {"counter": Role(plugins=plugins(), model=ScriptedModel([]))},
        stores=stores,
        chain_key=CHAIN_KEY,
    )


KERNEL = Kernel(plugins())


def make_team(stores: Stores) -> AgentTeam:
    """Each role has some of the plugins: a thread of either is read with their union."""
    model = ScriptedModel([])
    return AgentTeam(
        {
            "counter": Role(plugins=[Tally()], model=model),
            "staged": Role(plugins=[RunLifecycle(), ContextInjection(), WORKFLOW], model=model),
        },
        stores=stores,
    )


class _LooseTally(Tally):
    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Counter, StateKeyOptions(persistent=False))


def clashing_team(stores: Stores) -> AgentTeam:
    """Two roles that register `tally.count` differently: refused."""
    model = ScriptedModel([])
    return AgentTeam(
        {"kept": Role(plugins=[Tally()]), "loose": Role(plugins=[_LooseTally()])},
        model=model,
        stores=stores,
    )


NOT_AN_APP = 42
