"""The PostgreSQL ProfileStore: shared and profile entries in one table, for agents on many
hosts.

Every operation is one statement (an `update` is one short transaction), so the pool's
connections are shared by every task and no lock in this process serialises writes: the
server orders them. A value is stored as JSON text (readable with psql, and a row whose text
is no longer JSON fails with `DecodeFailed` for that entry only). Compare-and-set is the
statement's own condition; `update` holds the row's lock (`SELECT ... FOR UPDATE`) while its
function runs. The retry policy is `connection`'s: each write keeps a write id in
the row, so a lost answer never makes it apply twice.

Gets and sets that arrive while others are in flight leave together (`group_commit`): one
statement reads many entries, or writes many (one write per entry per batch, in call order),
and each caller gets its own entry back. A compare-and-set keeps its own condition in the
batch: the statement writes only the entries still at their expected versions, and each
loser gets its own `VersionConflict`, so a team's mailbox, which posts every letter by
compare-and-set, pays one commit for many letters.

Change feeds (`listener`): a trigger on the table sends a notice in each write's own
transaction for the namespaces someone watches, so the write paths here know nothing of
them.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from statekernel import OutcomeUnknown, StoreError, VersionConflict
from statekernel.lowlevel import DEFAULT_MAX_VALUE_BYTES, ChangeFeed, Entry, encode_entry

from .._changes import Feed, Watchers
from .._closing import ClosingStore
from .._key_range import prefix_upper_bound
from .._profile_codec import (
    check_expected,
    check_expected_version,
    check_names,
    decode_value,
    listed,
)
from .connection import (
    UNTRACEABLE,
    WRITE_IDS_KEPT,
    Outcome,
    PostgresConnection,
    Schema,
    Settled,
    UserCodeFailed,
    call_ends,
    columns,
    outcome_unknown,
    refused,
)
from .dsn import as_uri, redacted
from .group_commit import GroupCommit
from .listener import NOTIFYING_VERSION, WATCH_STATEMENTS, Listener

__all__ = ["PostgresProfileStore"]

logger = logging.getLogger("statekernel")

_LARGEST_BATCH = 500  # operations in one statement
_IN_FLIGHT = 2  # batches of one kind at a time (see group_commit)
_BATCH_BYTES = 8 * 1024 * 1024  # values in one statement, unless one alone is larger

_SCHEMA = Schema(
    component="profile_store",
    version=NOTIFYING_VERSION,
    statements=(
        """
        CREATE TABLE statekernel_profile_entries (
            namespace  TEXT COLLATE "C" NOT NULL,
            key        TEXT COLLATE "C" NOT NULL,
            value      TEXT NOT NULL,
            version    BIGINT NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            write_ids  BYTEA[] NOT NULL,
            PRIMARY KEY (namespace, key)
        )
        """,
        *WATCH_STATEMENTS,
    ),
    # Version 2 tells change feeds of writes: the watched namespaces, and the functions
    # that watch one (with triggers of its own) and send its notices.
    migrations={1: WATCH_STATEMENTS},
    readable_from=1,  # version 1 lacks only the notices, which only change feeds need
)

_NOW = "extract(epoch FROM clock_timestamp())"
_KEEP_ID = f"(ARRAY[$4::bytea] || t.write_ids)[1:{WRITE_IDS_KEPT}]"
_SET = (
    "INSERT INTO statekernel_profile_entries AS t "
    f"VALUES ($1, $2, $3, 1, {_NOW}, ARRAY[$4::bytea]) "
    "ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value, "
    f"version = t.version + 1, updated_at = EXCLUDED.updated_at, write_ids = {_KEEP_ID} "
    "RETURNING version, updated_at"
)
_CREATE = (
    "INSERT INTO statekernel_profile_entries AS t "
    f"VALUES ($1, $2, $3, 1, {_NOW}, ARRAY[$4::bytea]) "
    "ON CONFLICT (namespace, key) DO NOTHING RETURNING version, updated_at"
)
_REPLACE = (
    "UPDATE statekernel_profile_entries AS t SET value = $3, version = t.version + 1, "
    f"updated_at = {_NOW}, write_ids = {_KEEP_ID} "
    "WHERE namespace = $1 AND key = $2 AND version = $5 RETURNING version, updated_at"
)
_GET = (
    "SELECT value, version, updated_at FROM statekernel_profile_entries "
    "WHERE namespace = $1 AND key = $2"
)
# An update's read, locked: with the ids of the entry's last writes, so that an update sent
# again finds an earlier try of its own that landed (see `_Update.run`).
_LOCK = (
    "SELECT value, version, updated_at, write_ids FROM statekernel_profile_entries "
    "WHERE namespace = $1 AND key = $2 FOR UPDATE"
)
# Many entries in one statement ($1 namespaces, $2 keys): the group-committed form of _GET.
_GET_MANY = (
    "SELECT s.namespace, s.key, t.value, t.version, t.updated_at "
    "FROM unnest($1::text[], $2::text[]) AS s(namespace, key) "
    "JOIN statekernel_profile_entries AS t ON t.namespace = s.namespace AND t.key = s.key"
)
# The group-committed form of _SET, _CREATE and _REPLACE: one row per set of a different
# entry ($1-$5), each on its own condition (a null expected version: last write wins). Every
# set answers with the version it wrote, or, for a compare-and-set that did not hold, none
# and the version the statement found (its snapshot's: the one its condition was tested on,
# unless a concurrent write moved the row while the statement waited for it).
_SET_MANY = f"""
WITH s AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bigint[])
        AS s(namespace, key, value, write_id, expected)
),
plain AS (
    INSERT INTO statekernel_profile_entries AS t
    SELECT namespace, key, value, 1, {_NOW}, ARRAY[write_id] FROM s WHERE expected IS NULL
    ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value,
        version = t.version + 1, updated_at = EXCLUDED.updated_at,
        write_ids = (EXCLUDED.write_ids || t.write_ids)[1:{WRITE_IDS_KEPT}]
    RETURNING namespace, key, version, updated_at
),
created AS (
    INSERT INTO statekernel_profile_entries AS t
    SELECT namespace, key, value, 1, {_NOW}, ARRAY[write_id] FROM s WHERE expected = 0
    ON CONFLICT (namespace, key) DO NOTHING
    RETURNING namespace, key, version, updated_at
),
replaced AS (
    UPDATE statekernel_profile_entries AS t SET value = s.value, version = t.version + 1,
        updated_at = {_NOW}, write_ids = (ARRAY[s.write_id] || t.write_ids)[1:{WRITE_IDS_KEPT}]
    FROM s
    WHERE s.expected > 0 AND t.namespace = s.namespace AND t.key = s.key
        AND t.version = s.expected
    RETURNING t.namespace, t.key, t.version, t.updated_at
),
written AS (
    SELECT * FROM plain UNION ALL SELECT * FROM created UNION ALL SELECT * FROM replaced
)
SELECT s.namespace, s.key, w.version, w.updated_at, t.version
FROM s
LEFT JOIN written AS w ON w.namespace = s.namespace AND w.key = s.key
LEFT JOIN statekernel_profile_entries AS t
    ON w.version IS NULL AND t.namespace = s.namespace AND t.key = s.key
"""
_WRITES_MANY = (
    "SELECT s.namespace, s.key, t.version, t.updated_at, t.write_ids "
    "FROM unnest($1::text[], $2::text[]) AS s(namespace, key) "
    "JOIN statekernel_profile_entries AS t ON t.namespace = s.namespace AND t.key = s.key"
)
_WRITES = (
    "SELECT version, updated_at, write_ids FROM statekernel_profile_entries "
    "WHERE namespace = $1 AND key = $2"
)
_DELETE = "DELETE FROM statekernel_profile_entries WHERE namespace = $1 AND key = $2"
_CLEAR = "DELETE FROM statekernel_profile_entries WHERE namespace = $1"
_LIST = (
    "SELECT key, value, version, updated_at FROM statekernel_profile_entries WHERE namespace = $1"
)
_LIST_ALL = _LIST + " ORDER BY key"
_NAMESPACES = "SELECT DISTINCT namespace FROM statekernel_profile_entries ORDER BY namespace"
_LIST_FROM = _LIST + " AND key >= $2 ORDER BY key"
_LIST_RANGE = _LIST + " AND key >= $2 AND key < $3 ORDER BY key"


class PostgresProfileStore(ClosingStore):
    """A `ProfileStore` in a PostgreSQL database (its table created on first use).

    For agents on many hosts; it needs the extra `statekernel[postgres]` (without asyncpg
    installed, constructing it raises `ImportError` naming the extra). Every operation is
    one statement over a bounded pool. It `SupportsAtomicUpdate` (the row stays locked
    while the function runs), and also `SupportsNamespaces` and `AcceptsEncodedValues`. It
    may share its database with a `PostgresThreadStore`. See [PostgreSQL](postgres.md).

    - `dsn` is a libpq URI (`postgresql://user:password@host/db`) or `key=value` string
      (`host=db.internal dbname=agents user=agent password=...`). The store's repr shows
      it without its password.
    - `pool_size` bounds this store's connections.
    - `retry_for` is how long, in seconds, a transient failure (the server restarting, a
      broken connection) is retried before a `StoreError`; a write is never applied twice.
    - `call_timeout` is how long, in seconds, any one call may take, retries included, even
      on a connection that stops answering: then it raises `StoreError` saying whether the
      write was applied, not applied, or is unknown (asked again by the store's next call).
    - `statement_cache_size` is asyncpg's: None keeps its default until a transaction
      pooler (PgBouncer) is detected, then 0; give 0 behind one to start that way.
    - `max_value_bytes` (16 MiB by default) refuses larger values (as encoded JSON) with
      `StoreError` before any write.
    - `read_only=True` creates, migrates and writes nothing (each read runs in a read-only
      transaction, and a write raises `StoreError`); a database without this store's table
      at this statekernel's schema version is refused.
    - `listen_dsn` is where change feeds (`store.changes(namespace)`) open their listening
      connection, the store's `dsn` unless given. `LISTEN` needs a session of its own on
      the server: behind a transaction pooler (PgBouncer's transaction pooling) give the
      server's own DSN here.

    It `SupportsChanges`: every process's writes to an entry of a watched namespace send a
    notice (`LISTEN`/`NOTIFY`) in the write's own transaction, so a feed woken by it finds
    the write. See [PostgreSQL: change feeds](postgres.md#change-feeds).
    """

    accepts_encoded_values: ClassVar[bool] = True  # see statekernel.lowlevel.EncodedValue

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 10,
        retry_for: float = 30.0,
        call_timeout: float = 30.0,
        statement_cache_size: int | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        read_only: bool = False,
        listen_dsn: str | None = None,
    ) -> None:
        if listen_dsn is not None and (not isinstance(listen_dsn, str) or not listen_dsn):
            raise TypeError(
                "listen_dsn must be a PostgreSQL connection string such as "
                "'postgresql://user@host:5432/db' (or None: the store's dsn)"
            )
        self._dsn = dsn
        self._db = PostgresConnection(
            as_uri(dsn),
            _SCHEMA,
            pool_size=pool_size,
            retry_for=retry_for,
            call_timeout=call_timeout,
            statement_cache_size=statement_cache_size,
            read_only=read_only,
        )
        self._max_value_bytes = max_value_bytes
        self._watchers = Watchers()
        self._listener = Listener(
            as_uri(dsn if listen_dsn is None else listen_dsn),
            self._db,
            self._watchers,
            call_timeout=call_timeout,
        )
        self._writing: dict[tuple[str, str], _Turn] = {}
        # Gets and sets that arrive while others are in flight leave together, at most
        # `_IN_FLIGHT` batches of each at a time (see group_commit).
        slots = min(_IN_FLIGHT, pool_size)
        self._gets: GroupCommit[tuple[str, str], Any] = GroupCommit(
            self._send_gets,
            key=None,
            in_flight=slots,
            largest=_LARGEST_BATCH,
            deadline=call_ends,
        )
        self._sets: GroupCommit[_Set, tuple[int, float]] = GroupCommit(
            self._send_sets,
            key=_Set.entry,
            in_flight=slots,
            largest=_LARGEST_BATCH,
            size=lambda write: len(write.data),
            budget=_BATCH_BYTES,
            deadline=call_ends,
        )

    @contextlib.asynccontextmanager
    async def _in_call_order(self, namespace: str, key: str, operation: str) -> AsyncIterator[None]:
        """Writes of one entry through this store reach the server in the order they were
        called, as with the other stores (the pool's connections would race them); writes of
        different entries do not wait for each other. A write waits its turn no longer
        than its call's deadline."""
        entry = (namespace, key)
        turn = await self._db.queued(operation, namespace, self._turn(entry))
        try:
            yield
        finally:
            self._pass_on(entry, turn)

    async def _turn(self, entry: tuple[str, str]) -> _Turn:
        """Wait for `entry`'s turn (its earlier writes through this store have finished)."""
        turn = self._writing.get(entry)
        if turn is None:
            turn = self._writing[entry] = _Turn()
        turn.users += 1
        try:
            await turn.lock.acquire()
        except BaseException:
            turn.users -= 1
            self._forget(entry, turn)
            raise
        return turn

    def _pass_on(self, entry: tuple[str, str], turn: _Turn) -> None:
        turn.lock.release()
        turn.users -= 1
        self._forget(entry, turn)

    def _forget(self, entry: tuple[str, str], turn: _Turn) -> None:
        if turn.users == 0 and self._writing.get(entry) is turn:
            del self._writing[entry]

    @property
    def dsn(self) -> str:
        """The DSN the store connects to, as it was given (password included)."""
        return self._dsn

    def __repr__(self) -> str:
        return f"PostgresProfileStore({redacted(self._dsn)!r})"

    async def get(self, namespace: str, key: str) -> Entry | None:
        namespace, key = check_names(namespace, key)
        with self._db.call():
            ticket = self._gets.submit((namespace, key))
            row = await self._db.queued(
                f"get of entry {key!r}", namespace, GroupCommit.outcome(ticket), writes=False
            )
        if row is None:
            return None
        value = decode_value(namespace, key, row[0])
        return Entry(namespace, key, value, row[1], row[2])

    async def _send_gets(self, entries: Sequence[tuple[str, str]]) -> builtins.list[Any]:
        """The rows (value, version, updated_at) of a batch of gets, in order."""
        if len(entries) == 1:
            namespace, key = entries[0]

            async def get(conn: Any) -> Any:
                return await conn.fetchrow(_GET, namespace, key)

            return [await self._db.read(f"get of entry {key!r}", namespace, get)]

        async def get_many(conn: Any) -> Any:
            return await conn.fetch(_GET_MANY, *columns(entries, 2))

        rows = await self._db.read(f"get of {len(entries)} entries", None, get_many)
        found = {(row[0], row[1]): row[2:] for row in rows}
        return [found.get(entry) for entry in entries]

    async def set(
        self, namespace: str, key: str, value: Any, *, expected_version: int | None = None
    ) -> Entry:
        namespace, key = check_names(namespace, key)
        expected = check_expected_version(expected_version)
        encoded = encode_entry(namespace, key, value, self._max_value_bytes)
        write = _Set(namespace, key, encoded.data.decode(), expected, os.urandom(16))
        with self._db.call():
            version, updated_at = await self._set_in_batch(write)
        return Entry(namespace, key, encoded.value, version, updated_at)

    async def _set_in_batch(self, write: _Set) -> tuple[int, float]:
        """A set, sent with the others that wait (see group_commit), in call order: the
        entry's turn is held until its outcome is known, so a batch never holds two writes
        of one entry, nor one whose condition an earlier write of this store still moves."""
        entry = write.entry()
        turn = await self._db.queued(write.operation, write.namespace, self._turn(entry))
        ticket = self._sets.submit(write)
        try:
            return await self._db.queued(
                write.operation,
                write.namespace,
                asyncio.shield(ticket.outcome),
                left=lambda: ticket.left,
            )
        finally:
            if ticket.outcome.done() or ticket.withdraw():
                self._pass_on(entry, turn)
            else:  # cancelled on its way: the entry's next write waits for it to land
                ticket.outcome.add_done_callback(lambda _: self._pass_on(entry, turn))

    async def _send_sets(self, sets: Sequence[_Set]) -> builtins.list[Any]:
        """Write a batch of sets of different entries: each caller's outcome, in order."""
        answered: Mapping[tuple[str, str], _Answer] = {}
        if len(sets) > 1:
            batch = _SetBatch(tuple(sets))
            try:
                answered = await self._db.write(f"set of {len(sets)} entries", None, batch)
            except StoreError as error:  # the batch as a whole: each caller its own error
                kind = OutcomeUnknown if isinstance(error, OutcomeUnknown) else StoreError
                return [kind(w.operation, error.cause, key=w.namespace) for w in sets]
        # A set the batch left unanswered is sent alone, and lands or says why: one of a
        # batch the server refused as a whole, or a compare-and-set whose entry a concurrent
        # write moved while the statement waited for it.
        alone = [write for write in sets if write.entry() not in answered]
        sent = await asyncio.gather(
            *(self._db.write(write.operation, write.namespace, write) for write in alone),
            return_exceptions=True,
        )
        outcomes: dict[tuple[str, str], Any] = dict(answered)
        outcomes.update(zip((write.entry() for write in alone), sent, strict=True))
        return [outcomes[write.entry()] for write in sets]

    async def update(self, namespace: str, key: str, fn: Callable[[Entry | None], Any]) -> Entry:
        """Set the entry to `fn(current entry or None)` in one transaction.

        The row stays locked while `fn` runs, so no other writer (in any process) comes in
        between the read and the write: `fn` must be pure and quick. Its exceptions propagate
        unchanged, and nothing is written.
        """
        namespace, key = check_names(namespace, key)
        write = _Update(namespace, key, fn, self._max_value_bytes, os.urandom(16))
        operation = f"update of entry {key!r}"
        with self._db.call():
            async with self._in_call_order(namespace, key, operation):
                return await self._db.write(operation, namespace, write)

    async def delete(self, namespace: str, key: str) -> None:
        namespace, key = check_names(namespace, key)
        delete = _Statement(_DELETE, (namespace, key))
        operation = f"delete of entry {key!r}"
        with self._db.call():
            async with self._in_call_order(namespace, key, operation):
                await self._db.write(operation, namespace, delete)

    async def list(self, namespace: str, prefix: str = "") -> builtins.list[Entry]:
        namespace, prefix = check_names(namespace, prefix)
        upper = prefix_upper_bound(prefix)

        async def rows(conn: Any) -> Any:
            if not prefix:
                return await conn.fetch(_LIST_ALL, namespace)
            if upper is None:
                return await conn.fetch(_LIST_FROM, namespace, prefix)
            return await conn.fetch(_LIST_RANGE, namespace, prefix, upper)

        found = await self._db.read(f"list of prefix {prefix!r}", namespace, rows)
        return listed(namespace, (tuple(row) for row in found if row[0].startswith(prefix)))

    async def namespaces(self, prefix: str = "") -> builtins.list[str]:
        _, prefix = check_names("namespaces", prefix)

        async def rows(conn: Any) -> Any:
            return await conn.fetch(_NAMESPACES)

        found = await self._db.read("list of namespaces", None, rows)
        return [str(row[0]) for row in found if str(row[0]).startswith(prefix)]

    async def clear(self, namespace: str) -> None:
        namespace, _ = check_names(namespace, "")
        await self._db.write("clear", namespace, _Statement(_CLEAR, (namespace,)))

    def changes(self, namespace: str) -> ChangeFeed:
        """A feed of the keys of `namespace` written by anyone from the moment it is entered
        (`async with store.changes(namespace) as feed:`), told by `LISTEN`/`NOTIFY`.

        Entering connects (within `call_timeout`) and watches the namespace, which is a
        write the first time any feed of it is entered in the database: on a read-only
        server, or a store with `read_only=True`, a namespace nobody registered yet raises
        `StoreError` saying so. After a lost connection, `next()` connects again for as long
        as it is awaited and returns None once it listens again."""
        namespace, _ = check_names(namespace, "")
        return Feed(self._watchers, namespace, self._listener)

    async def close(self) -> None:
        """Close the pool's connections (after the operations in flight) and the change
        feeds' listening connection; the store reopens them on next use (an entered feed
        reports None once, then goes on)."""
        await self._listener.close()
        await self._sets.drain()
        await self._gets.drain()
        await self._db.close()


@attrs.define(eq=False)
class _Turn:
    """An entry's writes waiting in call order: the lock, and how many hold or wait for it."""

    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    users: int = 0


@attrs.frozen
class _Statement:
    """A write that lands the same however often it runs (a delete)."""

    sql: str
    args: tuple[Any, ...]

    async def run(self, conn: Any) -> None:
        await conn.execute(self.sql, *self.args)

    async def settle(self, conn: Any) -> Settled[None]:
        return Settled(Outcome.NOT_APPLIED)  # running it again is harmless


@attrs.frozen
class _Set:
    namespace: str
    key: str
    data: str
    expected: int | None
    write_id: bytes

    @property
    def operation(self) -> str:
        return f"set of entry {self.key!r}"

    def entry(self) -> tuple[str, str]:
        return self.namespace, self.key

    async def run(self, conn: Any) -> tuple[int, float]:
        args = (self.namespace, self.key, self.data, self.write_id)
        while True:
            if self.expected is None:
                row = await conn.fetchrow(_SET, *args)
            elif self.expected == 0:
                row = await conn.fetchrow(_CREATE, *args)
            else:
                row = await conn.fetchrow(_REPLACE, *args, self.expected)
            if row is not None:
                return int(row[0]), float(row[1])
            # The compare-and-set failed: say against what (unless the entry changed back).
            current = await conn.fetchrow(_WRITES, self.namespace, self.key)
            check_expected(self.namespace, self.key, self.expected, _version(current))

    async def settle(self, conn: Any) -> Settled[tuple[int, float]]:
        row = await conn.fetchrow(_WRITES, self.namespace, self.key)
        outcome, landed = self.outcome(row)
        if outcome is Outcome.NOT_APPLIED:  # raises if another write took its place
            check_expected(self.namespace, self.key, self.expected, _version(row))
        return Settled(outcome, landed)

    def outcome(self, row: Any) -> tuple[Outcome, tuple[int, float] | None]:
        """What became of this set, given its entry's row now (version, updated_at, write
        ids), with the (version, updated_at) it wrote if it landed. Not applied when sending
        it again is safe: last write wins (sending it again is writing it later), or it is
        a compare-and-set whose id the row would still hold had it landed. Unknown when too
        many writes came since for the row to say."""
        landed = _landed(row, self.write_id)
        if landed is not None:
            return Outcome.APPLIED, landed
        current = _version(row)
        if self.expected is None or current is None or current - self.expected < WRITE_IDS_KEPT:
            return Outcome.NOT_APPLIED, None
        return Outcome.UNKNOWN, None

    def conflict(self, found: int | None) -> VersionConflict | None:
        """The error of this compare-and-set, had it found version `found` (None: no
        entry), exactly as a set alone raises it; None when it would have passed."""
        try:
            check_expected(self.namespace, self.key, self.expected, found)
        except VersionConflict as conflict:
            return conflict
        return None


_Answer = tuple[int, float] | BaseException
"""A set's answer from a batch: the (version, updated_at) it wrote, or the error its caller
gets (a `VersionConflict`, an `OutcomeUnknown`)."""


@attrs.frozen
class _SetBatch:
    """Sets of different entries in one statement, each on its own condition. Its result
    answers each set it could (see `_Answer`); a set it leaves out is sent again alone. It
    is empty when the server refused the statement as a whole."""

    sets: tuple[_Set, ...]

    async def run(self, conn: Any) -> Mapping[tuple[str, str], _Answer]:
        sets = self.sets
        try:
            rows = await conn.fetch(
                _SET_MANY,
                [write.namespace for write in sets],
                [write.key for write in sets],
                [write.data for write in sets],
                [write.write_id for write in sets],
                [write.expected for write in sets],
            )
        except Exception as error:
            if refused(error):  # nothing landed; each set on its own finds the culprit
                return {}
            raise
        by_entry = {write.entry(): write for write in sets}
        answers: dict[tuple[str, str], _Answer] = {}
        for row in rows:
            entry = (row[0], row[1])
            if row[2] is not None:
                answers[entry] = (int(row[2]), float(row[3]))
                continue
            found = None if row[4] is None else int(row[4])
            # Found at its expected version, its condition failed on a write that moved the
            # entry while the statement waited: left out, sent alone, it names that one.
            conflict = by_entry[entry].conflict(found)
            if conflict is not None:
                answers[entry] = conflict
        return answers

    async def settle(self, conn: Any) -> Settled[Mapping[tuple[str, str], _Answer]]:
        """What became of each set (`_Set.outcome`), by its write id. The batch's own
        outcome says what is done with it: sent again whole when none of it landed, every
        caller told unknown when no set can say, and else each set answered on its own
        (a set not applied is sent again alone)."""
        rows = await conn.fetch(_WRITES_MANY, *columns([w.entry() for w in self.sets], 2))
        current = {(row[0], row[1]): row[2:] for row in rows}
        found = {w.entry(): w.outcome(current.get(w.entry())) for w in self.sets}
        # One statement: if one set of it landed, every set without a condition did too,
        # though its row may no longer remember by which version.
        landed = any(outcome is Outcome.APPLIED for outcome, _ in found.values())
        answers: dict[tuple[str, str], _Answer] = {}
        parts: dict[str, Outcome] = {}
        for write in self.sets:
            outcome, written = found[write.entry()]
            if landed and write.expected is None:
                outcome = Outcome.APPLIED
            parts[f"entry {write.key!r} in {write.namespace!r}"] = outcome
            if written is not None:
                answers[write.entry()] = written
            elif outcome is not Outcome.NOT_APPLIED:
                answers[write.entry()] = outcome_unknown(
                    write.operation, write.namespace, UNTRACEABLE
                )
        outcomes = set(parts.values())
        if outcomes == {Outcome.NOT_APPLIED}:
            return Settled(Outcome.NOT_APPLIED, None, parts)
        if outcomes == {Outcome.UNKNOWN}:
            return Settled(Outcome.UNKNOWN, None, parts)
        return Settled(Outcome.APPLIED, answers, parts)


@attrs.frozen
class _Update:
    namespace: str
    key: str
    fn: Callable[[Entry | None], Any]
    max_bytes: int
    write_id: bytes
    read_version: list[int] = attrs.field(factory=list)  # the version the last try read
    written: list[Any] = attrs.field(factory=list)  # the value the last try wrote

    async def run(self, conn: Any) -> Entry:
        namespace, key = self.namespace, self.key
        while True:
            self.read_version.clear()  # (a try that fails before its read wrote nothing)
            async with conn.transaction():
                row = await conn.fetchrow(_LOCK, namespace, key)
                landed = None if row is None else _landed((row[1], row[2], row[3]), self.write_id)
                if landed is not None and self.written:
                    # An earlier try landed though it was settled as not applied (asked
                    # while it was still in doubt, with no server process known to end):
                    # under the row's lock, which that try held, its id is the truth.
                    logger.info(
                        "PostgreSQL store: the update of entry %r found that an earlier try "
                        "of it, its answer lost, had landed; it is not applied again",
                        key,
                    )
                    return Entry(namespace, key, self.written[0], *landed)
                old = None
                if row is not None:
                    value = decode_value(namespace, key, row[0])
                    old = Entry(namespace, key, value, row[1], row[2])
                self.read_version[:] = [0 if old is None else old.version]
                try:
                    new = self.fn(old)
                except Exception as error:
                    raise UserCodeFailed(error) from error
                encoded = encode_entry(namespace, key, new, self.max_bytes)
                self.written[:] = [encoded.value]
                args = (namespace, key, encoded.data.decode(), self.write_id)
                if old is None:
                    done = await conn.fetchrow(_CREATE, *args)
                    if done is None:  # another writer created it first: read it, locked
                        continue
                else:
                    done = await conn.fetchrow(_REPLACE, *args, old.version)
            return Entry(namespace, key, encoded.value, int(done[0]), float(done[1]))

    async def settle(self, conn: Any) -> Settled[Entry]:
        row = await conn.fetchrow(_WRITES, self.namespace, self.key)
        landed = _landed(row, self.write_id)
        if landed is not None and self.written:
            version, updated_at = landed
            entry = Entry(self.namespace, self.key, self.written[0], version, updated_at)
            return Settled(Outcome.APPLIED, entry)
        if not self.read_version:  # the last try failed before its read: it wrote nothing
            return Settled(Outcome.NOT_APPLIED)
        read = self.read_version[0]
        current = _version(row) or 0
        if current - read < WRITE_IDS_KEPT:
            return Settled(Outcome.NOT_APPLIED)  # it would still hold this write's id
        return Settled(Outcome.UNKNOWN)


def _version(row: Any) -> int | None:
    return None if row is None else int(row[0])


def _landed(row: Any, write_id: bytes) -> tuple[int, float] | None:
    """The (version, updated_at) this write produced, if the entry still remembers its id."""
    if row is None:
        return None
    ids = list(row[2])
    if write_id not in ids:
        return None
    return int(row[0]) - ids.index(write_id), float(row[1])
