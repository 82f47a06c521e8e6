"""Plugins that come and go between kernels on one thread store.

A plugin left out of one kernel finds its thread keys again in the next (carried over
untouched), and a kernel can refuse threads holding keys it does not know (Awaken's strict
unknown-key restore)."""

from __future__ import annotations

from pathlib import Path

import pytest
from samples import Keys

from statekernel import (
    Agent,
    InferenceResponse,
    Kernel,
    KeyScope,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScriptedModel,
    StateCommand,
    StateError,
    StateKey,
    StateKeyOptions,
    Suspend,
    ToolCall,
)
from statekernel.stores import SqliteThreadStore


class Notes(StateKey[tuple[str, ...], str]):
    key = "notes.items"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: tuple[str, ...], update: str) -> tuple[str, ...]:
        return (*value, update)


class Steps(StateKey[int, int]):
    key = "core.steps"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class NotesPlugin(Plugin):
    id = "notes"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Notes)
        registrar.register_phase_hook(Phase.STEP_START, self.note)

    def note(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Notes, f"step {ctx.snapshot.get(Steps)}")


class Core(Plugin):
    id = "core"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Steps)
        registrar.register_phase_hook(Phase.STEP_END, lambda ctx: StateCommand().update(Steps, 1))


async def one_run(kernel: Kernel) -> None:
    run = await kernel.start_run("t1")
    await run.run_phase(Phase.STEP_START)
    await run.run_phase(Phase.STEP_END)
    await run.finish()


async def test_a_plugin_left_out_of_one_kernel_finds_its_keys_again_in_the_next(
    tmp_path: Path,
) -> None:
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        await one_run(Kernel([Core(), NotesPlugin()], thread_store=store))  # installed
        await one_run(Kernel([Core()], thread_store=store))  # uninstalled
        with_notes = Kernel([Core(), NotesPlugin()], thread_store=store)  # reinstalled
        run = await with_notes.start_run("t1")
        assert run.snapshot.get(Notes) == ("step 0",)  # as it was, untouched meanwhile
        assert run.snapshot.get(Steps) == 2  # the other run's work is there too
        await run.abandon()
        assert (await with_notes.verify("t1")).ok


async def test_a_strict_kernel_refuses_a_thread_with_keys_it_does_not_know(
    tmp_path: Path,
) -> None:
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        await one_run(Kernel([Core(), NotesPlugin()], thread_store=store))
        strict = Kernel([Core()], thread_store=store, unknown_keys="refuse")
        with pytest.raises(StateError, match=r"\['notes.items'\].*unknown_keys='refuse'"):
            await strict.start_run("t1")
        knowing = Kernel([Core(), NotesPlugin()], thread_store=store, unknown_keys="refuse")
        await one_run(knowing)  # it knows every key the thread holds: it loads
        run = await knowing.start_run("t1")
        assert run.snapshot.get(Notes) == ("step 0", "step 1")
        await run.abandon()


def test_an_unknown_keys_setting_other_than_keep_or_refuse_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown_keys"):
        Kernel([Core()], unknown_keys="drop")  # type: ignore[arg-type]


async def test_a_strict_kernel_checks_a_suspended_runs_run_keys_and_names_agent_keys(
    tmp_path: Path,
) -> None:
    class Scratch(StateKey[int, int]):
        key = "scratch.count"  # run-scoped

    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        run = await Kernel([Core(), Keys(Scratch, id="scratch")], thread_store=store).start_run(
            "t1"
        )
        await run.submit(StateCommand().update(Scratch, 3).update(Steps, 1))
        await run.suspend(b"later")
        strict = Kernel([Core()], thread_store=store, unknown_keys="refuse")
        with pytest.raises(StateError, match=r"\['scratch.count'\]"):
            await strict.resume_run("t1")

        # Every kernel registers an Agent's thread keys: a strict plain kernel loads its thread.
        agent = Agent([], ScriptedModel([]), thread_store=store)
        await agent.run("t2", "hello")
        plain = await Kernel([], thread_store=store, unknown_keys="refuse").start_run("t2")
        assert [m.content for m in plain.snapshot.to_dict()["statekernel.messages"]] == [
            "hello",
            "done",
        ]
        await plain.abandon()

        class Hold(Plugin):
            id = "hold"

            def register(self, registrar: PluginRegistrar) -> None:
                registrar.register_tool_gate(lambda ctx: Suspend("wait"))

        call = InferenceResponse("", (ToolCall("c1", "noop", {}),))
        held = Agent(
            [Hold()], ScriptedModel([call]), {"noop": lambda a, c: "ok"}, thread_store=store
        )
        assert (await held.run("t3", "hi")).outcome == "suspended"
        with pytest.raises(StateError, match="the Agent facade's own"):  # its run keys
            await Kernel([Hold()], thread_store=store, unknown_keys="refuse").resume_run("t3")


class Drafts(StateKey[tuple[str, ...], str]):
    key = "drafts.items"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: tuple[str, ...], update: str) -> tuple[str, ...]:
        return (*value, update)


class DraftsPlugin(Plugin):
    """A plugin whose thread key should not outlive its installation."""

    id = "drafts"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Drafts, StateKeyOptions(retain_on_uninstall=False))
        registrar.register_phase_hook(
            Phase.STEP_START, lambda ctx: StateCommand().update(Drafts, "draft")
        )


async def test_a_key_that_is_not_retained_is_gone_after_its_plugin_was_uninstalled(
    tmp_path: Path,
) -> None:
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        await one_run(Kernel([Core(), NotesPlugin(), DraftsPlugin()], thread_store=store))
        without = Kernel([Core(), NotesPlugin()], thread_store=store, unknown_keys="refuse")
        await one_run(without)  # not refused: the thread says the drafts go with the plugin
        back = Kernel([Core(), NotesPlugin(), DraftsPlugin()], thread_store=store)
        run = await back.start_run("t1")
        assert Drafts not in run.snapshot  # dropped while the plugin was away
        assert run.snapshot.get(Notes) == ("step 0", "step 1")
        assert run.snapshot.get(Steps) == 2
        await run.abandon()
        report = await back.verify("t1")
        assert report.ok, report  # the journal replays to the same state


async def test_a_key_that_is_not_retained_stays_while_its_plugin_stays(tmp_path: Path) -> None:
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        kernel = Kernel([Core(), DraftsPlugin()], thread_store=store)
        await one_run(kernel)
        await one_run(Kernel([Core(), DraftsPlugin()], thread_store=store))
        run = await Kernel([Core(), DraftsPlugin()], thread_store=store).start_run("t1")
        assert run.snapshot.get(Drafts) == ("draft", "draft")
        await run.abandon()


async def test_a_dropped_key_stays_dropped_when_no_snapshot_can_be_written(
    tmp_path: Path,
) -> None:
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        installed = Kernel([Core(), NotesPlugin(), DraftsPlugin()], thread_store=store)
        await one_run(installed)
        await one_run(installed)  # records after the snapshot, notes' ops among them
        # Without either plugin, the notes' journal blocks snapshots: the drop goes in the
        # journal instead, as a clear.
        await one_run(Kernel([Core()], thread_store=store))
        back = Kernel([Core(), NotesPlugin(), DraftsPlugin()], thread_store=store)
        run = await back.start_run("t1")
        assert Drafts not in run.snapshot
        assert run.snapshot.get(Notes) == ("step 0", "step 1")
        await run.abandon()
        assert (await back.verify("t1")).ok
