"""The SQLite stores, the embedded default: one connection pipeline (`connection`) and the
profile and thread stores on it."""

from .profile_store import SqliteProfileStore
from .thread_store import SqliteThreadStore

__all__ = ["SqliteProfileStore", "SqliteThreadStore"]
