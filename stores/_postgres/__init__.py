"""The PostgreSQL stores, for agents on many hosts: one pool and retry policy
(`connection`) and the profile and thread stores on it."""

from .profile_store import PostgresProfileStore
from .thread_store import PostgresThreadStore

__all__ = ["PostgresProfileStore", "PostgresThreadStore"]
