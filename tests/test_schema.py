"""Schema-style declaration: a pydantic model or TypedDict compiled into state keys (§5.3)."""

from __future__ import annotations

import enum
import operator
from typing import Annotated, Any, Literal, TypedDict

import pytest
from pydantic import BaseModel, ConfigDict, Field
from samples import Hooks

from statekernel import (
    Agent,
    Commutative,
    Ephemeral,
    HookFailed,
    InferenceResponse,
    InvalidDeclaration,
    Kernel,
    KeyScope,
    MergeStrategy,
    Message,
    Phase,
    PhaseContext,
    PhaseReport,
    Run,
    ScriptedModel,
    StateCommand,
    StateError,
    StateKey,
    StateSchema,
    StateUpdater,
    StateValidationError,
    ToolCall,
    UnknownSchemaField,
    UnknownUpdater,
    Vector,
)
from statekernel.stores import MemoryThreadStore
from statekernel.testing import assert_commutative, run_hooks, snapshot_of


class Msg(BaseModel):
    """A frozen message model: a Vector of these is shared between snapshots uncopied."""

    model_config = ConfigDict(frozen=True)

    text: str
    id: str | None = None


@StateUpdater.register("test_schema.max")
def keep_max(old: int, new: int) -> int:
    return max(old, new)


class ChatState(BaseModel):
    """Jianmu-style: reducers, ephemeral fields and plain fields side by side."""

    messages: Annotated[list[Msg], "append_messages"] = Field(default_factory=list)
    log: Annotated[list[str], operator.add] = Field(default_factory=list)
    total: Annotated[int, operator.add, Commutative()] = 0
    count: Annotated[int, operator.add] = 0
    best: Annotated[int, "test_schema.max", Commutative()] = 0
    title: str = "untitled"
    done: Annotated[bool, Ephemeral(scope="run")] = False
    actions: Annotated[list[str], operator.add, Ephemeral(scope="step")] = Field(
        default_factory=list
    )
    streaming: Annotated[str, Ephemeral(scope="call")] = ""
    tags: dict[str, int] = Field(default_factory=lambda: {"seed": 1})


class EvoState(TypedDict):
    """EvoFabric-style: a TypedDict whose fields name registered updaters."""

    messages: Annotated[list[Message], "append_messages"]
    user_name: Annotated[str, "overwrite"]
    note: str | None


def chat_schema(**options: Any) -> StateSchema[ChatState]:
    return StateSchema(ChatState, prefix="chat", **options)


def text(reply: str = "done") -> InferenceResponse:
    return InferenceResponse(text=reply)


# -- compilation -----------------------------------------------------------------------------


def test_each_field_becomes_a_real_state_key_under_the_prefix() -> None:
    schema = chat_schema()
    assert list(schema.keys) == list(ChatState.model_fields)
    for name, key in schema.keys.items():
        assert issubclass(key, StateKey)
        assert key.key == f"chat.{name}"
    assert schema.plugin.id == "schema:chat"
    assert StateSchema(ChatState).keys["title"].key == "ChatState.title"  # default prefix


def test_merge_strategy_is_exclusive_unless_the_field_says_commutative() -> None:
    schema = chat_schema()
    merges = {name: field.merge for name, field in schema.fields.items()}
    assert merges["total"] is MergeStrategy.COMMUTATIVE
    assert merges["best"] is MergeStrategy.COMMUTATIVE
    assert merges["count"] is MergeStrategy.EXCLUSIVE  # a reducer alone promises nothing
    assert merges["log"] is MergeStrategy.EXCLUSIVE
    assert merges["title"] is MergeStrategy.EXCLUSIVE  # no annotation: overwrite
    assert schema.fields["title"].reducer is None
    assert schema.fields["log"].reducer == "operator.add"
    assert schema.fields["messages"].reducer == "append_messages"


def test_run_ephemeral_fields_are_run_keys_even_in_a_thread_schema() -> None:
    schema = chat_schema(scope=KeyScope.THREAD, persistent=False)
    assert schema.keys["done"].scope is KeyScope.RUN
    assert schema.keys["actions"].scope is KeyScope.THREAD
    assert schema.keys["title"].scope is KeyScope.THREAD
    bindings = snapshot_of(schema.plugin).registry
    assert not bindings.binding(schema.keys["title"]).persistent


def test_lists_under_appending_reducers_are_held_as_vectors_and_viewed_as_lists() -> None:
    schema = chat_schema()
    assert schema.fields["messages"].held_as is list
    assert schema.fields["log"].held_as is list
    assert schema.fields["tags"].held_as is None
    snapshot = snapshot_of(schema.plugin)
    assert isinstance(snapshot.get(schema.keys["messages"]), Vector)
    state = schema.view(snapshot)
    assert isinstance(state, ChatState)
    assert type(state.messages) is list and type(state.log) is list


def test_defaults_come_from_the_model_and_mutable_ones_are_never_shared() -> None:
    schema = chat_schema()
    snapshot = snapshot_of(schema.plugin)
    assert schema.view(snapshot) == ChatState()
    tags = snapshot.get(schema.keys["tags"])
    tags["seed"] = 99  # mutating what was read changes nothing anyone else sees
    assert snapshot.get(schema.keys["tags"]) == {"seed": 1}


def test_a_typeddict_compiles_with_zero_values_and_none_as_defaults() -> None:
    schema = StateSchema(EvoState, prefix="evo")
    snapshot = snapshot_of(schema.plugin)
    assert schema.view(snapshot) == {"messages": [], "user_name": "", "note": None}
    assert schema.fields["user_name"].reducer is None  # "overwrite" is the default behaviour
    assert schema.fields["messages"].held_as is list


class Shapes(BaseModel):
    history: Annotated[tuple[str, ...], operator.add] = ()
    anything: Annotated[list, operator.add] = Field(default_factory=list)  # type: ignore[type-arg]
    user: str = Field(default="ada", alias="userName")


def test_tuples_and_bare_lists_are_held_as_vectors_and_aliases_do_not_matter() -> None:
    schema = StateSchema(Shapes)
    assert schema.fields["history"].held_as is tuple
    assert schema.fields["anything"].held_as is list
    snapshot = snapshot_of(
        schema.plugin,
        {schema.keys["history"]: Vector(["a"]), schema.keys["anything"]: Vector([1, "x"])},
    )
    state = schema.view(snapshot)
    assert state.history == ("a",) and state.anything == [1, "x"] and state.user == "ada"
    assert list(schema.command(user="bob").patch.ops) == [(schema.keys["user"], "bob")]


# -- commands ----------------------------------------------------------------------------------


def test_command_builds_typed_updates_from_a_partial_dict_or_keywords() -> None:
    schema = chat_schema()
    command = schema.command({"title": "t", "total": 2}, count=1)
    assert command.patch.ops == [
        (schema.keys["title"], "t"),
        (schema.keys["total"], 2),
        (schema.keys["count"], 1),
    ]


def test_command_names_the_fields_when_one_is_unknown() -> None:
    schema = chat_schema()
    with pytest.raises(UnknownSchemaField) as caught:
        schema.command({"titel": "t"})
    assert isinstance(caught.value, StateError) and isinstance(caught.value, KeyError)
    assert "'titel'" in str(caught.value) and "title" in str(caught.value)
    assert caught.value.known == tuple(ChatState.model_fields)


def test_command_checks_types_down_to_the_items() -> None:
    schema = chat_schema()
    with pytest.raises(StateValidationError, match=r"chat\.total"):
        schema.command({"total": "1"})
    with pytest.raises(StateValidationError, match=r"chat\.messages.*at 0"):
        schema.command({"messages": [{"text": "a dict, not a Msg"}]})
    with pytest.raises(TypeError, match="mapping"):
        schema.command([("title", "t")])  # type: ignore[arg-type]


def test_typeddict_updates_are_checked_down_to_the_items_too() -> None:
    schema = StateSchema(EvoState, prefix="evo")
    with pytest.raises(StateValidationError, match=r"message for 'evo\.messages'.*got int 3"):
        schema.command(messages=[Message("user", "ok"), 3])  # a str would be a user message
    with pytest.raises(StateValidationError, match=r"evo\.note"):
        schema.command(note=3)
    bad = snapshot_of(schema.plugin, {schema.keys["messages"]: Vector([1])})
    with pytest.raises(StateError, match=r"does not validate as EvoState: at messages\.0"):
        schema.view(bad)


# -- reducers ----------------------------------------------------------------------------------

append_messages = StateUpdater.get("append_messages")


def test_append_messages_drops_messages_whose_id_is_already_present() -> None:
    a, b, c = Msg(text="a", id="1"), Msg(text="b", id="2"), Msg(text="c", id="3")
    anonymous = Msg(text="no id")
    merged = append_messages(Vector([a, b]), [b, c, anonymous, anonymous, c])
    assert isinstance(merged, Vector)
    assert merged == [a, b, c, anonymous, anonymous]  # no id: always appended
    as_dicts = append_messages([{"id": "1"}, {"text": "x"}], [{"id": "1"}, {"id": "2"}])
    assert as_dicts == [{"id": "1"}, {"text": "x"}, {"id": "2"}]
    assert append_messages((a,), [a, b]) == (a, b)
    assert append_messages([a], c) == [a, c]  # a single message is welcome too


def test_append_messages_is_correct_whichever_history_it_extends() -> None:
    a, b, c = (Msg(text=t, id=t) for t in "abc")
    base = append_messages(Vector(), [a])
    longer = append_messages(base, [b])
    forked = append_messages(base, [c, b])  # an older history extended again
    assert longer == [a, b] and forked == [a, c, b]
    assert append_messages(longer, [a, b, c]) == [a, b, c]
    assert base == [a]


def test_the_updater_registry_refuses_duplicates_and_bad_reducers() -> None:
    assert {"overwrite", "append_messages", "test_schema.max"} <= set(StateUpdater.names())
    assert StateUpdater.get("test_schema.max") is keep_max
    with pytest.raises(InvalidDeclaration, match="already registered to .*keep_max"):
        StateUpdater.register("test_schema.max")(lambda old, new: new)
    with pytest.raises(InvalidDeclaration, match=r"reducer\(old, new\)"):
        StateUpdater.register("test_schema.unary")(lambda value: value)  # type: ignore[type-var]
    with pytest.raises(UnknownUpdater, match="known updaters") as caught:
        StateUpdater.get("nope")
    assert isinstance(caught.value, KeyError) and caught.value.name == "nope"
    with pytest.raises(TypeError):
        StateUpdater()


def test_commutative_fields_really_commute_and_appends_do_not() -> None:
    schema = chat_schema()
    assert_commutative(schema.keys["total"], 0, [1, 2, 3])
    assert_commutative(schema.keys["best"], 0, [5, 1, 9])
    with pytest.raises(AssertionError, match="do not commute"):
        assert_commutative(schema.keys["log"], Vector(), [["a"], ["b"]])


# -- through an Agent ------------------------------------------------------------------------


async def test_a_schema_plugin_works_through_an_agent_end_to_end() -> None:
    schema = chat_schema()
    first, again = Msg(text="hello", id="m1"), Msg(text="hello again", id="m1")

    def on_step(ctx: PhaseContext) -> StateCommand:
        state = schema.view(ctx.snapshot)
        return schema.command(
            messages=[first, again, Msg(text=f"step {state.total}")],
            log=["step"],
            total=1,
            best=len(state.log) * 10,
            title="chatting",
        )

    def on_end(ctx: PhaseContext) -> StateCommand:
        return schema.command(done=True)

    responses = [InferenceResponse("calling", (ToolCall("c1", "echo", {}),)), text()]
    agent = Agent(
        [schema.plugin, Hooks("writer", step_start=on_step, run_end=on_end)],
        ScriptedModel(responses),
        {"echo": lambda arguments, ctx: "ok"},
    )
    result = await agent.run("t", ["hi"])
    assert result.outcome == "success" and result.steps == 2
    state = result.snapshot.view(ChatState)
    assert isinstance(state, ChatState)
    assert state.messages == [first, Msg(text="step 0"), Msg(text="step 1")]  # m1 once
    assert state.log == ["step", "step"]
    assert state.total == 2 and state.best == 10
    assert state.title == "chatting" and state.done is True
    assert result.snapshot.get(schema.keys["messages"]) == state.messages


async def test_ephemeral_fields_reset_at_run_step_and_call() -> None:
    schema = chat_schema(scope=KeyScope.THREAD)
    seen: list[tuple[Phase | None, ChatState]] = []
    at_run_start: list[bool] = []

    def run_start(ctx: PhaseContext) -> StateCommand:
        at_run_start.append(schema.view(ctx.snapshot).done)
        return schema.command(done=True, total=1)

    def record(run: Run, report: PhaseReport) -> None:
        seen.append((report.phase, schema.view(run.snapshot)))

    writer = Hooks(
        "writer",
        run_start=run_start,
        step_start=lambda ctx: schema.command(actions=["planned"]),
        after_inference=lambda ctx: schema.command(streaming="chunk"),
        after_tool_execute=lambda ctx: schema.command(actions=["tool"]),
    )
    responses = [InferenceResponse("calling", (ToolCall("c1", "echo", {}),)), text()]
    agent = Agent(
        [schema.plugin, writer],
        ScriptedModel(responses),
        {"echo": lambda arguments, ctx: "ok"},
        on_phase=record,
    )
    await agent.run("t", ["hi"])

    def at(phase: Phase, occurrence: int) -> ChatState:
        return [state for p, state in seen if p is phase][occurrence]

    assert at(Phase.RUN_START, 0).done is True
    assert at(Phase.STEP_START, 0).actions == ["planned"]
    assert at(Phase.AFTER_TOOL_EXECUTE, 0).actions == ["planned", "tool"]
    assert at(Phase.STEP_START, 1).actions == ["planned"]  # reset, then this step's write
    assert at(Phase.AFTER_INFERENCE, 0).streaming == "chunk"
    assert at(Phase.STEP_START, 1).streaming == "chunk"  # a call field lives until the call
    assert at(Phase.BEFORE_INFERENCE, 1).streaming == ""
    assert at(Phase.RUN_END, 0).done is True

    result = await agent.run("t", ["again"])  # same thread: thread fields survive
    assert at_run_start == [False, False]  # the run field was reset
    final = schema.view(result.snapshot)
    assert final.total == 2 and final.done is True


async def test_reset_hooks_clear_only_fields_that_hold_a_value() -> None:
    schema = chat_schema()
    assert await run_hooks(schema.plugin, Phase.STEP_START) == []
    commands = await run_hooks(
        schema.plugin, Phase.STEP_START, values={schema.keys["actions"]: ["old"]}
    )
    assert [key for key, _ in commands[0].patch.ops] == [schema.keys["actions"]]
    assert await run_hooks(schema.plugin, Phase.RUN_START) == []  # run fields need no hook


async def test_two_hooks_writing_one_field_in_one_phase() -> None:
    schema = chat_schema()

    def exclusive(ctx: PhaseContext) -> StateCommand:
        state = schema.view(ctx.snapshot)
        return schema.command(count=1, title=f"{state.title}+")

    kernel = Kernel([schema.plugin, Hooks("a", step_end=exclusive), Hooks("b", step_end=exclusive)])
    run = await kernel.start_run("t")
    report = await run.run_phase(Phase.STEP_END)
    state = schema.view(run.snapshot)
    assert state.count == 2 and state.title == "untitled++"  # the second writer re-ran
    assert report.conflicts == 1

    def commutative(ctx: PhaseContext) -> StateCommand:
        return schema.command(total=1)

    kernel = Kernel(
        [schema.plugin, Hooks("a", step_end=commutative), Hooks("b", step_end=commutative)]
    )
    run = await kernel.start_run("t")
    report = await run.run_phase(Phase.STEP_END)
    assert schema.view(run.snapshot).total == 2
    assert report.conflicts == 0  # concatenated, no re-run


class ListState(BaseModel):
    shared: Annotated[list[str], operator.add, Commutative()] = Field(default_factory=list)
    owned: Annotated[list[str], operator.add] = Field(default_factory=list)


async def test_commutative_lists_concatenate_in_registration_order() -> None:
    schema = StateSchema(ListState)

    def writer(tag: str) -> Any:
        return lambda ctx: schema.command(shared=[tag], owned=[f"{tag}:{ctx.snapshot.revision}"])

    kernel = Kernel(
        [schema.plugin, Hooks("a", step_end=writer("a")), Hooks("b", step_end=writer("b"))]
    )
    run = await kernel.start_run("t")
    report = await run.run_phase(Phase.STEP_END)
    state = schema.view(run.snapshot)
    assert state.shared == ["a", "b"]
    assert state.owned == ["a:0", "b:1"]  # b re-ran on the snapshot after a's commit
    assert report.conflicts == 1


async def test_a_write_in_the_reset_phase_lands_after_the_reset() -> None:
    schema = chat_schema()
    writer = Hooks("writer", step_start=lambda ctx: schema.command(actions=["new"]))
    kernel = Kernel([schema.plugin, writer])
    run = await kernel.start_run("t")
    await run.submit(schema.command(actions=["stale"]))
    await run.run_phase(Phase.STEP_START)
    assert schema.view(run.snapshot).actions == ["new"]


async def test_langgraph_style_nodes_return_partial_dicts() -> None:
    schema = chat_schema()

    def node(state: ChatState) -> dict[str, Any]:
        return {"log": [f"saw {len(state.log)}"], "total": 1}

    async def async_node(state: ChatState) -> dict[str, Any] | None:
        return None if state.total > 5 else {"title": "async"}

    plugin = Hooks("nodes", step_start=schema.hook(node), step_end=schema.hook(async_node))
    kernel = Kernel([schema.plugin, plugin])
    run = await kernel.start_run("t")
    await run.run_phase(Phase.STEP_START)
    await run.run_phase(Phase.STEP_START)
    await run.run_phase(Phase.STEP_END)
    state = schema.view(run.snapshot)
    assert state.log == ["saw 0", "saw 1"] and state.total == 2 and state.title == "async"


async def test_a_failing_node_names_the_plugin_that_registered_it_sync_or_async() -> None:
    schema = chat_schema()

    def broken(state: ChatState) -> dict[str, Any]:
        raise ValueError("sync node broke")

    async def async_broken(state: ChatState) -> dict[str, Any]:
        raise ValueError("async node broke")

    def wrong(state: ChatState) -> Any:
        return ["not", "a", "dict"]

    for node, cause in ((broken, ValueError), (async_broken, ValueError), (wrong, TypeError)):
        plugin = Hooks("mine", step_start=schema.hook(node))
        run = await Kernel([schema.plugin, plugin]).start_run("t")
        with pytest.raises(HookFailed) as caught:
            await run.run_phase(Phase.STEP_START)
        assert caught.value.plugin == "mine" and isinstance(caught.value.cause, cause)
    assert "must return a dict of field updates" in str(caught.value)


async def test_a_thread_schema_survives_a_thread_store_round_trip() -> None:
    schema = StateSchema(EvoState, prefix="evo", scope=KeyScope.THREAD)
    store = MemoryThreadStore()
    greet = Message("assistant", "hi", id="g1")

    def on_start(ctx: PhaseContext) -> StateCommand:
        return schema.command(messages=[greet], user_name="ada")

    def agent() -> Agent:
        return Agent(
            [schema.plugin, Hooks("w", run_start=on_start)], ScriptedModel([]), thread_store=store
        )

    await agent().run("t", ["one"])
    result = await agent().run("t", ["two"])  # a new kernel: state comes from the store
    state = result.snapshot.view(EvoState)
    assert state == {"messages": [greet], "user_name": "ada", "note": None}
    assert isinstance(result.snapshot.get(schema.keys["messages"]), Vector)


async def test_pydantic_messages_survive_a_thread_store_round_trip() -> None:
    schema = chat_schema(scope=KeyScope.THREAD)
    store = MemoryThreadStore()
    hello = Msg(text="hello", id="h")

    def on_start(ctx: PhaseContext) -> StateCommand:
        return schema.command(messages=[hello], total=1, tags={"runs": 1})

    def agent() -> Agent:
        return Agent(
            [schema.plugin, Hooks("w", run_start=on_start)], ScriptedModel([]), thread_store=store
        )

    await agent().run("t", ["one"])
    state = schema.view((await agent().run("t", ["two"])).snapshot)
    assert state.messages == [hello]  # de-duplicated across runs, after a decode
    assert state.total == 2 and state.tags == {"runs": 1}


async def test_appends_leave_earlier_snapshots_untouched() -> None:
    schema = chat_schema()
    run = await Kernel([schema.plugin]).start_run("t")
    await run.submit(schema.command(log=["a"]))
    before = run.snapshot
    await run.submit(schema.command(log=["b"]))
    await run.submit(schema.command(log=["c"]))
    assert schema.view(before).log == ["a"]
    assert schema.view(run.snapshot).log == ["a", "b", "c"]


# -- view --------------------------------------------------------------------------------------


async def test_view_by_model_class_finds_the_registered_schema() -> None:
    chat, other = chat_schema(), StateSchema(ChatState, prefix="other")
    run = await Kernel([chat.plugin]).start_run("t")
    await run.submit(chat.command(title="found"))
    assert run.snapshot.view(ChatState).title == "found"
    assert run.snapshot.view(chat).title == "found"

    both = await Kernel([chat.plugin, other.plugin]).start_run("t")
    with pytest.raises(StateError, match=r"several prefixes \(\[.chat., .other.\]\)"):
        both.snapshot.view(ChatState)
    with pytest.raises(StateError, match="no StateSchema of ChatState is registered"):
        snapshot_of([]).view(ChatState)
    with pytest.raises(StateError, match="or the model class .*, got 'ChatState'"):
        run.snapshot.view("ChatState")

    class Never(BaseModel):
        x: int = 0

    with pytest.raises(StateError, match="not been compiled"):
        run.snapshot.view(Never)


def test_view_refuses_a_state_the_model_does_not_validate() -> None:
    schema = chat_schema()
    # A raw cmd.update checks only the origin class (list), so bad items can get in this way.
    bad = snapshot_of(schema.plugin, {schema.keys["messages"]: Vector(["not a message"])})
    with pytest.raises(StateError, match="does not validate as ChatState"):
        schema.view(bad)


# -- declarations that cannot work -------------------------------------------------------------


class Mode(enum.Enum):
    A = "a"


def test_impossible_declarations_fail_when_compiled_naming_the_field() -> None:
    class TwoReducers(BaseModel):
        x: Annotated[int, operator.add, "test_schema.max"] = 0

    class CommutativeOverwrite(BaseModel):
        x: Annotated[int, Commutative()] = 0

    class TwoScopes(BaseModel):
        x: Annotated[int, Ephemeral("run"), Ephemeral("step")] = 0

    class UnknownName(BaseModel):
        x: Annotated[int, "no_such_updater"] = 0

    class NotAReducer(BaseModel):
        x: Annotated[int, lambda value: value] = 0

    class NoDefault(BaseModel):
        mode: Mode

    class DataFactory(BaseModel):
        x: int = Field(default_factory=lambda data: 1)

    cases: list[tuple[type[Any], str]] = [
        (TwoReducers, r"TwoReducers\.x: declares two reducers"),
        (CommutativeOverwrite, r"CommutativeOverwrite\.x: is marked Commutative"),
        (TwoScopes, r"TwoScopes\.x: declares two Ephemeral scopes"),
        (UnknownName, r"UnknownName\.x: names the updater 'no_such_updater'.*append_messages"),
        (NotAReducer, r"NotAReducer\.x: reducer .* cannot be called as reducer\(old, new\)"),
        (NoDefault, r"NoDefault\.mode: has no default"),
        (DataFactory, r"DataFactory\.x: its default_factory takes the validated data"),
    ]
    for model, message in cases:
        with pytest.raises(InvalidDeclaration, match=message):
            StateSchema(model)


def test_bad_markers_models_and_prefixes_are_refused() -> None:
    with pytest.raises(InvalidDeclaration, match="scope must be one of"):
        Ephemeral("forever")  # type: ignore[arg-type]

    class Plain:
        x: int = 0

    class Empty(BaseModel):
        pass

    class Modes(TypedDict):
        mode: Literal["a", "b"]

    with pytest.raises(InvalidDeclaration, match="BaseModel subclass, a dataclass or a TypedDict"):
        StateSchema(Plain)
    with pytest.raises(InvalidDeclaration, match="declares no fields"):
        StateSchema(Empty)
    with pytest.raises(InvalidDeclaration, match="reserved"):
        StateSchema(ChatState, prefix="statekernel.chat")
    with pytest.raises(InvalidDeclaration, match=r"Modes\.mode: has no default.*TypedDict"):
        StateSchema(Modes)


async def test_snapshot_view_returns_the_declared_model() -> None:
    class Notes(BaseModel):
        items: Annotated[list[str], operator.add] = []
        title: str = ""

    schema = StateSchema(Notes, prefix="notes_view")
    run = await Kernel([schema.plugin]).start_run("t")
    await run.submit(schema.command({"items": ["a", "b"], "title": "x"}))
    viewed = run.snapshot.view(Notes)
    assert viewed == Notes(items=["a", "b"], title="x")
    assert run.snapshot.view(schema) == viewed
