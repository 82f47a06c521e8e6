"""The phases of a run, in the order the loop visits them."""

from __future__ import annotations

import enum

from .._errors import StateError


class Phase(enum.StrEnum):
    """One boundary of the agent loop where hooks run and their commands commit.

    A string enum whose values are the names, so `Phase.STEP_START == "STEP_START"`: error
    attributes and logs carry the phase, and compare equal to either spelling.

    A run is RUN_START, then per step STEP_START, BEFORE_INFERENCE, AFTER_INFERENCE, per
    tool call TOOL_GATE, BEFORE_TOOL_EXECUTE, AFTER_TOOL_EXECUTE, then STEP_END; finally
    RUN_END.
    """

    RUN_START = "RUN_START"
    STEP_START = "STEP_START"
    BEFORE_INFERENCE = "BEFORE_INFERENCE"
    AFTER_INFERENCE = "AFTER_INFERENCE"
    TOOL_GATE = "TOOL_GATE"
    BEFORE_TOOL_EXECUTE = "BEFORE_TOOL_EXECUTE"
    AFTER_TOOL_EXECUTE = "AFTER_TOOL_EXECUTE"
    STEP_END = "STEP_END"
    RUN_END = "RUN_END"


def phase_of(value: object) -> Phase:
    """`value` as a Phase: a member, or its name in any case (`"step_start"`).

    Anything else is a `StateError` listing the phases, rather than a bare `KeyError` or a
    report that breaks later.
    """
    if isinstance(value, Phase):
        return value
    if isinstance(value, str):
        found = Phase.__members__.get(value.upper())
        if found is not None:
            return found
    names = ", ".join(Phase.__members__)
    raise StateError(
        f"{value!r} is not a phase; use a statekernel.Phase member or one of its names: {names}."
    )
