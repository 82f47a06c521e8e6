"""`Stores`: the two stores a kernel uses, handed over as one value.

Most programs put both kinds of state in one place (one SQLite file, one PostgreSQL
database), and giving a `Kernel`, an `Agent` or an `AgentTeam` one argument for it says so:
`Agent(..., stores=statekernel.stores.embedded())`. The kernel defines the pair and never
makes one: `statekernel.stores` builds them, as it builds every store.
"""

from __future__ import annotations

from types import TracebackType

import attrs

from .._durable.store import ThreadStore
from .._profile.store import ProfileStore

__all__ = ["Stores", "chosen_stores"]


@attrs.frozen
class Stores:
    """The two stores a program keeps its state in, as one value: a `ThreadStore` and a
    `ProfileStore` that belong together.

    `Stores(thread_store, profile_store)`. `Kernel`, `Agent` and `AgentTeam` take it as
    `stores=` instead of `thread_store=` and `profile_store=` (giving both ways raises
    `TypeError`, and so does a `stores=` that is not a `Stores`).
    `statekernel.stores.embedded()` and `statekernel.stores.open_stores(db)` make one.
    `async with stores:` closes both on leaving (each store also closes on its own, and
    reopens on next use). Without any store, a kernel keeps everything in the process's
    memory, and it dies with it.
    """

    thread_store: ThreadStore
    profile_store: ProfileStore

    async def close(self) -> None:
        """Close both stores, the thread store first (each reopens on next use)."""
        try:
            await self.thread_store.close()
        finally:
            await self.profile_store.close()

    async def __aenter__(self) -> Stores:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


def chosen_stores(
    stores: Stores | None,
    profile_store: ProfileStore | None,
    thread_store: ThreadStore | None,
    *,
    owner: str,
) -> tuple[ProfileStore | None, ThreadStore | None]:
    """The profile and thread store of an `owner` given `stores=` or the two one by one."""
    if stores is None:
        return profile_store, thread_store
    if not isinstance(stores, Stores):
        raise TypeError(
            f"{owner}(stores=...) takes a statekernel.Stores, such as "
            f"statekernel.stores.embedded() or statekernel.stores.open_stores(db); got {stores!r}"
        )
    if profile_store is not None or thread_store is not None:
        raise TypeError(
            f"{owner} was given stores= and also profile_store= or thread_store=: give one "
            f"or the other (Stores(thread_store, profile_store) pairs any two stores)"
        )
    return stores.profile_store, stores.thread_store
