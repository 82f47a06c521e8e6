"""In-memory ProfileStore and ThreadStore: for tests, demos and single-process runs.

They keep exactly the semantics of the SQLite stores (versions, compare-and-set, literal
prefixes, JSON / MessagePack encoding, size limit), so code tested against memory behaves the
same on disk. Their contents die with the process. Every method completes without awaiting
anything, so each call is atomic with respect to other tasks.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable
from typing import Any, ClassVar

import attrs

from statekernel.lowlevel import DEFAULT_MAX_VALUE_BYTES, Entry, ThreadState, encode_record

from ._closing import ClosingStore
from ._profile_codec import (
    check_expected,
    check_expected_version,
    check_names,
    decode_value,
)
from ._thread_codec import check_position, decode_state, encode_state

__all__ = ["MemoryProfileStore", "MemoryThreadStore"]


@attrs.frozen
class _Record:
    data: bytes
    version: int
    updated_at: float


class MemoryProfileStore(ClosingStore):
    """A ProfileStore held in a dict; nothing survives the process."""

    accepts_encoded_values: ClassVar[bool] = True  # see statekernel.lowlevel.EncodedValue

    def __init__(self, *, max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES) -> None:
        self._records: dict[str, dict[str, _Record]] = {}
        self._max_value_bytes = max_value_bytes

    async def get(self, namespace: str, key: str) -> Entry | None:
        namespace, key = check_names(namespace, key)
        record = self._records.get(namespace, {}).get(key)
        return None if record is None else _entry(namespace, key, record)

    async def set(
        self, namespace: str, key: str, value: Any, *, expected_version: int | None = None
    ) -> Entry:
        namespace, key = check_names(namespace, key)
        expected = check_expected_version(expected_version)
        encoded = encode_record(namespace, key, value, self._max_value_bytes)
        table = self._records.setdefault(namespace, {})
        old = table.get(key)
        check_expected(namespace, key, expected, None if old is None else old.version)
        record = _Record(encoded.data, 1 if old is None else old.version + 1, time.time())
        table[key] = record
        return Entry(namespace, key, encoded.value, record.version, record.updated_at)

    async def update(self, namespace: str, key: str, fn: Callable[[Entry | None], Any]) -> Entry:
        """Set the record to `fn(current entry or None)` in one step (no await between)."""
        namespace, key = check_names(namespace, key)
        table = self._records.setdefault(namespace, {})
        old = table.get(key)
        value = fn(None if old is None else _entry(namespace, key, old))
        encoded = encode_record(namespace, key, value, self._max_value_bytes)
        record = _Record(encoded.data, 1 if old is None else old.version + 1, time.time())
        table[key] = record
        return Entry(namespace, key, encoded.value, record.version, record.updated_at)

    async def delete(self, namespace: str, key: str) -> None:
        namespace, key = check_names(namespace, key)
        self._records.get(namespace, {}).pop(key, None)

    async def list(self, namespace: str, prefix: str = "") -> builtins.list[Entry]:
        namespace, prefix = check_names(namespace, prefix)
        table = self._records.get(namespace, {})
        found = sorted(key for key in table if key.startswith(prefix))
        return [_entry(namespace, key, table[key]) for key in found]

    async def clear(self, namespace: str) -> None:
        namespace, _ = check_names(namespace, "")
        self._records.pop(namespace, None)

    async def close(self) -> None:
        """Nothing to release; the records stay until the store is dropped."""


def _entry(namespace: str, key: str, record: _Record) -> Entry:
    value = decode_value(namespace, key, record.data)
    return Entry(namespace, key, value, record.version, record.updated_at)


class MemoryThreadStore(ClosingStore):
    """A ThreadStore held in a dict; nothing survives the process."""

    def __init__(self) -> None:
        self._threads: dict[str, tuple[int, bytes]] = {}

    async def load(self, thread_id: str) -> ThreadState | None:
        saved = self._threads.get(thread_id)
        return None if saved is None else decode_state(thread_id, saved[1], saved[0])

    async def save(self, thread_id: str, state: ThreadState, *, expected_position: int) -> None:
        data = encode_state(thread_id, state, expected_position)
        saved = self._threads.get(thread_id)
        position = check_position(expected_position, None if saved is None else saved[0])
        self._threads[thread_id] = (position, data)

    async def delete(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)

    async def close(self) -> None:
        """Nothing to release; the threads stay until the store is dropped."""
