"""Dead-lettered actions (Awaken's `FailedScheduledActions`): they fail alone, are kept, retried.

An action whose spec says `on_failure = "dead_letter"` fails alone, is kept in the snapshot
and the journal, and can be retried."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from statekernel import (
    Agent,
    CommitRejected,
    DeadLetter,
    DeadLetters,
    HookFailed,
    InvalidDeclaration,
    Kernel,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScheduledActionSpec,
    ScriptedModel,
    StateCommand,
    StateError,
    StateKey,
)
from statekernel.events import RunFinished
from statekernel.stores import SqliteThreadStore


class Order(msgspec.Struct, frozen=True):
    item: str
    quantity: int


class Deliver(ScheduledActionSpec[Order]):
    key = "shop.deliver"
    phase = Phase.STEP_END
    on_failure = "dead_letter"


class Notify(ScheduledActionSpec[str]):
    key = "shop.notify"
    phase = Phase.STEP_END


class Strict(ScheduledActionSpec[str]):
    key = "shop.strict"
    phase = Phase.STEP_END


class Delivered(StateKey[tuple[str, ...], str]):
    key = "shop.delivered"

    @staticmethod
    def apply(value: tuple[str, ...], update: str) -> tuple[str, ...]:
        return (*value, update)


class Shop(Plugin):
    id = "shop"

    def __init__(self, *, failing: int = 1) -> None:
        self.failing = failing  # how many deliveries fail before they work
        self.deliveries = 0
        self.notified: list[str] = []

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Delivered)
        registrar.register_phase_hook(Phase.STEP_START, self.order)
        registrar.register_action(Deliver, self.deliver)
        registrar.register_action(Notify, self.notify)
        registrar.register_action(Strict, self.strict)

    def order(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().schedule(Deliver, Order("tea", 2)).schedule(Notify, "ordered")

    def deliver(self, order: Order, ctx: PhaseContext) -> StateCommand:
        self.deliveries += 1
        if self.deliveries <= self.failing:
            raise ConnectionError("courier unreachable")
        return StateCommand().update(Delivered, order.item)

    def notify(self, message: str, ctx: PhaseContext) -> None:
        self.notified.append(message)

    def strict(self, message: str, ctx: PhaseContext) -> None:
        raise ValueError(message)


async def test_a_failing_action_is_kept_the_phase_goes_on_and_a_retry_runs_it_once(
    tmp_path: Path,
) -> None:
    shop = Shop(failing=1)
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        kernel = Kernel([shop], thread_store=store)
        run = await kernel.start_run("t1")
        await run.run_phase(Phase.STEP_START)
        report = await run.run_phase(Phase.STEP_END)  # no HookFailed
        assert report.actions_run == 2 and shop.notified == ["ordered"]
        (letter,) = run.snapshot.get(DeadLetters)
        assert isinstance(letter, DeadLetter)
        assert letter.action == "shop.deliver" and letter.phase is Phase.STEP_END
        assert letter.error == "ConnectionError: courier unreachable"
        assert msgspec.json.decode(letter.payload or "", type=Order) == Order("tea", 2)
        assert letter.attempt == 1 and letter.run_id == run.identity.run_id
        assert run.snapshot.get(Delivered) == ()

        await run.retry(letter)
        assert run.snapshot.get(DeadLetters) == (letter,)  # kept until the retry has run
        with pytest.raises(StateError, match="already being retried"):
            await run.retry(letter)
        await run.run_phase(Phase.STEP_END)
        assert shop.deliveries == 2  # once more, not more
        assert run.snapshot.get(Delivered) == ("tea",)
        assert run.snapshot.get(DeadLetters) == ()  # taken out by the retry's own commit
        await run.run_phase(Phase.STEP_END)
        assert shop.deliveries == 2
        await run.finish()

        ops = [
            (record.sources, op.key)
            for record in await kernel.history("t1")
            for op in record.ops
            if op.key == "statekernel.dead_letters"
        ]
        assert ops == [
            (("dead_letter:shop.deliver",), "statekernel.dead_letters"),  # the failure
            (("action:shop.deliver",), "statekernel.dead_letters"),  # the retry, with its work
        ]


async def test_a_letter_survives_a_restart_and_a_second_failure_counts_its_attempt(
    tmp_path: Path,
) -> None:
    path = tmp_path / "threads.db"
    async with SqliteThreadStore(path) as store:
        run = await Kernel([Shop(failing=5)], thread_store=store).start_run("t1")
        await run.run_phase(Phase.STEP_START)
        await run.run_phase(Phase.STEP_END)
        await run.finish()
    async with SqliteThreadStore(path) as store:  # another process, say
        run = await Kernel([Shop(failing=5)], thread_store=store).start_run("t1")
        (letter,) = run.snapshot.get(DeadLetters)
        await run.retry(letter.id)
        await run.run_phase(Phase.STEP_END)
        (again,) = run.snapshot.get(DeadLetters)  # the failed retry replaced its letter
        assert again.attempt == 2 and again.id != letter.id
        with pytest.raises(StateError, match="holds no dead letter"):
            await run.retry(letter.id)
        with pytest.raises(TypeError, match="DeadLetter or its id"):
            await run.retry(3)  # type: ignore[arg-type]
        await run.finish()


async def test_a_retry_whose_phase_never_comes_keeps_its_letter(tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    async with SqliteThreadStore(path) as store:
        shop = Shop(failing=1)
        kernel = Kernel([shop], thread_store=store)
        run = await kernel.start_run("t1")
        await run.run_phase(Phase.STEP_START)
        await run.run_phase(Phase.STEP_END)
        (letter,) = run.snapshot.get(DeadLetters)
        await run.retry(letter)
        await run.finish()  # STEP_END never came again: the retry is dropped, not the letter
        run = await kernel.start_run("t1")
        assert run.snapshot.get(DeadLetters) == (letter,)
        await run.retry(letter)
        await run.run_phase(Phase.STEP_END)
        assert run.snapshot.get(Delivered) == ("tea",) and run.snapshot.get(DeadLetters) == ()
        await run.finish()


async def test_without_the_policy_a_failing_action_still_fails_the_phase() -> None:
    class StrictShop(Shop):
        def order(self, ctx: PhaseContext) -> StateCommand:
            return StateCommand().schedule(Strict, "no")

    run = await Kernel([StrictShop()]).start_run("t")
    await run.run_phase(Phase.STEP_START)
    with pytest.raises(HookFailed, match="no"):
        await run.run_phase(Phase.STEP_END)
    assert run.snapshot.get(DeadLetters) == ()


async def test_a_rejected_command_of_the_action_is_dead_lettered_too() -> None:
    class Picky(StateKey[int, int]):
        key = "shop.picky"

        @staticmethod
        def validate(value: int) -> None:
            if value < 0:
                raise ValueError("negative")

    class Bad(ScheduledActionSpec[int]):
        key = "shop.bad"
        phase = Phase.STEP_END
        on_failure = "dead_letter"

    class Writer(Plugin):
        id = "writer"

        def register(self, registrar: PluginRegistrar) -> None:
            registrar.register_key(Picky)
            registrar.register_phase_hook(
                Phase.STEP_START, lambda ctx: StateCommand().schedule(Bad, -1)
            )
            registrar.register_action(Bad, lambda n, ctx: StateCommand().update(Picky, n))

    run = await Kernel([Writer()]).start_run("t")
    await run.run_phase(Phase.STEP_START)
    await run.run_phase(Phase.STEP_END)
    (letter,) = run.snapshot.get(DeadLetters)
    assert letter.error.startswith(CommitRejected.__name__) and "negative" in letter.error
    assert run.snapshot.get(Picky) == 0


def test_an_unknown_policy_is_refused_where_it_is_declared() -> None:
    with pytest.raises(InvalidDeclaration, match="on_failure"):

        class Wrong(ScheduledActionSpec[int]):
            key = "shop.wrong"
            phase = Phase.STEP_END
            on_failure = "ignore"  # type: ignore[assignment]


class DeliverV2(ScheduledActionSpec[int]):
    """The same action, its payload type changed in a later release."""

    key = "shop.deliver"
    phase = Phase.STEP_END
    on_failure = "dead_letter"


async def test_a_saved_action_whose_payload_no_longer_decodes_is_dead_lettered_on_resume(
    tmp_path: Path,
) -> None:
    path = tmp_path / "threads.db"
    async with SqliteThreadStore(path) as store:
        run = await Kernel([Shop()], thread_store=store).start_run("t1")
        await run.run_phase(Phase.STEP_START)  # Deliver waits for STEP_END
        await run.suspend(b"waiting")

    class ShopV2(Plugin):
        id = "shop"

        def register(self, registrar: PluginRegistrar) -> None:
            registrar.register_key(Delivered)
            registrar.register_action(DeliverV2, lambda n, ctx: None)
            registrar.register_action(Notify, lambda m, ctx: None)

    async with SqliteThreadStore(path) as store:
        run, detail = await Kernel([ShopV2()], thread_store=store).resume_run("t1")
        assert detail == b"waiting"
        (letter,) = run.snapshot.get(DeadLetters)
        assert letter.action == "shop.deliver" and "does not decode" in letter.error
        assert msgspec.json.decode(letter.payload or "") == {"item": "tea", "quantity": 2}
        with pytest.raises(StateError, match="no\\s+longer decodes"):
            await run.retry(letter)  # the old payload does not fit today's type either
        report = await run.run_phase(Phase.STEP_END)
        assert report.actions_run == 1  # Notify, which decoded, still runs
        await run.finish()


class OrderOnce(Shop):
    """Orders in the first run only; later runs just talk (and may retry)."""

    def order(self, ctx: PhaseContext) -> StateCommand:
        if ctx.run.run_id.endswith("run-1"):
            return StateCommand().schedule(Deliver, Order("tea", 2))
        return StateCommand()


async def test_an_agent_lists_its_dead_letters_and_retries_them_in_a_run(tmp_path: Path) -> None:
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        first = Agent([OrderOnce(failing=1)], ScriptedModel(), thread_store=store)
        result = await first.run("t", "order tea")
        assert result.outcome == "success"  # the failed delivery did not fail the run
        (letter,) = await first.dead_letters("t")
        assert (letter.action, letter.attempt) == ("shop.deliver", 1)

        # Another agent on the same store (a later process), whose deliveries work.
        later = Agent([OrderOnce(failing=0)], ScriptedModel(), thread_store=store)
        assert await later.dead_letters("t") == (letter,)
        retried = await later.run("t", "any news?", retry=letter.id)
        assert retried.snapshot.get(Delivered) == ("tea",)
        assert retried.snapshot.get(DeadLetters) == ()
        assert await later.dead_letters("t") == ()
    assert await Agent([], ScriptedModel()).dead_letters("nobody") == ()


async def test_an_agent_retry_of_a_letter_the_thread_lacks_runs_nothing(tmp_path: Path) -> None:
    async with SqliteThreadStore(tmp_path / "threads.db") as store:
        agent = Agent([OrderOnce(failing=1)], ScriptedModel(), thread_store=store)
        await agent.run("t", "order tea")
        (letter,) = await agent.dead_letters("t")
        before = await agent.kernel.history("t")
        with pytest.raises(StateError, match="holds no dead letter 'no-such-letter'"):
            await agent.run("t", "hello", retry=["no-such-letter"])
        with pytest.raises(StateError, match="already being retried"):
            await agent.run("t", "hello", retry=[letter, letter.id])
        with pytest.raises(TypeError, match="retry takes DeadLetters or their ids"):
            await agent.run("t", "hello", retry=[42])  # type: ignore[list-item]
        assert await agent.kernel.history("t") == before  # no run happened, nothing was lost
        assert await agent.dead_letters("t") == (letter,)


async def test_a_streamed_run_retries_too() -> None:
    shop = OrderOnce(failing=1)
    agent = Agent([shop], ScriptedModel())
    await agent.run("t", "order tea")
    (letter,) = await agent.dead_letters("t")
    events = [event async for event in agent.stream("t", "again", retry=(letter,))]
    assert isinstance(events[-1], RunFinished)
    assert events[-1].result.snapshot.get(Delivered) == ("tea",)
    assert shop.deliveries == 2


async def test_a_letter_read_from_another_thread_is_refused_not_mistaken() -> None:
    agent = Agent([OrderOnce(failing=2)], ScriptedModel())
    await agent.run("a", "order tea")
    await agent.run("b", "order tea")
    (from_a,) = await agent.dead_letters("a")
    (from_b,) = await agent.dead_letters("b")
    assert from_a.id == from_b.id  # ids are unique within a thread only
    with pytest.raises(StateError, match="read from another thread"):
        await agent.run("b", "retry a's", retry=from_a)
    assert await agent.dead_letters("b") == (from_b,)  # nothing ran
    retried = await agent.run("b", "retry b's", retry=from_a.id)  # an id is the thread's own
    assert retried.snapshot.get(DeadLetters) == ()
