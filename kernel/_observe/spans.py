"""Spans after the OpenTelemetry GenAI conventions, where they apply, and statekernel's own.

A run is one `invoke_agent {agent}` span (`gen_ai.operation.name` "invoke_agent"), the
parent of a span per phase (`phase {PHASE}`), per model call (`chat {model}`, operation
"chat", `gen_ai.request.model`) and per tool call (`execute_tool {tool}`, operation
"execute_tool", `gen_ai.tool.name`, `gen_ai.tool.call.id`). statekernel's attributes say
what the conventions cannot: the thread and revision, the plugins whose hooks ran and
those re-run after a conflict, failed effects, the tool gates' decision with its reason or
ticket. The GenAI conventions are still in development upstream; these names follow them as of
the 1.3x semantic conventions.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .._engine.phase_engine import PhaseReport
from .._values.run_events import GateRun
from .._values.tools import ToolResult

__all__ = ["Tracing", "tracing"]


def tracing() -> Tracing | None:
    """The spans' source when `opentelemetry-api` is installed (the extra
    `statekernel[otel]`), else None, having imported nothing of it."""
    try:
        found = importlib.util.find_spec("opentelemetry.trace")
    except (ImportError, ValueError):  # blocked (`sys.modules[...] = None`) or broken
        found = None
    if found is None:
        return None
    from opentelemetry import trace  # imported only when installed: not at the top

    return Tracing(trace)


class Tracing:
    """Starts and ends statekernel's spans on the application's tracer provider. The tracer
    is looked up once: before the application sets its provider it is OpenTelemetry's
    proxy, which follows the provider once set."""

    def __init__(self, trace: Any) -> None:
        self._trace = trace
        self._tracer = trace.get_tracer("statekernel")

    def start_run(self, agent: str, thread_id: str, run_id: str, revision: int) -> Any:
        return self._tracer.start_span(
            f"invoke_agent {agent}",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                "statekernel.thread_id": thread_id,
                "statekernel.run_id": run_id,
                "statekernel.revision": revision,
            },
        )

    @contextmanager
    def child(self, parent: Any, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
        """A span under `parent`, open while the block runs; an exception marks it failed.
        (Not made the current span: nothing in a phase starts spans of its own, and
        attaching a context costs every phase.)"""
        context = self._trace.set_span_in_context(parent)
        span = self._tracer.start_span(name, context=context, attributes=attributes)
        try:
            yield span
        except BaseException as error:
            self.fail(span, error)
            raise
        finally:
            span.end()

    def phase_done(self, span: Any, report: PhaseReport) -> None:
        attributes: dict[str, Any] = {
            "statekernel.revision": report.revision,
            "statekernel.commits": report.commits,
            "statekernel.hooks": report.round_hooks,
        }
        if report.reruns:
            attributes["statekernel.conflicts"] = report.conflicts
            attributes["statekernel.reruns"] = report.reruns
        if report.effects_failed:
            failed = [f"{e.key}: {e.error}" for e in report.effects if e.error is not None]
            attributes["statekernel.effects.failed"] = failed
        if report.actions:
            attributes["statekernel.actions"] = report.actions
        span.set_attributes(attributes)  # one call: each costs a lock in the SDK

    def gate_decided(self, span: Any, gate: GateRun) -> None:
        span.set_attribute("statekernel.gate.decision", gate.decision)
        if gate.plugin is not None:
            span.set_attribute("statekernel.gate.plugin", gate.plugin)
        if gate.reason is not None:
            span.set_attribute("statekernel.gate.reason", str(gate.reason))
        ticket = gate.ticket_text()
        if ticket is not None:
            span.set_attribute("statekernel.gate.ticket", ticket)

    def tool_done(self, span: Any, result: ToolResult) -> None:
        span.set_attribute("statekernel.tool.status", result.status.value)
        if result.error is not None:
            span.set_attribute("error.type", "tool_error")
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, result.error))

    def model_done(self, span: Any, response: Any) -> None:
        calls = getattr(response, "tool_calls", ())
        span.set_attribute("statekernel.tool_calls", [call.name for call in calls])
        usage = getattr(response, "usage", None)
        for field, name in (("input_tokens", "input"), ("output_tokens", "output")):
            count = getattr(usage, field, None) if usage is not None else None
            if isinstance(count, int):
                span.set_attribute(f"gen_ai.usage.{name}_tokens", count)

    def end_run(self, span: Any, revision: int, outcome: str) -> None:
        span.set_attribute("statekernel.revision", revision)
        span.set_attribute("statekernel.outcome", outcome)
        span.end()

    def fail(self, span: Any, error: BaseException) -> None:
        """Mark `span` failed by `error`, as the conventions say (`error.type`)."""
        span.set_attribute("error.type", type(error).__qualname__)
        span.record_exception(error)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))
