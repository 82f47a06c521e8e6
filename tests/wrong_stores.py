"""Stores that break the store contract on purpose, each the way a first try at a backend
does: the stores docs/custom-stores.md builds (docs/examples/), each with a few mistakes.

tests/test_store_contract_failures.py runs the contract against them and reads what it
says. Each mistake is one a store author makes without noticing: the arguments of an
exception swapped, another exception than the protocol's, a name not checked, a dict
lookup that fails on something absent, a filter too many, an argument ignored.
"""

from __future__ import annotations

import builtins
import time
from typing import Any

import msgspec
from doc_examples import example

from statekernel import DecodeFailed
from statekernel.lowlevel import CODEC_ERRORS, Entry, ThreadState, encode_entry

DictProfileStore: Any = example("dict_profile_store").DictProfileStore
DictThreadStore: Any = example("dict_thread_store").DictThreadStore


class WrongProfileStore(DictProfileStore):  # type: ignore[misc]
    """Four mistakes: `DecodeFailed(key, namespace, ...)` (its arguments swapped), a
    ValueError for a stale version, `set` without `check_name`, and `delete` of an absent
    entry raising KeyError."""

    async def get(self, namespace: str, key: str) -> Entry | None:
        row = self.rows.get(namespace, {}).get(key)
        if row is None:
            return None
        data, version, updated_at = row
        try:
            value = msgspec.json.decode(data)
        except CODEC_ERRORS as error:
            raise DecodeFailed(key, namespace, error) from error
        return Entry(namespace, key, value, version, updated_at)

    async def set(
        self, namespace: str, key: str, value: Any, *, expected_version: int | None = None
    ) -> Entry:
        encoded = encode_entry(namespace, key, value, self.max_value_bytes)
        table = self.rows.setdefault(namespace, {})
        version = table[key][1] if key in table else 0
        if expected_version is not None and expected_version != version:
            raise ValueError(f"stale version {expected_version} of {key!r}: it is at {version}")
        table[key] = (encoded.data, version + 1, time.time())
        return Entry(namespace, key, encoded.value, version + 1, table[key][2])

    async def delete(self, namespace: str, key: str) -> None:
        del self.rows[namespace][key]


class WrongThreadStore(DictThreadStore):  # type: ignore[misc]
    """Two mistakes: `load` leaves out the records past the head (which the kernel must
    see to say the journal was damaged), and `threads` ignores `limit`."""

    async def load(self, thread_id: str) -> ThreadState | None:
        state: ThreadState | None = await super().load(thread_id)
        if state is None:
            return None
        kept = tuple(e for e in state.records if e.revision <= state.revision)
        return msgspec.structs.replace(state, records=kept)

    async def threads(self, *, prefix: str = "", limit: int | None = None) -> builtins.list[str]:
        return sorted(t for t in self.threads_by_id if t.startswith(prefix))
