"""Run events: what a run did beyond its commits, journaled beside them at every save.

One agent run exercises every kind: hooks of two plugins, an exclusive conflict whose hook
is re-run, an effect that fails beside one that does not, a scheduled action, a tool gate
that blocks with a reason, tools that succeed and fail. A kernel in another process (here:
a fresh kernel on the same store) reads them back exactly.
"""

from __future__ import annotations

from typing import Any

import pytest
from run_event_samples import First, Second
from samples import Hooks

from statekernel import (
    Agent,
    EffectRun,
    GateRun,
    InferenceResponse,
    Kernel,
    MergeStrategy,
    Phase,
    PhaseContext,
    PhaseRun,
    Plugin,
    PluginRegistrar,
    Rebase,
    ScriptedModel,
    StateCommand,
    StateKey,
    ThreadStore,
    ToolCall,
    ToolRun,
    UnknownThread,
)
from statekernel.lowlevel import SupportsRunEvents
from statekernel.stores import SqliteThreadStore


def fine(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    return "fine"


def broken(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    raise ValueError("no such file")


def delete(arguments: dict[str, Any], ctx: PhaseContext) -> str:
    return "deleted"


def agent(thread_store: ThreadStore | None) -> Agent:
    calls = (ToolCall("c1", "fine", {}), ToolCall("c2", "broken", {}), ToolCall("c3", "delete", {}))
    model = ScriptedModel(
        [
            InferenceResponse(tool_calls=calls),
            InferenceResponse(text="done"),
            InferenceResponse(text="again"),
        ]
    )
    tools = {"fine": fine, "broken": broken, "delete": delete}
    return Agent([First(), Second()], model, tools, thread_store=thread_store)


async def test_a_run_journals_phases_gates_and_tool_calls(
    thread_store_or_none: ThreadStore | None,
) -> None:
    writer = agent(thread_store_or_none)
    result = await writer.run("t", ["go"])
    assert result.outcome == "success"
    if thread_store_or_none is None:
        events = await writer.kernel.run_events("t")
    else:
        events = await Kernel([], thread_store=thread_store_or_none).run_events("t")
    run_id = "t:run-1"
    assert {event.run_id for event in events} == {run_id}
    phases = [e for e in events if isinstance(e, PhaseRun)]
    assert [p.phase for p in phases[:3]] == [
        Phase.RUN_START,
        Phase.STEP_START,
        Phase.BEFORE_INFERENCE,
    ]
    assert phases[-1].phase is Phase.RUN_END
    steps = [p for p in phases if p.phase is Phase.STEP_START]
    assert [p.step for p in steps] == [1, 2]
    first = steps[0]
    assert first.hooks[-2:] == ("first", "second") and first.reruns == ("second",)
    assert first.effects == (
        EffectRun("t.ping"),
        EffectRun("t.boom", "RuntimeError: cannot explode"),
    )
    assert first.commits >= 2 and first.revision >= first.commits
    assert next(p.actions for p in phases if p.phase is Phase.STEP_END) == ("t.later",)
    gates = [e for e in events if isinstance(e, GateRun)]
    assert [(g.call_id, g.decision, g.plugin, g.reason) for g in gates] == [
        ("c1", "allow", None, None),
        ("c2", "allow", None, None),
        ("c3", "block", "first", "delete needs an approval first"),
    ]
    tools = [e for e in events if isinstance(e, ToolRun)]
    assert [(t.call_id, t.tool, t.status, t.error) for t in tools] == [
        ("c1", "fine", "succeeded", None),
        ("c2", "broken", "failed", "ValueError: no such file"),
        ("c3", "delete", "failed", "delete needs an approval first"),
    ]
    assert all(t.step == 1 for t in [*gates, *tools])
    # in the order they happened: each gate decision before its tool call ends
    order = [(type(e).__name__, getattr(e, "call_id", None)) for e in events]
    assert order.index(("GateRun", "c3")) < order.index(("ToolRun", "c3"))
    assert order.index(("ToolRun", "c1")) < order.index(("GateRun", "c2"))
    # the revisions the events name are the journal's
    history = await writer.kernel.history("t")
    assert phases[-1].revision <= history[-1].revision
    assert all(0 <= e.revision <= history[-1].revision for e in events)


async def test_events_of_several_runs_accumulate_and_an_unknown_thread_has_none(
    thread_store_or_none: ThreadStore | None,
) -> None:
    writer = agent(thread_store_or_none)
    await writer.run("t", ["go"])
    once = len(await writer.kernel.run_events("t"))
    second = writer
    await second.run("t", ["again"])
    events = await second.kernel.run_events("t")
    assert len(events) > once
    assert {e.run_id for e in events[once:]} == {"t:run-2"}
    with pytest.raises(UnknownThread):
        await second.kernel.run_events("no-such-thread")


def test_every_bundled_thread_store_keeps_run_events(thread_store: ThreadStore) -> None:
    assert isinstance(thread_store, SupportsRunEvents)


async def test_tool_calls_that_end_outside_the_host_are_journaled_too(tmp_path: Any) -> None:
    from statekernel import Decision, Suspend

    class Approval(Plugin):
        id = "approval"

        def register(self, r: PluginRegistrar) -> None:
            r.register_tool_gate(
                lambda ctx: (
                    Suspend({"awaits": "finance", "limit": 100})
                    if ctx.tool_call and ctx.tool_call.name == "pay"
                    else None
                )
            )

    calls = (ToolCall("c1", "nonexistent", {}), ToolCall("c2", "pay", {}))
    model = ScriptedModel([InferenceResponse(tool_calls=calls), InferenceResponse(text="done")])
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        paying = Agent([Approval()], model, {"pay": fine}, thread_store=store)
        first = await paying.run("t", ["go"])
        assert first.outcome == "suspended"
        second = await paying.resume("t", "c2", Decision.deny("not today"))
        assert second.outcome == "success"
        events = await Kernel([], thread_store=store).run_events("t")
    ends = [(e.call_id, e.status, e.error) for e in events if isinstance(e, ToolRun)]
    assert ends[1:] == [("c2", "suspended", None), ("c2", "failed", "not today")]
    assert ends[0][:2] == ("c1", "failed") and "nonexistent" in str(ends[0][2])
    # the suspension's ticket is journaled with the gate's decision, read back as plain data
    suspended = [e for e in events if isinstance(e, GateRun) and e.decision == "suspend"]
    assert [(g.call_id, g.plugin, g.ticket) for g in suspended] == [
        ("c2", "approval", {"awaits": "finance", "limit": 100})
    ]
    assert suspended[0].ticket_text() == '{"awaits":"finance","limit":100}'


async def test_a_pydantic_ticket_is_journaled_as_its_data(tmp_path: Any) -> None:
    from pydantic import BaseModel

    from statekernel import Suspend

    class Ticket(BaseModel):
        approver: str

    approval = Hooks("approval", gate=lambda ctx: Suspend(Ticket(approver="finance")))
    model = ScriptedModel([InferenceResponse(tool_calls=(ToolCall("c1", "pay", {}),))])
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        agent = Agent([approval], model, {"pay": fine}, thread_store=store)
        assert (await agent.run("t", ["go"])).outcome == "suspended"
        events = await Kernel([], thread_store=store).run_events("t")
    assert any(isinstance(e, PhaseRun) for e in events)  # the save kept its events
    gates = [(e.call_id, e.ticket) for e in events if isinstance(e, GateRun)]
    assert gates == [("c1", {"approver": "finance"})]


async def test_a_phase_that_fails_is_journaled_with_its_error(tmp_path: Any) -> None:
    class Broken(Plugin):
        id = "broken"

        def register(self, r: PluginRegistrar) -> None:
            r.register_phase_hook(Phase.BEFORE_INFERENCE, self.boom)

        @staticmethod
        def boom(ctx: PhaseContext) -> None:
            raise ValueError("bad config")

    async with SqliteThreadStore(tmp_path / "t.db") as store:
        result = await Agent(
            [Broken()], ScriptedModel([InferenceResponse(text="x")]), thread_store=store
        ).run("t", ["go"])
        assert result.outcome == "failure"
        events = await Kernel([], thread_store=store).run_events("t")
    phases = [(e.phase, e.error) for e in events if isinstance(e, PhaseRun)]
    assert (
        Phase.BEFORE_INFERENCE,
        "HookFailed: hook of plugin 'broken' failed in phase "
        "BEFORE_INFERENCE: ValueError: bad config. Nothing of this gather round was "
        "committed.",
    ) in phases
    assert phases[-1][0] is Phase.RUN_END


class Tally(StateKey[int, int]):
    key = "t.tally"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Adds(Plugin):
    """Adds one to a commutative key at every STEP_START: two kernels' saves of it rebase."""

    id = "adds"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Tally)
        r.register_phase_hook(Phase.STEP_START, lambda ctx: StateCommand().update(Tally, 1))


async def test_a_rebased_save_moves_its_events_with_its_records(tmp_path: Any) -> None:
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        first, second = Kernel([Adds()], thread_store=store), Kernel([Adds()], thread_store=store)
        setup = await first.start_run("t")
        await setup.finish()
        one, two = await first.start_run("t"), await second.start_run("t")
        await one.run_phase(Phase.STEP_START)
        await two.run_phase(Phase.STEP_START)
        await one.finish()
        await two.finish()
        assert two.rebases, "the second save should have rebased"
        rebase = two.rebases[0]
        events = await Kernel([], thread_store=store).run_events("t")
        history = await first.history("t")
    by_run = {e.run_id for e in events}
    assert rebase.run_id in by_run
    moved = [e for e in events if e.run_id == rebase.run_id and isinstance(e, PhaseRun)]
    step = next(e for e in moved if e.phase is Phase.STEP_START)
    record = next(r for r in history if r.run_id == rebase.run_id)
    assert step.revision == record.revision  # the revision its commit has in the journal
    assert all(e.revision <= history[-1].revision for e in events)


async def test_a_rebase_that_moves_nothing_keeps_every_event_at_its_revision(
    tmp_path: Any,
) -> None:
    """The other kernel's save committed nothing (the head's revision stayed where this run
    loaded it, only its write position moved): the rebase shifts by zero, so a phase that
    ran before any commit still says revision 0, and the commit's phase says 1."""
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        first, second = Kernel([Adds()], thread_store=store), Kernel([Adds()], thread_store=store)
        await (await first.start_run("t")).finish()  # the thread exists, at revision 0
        idle, adding = await first.start_run("t"), await second.start_run("t")
        await adding.run_phase(Phase.RUN_START)  # nothing commits: revision 0
        await adding.run_phase(Phase.STEP_START)  # revision 1
        await idle.finish()  # moves the write position, not the revision
        await adding.finish()
        assert adding.rebases == (Rebase(onto=0, revision=1, run_id=adding.identity.run_id),)
        events = await Kernel([], thread_store=store).run_events("t")
    phases = [
        (e.phase, e.revision)
        for e in events
        if e.run_id == adding.identity.run_id and isinstance(e, PhaseRun)
    ]
    assert phases == [(Phase.RUN_START, 0), (Phase.STEP_START, 1), (Phase.RUN_END, 1)]


async def test_a_fork_carries_the_run_events_of_what_it_copies(
    thread_store_or_none: ThreadStore | None,
) -> None:
    writer = agent(thread_store_or_none)
    await writer.run("t", ["go"])
    await writer.run("t", ["again"])
    source = await writer.kernel.run_events("t")
    first_run = [e for e in source if e.run_id == "t:run-1"]
    at = max(e.revision for e in first_run)
    await writer.kernel.fork("t", at, "copy")
    copied = await writer.kernel.run_events("copy")
    assert copied == [e for e in source if e.revision <= at]
    assert {e.run_id for e in copied} == {"t:run-1"}
