"""The phases of a run, in the order the loop visits them."""

from __future__ import annotations

import enum

from .._errors import StateError


class Phase(enum.StrEnum):
    """One boundary of the agent loop where hooks run and their commands commit.

    A string enum whose values are the names, so `Phase.STEP_START == "STEP_START"` and
    `str(phase)` is the name: error attributes and logs carry the phase, and compare equal
    to either spelling. Errors carry the member (`HookFailed.phase is Phase.STEP_START`).

    The boundaries of a run, in order: `RUN_START`; then per step `STEP_START`,
    `BEFORE_INFERENCE`, `AFTER_INFERENCE`; per tool call `TOOL_GATE`,
    `BEFORE_TOOL_EXECUTE`, `AFTER_TOOL_EXECUTE`; then `STEP_END`; and finally `RUN_END`.
    See [concepts: the phase loop](concepts.md#the-phase-loop).
    """

    RUN_START = "RUN_START"
    """Once, when the run starts."""
    STEP_START = "STEP_START"
    """At the start of each step."""
    BEFORE_INFERENCE = "BEFORE_INFERENCE"
    """Before each model call."""
    AFTER_INFERENCE = "AFTER_INFERENCE"
    """After each model call; `ctx.response` holds the model's answer."""
    TOOL_GATE = "TOOL_GATE"
    """For each tool call, before it runs: where the tool gates decide; `ctx.tool_call` is
    set."""
    BEFORE_TOOL_EXECUTE = "BEFORE_TOOL_EXECUTE"
    """For each tool call, before the tool runs; `ctx.tool_call` is set."""
    AFTER_TOOL_EXECUTE = "AFTER_TOOL_EXECUTE"
    """For each tool call, once it ended; `ctx.tool_result` is set."""
    STEP_END = "STEP_END"
    """At the end of each step."""
    RUN_END = "RUN_END"
    """Once, when the run ends."""


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
