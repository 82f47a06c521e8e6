"""ProfileStore and ThreadStore backends (memory, SQLite, PostgreSQL) implementing the
kernel's protocols.

The protocols are defined in `statekernel` (the core depends on no backend) and re-exported here
so that `from statekernel.stores import ProfileStore, SqliteProfileStore` reads naturally.
Every module behind this one is private.
"""

from statekernel import ProfileStore, Stores, ThreadStore

from ._location import embedded, open_stores, stored_components
from ._memory import MemoryProfileStore, MemoryThreadStore
from ._postgres import PostgresProfileStore, PostgresThreadStore
from ._postgres.dsn import redacted
from ._sqlite import SqliteProfileStore, SqliteThreadStore

__all__ = [
    "MemoryProfileStore",
    "MemoryThreadStore",
    "PostgresProfileStore",
    "PostgresThreadStore",
    "ProfileStore",
    "SqliteProfileStore",
    "SqliteThreadStore",
    "Stores",
    "ThreadStore",
    "embedded",
    "open_stores",
    "redacted",
    "stored_components",
]
