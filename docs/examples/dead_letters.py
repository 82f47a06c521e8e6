"""Dead letters: an action that fails alone, is kept, survives a restart and is retried.

A shop schedules a delivery at every step. The courier is down for the first delivery, so
the action, declared with `on_failure = "dead_letter"`, fails alone: the step completes and
the letter is saved with the thread. A second process finds the letter and retries it, and
the delivery goes through.

Run: .venv/bin/python docs/examples/dead_letters.py
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path

import msgspec

from statekernel import (
    DeadLetters,
    Kernel,
    KeyScope,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScheduledActionSpec,
    StateCommand,
    StateKey,
)
from statekernel.stores import SqliteThreadStore


class Order(msgspec.Struct, frozen=True):
    item: str


class Deliver(ScheduledActionSpec[Order]):
    key = "shop.deliver"
    phase = Phase.STEP_END
    on_failure = "dead_letter"  # a failure is kept, not raised


class Delivered(StateKey[tuple[str, ...], str]):
    key = "shop.delivered"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: tuple[str, ...], update: str) -> tuple[str, ...]:
        return (*value, update)


class Shop(Plugin):
    id = "shop"

    def __init__(self, courier_up: bool) -> None:
        self.courier_up = courier_up

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Delivered)
        registrar.register_phase_hook(Phase.STEP_START, self.order)
        registrar.register_action(Deliver, self.deliver)

    def order(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().schedule(Deliver, Order("tea"))

    def deliver(self, order: Order, ctx: PhaseContext) -> StateCommand:
        if not self.courier_up:
            raise ConnectionError("courier unreachable")
        return StateCommand().update(Delivered, order.item)


async def main() -> None:
    logging.basicConfig(level=logging.ERROR)  # the WARNING for the failure stays quiet here
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "threads.db"
        async with SqliteThreadStore(path) as store:
            run = await Kernel([Shop(courier_up=False)], thread_store=store).start_run("t1")
            await run.run_phase(Phase.STEP_START)
            await run.run_phase(Phase.STEP_END)  # completes: the failure is a letter
            for letter in run.snapshot.get(DeadLetters):
                print(f"dead letter {letter.id}: {letter.action} attempt {letter.attempt}")
                print(f"  error: {letter.error}; payload {letter.payload}")
            await run.finish()
        async with SqliteThreadStore(path) as store:  # later, in another process
            run = await Kernel([Shop(courier_up=True)], thread_store=store).start_run("t1")
            (letter,) = run.snapshot.get(DeadLetters)
            await run.retry(letter)  # scheduled again as attempt 2
            await run.run_phase(Phase.STEP_END)
            print("after the retry: delivered", run.snapshot.get(Delivered))
            print("dead letters left:", len(run.snapshot.get(DeadLetters)))
            await run.finish()


if __name__ == "__main__":
    asyncio.run(main())
