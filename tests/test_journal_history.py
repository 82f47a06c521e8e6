"""The journal's history: a record per commit that moved the revision, its sources and ops."""

from __future__ import annotations

import datetime
import gc
import logging
import weakref
from typing import Any

import msgspec
import pytest
from journal_samples import Count, Jot, Log, Mood, Notes, Score, Step, Total, plugins
from samples import Hook, Keys, commit_all, read

from statekernel import (
    Kernel,
    KeyScope,
    Phase,
    Plugin,
    PluginRegistrar,
    RevisionConflict,
    ScheduledActionSpec,
    StateCommand,
    StateError,
    StateKey,
    StateKeyOptions,
    ThreadStore,
    ToolCall,
    ToolOutput,
    UnknownThread,
)

# -- records and their sources -------------------------------------------------------------


class Note(ScheduledActionSpec[str]):
    key = "j.note"
    phase = Phase.STEP_END


class Noter(Plugin):
    id = "noter"

    def register(self, r: PluginRegistrar) -> None:
        r.register_action(Note, lambda text, ctx: StateCommand().update(Log, (text,)))


async def test_every_commit_that_moves_the_revision_is_one_record_with_its_sources(
    thread_store_or_none: ThreadStore | None,
) -> None:
    hooks = [
        Hook("a", Phase.STEP_START, lambda ctx: StateCommand().update(Count, 1)),
        Hook(
            "b",
            Phase.STEP_START,
            lambda ctx: StateCommand().update(Count, 2).schedule(Note, "from b"),
        ),
        Hook(
            "c", Phase.STEP_END, lambda ctx: StateCommand().update(Step, ctx.run.run_id.count("r"))
        ),
    ]
    kernel = Kernel(plugins(*hooks, Noter()), thread_store=thread_store_or_none)
    run = await kernel.start_run("t")
    await run.run_phase(Phase.STEP_START)
    await run.run_phase(Phase.STEP_END)
    await run.submit(StateCommand().update(Mood, "calm"))
    tool = lambda args, ctx: ToolOutput("done", StateCommand().update(Log, ("tool",)))  # noqa: E731
    await run.handle_tool_call(ToolCall("call-1", "writer"), tool)
    await run.submit(StateCommand())  # moves nothing: no record
    await run.finish()
    records = await kernel.history("t")
    assert [r.revision for r in records] == [1, 2, 3, 4, 5]
    assert [r.sources for r in records] == [
        ("plugin:a", "plugin:b"),
        ("plugin:c",),
        ("action:j.note",),
        ("submit",),
        ("tool:writer",),
    ]
    assert [r.phase for r in records] == [
        Phase.STEP_START,
        Phase.STEP_END,
        Phase.STEP_END,
        None,
        None,
    ]
    assert [r.step for r in records] == [1, 1, 1, 1, 1]
    assert {r.run_id for r in records} == {"t:run-1"} and {r.thread_id for r in records} == {"t"}
    assert all(r.created_at.tzinfo is datetime.UTC for r in records)
    first = records[0]
    assert [(op.key, op.kind, op.update) for op in first.ops] == [
        ("j.count", "update", b"1"),
        ("j.count", "update", b"2"),
    ]
    run_key_journaled = any(op.key == Step.key for r in records for op in r.ops)
    assert run_key_journaled is (
        thread_store_or_none is None
    )  # a store keeps persistent thread keys only
    assert [r.revision for r in await kernel.history("t", since=2, limit=2)] == [3, 4]


async def test_records_are_saved_with_the_checkpoint_and_a_cleared_key_is_a_clear_op(
    thread_store_or_none: ThreadStore | None,
) -> None:
    kernel = Kernel(plugins(), thread_store=thread_store_or_none)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Mood, "calm"))
    with pytest.raises(UnknownThread):  # not saved yet: no store (or memory) holds it
        await kernel.history("t")
    await run.checkpoint()
    assert [r.revision for r in await kernel.history("t")] == [1]
    await run.submit(StateCommand().clear(Mood))
    await run.abandon()  # never saved: never journaled
    assert [r.revision for r in await kernel.history("t")] == [1]
    run = await kernel.start_run("t")
    assert run.revision == 1 and run.snapshot.get(Mood) == "calm"
    await run.submit(StateCommand().clear(Mood))
    await run.finish()
    (cleared,) = await kernel.history("t", since=1)
    assert [(op.key, op.kind, op.update) for op in cleared.ops] == [("j.mood", "clear", None)]
    assert cleared.run_id == "t:run-2"


async def test_a_command_changed_after_it_committed_does_not_change_its_record(
    thread_store: ThreadStore,
) -> None:
    kernel = Kernel([Keys(Total)], thread_store=thread_store)
    run = await kernel.start_run("t")
    command = StateCommand().update(Total, 1)
    await run.submit(command)
    command.update(Total, 10)  # too late: revision 1 applied one op
    await run.submit(StateCommand().update(Total, 100))
    await run.finish()
    assert run.snapshot.get(Total) == 101
    assert await read(Kernel([Keys(Total)], thread_store=thread_store), "t", Total) == 101


async def test_of_two_kernels_saving_from_one_position_one_wins_and_no_run_id_repeats(
    thread_store: ThreadStore,
) -> None:
    for stale_commits in (False, True):
        thread = f"race-{stale_commits}"
        await commit_all(
            Kernel(plugins(), thread_store=thread_store), thread, StateCommand().update(Count, 1)
        )
        first, second = (
            Kernel(plugins(), thread_store=thread_store),
            Kernel(plugins(), thread_store=thread_store),
        )
        a = await first.start_run(thread)
        b = await second.start_run(thread)
        assert a.identity.run_id == b.identity.run_id == f"{thread}:run-2"  # both loaded run 1
        await a.suspend()  # saves no commit, but moves the position
        if stale_commits:
            await b.submit(StateCommand().update(Count, 5))
        with pytest.raises(RevisionConflict):
            await b.finish()
        resumed, _ = await first.resume_run(thread)
        await resumed.submit(StateCommand().update(Mood, "after the race"))
        await resumed.finish()
        third = await Kernel(plugins(), thread_store=thread_store).start_run(thread)
        assert third.identity.run_id == f"{thread}:run-3"
        await third.submit(StateCommand().update(Count, 1))
        await third.finish()
        run_ids = [r.run_id for r in await first.history(thread)]
        assert run_ids == [f"{thread}:run-1", f"{thread}:run-2", f"{thread}:run-3"]
        assert (await first.state_at(thread, 3)).get(Count) == 2  # the stale +5 never landed


# -- ops of keys kept in memory only -------------------------------------------------------


class Cache(StateKey[int, int]):
    key = "j.cache"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


async def test_ops_of_a_non_persistent_key_are_journaled_in_this_kernels_memory_only(
    thread_store_or_none: ThreadStore | None,
) -> None:
    kernel = Kernel(
        [*plugins(), Keys(Cache, id="volatile", options=StateKeyOptions(persistent=False))],
        thread_store=thread_store_or_none,
        snapshot_every=2,
    )
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Count, 1).update(Cache, 10).update(Log, ("a",)))
    await run.submit(StateCommand().update(Cache, 5))
    await run.checkpoint()
    await run.submit(StateCommand().update(Count, 2))
    await run.finish()
    await kernel.prune("t", before=0)  # a prune that keeps everything keeps these too
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Cache, 1).update(Count, 1))
    await run.finish()

    records = await kernel.history("t")
    # This kernel's history has every op of the thread's keys, in the order applied...
    assert [[(op.key, op.update) for op in r.ops] for r in records] == [
        [("j.count", b"1"), ("j.cache", b"10"), ("j.log", b'["a"]')],
        [("j.cache", b"5")],
        [("j.count", b"2")],
        [("j.cache", b"1"), ("j.count", b"1")],
    ]
    assert (await kernel.verify("t")).ok
    if thread_store_or_none is None:
        return
    # ...but the store never had the non-persistent key: another kernel sees the rest.
    other = Kernel(
        [*plugins(), Keys(Cache, id="volatile", options=StateKeyOptions(persistent=False))],
        thread_store=thread_store_or_none,
    )
    assert [[op.key for op in r.ops] for r in await other.history("t")] == [
        ["j.count", "j.log"],
        [],
        ["j.count"],
        ["j.count"],
    ]
    assert Cache.key not in (await other.state_at("t", 4)).to_dict()
    run = await other.start_run("t")
    assert run.snapshot.get(Count) == 4 and Cache.key not in run.snapshot.to_dict()
    await run.finish()
    await kernel.prune("t", keep=1)
    kept = await kernel.history("t")
    assert [r.revision for r in kept] == [r.revision for r in await other.history("t")]
    assert kept[0].revision > 1 and [op.key for op in kept[-1].ops] == ["j.cache", "j.count"]
    run = await kernel.start_run("t")
    assert run.snapshot.get(Cache) == 16  # the value itself lives on in this kernel
    await run.finish()


class RunCount(StateKey[int, int]):
    key = "e.run_count"  # a run key

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


def both() -> Keys:
    """A persistent thread key, a `persistent=False` thread key and a run key."""
    return Keys(
        Total, Notes, RunCount, id="both", options={Notes: StateKeyOptions(persistent=False)}
    )


async def test_a_record_listener_gets_every_op_and_the_store_keeps_what_it_always_kept(
    thread_store: ThreadStore,
) -> None:
    """With a store, a record listener (what `agent.stream` uses) still sees the ops of run
    keys and `persistent=False` keys; listening changes nothing the store or the kernel's
    history keeps."""

    async def commit_three(kernel: Kernel, thread: str, heard: list[Any] | None) -> None:
        run = await kernel.start_run(thread)
        if heard is not None:
            run.add_record_listener(heard.append)
        for step in range(3):
            await run.submit(
                StateCommand().update(Total, step).update(Notes, f"n{step}").update(RunCount, 1)
            )
        await run.finish()

    heard: list[Any] = []
    listened = Kernel([both()], thread_store=thread_store)
    await commit_three(listened, "heard", heard)
    await commit_three(Kernel([both()], thread_store=thread_store), "quiet", None)
    assert [[(op.key, op.update) for op in r.ops] for r in heard] == [
        [("e.total", b"%d" % step), ("e.notes", b'"n%d"' % step), ("e.run_count", b"1")]
        for step in range(3)
    ]

    def ops(records: list[Any]) -> list[list[tuple[str, bytes | None]]]:
        return [[(op.key, op.update) for op in r.ops] for r in records]

    fresh = Kernel([both()], thread_store=thread_store)
    assert ops(await fresh.history("heard")) == ops(await fresh.history("quiet"))
    assert ops(await fresh.history("heard")) == [[("e.total", b"%d" % s)] for s in range(3)]
    # The kernel that made them keeps the memory-only ops beside the stored ones.
    assert ops(await listened.history("heard")) == [
        [("e.total", b"%d" % s), ("e.notes", b'"n%d"' % s)] for s in range(3)
    ]


async def test_each_home_journals_the_ops_it_keeps(
    thread_store_or_none: ThreadStore | None,
) -> None:
    """Without a store the kernel's memory journals every op, a run key's too (history
    only: replay leaves it alone). With one, the store gets the persistent thread key's op,
    the kernel's memory the `persistent=False` thread key's beside it, and nobody the run
    key's."""
    kernel = Kernel([both()], thread_store=thread_store_or_none)
    await commit_all(
        kernel, "t", StateCommand().update(Total, 1).update(Notes, "n").update(RunCount, 1)
    )

    def ops(records: list[Any]) -> list[list[tuple[str, bytes | None]]]:
        return [[(op.key, op.update) for op in r.ops] for r in records]

    persistent, memory_only, run_key = ("e.total", b"1"), ("e.notes", b'"n"'), ("e.run_count", b"1")
    if thread_store_or_none is None:
        assert ops(await kernel.history("t")) == [[persistent, memory_only, run_key]]
    else:
        assert ops(await kernel.history("t")) == [[persistent, memory_only]]
        fresh = Kernel([both()], thread_store=thread_store_or_none)
        assert ops(await fresh.history("t")) == [[persistent]]
    # Replay rebuilds thread keys only; with a store, from what the store keeps.
    rebuilt = {"e.total": 1} if thread_store_or_none else {"e.total": 1, "e.notes": "n"}
    assert (await kernel.state_at("t", 1)).to_dict() == rebuilt
    assert (await kernel.verify("t")).ok


async def test_a_record_listener_added_mid_run_hears_every_op_and_one_save_keeps_both_halves(
    thread_store: ThreadStore,
) -> None:
    """A listener added after the run's first commit: the commits from then on are written
    with every op (the listener hears them), and the save that holds commits written both
    ways keeps of each what the store and the kernel's memory always keep."""
    kernel = Kernel([both()], thread_store=thread_store)
    run = await kernel.start_run("t")
    ops = StateCommand().update(Total, 1).update(Notes, "n").update(RunCount, 1)
    await run.submit(ops)
    heard: list[Any] = []
    run.add_record_listener(heard.append)
    run.add_record_listener(heard.append)  # a second listener changes nothing of the writing
    await run.submit(ops)
    await run.finish()

    def keys(records: list[Any]) -> list[list[str]]:
        return [[op.key for op in r.ops] for r in records]

    assert [r.revision for r in heard] == [2, 2]
    assert keys(heard) == [["e.total", "e.notes", "e.run_count"]] * 2
    assert keys(await kernel.history("t")) == [["e.total", "e.notes"]] * 2
    fresh = Kernel([both()], thread_store=thread_store)
    assert keys(await fresh.history("t")) == [["e.total"]] * 2
    assert (await fresh.state_at("t", 2)).get(Total) == 2
    assert (await kernel.verify("t")).ok


# -- commits from outside a run ------------------------------------------------------------


async def test_update_state_commits_outside_a_run_and_is_journaled_as_external(
    thread_store_or_none: ThreadStore | None,
) -> None:
    kernel = Kernel(plugins(Noter()), thread_store=thread_store_or_none)
    await commit_all(kernel, "t", StateCommand().update(Count, 1))
    revision = await kernel.update_state("t", StateCommand().update(Count, 5).update(Mood, "fixed"))
    assert revision == 2
    (record,) = await kernel.history("t", since=1)
    assert (record.sources, record.run_id, record.phase) == (("external",), None, None)
    run = await kernel.start_run("t")
    assert (run.snapshot.get(Count), run.snapshot.get(Mood), run.revision) == (6, "fixed", 2)
    with pytest.raises(StateError, match=r"live run"):
        await kernel.update_state("t", StateCommand().update(Count, 1))
    await run.suspend()
    with pytest.raises(StateError, match=r"suspended run"):
        await kernel.update_state("t", StateCommand().update(Count, 1))
    resumed, _ = await kernel.resume_run("t")
    await resumed.finish()
    with pytest.raises(StateError, match=r"1 scheduled action.*nothing was committed"):
        await kernel.update_state("t", StateCommand().update(Count, 1).schedule(Note, "x"))
    with pytest.raises(StateError, match=r"'j\.step' is run-scoped"):
        await kernel.update_state("t", StateCommand().update(Step, 1))
    assert (await kernel.state_at("t", 2)).get(Count) == 6
    assert [r.revision for r in await kernel.history("t")] == [1, 2]
    assert await kernel.update_state("new", StateCommand().update(Mood, "born")) == 1


async def test_update_state_with_many_ops_commits_them_all_and_logs_no_error(
    thread_store_or_none: ThreadStore | None, caplog: pytest.LogCaptureFixture
) -> None:
    kernel = Kernel(plugins(), thread_store=thread_store_or_none)
    command = StateCommand()
    for i in range(70):  # 140 ops in one command from outside a run
        command = command.update(Count, 1).update(Log, (str(i),))
    with caplog.at_level(logging.ERROR, logger="statekernel"):
        assert await kernel.update_state("t", command) == 1
    assert not [r for r in caplog.records if r.name.startswith("statekernel")]
    (record,) = await kernel.history("t")
    assert len(record.ops) == 140 and record.sources == ("external",)
    assert (await kernel.state_at("t", 1)).get(Count) == 70


# -- a long stretch between saves ----------------------------------------------------------


class Box(msgspec.Struct, frozen=True, weakref=True):
    count: int


class Counter(StateKey[Box, int]):
    key = "e.counter"
    scope = KeyScope.THREAD
    default_factory = lambda: Box(0)  # noqa: E731

    @staticmethod
    def apply(value: Box, update: int) -> Box:
        return Box(value.count + update)


async def test_with_a_store_values_replaced_before_the_save_are_not_held_until_it(
    thread_store: ThreadStore,
) -> None:
    run = await Kernel([Keys(Counter)], thread_store=thread_store).start_run("t")
    await run.submit(StateCommand().update(Counter, 1))
    first = weakref.ref(run.snapshot.get(Counter))
    await run.submit(StateCommand().update(Counter, 1))
    gc.collect()
    assert first() is None  # only the journal's ops wait for the save, not every value
    await run.finish()
    assert (await read(Kernel([Keys(Counter)], thread_store=thread_store), "t", Counter)).count == 2


class Increment(msgspec.Struct, frozen=True, weakref=True):
    by: int


class Stepped(StateKey[Box, Increment]):
    key = "e.stepped"
    scope = KeyScope.THREAD
    default_factory = lambda: Box(0)  # noqa: E731

    @staticmethod
    def apply(value: Box, update: Increment) -> Box:
        return Box(value.count + update.by)


async def test_a_long_stretch_between_saves_holds_encoded_ops_not_the_updates_themselves(
    thread_store: ThreadStore, caplog: pytest.LogCaptureFixture
) -> None:
    run = await Kernel([Keys(Stepped)], thread_store=thread_store).start_run("t")
    first = Increment(1)
    held = weakref.ref(first)
    await run.submit(StateCommand().update(Stepped, first))
    del first
    with caplog.at_level(logging.ERROR, logger="statekernel"):
        for _ in range(69):  # seventy commits in all before the first save
            await run.submit(StateCommand().update(Stepped, Increment(1)))
    gc.collect()
    assert held() is None  # what waits for the save is encoded ops, not the updates given
    assert not [r for r in caplog.records if r.name.startswith("statekernel")]
    await run.finish()
    assert (
        await read(Kernel([Keys(Stepped)], thread_store=thread_store), "t", Stepped)
    ).count == 70
    records = await Kernel([Keys(Stepped)], thread_store=thread_store).history("t")
    assert [op.update for r in records for op in r.ops] == [b'{"by":1}'] * 70


async def test_an_unencodable_update_long_before_the_save_is_journaled_as_its_value(
    thread_store: ThreadStore,
) -> None:
    """An update that cannot be encoded, then many commits before the save: the value it
    made was journaled at its commit, so no snapshot is needed and time travel is exact."""
    kernel = Kernel([Keys(Score, Total)], thread_store=thread_store, snapshot_every=1_000)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Score, 10))
    await run.submit(StateCommand().update(Score, lambda v: v * 2))
    for _ in range(70):  # many commits between that update and the save
        await run.submit(StateCommand().update(Total, 1))
    await run.finish()
    loaded = await thread_store.load("t")
    assert loaded is not None and loaded.values == {}
    assert (await kernel.state_at("t", 2)).get(Score) == 20
    assert await read(Kernel([Keys(Score, Total)], thread_store=thread_store), "t", Score) == 20
    assert await read(Kernel([Keys(Score, Total)], thread_store=thread_store), "t", Total) == 70


async def test_memory_only_ops_of_a_long_stretch_between_saves_stay_in_the_history(
    thread_store: ThreadStore,
) -> None:
    kernel = Kernel(
        [Keys(Jot, Total, options={Jot: StateKeyOptions(persistent=False)})],
        thread_store=thread_store,
    )
    run = await kernel.start_run("t")
    for _ in range(40):  # 80 ops in 40 commits, saved at once when the run finishes
        await run.submit(StateCommand().update(Jot, 1).update(Total, 1))
    await run.finish()
    records = await kernel.history("t")
    assert [[op.key for op in r.ops] for r in records] == [["e.jot", "e.total"]] * 40


async def test_every_commit_of_an_agent_names_who_made_it_and_its_phase(
    thread_store_or_none: ThreadStore | None,
) -> None:
    from statekernel import Agent, InferenceResponse, ScriptedModel

    def lookup(arguments: dict[str, object], ctx: object) -> str:
        return "found"

    model = ScriptedModel(
        [InferenceResponse("", (ToolCall("c1", "lookup", {}),)), InferenceResponse("done")]
    )
    agent = Agent(plugins(), model, {"lookup": lookup}, thread_store=thread_store_or_none)
    result = await agent.run("t", "hello")
    assert result.outcome == "success"
    made = [(r.sources, r.phase) for r in await agent.kernel.history("t")]
    assert made == [
        (("agent:input",), Phase.RUN_START),
        (("agent:model",), Phase.AFTER_INFERENCE),
        (("agent:calls",), Phase.AFTER_INFERENCE),
        (("tool:lookup",), Phase.BEFORE_TOOL_EXECUTE),
        (("tool:lookup",), Phase.AFTER_TOOL_EXECUTE),
        (("agent:model",), Phase.AFTER_INFERENCE),
    ]
    run = await agent.kernel.start_run("t")
    await run.submit(StateCommand().update(Mood, "calm"), source="me", phase=Phase.STEP_END)
    with pytest.raises(TypeError, match="source must be a non-empty string"):
        await run.submit(StateCommand(), source="")
    await run.finish()
    assert [(r.sources, r.phase) for r in await agent.kernel.history("t")][-1] == (
        ("me",),
        Phase.STEP_END,
    )
