"""State size: does a step cost more when more state is held?

A step adds 1 to a counter and appends the counter's value to a log. Beside them the state
holds K untouched int keys (K = 10, 100, 1,000, 10,000, with a 10-item log), or the log
holds N items (N = 10, 1,000, 100,000, with K = 10). A sample seeds the state, collects
garbage and takes two warm-up steps (all untimed), then times S steps. The figure per series
is the ratio of the largest case's step to the smallest's.

- statekernel: K registered keys seeded by one `run.submit`, a COMMUTATIVE counter, a
  COMMUTATIVE `Vector[int]` log (extended); one STEP_START hook reads the counter from its
  snapshot and returns the two updates; a step is `await run.run_phase(Phase.STEP_START)`.
- floor: a dict holding the same values, and the same two reducers applied in a loop.
- langgraph: a StateGraph whose TypedDict (built with the K keys) has `count` and `log`
  with `operator.add`, one node, compiled with `InMemorySaver`, the way LangGraph holds
  state between invocations; seeded with `update_state`; a step is `invoke({}, config)` on
  the thread.
- evofabric: a GraphBuilder graph with the same fields (updaters add, extend, and
  overwrite for the held keys, which EvoFabric otherwise drops); EvoFabric holds no state
  between runs, so a step is `await engine.run(state)` given the previous state.

Every side must end with count == S + 2, the log == [0..N-1] + [0..S+1] and key i == i.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import itertools
import operator
import time
import types
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from sidebyside import evofabric_support
from sidebyside.harness import SIDES, Metrics, Row, Settings, build_cell, expect, run_cells
from statekernel import (
    Kernel,
    MergeStrategy,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    StateCommand,
    StateKey,
    Vector,
)

NAME = "state_size"
SMALL = 10
WARMUP = 2

NOTES = {
    "floor": "the same values in a dict, the same reducers in a loop",
    "langgraph": "InMemorySaver holds the state between invokes",
    "evofabric": "no store between runs: the state is passed from run to run",
}


def cases(settings: Settings) -> list[tuple[int, int]]:
    """(held keys, log items): the keys series at SMALL items, the log series at SMALL keys."""
    keys, items = (
        ([10, 100], [10, 1_000])
        if settings.quick
        else ([10, 100, 1_000, 10_000], [10, 1_000, 100_000])
    )
    return [(k, SMALL) for k in keys] + [(SMALL, n) for n in items if n != SMALL]


def steps(settings: Settings) -> int:
    return 3 if settings.quick else 10


def check(
    side: str, count: int, log: list[int], held: dict[str, int], k: int, n: int, s: int
) -> None:
    """The state after the warm-up steps and `s` timed ones."""
    s += WARMUP
    expect(count == s, f"{side}: count {count}, expected {s}")
    expected = [*range(n), *range(s)]
    expect(
        log == expected, f"{side}: the log has {len(log)} items, not the {len(expected)} expected"
    )
    wrong = [name for i, name in enumerate(held_names(k)) if held.get(name) != i]
    expect(not wrong and len(held) == k, f"{side}: held keys wrong or missing: {wrong[:5]}")


@functools.cache
def held_names(k: int) -> tuple[str, ...]:
    return tuple(f"k{i}" for i in range(k))


def per_step(seconds: float, s: int) -> Metrics:
    return {"us_per_step": seconds / s * 1e6}


# --- statekernel -----------------------------------------------------------------------


def _add(value: int, update: int) -> int:
    return value + update


def _extend(value: Vector[int], update: tuple[int, ...]) -> Vector[int]:
    return value.extend(update)


class SizeCount(StateKey[int, int]):
    key = "suite.size.count"
    merge = MergeStrategy.COMMUTATIVE
    apply = staticmethod(_add)


class SizeLog(StateKey[Vector[int], tuple[int, ...]]):
    key = "suite.size.log"
    merge = MergeStrategy.COMMUTATIVE
    apply = staticmethod(_extend)


@functools.cache
def held_keys(k: int) -> tuple[type[StateKey[int, int]], ...]:
    """K plain int keys; one list, cut to size, so that each class is made once."""
    if k < 10_000:
        return held_keys(10_000)[:k]

    def key(index: int) -> type[StateKey[int, int]]:
        def body(namespace: dict[str, Any]) -> None:
            namespace.update(key=f"suite.size.k{index}")

        return types.new_class(f"Held{index}", (StateKey[int, int],), {}, body)

    return tuple(key(i) for i in range(k))


class SizePlugin(Plugin):
    id = "suite-state-size"

    def __init__(self, keys: tuple[type[StateKey[int, int]], ...]) -> None:
        self.keys = keys

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(SizeCount)
        registrar.register_key(SizeLog)
        for key in self.keys:
            registrar.register_key(key)
        registrar.register_phase_hook(Phase.STEP_START, self.step)

    def step(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(SizeCount, 1).update(SizeLog, (ctx.snapshot.get(SizeCount),))


def statekernel_sample(k: int, n: int, s: int) -> Callable[[], Metrics]:
    keys = held_keys(k)
    kernel = Kernel([SizePlugin(keys)])

    async def sample() -> Metrics:
        run = await kernel.start_run("state-size")
        seed = StateCommand().update(SizeLog, tuple(range(n)))
        for index, key in enumerate(keys):
            seed.update(key, index)
        await run.submit(seed)
        gc.collect()
        for _ in range(WARMUP):
            await run.run_phase(Phase.STEP_START)
        start = time.perf_counter()
        for _ in range(s):
            await run.run_phase(Phase.STEP_START)
        seconds = time.perf_counter() - start
        snapshot = run.snapshot
        held = {f"k{i}": snapshot.get(key) for i, key in enumerate(keys)}
        check("statekernel", snapshot.get(SizeCount), list(snapshot.get(SizeLog)), held, k, n, s)
        await run.finish()
        return per_step(seconds, s)

    return lambda: asyncio.run(sample())


# --- floor -----------------------------------------------------------------------------


def floor_sample(k: int, n: int, s: int) -> Callable[[], Metrics]:
    def sample() -> Metrics:
        state: dict[str, Any] = {"count": 0, "log": Vector(range(n))}
        state.update({name: i for i, name in enumerate(held_names(k))})

        def step() -> None:
            count = state["count"]
            state["count"] = SizeCount.apply(count, 1)
            state["log"] = SizeLog.apply(state["log"], (count,))

        gc.collect()
        for _ in range(WARMUP):
            step()
        start = time.perf_counter()
        for _ in range(s):
            step()
        seconds = time.perf_counter() - start
        held = {name: state[name] for name in held_names(k)}
        check("floor", state["count"], list(state["log"]), held, k, n, s)
        return per_step(seconds, s)

    return sample


# --- LangGraph -------------------------------------------------------------------------


def langgraph_sample(k: int, n: int, s: int) -> Callable[[], Metrics]:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    fields: dict[str, Any] = {
        "count": Annotated[int, operator.add],
        "log": Annotated[list[int], operator.add],
    }
    fields.update({name: int for name in held_names(k)})
    builder: Any = StateGraph(TypedDict("SizeState", fields))  # type: ignore[operator]
    builder.add_node("step", _step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    saver = InMemorySaver()
    graph = builder.compile(checkpointer=saver)
    threads = itertools.count()

    def sample() -> Metrics:
        thread = f"state-size-{next(threads)}"
        config = {"configurable": {"thread_id": thread}}
        seed: dict[str, Any] = {"count": 0, "log": list(range(n))}
        seed.update({name: i for i, name in enumerate(held_names(k))})
        graph.update_state(config, seed, as_node="step")
        gc.collect()
        for _ in range(WARMUP):
            graph.invoke({}, config)
        start = time.perf_counter()
        for _ in range(s):
            graph.invoke({}, config)
        seconds = time.perf_counter() - start
        state = graph.get_state(config).values
        held = {name: state[name] for name in held_names(k) if name in state}
        check("langgraph", state["count"], state["log"], held, k, n, s)
        saver.delete_thread(thread)
        return per_step(seconds, s)

    return sample


def _step(state: Any) -> dict[str, Any]:
    return {"count": 1, "log": [state["count"]]}


# --- EvoFabric -------------------------------------------------------------------------


def evofabric_sample(k: int, n: int, s: int) -> Callable[[], Metrics]:
    from evofabric.core.graph import GraphBuilder

    evofabric_support.prepare()
    builder = GraphBuilder(state_schema=evofabric_support.schema("SizeState", held=k))
    builder.add_node("step", _step)
    builder.set_entry_point("step")
    engine = builder.build()

    async def sample() -> Metrics:
        state: Any = {"count": 0, "log": list(range(n))}
        state.update({name: i for i, name in enumerate(held_names(k))})
        gc.collect()
        for _ in range(WARMUP):
            state = await engine.run(state)
        start = time.perf_counter()
        for _ in range(s):
            state = await engine.run(state)
        seconds = time.perf_counter() - start
        held = {name: state[name] for name in held_names(k) if name in state}
        check("evofabric", state["count"], state["log"], held, k, n, s)
        return per_step(seconds, s)

    return lambda: asyncio.run(sample())


# --- the workload ----------------------------------------------------------------------

BUILDERS: dict[str, Callable[[int, int, int], Callable[[], Metrics]]] = {
    "statekernel": statekernel_sample,
    "floor": floor_sample,
    "langgraph": langgraph_sample,
    "evofabric": evofabric_sample,
}


def run(settings: Settings) -> list[Row]:
    s = steps(settings)
    cells = [
        build_cell(
            NAME,
            {"keys": k, "log": n, "steps": s},
            side,
            functools.partial(BUILDERS[side], k, n, s),
            note=NOTES.get(side, ""),
        )
        for (k, n), side in itertools.product(cases(settings), SIDES)
    ]
    return run_cells(NAME, cells, settings)
