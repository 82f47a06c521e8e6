"""Observing runs from outside: OpenTelemetry spans for a run, its phases, its model calls
and its tool calls, in whatever tracer provider the application configured.

Beside the host (its layer): the host's `Run` and the agents call it at the points a span
begins and ends, through one small object chosen once per kernel. Without the extra
`statekernel[otel]` there is no such object: nothing of OpenTelemetry is imported, and a run
pays one `is None` test per phase. Nothing is exported from here.
"""
