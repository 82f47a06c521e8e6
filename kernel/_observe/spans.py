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

Tracing is always there, on or off. A kernel holds a `Tracing` when `opentelemetry-api` is
installed, else `NO_TRACING`; each run holds what its `start_run` returned, a `RunSpans` or
`NO_RUN_SPANS` (the same calls, doing nothing), and goes back to `NO_RUN_SPANS` once it
ends. So a run never asks whether it is traced. The calls on the way of every phase, tool
gate and tool call are made once per run: `phases(engine)`, `tool_gates(gate)` and
`tool_calls(handle)` give what the run goes through, wrapped to open spans, and the no-op
hands each back as it is, so an untraced run pays nothing on those paths for tracing.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Concatenate, ParamSpec, Protocol

from .._engine.commit import LiveState
from .._engine.context import RunIdentity
from .._engine.phase_engine import PhaseReport
from .._values.phases import Phase
from .._values.run_events import GateRun
from .._values.toolgate import GateDecision
from .._values.tools import ToolCall, ToolResult

__all__ = [
    "MAX_LETTER_LINKS",
    "NO_RUN_SPANS",
    "NO_TRACING",
    "GateRunner",
    "Gated",
    "NoRunSpans",
    "NoTracing",
    "PhaseRunner",
    "RunSpans",
    "Tracing",
    "current_traceparent",
    "tracing",
]

MAX_LETTER_LINKS = 128
"""How many senders' spans one run's span links to at most: the SDK's default limit of links
per span (`OTEL_SPAN_LINK_COUNT_LIMIT`), so that a run delivering thousands of letters keeps
a span of bounded size. The links left out are counted on the span instead."""


class PhaseRunner(Protocol):
    """What runs a run's phases: its `PhaseEngine`, or that engine with a span per phase
    (`RunSpans.phases`)."""

    async def run_phase(self, phase: Phase, fields: Mapping[str, Any]) -> PhaseReport: ...


Gated = tuple[GateDecision | None, PhaseReport, GateRun]
"""A tool gate's outcome: the decision (None: the call may run), the `TOOL_GATE` phase's
report, and the `GateRun` noted of it."""

GateRunner = Callable[[ToolCall, Mapping[str, Any]], Awaitable[Gated]]
"""How a run runs its tool gates for a call, with the phase's fields (`RunSpans.tool_gates`)."""

P = ParamSpec("P")


def tracing() -> Tracing | NoTracing:
    """The spans' source when `opentelemetry-api` is installed (the extra
    `statekernel[otel]`), else `NO_TRACING`, having imported nothing of it."""
    try:
        found = importlib.util.find_spec("opentelemetry.trace")
    except (ImportError, ValueError):  # blocked (`sys.modules[...] = None`) or broken
        found = None
    if found is None:
        return NO_TRACING
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
    """Starts statekernel's spans on the application's tracer provider: one `RunSpans` per
    run. The tracer is looked up once: before the application sets its provider it is
    OpenTelemetry's proxy, which follows the provider once set."""

    enabled = True

    def __init__(self, trace: Any) -> None:
        self._trace = trace
        self._tracer = trace.get_tracer("statekernel")
        self._propagator: Any = None  # W3C trace context's parser, once a letter needs it

    def start_run(
        self, agent: str, identity: RunIdentity, state: LiveState
    ) -> RunSpans | NoRunSpans:
        """Open the `invoke_agent` span of the run of `agent` with `identity` over `state`
        (its revision is read now and as the run ends); the spans under it come from what
        this returns.

        Without a tracer provider (the API is installed, no SDK is set up) the span is
        OpenTelemetry's invalid one: nothing records it or can be linked to it, so the run
        gets `NO_RUN_SPANS` and its phases run bare, as with the extra not installed.
        (Spans under it would cost each phase about 3 µs for nothing, and, were a provider
        set later in the run, they would start traces of their own, without their run.)"""
        span = self._tracer.start_span(
            f"invoke_agent {agent}",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                "statekernel.thread_id": identity.thread_id,
                "statekernel.run_id": identity.run_id,
                "statekernel.revision": state.revision,
            },
        )
        if not span.get_span_context().is_valid:
            return NO_RUN_SPANS
        return RunSpans(self, span, state)

    def start_child(self, parent: Any, name: str, attributes: dict[str, Any]) -> Any:
        """A span under `parent`, started. (Not made the current span: nothing in a phase
        starts spans of its own, and attaching a context costs every phase.)"""
        context = self._trace.set_span_in_context(parent)
        return self._tracer.start_span(name, context=context, attributes=attributes)

    @contextmanager
    def child(self, parent: Any, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
        """A span under `parent`, open while the block runs; an exception marks it failed."""
        span = self.start_child(parent, name, attributes)
        try:
            yield span
        except BaseException as error:
            self.fail(span, error)
            raise
        finally:
            span.end()

    def fail(self, span: Any, error: BaseException) -> None:
        """Mark `span` failed by `error`, as the conventions say (`error.type`)."""
        span.set_attribute("error.type", type(error).__qualname__)
        span.record_exception(error)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))

    def failed_status(self, span: Any, description: str) -> None:
        """Set `span`'s status to failed, with `description` (no exception to record)."""
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, description))

    def span_context(self, traceparent: str) -> Any:
        """The remote span context a `traceparent` names, or None if it names none."""
        if self._propagator is None:
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )

            self._propagator = TraceContextTextMapPropagator()
        context = self._propagator.extract({"traceparent": traceparent})
        found = self._trace.get_current_span(context).get_span_context()
        return found if found.is_valid else None


class RunSpans:
    """One run's spans: its `invoke_agent` span, and the phase, tool call and model call
    spans under it. A phase run during a tool call is the child of that call's span.

    The run asks once, for its phases, its tool gates and its tool calls, what to run them
    through (`phases`, `tool_gates`, `tool_calls`): here, wrappers that open their spans."""

    enabled = True

    def __init__(self, tracing: Tracing, span: Any, state: LiveState) -> None:
        self._tracing = tracing
        self._span = span  # the run's
        self._state = state  # the run's, for its revision as it ends
        self._ended = False
        self._tool_span: Any = None  # the span of the tool call under way, if any
        self._traceparent: str | None = None  # the run's span as a traceparent, once asked
        self._letter_contexts: set[str] = set()  # senders' spans met in delivered mail

    def _parent(self) -> Any:
        return self._tool_span if self._tool_span is not None else self._span

    def _phase_span(self, phase: Phase) -> Any:
        """A phase's span, started under the tool call under way or the run."""
        return self._tracing.start_child(self._parent(), *_phase_span_of(phase))

    def phases(self, engine: PhaseRunner) -> PhaseRunner:
        """`engine`, running each phase inside a span of its own."""
        return _SpannedPhases(self, engine)

    def tool_gates(self, gate: GateRunner) -> GateRunner:
        """`gate` (a run's `TOOL_GATE` phase and gates) inside the phase's span, which gets
        the gates' decision, as the span of the tool call it gates does."""
        tracing = self._tracing

        async def spanned(call: ToolCall, fields: Mapping[str, Any]) -> Gated:
            with tracing.child(self._parent(), *_phase_span_of(Phase.TOOL_GATE)) as span:
                decision, report, noted = await gate(call, fields)
                _gate_attributes(span, noted)
                if self._tool_span is not None:
                    _gate_attributes(self._tool_span, noted)
                _phase_done(span, report)
            return decision, report, noted

        return spanned

    def tool_calls(
        self, handle: Callable[Concatenate[ToolCall, P], Awaitable[ToolResult]]
    ) -> Callable[Concatenate[ToolCall, P], Awaitable[ToolResult]]:
        """`handle` (a tool call's whole life: gates, the tool, its command) inside the
        call's `execute_tool` span; the phases run meanwhile are its children."""
        tracing = self._tracing

        async def spanned(call: ToolCall, /, *args: P.args, **kwargs: P.kwargs) -> ToolResult:
            if self._ended:  # the run refuses the call: no span for it
                return await handle(call, *args, **kwargs)
            attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.call.id": call.id,
            }
            with tracing.child(self._span, f"execute_tool {call.name}", attributes) as span:
                self._tool_span = span
                try:
                    result = await handle(call, *args, **kwargs)
                finally:
                    self._tool_span = None
                span.set_attribute("statekernel.tool.status", result.status.value)
                if result.error is not None:
                    span.set_attribute("error.type", "tool_error")
                    tracing.failed_status(span, result.error)
            return result

        return spanned

    def model_call(self, model: str) -> AbstractContextManager[Any]:
        """The `chat {model}` span of one model call, open while the block runs."""
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
        return self._tracing.child(self._span, f"chat {model}", attributes)

    def model_done(self, span: Any, response: Any) -> None:
        calls = getattr(response, "tool_calls", ())
        span.set_attribute("statekernel.tool_calls", [call.name for call in calls])
        usage = getattr(response, "usage", None)
        for field, name in (("input_tokens", "input"), ("output_tokens", "output")):
            count = getattr(usage, field, None) if usage is not None else None
            if isinstance(count, int):
                span.set_attribute(f"gen_ai.usage.{name}_tokens", count)

    def traceparent(self) -> str | None:
        """The run's span context as a W3C `traceparent` (None when it has no valid one: no
        tracer provider was set)."""
        if self._traceparent is None:  # (a span's context never changes)
            self._traceparent = _traceparent(self._span.get_span_context())
        return self._traceparent

    def link_letters(self, senders: Iterable[tuple[str, str]]) -> None:
        """Link the run's span to each `(traceparent, sender)` whose context it did not meet
        yet. Past `MAX_LETTER_LINKS` contexts a run links no more and counts the rest on its
        span (`statekernel.letter.links_dropped`). A context that does not parse is skipped:
        it came out of stored data, and a link is not worth failing a delivery for. An API
        older than 1.23 cannot link a started span: then nothing is linked."""
        span = self._span
        add_link = getattr(span, "add_link", None)
        if add_link is None:
            return
        seen = self._letter_contexts
        before = len(seen)
        for traceparent, sender in senders:
            if traceparent in seen:
                continue
            seen.add(traceparent)
            if len(seen) > MAX_LETTER_LINKS:
                continue
            context = self._tracing.span_context(traceparent)
            if context is not None:
                add_link(context, {"statekernel.letter.sender": sender})
        if len(seen) > MAX_LETTER_LINKS and len(seen) > before:
            span.set_attribute("statekernel.letter.links_dropped", len(seen) - MAX_LETTER_LINKS)

    def fail(self, error: BaseException) -> None:
        """Mark the run's span failed by `error` (a phase failed)."""
        self._tracing.fail(self._span, error)

    def end(self, outcome: str) -> None:
        """End the run's span, with its last revision and how it ended."""
        self._ended = True
        span = self._span
        span.set_attribute("statekernel.revision", self._state.revision)
        span.set_attribute("statekernel.outcome", outcome)
        span.end()


class _SpannedPhases:
    """A run's phase engine with a span per phase (`RunSpans.phases`). Its span is opened
    and ended here rather than by a context manager (`Tracing.child`): every phase of a
    traced run comes this way, and a generator's context manager would cost each close to
    a microsecond."""

    __slots__ = ("_engine", "_spans", "_tracing")

    def __init__(self, spans: RunSpans, engine: PhaseRunner) -> None:
        self._spans = spans
        self._tracing = spans._tracing
        self._engine = engine

    async def run_phase(self, phase: Phase, fields: Mapping[str, Any]) -> PhaseReport:
        span = self._spans._phase_span(phase)
        try:
            report = await self._engine.run_phase(phase, fields)
            _phase_done(span, report)
        except BaseException as error:
            self._tracing.fail(span, error)
            raise
        finally:
            span.end()
        return report


def _phase_span_of(phase: Phase) -> tuple[str, dict[str, Any]]:
    """A phase span's name and first attributes (a new dict each: the span keeps it)."""
    return f"phase {phase.value}", {"statekernel.phase": phase.value}


def _phase_done(span: Any, report: PhaseReport) -> None:
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


def _gate_attributes(span: Any, gate: GateRun) -> None:
    span.set_attribute("statekernel.gate.decision", gate.decision)
    if gate.plugin is not None:
        span.set_attribute("statekernel.gate.plugin", gate.plugin)
    if gate.reason is not None:
        span.set_attribute("statekernel.gate.reason", str(gate.reason))
    ticket = gate.ticket_text()
    if ticket is not None:
        span.set_attribute("statekernel.gate.ticket", ticket)


_NO_SPAN: AbstractContextManager[None] = nullcontext()  # (reusable: it holds nothing)


class NoTracing:
    """`Tracing` when tracing is off (the extra is not installed): every run gets
    `NO_RUN_SPANS`, and nothing of OpenTelemetry is imported or called."""

    enabled = False

    def start_run(self, agent: str, identity: RunIdentity, state: LiveState) -> NoRunSpans:
        return NO_RUN_SPANS


class NoRunSpans:
    """`RunSpans` of a run that is not traced (or has ended): the same calls, doing nothing.
    The span it hands out is None. What the real one builds for a span (names, attributes)
    is never built here, and phases, tool gates and tool calls run bare: `phases`,
    `tool_gates` and `tool_calls` hand back what they are given."""

    enabled = False

    def phases(self, engine: PhaseRunner) -> PhaseRunner:
        return engine

    def tool_gates(self, gate: GateRunner) -> GateRunner:
        return gate

    def tool_calls(
        self, handle: Callable[Concatenate[ToolCall, P], Awaitable[ToolResult]]
    ) -> Callable[Concatenate[ToolCall, P], Awaitable[ToolResult]]:
        return handle

    def model_call(self, model: str) -> AbstractContextManager[None]:
        return _NO_SPAN

    def model_done(self, span: Any, response: Any) -> None:
        pass

    def traceparent(self) -> None:
        return None

    def link_letters(self, senders: Iterable[tuple[str, str]]) -> None:
        pass

    def fail(self, error: BaseException) -> None:
        pass

    def end(self, outcome: str) -> None:
        pass


NO_TRACING = NoTracing()
"""The kernel's tracing when tracing is off."""

NO_RUN_SPANS = NoRunSpans()
"""The spans of a run that is not traced, or no longer: it has ended."""
