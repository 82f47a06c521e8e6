"""Declaring keys: defaults, types and mistakes caught when the class is created."""

from __future__ import annotations

import enum
import types
from typing import Any, Generic, Literal, TypeVar

import msgspec
import pytest
from sample_keys import Counter, Items, Log
from samples import Keys

from statekernel import (
    EffectSpec,
    InvalidDeclaration,
    KeyScope,
    MergeStrategy,
    Phase,
    ProfileKey,
    ScheduledActionSpec,
    StateKey,
    StateUpdater,
    Vector,
)
from statekernel.lowlevel import key_info


def test_class_attributes_are_the_declaration() -> None:
    assert Counter.key == "test.counter"
    assert Counter.merge is MergeStrategy.COMMUTATIVE
    assert Counter.scope is KeyScope.RUN
    info = key_info(Counter)
    assert info.value_type is int and info.update_type is int
    assert info.make_default() == 0


def test_defaults_come_from_the_origin_class() -> None:
    assert key_info(Log).make_default() == Vector()
    assert key_info(Items).make_default() == []


def test_mutable_default_is_fresh_each_time() -> None:
    first = key_info(Items).make_default()
    first.append(1)
    assert key_info(Items).make_default() == []


def test_declared_default_and_factory() -> None:
    class Mode(StateKey[str, str]):
        key = "t.mode"
        default = "draft"

    class Tags(StateKey[list[str], str]):
        key = "t.tags"
        default_factory = lambda: ["seed"]  # noqa: E731

    assert key_info(Mode).make_default() == "draft"
    assert key_info(Tags).make_default() == ["seed"]


@pytest.mark.parametrize(
    "value_type",
    [int | None, Literal["a", "b"], enum.Enum("Color", "RED GREEN")],
    ids=["optional", "literal", "enum"],
)
def test_types_without_zero_value_need_a_default(value_type: Any) -> None:
    with pytest.raises(InvalidDeclaration, match=r"no zero value.*default"):

        class Broken(StateKey[value_type, value_type]):  # type: ignore[valid-type]
            key = "t.broken"


def test_optional_with_declared_default_is_fine() -> None:
    class Maybe(StateKey[int | None, int | None]):
        key = "t.maybe"
        default = None

    assert key_info(Maybe).make_default() is None


def test_key_must_be_a_nonempty_string() -> None:
    with pytest.raises(InvalidDeclaration, match="non-empty string"):

        class Bad(StateKey[int, int]):
            key = ""


@pytest.mark.parametrize("name", ["k\ud800", "k\x00"], ids=["lone surrogate", "NUL"])
def test_key_strings_and_plugin_ids_no_store_can_keep_are_refused_when_declared(
    name: str,
) -> None:
    """They are journaled and stored as a thread id is, and checked the same way: when the
    class is created (a plugin's id, when a kernel is made of it), not at the first save."""
    from statekernel import Kernel, Plugin

    problem = "must be a name every store can keep"
    for base in (StateKey[int, int], ProfileKey[int], ScheduledActionSpec[int], EffectSpec[int]):
        with pytest.raises(InvalidDeclaration, match=problem):
            types.new_class("Named", (base,), exec_body=lambda ns: ns.update(key=name))

    class Named(Plugin):
        id = name

        def register(self, r: Any) -> None:
            pass

    with pytest.raises(InvalidDeclaration, match=f"`id` {problem}"):
        Kernel([Named()])


def test_merge_and_scope_must_be_enums() -> None:
    with pytest.raises(InvalidDeclaration, match="MergeStrategy"):

        class BadMerge(StateKey[int, int]):
            key = "t.bad_merge"
            merge = "commutative"  # type: ignore[assignment]

    with pytest.raises(InvalidDeclaration, match="KeyScope"):

        class BadScope(StateKey[int, int]):
            key = "t.bad_scope"
            scope = "thread"  # type: ignore[assignment]


def test_apply_must_take_value_and_update() -> None:
    with pytest.raises(InvalidDeclaration, match="apply"):

        class BadApply(StateKey[int, int]):
            key = "t.bad_apply"

            def apply(self, value: int, update: int) -> int:  # type: ignore[override]
                return value


def test_generic_intermediate_keys_resolve_in_concrete_subclasses() -> None:
    from typing import Generic, TypeVar

    T = TypeVar("T")

    class Latest(StateKey[tuple[T, ...], T], Generic[T]):
        @staticmethod
        def apply(value: tuple[T, ...], update: T) -> tuple[T, ...]:
            return (*value, update)

    class Names(Latest[str]):
        key = "t.names"

    info = key_info(Names)
    assert info.value_type == tuple[str, ...]
    assert info.update_classes == (str,)
    assert not info.copy_values  # a tuple of str is immutable: shared, never copied
    with pytest.raises(InvalidDeclaration, match="abstract"):
        key_info(Latest)


def test_keys_are_tokens_not_instances() -> None:
    with pytest.raises(TypeError, match="token"):
        Counter()


def test_immutability_is_decided_from_the_declared_type() -> None:
    class Frozen(msgspec.Struct, frozen=True):
        items: tuple[int, ...]

    class Loose(msgspec.Struct, frozen=True):
        items: list[int]

    class A(StateKey[Frozen, Frozen]):
        key = "t.a"
        default = Frozen(())

    class B(StateKey[Loose, Loose]):
        key = "t.b"
        default_factory = lambda: Loose([])  # noqa: E731

    assert not key_info(A).copy_values
    assert key_info(B).copy_values  # frozen outside, a mutable list inside
    assert not key_info(Log).copy_values
    assert key_info(Items).copy_values


E = TypeVar("E")


class Move(msgspec.Struct, Generic[E], frozen=True):
    """A generic frozen record, as plugins declare transitions."""

    source: E
    target: E


class Step(enum.Enum):
    ONE = 1


def test_parameterised_frozen_records_are_immutable_when_their_arguments_are() -> None:
    class Moves(StateKey[tuple[Move[Step], ...], Move[Step]]):
        key = "t.moves"

    class LooseMoves(StateKey[tuple[Move[list[int]], ...], Move[list[int]]]):
        key = "t.loose_moves"

    assert not key_info(Moves).copy_values and not key_info(Moves).copy_updates
    assert key_info(LooseMoves).copy_values


def test_the_kernels_reserved_prefix_and_plugin_id_are_refused() -> None:
    from statekernel import Kernel, Plugin

    class Sneaky(StateKey[int, int]):
        key = "statekernel.mine"

    class Impostor(Plugin):
        id = "statekernel"

    from statekernel import Agent, ScriptedModel

    with pytest.raises(InvalidDeclaration, match="reserved"):
        Kernel([Keys(Sneaky, id="uses")])
    with pytest.raises(InvalidDeclaration, match="reserves"):
        Agent([Impostor()], ScriptedModel())


def test_every_declared_token_refuses_instantiation_with_its_use() -> None:
    class Notes(ProfileKey[str]):
        key = "t.notes_token"

    class Retry(ScheduledActionSpec[int]):
        key = "t.retry_token"
        phase = Phase.STEP_END

    class Audit(EffectSpec[str]):
        key = "t.audit_token"

    class Count(StateKey[int, int]):
        key = "t.count_token"

    uses = {
        Count: r"snapshot\.get\(Count\)",
        Notes: r"ctx\.profile\.read\(Notes, scope\)",
        Retry: r"cmd\.schedule\(Retry, payload\)",
        Audit: r"cmd\.emit\(Audit, payload\)",
    }
    for token, use in uses.items():
        with pytest.raises(InvalidDeclaration, match=use) as caught:
            token()
        assert isinstance(caught.value, TypeError) and "do not instantiate" in str(caught.value)
    with pytest.raises(InvalidDeclaration, match="is a registry"):
        StateUpdater()
