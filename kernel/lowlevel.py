"""Engine parts for store authors, tool builders and tests: `statekernel.lowlevel`.

Agent builders need none of this; it is the machinery under `Kernel` and `Run`, kept in its
own namespace (as Trio keeps `trio.lowlevel`) so that the user API stays small. These names
are stable, but using them means taking on what `Run` otherwise does for you: a `LiveState`
commits patches and nothing else, and a `partition` only decides what may commit together.
"""

from ._commit import LiveState
from ._merge import Contribution, Partition, partition
from ._profile import BufferedProfileAccess, ReadOnlyProfileAccess, SupportsAtomicUpdate
from ._registry import KeyBinding, KeyRegistry

__all__ = [
    "BufferedProfileAccess",
    "Contribution",
    "KeyBinding",
    "KeyRegistry",
    "LiveState",
    "Partition",
    "ReadOnlyProfileAccess",
    "SupportsAtomicUpdate",
    "partition",
]
