"""ProfileStore and ThreadStore backends (memory, SQLite) implementing kernel's protocols.

The protocols are defined in `statekernel` (the core depends on no backend) and re-exported here
so that `from stores import ProfileStore, SqliteProfileStore` reads naturally.
"""

from statekernel import ProfileStore, ThreadStore

from .memory import MemoryProfileStore, MemoryThreadStore
from .sqlite_profile import SqliteProfileStore
from .sqlite_thread import SqliteThreadStore

__all__ = [
    "MemoryProfileStore",
    "MemoryThreadStore",
    "ProfileStore",
    "SqliteProfileStore",
    "SqliteThreadStore",
    "ThreadStore",
]
