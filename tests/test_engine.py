"""The phase engine: determinism, conflicts, effects, actions, failures."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

import pytest
from sample_keys import Counter, Log, Msg, Positive, Title
from samples import Hook, Keys

from statekernel import (
    CommitRejected,
    DuplicateRegistration,
    EffectSpec,
    HookFailed,
    Kernel,
    MergeStrategy,
    Phase,
    PhaseContext,
    PhaseRunLoopExceeded,
    Plugin,
    PluginRegistrar,
    ScheduledActionSpec,
    Snapshot,
    StateCommand,
    StateError,
    StateKey,
    StateValidationError,
    UnknownActionHandler,
    UnknownEffectHandler,
    UnknownStateKey,
)


class Tally(StateKey[int, int]):
    """EXCLUSIVE counter: hooks write `snapshot value + 1`, so concurrent writes conflict."""

    key = "t.tally"


class Audit(EffectSpec[str]):
    key = "t.audit"


class Again(ScheduledActionSpec[int]):
    key = "t.again"
    phase = Phase.STEP_START


class Later(ScheduledActionSpec[str]):
    key = "t.later"
    phase = Phase.STEP_END


class FnPlugin(Plugin):
    """A plugin assembled from functions, so each test states only what it needs."""

    def __init__(self, id: str, setup: Callable[[PluginRegistrar], None]) -> None:
        self.id = id
        self._setup = setup

    def register(self, registrar: PluginRegistrar) -> None:
        self._setup(registrar)


async def run_once(plugins: list[Plugin], phase: Phase = Phase.STEP_START) -> Any:
    kernel = Kernel(plugins)
    run = await kernel.start_run("t1")
    report = await run.run_phase(phase)
    return run, report


# -- determinism ------------------------------------------------------------------------


def _sleepy_appender(index: int, rng: random.Random) -> Callable[[PhaseContext], Any]:
    delay = rng.random() / 500

    async def hook(ctx: PhaseContext) -> StateCommand:
        await asyncio.sleep(delay)
        return (
            StateCommand()
            .update(Log, Msg("hook", str(index)))
            .update(Counter, index)
            .update(Title, f"from {index}")
        )

    return hook


async def test_result_is_the_registration_order_result_whatever_the_timing() -> None:
    outcomes = set()
    for seed in range(50):
        rng = random.Random(seed)
        plugins: list[Plugin] = [Keys(Log, Counter, Title)]
        plugins += [Hook(f"p{i}", Phase.STEP_START, _sleepy_appender(i, rng)) for i in range(5)]
        run, _ = await run_once(plugins)
        snap = run.snapshot
        outcomes.add(
            (
                snap.revision,
                tuple(m.text for m in snap.get(Log)),
                snap.get(Counter),
                snap.get(Title),
            )
        )
    assert len(outcomes) == 1
    ((revision, log, counter, title),) = outcomes
    assert log == ("0", "1", "2", "3", "4")
    assert counter == 10
    # Title is EXCLUSIVE: p0 commits with the round, p1..p4 re-run one by one afterwards.
    assert title == "from 4"
    assert revision == 5


# -- conflicts --------------------------------------------------------------------------


def _increment(ctx: PhaseContext) -> StateCommand:
    return StateCommand().update(Tally, ctx.snapshot.get(Tally) + 1)


async def test_two_hooks_on_one_exclusive_key_both_land() -> None:
    run, report = await run_once(
        [
            Keys(Tally),
            Hook("a", Phase.STEP_START, _increment),
            Hook("b", Phase.STEP_START, _increment),
        ]
    )
    assert run.snapshot.get(Tally) == 2
    assert report.conflicts == 1
    assert report.commits == 2
    assert report.hooks_run == ("a", "b", "b")


async def test_a_command_two_hooks_returned_re_runs_the_later_hook() -> None:
    """Hooks a and c return one and the same command object, b nothing: c's is deferred,
    and c is the hook that runs again, on the snapshot a's write made."""
    shared = StateCommand().update(Title, "shared")
    calls: list[str] = []

    def hook(name: str, result: Callable[[], StateCommand | None]) -> Hook:
        def call(ctx: PhaseContext) -> StateCommand | None:
            calls.append(f"{name}@{ctx.snapshot.get(Title)}")
            return result()

        return Hook(name, Phase.STEP_START, call)

    rerun = StateCommand().update(Title, "again")
    returns = {"d": [shared, rerun]}
    kernel = Kernel(
        [
            Keys(Title),
            hook("a", lambda: shared),
            hook("b", lambda: None),
            hook("c", StateCommand),  # an empty command: nothing to keep
            hook("d", lambda: returns["d"].pop(0)),
        ]
    )
    run = await kernel.start_run("t")
    report = await run.run_phase(Phase.STEP_START)
    assert report.reruns == ("d",) and report.hooks_run == ("a", "b", "c", "d", "d")
    assert calls == ["a@", "b@", "c@", "d@", "d@shared"]
    assert run.snapshot.get(Title) == "again"
    await run.finish()
    records = await kernel.history("t")
    assert [r.sources for r in records] == [("plugin:a",), ("plugin:d",)]


async def test_a_phase_reports_each_of_its_counts_apart() -> None:
    """Every count a phase reports differs from the others here, so none reads another's."""

    def audit(payload: str, snapshot: Snapshot) -> None:
        if payload.startswith("bad"):
            raise RuntimeError("audit bug")

    def again(payload: int, ctx: PhaseContext) -> StateCommand:
        command = StateCommand().update(Counter, 1)
        return command.schedule(Again, payload - 1) if payload > 1 else command

    def first(ctx: PhaseContext) -> StateCommand:
        command = _increment(ctx).schedule(Again, 4)
        return command.emit(Audit, "ok").emit(Audit, "bad").emit(Audit, "bad too")

    def setup(r: PluginRegistrar) -> None:
        r.register_key(Counter)
        r.register_effect(Audit, audit)
        r.register_action(Again, again)
        r.register_phase_hook(Phase.STEP_START, first)

    run, report = await run_once(
        [Keys(Tally), FnPlugin("a", setup), Hook("b", Phase.STEP_START, _increment)]
    )
    assert (report.commits, report.conflicts, report.actions_run) == (6, 1, 4)
    assert (report.effects_dispatched, report.effects_failed) == (3, 2)
    assert (report.hooks_run, report.reruns) == (("a", "b", "b"), ("b",))
    assert [effect.key for effect in report.effects] == ["t.audit"] * 3
    assert report.actions == ("t.again",) * 4
    assert report.phase is Phase.STEP_START and report.revision == run.revision == 6


async def test_a_round_with_re_runs_logs_no_error(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="statekernel"):
        run, report = await run_once(
            [
                Keys(Tally),
                Hook("a", Phase.STEP_START, _increment),
                Hook("b", Phase.STEP_START, _increment),
            ]
        )
    assert (run.snapshot.get(Tally), report.conflicts) == (2, 1)
    assert not [r for r in caplog.records if r.name.startswith("statekernel")]


async def test_commutative_writes_commit_once_without_conflict() -> None:
    def add_one(ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Counter, 1)

    run, report = await run_once(
        [
            Keys(Counter),
            Hook("a", Phase.STEP_START, add_one),
            Hook("b", Phase.STEP_START, add_one),
        ]
    )
    assert run.snapshot.get(Counter) == 2
    assert (report.commits, report.conflicts, report.revision) == (1, 0, 1)


async def test_a_failing_rerun_commits_nothing_of_the_round() -> None:
    calls = {"b": 0}

    def flaky(ctx: PhaseContext) -> StateCommand:
        calls["b"] += 1
        if calls["b"] == 2:
            raise RuntimeError("fails on re-run")
        return _increment(ctx)

    kernel = Kernel(
        [
            Keys(Tally, Counter),
            Hook("a", Phase.STEP_START, _increment),
            Hook("b", Phase.STEP_START, flaky),
        ]
    )
    run = await kernel.start_run("t")
    with pytest.raises(HookFailed) as caught:
        await run.run_phase(Phase.STEP_START)
    assert caught.value.plugin == "b" and "fails on re-run" in str(caught.value)
    assert run.revision == 0 and Tally not in run.snapshot


# -- failures ---------------------------------------------------------------------------


async def test_a_raising_hook_fails_the_phase_and_commits_nothing() -> None:
    def boom(ctx: PhaseContext) -> StateCommand:
        raise ValueError("no")

    kernel = Kernel(
        [
            Keys(Counter),
            Hook("good", Phase.STEP_START, lambda ctx: StateCommand().update(Counter, 1)),
            Hook("bad", Phase.STEP_START, boom),
        ]
    )
    run = await kernel.start_run("t")
    with pytest.raises(HookFailed) as caught:
        await run.run_phase(Phase.STEP_START)
    assert (caught.value.plugin, caught.value.phase) == ("bad", "STEP_START")
    assert caught.value.phase is Phase.STEP_START  # the member itself, equal to its name
    assert isinstance(caught.value.cause, ValueError)
    assert run.revision == 0


async def test_a_failing_async_hook_among_others_fails_the_phase_by_registration_order() -> None:
    async def slow_fail(ctx: PhaseContext) -> None:
        await asyncio.sleep(0.002)
        raise ValueError("first registered")

    async def fast_fail(ctx: PhaseContext) -> None:
        raise ValueError("second registered")

    kernel = Kernel(
        [
            Hook("first", Phase.STEP_START, slow_fail),
            Hook("second", Phase.STEP_START, fast_fail),
        ]
    )
    run = await kernel.start_run("t")
    with pytest.raises(HookFailed) as caught:
        await run.run_phase(Phase.STEP_START)
    assert caught.value.plugin == "first"


async def test_a_hook_returning_a_non_command_is_a_hook_failure() -> None:
    kernel = Kernel([Hook("odd", Phase.STEP_START, lambda ctx: {"x": 1})])
    run = await kernel.start_run("t")
    with pytest.raises(HookFailed, match="StateCommand or None"):
        await run.run_phase(Phase.STEP_START)


async def test_apply_rejection_raises_commit_rejected_naming_key_and_plugin() -> None:
    kernel = Kernel(
        [
            Keys(Positive, Counter),
            Hook("ok", Phase.STEP_START, lambda ctx: StateCommand().update(Counter, 1)),
            Hook("neg", Phase.STEP_START, lambda ctx: StateCommand().update(Positive, -3)),
        ]
    )
    run = await kernel.start_run("t")
    with pytest.raises(CommitRejected) as caught:
        await run.run_phase(Phase.STEP_START)
    assert (caught.value.key, caught.value.plugin) == ("test.positive", "neg")
    assert run.revision == 0 and run.snapshot.get(Counter) == 0


async def test_unregistered_key_handler_and_effect_are_raised_as_such() -> None:
    cases: list[tuple[Callable[[PhaseContext], StateCommand], type[Exception]]] = [
        (lambda ctx: StateCommand().update(Title, "x"), UnknownStateKey),
        (lambda ctx: StateCommand().emit(Audit, "x"), UnknownEffectHandler),
        (lambda ctx: StateCommand().schedule(Again, 1), UnknownActionHandler),
    ]
    for hook, error in cases:
        kernel = Kernel(
            [
                Keys(Counter),
                Hook("ok", Phase.STEP_START, lambda ctx: StateCommand().update(Counter, 1)),
                Hook("bad", Phase.STEP_START, hook),
            ]
        )
        run = await kernel.start_run("t")
        with pytest.raises(error) as caught:
            await run.run_phase(Phase.STEP_START)
        assert getattr(caught.value, "plugin", None) == "bad"
        assert run.revision == 0


async def test_wrong_update_type_inside_a_hook_surfaces_as_state_validation_error() -> None:
    kernel = Kernel(
        [
            Keys(Counter),
            Hook("typo", Phase.STEP_START, lambda ctx: StateCommand().update(Counter, "1")),
        ]
    )
    run = await kernel.start_run("t")
    with pytest.raises(StateValidationError, match="test.counter"):
        await run.run_phase(Phase.STEP_START)


def test_duplicate_registrations_fail_at_construction() -> None:
    def audit_handler(r: PluginRegistrar) -> None:
        r.register_effect(Audit, lambda payload, snap: None)

    with pytest.raises(DuplicateRegistration, match="test.counter") as twice:
        Kernel([Keys(Counter), FnPlugin("again", lambda r: r.register_key(Counter))])
    # the usual fix: register it once, and write it from both
    assert "register it in one of the two plugins only" in str(twice.value)
    assert "may read and write a registered key, whoever registered it" in str(twice.value)
    with pytest.raises(DuplicateRegistration, match="t.audit") as caught:
        Kernel([FnPlugin("one", audit_handler), FnPlugin("two", audit_handler)])
    assert (caught.value.first, caught.value.second) == ("one", "two")
    assert "Each spec has one handler" in str(caught.value)
    with pytest.raises(DuplicateRegistration, match="give one of them another `id`"):
        Kernel([FnPlugin("same", lambda r: None), FnPlugin("same", lambda r: None)])

    class SameName(StateKey[int, int]):
        key = "test.counter"

    with pytest.raises(DuplicateRegistration):
        Kernel([Keys(Counter), FnPlugin("other", lambda r: r.register_key(SameName))])


class Budget(StateKey[int, int]):
    key = "promise.budget"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update

    @staticmethod
    def validate(value: int) -> None:
        if value < 0:
            raise ValueError(f"budget would be {value}")


def _spend(amount: int) -> Any:
    return lambda ctx: StateCommand().update(Budget, amount)


async def test_a_refused_commit_names_the_plugin_whose_write_was_refused() -> None:
    kernel = Kernel(
        [
            Keys(Budget, Title),
            Hook("first", Phase.STEP_START, _spend(1)),
            Hook("overspender", Phase.STEP_START, _spend(-5)),
            Hook("bystander", Phase.STEP_START, lambda ctx: StateCommand().update(Title, "x")),
        ]
    )
    run = await kernel.start_run("t")
    with pytest.raises(CommitRejected) as caught:
        await run.run_phase(Phase.STEP_START)
    assert caught.value.key == "promise.budget"
    assert caught.value.plugin == "overspender"
    assert "overspender" in str(caught.value)
    assert run.revision == 0


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


# -- effects ----------------------------------------------------------------------------


async def test_effects_see_post_commit_state_and_failures_do_not_stop_the_phase() -> None:
    seen: list[tuple[str, int, int]] = []

    async def record(payload: str, snapshot: Snapshot) -> None:
        seen.append((payload, snapshot.get(Counter), snapshot.revision))

    class Broken(EffectSpec[str]):
        key = "t.broken"

    def broken(payload: str, snapshot: Snapshot) -> None:
        raise RuntimeError("handler bug")

    def setup(r: PluginRegistrar) -> None:
        r.register_key(Counter)
        r.register_effect(Audit, record)
        r.register_effect(Broken, broken)
        r.register_phase_hook(
            Phase.STEP_START,
            lambda ctx: StateCommand().update(Counter, 5).emit(Broken, "x").emit(Audit, "after"),
        )

    run, report = await run_once([FnPlugin("fx", setup)])
    assert seen == [("after", 5, 1)]
    assert (report.effects_dispatched, report.effects_failed) == (2, 1)
    assert run.snapshot.get(Counter) == 5


async def test_effect_handlers_fire_even_when_the_plugin_is_filtered_out() -> None:
    seen: list[str] = []

    def handler_setup(r: PluginRegistrar) -> None:
        r.register_effect(Audit, lambda payload, snap: seen.append(payload))
        r.register_phase_hook(Phase.STEP_START, lambda ctx: seen.append("hook ran"))

    emitter = Hook("emitter", Phase.STEP_START, lambda ctx: StateCommand().emit(Audit, "fx"))
    kernel = Kernel([FnPlugin("handler", handler_setup), emitter])
    run = await kernel.start_run("t", active_hook_filter=["emitter"])
    await run.run_phase(Phase.STEP_START)
    assert seen == ["fx"]


# -- actions ----------------------------------------------------------------------------


async def test_actions_converge_within_their_phase_and_later_ones_wait() -> None:
    log: list[str] = []

    def again(payload: int, ctx: PhaseContext) -> StateCommand:
        log.append(f"again {payload} at rev {ctx.snapshot.revision}")
        command = StateCommand().update(Counter, 1)
        if payload > 1:
            command.schedule(Again, payload - 1)
        return command

    def later(payload: str, ctx: PhaseContext) -> None:
        log.append(f"later {payload} in {ctx.phase}")

    def setup(r: PluginRegistrar) -> None:
        r.register_key(Counter)
        r.register_action(Again, again)
        r.register_action(Later, later)
        r.register_phase_hook(
            Phase.STEP_START, lambda ctx: StateCommand().schedule(Again, 3).schedule(Later, "x")
        )

    kernel = Kernel([FnPlugin("acts", setup)])
    run = await kernel.start_run("t")
    report = await run.run_phase(Phase.STEP_START)
    assert log == ["again 3 at rev 0", "again 2 at rev 1", "again 1 at rev 2"]
    assert report.actions_run == 3 and run.snapshot.get(Counter) == 3
    await run.run_phase(Phase.AFTER_INFERENCE)
    assert len(log) == 3
    end = await run.run_phase(Phase.STEP_END)
    assert log[-1] == "later x in STEP_END" and end.actions_run == 1


async def test_an_action_scheduling_itself_forever_stops_after_max_rounds() -> None:
    def forever(payload: int, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Counter, 1).schedule(Again, payload + 1)

    def setup(r: PluginRegistrar) -> None:
        r.register_key(Counter)
        r.register_action(Again, forever)
        r.register_phase_hook(Phase.STEP_START, lambda ctx: StateCommand().schedule(Again, 0))

    kernel = Kernel([FnPlugin("loop", setup)])
    run = await kernel.start_run("t")
    with pytest.raises(PhaseRunLoopExceeded) as caught:
        await run.run_phase(Phase.STEP_START)
    assert caught.value.rounds == 16 and caught.value.pending == ("t.again",)
    assert run.snapshot.get(Counter) == 16 and run.revision == 16


async def test_max_phase_rounds_is_configurable() -> None:
    def forever(payload: int, ctx: PhaseContext) -> StateCommand:
        return StateCommand().schedule(Again, payload + 1)

    def setup(r: PluginRegistrar) -> None:
        r.register_action(Again, forever)
        r.register_phase_hook(Phase.STEP_START, lambda ctx: StateCommand().schedule(Again, 0))

    run = await Kernel([FnPlugin("loop", setup)], max_phase_rounds=3).start_run("t")
    with pytest.raises(PhaseRunLoopExceeded, match="after 3"):
        await run.run_phase(Phase.STEP_START)


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


# -- filters, context and every phase ---------------------------------------------------


async def test_hooks_of_filtered_out_plugins_never_run() -> None:
    ran: list[str] = []

    def tracker(name: str) -> FnPlugin:
        return Hook(name, Phase.STEP_START, lambda ctx: ran.append(name))

    kernel = Kernel([tracker("a"), tracker("b"), tracker("c")])
    run = await kernel.start_run("t", active_hook_filter=("a", "c"))
    report = await run.run_phase(Phase.STEP_START)
    assert ran == ["a", "c"] and report.hooks_run == ("a", "c")
    with pytest.raises(ValueError, match="nope"):
        await kernel.start_run("t2", active_hook_filter=("nope",))


@pytest.mark.parametrize("phase", list(Phase))
async def test_every_phase_runs_hooks_with_the_agent_in_context(phase: Phase) -> None:
    seen: list[PhaseContext] = []
    kernel = Kernel([Hook("spy", phase, seen.append)])
    run = await kernel.start_run("thread-9", agent="writer", parent_thread_id="p")
    await run.run_phase(phase, messages=("hi",))
    (ctx,) = seen
    assert ctx.phase is phase and ctx.agent.name == "writer"
    assert ctx.run.thread_id == "thread-9" and ctx.run.parent_thread_id == "p"
    assert ctx.messages == ("hi",)


async def test_unknown_phase_fields_are_refused() -> None:
    run = await Kernel([]).start_run("t")
    with pytest.raises(TypeError, match="tool_resutl"):
        await run.run_phase(Phase.STEP_START, tool_resutl=1)


async def test_a_submitted_command_goes_through_the_same_path() -> None:
    seen: list[int] = []

    def setup(r: PluginRegistrar) -> None:
        r.register_key(Counter)
        r.register_effect(Audit, lambda payload, snap: seen.append(snap.get(Counter)))

    run = await Kernel([FnPlugin("p", setup)]).start_run("t")
    report = await run.submit(StateCommand().update(Counter, 2).emit(Audit, "x"))
    assert seen == [2] and report.commits == 1 and report.revision == 1
    with pytest.raises(UnknownStateKey):
        await run.submit(StateCommand().update(Title, "x"))


async def test_thread_keys_survive_runs_and_run_keys_reset() -> None:
    from statekernel import KeyScope

    class Seen(StateKey[int, int]):
        key = "t.seen"
        scope = KeyScope.THREAD
        merge = MergeStrategy.COMMUTATIVE

        @staticmethod
        def apply(value: int, update: int) -> int:
            return value + update

    def count(ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Seen, 1).update(Counter, 1)

    def setup(r: PluginRegistrar) -> None:
        r.register_key(Seen)
        r.register_key(Counter)
        r.register_phase_hook(Phase.RUN_START, count)

    kernel = Kernel([FnPlugin("p", setup)])
    for expected in (1, 2, 3):
        run = await kernel.start_run("t")
        await run.run_phase(Phase.RUN_START)
        assert run.snapshot.get(Seen) == expected and run.snapshot.get(Counter) == 1
        await run.finish()
    assert run.revision == 3  # monotonic across runs
    other = await kernel.start_run("other")
    assert other.snapshot.get(Seen) == 0


async def test_one_live_run_per_thread() -> None:
    from statekernel import StateError

    kernel = Kernel([])
    run = await kernel.start_run("t")
    with pytest.raises(StateError, match="already has a live run"):
        await kernel.start_run("t")
    await run.finish()
    with pytest.raises(StateError, match="finished"):
        await run.run_phase(Phase.STEP_START)
    await kernel.start_run("t")


# -- phases named by string ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["STEP_START", "step_start", "Step_Start"])
async def test_a_phase_may_be_named_by_its_name_in_any_case(name: str) -> None:
    seen: list[Phase] = []
    plugin = Hook("p", Phase.STEP_START, lambda ctx: seen.append(ctx.phase))
    run = await Kernel([plugin]).start_run("t")
    report = await run.run_phase(name)  # type: ignore[arg-type]
    assert report.phase is Phase.STEP_START
    assert seen == [Phase.STEP_START]


@pytest.mark.parametrize("name", ["STEP-START", "", 3, None])
async def test_an_unknown_phase_is_a_state_error_listing_the_phases(name: Any) -> None:
    run = await Kernel([Keys(Counter)]).start_run("t")
    with pytest.raises(StateError, match=r"is not a phase.*RUN_START, STEP_START") as caught:
        await run.run_phase(name)
    assert not isinstance(caught.value, KeyError)
    assert run.revision == 0


# -- one run driven from several tasks ----------------------------------------------------------


async def test_calls_from_several_tasks_take_turns_and_a_cancelled_caller_drops_out() -> None:
    """A run serialises calls into it, first come first served. A caller cancelled while it
    waits commits nothing and does not hold up the next one, even when the turn had just
    been handed to it."""
    release = asyncio.Event()
    entered: list[int] = []

    async def hook(ctx: PhaseContext) -> StateCommand:
        entered.append(ctx.snapshot.get(Counter))
        if len(entered) == 1:
            await release.wait()
        return StateCommand().update(Counter, 1)

    kernel = Kernel(
        [
            FnPlugin(
                "a",
                lambda r: (r.register_key(Counter), r.register_phase_hook(Phase.STEP_START, hook)),
            )
        ]
    )
    run = await kernel.start_run("t")
    first = asyncio.create_task(run.run_phase(Phase.STEP_START))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(run.submit(StateCommand().update(Counter, 100)))
    handed = asyncio.create_task(run.submit(StateCommand().update(Counter, 1_000)))
    last = asyncio.create_task(run.run_phase(Phase.STEP_START))
    await asyncio.sleep(0)
    waiting.cancel()  # cancelled while it waits its turn

    def cancel_the_next(run_: Any, report: Any) -> None:
        if report.phase is Phase.STEP_START and not handed.done():
            handed.cancel()  # the turn was just handed to it: it must pass it on

    run.add_phase_listener(cancel_the_next)
    release.set()
    await first
    await asyncio.wait_for(last, 5)  # a turn never passed on would hang here
    for task in (waiting, handed):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert entered == [0, 1]  # the last phase ran after the first, on its result
    assert run.snapshot.get(Counter) == 2
    await run.submit(StateCommand().update(Counter, 1))  # the run is free again
    assert run.snapshot.get(Counter) == 3


def _held_by_a_hook(hook: Callable[[PhaseContext], Any]) -> Kernel:
    return Kernel(
        [
            FnPlugin(
                "a",
                lambda r: (r.register_key(Counter), r.register_phase_hook(Phase.STEP_START, hook)),
            )
        ]
    )


async def test_a_caller_cancelled_while_it_waits_lets_nobody_in_before_the_holder_is_done() -> None:
    release = asyncio.Event()

    async def hook(ctx: PhaseContext) -> StateCommand:
        await release.wait()
        return StateCommand().update(Counter, 1)

    run = await _held_by_a_hook(hook).start_run("t")
    first = asyncio.create_task(run.run_phase(Phase.STEP_START))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(run.submit(StateCommand().update(Counter, 100)))
    after = asyncio.create_task(run.submit(StateCommand().update(Counter, 10)))
    await asyncio.sleep(0)
    waiting.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not after.done() and run.revision == 0  # the phase still holds the run
    release.set()
    await first
    await asyncio.wait_for(after, 5)
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert run.snapshot.get(Counter) == 11 and run.revision == 2


async def test_a_caller_cancelled_just_before_its_turn_comes_ends_cancelled() -> None:
    """The run frees up before the cancelled caller has woken: its turn goes to the next
    caller, and the cancelled one ends with CancelledError, not another error."""
    go = asyncio.Event()
    tasks: dict[str, asyncio.Task[Any]] = {}

    async def hook(ctx: PhaseContext) -> StateCommand:
        await go.wait()
        tasks["waiting"].cancel()  # the phase ends, and frees the run, right after this
        return StateCommand().update(Counter, 1)

    run = await _held_by_a_hook(hook).start_run("t")
    first = asyncio.create_task(run.run_phase(Phase.STEP_START))
    await asyncio.sleep(0)
    tasks["waiting"] = asyncio.create_task(run.submit(StateCommand().update(Counter, 100)))
    after = asyncio.create_task(run.submit(StateCommand().update(Counter, 10)))
    await asyncio.sleep(0)
    go.set()
    await first
    await asyncio.wait_for(after, 5)
    with pytest.raises(asyncio.CancelledError):
        await tasks["waiting"]
    assert run.snapshot.get(Counter) == 11
    await asyncio.wait_for(run.submit(StateCommand().update(Counter, 1)), 5)  # free again
    assert run.snapshot.get(Counter) == 12


# -- async hooks: start order, cancellation, task factories, which error wins ------------------


def _async_hooks(*names: str, body: Callable[[str], Any]) -> list[Plugin]:
    def plugin(name: str) -> Plugin:
        async def hook(ctx: PhaseContext) -> None:
            await body(name)

        return FnPlugin(name, lambda r: r.register_phase_hook(Phase.STEP_START, hook))

    return [plugin(name) for name in names]


async def test_async_hooks_of_a_phase_start_in_registration_order() -> None:
    started: list[str] = []

    async def body(name: str) -> None:
        started.append(name)
        await asyncio.sleep(0)

    run = await Kernel(_async_hooks("a", "b", "c", body=body)).start_run("t")
    await run.run_phase(Phase.STEP_START)
    assert started == ["a", "b", "c"]


async def test_a_cancelled_phase_returns_only_once_every_hook_has_ended() -> None:
    """No hook runs on past its phase: cancelling waits for each hook's cleanup, as the
    run's next phase (or RUN_END) must not overlap it."""
    log: list[str] = []
    entered = asyncio.Event()

    async def body(name: str) -> None:
        try:
            entered.set()
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.01)  # a cleanup that itself awaits
            log.append(f"{name} cleaned up")

    run = await Kernel(_async_hooks("a", "b", "c", body=body)).start_run("t")
    phase = asyncio.create_task(run.run_phase(Phase.STEP_START))
    await entered.wait()
    await asyncio.sleep(0)
    phase.cancel()
    with pytest.raises(asyncio.CancelledError):
        await phase
    assert sorted(log) == ["a cleaned up", "b cleaned up", "c cleaned up"]
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_hook_tasks_are_made_by_the_loops_task_factory() -> None:
    """A task factory (tracing, context set-up) sees every task the engine makes for a hook;
    a hook not given a task of its own runs in the run's task."""
    made: list[asyncio.Task[Any]] = []
    ran_in: dict[str, asyncio.Task[Any] | None] = {}

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **options)
        made.append(task)
        return task

    async def body(name: str) -> None:
        ran_in[name] = asyncio.current_task()
        await asyncio.sleep(0)

    loop = asyncio.get_running_loop()
    loop.set_task_factory(factory)
    try:
        run = await Kernel(_async_hooks("a", "b", "c", body=body)).start_run("t")
        await run.run_phase(Phase.STEP_START)
    finally:
        loop.set_task_factory(None)
    own = asyncio.current_task()
    assert set(ran_in) == {"a", "b", "c"}
    assert all(task is own or task in made for task in ran_in.values())
    assert sum(task is not own for task in ran_in.values()) >= 2  # they ran concurrently


async def test_a_hook_that_raises_outranks_an_earlier_hook_that_returned_the_wrong_type() -> None:
    """Every hook of a round is called before any result is checked, sync or async alike."""
    called: list[str] = []

    def wrong(ctx: PhaseContext) -> Any:
        called.append("a")
        return {"not": "a command"}

    def boom(ctx: PhaseContext) -> None:
        called.append("b")
        raise RuntimeError("b broke")

    kernel = Kernel(
        [
            FnPlugin("a", lambda r: r.register_phase_hook(Phase.STEP_START, wrong)),
            FnPlugin("b", lambda r: r.register_phase_hook(Phase.STEP_START, boom)),
        ]
    )
    run = await kernel.start_run("t")
    with pytest.raises(HookFailed) as failed:
        await run.run_phase(Phase.STEP_START)
    assert failed.value.plugin == "b" and called == ["a", "b"]
    assert run.revision == 0
