"""The journal's promises under any sequence of runs, checks and saves, by property and SIGKILL.

Whatever was saved loads back exactly, every saved revision can be travelled to, the history
has one record per revision with no gap, and `verify` agrees."""

from __future__ import annotations

import asyncio
import functools
import random
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from samples import Keys

from statekernel import (
    Kernel,
    KeyScope,
    MergeStrategy,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScheduledActionSpec,
    StateCommand,
    StateKey,
    ThreadStore,
    ToolCall,
    ToolOutput,
    Vector,
)
from statekernel.stores import MemoryThreadStore, SqliteThreadStore


class Count(StateKey[int, int]):
    key = "p.count"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Log(StateKey[Vector[str], tuple[str, ...]]):
    key = "p.log"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[str], update: tuple[str, ...]) -> Vector[str]:
        return value.extend(update)


class Mood(StateKey[str, str]):
    key = "p.mood"
    scope = KeyScope.THREAD


op = st.one_of(
    st.tuples(st.just("count"), st.integers(-5, 5)),
    st.tuples(st.just("log"), st.lists(st.text(max_size=3), max_size=3).map(tuple)),
    st.tuples(st.just("mood"), st.text(max_size=4)),
    st.tuples(st.just("clear"), st.sampled_from([Count, Log, Mood])),
)
step = st.tuples(st.lists(op, max_size=3), st.booleans())  # a command, then a checkpoint?
run_plan = st.tuples(st.lists(step, max_size=6), st.sampled_from(["finish", "abandon", "suspend"]))
program = st.lists(run_plan, min_size=1, max_size=5)


def command_of(ops: list[tuple[str, Any]]) -> StateCommand:
    command = StateCommand()
    for kind, arg in ops:
        if kind == "count":
            command.update(Count, arg)
        elif kind == "log":
            command.update(Log, arg)
        elif kind == "mood":
            command.update(Mood, arg)
        else:
            command.clear(arg)
    return command


def _remember(into: dict[int, dict[str, Any]], snapshot: Any) -> None:
    into[snapshot.revision] = snapshot.to_dict()


async def play(store: ThreadStore | None, plan: list[Any], snapshot_every: int) -> None:
    kernel = Kernel([Keys(Count, Log, Mood)], thread_store=store, snapshot_every=snapshot_every)
    saved: dict[int, dict[str, Any]] = {0: {}}  # the state at every saved revision
    head = 0
    for steps, ending in plan:
        # a run suspended by the previous plan is resumed, else a new one starts
        if await kernel.suspension("t") is not None:
            run, _ = await kernel.resume_run("t")
        else:
            run = await kernel.start_run("t")
        unsaved: dict[int, dict[str, Any]] = {}
        run.add_commit_listener(functools.partial(_remember, unsaved))
        for ops, checkpoint in steps:
            await run.submit(command_of(ops))
            if checkpoint:
                await run.checkpoint()
                saved.update(unsaved)
                unsaved.clear()
                head = run.revision
        if ending == "abandon":
            await run.abandon()
        else:
            await (run.finish() if ending == "finish" else run.suspend())
            saved.update(unsaved)
            head = run.revision
        for revision in [r for r in saved if r > head]:
            del saved[revision]  # abandoned: those revisions are given out again

    fresh = Kernel([Keys(Count, Log, Mood)], thread_store=store) if store is not None else kernel
    if head:
        history = await fresh.history("t")
        assert [record.revision for record in history] == list(range(1, head + 1))
        report = await fresh.verify("t")
        assert report.ok, report.detail
        assert report.revision == head
    for revision, expected in saved.items():
        if revision or head:
            snapshot = await fresh.state_at("t", revision)
            assert snapshot.to_dict() == expected, revision
    if await fresh.suspension("t") is not None:
        run, _ = await fresh.resume_run("t")
    else:
        run = await fresh.start_run("t")
    assert run.revision == head and run.snapshot.to_dict() == saved[head]
    await run.abandon()


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=program, snapshot_every=st.integers(1, 4))
def test_any_sequence_of_runs_loads_travels_and_verifies_in_memory(
    plan: list[Any], snapshot_every: int
) -> None:
    asyncio.run(play(None, plan, snapshot_every))
    asyncio.run(play(MemoryThreadStore(), plan, snapshot_every))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=program, snapshot_every=st.integers(1, 4))
def test_any_sequence_of_runs_loads_travels_and_verifies_on_sqlite(
    plan: list[Any], snapshot_every: int
) -> None:
    async def on_file() -> None:
        with tempfile.TemporaryDirectory() as folder:
            async with SqliteThreadStore(Path(folder) / "p.db") as store:
                await play(store, plan, snapshot_every)

    asyncio.run(on_file())


# -- killed at a random point ---------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {tests!r})
    from samples import Keys
    from test_journal_properties import Count, Log, Mood
    from statekernel import Kernel, StateCommand
    from statekernel.stores import SqliteThreadStore

    async def main():
        async with SqliteThreadStore({db!r}) as store:
            kernel = Kernel([Keys(Count, Log, Mood)], thread_store=store, snapshot_every=7)
            while True:
                run = await kernel.start_run("t")
                for i in range(5):
                    await run.submit(StateCommand().update(Count, 1).update(Log, (str(i),)))
                    await run.checkpoint()
                    print(run.revision, flush=True)  # acknowledged: saved
                await run.finish()

    asyncio.run(main())
    """
)


@pytest.mark.slow
def test_a_writer_killed_at_any_point_leaves_a_sound_verified_thread(tmp_path: Path) -> None:
    chance = random.Random(11)
    for trial in range(6):
        db = str(tmp_path / f"kill-{trial}.db")
        script = _WRITER.format(tests=str(Path(__file__).parent), db=db)
        writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert writer.stdout is not None
        acknowledged = 0
        for _ in range(chance.randint(3, 60)):
            acknowledged = int(writer.stdout.readline())
        writer.kill()  # SIGKILL: wherever it is, mid-save included
        writer.wait(timeout=30)
        with sqlite3.connect(db) as raw:
            assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)

        async def check(path: str = db, seen: int = acknowledged) -> None:
            async with SqliteThreadStore(path) as store:
                kernel = Kernel([Keys(Count, Log, Mood)], thread_store=store)
                run = await kernel.start_run("t")
                head = run.revision
                assert head >= seen  # nothing acknowledged is lost
                assert run.snapshot.get(Count) == head  # every commit added one
                await run.abandon()
                history = await kernel.history("t")
                assert [r.revision for r in history] == list(range(1, head + 1))
                assert (await kernel.verify("t")).ok

        asyncio.run(check())


# -- plugins, hooks that finish in any order, actions and tools ---------------------------------


class Note(ScheduledActionSpec[str]):
    key = "p.note"
    phase = Phase.STEP_END


class Turn(StateKey[int, int]):
    """A run key: journaled in memory only, never rebuilt by a load."""

    key = "p.turn"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Writer(Plugin):
    """One drawn hook: its phase, whether it is async and yields, and what it writes."""

    def __init__(self, index: int, plan: tuple[Phase, int, str, int]) -> None:
        self.id = f"writer-{index}"
        self.phase, self.delay, self.writes, self.amount = plan

    def register(self, r: PluginRegistrar) -> None:
        r.register_phase_hook(self.phase, self.hook if not self.delay else self.async_hook)

    def command(self, ctx: PhaseContext) -> StateCommand:
        command = StateCommand().update(Turn, 1)
        if self.writes == "count":
            command.update(Count, self.amount)
        elif self.writes == "log":
            command.update(Log, (f"{self.id}@{ctx.snapshot.revision}",))
        elif self.writes == "mood":  # EXCLUSIVE: two such hooks conflict and one re-runs
            command.update(Mood, f"{self.id} saw {ctx.snapshot.get(Count)}")
        else:
            command.schedule(Note, f"{self.id} noted")
        return command

    def hook(self, ctx: PhaseContext) -> StateCommand:
        return self.command(ctx)

    async def async_hook(self, ctx: PhaseContext) -> StateCommand:
        for _ in range(self.delay):  # finish in an order the draw decides
            await asyncio.sleep(0)
        return self.command(ctx)


class Everything(Plugin):
    id = "everything"

    def register(self, r: PluginRegistrar) -> None:
        for key in (Count, Log, Mood, Turn):
            r.register_key(key)
        r.register_action(Note, lambda text, ctx: StateCommand().update(Log, (text,)))


def tool(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
    return ToolOutput("ok", StateCommand().update(Count, int(arguments["n"])).update(Mood, "tool"))


hook_plan = st.tuples(
    st.sampled_from([Phase.STEP_START, Phase.STEP_END]),
    st.integers(0, 3),
    st.sampled_from(["count", "log", "mood", "note"]),
    st.integers(1, 3),
)
agent_step = st.tuples(st.booleans(), st.booleans())  # call the tool? checkpoint after?


async def play_with_plugins(
    store: ThreadStore | None, hooks: list[Any], runs: list[Any], snapshot_every: int
) -> None:
    plugins = [Everything(), *(Writer(i, plan) for i, plan in enumerate(hooks))]
    kernel = Kernel(plugins, thread_store=store, snapshot_every=snapshot_every)
    live: dict[int, dict[str, Any]] = {0: {}}
    for steps in runs:
        run = await kernel.start_run("t")
        run.add_commit_listener(functools.partial(_remember_thread, live))
        for number, (uses_tool, checkpoint) in enumerate(steps):
            await run.run_phase(Phase.STEP_START)
            if uses_tool:
                await run.handle_tool_call(
                    ToolCall(f"call-{number}", "adjust", {"n": number}), tool
                )
            await run.run_phase(Phase.STEP_END)
            if checkpoint:
                await run.checkpoint()
        await run.finish()
        head = run.revision
        fresh = Kernel(plugins, thread_store=store) if store is not None else kernel
        restored = await fresh.start_run("t")
        assert restored.snapshot.to_dict() == live[head]
        back_then = await fresh.state_at("t", head)
        assert restored.snapshot.state_hash() == back_then.state_hash()
        await restored.abandon()
        assert (await fresh.verify("t")).ok
        for revision in range(head + 1):
            assert (await fresh.state_at("t", revision)).to_dict() == live[revision], revision
        assert [r.revision for r in await fresh.history("t")] == list(range(1, head + 1))


def _remember_thread(into: dict[int, dict[str, Any]], snapshot: Any) -> None:
    into[snapshot.revision] = {k: v for k, v in snapshot.to_dict().items() if k != Turn.key}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hooks=st.lists(hook_plan, min_size=1, max_size=5),
    runs=st.lists(st.lists(agent_step, min_size=1, max_size=3), min_size=1, max_size=3),
    snapshot_every=st.integers(1, 5),
    where=st.sampled_from(["kernel memory", "memory store"]),
)
def test_any_plugins_with_async_hooks_actions_and_tools_journal_exactly(
    hooks: list[Any], runs: list[Any], snapshot_every: int, where: str
) -> None:
    store = MemoryThreadStore() if where == "memory store" else None
    asyncio.run(play_with_plugins(store, hooks, runs, snapshot_every))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hooks=st.lists(hook_plan, min_size=1, max_size=5),
    runs=st.lists(st.lists(agent_step, min_size=1, max_size=3), min_size=1, max_size=3),
    snapshot_every=st.integers(1, 5),
)
def test_any_plugins_with_async_hooks_actions_and_tools_journal_exactly_on_sqlite(
    hooks: list[Any], runs: list[Any], snapshot_every: int
) -> None:
    async def on_file() -> None:
        with tempfile.TemporaryDirectory() as folder:
            async with SqliteThreadStore(Path(folder) / "p.db") as store:
                await play_with_plugins(store, hooks, runs, snapshot_every)

    asyncio.run(on_file())
