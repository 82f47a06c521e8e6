"""Observing runs from outside: OpenTelemetry spans for a run, its phases, its model calls
and its tool calls, in whatever tracer provider the application configured.

Beside the host (its layer): the host's `Run` and the agents call it at the points a span
begins and ends, through one small object chosen once per kernel and one per run. Without
the extra `statekernel[otel]` those are no-op objects with the same calls: nothing of
OpenTelemetry is imported, and an untraced run's phase makes no call for tracing at all.
Nothing is exported from here.
"""
