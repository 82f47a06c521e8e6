"""Plugins that come and go: one thread, three kernels, a plugin left out of the middle one.

A "notes" plugin keeps its notes (carried over while it is away), a "drafts" plugin says its
drafts go with it (`retain_on_uninstall=False`). The thread is saved to SQLite; the second
kernel has neither plugin; the third has both again. Last, a strict kernel
(`unknown_keys="refuse"`) that knows only part of the thread refuses to load it.

Run: .venv/bin/python docs/examples/plugins_come_and_go.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from statekernel import (
    Kernel,
    KeyScope,
    Phase,
    Plugin,
    PluginRegistrar,
    StateCommand,
    StateError,
    StateKey,
    StateKeyOptions,
)
from statekernel.stores import SqliteThreadStore


class Appended(StateKey[tuple[str, ...], str]):
    """A thread key that appends (the base of both plugins' keys)."""

    key = "example.abstract"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: tuple[str, ...], update: str) -> tuple[str, ...]:
        return (*value, update)


class Notes(Appended):
    key = "notes.items"


class Drafts(Appended):
    key = "drafts.items"


class NotesPlugin(Plugin):
    id = "notes"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Notes)
        registrar.register_phase_hook(
            Phase.STEP_START, lambda ctx: StateCommand().update(Notes, "a note")
        )


class DraftsPlugin(Plugin):
    id = "drafts"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Drafts, StateKeyOptions(retain_on_uninstall=False))
        registrar.register_phase_hook(
            Phase.STEP_START, lambda ctx: StateCommand().update(Drafts, "a draft")
        )


class Clock(StateKey[int, int]):
    key = "core.steps"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Core(Plugin):
    id = "core"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Clock)
        registrar.register_phase_hook(Phase.STEP_END, lambda ctx: StateCommand().update(Clock, 1))


async def step(kernel: Kernel) -> None:
    run = await kernel.start_run("thread-1")
    await run.run_phase(Phase.STEP_START)
    await run.run_phase(Phase.STEP_END)
    await run.finish()


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        async with SqliteThreadStore(Path(folder) / "threads.db") as store:
            await step(Kernel([Core(), NotesPlugin(), DraftsPlugin()], thread_store=store))
            await step(Kernel([Core()], thread_store=store))  # both plugins left out
            back = Kernel([Core(), NotesPlugin(), DraftsPlugin()], thread_store=store)
            run = await back.start_run("thread-1")
            print("notes, carried over while away:", run.snapshot.get(Notes))
            print("drafts, dropped while away:    ", run.snapshot.get(Drafts))
            print("steps taken, by every kernel:  ", run.snapshot.get(Clock))
            await run.abandon()
            strict = Kernel([Core()], thread_store=store, unknown_keys="refuse")
            try:
                await strict.start_run("thread-1")
            except StateError as error:
                print("a strict kernel refuses:", str(error).split(", and")[0])


if __name__ == "__main__":
    asyncio.run(main())
