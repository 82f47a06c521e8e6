"""Spans after the OpenTelemetry GenAI conventions, where they apply, and statekernel's own.

A run is one `invoke_agent {agent}` span (`gen_ai.operation.name` "invoke_agent"), the
parent of a span per phase (`phase {PHASE}`), per model call (`chat {model}`, operation
"chat", `gen_ai.request.model`) and per tool call (`execute_tool {tool}`, operation
"execute_tool", `gen_ai.tool.name`, `gen_ai.tool.call.id`). statekernel's attributes say
what the conventions cannot: the thread and revision, the plugins whose hooks ran and
those re-run after a conflict, failed effects, the tool gates' decision with its reason or
ticket. The GenAI conventions are still in development upstream; these names follow them as of
the 1.3x semantic conventions.

A team's letter carries the W3C `traceparent` of the span it was sent under (the sending
run's, or the application's span around `team.send`), and the run that delivers it links its
span to that context: the traces of sender and recipient stay apart, and each names the other.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .._engine.phase_engine import PhaseReport
from .._values.run_events import GateRun
from .._values.tools import ToolResult

__all__ = ["MAX_LETTER_LINKS", "Tracing", "current_traceparent", "tracing"]

MAX_LETTER_LINKS = 128
"""How many senders' spans one run's span links to at most: the SDK's default limit of links
per span (`OTEL_SPAN_LINK_COUNT_LIMIT`), so that a run delivering thousands of letters keeps
a span of bounded size. The links left out are counted on the span instead."""


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


def current_traceparent() -> str | None:
    """The W3C `traceparent` of the application's current span, when one is active and valid;
    else None. Only an application that imported OpenTelemetry can have a current span, so
    without that import nothing is imported here and nothing is asked."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    return _traceparent(trace.get_current_span().get_span_context())


def _traceparent(context: Any) -> str | None:
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


class Tracing:
    """Starts and ends statekernel's spans on the application's tracer provider. The tracer
    is looked up once: before the application sets its provider it is OpenTelemetry's
    proxy, which follows the provider once set."""

    def __init__(self, trace: Any) -> None:
        self._trace = trace
        self._tracer = trace.get_tracer("statekernel")
        self._propagator: Any = None  # W3C trace context's parser, once a letter needs it

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

    def traceparent(self, span: Any) -> str | None:
        """`span`'s context as a W3C `traceparent` (None when it has no valid one: no tracer
        provider was set)."""
        return _traceparent(span.get_span_context())

    def link_letters(self, span: Any, senders: Iterable[tuple[str, str]], seen: set[str]) -> None:
        """Link `span` (a delivering run's) to each `(traceparent, sender)` whose context is
        not in `seen`, the contexts the run met already, and add it there. Past
        `MAX_LETTER_LINKS` contexts a run links no more and counts the rest on its span
        (`statekernel.letter.links_dropped`). A context that does not parse is skipped: it
        came out of stored data, and a link is not worth failing a delivery for. An API
        older than 1.23 cannot link a started span: then nothing is linked."""
        add_link = getattr(span, "add_link", None)
        if add_link is None:
            return
        before = len(seen)
        for traceparent, sender in senders:
            if traceparent in seen:
                continue
            seen.add(traceparent)
            if len(seen) > MAX_LETTER_LINKS:
                continue
            context = self._span_context(traceparent)
            if context is not None:
                add_link(context, {"statekernel.letter.sender": sender})
        if len(seen) > MAX_LETTER_LINKS and len(seen) > before:
            span.set_attribute("statekernel.letter.links_dropped", len(seen) - MAX_LETTER_LINKS)

    def _span_context(self, traceparent: str) -> Any:
        """The remote span context a `traceparent` names, or None if it names none."""
        if self._propagator is None:
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )

            self._propagator = TraceContextTextMapPropagator()
        context = self._propagator.extract({"traceparent": traceparent})
        found = self._trace.get_current_span(context).get_span_context()
        return found if found.is_valid else None

    def end_run(self, span: Any, revision: int, outcome: str) -> None:
        span.set_attribute("statekernel.revision", revision)
        span.set_attribute("statekernel.outcome", outcome)
        span.end()

    def fail(self, span: Any, error: BaseException) -> None:
        """Mark `span` failed by `error`, as the conventions say (`error.type`)."""
        span.set_attribute("error.type", type(error).__qualname__)
        span.record_exception(error)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))
