"""Context injection: band order in the request, throttling, removal by key, expiry."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import pytest
from samples import Hook

from statekernel import (
    Agent,
    AgentSpec,
    InferenceRequest,
    InferenceResponse,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    RunIdentity,
    ScriptedModel,
    StateCommand,
    ToolCall,
    ToolOutput,
)
from statekernel.events import ModelResponded
from statekernel.plugins import (
    AddContextMessage,
    ContextInjection,
    ContextMessage,
    ContextMessages,
    ContextStep,
    ContextThrottle,
    RemoveContextMessage,
    RemoveContextPrefix,
    ThrottleMark,
    add_context,
    clear_context,
    remove_context,
    remove_context_prefix,
)
from statekernel.stores import MemoryThreadStore
from statekernel.testing import assert_commutative, snapshot_of

Schedule = Callable[[PhaseContext], Iterable[ContextMessage]]


class Injector(Plugin):
    """Schedules AddContextMessage for whatever `schedule(ctx)` returns, at `phase`."""

    id = "injector"

    def __init__(self, schedule: Schedule, phase: Phase = Phase.BEFORE_INFERENCE) -> None:
        self.schedule = schedule
        self.phase = phase

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_phase_hook(self.phase, self.hook)

    def hook(self, ctx: PhaseContext) -> StateCommand | None:
        command = StateCommand()
        for message in self.schedule(ctx):
            command.schedule(AddContextMessage, message)
        return command if not command.is_empty() else None


def steps(count: int) -> list[InferenceResponse]:
    """`count - 1` steps that call the no-op tool, then a final answer."""
    return [
        InferenceResponse("working", (ToolCall(f"call-{i}", "noop", {}),)) for i in range(count - 1)
    ]


def contents(request: InferenceRequest) -> list[str]:
    return [m.content for m in request.messages]


def seen(model: ScriptedModel, text: str) -> list[bool]:
    return [any(text in m.content for m in request.messages) for request in model.requests]


def once(*messages: ContextMessage) -> Schedule:
    """Schedule `messages` in the first step only."""
    return lambda ctx: messages if ctx.snapshot.get(ContextStep) == 1 else ()


NOOP = {"noop": lambda a, c: "ok"}


async def test_messages_are_placed_by_band_then_order_then_key() -> None:
    messages = (
        ContextMessage(key="tail", content="suffix", band="suffix_system"),
        ContextMessage(key="late", content="conversation", band="conversation"),
        ContextMessage(key="s2", content="session", band="session"),
        ContextMessage(key="b", content="system b", band="system", order=1),
        ContextMessage(key="z", content="system z", band="system"),
        ContextMessage(key="a", content="system a", band="system"),
    )
    model = ScriptedModel([InferenceResponse("ok")])
    result = await Agent([ContextInjection(), Injector(once(*messages))], model).run("t", ["hi"])

    (request,) = model.requests
    assert contents(request) == [
        "system a",
        "system z",
        "system b",
        "session",
        "hi",
        "conversation",
        "suffix",
    ]
    assert [m.role for m in request.messages] == ["system"] * 4 + ["user", "system", "system"]
    assert [m.content for m in result.messages] == ["hi", "ok"]  # the history is untouched


async def test_conversation_messages_come_after_the_whole_history_including_tool_results() -> None:
    note = ContextMessage(key="note", content="remember the budget", band="conversation")
    model = ScriptedModel(steps(2))
    agent = Agent([ContextInjection(), Injector(lambda ctx: (note,))], model, NOOP)
    await agent.run("t", ["plan"])
    assert contents(model.requests[1]) == ["plan", "working", "ok", "remember the budget"]


async def test_a_key_is_replaced_not_duplicated() -> None:
    def schedule(ctx: PhaseContext) -> tuple[ContextMessage, ...]:
        step = ctx.snapshot.get(ContextStep)
        return (ContextMessage(key="status", content=f"status at step {step}"),)

    model = ScriptedModel(steps(3))
    await Agent([ContextInjection(), Injector(schedule)], model, NOOP).run("t", ["go"])
    assert [[c for c in contents(r) if c.startswith("status")] for r in model.requests] == [
        ["status at step 1"],
        ["status at step 2"],
        ["status at step 3"],
    ]


async def test_a_throttled_key_is_not_injected_again_within_its_cooldown() -> None:
    def schedule(ctx: PhaseContext) -> tuple[ContextMessage, ...]:
        step = ctx.snapshot.get(ContextStep)
        return (ContextMessage(key="nudge", content=f"nudge {step}", cooldown_steps=2),)

    model = ScriptedModel(steps(5))
    await Agent([ContextInjection(), Injector(schedule)], model, NOOP).run("t", ["go"])
    nudges = [[c for c in contents(r) if c.startswith("nudge")] for r in model.requests]
    # injected at steps 1, 3 and 5; the adds of steps 2 and 4 fall in a cooldown
    assert nudges == [["nudge 1"], ["nudge 1"], ["nudge 3"], ["nudge 3"], ["nudge 5"]]


async def test_a_throttled_reminder_with_expiry_shows_every_cooldown_steps() -> None:
    reminder = ContextMessage(
        key="reminder", content="check the tests", cooldown_steps=3, expires_after_steps=1
    )
    model = ScriptedModel(steps(7))
    await Agent([ContextInjection(), Injector(lambda ctx: (reminder,))], model, NOOP).run(
        "t", ["go"]
    )
    assert seen(model, "check the tests") == [True, False, False, True, False, False, True]


async def test_expiry_removes_a_message_after_n_steps() -> None:
    hint = ContextMessage(key="hint", content="a hint", expires_after_steps=2)
    model = ScriptedModel(steps(4))
    result = await Agent([ContextInjection(), Injector(once(hint))], model, NOOP).run("t", ["go"])
    assert seen(model, "a hint") == [True, True, False, False]
    assert result.snapshot.get(ContextMessages) == ()


async def test_remove_by_key_through_the_action_and_the_command_helper() -> None:
    keep = ContextMessage(key="keep", content="kept")
    first = ContextMessage(key="first", content="first to go")
    second = ContextMessage(key="second", content="second to go")

    def dismiss(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
        return ToolOutput("dismissed", StateCommand().schedule(RemoveContextMessage, "first"))

    def drop(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
        return ToolOutput("dropped", remove_context("second", "not-there"))

    model = ScriptedModel(
        [
            InferenceResponse("x", (ToolCall("c1", "dismiss", {}),)),
            InferenceResponse("y", (ToolCall("c2", "drop", {}),)),
        ]
    )
    tools = {"dismiss": dismiss, "drop": drop}
    agent = Agent([ContextInjection(), Injector(once(keep, first, second))], model, tools)
    result = await agent.run("t", ["go"])
    assert [seen(model, text) for text in ("kept", "first to go", "second to go")] == [
        [True, True, True],
        [True, False, False],  # the action, scheduled by step 1's tool, runs before step 2's call
        [True, True, False],  # the helper's removal commits with step 2's tool command
    ]
    assert [e.message.key for e in result.snapshot.get(ContextMessages)] == ["keep"]


async def test_an_action_scheduled_after_inference_waits_for_the_next_steps_request() -> None:
    late = ContextMessage(key="late", content="late news")
    model = ScriptedModel(steps(2))
    injector = Injector(once(late), phase=Phase.AFTER_INFERENCE)
    await Agent([ContextInjection(), injector], model, NOOP).run("t", ["go"])
    assert seen(model, "late news") == [False, True]


async def test_messages_and_cooldowns_carry_over_to_the_threads_next_run() -> None:
    note = ContextMessage(key="note", content="from run one", cooldown_steps=10)
    model = ScriptedModel()
    agent = Agent([ContextInjection(), Injector(lambda ctx: (note,))], model)
    await agent.run("t", ["one"])
    second = await agent.run("t", ["two"])
    assert seen(model, "from run one") == [True, True]
    assert second.snapshot.get(ContextStep) == 2
    (mark,) = second.snapshot.get(ContextThrottle)
    assert (mark.key, mark.until) == ("note", 11)
    other = await agent.run("other", ["x"])
    assert other.snapshot.get(ContextStep) == 1


async def test_context_state_round_trips_through_a_thread_store() -> None:
    note = ContextMessage(key="note", content="stored", band="session", cooldown_steps=4)
    store = MemoryThreadStore()
    first = Agent(
        [ContextInjection(), Injector(lambda ctx: (note,))], ScriptedModel(), thread_store=store
    )
    done = await first.run("t", ["one"])
    model = ScriptedModel()
    again = await Agent([ContextInjection()], model, thread_store=store).run("t", ["two"])
    assert seen(model, "stored") == [True]
    for key in (ContextMessages, ContextThrottle):
        assert again.snapshot.get(key) == done.snapshot.get(key)


async def test_add_context_is_a_command_scheduling_the_action() -> None:
    command = add_context(ContextMessage(key="k", content="c"))
    (action,) = command.scheduled_actions
    assert action.spec is AddContextMessage and action.payload.key == "k"


def test_the_step_clock_is_commutative() -> None:
    assert_commutative(ContextStep, 0, [1, 1, 2, 3])


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"key": ""}, "key must be a non-empty string"),
        ({"band": "footer"}, "band must be one of system, session, conversation"),
        ({"role": "tool"}, "role must be"),
        ({"cooldown_steps": 0}, "cooldown_steps must be a positive int"),
        ({"expires_after_steps": -1}, "expires_after_steps must be a positive int"),
    ],
)
def test_a_malformed_message_fails_where_it_is_built(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ContextMessage(**{"key": "k", "content": "c", **fields})


# -- lifecycles: emit once, ephemeral, prefix removal, clear-all, re-injection --------------


async def test_an_emit_once_message_appears_in_exactly_one_request() -> None:
    flash = ContextMessage(key="flash", content="one-time notice", emit_once=True)
    model = ScriptedModel(steps(3))
    result = await Agent([ContextInjection(), Injector(once(flash))], model, NOOP).run("t", "go")
    assert seen(model, "one-time notice") == [True, False, False]
    assert result.snapshot.get(ContextMessages) == ()


async def test_ephemeral_messages_last_one_run_and_persistent_ones_carry_over() -> None:
    def both(ctx: PhaseContext) -> tuple[ContextMessage, ...]:
        if ctx.snapshot.get(ContextStep) != 1:
            return ()
        return (
            ContextMessage(key="run-only", content="for this run", lifetime="ephemeral"),
            ContextMessage(key="kept", content="for the thread"),
        )

    model = ScriptedModel(steps(2))
    agent = Agent([ContextInjection(), Injector(both)], model, NOOP)
    first = await agent.run("t", "one")
    assert seen(model, "for this run") == [True, True]
    held = {e.message.key: e.ephemeral for e in first.snapshot.get(ContextMessages)}
    assert held == {"run-only": True, "kept": False}
    model.requests.clear()
    await agent.run("t", "two")
    assert seen(model, "for this run") == [False] and seen(model, "for the thread") == [True]


async def test_an_ephemeral_messages_cooldown_ends_with_its_run() -> None:
    scratch = ContextMessage(
        key="scratch", content="scratch notes", lifetime="ephemeral", cooldown_steps=5
    )
    model = ScriptedModel()
    agent = Agent([ContextInjection(), Injector(lambda ctx: (scratch,))], model)
    await agent.run("t", "one")
    await agent.run("t", "two")  # a fresh copy each run, not throttled by the last run's
    assert seen(model, "scratch notes") == [True, True]


async def test_removal_commands_work_from_outside_a_run_too() -> None:
    agent = Agent(
        [ContextInjection(), Injector(once(ContextMessage(key="k", content="c")))], ScriptedModel()
    )
    await agent.run("t", "go")
    for command in (remove_context("k"), remove_context_prefix("k"), clear_context()):
        revision = await agent.kernel.update_state("t", command)
        assert (await agent.kernel.state_at("t", revision)).get(ContextMessages) == ()


def test_a_mark_saved_before_marks_kept_content_never_reinjects() -> None:
    old_mark = ThrottleMark("build", until=50)  # as decoded from a thread saved earlier
    assert old_mark.content is None
    plugin = ContextInjection()
    snapshot = snapshot_of(plugin, {ContextThrottle: (old_mark,), ContextStep: 3})
    ctx = PhaseContext(
        phase=Phase.BEFORE_INFERENCE,
        run=RunIdentity(run_id="r", thread_id="t", agent_id="default"),
        agent=AgentSpec("default"),
        snapshot=snapshot,
    )
    message = ContextMessage(key="build", content="x", cooldown_steps=5, reinject_on_change=True)
    assert plugin.add(message, ctx) is None  # throttled: no content to compare with


async def test_the_plugin_default_lifetime_applies_where_a_message_names_none() -> None:
    note = ContextMessage(key="note", content="ephemeral by default")
    model = ScriptedModel()
    agent = Agent([ContextInjection(default_lifetime="ephemeral"), Injector(once(note))], model)
    await agent.run("t", "one")
    await agent.run("t", "two")
    assert seen(model, "ephemeral by default") == [True, False]
    with pytest.raises(ValueError, match="default_lifetime"):
        ContextInjection(default_lifetime="forever")  # type: ignore[arg-type]


async def test_removal_by_prefix_and_clear_all_remove_what_they_say() -> None:
    messages = (
        ContextMessage(key="tool.search", content="search tips"),
        ContextMessage(key="tool.shell", content="shell tips", lifetime="ephemeral"),
        ContextMessage(key="persona", content="be brief"),
    )

    def drop_tools(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
        return ToolOutput("ok", remove_context_prefix("tool."))

    def clear(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
        return ToolOutput("ok", clear_context())

    model = ScriptedModel(
        [
            InferenceResponse("", (ToolCall("c1", "drop_tools", {}),)),
            InferenceResponse("", (ToolCall("c2", "clear", {}),)),
        ]
    )
    tools = {"drop_tools": drop_tools, "clear": clear}
    await Agent([ContextInjection(), Injector(once(*messages))], model, tools).run("t", "go")
    assert [
        sorted(c for c in contents(r) if "tips" in c or "brief" in c) for r in model.requests
    ] == [
        ["be brief", "search tips", "shell tips"],
        ["be brief"],
        [],
    ]
    with pytest.raises(ValueError, match="clear_context"):
        remove_context_prefix("")


async def test_the_remove_prefix_action_runs_in_order_with_adds() -> None:
    def schedule(ctx: PhaseContext) -> StateCommand | None:
        if ctx.snapshot.get(ContextStep) != 1:
            return None
        return (
            add_context(ContextMessage(key="a.1", content="first"))
            .schedule(RemoveContextPrefix, "a.")
            .extend(add_context(ContextMessage(key="a.2", content="second")))
        )

    model = ScriptedModel()
    await Agent(
        [ContextInjection(), Hook("scheduler", Phase.BEFORE_INFERENCE, schedule)], model
    ).run("t", "go")
    assert seen(model, "first") == [False] and seen(model, "second") == [True]


@pytest.mark.parametrize("reinject", [False, True])
async def test_a_changed_throttled_message_is_reinjected_only_when_asked(reinject: bool) -> None:
    def status(ctx: PhaseContext) -> tuple[ContextMessage, ...]:
        step = ctx.snapshot.get(ContextStep)
        content = "build: green" if step < 3 else "build: RED"
        return (
            ContextMessage(
                key="build", content=content, cooldown_steps=10, reinject_on_change=reinject
            ),
        )

    model = ScriptedModel(steps(4))
    await Agent([ContextInjection(), Injector(status)], model, NOOP).run("t", "go")
    assert seen(model, "build: RED") == ([False, False, True, True] if reinject else [False] * 4)
    assert seen(model, "build: green") == ([True, True, False, False] if reinject else [True] * 4)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"lifetime": "forever"}, "lifetime must be"),
        ({"emit_once": 1}, "emit_once must be True or False"),
        ({"reinject_on_change": "yes"}, "reinject_on_change must be True or False"),
        ({"visibility": "everyone"}, "visibility must be 'model' or 'transcript'"),
    ],
)
def test_a_malformed_lifecycle_option_fails_where_it_is_built(
    fields: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        ContextMessage(**{"key": "k", "content": "c", **fields})


async def test_a_model_only_message_never_reaches_the_transcript() -> None:
    note = ContextMessage(key="note", content="internal hint", band="conversation")
    model = ScriptedModel(steps(2))
    agent = Agent([ContextInjection(), Injector(lambda ctx: (note,))], model, NOOP)
    result = await agent.run("t", "go")
    assert seen(model, "internal hint") == [True, True]
    assert "internal hint" not in [m.content for m in result.messages]


async def test_a_transcript_message_is_recorded_once_where_the_model_read_it() -> None:
    note = ContextMessage(
        key="note", content="shared hint", band="conversation", role="user", visibility="transcript"
    )
    model = ScriptedModel(steps(3))
    store = MemoryThreadStore()
    agent = Agent(
        [ContextInjection(), Injector(lambda ctx: (note,))], model, NOOP, thread_store=store
    )
    result = await agent.run("t", "go")

    # Recorded in the history before the answer of the step that first read it, once,
    # although it is added again every step; the model reads it exactly once per request.
    assert [(m.role, m.content) for m in result.messages] == [
        ("user", "go"),
        ("user", "shared hint"),
        ("assistant", "working"),
        ("tool", "ok"),
        ("assistant", "working"),
        ("tool", "ok"),
        ("assistant", "done"),
    ]
    assert [contents(r).count("shared hint") for r in model.requests] == [1, 1, 1]
    assert contents(model.requests[0]) == ["go", "shared hint"]
    # Saved with the thread: a fresh agent on the same store sees it in the transcript.
    again = Agent([ContextInjection()], ScriptedModel(), thread_store=store)
    later = await again.run("t", "more")
    assert [m.content for m in later.messages].count("shared hint") == 1


async def test_a_changed_transcript_message_is_recorded_again() -> None:
    def status(ctx: PhaseContext) -> tuple[ContextMessage, ...]:
        step = ctx.snapshot.get(ContextStep)
        content = "build: green" if step < 3 else "build: RED"
        return (ContextMessage(key="build", content=content, visibility="transcript"),)

    model = ScriptedModel(steps(4))
    result = await Agent([ContextInjection(), Injector(status)], model, NOOP).run("t", "go")
    recorded = [m.content for m in result.messages if m.content.startswith("build")]
    assert recorded == ["build: green", "build: RED"]
    # Once recorded, a system-band message is read from the history, not placed again.
    assert [contents(r).count("build: green") for r in model.requests] == [1, 1, 1, 1]
    assert [contents(r).count("build: RED") for r in model.requests] == [0, 0, 1, 1]


async def test_an_emit_once_transcript_message_is_recorded_and_consumed() -> None:
    note = ContextMessage(key="n", content="once", emit_once=True, visibility="transcript")
    model = ScriptedModel(steps(2))
    result = await Agent([ContextInjection(), Injector(once(note))], model, NOOP).run("t", "go")
    assert [m.content for m in result.messages].count("once") == 1
    assert result.snapshot.get(ContextMessages) == ()


async def test_a_failed_model_call_records_nothing_and_the_next_request_places_it() -> None:
    note = ContextMessage(key="n", content="hint", visibility="transcript")
    calls: list[InferenceRequest] = []

    async def flaky(request: InferenceRequest) -> InferenceResponse:
        calls.append(request)
        if len(calls) == 1:
            raise ConnectionError("model down")
        return InferenceResponse("ok")

    agent = Agent([ContextInjection(), Injector(once(note))], flaky)
    failed = await agent.run("t", "go")
    assert failed.outcome == "failure"
    assert "hint" not in [m.content for m in failed.messages]
    result = await agent.run("t", "again")
    assert "hint" in contents(calls[1])
    assert [m.content for m in result.messages].count("hint") == 1


def test_a_request_transcript_holds_messages_only() -> None:
    with pytest.raises(TypeError, match="transcript holds Message objects only"):
        InferenceRequest(messages=(), transcript=("not a message",))  # type: ignore[arg-type]


HANDOFF = ContextMessage(
    key="handoff", content="Billing took over.", band="conversation", visibility="transcript"
)


async def test_a_run_cancelled_after_recording_does_not_record_it_twice() -> None:
    model = ScriptedModel()
    agent = Agent([ContextInjection(), Injector(lambda ctx: (HANDOFF,))], model)
    async with contextlib.aclosing(agent.stream("t", "hi")) as events:
        async for event in events:
            if isinstance(event, ModelResponded):
                break  # cancels the run before AFTER_INFERENCE notes the recording
    result = await agent.run("t", "again")
    assert [m.content for m in result.messages].count("Billing took over.") == 1
    assert contents(model.requests[-1]).count("Billing took over.") == 1


async def test_a_failed_after_inference_hook_does_not_make_it_recorded_twice() -> None:
    class FailsOnce(Plugin):
        id = "fails_once"
        failed = False

        def register(self, registrar: PluginRegistrar) -> None:
            registrar.register_phase_hook(Phase.AFTER_INFERENCE, self.hook)

        def hook(self, ctx: PhaseContext) -> None:
            if not FailsOnce.failed:
                FailsOnce.failed = True
                raise RuntimeError("flaky hook")

    model = ScriptedModel()
    plugins = [ContextInjection(), Injector(lambda ctx: (HANDOFF,)), FailsOnce()]
    agent = Agent(plugins, model)
    assert (await agent.run("t", "hi")).outcome == "failure"
    result = await agent.run("t", "again")
    assert [m.content for m in result.messages].count("Billing took over.") == 1
    assert contents(model.requests[-1]).count("Billing took over.") == 1


async def test_an_unchanged_transcript_message_is_not_recorded_again_after_it_expired() -> None:
    note = msgspec.structs.replace(HANDOFF, expires_after_steps=1, lifetime="ephemeral")
    model = ScriptedModel(steps(4))
    agent = Agent([ContextInjection(), Injector(lambda ctx: (note,))], model, NOOP)
    result = await agent.run("t", "go")
    again = await agent.run("t", "more")  # a new run: the ephemeral entry ended
    assert [m.content for m in result.messages].count("Billing took over.") == 1
    assert [m.content for m in again.messages].count("Billing took over.") == 1
    (copy,) = [m for m in again.messages if m.content == "Billing took over."]
    assert copy.id == "context:handoff@1"
