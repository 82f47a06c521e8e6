"""Opening the database a command names, for reading only.

A command is handed one string, a SQLite file's path or a PostgreSQL DSN (a URI or libpq
`key=value` pairs: the store backends tell which). What it holds is asked first
(`stored_components`), so that a missing file, a file of another program or an empty
database is refused before any store is made, and nothing is ever created there. The kernel
that reads it has no plugins: what it shows is what any program can read; where it names
the database, it shows it without a DSN's password.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import attrs

from statekernel import Kernel, ProfileStore, ThreadStore

from .extensions import store_backends

__all__ = ["Location", "opened"]


@attrs.frozen
class Location:
    """A database opened for reading: a kernel over its threads, and its profile store when
    it holds one."""

    db: str
    shown: str
    """The database as the output names it: a DSN without its password."""
    kernel: Kernel
    threads: ThreadStore | None
    profiles: ProfileStore | None


@contextlib.asynccontextmanager
async def opened(db: str) -> AsyncIterator[Location]:
    """The database `db`, read-only, closed on leaving."""
    backends = store_backends()
    held = await backends.stored_components(db)
    stores = backends.open_stores(db, read_only=True)  # nothing is opened until first use
    # A file of profiles only holds no threads: a kernel without a thread store reads none.
    threads = stores.thread_store if "thread_store" in held else None
    profiles = stores.profile_store if "profile_store" in held else None
    try:
        yield Location(
            db, backends.redacted(db), Kernel([], thread_store=threads), threads, profiles
        )
    finally:
        await stores.close()
