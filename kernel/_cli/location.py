"""Opening the database a command names, for reading only.

A command is handed one string, a SQLite file's path or a PostgreSQL DSN (a URI or libpq
`key=value` pairs: the store backends tell which). What it holds is asked first
(`stored_components`), so that a missing file, a file of another program or an empty
database is refused before any store is made, and nothing is ever created there. The kernel
that reads it registers no plugin of its own: what it shows is what any program can read.
Given the application (`--app module:attr`), it registers the keys the application declares
(`declarations.py`), so that every key is typed, shown whole and checked; it still reads
only this database, read-only. Where it names the database, it shows it without a DSN's
password. It holds the chain key it is given (`chain_key`, which `chain_key_given` reads
from `--chain-key-file` or the environment), else the one the application was built with
(`chain_key=`): the key given on the command line wins, as a flag wins over a setting, and
when the two differ a note on standard error says which one is read with.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import attrs

from statekernel import Kernel, ProfileStore, ThreadStore

from .application import load_application
from .declarations import Declarations, declarations
from .extensions import store_backends

__all__ = ["CHAIN_KEY_VARIABLE", "Location", "chain_key_given", "opened"]

CHAIN_KEY_VARIABLE = "STATEKERNEL_CHAIN_KEY"
"""The environment variable a reading command takes the chain key from (in hex), when no
`--chain-key-file` names one."""


@attrs.frozen
class Location:
    """A database opened for reading: a kernel over its threads, and its profile store when
    it holds one; `app`, the application whose keys the kernel registers, when one was
    given."""

    db: str
    shown: str
    """The database as the output names it: a DSN without its password."""
    kernel: Kernel
    threads: ThreadStore | None
    profiles: ProfileStore | None
    app: str | None = None

    def typed(self, name: str) -> bool:
        """Whether the kernel types the key `name` and replays its ops (a persistent thread
        key it registers): what a store keeps of any other key is shown as its JSON."""
        binding = self.kernel.components.keys.by_name.get(name)
        return binding is not None and binding.stored


def chain_key_given(path: Path | None) -> bytes | None:
    """The chain key in the file at `path`, else in `STATEKERNEL_CHAIN_KEY`, else None:
    hex text (surrounding whitespace ignored), as `secrets.token_hex(32)` writes it.
    Anything else is a `ValueError` naming where it was read (never the text)."""
    if path is not None:
        text, where = path.read_text(encoding="utf-8", errors="replace"), f"the file {path}"
    elif os.environ.get(CHAIN_KEY_VARIABLE):
        text, where = os.environ[CHAIN_KEY_VARIABLE], CHAIN_KEY_VARIABLE
    else:
        return None
    try:
        return bytes.fromhex(text.strip())
    except ValueError:
        raise ValueError(
            f"the chain key in {where} is not hex: write the key as hex digits (e.g. "
            f'python -c "import secrets; print(secrets.token_hex(32))")'
        ) from None


@contextlib.asynccontextmanager
async def opened(
    db: str, app: str | None = None, *, chain_key: bytes | None = None
) -> AsyncIterator[Location]:
    """The database `db`, read-only, closed on leaving; read with the keys of the
    application `app` (`module:attr`) when given, and with `chain_key`, else the
    application's."""
    found = None if app is None else load_application(app)  # a typo fails before any read
    backends = store_backends()
    held = await backends.stored_components(db)
    stores = backends.open_stores(db, read_only=True)  # nothing is opened until first use
    # A file of profiles only holds no threads: a kernel without a thread store reads none.
    threads = stores.thread_store if "thread_store" in held else None
    profiles = stores.profile_store if "profile_store" in held else None
    try:
        declared = Declarations((), None) if app is None else await declarations(app, found, stores)
        key = _chosen_key(chain_key, declared.chain_key, app)
        kernel = Kernel(declared.plugins, thread_store=threads, chain_key=key)
        yield Location(db, backends.redacted(db), kernel, threads, profiles, app)
    finally:
        await stores.close()


def _chosen_key(given: bytes | None, declared: bytes | None, app: str | None) -> bytes | None:
    """The key given on the command line, else the application's; a note when both are
    there and differ (the application's may be of another deployment, or stale)."""
    if given is None:
        return declared
    if declared is not None and declared != given:
        print(
            f"note: the chain key given ({CHAIN_KEY_VARIABLE} or --chain-key-file) is not the "
            f"one the application {app!r} was built with: reading with the one given",
            file=sys.stderr,
        )
    return given
