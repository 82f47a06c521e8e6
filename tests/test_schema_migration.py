"""State declared for LangGraph, EvoFabric or Jianmu, brought over unchanged (§5.3).

Each case here is one a migrating user hit: a spelling their framework accepts, a
behaviour their framework documents. The first six failed before the schema layer was
fixed for them.
"""

from __future__ import annotations

import dataclasses
import operator
import threading
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, NotRequired, TypedDict

import attrs
import pydantic
import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from samples import Hook

from statekernel import (
    REMOVE_ALL_MESSAGES,
    Agent,
    CommitRejected,
    Commutative,
    InferenceResponse,
    InvalidDeclaration,
    Kernel,
    KeyScope,
    MergeStrategy,
    Message,
    Overwrite,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    RemoveMessage,
    ScriptedModel,
    StateCommand,
    StateError,
    StateSchema,
    StateValidationError,
    Vector,
    add_messages,
    as_message,
)
from statekernel.stores import SqliteThreadStore
from statekernel.testing import snapshot_of


def merge_dicts(old: dict[str, int], new: dict[str, int]) -> dict[str, int]:
    return {**old, **new}


async def run_of(*plugins: Plugin) -> Any:
    return await Kernel(list(plugins)).start_run("migration")


# -- 1. abstract collections start as their concrete zero value ---------------------------


class LangGraphState(TypedDict):
    messages: Annotated[Sequence[str], operator.add]
    counts: Annotated[Mapping[str, int], merge_dicts]


async def test_abstract_collections_start_empty_and_view_as_concrete_types() -> None:
    schema = StateSchema(LangGraphState)
    run = await run_of(schema.plugin)
    assert schema.view(run.snapshot) == {"messages": [], "counts": {}}
    await run.submit(schema.command(messages=["a"], counts={"x": 1}))
    await run.submit(schema.command(messages=("b", "c"), counts={"y": 2}))
    state = schema.view(run.snapshot)
    assert state == {"messages": ["a", "b", "c"], "counts": {"x": 1, "y": 2}}
    assert type(state["messages"]) is list


def test_a_string_is_not_a_sequence_of_strings() -> None:
    schema = StateSchema(LangGraphState)
    with pytest.raises(StateValidationError, match="LangGraphState.messages"):
        schema.command(messages="hi")  # would append "h" and "i"


# -- 2. PEP 655 allows NotRequired inside or outside Annotated ----------------------------


class Both(TypedDict):
    outer: Annotated[NotRequired[dict[str, int]], merge_dicts]
    inner: NotRequired[Annotated[dict[str, int], merge_dicts]]


async def test_not_required_in_either_order_keeps_the_reducer() -> None:
    schema = StateSchema(Both)
    assert schema.fields["outer"].reducer == schema.fields["inner"].reducer
    assert schema.fields["outer"].reducer is not None
    run = await run_of(schema.plugin)
    await run.submit(schema.command(outer={"a": 1}, inner={"a": 1}))
    await run.submit(schema.command(outer={"b": 2}, inner={"b": 2}))
    assert schema.view(run.snapshot) == {"outer": {"a": 1, "b": 2}, "inner": {"a": 1, "b": 2}}


# -- 3. what the model refuses is refused at the write ------------------------------------


class Person(BaseModel):
    age: Annotated[int, Field(gt=0)] = 1
    name: str = "ada"
    turns: Annotated[int, operator.add, Field(le=3)] = 0
    tags: list[str] = []

    @field_validator("name")
    @classmethod
    def not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("name must not be blank")
        return value


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [("age", -1, "greater than 0"), ("name", "  ", "must not be blank")],
)
def test_a_constrained_field_refuses_a_bad_value_when_the_command_is_built(
    field: str, value: Any, reason: str
) -> None:
    schema = StateSchema(Person)
    with pytest.raises(StateValidationError, match=reason) as caught:
        schema.command({field: value})
    assert caught.value.key == f"Person.{field}"


async def test_a_merged_value_the_model_refuses_is_rejected_at_commit_and_nothing_changes() -> None:
    schema = StateSchema(Person)
    run = await run_of(schema.plugin)
    await run.submit(schema.command(turns=2, age=5))
    before = run.snapshot.revision
    with pytest.raises(CommitRejected, match="less than or equal to 3") as caught:
        await run.submit(schema.command(turns=2))  # 2 + 2 > 3: only the merged value is bad
    assert caught.value.key == "Person.turns"
    assert run.snapshot.revision == before
    assert schema.view(run.snapshot) == Person(age=5, turns=2)  # views keep working


async def test_a_write_around_the_schema_is_refused_too() -> None:
    schema = StateSchema(Person)
    run = await run_of(schema.plugin)
    with pytest.raises(CommitRejected, match="greater than 0"):
        await run.submit(StateCommand().update(schema.keys["age"], -3))
    assert schema.view(run.snapshot).age == 1


async def test_fields_with_nothing_to_check_pay_nothing() -> None:
    schema = StateSchema(Person)
    assert schema.keys["tags"].__statekernel_key__ is not None
    assert not schema.keys["tags"].__statekernel_key__.has_validate
    assert schema.keys["age"].__statekernel_key__.has_validate


class Limits(TypedDict):
    level: Annotated[int, Field(ge=0, le=9)]


async def test_typeddict_constraints_are_checked_at_the_write() -> None:
    schema = StateSchema(Limits)
    with pytest.raises(StateValidationError, match="less than or equal to 9"):
        schema.command(level=10)
    run = await run_of(schema.plugin)
    await run.submit(schema.command(level=9))
    assert schema.view(run.snapshot) == {"level": 9}


# -- 4. EvoFabric's messages carry their id as msg_id -------------------------------------


@attrs.frozen
class StateMessage:
    role: str
    content: str
    msg_id: str


class EvoState(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    messages: Annotated[list[StateMessage], "append_messages"] = []
    history: Annotated[list[dict[str, str]], "append_messages"] = []


async def test_append_messages_knows_msg_id_on_objects_and_mappings() -> None:
    schema = StateSchema(EvoState)
    run = await run_of(schema.plugin)
    first = StateMessage("user", "hi", msg_id="m1")
    row = {"role": "user", "content": "hi", "msg_id": "m1"}
    await run.submit(schema.command(messages=[first], history=[row]))
    await run.submit(
        schema.command(
            messages=[StateMessage("user", "again", msg_id="m1"), StateMessage("a", "b", "m2")],
            history=[dict(row, content="again"), {"role": "a", "content": "b", "msg_id": "m2"}],
        )
    )
    state = schema.view(run.snapshot)
    assert [m.msg_id for m in state.messages] == ["m1", "m2"]
    assert [m.content for m in state.messages] == ["hi", "b"]  # keep-first, as EvoFabric
    assert [m["content"] for m in state.history] == ["hi", "b"]


# -- 5. a node whose __call__ is async is awaited ------------------------------------------


class Counter(BaseModel):
    count: Annotated[int, operator.add] = 0


class AsyncNode:
    async def __call__(self, state: Counter) -> dict[str, int]:
        return {"count": state.count + 1}


async def test_an_object_with_async_call_is_awaited_as_a_node() -> None:
    schema = StateSchema(Counter)
    run = await run_of(schema.plugin, Hook("node", Phase.STEP_START, schema.hook(AsyncNode())))
    await run.run_phase(Phase.STEP_START)
    await run.run_phase(Phase.STEP_START)
    assert schema.view(run.snapshot).count == 1 + 2  # 0 -> 1, then 1 + (1 + 1)


# -- 6. a value holding a live resource is refused, naming its key ------------------------


class Resources(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    lock: Any = None


def test_an_uncopyable_value_is_refused_naming_its_key() -> None:
    schema = StateSchema(Resources, scope=KeyScope.THREAD, persistent=False)
    with pytest.raises(StateValidationError, match="Resources.lock") as caught:
        schema.command(lock=threading.Lock())
    assert caught.value.key == "Resources.lock"
    assert "keep it on the plugin" in str(caught.value)


async def test_an_uncopyable_value_in_a_plain_key_is_refused_from_a_hook_too() -> None:
    schema = StateSchema(Resources)

    def write(ctx: PhaseContext) -> StateCommand:
        return schema.command(lock=threading.Lock())

    run = await run_of(schema.plugin, Hook("node", Phase.STEP_START, write))
    with pytest.raises(StateValidationError, match="Resources.lock"):
        await run.run_phase(Phase.STEP_START)
    assert run.snapshot.revision == 0


# -- add_messages: LangGraph's message semantics -----------------------------------------


class AgentState(TypedDict):
    """LangGraph's standard spelling, with statekernel's Message for AnyMessage."""

    messages: Annotated[Sequence[Message], add_messages]


def contents(schema: StateSchema[Any], snapshot: Any) -> list[tuple[str | None, str]]:
    return [(m.id, m.content) for m in schema.view(snapshot)["messages"]]


async def test_add_messages_assigns_ids_replaces_by_id_and_removes() -> None:
    schema = StateSchema(AgentState)
    run = await run_of(schema.plugin)
    await run.submit(schema.command(messages=[("user", "hi"), Message("assistant", "hello")]))
    assert contents(schema, run.snapshot) == [("msg-0", "hi"), ("msg-1", "hello")]
    await run.submit(schema.command(messages=Message("assistant", "HELLO", id="msg-1")))
    await run.submit(schema.command(messages="and you?"))
    assert contents(schema, run.snapshot) == [
        ("msg-0", "hi"),
        ("msg-1", "HELLO"),  # replaced where it stood
        ("msg-2", "and you?"),
    ]
    await run.submit(schema.command(messages=[RemoveMessage("msg-0")]))
    assert contents(schema, run.snapshot) == [("msg-1", "HELLO"), ("msg-2", "and you?")]
    await run.submit(schema.command(messages="more"))  # a new id, never one still held
    ids = [m for m, _ in contents(schema, run.snapshot)]
    assert len(set(ids)) == len(ids) == 3


async def test_remove_all_keeps_only_what_follows_it() -> None:
    schema = StateSchema(AgentState)
    run = await run_of(schema.plugin)
    await run.submit(schema.command(messages=["a", "b", "c"]))
    await run.submit(
        schema.command(messages=[RemoveMessage(REMOVE_ALL_MESSAGES), ("system", "summary")])
    )
    assert contents(schema, run.snapshot) == [("msg-0", "summary")]


async def test_removing_an_id_that_is_not_there_fails_the_commit_and_changes_nothing() -> None:
    schema = StateSchema(AgentState)
    run = await run_of(schema.plugin)
    await run.submit(schema.command(messages=["a"]))
    before = run.snapshot
    with pytest.raises(CommitRejected, match="no message with that id"):
        await run.submit(schema.command(messages=[RemoveMessage("ghost"), "b"]))
    assert run.snapshot is before


def test_add_messages_on_plain_lists_works_like_langgraphs() -> None:
    merged = add_messages([{"role": "user", "content": "a", "id": "1"}], [{"id": "1", "x": 2}])
    assert merged == [{"id": "1", "x": 2}]
    assert add_messages((), ({"content": "x"},)) == ({"content": "x", "id": "msg-0"},)
    # A replace after a remove of the same id, in one update, keeps the message (LangGraph).
    kept = add_messages([{"id": "1", "v": 0}], [RemoveMessage("1"), {"id": "1", "v": 1}])
    assert kept == [{"id": "1", "v": 1}]


async def test_a_plain_append_to_a_long_history_shares_it_and_keeps_it_a_vector() -> None:
    schema = StateSchema(AgentState)
    run = await run_of(schema.plugin)
    await run.submit(schema.command(messages=[f"m{i}" for i in range(2_000)]))
    before = run.snapshot.get(schema.keys["messages"])
    await run.submit(schema.command(messages="one more"))
    after = run.snapshot.get(schema.keys["messages"])
    assert isinstance(after, Vector) and len(after) == 2_001
    assert after[:2_000] == before and after[0] is before[0]  # the old messages, not copies
    assert after[-1].id == "msg-2000"


# -- message input, at the schema and at the Agent ---------------------------------------


def test_message_input_spellings_become_messages() -> None:
    schema = StateSchema(AgentState)
    command = schema.command(
        messages=[
            "plain",
            ("human", "hi"),
            ("ai", "hello"),
            {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 1}'},
                    }
                ],
            },
            {"role": "tool", "content": "2", "tool_call_id": "c1"},
        ]
    )
    ((_, update),) = command.patch.ops
    assert [(m.role, m.content) for m in update] == [
        ("user", "plain"),
        ("user", "hi"),
        ("assistant", "hello"),
        ("system", "be brief"),
        ("assistant", ""),
        ("tool", "2"),
    ]
    assert update[4].tool_calls[0].name == "add" and update[4].tool_calls[0].arguments == {"a": 1}
    assert update[5].tool_call_id == "c1"


@pytest.mark.parametrize(
    "bad", [3, ("robot", "hi"), {"content": "no role"}, {"role": "user", "content": 5}]
)
def test_anything_else_is_refused_naming_the_field(bad: Any) -> None:
    schema = StateSchema(AgentState)
    with pytest.raises(StateValidationError, match=r"AgentState\.messages.*\(role, content\)"):
        schema.command(messages=[bad])


async def test_the_agent_takes_the_same_spellings() -> None:
    agent = Agent([], ScriptedModel([InferenceResponse(text="ok")]))
    result = await agent.run("t", [("user", "hi"), {"role": "user", "content": "there"}])
    assert [(m.role, m.content) for m in result.messages[:2]] == [("user", "hi"), ("user", "there")]
    alone = await Agent([], ScriptedModel([InferenceResponse(text="ok")])).run("u", "one string")
    assert alone.messages[0].content == "one string"
    with pytest.raises(StateValidationError, match="agent input"):
        await agent.run("t", [42])  # type: ignore[list-item]


# -- LangGraph- and EvoFabric-shaped state through an Agent, saved to SQLite -------------


class LangGraphNodes(Plugin):
    """Two LangGraph-style nodes: one answers with dict and tuple messages, one trims."""

    id = "nodes"

    def __init__(self, schema: StateSchema[Any]) -> None:
        self.schema = schema

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_phase_hook(Phase.STEP_START, self.schema.hook(self.answer))
        registrar.register_phase_hook(Phase.STEP_END, self.schema.hook(self.trim))

    @staticmethod
    def answer(state: dict[str, Any]) -> dict[str, Any]:
        turn = len(state["messages"])
        return {"messages": [("user", f"question {turn}"), {"role": "assistant", "content": "ok"}]}

    @staticmethod
    def trim(state: dict[str, Any]) -> dict[str, Any] | None:
        old = state["messages"][:-3]
        return {"messages": [RemoveMessage(m.id) for m in old]} if old else None


async def test_a_langgraph_agent_state_runs_unchanged_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    schema = StateSchema(AgentState, prefix="graph", scope=KeyScope.THREAD)
    path = tmp_path / "threads.db"
    async with SqliteThreadStore(path) as store:
        agent = Agent(
            [schema.plugin, LangGraphNodes(schema)], ScriptedModel([]), thread_store=store
        )
        for _ in range(3):
            result = await agent.run("t1", ["go"])
            assert result.outcome == "success", result.error
        held = contents(schema, result.snapshot)
    assert [text for _, text in held] == ["ok", "question 3", "ok"]  # trimmed to three
    async with SqliteThreadStore(path) as store:  # a new process, as far as state goes
        again = Agent(
            [schema.plugin, LangGraphNodes(schema)], ScriptedModel([]), thread_store=store
        )
        kernel = again.kernel
        restored = await kernel.state_at("t1", result.snapshot.revision)
        assert contents(schema, restored) == held
        report = await kernel.verify("t1")
        assert report.ok and not report.detail, report  # rebuilt from the journal alone
        kinds = {
            op.kind
            for record in await kernel.history("t1")
            for op in record.ops
            if op.key.startswith("graph.")
        }
        assert kinds == {"update"}  # removals journal as updates, replayed by add_messages
        fourth = await again.run("t1", ["go"])  # the restored history goes on growing
        after = contents(schema, fourth.snapshot)
        assert [text for _, text in after] == ["ok", "question 3", "ok"]
        assert after[0] == held[-1] and not {i for i, _ in after[1:]} & {i for i, _ in held}


class EvoFabricState(TypedDict):
    messages: Annotated[list[StateMessage], "append_messages"]
    user_name: Annotated[str, "overwrite"]


class EvoNodes(Plugin):
    id = "evo-nodes"

    def __init__(self, schema: StateSchema[Any]) -> None:
        self.schema = schema

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_phase_hook(Phase.STEP_START, self.schema.hook(self.node))

    @staticmethod
    def node(state: dict[str, Any]) -> dict[str, Any]:
        turn = len(state["messages"])
        repeated = state["messages"][-1:]  # EvoFabric resends history; its ids keep it out
        fresh = StateMessage("assistant", f"turn {turn}", msg_id=f"evo-{turn}")
        return {"messages": [*repeated, fresh], "user_name": "ada"}


async def test_an_evofabric_schema_runs_unchanged_and_survives_a_restart(tmp_path: Path) -> None:
    schema = StateSchema(EvoFabricState, prefix="evo", scope=KeyScope.THREAD)
    path = tmp_path / "threads.db"
    async with SqliteThreadStore(path) as store:
        agent = Agent([schema.plugin, EvoNodes(schema)], ScriptedModel([]), thread_store=store)
        for _ in range(2):
            result = await agent.run("t1", ["go"])
            assert result.outcome == "success", result.error
    state = schema.view(result.snapshot)
    assert [m.msg_id for m in state["messages"]] == ["evo-0", "evo-1"]
    async with SqliteThreadStore(path) as store:
        kernel = Kernel([schema.plugin], thread_store=store)
        restored = schema.view(await kernel.state_at("t1", result.snapshot.revision))
        assert restored == state and restored["user_name"] == "ada"


# -- node results, Overwrite, dataclass schemas -------------------------------------------


class Tally(BaseModel):
    count: Annotated[int, operator.add] = 0
    log: Annotated[list[str], operator.add] = []
    title: str = "untitled"


async def test_a_node_may_return_a_model_instance_and_only_its_set_fields_apply() -> None:
    schema = StateSchema(Tally)

    def node(state: Tally) -> Tally:
        return Tally(count=2, log=["x"])  # title was not set: it stays

    run = await run_of(schema.plugin, Hook("node", Phase.STEP_START, schema.hook(node)))
    await run.submit(schema.command(title="kept"))
    await run.run_phase(Phase.STEP_START)
    await run.run_phase(Phase.STEP_START)
    assert schema.view(run.snapshot) == Tally(count=4, log=["x", "x"], title="kept")


async def test_overwrite_replaces_a_reducer_field_and_replays_as_a_replace(
    tmp_path: Path,
) -> None:
    schema = StateSchema(Tally, scope=KeyScope.THREAD)

    def node(state: Tally) -> dict[str, Any]:
        return {"count": Overwrite(10), "log": Overwrite(["fresh"])}

    async with SqliteThreadStore(tmp_path / "t.db") as store:
        kernel = Kernel(
            [schema.plugin, Hook("node", Phase.STEP_START, schema.hook(node))], thread_store=store
        )
        run = await kernel.start_run("t1")
        await run.submit(schema.command(count=3, log=["a", "b"]))
        await run.run_phase(Phase.STEP_START)
        await run.submit(schema.command(count=1, log=["c"]))
        assert schema.view(run.snapshot) == Tally(count=11, log=["fresh", "c"])
        await run.finish()
        replayed = await kernel.state_at("t1", run.snapshot.revision - 1)
        assert schema.view(replayed) == Tally(count=10, log=["fresh"])
        report = await kernel.verify("t1")
        assert report.ok and not report.detail, report
    with pytest.raises(StateValidationError, match="Tally.count"):
        schema.command(count=Overwrite("ten"))


@dataclasses.dataclass
class Trip:
    stops: Annotated[list[str], operator.add] = dataclasses.field(default_factory=list)
    miles: Annotated[int, operator.add, Commutative()] = 0
    driver: str | None = None

    def __post_init__(self) -> None:
        if self.miles < 0:
            raise ValueError("miles cannot be negative")


async def test_a_dataclass_schema_compiles_runs_and_views_as_the_dataclass() -> None:
    schema = StateSchema(Trip)
    assert schema.fields["miles"].merge is MergeStrategy.COMMUTATIVE
    run = await run_of(schema.plugin)
    await run.submit(schema.command(stops=["a"], miles=3))
    await run.submit(schema.command(stops=["b"], miles=4, driver="ada"))
    assert schema.view(run.snapshot) == Trip(stops=["a", "b"], miles=7, driver="ada")
    with pytest.raises(StateValidationError, match="Trip.driver"):
        schema.command(driver=3)
    await run.submit(schema.command(miles=-10))
    with pytest.raises(StateError, match="miles cannot be negative"):
        schema.view(run.snapshot)  # __post_init__ is the model's own check, run by view()


def test_a_dataclass_node_result_applies_every_field() -> None:
    schema = StateSchema(Trip)
    command = schema._as_command(
        Trip(stops=["x"], miles=1), node=test_a_dataclass_node_result_applies_every_field
    )
    assert command is not None
    assert [key for key, _ in command.patch.ops] == [
        schema.keys[n] for n in ("stops", "miles", "driver")
    ]


# -- edges a review found ------------------------------------------------------------------


class NeedsTheModel(BaseModel):
    LIMIT: ClassVar[int] = 3
    lo: int = 0
    n: int = 0

    @field_validator("n")
    @classmethod
    def at_most_limit(cls, value: int, info: ValidationInfo) -> int:
        if value > cls.LIMIT or value < info.data["lo"]:
            raise ValueError(f"n must be between lo and {cls.LIMIT}")
        return value


async def test_a_validator_that_needs_the_whole_model_is_left_to_view() -> None:
    schema = StateSchema(NeedsTheModel)
    run = await run_of(schema.plugin)
    await run.submit(schema.command(n=2))  # no AttributeError or KeyError from the write
    assert schema.view(run.snapshot).n == 2
    await run.submit(schema.command(n=5))
    with pytest.raises(StateError, match="between lo and 3"):
        schema.view(run.snapshot)  # the model's own validation, as before


class Strict(BaseModel):
    model_config = ConfigDict(strict=True)

    tags: Annotated[tuple[str, ...], operator.add, Field(max_length=3)] = ()


async def test_a_tuple_held_as_a_vector_is_checked_as_a_tuple() -> None:
    schema = StateSchema(Strict)
    run = await run_of(schema.plugin)
    await run.submit(schema.command(tags=("a",)))
    await run.submit(schema.command(tags=Overwrite(("x", "y"))))
    assert schema.view(run.snapshot).tags == ("x", "y")
    with pytest.raises(CommitRejected, match="at most 3"):
        await run.submit(schema.command(tags=("p", "q")))


class PlainItem(typing.TypedDict):
    name: str


class Basket(TypedDict):
    items: Annotated[list[PlainItem], operator.add, Field(max_length=3)]


def test_a_constraint_pydantic_cannot_build_here_leaves_the_schema_compiling() -> None:
    schema = StateSchema(Basket)  # a typing.TypedDict item: pydantic refuses it on 3.11
    assert schema.command(items=[{"name": "a"}]).patch.ops


async def test_overwrite_of_a_message_history_journals_the_value_and_time_travels(
    tmp_path: Path,
) -> None:
    schema = StateSchema(AgentState, scope=KeyScope.THREAD)
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        kernel = Kernel([schema.plugin], thread_store=store)
        run = await kernel.start_run("t1")
        await run.submit(schema.command(messages=["a", "b"]))
        await run.submit(schema.command(messages=Overwrite([("system", "summary")])))
        await run.submit(schema.command(messages="c"))
        await run.finish()
        middle = await kernel.state_at("t1", run.snapshot.revision - 1)
        assert [m.content for m in schema.view(middle)["messages"]] == ["summary"]
        kinds = [op.kind for record in await kernel.history("t1") for op in record.ops]
        assert kinds == ["update", "value", "update"]
        report = await kernel.verify("t1")
        assert report.ok and not report.detail, report


class PydanticMessage(BaseModel):
    content: str
    id: str | None = None


class PydanticChat(BaseModel):
    messages: Annotated[list[PydanticMessage], add_messages] = []


def test_add_messages_over_pydantic_messages_in_a_saved_thread_is_refused_with_what_to_use() -> (
    None
):
    with pytest.raises(InvalidDeclaration, match="statekernel.Message"):
        StateSchema(PydanticChat, scope=KeyScope.THREAD)


async def test_add_messages_over_pydantic_messages_works_where_nothing_is_saved() -> None:
    for schema in (
        StateSchema(PydanticChat, prefix="run"),
        StateSchema(PydanticChat, prefix="memory", scope=KeyScope.THREAD, persistent=False),
    ):
        run = await run_of(schema.plugin)
        await run.submit(schema.command(messages=[PydanticMessage(content="a")]))
        await run.submit(
            schema.command(messages=[RemoveMessage("msg-0"), PydanticMessage(content="b")])
        )
        assert [m.content for m in schema.view(run.snapshot).messages] == ["b"]


def test_a_made_id_never_takes_an_id_the_same_update_names() -> None:
    merged = add_messages(
        Vector(), [Message("user", "first"), Message("user", "second", id="msg-0")]
    )
    assert [m.content for m in merged] == ["first", "second"]
    assert len({m.id for m in merged}) == 2


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"role": "user", "content": "x", "id": 5}, "id must be a string"),
        ({"role": "tool", "content": "x", "tool_call_id": 7}, "tool_call_id must be a string"),
        ({"role": "tool", "content": "x", "is_error": "no"}, "is_error must be True or False"),
        ({"role": "assistant", "content": "", "tool_calls": ["call"]}, "tool_calls"),
        (
            {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "function": 3}]},
            "tool_calls",
        ),
        (("bot", "hi"), "role must be one of"),
    ],
)
def test_message_fields_of_the_wrong_type_are_refused_at_the_write(bad: Any, reason: str) -> None:
    with pytest.raises(StateValidationError, match=reason):
        as_message(bad, "input")
    with pytest.raises(StateValidationError, match=reason):
        StateSchema(AgentState).command(messages=[bad] if isinstance(bad, dict) else bad)


async def test_one_message_given_alone_is_one_message() -> None:
    agent = Agent([], ScriptedModel([]))
    for alone in ({"role": "user", "content": "hi"}, Message("user", "hi"), ("user", "hi")):
        result = await agent.run(f"t{len(str(alone))}", alone)
        assert [(m.role, m.content) for m in result.messages[:1]] == [("user", "hi")]
        assert result.messages[1].role == "assistant"
    with pytest.raises(StateValidationError, match="agent input"):
        await agent.run("t", 5)  # type: ignore[arg-type]
    schema = StateSchema(AgentState)
    ((_, update),) = schema.command(messages=Overwrite(("user", "hi"))).patch.ops
    assert [m.content for m in update.value] == ["hi"]


@pydantic.dataclasses.dataclass
class Order:
    quantity: int = Field(default=1, gt=0)
    notes: Annotated[list[str], operator.add] = Field(default_factory=list)


async def test_a_pydantic_dataclass_keeps_its_field_defaults_and_constraints() -> None:
    schema = StateSchema(Order)
    run = await run_of(schema.plugin)
    assert schema.view(run.snapshot) == Order()
    with pytest.raises(StateValidationError, match="greater than 0"):
        schema.command(quantity=0)
    await run.submit(schema.command(quantity=2, notes=["gift"]))
    assert schema.view(run.snapshot) == Order(quantity=2, notes=["gift"])


class Everything(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    messages: Annotated[list[Message], add_messages] = []
    title: str = ""

    @field_validator("*")
    @classmethod
    def no_secrets(cls, value: Any) -> Any:
        if value == "secret":
            raise ValueError("no secrets")
        return value


def test_a_validator_of_every_field_skips_a_history_so_appends_stay_cheap() -> None:
    schema = StateSchema(Everything)
    assert not schema.keys["messages"].__statekernel_key__.has_validate
    with pytest.raises(StateValidationError, match="no secrets"):
        schema.command(title="secret")


class Capped(BaseModel):
    LIMIT: ClassVar[int] = 3
    n: int = 0

    @field_validator("n")
    @classmethod
    def at_most_limit(cls, value: int) -> int:
        if value > cls.LIMIT:
            raise ValueError(f"n must be at most {cls.LIMIT}")
        return value


class Lookup(BaseModel):
    colour: str = "red"

    @field_validator("colour")
    @classmethod
    def known(cls, value: str) -> str:
        return {"red": "red", "blue": "blue"}[value]  # a KeyError for anything else


async def test_validators_reading_the_class_or_refusing_with_any_error_refuse_at_the_write() -> (
    None
):
    capped, lookup = StateSchema(Capped), StateSchema(Lookup)
    with pytest.raises(StateValidationError, match="at most 3"):
        capped.command(n=4)
    assert capped.command(n=3).patch.ops
    with pytest.raises(StateValidationError, match="KeyError"):
        lookup.command(colour="green")
    run = await run_of(lookup.plugin)
    await run.submit(StateCommand().update(lookup.keys["colour"], "blue"))
    with pytest.raises(CommitRejected, match="KeyError"):
        await run.submit(StateCommand().update(lookup.keys["colour"], "green"))


class NeedsAnother(BaseModel):
    n: int = 0

    @field_validator("n")
    @classmethod
    def against_other(cls, value: int, info: ValidationInfo) -> int:
        if value and info.data["other"] < value:  # `other` is not a field: a KeyError
            raise ValueError("too big")
        return value


def test_a_view_the_model_refuses_with_any_error_is_a_state_error() -> None:
    schema = StateSchema(NeedsAnother)  # its validator takes info: left to view()
    written = snapshot_of(schema.plugin, {schema.keys["n"]: 2})
    with pytest.raises(StateError, match="KeyError"):
        schema.view(written)


class Rows(BaseModel):
    model_config = ConfigDict(strict=True)

    rows: Annotated[list[dict[str, int]], operator.add, Field(max_length=2)] = []


async def test_a_constrained_history_of_mutable_items_is_checked_as_its_list() -> None:
    schema = StateSchema(Rows)
    run = await run_of(schema.plugin)
    await run.submit(schema.command(rows=[{"a": 1}]))
    await run.submit(schema.command(rows=[{"b": 2}]))
    with pytest.raises(CommitRejected, match="at most 2 items"):
        await run.submit(schema.command(rows=[{"c": 3}]))
    assert schema.view(run.snapshot).rows == [{"a": 1}, {"b": 2}]


@pydantic.dataclasses.dataclass
class Labelled:
    name: str = Field(default="x", alias="label")
    hidden: int = dataclasses.field(default=0, init=False)


async def test_a_pydantic_dataclass_skips_fields_init_does_not_take_and_views_by_alias() -> None:
    schema = StateSchema(Labelled)
    assert list(schema.fields) == ["name"]
    run = await run_of(schema.plugin)
    await run.submit(schema.command(name="y"))
    assert schema.view(run.snapshot).name == "y"
