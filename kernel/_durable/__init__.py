"""Durability: a thread between runs is its journal.

The `ThreadStore` protocol, the commit records and their bytes, replay, snapshots, the
per-key codec, the `ThreadHome` interface of where a kernel's threads live with its two
homes (`StoredThreads` over a store, load and save with compare-and-set; `MemoryThreads` in
the kernel's memory), and `ThreadHistory` (history, time travel, forks, prune, verify). It
takes what the engine committed and hands bytes to a store; it never imports a store, and it
knows nothing of phases or agents. Nothing is exported from here.
"""
