"""Engine parts for store authors, tool builders and tests: `statekernel.lowlevel`.

Agent builders need none of this; it is the machinery under `Kernel` and `Run`, kept in its
own namespace (as Trio keeps `trio.lowlevel`) so that the user API stays small. These names
are stable, but using them means taking on what `Run` otherwise does for you: a `LiveState`
commits patches and nothing else, and a `partition` only decides what may commit together.
"""

from ._durable.store import (
    JournalEntry,
    SupportsHead,
    SupportsLoadSince,
    SupportsRunEvents,
    ThreadHead,
    ThreadSave,
    ThreadSnapshot,
    ThreadState,
    check_name,
)
from ._engine.commit import LiveState
from ._engine.merge import Contribution, Partition, partition
from ._engine.registry import KeyBinding, KeyRegistry
from ._profile.access import BufferedProfileAccess, ReadOnlyProfileAccess
from ._profile.changes import ChangeFeed, SupportsChanges
from ._profile.keys import profile_key_info
from ._profile.store import (
    DEFAULT_MAX_VALUE_BYTES,
    AcceptsEncodedValues,
    EncodedValue,
    Entry,
    SupportsAtomicUpdate,
    SupportsNamespaces,
    encode_entry,
    encode_record,
)
from ._public import publish
from ._values.codec import CODEC_ERRORS
from ._values.commands import CLEAR
from ._values.keys import key_info

__all__ = [
    "CLEAR",
    "CODEC_ERRORS",
    "DEFAULT_MAX_VALUE_BYTES",
    "AcceptsEncodedValues",
    "BufferedProfileAccess",
    "ChangeFeed",
    "Contribution",
    "EncodedValue",
    "Entry",
    "JournalEntry",
    "KeyBinding",
    "KeyRegistry",
    "LiveState",
    "Partition",
    "ReadOnlyProfileAccess",
    "SupportsAtomicUpdate",
    "SupportsChanges",
    "SupportsHead",
    "SupportsLoadSince",
    "SupportsNamespaces",
    "SupportsRunEvents",
    "ThreadHead",
    "ThreadSave",
    "ThreadSnapshot",
    "ThreadState",
    "check_name",
    "encode_entry",
    "encode_record",
    "key_info",
    "partition",
    "profile_key_info",
]

publish(__name__, globals(), __all__)
del publish
