"""A ProfileStore of your own, kept in a dict: the store that docs/custom-stores.md builds.

It passes the store contract (`statekernel.testing.store_contract.ProfileStoreContract`;
tests/test_store_contract.py runs it), and a backend of your own (Redis, DynamoDB, a
service) is the same class with the dict replaced by calls to it. Every rule the contract
checks comes from one of three helpers of `statekernel.lowlevel`: `check_name` refuses the
names no store can keep, `encode_entry` the values that are not JSON or are too large, and
`Entry` is what every read returns.
"""

from __future__ import annotations

import builtins
import logging
import time
from types import TracebackType
from typing import Any, Self

import msgspec

from statekernel import DecodeFailed, VersionConflict
from statekernel.lowlevel import (
    CODEC_ERRORS,
    DEFAULT_MAX_VALUE_BYTES,
    Entry,
    check_name,
    encode_entry,
)

logger = logging.getLogger(__name__)

Row = tuple[bytes, int, float]  # the entry's JSON, its version, when it was last written


class DictProfileStore:
    """A `ProfileStore` held in a dict of namespaces, each a dict of rows by key."""

    def __init__(self, *, max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES) -> None:
        self.rows: dict[str, dict[str, Row]] = {}
        self.max_value_bytes = max_value_bytes

    async def get(self, namespace: str, key: str) -> Entry | None:
        check_name("namespace", namespace)
        check_name("key", key)
        row = self.rows.get(namespace, {}).get(key)
        return None if row is None else _entry(namespace, key, row)

    async def set(
        self, namespace: str, key: str, value: Any, *, expected_version: int | None = None
    ) -> Entry:
        check_name("namespace", namespace)
        check_name("key", key)
        encoded = encode_entry(namespace, key, value, self.max_value_bytes)
        table = self.rows.setdefault(namespace, {})
        old = table.get(key)
        version = 0 if old is None else old[1]
        if expected_version is not None and expected_version != version:
            raise VersionConflict(
                namespace, key, expected_version, None if old is None else version
            )
        row = (encoded.data, version + 1, time.time())
        table[key] = row
        return Entry(namespace, key, encoded.value, row[1], row[2])

    async def delete(self, namespace: str, key: str) -> None:
        check_name("namespace", namespace)
        check_name("key", key)
        self.rows.get(namespace, {}).pop(key, None)

    async def list(self, namespace: str, prefix: str = "") -> builtins.list[Entry]:
        check_name("namespace", namespace)
        check_name("prefix", prefix)
        table = self.rows.get(namespace, {})
        entries = []
        for key in sorted(k for k in table if k.startswith(prefix)):
            try:
                entries.append(_entry(namespace, key, table[key]))
            except DecodeFailed as error:  # one bad row costs only itself
                logger.warning("left out an entry that no longer decodes: %s", error)
        return entries

    async def clear(self, namespace: str) -> None:
        check_name("namespace", namespace)
        self.rows.pop(namespace, None)

    async def close(self) -> None:
        """Nothing to release: a dict holds no connection."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


def _entry(namespace: str, key: str, row: Row) -> Entry:
    data, version, updated_at = row
    try:
        value = msgspec.json.decode(data)
    except CODEC_ERRORS as error:
        raise DecodeFailed(namespace, key, error) from error
    return Entry(namespace, key, value, version, updated_at)
