"""What a declared type means at run time, as a user of a key sees it.

Which updates a key accepts, which values a snapshot shares (returned as they are, the fast
path) and which it copies (so that mutating what you read changes nothing), and what a key
holds before anything was written. Every key is declared inside its test, as users declare
them: the kernel works all of this out when the key class is created.

The record types live at module level so that their (string) annotations resolve.
"""

from __future__ import annotations

import copy
import dataclasses
import types
from collections.abc import Callable
from typing import (
    Annotated,
    Any,
    Final,
    Generic,
    Literal,
    NamedTuple,
    TypedDict,
    TypeVar,
    TypeVarTuple,
)

import attrs
import msgspec
import pydantic
import pydantic.v1
import pytest

from statekernel import InvalidDeclaration, StateCommand, StateKey, StateValidationError, Vector
from statekernel.lowlevel import KeyRegistry, LiveState

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@dataclasses.dataclass(frozen=True)
class Point:
    x: int = 0
    y: int = 0


@dataclasses.dataclass
class MutablePoint:
    x: int = 0


@dataclasses.dataclass(frozen=True)
class Tagged:
    """Frozen outside, a mutable list inside."""

    tags: list[str]


@dataclasses.dataclass(frozen=True)
class Pinned:
    """`Final` says the field is never rebound, not that the list in it never changes."""

    items: Final[list[int]]


@dataclasses.dataclass(frozen=True)
class Dangling:
    """An annotation that never resolves: the field's type is unknown."""

    ref: Undefined  # type: ignore[name-defined]  # noqa: F821


@dataclasses.dataclass(frozen=True)
class Chain:
    """A recursive frozen record."""

    value: int
    rest: Chain | None = None


@dataclasses.dataclass(frozen=True)
class Box(Generic[T]):
    item: T


@dataclasses.dataclass(frozen=True)
class Node(Generic[T]):
    """A recursive generic frozen record."""

    value: T
    rest: Node[T] | None = None


@dataclasses.dataclass(frozen=True)
class Several(Generic[*Ts]):
    """A variadic generic record: `Several[int, list[int]]` holds an int and a list."""

    items: tuple[*Ts]


@dataclasses.dataclass(frozen=True)
class Labelled:
    """Subscriptable the way builtin containers are (`Labelled[int]`), without Generic."""

    label: str
    __class_getitem__ = classmethod(types.GenericAlias)


@attrs.frozen
class AttrsPoint:
    x: int


@attrs.define
class AttrsMutable:
    x: int


@attrs.frozen
class AttrsUntyped:
    x: Any = attrs.field()


@attrs.frozen
class AttrsBare:
    """Fields declared with `attrs.field()` alone: their types are unknown."""

    x = attrs.field()


class PydanticPoint(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True)
    x: int


class PydanticMutable(pydantic.BaseModel):
    x: int


class PydanticV1(pydantic.v1.BaseModel):
    """A pydantic v1 model: not one the kernel knows how to inspect."""

    items: list[int]

    class Config:
        frozen = True


class NamedPoint(NamedTuple):
    x: int
    y: int


class NamedRow(NamedTuple):
    items: list[int]


class Row(tuple[Any, ...]):
    """A plain tuple subclass (not a NamedTuple): what it holds is unknown."""


class StructPoint(msgspec.Struct, frozen=True):
    x: int


class Settings(TypedDict):
    theme: str


def _declare(value_type: Any, initial: Any) -> type[StateKey[Any, Any]]:
    class Declared(StateKey[value_type, value_type]):  # type: ignore[valid-type]
        key = "t.declared"
        default = initial

    return Declared


def _state(*keys: type[StateKey[Any, Any]]) -> LiveState:
    return LiveState(KeyRegistry.of(*keys))


@pytest.mark.parametrize(
    ("value_type", "value"),
    [
        pytest.param(Point, Point(1, 2), id="frozen dataclass"),
        pytest.param(AttrsPoint, AttrsPoint(1), id="frozen attrs"),
        pytest.param(PydanticPoint, PydanticPoint(x=1), id="frozen pydantic"),
        pytest.param(StructPoint, StructPoint(1), id="frozen msgspec"),
        pytest.param(NamedPoint, NamedPoint(1, 2), id="NamedTuple"),
        pytest.param(Annotated[Point, "meta"], Point(1), id="Annotated"),
        pytest.param(Point | None, Point(1), id="optional"),
        pytest.param(Point | AttrsPoint, AttrsPoint(1), id="union"),
        pytest.param(tuple[Literal["a", "b"], Point], ("a", Point()), id="Literal in tuple"),
        pytest.param(tuple[Point, ...], (Point(), Point(1)), id="tuple"),
        pytest.param(frozenset[Point], frozenset({Point(1)}), id="frozenset"),
        pytest.param(Vector[Point], Vector([Point(1)]), id="Vector"),
        pytest.param(Box[Point], Box(Point(1)), id="generic record"),
        pytest.param(Labelled[int], Labelled("a"), id="subscriptable record"),
        pytest.param(Chain, Chain(1, Chain(2)), id="recursive record"),
        pytest.param(Node[int], Node(1, Node(2)), id="recursive generic record"),
    ],
)
def test_values_of_immutable_types_are_shared_not_copied(value_type: Any, value: Any) -> None:
    key = _declare(value_type, value)
    state = _state(key)
    assert state.snapshot.get(key) is value  # the declared default, shared
    state.submit(StateCommand().update(key, value))
    assert state.snapshot.get(key) is value
    assert state.snapshot.to_dict()["t.declared"] is value


def _append(items: list[Any]) -> None:
    items.append(99)


def _set_x(record: Any) -> None:
    record.x = 99


@pytest.mark.parametrize(
    ("value_type", "value", "mutate"),
    [
        pytest.param(list[int] | None, [1], _append, id="optional list"),
        pytest.param(Annotated[list[int], "meta"], [1], _append, id="Annotated list"),
        pytest.param(Vector[list[int]], Vector([[1]]), lambda v: _append(v[0]), id="Vector"),
        pytest.param(MutablePoint, MutablePoint(1), _set_x, id="dataclass"),
        pytest.param(Tagged, Tagged(["a"]), lambda v: _append(v.tags), id="list in dataclass"),
        pytest.param(Pinned, Pinned([1]), lambda v: _append(v.items), id="Final list field"),
        pytest.param(Dangling, Dangling([1]), lambda v: _append(v.ref), id="unresolved field"),
        pytest.param(AttrsMutable, AttrsMutable(1), _set_x, id="attrs"),
        pytest.param(AttrsUntyped, AttrsUntyped([1]), lambda v: _append(v.x), id="Any in attrs"),
        pytest.param(AttrsBare, AttrsBare([1]), lambda v: _append(v.x), id="untyped attrs"),
        pytest.param(PydanticMutable, PydanticMutable(x=1), _set_x, id="pydantic"),
        pytest.param(PydanticV1, PydanticV1(items=[1]), lambda v: _append(v.items), id="v1"),
        pytest.param(NamedRow, NamedRow([1]), lambda v: _append(v.items), id="list in tuple"),
        pytest.param(Row, Row([[1]]), lambda v: _append(v[0]), id="tuple subclass"),
        pytest.param(tuple, ([1],), lambda v: _append(v[0]), id="bare tuple"),
        pytest.param(Box, Box([1]), lambda v: _append(v.item), id="unbound generic record"),
        pytest.param(Box[list[int]], Box([1]), lambda v: _append(v.item), id="generic record"),
        pytest.param(Any, [1], _append, id="Any"),
        pytest.param(object, [1], _append, id="object"),
    ],
)
def test_values_of_mutable_types_are_copied(
    value_type: Any, value: Any, mutate: Callable[[Any], None]
) -> None:
    key = _declare(value_type, value)
    state = _state(key)
    state.submit(StateCommand().update(key, value))
    expected = copy.deepcopy(value)
    read = state.snapshot.get(key)
    assert read == value and read is not value
    mutate(read)
    mutate(state.snapshot.to_dict()["t.declared"])
    assert state.snapshot.get(key) == expected
    assert state.snapshot.to_dict() == {"t.declared": expected}


def test_a_variadic_generic_record_is_copied_whatever_its_arguments() -> None:
    class Pairs(StateKey[Several[int, list[int]], Several[int, list[int]]]):
        key = "t.pairs"
        default = Several((0, []))

    state = _state(Pairs)
    state.submit(StateCommand().update(Pairs, Several((1, [2]))))
    state.snapshot.get(Pairs).items[1].append(99)
    assert state.snapshot.get(Pairs) == Several((1, [2]))


def test_to_dict_copies_nested_mutable_values_like_get() -> None:
    class Lists(StateKey[dict[str, list[int]], dict[str, list[int]]]):
        key = "t.lists"

    state = _state(Lists)
    state.submit(StateCommand().update(Lists, {"a": [1]}))
    shown = state.snapshot.to_dict()
    shown["t.lists"]["a"].append(99)
    assert state.snapshot.to_dict() == {"t.lists": {"a": [1]}}
    assert state.snapshot.get(Lists) == {"a": [1]}


def test_zero_values_are_the_default_and_shared_only_when_immutable() -> None:
    class Origin(StateKey[Point, Point]):
        key = "t.origin"

    class Cursor(StateKey[MutablePoint, MutablePoint]):
        key = "t.cursor"

    class Marks(StateKey[Annotated[list[int], "marks"], int]):
        key = "t.marks"

    snapshot = _state(Origin, Cursor, Marks).snapshot
    assert snapshot.get(Origin) == Point() and snapshot.get(Origin) is snapshot.get(Origin)
    cursor = snapshot.get(Cursor)
    assert cursor == MutablePoint() and cursor is not snapshot.get(Cursor)
    cursor.x = 5
    snapshot.get(Marks).append(1)
    assert snapshot.get(Cursor) == MutablePoint() and snapshot.get(Marks) == []


def test_a_typeddict_has_no_zero_value_and_needs_a_default() -> None:
    with pytest.raises(InvalidDeclaration) as caught:

        class Prefs(StateKey[Settings, Settings]):
            key = "t.prefs"

    assert caught.value.owner.endswith("Prefs")
    message = str(caught.value)
    assert "value type Settings has no zero value" in message
    assert "default = ..." in message and "default_factory" in message

    class Defaulted(StateKey[Settings, Settings]):
        key = "t.defaulted"
        default_factory = lambda: {"theme": "dark"}  # noqa: E731

    assert _state(Defaulted).snapshot.get(Defaulted) == {"theme": "dark"}


@pytest.mark.parametrize(
    ("update_type", "good", "bad", "expected"),
    [
        pytest.param(Annotated[int, "count"], 3, "3", "int", id="Annotated"),
        pytest.param(Point | None, None, (0, 0), "Point | None", id="optional"),
        pytest.param(Literal["a", "b"], "a", 1, "Literal['a', 'b']", id="Literal"),
        pytest.param(Box[int], Box(1), 1, "Box[int]", id="generic record"),
    ],
)
def test_a_wrong_update_names_the_key_the_declared_type_and_what_was_given(
    update_type: Any, good: Any, bad: Any, expected: str
) -> None:
    class Target(StateKey[Any, update_type]):  # type: ignore[valid-type]
        key = "t.target"
        default = None

    state = _state(Target)
    state.submit(StateCommand().update(Target, good))
    assert state.snapshot.get(Target) == good
    with pytest.raises(StateValidationError) as caught:
        StateCommand().update(Target, bad)
    assert caught.value.key == "t.target"
    assert expected in caught.value.expected
    assert caught.value.given == type(bad).__name__
    assert "'t.target'" in str(caught.value) and repr(bad) in str(caught.value)
