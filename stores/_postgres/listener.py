"""The PostgreSQL profile store's change feeds: one connection of its own, outside the pool,
that `LISTEN`s for the notices a trigger sends when entries of a watched namespace change.

How a write is told. Entering a feed of a namespace the first time (in the database's life:
it stays watched) registers it (`statekernel_profile_watch`): a row in
`statekernel_profile_watched` naming its channel, and two triggers on
`statekernel_profile_entries`, after each inserted or updated row and after each deleted
row, with the condition `namespace = '<that namespace>'`, that call `pg_notify(channel,
key)`. So the notice is part of the write's own transaction: the server delivers it only
when that transaction commits, after its changes are visible, and a watcher woken by it
always finds the write. Every writer's writes notify, whatever path they took (a
group-commit batch, a compare-and-set, an `update`, a delete, a `clear`, another program's
SQL). A write to a namespace nobody watches costs the triggers' conditions, a comparison
each, and calls nothing; a database where nobody ever entered a feed has no trigger at all.

Creating the triggers takes the entries table's `SHARE ROW EXCLUSIVE` lock, which waits
for the writes in flight and holds new ones back until the registration commits: no write
that commits after the feed was entered can have missed its trigger. The channel,
`statekernel_` and 40 hex digits of a hash of the table's schema, name and the namespace,
keeps two applications' tables in one database (two schemas) apart, and one namespace's
watchers asleep while another's are written.

A notice's payload is `k` and the key, or `*` when the key is too long for a payload (8000
bytes); `*` is reported as None. When the connection is lost (a restart, a failover) the
feeds are told "unknown", and the next `next()` connects again, with backoff, for as long
as it is awaited: it returns None once listening again, since notices may have been
missed. An idle feed sends nothing: the connection waits on its socket (with TCP
keepalives, so that a peer that vanished without a word is found out).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import time
from typing import Any

from statekernel import StateError, StoreError

from .._changes import Watchers
from .connection import READ_ONLY_SERVER, PostgresConnection, driver, server_of, transient

__all__ = ["NOTIFYING_VERSION", "WATCH_STATEMENTS", "Listener"]

logger = logging.getLogger("statekernel")

NOTIFYING_VERSION = 2
"""The first schema version of the profile store with the watched table and the trigger."""

WATCH_STATEMENTS = (
    """
    CREATE TABLE statekernel_profile_watched (
        namespace TEXT COLLATE "C" PRIMARY KEY,
        channel   TEXT NOT NULL
    )
    """,
    # The triggers' function: the channel is the trigger's argument, so it looks nothing up.
    """
    CREATE FUNCTION statekernel_profile_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        changed TEXT;
    BEGIN
        IF TG_OP = 'DELETE' THEN changed := OLD.key; ELSE changed := NEW.key; END IF;
        PERFORM pg_notify(TG_ARGV[0], CASE WHEN octet_length(changed) < 7990
                                           THEN 'k' || changed ELSE '*' END);
        RETURN NULL;
    END
    $$
    """,
    # Watch a namespace (idempotent): its channel. The namespace reaches the triggers'
    # DDL only through format()'s %L, as a quoted literal.
    """
    CREATE FUNCTION statekernel_profile_watch(watched TEXT) RETURNS TEXT
    LANGUAGE plpgsql AS $$
    DECLARE
        target TEXT;
    BEGIN
        SELECT w.channel INTO target FROM statekernel_profile_watched AS w
            WHERE w.namespace = watched;
        IF FOUND THEN RETURN target; END IF;
        LOCK TABLE statekernel_profile_entries IN SHARE ROW EXCLUSIVE MODE;
        SELECT w.channel INTO target FROM statekernel_profile_watched AS w
            WHERE w.namespace = watched;
        IF FOUND THEN RETURN target; END IF;  -- (registered while this one waited)
        SELECT 'statekernel_' || left(encode(sha256(convert_to(
                   n.nspname || '.' || c.relname || '/' || watched, 'UTF8')), 'hex'), 40)
            INTO target
            FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
            WHERE c.oid = 'statekernel_profile_entries'::regclass;
        INSERT INTO statekernel_profile_watched (namespace, channel) VALUES (watched, target);
        EXECUTE format(
            'CREATE TRIGGER %I AFTER INSERT OR UPDATE ON statekernel_profile_entries '
            'FOR EACH ROW WHEN (NEW.namespace = %L) '
            'EXECUTE FUNCTION statekernel_profile_notify(%L)', target, watched, target);
        EXECUTE format(
            'CREATE TRIGGER %I AFTER DELETE ON statekernel_profile_entries '
            'FOR EACH ROW WHEN (OLD.namespace = %L) '
            'EXECUTE FUNCTION statekernel_profile_notify(%L)', target || '_deleted', watched,
            target);
        RETURN target;
    END
    $$
    """,
)

_CHANNEL = "SELECT channel FROM statekernel_profile_watched WHERE namespace = $1"
_WATCH = "SELECT statekernel_profile_watch($1)"
_SCHEMA_VERSION = "SELECT version FROM statekernel_schema WHERE component = 'profile_store'"

_KEEPALIVE = (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
_LONGEST_PAUSE = 2.0  # between tries to connect again


class Listener:
    """The `FeedSource` of a PostgreSQL profile store: its listening connection, shared by
    every feed entered on the store object, open while at least one is."""

    def __init__(
        self, dsn: str, db: PostgresConnection, watchers: Watchers, *, call_timeout: float
    ) -> None:
        self._dsn = dsn
        self._db = db
        self._watchers = watchers
        self._call_timeout = call_timeout
        self._where = server_of(dsn)
        self._feeds: dict[str, int] = {}  # namespace -> feeds entered
        self._channels: dict[str, str] = {}  # channel -> namespace, LISTENed on `_conn`
        self._conn: Any = None
        self._lock: asyncio.Lock | None = None
        self._missed = False  # the connection went while feeds were entered
        self._away_since: float | None = None

    async def attach(self, namespace: str) -> None:
        """Listen for `namespace`, connecting if need be: within `call_timeout`, retrying a
        server that cannot be reached for the store's `retry_for`."""
        self._feeds[namespace] = self._feeds.get(namespace, 0) + 1
        try:
            await self._db.read("change feed", namespace, self._check_schema)
            async with self._locked(), asyncio.timeout(self._call_timeout):
                if self._conn is None:
                    await self._connect(retrying=True)
                elif namespace not in self._channels.values():
                    await self._listen_on_open(namespace)
        except BaseException as error:
            await self.detach(namespace)
            if isinstance(error, StateError) or not isinstance(error, Exception):
                raise
            if isinstance(error, TimeoutError):
                error = TimeoutError(f"no answer within call_timeout ({self._call_timeout:g} s)")
            raise StoreError("change feed", error, key=namespace) from error

    async def detach(self, namespace: str) -> None:
        left = self._feeds.get(namespace, 0) - 1
        if left > 0:
            self._feeds[namespace] = left
            return
        self._feeds.pop(namespace, None)
        async with self._locked():
            if not self._feeds:
                with contextlib.suppress(Exception):
                    await self._hang_up()
                self._missed = False
                return
            channels = [c for c, n in self._channels.items() if n == namespace]
            for channel in channels:
                del self._channels[channel]
                if self._conn is not None:
                    with contextlib.suppress(Exception):
                        await self._conn.remove_listener(channel, self._notified)

    async def running(self) -> None:
        """Connect again, for as long as the caller waits, when the connection was lost or
        the store closed; the feeds are then told "unknown"."""
        pause = 0.05
        while self._conn is None and self._feeds:
            # The lock is held for one try at a time (at most `call_timeout`), never across
            # the pauses: a feed leaving, or the store closing, waits for no outage.
            async with self._locked():
                if self._conn is not None or not self._feeds:
                    return
                try:
                    async with asyncio.timeout(self._call_timeout):
                        await self._connect(retrying=False)
                    return
                except Exception as error:
                    self._away(error)
            await asyncio.sleep(random.uniform(pause / 2, pause))
            pause = min(pause * 2, _LONGEST_PAUSE)

    async def close(self) -> None:
        """The store closes: hang up. Feeds still entered are told "unknown", and their
        next `next()` connects again."""
        async with self._locked():
            had = self._conn is not None
            await self._hang_up()
        if had and self._feeds:
            self._missed = True
            self._watchers.unknown()

    @contextlib.asynccontextmanager
    async def _locked(self) -> Any:
        # One operation at a time on the connection (asyncpg refuses a second).
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            yield

    async def _check_schema(self, conn: Any) -> None:
        """Through the store's pool (which creates or migrates the tables first): the
        trigger is there, or the feed is refused saying how to get it."""
        version = await conn.fetchval(_SCHEMA_VERSION)
        if version is not None and version >= NOTIFYING_VERSION:
            return
        raise StoreError(
            "change feed",
            ValueError(
                f"the database's profile_store tables are at schema version {version}, "
                f"which sends no change notices (version {NOTIFYING_VERSION} does): open it "
                f"once for writing on the primary (a store without read_only=True) to "
                f"migrate them"
            ),
        )

    async def _connect(self, *, retrying: bool) -> None:
        """Open the listening connection and LISTEN for every namespace with a feed."""
        loop = asyncio.get_running_loop()
        until = loop.time() + (self._db.retry_for if retrying else 0.0)
        pause = 0.05
        while True:
            try:
                conn = await driver().connect(
                    self._dsn, timeout=self._call_timeout, statement_cache_size=0
                )
                break
            except Exception as error:
                if not transient(error) or loop.time() >= until:
                    raise
            await asyncio.sleep(random.uniform(pause / 2, pause))
            pause = min(pause * 2, _LONGEST_PAUSE)
        try:
            _keep_alive(conn)
            self._channels = {}
            for namespace in list(self._feeds):
                await self._listen(conn, namespace)
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(self._lost)
        self._conn = conn
        self._back()
        if self._missed:
            self._missed = False
            self._watchers.unknown()

    async def _listen_on_open(self, namespace: str) -> None:
        """`_listen` on the open connection; one left mid-statement (a deadline, a broken
        connection) is dropped, and the other feeds connect again."""
        try:
            await self._listen(self._conn, namespace)
        except BaseException as error:
            if not isinstance(error, StateError):
                conn, self._conn = self._conn, None
                self._channels = {}
                self._missed = True
                conn.terminate()
                self._watchers.unknown()
            raise

    async def _listen(self, conn: Any, namespace: str) -> None:
        """LISTEN on `namespace`'s channel, registering it first when it is not watched."""
        channel = await conn.fetchval(_CHANNEL, namespace)
        if channel is None:
            channel = await self._register(conn, namespace)
        try:
            await conn.add_listener(channel, self._notified)
        except driver().PostgresError as error:
            if getattr(error, "sqlstate", None) != READ_ONLY_SERVER:
                raise
            raise StoreError(
                "change feed",
                PermissionError(
                    f"the server at {self._where} is a replica in recovery, which cannot "
                    f"LISTEN ({error}); notices are sent on the primary: give the store "
                    f"listen_dsn= the primary's DSN"
                ),
                key=namespace,
            ) from error
        self._channels[channel] = namespace

    async def _register(self, conn: Any, namespace: str) -> str:
        """Watch `namespace` from now on (see the module's docstring); its channel."""
        why = "the store was opened with read_only=True"
        if not self._db.read_only:
            try:
                async with conn.transaction():
                    return str(await conn.fetchval(_WATCH, namespace))
            except driver().PostgresError as error:
                if getattr(error, "sqlstate", None) != READ_ONLY_SERVER:
                    raise
                why = f"the server at {self._where} is read-only ({error})"
        raise StoreError(
            "change feed",
            PermissionError(
                f"nobody watches this namespace yet, and watching it is a write, but {why}: "
                f"enter a feed of it once through a store that writes to the primary (it "
                f"stays watched), or give listen_dsn= the primary's DSN"
            ),
            key=namespace,
        )

    def _notified(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        namespace = self._channels.get(channel)
        if namespace is None or conn is not self._conn:
            return
        if payload.startswith("k"):
            self._watchers.wrote(namespace, (payload[1:],))
        else:  # a key too long for a payload (or a notice not of ours)
            self._watchers.unknown(namespace)

    def _lost(self, conn: Any) -> None:
        """asyncpg: the connection closed. Unless by us, the feeds are told "unknown", and
        their next `next()` connects again."""
        if conn is not self._conn:
            return
        self._conn = None
        self._channels = {}
        self._missed = True
        self._away(ConnectionError("the listening connection was closed by the server"))
        self._watchers.unknown()

    async def _hang_up(self) -> None:
        conn, self._conn = self._conn, None
        self._channels = {}
        if conn is None:
            return
        try:
            await asyncio.wait_for(conn.close(), timeout=min(self._call_timeout, 5.0))
        except BaseException:
            conn.terminate()
            raise

    def _away(self, error: BaseException) -> None:
        """Said once per outage: the feeds listen again as soon as the server answers."""
        if self._away_since is not None:
            return
        self._away_since = time.monotonic()
        logger.warning(
            "PostgreSQL change feed at %s is not listening (%s: %s); it listens again as "
            "soon as the server answers, and its feeds report None then",
            self._where,
            type(error).__name__,
            error,
        )

    def _back(self) -> None:
        if self._away_since is None:
            return
        logger.warning(
            "PostgreSQL change feed at %s listens again, after %.1f s",
            self._where,
            time.monotonic() - self._away_since,
        )
        self._away_since = None


def _keep_alive(conn: Any) -> None:
    """TCP keepalives on the listening socket: a connection that only waits sends nothing,
    so without them a server that vanished without closing it (a cut network, a dead
    host) would leave the feed asleep for good. The kernel probes after 30 s idle and
    gives up after three unanswered probes 10 s apart."""
    transport = getattr(conn, "_transport", None)  # asyncpg's; no public way to the socket
    sock = None if transport is None else transport.get_extra_info("socket")
    if sock is None or sock.family == getattr(socket, "AF_UNIX", None):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in _KEEPALIVE:
            option = getattr(socket, name, None)
            if option is not None:
                sock.setsockopt(socket.IPPROTO_TCP, option, value)
