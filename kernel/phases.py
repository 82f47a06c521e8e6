"""The phases of a run, in the order the loop visits them."""

from __future__ import annotations

import enum


class Phase(enum.Enum):
    """One boundary of the agent loop where hooks run and their commands commit.

    A run is RUN_START, then per step STEP_START, BEFORE_INFERENCE, AFTER_INFERENCE, per
    tool call TOOL_GATE, BEFORE_TOOL_EXECUTE, AFTER_TOOL_EXECUTE, then STEP_END; finally
    RUN_END.
    """

    RUN_START = "run_start"
    STEP_START = "step_start"
    BEFORE_INFERENCE = "before_inference"
    AFTER_INFERENCE = "after_inference"
    TOOL_GATE = "tool_gate"
    BEFORE_TOOL_EXECUTE = "before_tool_execute"
    AFTER_TOOL_EXECUTE = "after_tool_execute"
    STEP_END = "step_end"
    RUN_END = "run_end"

    def __str__(self) -> str:
        return self.name
