"""State declared for LangGraph, EvoFabric and Jianmu, run unchanged by one Agent.

Three state classes as each framework's users write them, each compiled by `StateSchema`,
each written by its own style of node. The agent runs twice on a thread saved to SQLite;
then a new agent on the same file reads the thread back and checks its journal.

Run: .venv/bin/python docs/examples/migrating.py
"""

from __future__ import annotations

import asyncio
import operator
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pydantic
from pydantic import BaseModel, Field

from statekernel import (
    Agent,
    Ephemeral,
    KeyScope,
    Message,
    Phase,
    Plugin,
    PluginRegistrar,
    RemoveMessage,
    ScriptedModel,
    StateSchema,
    StateUpdater,
    add_messages,
)
from statekernel.stores import SqliteThreadStore

# -- LangGraph: a TypedDict, add_messages, nodes returning dicts ---------------------------


class AgentState(TypedDict):
    messages: Annotated[Sequence[Message], add_messages]
    summary: str


graph = StateSchema(AgentState, prefix="graph", scope=KeyScope.THREAD)


def answer(state: AgentState) -> dict[str, Any]:
    turn = len(state["messages"]) // 2
    return {"messages": [("user", f"question {turn}"), {"role": "assistant", "content": "ok"}]}


def trim(state: AgentState) -> dict[str, Any]:
    old = state["messages"][:-2]  # keep the last exchange, as a summarising node would
    return {"messages": [RemoveMessage(m.id or "") for m in old], "summary": f"{len(old)} trimmed"}


# -- EvoFabric: a registered updater, named by string ---------------------------------------


@StateUpdater.register("examples.append_list")
def append_list(old: list[str], new: list[str]) -> list[str]:
    return [*old, *new]


Trajectory = pydantic.create_model(  # EvoFabric's generate_state_schema, spelled with pydantic
    "Trajectory",
    steps=(Annotated[list[str], "examples.append_list"], Field(default_factory=list)),
    user_name=(Annotated[str, "overwrite"], "unknown"),
)
evo = StateSchema(Trajectory, prefix="evo", scope=KeyScope.THREAD)


# -- Jianmu: a pydantic schema with reducers, Ephemeral fields and constraints ---------------


class ReActState(BaseModel):
    rounds: Annotated[int, operator.add, Field(ge=0, le=100)] = 0
    done: Annotated[bool, Ephemeral("run")] = False


react = StateSchema(ReActState, prefix="react", scope=KeyScope.THREAD)


class Nodes(Plugin):
    id = "nodes"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_phase_hook(Phase.STEP_START, graph.hook(answer))
        registrar.register_phase_hook(Phase.STEP_END, graph.hook(trim))
        registrar.register_phase_hook(
            Phase.STEP_END, lambda ctx: evo.command(steps=["step"], user_name="ada")
        )
        registrar.register_phase_hook(
            Phase.STEP_END, lambda ctx: react.command(rounds=1, done=True)
        )


def plugins() -> list[Plugin]:
    return [graph.plugin, evo.plugin, react.plugin, Nodes()]


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "threads.db"
        async with SqliteThreadStore(path) as store:
            agent = Agent(plugins(), ScriptedModel([]), thread_store=store)
            for _ in range(2):
                result = await agent.run("thread-1", "go")
            state = graph.view(result.snapshot)
            print("LangGraph messages:", [(m.id, m.content) for m in state["messages"]])
            print("LangGraph summary: ", state["summary"])
            print("EvoFabric state:   ", evo.view(result.snapshot))
            print("Jianmu state:      ", react.view(result.snapshot))
        async with SqliteThreadStore(path) as store:  # as a new process would
            again = Agent(plugins(), ScriptedModel([]), thread_store=store)
            restored = await again.kernel.state_at("thread-1", result.snapshot.revision)
            assert graph.view(restored) == state
            report = await again.kernel.verify("thread-1")
            print("restored from SQLite, journal verified:", report.ok)
            assert report.ok and not report.detail, report


if __name__ == "__main__":
    asyncio.run(main())
