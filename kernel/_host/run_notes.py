"""A run's notes for the journal: the run events that say what it did beyond its commits.

Each phase (`PhaseRun`), each tool gate decision (`GateRun`) and how each tool call ended
(`ToolRun`) is noted into the run's `RunJournal` as it happens, dated, with the run's id,
step and revision; the next save journals them beside the commits. One `PhaseRun` is built
per phase, on the hot path.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from .._durable.journal import RunJournal
from .._engine.commit import LiveState
from .._engine.phase_engine import PhaseReport
from .._errors import cause_text
from .._values.codec import as_json_data
from .._values.phases import Phase
from .._values.run_events import GateRun, PhaseRun, ToolRun
from .._values.toolgate import Block, GateDecision, Suspend
from .._values.tools import ToolCall, ToolResult

__all__ = ["RunNotes"]


class RunNotes:
    """Builds a run's events and notes them into its journal.

    They are noted under the journal's run id: the run's, renamed when a save rebased the
    run under a new id (`RunJournal.rename`). Step and revision are the live state's as each
    is noted."""

    __slots__ = ("_journal", "_state")

    def __init__(self, journal: RunJournal, state: LiveState) -> None:
        self._journal = journal
        self._state = state

    @property
    def run_id(self) -> str:
        run_id = self._journal.run_id
        assert run_id is not None  # a run's journal always names its run
        return run_id

    def phase(self, report: PhaseReport) -> None:
        """What a phase did (`PhaseRun`)."""
        assert report.phase is not None  # a run's phases always say which they are
        self._journal.note(
            PhaseRun(
                self.run_id,
                self._state.step,
                report.phase,
                report.revision,
                report.commits,
                report.round_hooks,
                report.reruns,
                report.effects,
                report.actions,
                time.time(),
            )
        )

    def failed_phase(self, phase: Phase, error: Exception) -> None:
        """A phase that failed (`PhaseRun` with its error and nothing else)."""
        state, at = self._state, time.time()
        self._journal.note(
            PhaseRun(self.run_id, state.step, phase, state.revision, at=at, error=cause_text(error))
        )

    def gate(self, call: ToolCall, decision: GateDecision | None, plugin: str | None) -> GateRun:
        """The tool gates' `decision` on `call` (None: allowed), made by `plugin`'s gate
        (`GateRun`); returns the event. The decision's kind is named as the event names it
        (a subclass ranks as its kind), and a suspension's ticket is kept as plain JSON data
        (a pydantic model as its dump), so that it reads back from a store as it was noted.
        (The engine refused tickets that do not encode, so the repr fallback `as_json_data`
        asks for stays unused.)"""
        kind: Literal["allow", "block", "suspend", "set_result"]
        ticket: Any = None
        if decision is None:
            kind = "allow"
        elif isinstance(decision, Block):
            kind = "block"
        elif isinstance(decision, Suspend):
            kind = "suspend"
            if decision.ticket is not None:
                ticket = as_json_data(decision.ticket, repr(decision.ticket))
        else:
            kind = "set_result"
        state = self._state
        gate = GateRun(
            self.run_id,
            state.step,
            call.id,
            call.name,
            kind,
            state.revision,
            plugin,
            getattr(decision, "reason", None),
            time.time(),
            ticket,
        )
        self._journal.note(gate)
        return gate

    def tool(self, result: ToolResult) -> None:
        """How a tool call ended (`ToolRun`)."""
        call, state = result.call, self._state
        self._journal.note(
            ToolRun(
                self.run_id,
                state.step,
                call.id,
                call.name,
                result.status.value,
                state.revision,
                result.error,
                time.time(),
            )
        )
