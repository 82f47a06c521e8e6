"""The host: `Kernel` and `Run`, which wire the registry, the engine and durability together.

A `Kernel` is made once from plugins and stores; a `Run` drives phases on one thread, saves
at step ends and finishes. The agents layer above drives a model and tools through it.
Nothing is exported from here.
"""
