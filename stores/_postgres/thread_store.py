"""The PostgreSQL ThreadStore: each thread's journal in three tables, for agents on many hosts.

`statekernel_thread_heads` holds one small head row per thread (its write position and
revision as plain columns, the kernel's head document, the ids of its last saves),
`statekernel_thread_records` its commit records and `statekernel_thread_snapshots` its
periodic snapshots. A save is one statement: a data-modifying CTE that moves the head by
compare-and-set on the write position (and on the revision the records continue) and, only
if that row moved, appends the records and the snapshot. One statement is one transaction,
so a save lands whole or not at all, in one round trip, and no lock (of this process or of a
table) serialises saves of different threads. A load is one statement too, so it sees one
consistent state of the head, the newest snapshot and the records after it.

Saves of different threads that arrive while others are in flight are sent together
(`group_commit`): one statement moves every head whose compare-and-set holds and appends
only those heads' records, so each thread's save still lands whole or not at all, and a save
whose head did not move is sent again on its own, which says why. A batch waits for its
slowest row: a head locked by another process's transaction holds up the saves batched with
it until that transaction ends."""

from __future__ import annotations

import asyncio
import builtins
import operator
import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from statekernel import RevisionConflict, StoreError
from statekernel.lowlevel import JournalEntry, ThreadHead, ThreadSave, ThreadSnapshot, ThreadState

from .._closing import ClosingStore
from .._key_range import prefix_upper_bound
from .._thread_codec import (
    check_listing,
    check_position,
    check_records,
    check_save,
    check_since,
    check_thread_id,
    decode_head,
    decode_snapshot,
    encode_head,
    encode_snapshot,
    prune_point,
    snapshot_taken_at,
    state_of,
)
from .connection import (
    UNTRACEABLE,
    WRITE_IDS_KEPT,
    Outcome,
    PostgresConnection,
    Schema,
    Settled,
    call_ends,
    columns,
    outcome_unknown,
    refused,
)
from .dsn import as_uri, redacted
from .group_commit import GroupCommit

__all__ = ["PostgresThreadStore"]

_EVENTS_TABLE = """
CREATE TABLE IF NOT EXISTS statekernel_thread_events (
    thread_id TEXT COLLATE "C" NOT NULL,
    position  BIGINT NOT NULL,
    revision  BIGINT NOT NULL,
    events    BYTEA NOT NULL,
    PRIMARY KEY (thread_id, position)
)
"""

_SCHEMA = Schema(
    component="thread_store",
    version=2,
    statements=(
        """
        CREATE TABLE statekernel_thread_heads (
            thread_id TEXT COLLATE "C" PRIMARY KEY,
            position  BIGINT NOT NULL,
            revision  BIGINT NOT NULL,
            head      BYTEA NOT NULL,
            save_ids  BYTEA[] NOT NULL,
            saved_at  DOUBLE PRECISION NOT NULL
        )
        """,
        """
        CREATE TABLE statekernel_thread_records (
            thread_id TEXT COLLATE "C" NOT NULL,
            revision  BIGINT NOT NULL,
            record    BYTEA NOT NULL,
            PRIMARY KEY (thread_id, revision)
        )
        """,
        """
        CREATE TABLE statekernel_thread_snapshots (
            thread_id TEXT COLLATE "C" NOT NULL,
            revision  BIGINT NOT NULL,
            snapshot  BYTEA NOT NULL,
            PRIMARY KEY (thread_id, revision)
        )
        """,
        _EVENTS_TABLE,
    ),
    # Version 2 keeps each save's run events (`ThreadSave.events`), for the trace.
    migrations={1: (_EVENTS_TABLE,)},
    readable_from=1,  # version 1 lacks only the run events, which read as none
)

_NOW = "extract(epoch FROM clock_timestamp())"
# What a save appends once its head moved ($1 thread id; the records, the snapshot and the
# run events from parameter `n` on, numbered by _appending).
_APPEND = """
events AS (
    INSERT INTO statekernel_thread_events (thread_id, position, revision, events)
    SELECT head.thread_id, head.position, ${4}::bigint, ${5}::bytea FROM head
    WHERE ${5}::bytea IS NOT NULL
),
records AS (
    INSERT INTO statekernel_thread_records (thread_id, revision, record)
    SELECT head.thread_id, r.revision, r.record
    FROM head, unnest(${0}::bigint[], ${1}::bytea[]) AS r(revision, record)
),
snapshot AS (
    INSERT INTO statekernel_thread_snapshots (thread_id, revision, snapshot)
    SELECT head.thread_id, ${2}::bigint, ${3}::bytea FROM head WHERE ${3}::bytea IS NOT NULL
    ON CONFLICT (thread_id, revision) DO UPDATE SET snapshot = EXCLUDED.snapshot
)
SELECT count(*) FROM head
"""


def _appending(first: int) -> str:
    return _APPEND.format(*range(first, first + 6))


_CREATE = (
    "WITH head AS (INSERT INTO statekernel_thread_heads "
    "(thread_id, position, revision, head, save_ids, saved_at) "
    f"VALUES ($1, 1, $2, $3, ARRAY[$4::bytea], {_NOW}) "
    "ON CONFLICT (thread_id) DO NOTHING RETURNING thread_id, position),"
) + _appending(5)
_ADVANCE = (
    "WITH head AS (UPDATE statekernel_thread_heads AS h SET position = h.position + 1, "
    f"revision = $2, head = $3, save_ids = (ARRAY[$4::bytea] || h.save_ids)[1:{WRITE_IDS_KEPT}], "
    f"saved_at = {_NOW} "
    "WHERE h.thread_id = $1 AND h.position = $11 AND h.revision = $12 "
    "RETURNING h.thread_id, h.position),"
) + _appending(5)
# Many threads' saves in one statement ($1-$6 one row per save, $7-$9 every record, $10-$12
# every snapshot, $13-$15 every save's run events): the heads that move are those whose
# compare-and-set holds, and only their records, snapshots and events are written. Returns
# the moved thread ids.
_SAVE_MANY = f"""
WITH saves AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bytea[],
        $6::bytea[]) AS s(thread_id, expected, base, revision, head, save_id)
),
created AS (
    INSERT INTO statekernel_thread_heads (thread_id, position, revision, head, save_ids, saved_at)
    SELECT thread_id, 1, revision, head, ARRAY[save_id], {_NOW} FROM saves WHERE expected = 0
    ON CONFLICT (thread_id) DO NOTHING RETURNING thread_id, position
),
advanced AS (
    UPDATE statekernel_thread_heads AS h SET position = h.position + 1, revision = s.revision,
        head = s.head, save_ids = (ARRAY[s.save_id] || h.save_ids)[1:{WRITE_IDS_KEPT}],
        saved_at = {_NOW}
    FROM saves AS s
    WHERE s.expected > 0 AND h.thread_id = s.thread_id AND h.position = s.expected
        AND h.revision = s.base
    RETURNING h.thread_id, h.position
),
moved AS (
    SELECT thread_id, position FROM created UNION ALL SELECT thread_id, position FROM advanced
),
events AS (
    INSERT INTO statekernel_thread_events (thread_id, position, revision, events)
    SELECT m.thread_id, m.position, e.revision, e.events
    FROM unnest($13::text[], $14::bigint[], $15::bytea[]) AS e(thread_id, revision, events)
    JOIN moved AS m ON m.thread_id = e.thread_id
),
records AS (
    INSERT INTO statekernel_thread_records (thread_id, revision, record)
    SELECT r.thread_id, r.revision, r.record
    FROM unnest($7::text[], $8::bigint[], $9::bytea[]) AS r(thread_id, revision, record)
    WHERE r.thread_id IN (SELECT thread_id FROM moved)
),
snapshots AS (
    INSERT INTO statekernel_thread_snapshots (thread_id, revision, snapshot)
    SELECT n.thread_id, n.revision, n.snapshot
    FROM unnest($10::text[], $11::bigint[], $12::bytea[]) AS n(thread_id, revision, snapshot)
    WHERE n.thread_id IN (SELECT thread_id FROM moved)
    ON CONFLICT (thread_id, revision) DO UPDATE SET snapshot = EXCLUDED.snapshot
)
SELECT thread_id FROM moved
"""
_HEADS = (
    "SELECT thread_id, position, save_ids FROM statekernel_thread_heads "
    "WHERE thread_id = ANY($1::text[])"
)
_HEAD = "SELECT position, revision, save_ids FROM statekernel_thread_heads WHERE thread_id = $1"
_HEAD_SEAL = "SELECT position, head FROM statekernel_thread_heads WHERE thread_id = $1"
# Every record after the snapshot, those past the head too: no save leaves one there (a
# save's records and head move in one statement), so the kernel reports one as damage.
_LOAD = """
SELECT h.position, h.head, s.revision, s.snapshot,
    (SELECT array_agg(r.revision ORDER BY r.revision) FROM statekernel_thread_records r
     WHERE r.thread_id = h.thread_id AND r.revision > coalesce(s.revision, 0)),
    (SELECT array_agg(r.record ORDER BY r.revision) FROM statekernel_thread_records r
     WHERE r.thread_id = h.thread_id AND r.revision > coalesce(s.revision, 0))
FROM statekernel_thread_heads h
LEFT JOIN LATERAL (
    SELECT revision, snapshot FROM statekernel_thread_snapshots
    WHERE thread_id = h.thread_id AND revision <= h.revision ORDER BY revision DESC LIMIT 1
) s ON true
WHERE h.thread_id = $1
"""
# `_LOAD` less what a reader at revision $2 holds: the newest snapshot's bytes only when it
# is newer than that, and the records after whichever is newer.
_LOAD_SINCE = """
SELECT h.position, h.head, s.revision,
    CASE WHEN s.revision > $2 THEN
        (SELECT snapshot FROM statekernel_thread_snapshots
         WHERE thread_id = h.thread_id AND revision = s.revision)
    END,
    (SELECT array_agg(r.revision ORDER BY r.revision) FROM statekernel_thread_records r
     WHERE r.thread_id = h.thread_id AND r.revision > greatest(coalesce(s.revision, 0), $2)
       AND r.revision <= h.revision),
    (SELECT array_agg(r.record ORDER BY r.revision) FROM statekernel_thread_records r
     WHERE r.thread_id = h.thread_id AND r.revision > greatest(coalesce(s.revision, 0), $2)
       AND r.revision <= h.revision)
FROM statekernel_thread_heads h
LEFT JOIN LATERAL (
    SELECT revision FROM statekernel_thread_snapshots
    WHERE thread_id = h.thread_id AND revision <= h.revision ORDER BY revision DESC LIMIT 1
) s ON true
WHERE h.thread_id = $1
"""
_RECORDS = (
    "SELECT revision, record FROM statekernel_thread_records WHERE thread_id = $1 "
    "AND revision > $2 AND revision <= $3 ORDER BY revision LIMIT $4"
)
_SNAPSHOT_AT = (
    "SELECT revision, snapshot FROM statekernel_thread_snapshots WHERE thread_id = $1 "
    "AND revision <= $2 ORDER BY revision DESC LIMIT 1"
)
_SNAPSHOT_REVISIONS = "SELECT revision FROM statekernel_thread_snapshots WHERE thread_id = $1"
_PRUNE = (
    "DELETE FROM statekernel_thread_records WHERE thread_id = $1 AND revision <= $2",
    "DELETE FROM statekernel_thread_snapshots WHERE thread_id = $1 AND revision < $2",
    "DELETE FROM statekernel_thread_events WHERE thread_id = $1 AND revision < $2",
)
_EVENTS = "SELECT events FROM statekernel_thread_events WHERE thread_id = $1 ORDER BY position"
_HAS_EVENTS = "SELECT to_regclass('statekernel_thread_events')"
_DELETE = (
    "DELETE FROM statekernel_thread_heads WHERE thread_id = $1",
    "DELETE FROM statekernel_thread_records WHERE thread_id = $1",
    "DELETE FROM statekernel_thread_snapshots WHERE thread_id = $1",
    "DELETE FROM statekernel_thread_events WHERE thread_id = $1",
)
_THREADS_FROM = (
    "SELECT thread_id FROM statekernel_thread_heads WHERE thread_id >= $1 "
    "ORDER BY thread_id LIMIT $2"
)
_THREADS_RANGE = (
    "SELECT thread_id FROM statekernel_thread_heads WHERE thread_id >= $1 AND thread_id < $3 "
    "ORDER BY thread_id LIMIT $2"
)
_NO_END = 2**63 - 1
_LARGEST_BATCH = 500  # saves in one statement
_IN_FLIGHT = 2  # batches at a time (see group_commit)
_BATCH_BYTES = 8 * 1024 * 1024  # records and snapshots in one statement, unless one is larger


class PostgresThreadStore(ClosingStore):
    """A `ThreadStore` in a PostgreSQL database (its tables created on first use).

    It needs the extra `statekernel[postgres]` (without asyncpg installed, constructing it
    raises `ImportError` naming the extra). Each save is one statement that compares the
    write position and appends. Saves of different threads that arrive while others are in
    flight leave together as one statement (group commit), each still landing or failing on
    its own compare-and-set, and no lock serialises them. It may share its database (and
    its DSN) with a `PostgresProfileStore`. It `SupportsHead`, `SupportsLoadSince` and
    `SupportsRunEvents`. See [PostgreSQL](postgres.md).

    - `dsn` is a libpq URI (`postgresql://user:password@host/db`) or `key=value` string
      (`host=db.internal dbname=agents user=agent password=...`). The store's repr shows
      it without its password.
    - `pool_size` bounds this store's connections.
    - `retry_for` is how long, in seconds, a transient failure (the server restarting, a
      broken connection) is retried before a `StoreError`.
    - `call_timeout` is how long, in seconds, any one call may take, retries included, even
      on a connection that stops answering: then it raises `StoreError` saying whether the
      save was applied, not applied, or is unknown (asked again by the store's next call).
    - `statement_cache_size` is asyncpg's: None keeps its default until a transaction
      pooler (PgBouncer) is detected, then 0; give 0 behind one to start that way.
    - `read_only=True` creates, migrates and writes nothing (each read runs in a read-only
      transaction, and a write raises `StoreError`); a database without this store's tables
      at this statekernel's schema version is refused.
    """

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 10,
        retry_for: float = 30.0,
        call_timeout: float = 30.0,
        statement_cache_size: int | None = None,
        read_only: bool = False,
    ) -> None:
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
        # At most `_IN_FLIGHT` batches of saves at a time (see group_commit).
        self._saves: GroupCommit[_Save, None] = GroupCommit(
            self._send_saves,
            key=operator.attrgetter("thread_id"),
            in_flight=min(_IN_FLIGHT, pool_size),
            largest=_LARGEST_BATCH,
            size=_Save.size,
            budget=_BATCH_BYTES,
            deadline=call_ends,
        )

    @property
    def dsn(self) -> str:
        """The DSN the store connects to, as it was given (password included)."""
        return self._dsn

    def __repr__(self) -> str:
        return f"PostgresThreadStore({redacted(self._dsn)!r})"

    async def head(self, thread_id: str) -> ThreadHead | None:
        check_thread_id(thread_id)

        async def fetch(conn: Any) -> Any:
            return await conn.fetchrow(_HEAD_SEAL, thread_id)

        row = await self._db.read(f"head of thread {thread_id!r}", thread_id, fetch)
        if row is None:
            return None
        head = decode_head(thread_id, row[1])
        return ThreadHead(row[0], head.revision, head.seal)

    async def load(self, thread_id: str) -> ThreadState | None:
        check_thread_id(thread_id)

        async def load(conn: Any) -> Any:
            return await conn.fetchrow(_LOAD, thread_id)

        row = await self._db.read(f"load of thread {thread_id!r}", thread_id, load)
        if row is None:
            return None
        position, head_data, snapshot_revision, snapshot_data, revisions, records = row
        head = decode_head(thread_id, head_data)
        snapshot = None
        if snapshot_revision is not None:
            snapshot = decode_snapshot(thread_id, snapshot_revision, snapshot_data)
        entries = [JournalEntry(r, d) for r, d in zip(revisions or (), records or (), strict=True)]
        return state_of(head, position, snapshot, entries)

    async def load_since(self, thread_id: str, since: int) -> ThreadState | None:
        check_thread_id(thread_id)
        since = check_since(since)

        async def load(conn: Any) -> Any:
            return await conn.fetchrow(_LOAD_SINCE, thread_id, since)

        row = await self._db.read(f"load of thread {thread_id!r}", thread_id, load)
        if row is None:
            return None
        position, head_data, snapshot_revision, snapshot_data, revisions, records = row
        head = decode_head(thread_id, head_data)
        snapshot = None
        if snapshot_revision is not None and snapshot_data is not None:
            snapshot = decode_snapshot(thread_id, snapshot_revision, snapshot_data)
        elif snapshot_revision is not None:  # the reader holds it: its revision alone
            snapshot = ThreadSnapshot(snapshot_revision, {})
        entries = [JournalEntry(r, d) for r, d in zip(revisions or (), records or (), strict=True)]
        return state_of(head, position, snapshot, entries)

    async def save(self, thread_id: str, save: ThreadSave, *, expected_position: int) -> None:
        save = check_save(thread_id, save, expected_position)
        creates = expected_position == 0
        base = 0 if creates else save.records[0].revision - 1 if save.records else save.revision
        operation = f"save of thread {thread_id!r}"
        try:
            check_records(thread_id, save, base, creates=creates)
        except StoreError:
            # A stale position is the first thing every store reports, whatever the records.
            async def head(conn: Any) -> Any:
                return await conn.fetchrow(_HEAD, thread_id)

            row = await self._db.read(operation, thread_id, head)
            check_position(expected_position, None if row is None else row[0])
            raise
        with self._db.call():  # (waiting for a batch counts against call_timeout too)
            ticket = self._saves.submit(_Save.of(thread_id, save, expected_position, base))
            await self._db.queued(
                operation, thread_id, GroupCommit.outcome(ticket), left=lambda: ticket.left
            )

    async def _send_saves(self, saves: Sequence[_Save]) -> builtins.list[BaseException | None]:
        """Write a batch of saves of different threads: each caller's outcome, in order."""
        landed: Mapping[str, Outcome] = {}
        if len(saves) > 1:
            batch = _SaveBatch(tuple(saves))
            try:
                landed = await self._db.write(f"save of {len(saves)} threads", None, batch)
            except StoreError as error:  # the batch as a whole: each caller its own error
                return [
                    StoreError(f"save of thread {s.thread_id!r}", error.cause, key=s.thread_id)
                    for s in saves
                ]
        # A save whose head did not move in the batch (or a batch the server refused as a
        # whole) is sent on its own: it lands, or says why not.
        alone = [save for save in saves if save.thread_id not in landed]
        sent = await asyncio.gather(*(self._save_alone(save) for save in alone))
        outcomes = dict(zip((save.thread_id for save in alone), sent, strict=True))
        for thread_id, outcome in landed.items():
            if outcome is Outcome.UNKNOWN:
                outcomes[thread_id] = outcome_unknown(
                    f"save of thread {thread_id!r}", thread_id, UNTRACEABLE
                )
        return [outcomes.get(save.thread_id) for save in saves]

    async def _save_alone(self, save: _Save) -> BaseException | None:
        try:
            await self._db.write(f"save of thread {save.thread_id!r}", save.thread_id, save)
        except Exception as error:  # the caller's, raised in its own task
            return error
        return None

    async def records(
        self, thread_id: str, *, since: int = 0, until: int | None = None, limit: int | None = None
    ) -> builtins.list[JournalEntry]:
        check_thread_id(thread_id)
        end = _NO_END if until is None else until

        async def records(conn: Any) -> Any:
            return await conn.fetch(_RECORDS, thread_id, since, end, limit)

        rows = await self._db.read(f"history of thread {thread_id!r}", thread_id, records)
        return [JournalEntry(int(row[0]), bytes(row[1])) for row in rows]

    async def snapshot_at(self, thread_id: str, revision: int) -> ThreadSnapshot | None:
        check_thread_id(thread_id)

        async def snapshot(conn: Any) -> Any:
            return await conn.fetchrow(_SNAPSHOT_AT, thread_id, revision)

        row = await self._db.read(f"snapshot of thread {thread_id!r}", thread_id, snapshot)
        return None if row is None else decode_snapshot(thread_id, int(row[0]), bytes(row[1]))

    async def prune(self, thread_id: str, *, before: int) -> None:
        check_thread_id(thread_id)
        prune_point(before, ())  # checks the argument before anything is sent
        await self._db.write(f"prune of thread {thread_id!r}", thread_id, _Prune(thread_id, before))

    async def delete(self, thread_id: str) -> None:
        check_thread_id(thread_id)
        await self._db.write(f"delete of thread {thread_id!r}", thread_id, _Delete(thread_id))

    async def run_events(self, thread_id: str) -> builtins.list[bytes]:
        check_thread_id(thread_id)

        async def fetch(conn: Any) -> Any:
            if await conn.fetchval(_HAS_EVENTS) is None:
                return []  # a version 1 database, read without migrating it: it kept none
            return await conn.fetch(_EVENTS, thread_id)

        rows = await self._db.read(f"run events of thread {thread_id!r}", thread_id, fetch)
        return [bytes(row[0]) for row in rows]

    async def threads(self, *, prefix: str = "", limit: int | None = None) -> builtins.list[str]:
        prefix, limit = check_listing(prefix, limit)
        upper = prefix_upper_bound(prefix)

        async def threads(conn: Any) -> Any:
            if upper is None:
                return await conn.fetch(_THREADS_FROM, prefix, limit)
            return await conn.fetch(_THREADS_RANGE, prefix, limit, upper)

        rows = await self._db.read(f"list of threads with prefix {prefix!r}", None, threads)
        return [row[0] for row in rows if row[0].startswith(prefix)]

    async def close(self) -> None:
        """Close the pool's connections (after the saves in flight); the store reopens them
        on next use."""
        await self._saves.drain()
        await self._db.close()


@attrs.frozen(eq=False)
class _Save:
    """One thread's save, encoded once however often it is sent."""

    thread_id: str
    save: ThreadSave
    expected: int
    base: int  # the stored revision the save's records continue
    save_id: bytes
    head: bytes
    snapshot_revision: int | None
    snapshot: bytes | None

    @classmethod
    def of(cls, thread_id: str, save: ThreadSave, expected: int, base: int) -> _Save:
        snapshot_revision = snapshot = None
        if save.snapshot is not None:
            snapshot_revision = snapshot_taken_at(save)
            snapshot = encode_snapshot(dict(save.snapshot))
        # Snapshots are found by revision; the head's own snapshot revision (0) only marks
        # it as a journal head.
        head = encode_head(save, 0)
        return cls(
            thread_id, save, expected, base, os.urandom(16), head, snapshot_revision, snapshot
        )

    def size(self) -> int:
        records = sum(len(entry.data) for entry in self.save.records)
        return records + len(self.head) + len(self.snapshot or b"") + len(self.save.events or b"")

    async def run(self, conn: Any) -> None:
        save = self.save
        appended = (
            [entry.revision for entry in save.records],
            [entry.data for entry in save.records],
            self.snapshot_revision,
            self.snapshot,
            save.revision,
            save.events,
        )
        while True:
            args = (self.thread_id, save.revision, self.head, self.save_id, *appended)
            if self.expected == 0:
                moved = await conn.fetchval(_CREATE, *args)
            else:
                moved = await conn.fetchval(_ADVANCE, *args, self.expected, self.base)
            if moved:
                return
            # The head did not move: say why (unless the thread changed back meanwhile).
            row = await conn.fetchrow(_HEAD, self.thread_id)
            check_position(self.expected, None if row is None else row[0])
            if row is not None:
                check_records(self.thread_id, save, row[1], creates=False)

    async def settle(self, conn: Any) -> Settled[None]:
        row = await conn.fetchrow(_HEAD, self.thread_id)
        outcome = self.outcome(None if row is None else (row[0], row[2]))
        if outcome is None:  # another save took its place (or the thread was deleted)
            actual = 0 if row is None else row[0]
            raise RevisionConflict(self.expected, actual, what="thread save", position=True)
        return Settled(outcome)

    def outcome(self, head: tuple[int, Sequence[bytes]] | None) -> Outcome | None:
        """What became of this save, given its thread's head now (position, save ids):
        None when it certainly did not land because another save took its place."""
        if head is not None and self.save_id in head[1]:
            return Outcome.APPLIED
        position = 0 if head is None else head[0]
        if position == self.expected:
            return Outcome.NOT_APPLIED
        if position - self.expected <= WRITE_IDS_KEPT:  # it would still hold this save's id
            return None
        return Outcome.UNKNOWN


@attrs.frozen
class _SaveBatch:
    """Saves of different threads in one statement. Its result names the threads whose head
    moved (APPLIED), or, settled after a lost answer, whose save may have moved it (UNKNOWN);
    it is empty when the server refused the statement as a whole."""

    saves: tuple[_Save, ...]

    async def run(self, conn: Any) -> Mapping[str, Outcome]:
        saves = self.saves
        records: builtins.list[tuple[Any, ...]] = []
        snapshots: builtins.list[tuple[Any, ...]] = []
        events: builtins.list[tuple[Any, ...]] = []
        for save in saves:
            records.extend((save.thread_id, e.revision, e.data) for e in save.save.records)
            if save.snapshot is not None:
                snapshots.append((save.thread_id, save.snapshot_revision, save.snapshot))
            if save.save.events is not None:
                events.append((save.thread_id, save.save.revision, save.save.events))
        try:
            rows = await conn.fetch(
                _SAVE_MANY,
                [save.thread_id for save in saves],
                [save.expected for save in saves],
                [save.base for save in saves],
                [save.save.revision for save in saves],
                [save.head for save in saves],
                [save.save_id for save in saves],
                *columns(records, 3),
                *columns(snapshots, 3),
                *columns(events, 3),
            )
        except Exception as error:
            if refused(error):  # nothing landed; each save on its own finds the culprit
                return {}
            raise
        return {row[0]: Outcome.APPLIED for row in rows}

    async def settle(self, conn: Any) -> Settled[Mapping[str, Outcome]]:
        rows = await conn.fetch(_HEADS, [save.thread_id for save in self.saves])
        heads = {row[0]: (row[1], row[2]) for row in rows}
        outcomes = {save.thread_id: save.outcome(heads.get(save.thread_id)) for save in self.saves}
        # For the log, each save's own: one another save took the place of did not land.
        parts = {f"thread {t!r}": o or Outcome.NOT_APPLIED for t, o in outcomes.items()}
        # One statement: it landed for every thread it moved, or for none. A head still at
        # its save's position would have moved had it landed, so then none did.
        if Outcome.APPLIED in outcomes.values():
            kept = (Outcome.APPLIED, Outcome.UNKNOWN)
            landed = {t: o for t, o in outcomes.items() if o in kept}
            return Settled(Outcome.APPLIED, landed, parts)
        if Outcome.NOT_APPLIED in outcomes.values() or Outcome.UNKNOWN not in outcomes.values():
            return Settled(Outcome.NOT_APPLIED, None, dict.fromkeys(parts, Outcome.NOT_APPLIED))
        return Settled(Outcome.UNKNOWN, None, parts)


@attrs.frozen
class _Prune:
    thread_id: str
    before: int

    async def run(self, conn: Any) -> None:
        async with conn.transaction():
            rows = await conn.fetch(_SNAPSHOT_REVISIONS, self.thread_id)
            keep = prune_point(self.before, [int(row[0]) for row in rows])
            if keep is not None:
                for statement in _PRUNE:
                    await conn.execute(statement, self.thread_id, keep)

    async def settle(self, conn: Any) -> Settled[None]:
        return Settled(Outcome.NOT_APPLIED)  # pruning again removes nothing more


@attrs.frozen
class _Delete:
    thread_id: str

    async def run(self, conn: Any) -> None:
        async with conn.transaction():
            for statement in _DELETE:
                await conn.execute(statement, self.thread_id)

    async def settle(self, conn: Any) -> Settled[None]:
        return Settled(Outcome.NOT_APPLIED)  # deleting again is a no-op
