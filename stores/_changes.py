"""Change feeds inside one process: what a store's writes touched, piled up for each feed of
the namespace until that feed's next `next()`.

Every bundled profile store hands out the same `Feed`; they differ only in what feeds it
beyond the store's own writes in this process (its `FeedSource`): nothing (memory), a poll
of the file for other connections' commits (SQLite), a listening connection (PostgreSQL).

A pile is a set, not a queue: a key written ten times between two `next()` calls is
reported once, a slow watcher never holds up a writer, and memory stays bounded by the
namespace's keys. Nothing is taken from a pile but by a `next()` that returns it, so a
`next()` cancelled while it waits loses nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from types import TracebackType
from typing import Protocol, Self

from statekernel import StoreError

__all__ = ["NO_SOURCE", "Feed", "FeedSource", "Pile", "Watchers"]


class Pile:
    """What one feed was told since its last `next()`: keys, or that anything may have
    changed (`unknown`, which swallows the keys: the watcher looks at everything)."""

    __slots__ = ("_arrived", "_keys", "_unknown")

    def __init__(self) -> None:
        self._keys: set[str] = set()
        self._unknown = False
        self._arrived = asyncio.Event()

    def add(self, keys: Iterable[str]) -> None:
        if not self._unknown:
            self._keys.update(keys)
        if self.ready:
            self._arrived.set()

    def add_unknown(self) -> None:
        self._unknown = True
        self._keys.clear()
        self._arrived.set()

    @property
    def ready(self) -> bool:
        return self._unknown or bool(self._keys)

    def take(self) -> frozenset[str] | None:
        """Empty the pile: its keys, or None when anything may have changed."""
        keys = None if self._unknown else frozenset(self._keys)
        self._keys.clear()
        self._unknown = False
        self._arrived.clear()
        return keys

    async def arrival(self) -> None:
        """Wait until the pile holds something (at once if it does)."""
        while not self.ready:
            self._arrived.clear()
            await self._arrived.wait()


class Watchers:
    """The piles of a store's entered feeds, by namespace: where its writes are told."""

    __slots__ = ("_piles",)

    def __init__(self) -> None:
        self._piles: dict[str, set[Pile]] = {}

    def watch(self, namespace: str) -> Pile:
        pile = Pile()
        self._piles.setdefault(namespace, set()).add(pile)
        return pile

    def unwatch(self, namespace: str, pile: Pile) -> None:
        piles = self._piles.get(namespace)
        if piles is not None:
            piles.discard(pile)
            if not piles:
                del self._piles[namespace]

    def __bool__(self) -> bool:
        return bool(self._piles)

    def wrote(self, namespace: str, keys: Iterable[str]) -> None:
        """Entries of `namespace` were written: every feed of it is told their keys."""
        piles = self._piles.get(namespace)
        if piles:
            keys = tuple(keys)
            for pile in piles:
                pile.add(keys)

    def unknown(self, namespace: str | None = None) -> None:
        """Anything in `namespace` (None: in every namespace) may have changed."""
        if namespace is None:
            everyone = [pile for piles in self._piles.values() for pile in piles]
        else:
            everyone = list(self._piles.get(namespace, ()))
        for pile in everyone:
            pile.add_unknown()


class FeedSource(Protocol):
    """What keeps a store's feeds told of writes made outside the store object itself."""

    async def attach(self, namespace: str) -> None:
        """A feed of `namespace` is entered: from when this returns, writes that commit
        anywhere are told to the store's `Watchers` (at least as "unknown")."""
        ...

    async def detach(self, namespace: str) -> None:
        """A feed of `namespace` left: release what only it needed. Never raises."""
        ...

    async def running(self) -> None:
        """Before a feed hands out what it was told: make sure the source is listening
        again (after `store.close()`, after a lost connection), telling the watchers
        "unknown" once it is, since anything may have happened meanwhile."""
        ...


class _NoSource:
    """The source of a store whose every write goes through the store object (memory)."""

    async def attach(self, namespace: str) -> None:
        pass

    async def detach(self, namespace: str) -> None:
        pass

    async def running(self) -> None:
        pass


NO_SOURCE: FeedSource = _NoSource()


class Feed:
    """A `ChangeFeed` of one namespace of a bundled profile store.

    `async with store.changes(namespace) as feed:` then `await feed.next()`: the keys of
    the entries written since the last call, or None when the store cannot say which (see
    `statekernel.lowlevel.ChangeFeed`). A feed may be entered again after it left.
    """

    __slots__ = ("_namespace", "_pile", "_source", "_watchers")

    def __init__(self, watchers: Watchers, namespace: str, source: FeedSource = NO_SOURCE) -> None:
        self._watchers = watchers
        self._namespace = namespace
        self._source = source
        self._pile: Pile | None = None

    @property
    def namespace(self) -> str:
        return self._namespace

    def __repr__(self) -> str:
        state = "entered" if self._pile is not None else "not entered"
        return f"<change feed of namespace {self._namespace!r}, {state}>"

    async def next(self) -> frozenset[str] | None:
        """Wait until entries of the namespace were written since the last call (since
        entering, the first time); their keys, or None when anything may have changed."""
        pile = self._pile
        if pile is None:
            raise self._misuse(
                "next() was called on a feed that is not entered: use it inside "
                "`async with store.changes(namespace) as feed:`"
            )
        while True:
            await self._source.running()
            if pile.ready:
                return pile.take()
            await pile.arrival()

    async def __aenter__(self) -> Self:
        if self._pile is not None:
            raise self._misuse("the feed is entered already: make one feed per `async with`")
        pile = self._watchers.watch(self._namespace)
        try:
            await self._source.attach(self._namespace)
        except BaseException:
            self._watchers.unwatch(self._namespace, pile)
            raise
        self._pile = pile
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        pile, self._pile = self._pile, None
        if pile is not None:
            self._watchers.unwatch(self._namespace, pile)
            await self._source.detach(self._namespace)

    def _misuse(self, why: str) -> StoreError:
        return StoreError("change feed", RuntimeError(why), key=self._namespace)
