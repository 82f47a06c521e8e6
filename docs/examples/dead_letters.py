"""Dead letters: an action that fails alone, is kept, survives a restart and is retried.

A shop schedules a delivery at every step. The courier is down for the first delivery, so
the action, declared with `on_failure = "dead_letter"`, fails alone: the step completes and
the letter is saved with the thread. A second process finds the letter and retries it, and
the delivery goes through. Then the same through the Agent: `agent.dead_letters(thread)`
lists what failed, and `agent.run(thread, ..., retry=letters)` retries it within a run.

Run: .venv/bin/python docs/examples/dead_letters.py
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path

import msgspec

from statekernel import (
    Agent,
    DeadLetters,
    Kernel,
    KeyScope,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScheduledActionSpec,
    ScriptedModel,
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

    def __init__(self, courier_up: bool, *, ordering: bool = True) -> None:
        self.courier_up = courier_up
        self.ordering = ordering  # whether each step orders tea

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Delivered)
        registrar.register_phase_hook(Phase.STEP_START, self.order)
        registrar.register_action(Deliver, self.deliver)

    def order(self, ctx: PhaseContext) -> StateCommand | None:
        return StateCommand().schedule(Deliver, Order("tea")) if self.ordering else None

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

        async with SqliteThreadStore(path) as store:  # the same, driven by an Agent
            agent = Agent([Shop(courier_up=False)], ScriptedModel(), thread_store=store)
            result = await agent.run("t2", "Order tea, please.")
            letters = await agent.dead_letters("t2")
            print(f"agent run: {result.outcome}, dead letters {[d.action for d in letters]}")
        async with SqliteThreadStore(path) as store:
            shop = Shop(courier_up=True, ordering=False)
            agent = Agent([shop], ScriptedModel(), thread_store=store)
            letters = await agent.dead_letters("t2")
            result = await agent.run("t2", "Any news?", retry=letters)
            print("agent retry: delivered", result.snapshot.get(Delivered))
            print("dead letters left:", len(await agent.dead_letters("t2")))


if __name__ == "__main__":
    asyncio.run(main())
