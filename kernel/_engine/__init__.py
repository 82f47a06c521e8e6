"""The engine: one phase at a time, from the hooks' commands to one atomic commit.

The registry a kernel builds from its plugins, the frozen `Snapshot` hooks read, the
`PhaseContext` they get, the pure merge (`partition`), `LiveState` (the only writer of run and
thread state, which journals each op as it applies it), the `PhaseEngine` that gathers,
merges, commits and dispatches, and the one policy for calling user code (`invoke`). It reads
the values below it and the profile layer's buffered access; it knows nothing of stores,
threads between runs or agents. Nothing is exported from here.
"""
