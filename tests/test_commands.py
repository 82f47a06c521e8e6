"""Building commands: no kernel needed, wrong types fail where they are written."""

from __future__ import annotations

import msgspec
import pytest
from sample_keys import Counter, Log, Msg, Settings, Title

from statekernel import (
    EffectSpec,
    InvalidDeclaration,
    MutationBatch,
    Phase,
    ScheduledActionSpec,
    StateCommand,
    StateError,
    StateKey,
    StateValidationError,
)
from statekernel.lowlevel import CLEAR


class Audit(EffectSpec[str]):
    key = "t.audit"


class Inject(ScheduledActionSpec[Msg]):
    key = "t.inject"
    phase = Phase.BEFORE_INFERENCE


def test_batch_keeps_ops_in_order_and_touched_keys_once() -> None:
    batch = MutationBatch().update(Counter, 1).update(Title, "x").update(Counter, 2).clear(Title)
    assert batch.ops == [(Counter, 1), (Title, "x"), (Counter, 2), (Title, CLEAR)]
    assert batch.touched_keys == (Counter, Title)
    assert len(batch) == 4 and not batch.is_empty()


def test_command_delegates_to_patch_and_collects_actions_and_effects() -> None:
    msg = Msg("system", "be brief")
    cmd = StateCommand().update(Counter, 1).schedule(Inject, msg).emit(Audit, "did it")
    assert cmd.patch.ops == [(Counter, 1)]
    assert [(a.spec, a.payload) for a in cmd.scheduled_actions] == [(Inject, msg)]
    assert [(e.spec, e.payload) for e in cmd.effects] == [(Audit, "did it")]
    assert not cmd.is_empty()
    assert StateCommand().is_empty()


def test_extend_appends_everything_in_order() -> None:
    first = StateCommand().update(Counter, 1).emit(Audit, "a")
    second = StateCommand().update(Counter, 2).emit(Audit, "b")
    first.extend(second)
    assert first.patch.ops == [(Counter, 1), (Counter, 2)]
    assert [e.payload for e in first.effects] == ["a", "b"]


def test_extend_refuses_commands_built_against_different_revisions() -> None:
    with pytest.raises(StateError, match="different revisions"):
        StateCommand(base_revision=1).extend(StateCommand(base_revision=2))
    joined = StateCommand().extend(StateCommand(base_revision=3))
    assert joined.base_revision == 3


def test_wrong_update_type_names_key_expected_and_given() -> None:
    with pytest.raises(StateValidationError) as caught:
        StateCommand().update(Counter, "one")  # type: ignore[arg-type]
    message = str(caught.value)
    assert "test.counter" in message and "int" in message and "str" in message
    assert caught.value.key == "test.counter"


def test_parameterised_update_types_check_the_origin_class() -> None:
    StateCommand().update(Log, Msg("user", "hi"))
    with pytest.raises(StateValidationError, match="Msg"):
        StateCommand().update(Log, {"role": "user", "text": "hi"})  # type: ignore[arg-type]


def test_wrong_payload_type_is_refused() -> None:
    with pytest.raises(StateValidationError, match=r"t\.audit"):
        StateCommand().emit(Audit, 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ScheduledActionSpec"):
        StateCommand().schedule(Audit, "x")  # type: ignore[arg-type]


def test_non_key_is_refused_with_a_hint() -> None:
    with pytest.raises(TypeError, match="StateKey subclass"):
        StateCommand().update("test.counter", 1)  # type: ignore[call-overload]


def test_the_abstract_key_base_is_refused_with_a_hint() -> None:
    with pytest.raises(InvalidDeclaration, match="abstract state key"):
        StateCommand().update(StateKey, 1)


def test_mutable_update_is_copied_when_added() -> None:
    payload = {"a": [1]}
    cmd = StateCommand().update(Settings, payload)
    payload["a"].append(2)
    assert cmd.patch.ops[0][1] == {"a": [1]}


def test_action_spec_needs_a_phase() -> None:
    with pytest.raises(InvalidDeclaration, match="phase"):

        class NoPhase(ScheduledActionSpec[int]):
            key = "t.no_phase"


def test_specs_are_tokens_not_instances() -> None:
    with pytest.raises(TypeError, match="spec"):
        Audit()


def test_payload_of_struct_type_accepts_the_struct() -> None:
    class Note(msgspec.Struct, frozen=True):
        text: str

    class Noted(EffectSpec[Note]):
        key = "t.noted"

    note = Note("x")
    assert StateCommand().emit(Noted, note).effects[0].payload is note
