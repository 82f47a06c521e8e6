"""The side-by-side benchmark suite behind `make bench` (entry point: benchmarks/suite.py).

One module per workload; each runs statekernel, the plain-Python floor, LangGraph and
EvoFabric on the same work in one process, checks that every side ended in the same state,
and returns rows for the results JSON. `harness` holds what they share: the sampling loop,
the rows, and the peers' import checks.
"""
