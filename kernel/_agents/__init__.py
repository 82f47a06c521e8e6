"""Agents: the `Agent` facade over a `Run` (model calls, tool calls, streaming, cancel),
tools built from typed functions, and how a run ended (`RunResult`).

This is the top of the kernel: it may use every layer below, and nothing below imports it.
Nothing is exported from here.
"""
