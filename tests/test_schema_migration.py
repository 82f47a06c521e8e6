"""State declared for LangGraph, EvoFabric or Jianmu, brought over unchanged (§5.3).

Each case here is one a migrating user hit: a spelling their framework accepts, a
behaviour their framework documents. The first six failed before the schema layer was
fixed for them.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, NotRequired, TypedDict

import attrs
import pytest
from pydantic import BaseModel, ConfigDict, Field, field_validator

from statekernel import (
    CommitRejected,
    Kernel,
    KeyScope,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    StateCommand,
    StateSchema,
    StateValidationError,
)


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


class NodePlugin(Plugin):
    id = "node"

    def __init__(self, hook: Any) -> None:
        self.hook = hook

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_phase_hook(Phase.STEP_START, self.hook)


async def test_an_object_with_async_call_is_awaited_as_a_node() -> None:
    schema = StateSchema(Counter)
    run = await run_of(schema.plugin, NodePlugin(schema.hook(AsyncNode())))
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

    run = await run_of(schema.plugin, NodePlugin(write))
    with pytest.raises(StateValidationError, match="Resources.lock"):
        await run.run_phase(Phase.STEP_START)
    assert run.snapshot.revision == 0
