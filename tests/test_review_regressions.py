"""Behaviour pinned down after a review found it broken: each test failed before its fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekernel import (
    Agent,
    Block,
    EffectSpec,
    HookFailed,
    InferenceResponse,
    Kernel,
    KeyScope,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ProfileKey,
    ScheduledActionSpec,
    ScriptedModel,
    StateCommand,
    StateError,
    StateKey,
    StateKeyOptions,
    StoreError,
    Suspend,
    ToolCall,
)
from statekernel.stores import MemoryProfileStore, SqliteThreadStore


def test_tool_call_arguments_are_read_only_and_tools_get_their_own_copy() -> None:
    given = {"path": "/tmp/a", "tags": ["x"]}
    call = ToolCall("c", "write", given)
    given["path"] = "/etc/passwd"  # the caller's dict is not the call's
    assert call.arguments["path"] == "/tmp/a"
    with pytest.raises(TypeError):
        call.arguments["path"] = "/etc/passwd"  # type: ignore[index]


async def test_a_tool_cannot_change_what_later_hooks_see() -> None:
    seen: list[Any] = []

    class Watch(Plugin):
        id = "watch"

        def register(self, r: PluginRegistrar) -> None:
            r.register_phase_hook(
                Phase.AFTER_TOOL_EXECUTE, lambda ctx: seen.append(dict(ctx.tool_call.arguments))
            )

    def greedy(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        arguments["tags"].append("sneaky")
        return "ok"

    run = await Kernel([Watch()]).start_run("t")
    await run.handle_tool_call(ToolCall("c", "greedy", {"tags": ["x"]}), greedy)
    assert seen == [{"tags": ["x"]}]


class Counted(StateKey[int, int]):
    key = "t.counted"


class Audit(EffectSpec[str]):
    key = "t.audit"


class Later(ScheduledActionSpec[str]):
    key = "t.later"
    phase = Phase.STEP_END


class Tally(ProfileKey[int]):
    key = "t.tally"


async def test_a_failed_profile_write_drops_none_of_the_commands_effects_or_actions() -> None:
    class Broken(MemoryProfileStore):
        async def update(self, *args: Any, **kwargs: Any) -> Any:
            raise OSError("disk full")

    ran: list[str] = []

    class Plug(Plugin):
        id = "plug"

        def register(self, r: PluginRegistrar) -> None:
            r.register_key(Counted)
            r.register_profile_key(Tally)
            r.register_effect(Audit, lambda payload, snap: ran.append(f"effect {payload}"))
            r.register_action(Later, lambda payload, ctx: ran.append(f"action {payload}"))
            r.register_phase_hook(Phase.STEP_START, self.hook)

        async def hook(self, ctx: PhaseContext) -> StateCommand:
            assert ctx.profile is not None
            await ctx.profile.update(Tally, "global", lambda n: n + 1)
            return StateCommand().update(Counted, 1).emit(Audit, "a").schedule(Later, "b")

    run = await Kernel([Plug()], profile_store=Broken()).start_run("t")
    with pytest.raises(StoreError):
        await run.run_phase(Phase.STEP_START)
    assert run.snapshot.get(Counted) == 1 and ran == ["effect a"]
    await run.run_phase(Phase.STEP_END)
    assert ran == ["effect a", "action b"]


class Handle:
    """A live object: fine in memory, impossible to persist."""


class LiveHandle(StateKey[Any, Any]):
    key = "t.handle"
    default = None


async def test_suspending_skips_non_persistent_run_keys(tmp_path: Path) -> None:
    class Plug(Plugin):
        id = "plug"

        def register(self, r: PluginRegistrar) -> None:
            r.register_key(LiveHandle, StateKeyOptions(persistent=False))
            r.register_phase_hook(
                Phase.RUN_START, lambda ctx: StateCommand().update(LiveHandle, Handle())
            )
            r.register_tool_gate(lambda ctx: Suspend("approve?"))

    async with SqliteThreadStore(tmp_path / "t.db") as store:
        model = ScriptedModel([InferenceResponse(tool_calls=(ToolCall("c1", "deploy"),))])
        agent = Agent([Plug()], model, {"deploy": lambda a, c: "ok"}, thread_store=store)
        result = await agent.run("t", ["go"])
        assert result.outcome == "suspended"


async def test_a_suspend_that_cannot_be_saved_fails_the_run_cleanly(tmp_path: Path) -> None:
    class Plug(Plugin):
        id = "plug"

        def register(self, r: PluginRegistrar) -> None:
            r.register_key(LiveHandle)  # persistent: a suspend must save it, and cannot
            r.register_phase_hook(
                Phase.RUN_START, lambda ctx: StateCommand().update(LiveHandle, Handle())
            )
            r.register_phase_hook(Phase.RUN_END, lambda ctx: ended.append(ctx.run.run_id))
            r.register_tool_gate(lambda ctx: Suspend("approve?"))

    ended: list[str] = []
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        model = ScriptedModel([InferenceResponse(tool_calls=(ToolCall("c1", "deploy"),))])
        agent = Agent([Plug()], model, {"deploy": lambda a, c: "ok"}, thread_store=store)
        result = await agent.run("t", ["go"])
        assert result.outcome == "failure"
        assert isinstance(result.error, StateError) and "t.handle" in str(result.error)
        assert ended == ["t:run-1"]  # RUN_END ran, and the thread was released
        stored = await store.load("t")
        assert stored is not None and stored.suspended is None


async def test_run_ids_do_not_repeat_when_a_run_was_never_saved(tmp_path: Path) -> None:
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        kernel = Kernel([], thread_store=store)
        first = await kernel.start_run("t")
        await first.abandon()
        second = await kernel.start_run("t")
        assert (first.identity.run_id, second.identity.run_id) == ("t:run-1", "t:run-2")
        await second.finish()


class Mood(StateKey[str, str]):
    key = "t.mood"
    scope = KeyScope.THREAD


class MoodNumber(StateKey[int, int]):
    key = "t.mood"
    scope = KeyScope.THREAD


class KeyPlugin(Plugin):
    id = "keys"

    def __init__(self, key: type[StateKey[Any, Any]]) -> None:
        self.key = key

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(self.key)


async def test_a_cleared_undecodable_key_stays_cleared(tmp_path: Path) -> None:
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        run = await Kernel([KeyPlugin(Mood)], thread_store=store).start_run("t")
        await run.submit(StateCommand().update(Mood, "calm"))
        await run.finish()
        lenient = Kernel([KeyPlugin(MoodNumber)], thread_store=store, restore_errors="skip")
        run = await lenient.start_run("t")
        await run.submit(StateCommand().clear(MoodNumber))
        await run.finish()
        run = await Kernel([KeyPlugin(Mood)], thread_store=store).start_run("t")
        assert Mood not in run.snapshot  # cleared, not resurrected from the old bytes
        await run.abandon()


async def test_encoding_failures_are_state_errors_naming_the_key() -> None:
    from statekernel.stores import MemoryThreadStore

    class Plug(Plugin):
        id = "plug"

        def register(self, r: PluginRegistrar) -> None:
            r.register_key(LiveHandle, StateKeyOptions(scope=KeyScope.THREAD))

    run = await Kernel([Plug()], thread_store=MemoryThreadStore()).start_run("t")
    await run.submit(StateCommand().update(LiveHandle, Handle()))
    with pytest.raises(StateError, match="t.handle.*persistent=False"):
        await run.checkpoint()


class Step(ScheduledActionSpec[int]):
    key = "t.step"
    phase = Phase.STEP_END


async def test_a_failing_action_leaves_the_other_due_actions_queued() -> None:
    done: list[int] = []

    def handle(payload: int, ctx: PhaseContext) -> None:
        if payload == 1:
            raise RuntimeError("first one breaks")
        done.append(payload)

    class Plug(Plugin):
        id = "plug"

        def register(self, r: PluginRegistrar) -> None:
            r.register_action(Step, handle)
            r.register_phase_hook(
                Phase.STEP_START,
                lambda ctx: StateCommand().schedule(Step, 1).schedule(Step, 2),
            )

    run = await Kernel([Plug()]).start_run("t")
    await run.run_phase(Phase.STEP_START)
    with pytest.raises(StateError):
        await run.run_phase(Phase.STEP_END)
    await run.run_phase(Phase.STEP_END)
    assert done == [2]


async def test_gate_answers_of_subclassed_kinds_rank_as_their_kind() -> None:
    class PolicyBlock(Block):
        pass

    def gates(*answers: object) -> list[Plugin]:
        plugins: list[Plugin] = []
        for index, answer in enumerate(answers):

            class Gate(Plugin):
                id = f"gate{index}"

                def register(self, r: PluginRegistrar, answer: object = answer) -> None:
                    r.register_tool_gate(lambda ctx: answer)

            plugins.append(Gate())
        return plugins

    run = await Kernel(gates(Suspend("x"), PolicyBlock("no"))).start_run("t")
    assert await run.tool_gate(ToolCall("c1", "search", {})) == PolicyBlock("no")


async def test_a_failing_phase_listener_is_a_hook_failure_after_the_phase_committed() -> None:
    run = await Kernel([]).start_run("t")

    def listener(run: object, report: object) -> None:
        raise ValueError("listener broke")

    run.add_phase_listener(listener)
    with pytest.raises(HookFailed) as caught:
        await run.run_phase("step_start")
    assert caught.value.plugin == "phase listener"
    assert isinstance(caught.value.cause, ValueError)
    assert caught.value.phase == Phase.STEP_START
