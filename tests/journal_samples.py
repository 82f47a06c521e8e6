"""Thread keys and snapshot helpers the journal tests (test_journal_*.py) share."""

from __future__ import annotations

import hashlib
import sqlite3
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from samples import Keys, commit_all

from statekernel import (
    CommitRecord,
    Kernel,
    KeyScope,
    MergeStrategy,
    Plugin,
    StateCommand,
    StateKey,
    Vector,
)
from statekernel.stores import SqliteThreadStore

# -- keys that record updates, lists, text and run values ----------------------------------


class Count(StateKey[int, int]):
    key = "j.count"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Log(StateKey[Vector[str], tuple[str, ...]]):
    key = "j.log"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: Vector[str], update: tuple[str, ...]) -> Vector[str]:
        return value.extend(update)


class Mood(StateKey[str, str]):
    key = "j.mood"
    scope = KeyScope.THREAD
    default = ""


class Step(StateKey[int, int]):
    """A run key: journaled in memory, never in a store, never rebuilt by replay."""

    key = "j.step"


class Tags(StateKey[Vector[str], tuple[str, ...]]):
    key = "j.tags"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[str], update: tuple[str, ...]) -> Vector[str]:
        return value.extend(update)


class Total(StateKey[int, int]):
    key = "e.total"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Notes(StateKey[str, str]):
    key = "e.notes"
    scope = KeyScope.THREAD
    default = ""


class Score(StateKey[int, Any]):
    """Takes a number to add, or a function of the value (which no codec can store)."""

    key = "e.score"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: Any) -> int:
        return int(update(value)) if callable(update) else value + int(update)


class Jot(StateKey[int, Any]):
    """A thread key kept in memory only, whose update may be a function."""

    key = "e.jot"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: Any) -> int:
        return int(update(value)) if callable(update) else value + int(update)


class Scratch(StateKey[int, int]):
    key = "e.scratch"
    scope = KeyScope.THREAD


# -- a kernel's keys, and what a thread holds ----------------------------------------------


def counters(count: int, prefix: str = "n") -> list[type[StateKey[int, int]]]:
    """`count` thread keys of ints, `{prefix}.0` and on: many keys, so that a test does not
    hang on the order a set of key strings comes in (the hash seed decides it)."""

    def counter(index: int) -> type[StateKey[int, int]]:
        def body(namespace: dict[str, Any]) -> None:
            namespace.update(key=f"{prefix}.{index}", scope=KeyScope.THREAD)

        return types.new_class(f"Counter{index}", (StateKey[int, int],), exec_body=body)

    return [counter(index) for index in range(count)]


def plugins(*extra: Plugin) -> list[Plugin]:
    return [Keys(Count, Log, Mood, Step), *extra]


def thread_values(snapshot: Any) -> dict[str, Any]:
    return {k: v for k, v in snapshot.to_dict().items() if k != Step.key}


# -- snapshots of growing Vectors ----------------------------------------------------------


def is_reference(data: bytes) -> bool:
    """Whether a Vector's snapshot bytes refer to an older snapshot (else: the whole array)."""
    return data.startswith(b'{"statekernel.extends"')


def edit_snapshot(
    path: Path,
    thread: str,
    revision: int,
    edit: Callable[[dict[str, bytes]], None],
    *,
    reseal: bool = False,
) -> None:
    """Change a stored snapshot's values in the file, as a tampering hand would; `reseal`
    recomputes its seal too, as the docs describe it (docs/durability.md), so that only what
    the values now mean can tell (a value whose declaration changed, or a forger who knows
    the format)."""
    with sqlite3.connect(path) as raw:
        (blob,) = raw.execute(
            "SELECT snapshot FROM thread_snapshots WHERE thread_id = ? AND revision = ?",
            (thread, revision),
        ).fetchone()
        values = msgspec.msgpack.decode(blob, type=dict[str, bytes])
        edit(values)
        if reseal:
            values[SEAL] = seal_of(thread, values, revision)
        raw.execute(
            "UPDATE thread_snapshots SET snapshot = ? WHERE thread_id = ? AND revision = ?",
            (msgspec.msgpack.encode(values), thread, revision),
        )


SEAL = "statekernel.seal"


def seal_of(thread: str, values: dict[str, bytes], revision: int) -> bytes:
    """A snapshot's seal as docs/durability.md defines it: the link it names, and BLAKE2b (16
    bytes) of the MessagePack array [thread_id, revision, link, [[name, bytes], ...]] of its
    other values sorted by name."""
    link = bytes.fromhex(msgspec.json.decode(values[SEAL])["link"])
    items = sorted((name, data) for name, data in values.items() if name != SEAL)
    digest = hashlib.blake2b(
        msgspec.msgpack.encode([thread, revision, link, items]), digest_size=16
    )
    return msgspec.json.encode({"link": link.hex(), "digest": digest.hexdigest()})


def referring_keys() -> list[Plugin]:
    return [Keys(Count, Log, Tags)]


async def write_referring(path: Path, *threads: str) -> None:
    """Snapshots at 1 (the whole values of Log and Tags) and at 2, 3 and 4 (each an item more
    than the one before, and referring to it)."""
    async with SqliteThreadStore(path) as store:
        kernel = Kernel(referring_keys(), thread_store=store, snapshot_every=1)
        many = tuple(f"i{i}" for i in range(100))
        for thread in threads:
            grown = [
                StateCommand().update(Log, (f"l{i}",)).update(Tags, (f"t{i}",)) for i in range(3)
            ]
            first = StateCommand().update(Log, many).update(Tags, many)
            await commit_all(kernel, thread, first, *grown, checkpoints=True)
            snapshot = await store.snapshot_at(thread, 4)
            assert snapshot is not None and is_reference(snapshot.values[Log.key])


def written_before_the_chain(
    path: Path,
    thread: str,
    edit: Callable[[CommitRecord], CommitRecord] = lambda record: record,
) -> None:
    """Rewrite a thread of the file as statekernel wrote it before the journal's chain: each
    record its own digest (8 bytes of BLAKE2b) and body (changed by `edit`), its snapshots
    and its head without seals."""
    with sqlite3.connect(path) as raw:
        rows = raw.execute(
            "SELECT revision, record FROM thread_records WHERE thread_id = ?", (thread,)
        ).fetchall()
        for revision, data in rows:
            record = edit(msgspec.msgpack.decode(data[16:], type=CommitRecord))
            body = msgspec.msgpack.encode(record)
            old = hashlib.blake2b(body, digest_size=8).digest() + body
            raw.execute(
                "UPDATE thread_records SET record = ? WHERE thread_id = ? AND revision = ?",
                (old, thread, revision),
            )
        (blob,) = raw.execute(
            "SELECT state FROM thread_states WHERE thread_id = ?", (thread,)
        ).fetchone()
        head = msgspec.msgpack.decode(blob)
        del head["seal"]
        raw.execute(
            "UPDATE thread_states SET state = ? WHERE thread_id = ?",
            (msgspec.msgpack.encode(head), thread),
        )
        snapshots = raw.execute(
            "SELECT revision FROM thread_snapshots WHERE thread_id = ?", (thread,)
        ).fetchall()
    for (revision,) in snapshots:
        edit_snapshot(path, thread, revision, lambda values: values.pop(SEAL))
