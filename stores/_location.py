"""Where stores live, named by one string: a SQLite file's path or a PostgreSQL DSN (a
`postgresql://` URI or libpq `key=value` pairs).

A program is usually given "a database", not a store class: `open_stores` opens both
stores of the matching backend there as one `Stores`, and `embedded` is the default home of
a program that has none in mind, a SQLite file in a folder. A tool that only looks (the
command line) must not create a store by looking: `stored_components` says what a
location holds without writing.
"""

from __future__ import annotations

import asyncio
import os

from statekernel import ProfileStore, Stores, ThreadStore

from ._postgres import PostgresProfileStore, PostgresThreadStore
from ._postgres.connection import read_components as postgres_components
from ._postgres.dsn import as_uri, is_dsn
from ._sqlite import SqliteProfileStore, SqliteThreadStore
from ._sqlite.connection import read_components as sqlite_components

__all__ = ["EMBEDDED_FOLDER", "embedded", "open_stores", "stored_components"]

EMBEDDED_FOLDER = ".statekernel"
_EMBEDDED_FILE = "statekernel.db"


def embedded(folder: str | os.PathLike[str] = EMBEDDED_FOLDER) -> Stores:
    """The embedded default: both stores in one SQLite file, `<folder>/statekernel.db`.

    The file is made, with its folder (owner-only), on first use:
    `Agent(..., stores=embedded())`."""
    return open_stores(os.path.join(os.fspath(folder), _EMBEDDED_FILE))


def open_stores(db: str | os.PathLike[str], *, read_only: bool = False) -> Stores:
    """Both stores at `db`: the PostgreSQL stores for a DSN, the SQLite stores otherwise.

    A PostgreSQL DSN opens the PostgreSQL stores: a `postgresql://` (or `postgres://`) URI,
    or libpq `key=value` pairs that start with a libpq keyword (`host=... dbname=...`). Any
    other string or path is a SQLite file's path (a file named like a pair is `./host=...`).
    Nothing is opened until first use; `read_only=True` never creates, migrates or writes
    anything there."""
    threads: ThreadStore
    profiles: ProfileStore
    if is_dsn(db):
        threads = PostgresThreadStore(str(db), read_only=read_only)
        profiles = PostgresProfileStore(str(db), read_only=read_only)
    else:
        threads = SqliteThreadStore(db, read_only=read_only)
        profiles = SqliteProfileStore(db, read_only=read_only)
    return Stores(threads, profiles)


async def stored_components(db: str | os.PathLike[str]) -> dict[str, int]:
    """The statekernel stores at `db` (`"thread_store"`, `"profile_store"`) with their schema
    versions, read without creating or changing anything.

    `db` is a SQLite file's path or a PostgreSQL DSN, as for `open_stores`; call it as
    `await stored_components(db)`. A missing file, a file or database that is not a
    statekernel store, or a server that cannot be reached raises `StoreError` saying
    which."""
    if is_dsn(db):
        return await postgres_components(as_uri(str(db)))
    return await asyncio.to_thread(sqlite_components, os.fspath(db))
