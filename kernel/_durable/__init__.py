"""Durability: a thread between runs is its journal.

The `ThreadStore` protocol, the commit records and their bytes, replay, snapshots, the
per-key codec, `ThreadKeeper` (load and save with compare-and-set), and `ThreadHistory`
(history, time travel, forks, prune, verify). It takes what the engine committed and hands
bytes to a store; it never imports a store, and it knows nothing of phases or agents.
Nothing is exported from here.
"""
