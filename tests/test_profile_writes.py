"""Profile writes travel with the command: applied after commit, never doubled or leaked."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from samples import Hook, Keys

from statekernel import (
    Agent,
    Block,
    EffectSpec,
    HookFailed,
    InferenceResponse,
    Kernel,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ProfileAccess,
    ProfileKey,
    ScheduledActionSpec,
    ScriptedModel,
    StateCommand,
    StateError,
    StateKey,
    StateScope,
    StateValidationError,
    StoreError,
    ToolCall,
    ToolOutput,
)
from statekernel.lowlevel import EncodedValue, encode_entry
from statekernel.stores import MemoryProfileStore


class Visits(ProfileKey[int]):
    key = "t.visits"


class Seen(StateKey[int, int]):
    """EXCLUSIVE: hooks write snapshot value + 1, so two of them conflict."""

    key = "t.seen"


def bump(ctx: PhaseContext) -> Any:
    async def hook() -> StateCommand:
        assert ctx.profile is not None
        await ctx.profile.update(Visits, "global", lambda n: n + 1)
        return StateCommand().update(Seen, ctx.snapshot.get(Seen) + 1)

    return hook()


async def visits(store: MemoryProfileStore) -> Any:
    entry = await store.get("t.visits", "global")
    return None if entry is None else entry.value


async def test_writes_apply_after_the_commit_and_a_rerun_never_doubles_them() -> None:
    store = MemoryProfileStore()
    kernel = Kernel(
        [Keys(Seen, Visits), Hook("a", Phase.STEP_START, bump), Hook("b", Phase.STEP_START, bump)],
        profile_store=store,
    )
    run = await kernel.start_run("t")
    report = await run.run_phase(Phase.STEP_START)
    assert report.conflicts == 1
    assert run.snapshot.get(Seen) == 2
    assert await visits(store) == 2  # b ran twice, its first buffer was dropped


async def test_a_failed_round_applies_none_of_its_writes() -> None:
    class Breaks(Plugin):
        id = "breaks"

        def register(self, r: PluginRegistrar) -> None:
            r.register_phase_hook(Phase.STEP_START, self.boom)

        async def boom(self, ctx: PhaseContext) -> None:
            await asyncio.sleep(0.001)
            raise RuntimeError("late failure")

    store = MemoryProfileStore()
    run = await Kernel(
        [Keys(Seen, Visits), Hook("a", Phase.STEP_START, bump), Breaks()], profile_store=store
    ).start_run("t")
    with pytest.raises(HookFailed):
        await run.run_phase(Phase.STEP_START)
    assert await visits(store) is None and run.revision == 0


async def test_a_hook_reads_its_own_buffered_writes_and_others_do_not() -> None:
    seen: dict[str, int] = {}

    class Writer(Plugin):
        id = "writer"

        def register(self, r: PluginRegistrar) -> None:
            r.register_profile_key(Visits)
            r.register_phase_hook(Phase.STEP_START, self.write)
            r.register_phase_hook(Phase.STEP_START, self.peek)

        async def write(self, ctx: PhaseContext) -> None:
            assert ctx.profile is not None
            await ctx.profile.write(Visits, "me", 41)
            seen["own"] = await ctx.profile.read(Visits, "me")

        async def peek(self, ctx: PhaseContext) -> None:
            assert ctx.profile is not None
            seen["other"] = await ctx.profile.read(Visits, "me")

    store = MemoryProfileStore()
    run = await Kernel([Writer()], profile_store=store).start_run("t")
    await run.run_phase(Phase.STEP_START)
    assert seen == {"own": 41, "other": 0}
    assert (await store.get("t.visits", "me")) is not None


class Note(ScheduledActionSpec[str]):
    key = "t.note"
    phase = Phase.STEP_END


async def test_action_handler_writes_apply_with_its_command() -> None:
    class Noter(Plugin):
        id = "noter"

        def register(self, r: PluginRegistrar) -> None:
            r.register_profile_key(Visits)
            r.register_action(Note, self.handle)
            r.register_phase_hook(Phase.STEP_START, lambda ctx: StateCommand().schedule(Note, "x"))

        async def handle(self, payload: str, ctx: PhaseContext) -> None:
            assert ctx.profile is not None
            await ctx.profile.update(Visits, payload, lambda n: n + 10)

    store = MemoryProfileStore()
    run = await Kernel([Noter()], profile_store=store).start_run("t")
    await run.run_phase(Phase.STEP_START)
    assert await store.get("t.visits", "x") is None
    await run.run_phase(Phase.STEP_END)
    entry = await store.get("t.visits", "x")
    assert entry is not None and entry.value == 10


async def test_tool_gates_see_a_read_only_profile() -> None:
    class Gate(Plugin):
        id = "gate"

        def register(self, r: PluginRegistrar) -> None:
            r.register_profile_key(Visits)
            r.register_tool_gate(self.gate)

        async def gate(self, ctx: PhaseContext) -> Block | None:
            assert ctx.profile is not None
            if await ctx.profile.read(Visits, "global") > 0:
                return Block("seen before")
            await ctx.profile.write(Visits, "global", 1)
            return None

    run = await Kernel([Gate()], profile_store=MemoryProfileStore()).start_run("t")
    with pytest.raises(StateError, match="read-only"):
        await run.tool_gate(ToolCall("c", "x"))


class Budget(StateKey[int, int]):
    key = "t.budget"

    @staticmethod
    def validate(value: int) -> None:
        if value < 0:
            raise ValueError("negative budget")


async def test_a_tool_writes_apply_only_when_its_command_commits() -> None:
    async def spend(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
        assert ctx.profile is not None
        await ctx.profile.update(Visits, "spent", lambda n: n + 1)
        return ToolOutput("ok", StateCommand().update(Budget, arguments["to"]))

    store = MemoryProfileStore()
    agent = Agent(
        [Keys(Budget, Visits, id="tools")],
        ScriptedModel(
            [
                InferenceResponse(tool_calls=(ToolCall("c1", "spend", {"to": -1}),)),
                InferenceResponse(tool_calls=(ToolCall("c2", "spend", {"to": 5}),)),
            ]
        ),
        {"spend": spend},
        profile_store=store,
    )
    result = await agent.run("t", ["go"])
    errors = [m.content for m in result.messages if m.is_error]
    assert len(errors) == 1 and "negative budget" in errors[0]
    entry = await store.get("t.visits", "spent")
    assert entry is not None and entry.value == 1  # only the committed call's write


class TeamGoals(ProfileKey[tuple[str, ...]]):
    key = "t.goals"


class GoalSetter(Plugin):
    id = "goals"

    def register(self, r: PluginRegistrar) -> None:
        r.register_profile_key(TeamGoals)
        r.register_phase_hook(Phase.RUN_START, self.add_goal)

    async def add_goal(self, ctx: PhaseContext) -> None:
        assert ctx.profile is not None and ctx.run.parent_thread_id is not None
        scope = StateScope.parent_thread(ctx.run.parent_thread_id)
        goal = f"goal of {ctx.run.thread_id}"
        await ctx.profile.update(TeamGoals, scope, lambda goals: (*goals, goal))


async def test_agents_under_one_parent_share_a_record_and_others_do_not() -> None:
    store = MemoryProfileStore()
    agent = Agent([GoalSetter()], ScriptedModel(), profile_store=store)
    await asyncio.gather(
        agent.run("child-1", ["x"], parent_thread_id="p"),
        agent.run("child-2", ["x"], parent_thread_id="p"),
        agent.run("stranger", ["x"], parent_thread_id="q"),
    )
    shared = await store.get("t.goals", str(StateScope.parent_thread("p")))
    assert shared is not None
    assert sorted(shared.value) == ["goal of child-1", "goal of child-2"]
    other = await store.get("t.goals", "parent_thread::q")
    assert other is not None and other.value == ["goal of stranger"]


async def test_a_store_failure_while_applying_is_a_store_error_and_the_commit_stands() -> None:
    class FailingStore(MemoryProfileStore):
        async def set(self, *args: Any, **kwargs: Any) -> Any:
            raise OSError("disk full")

        async def update(self, *args: Any, **kwargs: Any) -> Any:
            raise OSError("disk full")

    run = await Kernel(
        [Keys(Seen, Visits), Hook("a", Phase.STEP_START, bump)], profile_store=FailingStore()
    ).start_run("t")
    with pytest.raises(StoreError, match="t.visits"):
        await run.run_phase(Phase.STEP_START)
    assert run.snapshot.get(Seen) == 1 and run.revision == 1


def test_profile_values_are_typed_through_msgspec() -> None:
    class Team(msgspec.Struct, frozen=True):
        goals: tuple[str, ...] = ()

    class TeamKey(ProfileKey[Team]):
        key = "t.team"

    async def scenario() -> Team:
        store = MemoryProfileStore()
        from statekernel import ProfileAccess

        access = ProfileAccess(store)
        await access.write(TeamKey, StateScope.global_(), Team(("a",)))
        return await access.read(TeamKey, "global")

    assert asyncio.run(scenario()) == Team(("a",))


# -- a profile write that fails ------------------------------------------------------------


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


# -- each write is encoded once ------------------------------------------------------------


class Notes(ProfileKey[list[str]]):
    key = "t.notes"


class _Recording(MemoryProfileStore):
    """A bundled store that remembers what each write handed it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.given: list[Any] = []

    async def set(self, namespace: str, key: str, value: Any, **kwargs: Any) -> Any:
        self.given.append(value)
        return await super().set(namespace, key, value, **kwargs)


class _ThirdParty:
    """A store written without knowing EncodedValue: it must only ever see JSON builtins."""

    def __init__(self) -> None:
        self.inner = MemoryProfileStore()
        self.given: list[Any] = []

    async def get(self, namespace: str, key: str) -> Any:
        return await self.inner.get(namespace, key)

    async def set(self, namespace: str, key: str, value: Any, **kwargs: Any) -> Any:
        self.given.append(value)
        return await self.inner.set(namespace, key, value, **kwargs)

    async def delete(self, namespace: str, key: str) -> None:
        await self.inner.delete(namespace, key)

    async def list(self, namespace: str, prefix: str = "") -> Any:
        return await self.inner.list(namespace, prefix)

    async def clear(self, namespace: str) -> None:
        await self.inner.clear(namespace)

    async def close(self) -> None:
        await self.inner.close()

    async def __aenter__(self) -> _ThirdParty:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def test_a_write_is_encoded_once_and_the_store_keeps_those_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = _Recording()
    access = ProfileAccess(store)
    encoded: list[Any] = []
    real_encode = msgspec.json.encode

    def counting(value: Any, *args: Any, **kwargs: Any) -> bytes:
        encoded.append(value)
        return real_encode(value, *args, **kwargs)

    monkeypatch.setattr(msgspec.json, "encode", counting)
    await access.write(Notes, "alice", ["a", "b"])
    monkeypatch.undo()
    assert encoded == [["a", "b"]]  # ProfileAccess encoded it; the store did not again
    (given,) = store.given
    assert isinstance(given, EncodedValue) and given.value == ["a", "b"]
    entry = await store.get("t.notes", "alice")
    assert entry is not None and entry.value == ["a", "b"]
    assert await access.read(Notes, "alice") == ["a", "b"]


async def test_a_store_that_does_not_ask_for_encoded_values_gets_builtins() -> None:
    store = _ThirdParty()
    access = ProfileAccess(store)  # type: ignore[arg-type]
    await access.write(Notes, "alice", ["a"])
    buffered = access.buffered()
    await buffered.write(Notes, "bob", ["b"])
    await buffered.apply()
    assert store.given == [["a"], ["b"]]
    assert await access.read(Notes, "bob") == ["b"]


async def test_a_store_can_decline_encoded_values() -> None:
    class Declining(_Recording):
        accepts_encoded_values = False

    store = Declining()
    await ProfileAccess(store).write(Notes, "alice", ["a"])
    assert store.given == [["a"]]


async def test_an_encoded_value_still_meets_the_stores_own_limit() -> None:
    store = MemoryProfileStore(max_value_bytes=100)
    access = ProfileAccess(store, max_value_bytes=10_000)
    with pytest.raises(StoreError, match="the store's limit of 100") as caught:
        await access.write(Notes, "alice", ["x" * 200])
    assert caught.value.key == "t.notes"
    assert await store.get("t.notes", "alice") is None
    with pytest.raises(StoreError, match="above the limit of 10,000"):
        await access.write(Notes, "alice", ["x" * 20_000])


async def test_encode_entry_refuses_what_is_not_json_and_passes_encoded_pairs() -> None:
    pair = encode_entry("ns", "k", {"a": [1]}, 100)
    assert pair == EncodedValue({"a": [1]}, b'{"a":[1]}')
    assert encode_entry("ns", "k", pair, 100) is pair
    with pytest.raises(StoreError, match="above the store's limit of 5"):
        encode_entry("ns", "k", pair, 5)
    with pytest.raises(StateValidationError, match="JSON-compatible"):
        encode_entry("ns", "k", {1j}, 100)
