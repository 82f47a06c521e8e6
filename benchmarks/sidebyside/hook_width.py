"""Hook width: what one step costs when W hooks (1, 4, 16) each write to it.

Every hook adds 1 to a commutative counter and appends its index to a log; a sample is P
steps from an empty state. Sync and async hooks are separate cases.

- statekernel: W plugins, each a STEP_START hook returning
  `StateCommand().update(Count, 1).update(Log, index)` (the keys and plugins of
  benchmarks/phase_overhead.py); a step is `await run.run_phase(Phase.STEP_START)`.
- floor: a dict and a loop: W plain functions (or coroutines) return the two updates, and
  the loop applies them with the same reducers (`Count.apply`, `Log.apply`).
- langgraph: a StateGraph with `count: Annotated[int, operator.add]` and
  `log: Annotated[list, operator.add]`, W nodes from START in parallel, each to END; a step
  is one `invoke` (`ainvoke` with async nodes) given the previous step's state.
- evofabric: a GraphBuilder graph whose state fields name registered updaters (add,
  extend); a step is one `await engine.run(state)` given the previous state. The W nodes
  run in a chain, not in parallel: see NOTE_EVOFABRIC.

Every side must end with count == W * P and the log holding each index P times.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import itertools
import operator
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypedDict

from phase_overhead import Count, Keys, Log, Writer

from sidebyside import evofabric_support
from sidebyside.harness import SIDES, Metrics, Row, Settings, build_cell, expect, run_cells
from statekernel import Kernel, Phase, Plugin, Vector

NAME = "hook_width"
MODES = ("sync", "async")

NOTE_EVOFABRIC = (
    "W nodes in a chain, not in parallel: EvoFabric's fan-in merges the branches' whole "
    "states with the fields' updaters, so a counter at C before the step would end at "
    "W*(C+1), not C+W"
)
NOTE_LANGGRAPH = "W parallel nodes from START, state passed from invoke to invoke"
NOTE_FLOOR = "W plain calls returning the updates, applied to a dict by the same reducers"


def widths(settings: Settings) -> list[int]:
    return [1, 4] if settings.quick else [1, 4, 16]


def steps(settings: Settings) -> int:
    return 10 if settings.quick else 100


def check(side: str, count: int, log: list[int], width: int, phases: int) -> None:
    expect(count == width * phases, f"{side}: count {count}, expected {width * phases}")
    expected = Counter({index: phases for index in range(width)})
    expect(Counter(log) == expected, f"{side}: log holds {Counter(log)}, expected {expected}")


def metrics(seconds: float, width: int, phases: int) -> Metrics:
    per_phase = seconds / phases * 1e6
    return {"us_per_phase": per_phase, "us_per_write": per_phase / width}


# --- statekernel -----------------------------------------------------------------------


def statekernel_sample(width: int, is_async: bool, phases: int) -> Callable[[], Metrics]:
    plugins: list[Plugin] = [Keys(), *(Writer(i, is_async) for i in range(width))]
    kernel = Kernel(plugins)

    async def sample() -> Metrics:
        run = await kernel.start_run("hook-width")
        gc.collect()
        start = time.perf_counter()
        for _ in range(phases):
            await run.run_phase(Phase.STEP_START)
        seconds = time.perf_counter() - start
        check("statekernel", run.snapshot.get(Count), list(run.snapshot.get(Log)), width, phases)
        await run.finish()
        return metrics(seconds, width, phases)

    return lambda: asyncio.run(sample())


# --- floor -----------------------------------------------------------------------------

Update = tuple[tuple[str, Any], ...]


def floor_sample(width: int, is_async: bool, phases: int) -> Callable[[], Metrics]:
    reducers: dict[str, Callable[[Any, Any], Any]] = {"count": Count.apply, "log": Log.apply}

    def hook(index: int) -> Callable[[], Update]:
        return lambda: (("count", 1), ("log", index))

    def async_hook(index: int) -> Callable[[], Awaitable[Update]]:
        async def call() -> Update:
            return (("count", 1), ("log", index))

        return call

    def run_sync() -> Metrics:
        hooks = [hook(i) for i in range(width)]
        state: dict[str, Any] = {"count": 0, "log": Vector()}
        gc.collect()
        start = time.perf_counter()
        for _ in range(phases):
            for call in hooks:
                for name, update in call():
                    state[name] = reducers[name](state[name], update)
        seconds = time.perf_counter() - start
        check("floor", state["count"], list(state["log"]), width, phases)
        return metrics(seconds, width, phases)

    async def run_async() -> Metrics:
        hooks = [async_hook(i) for i in range(width)]
        state: dict[str, Any] = {"count": 0, "log": Vector()}
        gc.collect()
        start = time.perf_counter()
        for _ in range(phases):
            for call in hooks:
                for name, update in await call():
                    state[name] = reducers[name](state[name], update)
        seconds = time.perf_counter() - start
        check("floor", state["count"], list(state["log"]), width, phases)
        return metrics(seconds, width, phases)

    return (lambda: asyncio.run(run_async())) if is_async else run_sync


# --- LangGraph -------------------------------------------------------------------------


class LangGraphState(TypedDict):
    count: Annotated[int, operator.add]
    log: Annotated[list[int], operator.add]


def langgraph_sample(width: int, is_async: bool, phases: int) -> Callable[[], Metrics]:
    from langgraph.graph import END, START, StateGraph

    builder: Any = StateGraph(LangGraphState)
    for index in range(width):
        builder.add_node(f"hook{index}", _peer_node(index, is_async))
        builder.add_edge(START, f"hook{index}")
        builder.add_edge(f"hook{index}", END)
    graph = builder.compile()

    def run_sync() -> Metrics:
        state: dict[str, Any] = {"count": 0, "log": []}
        gc.collect()
        start = time.perf_counter()
        for _ in range(phases):
            state = graph.invoke(state)
        seconds = time.perf_counter() - start
        check("langgraph", state["count"], state["log"], width, phases)
        return metrics(seconds, width, phases)

    async def run_async() -> Metrics:
        state: dict[str, Any] = {"count": 0, "log": []}
        gc.collect()
        start = time.perf_counter()
        for _ in range(phases):
            state = await graph.ainvoke(state)
        seconds = time.perf_counter() - start
        check("langgraph", state["count"], state["log"], width, phases)
        return metrics(seconds, width, phases)

    return (lambda: asyncio.run(run_async())) if is_async else run_sync


def _peer_node(index: int, is_async: bool) -> Callable[[Any], Any]:
    """A node for either peer: both take the state and return the fields' updates."""

    def node(state: Any) -> dict[str, Any]:
        return {"count": 1, "log": [index]}

    async def async_node(state: Any) -> dict[str, Any]:
        return {"count": 1, "log": [index]}

    return async_node if is_async else node


# --- EvoFabric -------------------------------------------------------------------------


def evofabric_sample(width: int, is_async: bool, phases: int) -> Callable[[], Metrics]:
    from evofabric.core.graph import GraphBuilder

    evofabric_support.prepare()
    builder = GraphBuilder(state_schema=evofabric_support.schema("HookWidthState"))
    for index in range(width):
        builder.add_node(f"hook{index}", _peer_node(index, is_async))
        if index:
            builder.add_edge(f"hook{index - 1}", f"hook{index}")
    builder.set_entry_point("hook0")
    engine = builder.build()

    async def sample() -> Metrics:
        state: Any = {"count": 0, "log": []}
        gc.collect()
        start = time.perf_counter()
        for _ in range(phases):
            state = await engine.run(state)
        seconds = time.perf_counter() - start
        check("evofabric", state["count"], state["log"], width, phases)
        return metrics(seconds, width, phases)

    return lambda: asyncio.run(sample())


# --- the workload ----------------------------------------------------------------------

BUILDERS: dict[str, Callable[[int, bool, int], Callable[[], Metrics]]] = {
    "statekernel": statekernel_sample,
    "floor": floor_sample,
    "langgraph": langgraph_sample,
    "evofabric": evofabric_sample,
}
NOTES = {"floor": NOTE_FLOOR, "langgraph": NOTE_LANGGRAPH, "evofabric": NOTE_EVOFABRIC}


def run(settings: Settings) -> list[Row]:
    phases = steps(settings)
    cells = [
        build_cell(
            NAME,
            {"mode": mode, "width": width, "steps": phases},
            side,
            functools.partial(BUILDERS[side], width, mode == "async", phases),
            note=NOTES.get(side, ""),
        )
        for mode, width, side in itertools.product(MODES, widths(settings), SIDES)
    ]
    return run_cells(NAME, cells, settings)
