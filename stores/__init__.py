"""ProfileStore and ThreadStore backends (memory, SQLite) implementing kernel's protocols.

The protocols are defined in `statekernel` (the core depends on no backend) and re-exported here
so that `from statekernel.stores import ProfileStore, SqliteProfileStore` reads naturally.
Every module behind this one is private.
"""

from statekernel import ProfileStore, ThreadStore

from ._memory import MemoryProfileStore, MemoryThreadStore
from ._sqlite_profile import SqliteProfileStore
from ._sqlite_thread import SqliteThreadStore

__all__ = [
    "MemoryProfileStore",
    "MemoryThreadStore",
    "ProfileStore",
    "SqliteProfileStore",
    "SqliteThreadStore",
    "ThreadStore",
]
