"""Thread persistence: what a Kernel keeps of each thread between its runs, and the store.

A `ThreadKeeper` is the one object that loads, saves and remembers threads. It knows which
thread has a live run (one at a time per kernel), holds the thread keys between runs (all of
them without a ThreadStore; only the non-persistent ones with one), and saves with a
compare-and-set on the store's write position as it last loaded or saved it. Every save
moves that position, whatever it carries (commits, a suspension, a run ending), so of two
kernels that loaded the same position only the first save lands and the other gets a
`RevisionConflict`; no saved run id therefore repeats in a thread. A suspended run is saved
whole: its run keys, the actions still waiting
for their phase, and a `SuspendedRun` record. Values are encoded key by key
(`_key_codec`), so a value that no longer decodes fails alone, naming its key.

It knows nothing of phases, hooks or the run loop: a `Run` hands it values to save.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import msgspec

from ._errors import StateError, StoreError
from ._key_codec import EncodeCache, decode_values, encode_scope
from ._keys import RESERVED_PREFIX, KeyScope
from ._protocols import ThreadState, ThreadStore
from ._registry import KeyRegistry

__all__ = ["PendingAction", "SuspendedRun", "ThreadKeeper", "ThreadMemory"]

_RUN_COUNT = RESERVED_PREFIX + "run_count"
_int_decoder = msgspec.json.Decoder(int)


class PendingAction(msgspec.Struct, frozen=True):
    """A scheduled action saved with a suspended run: its spec key, who scheduled it, and
    its payload encoded like any persisted value."""

    key: str
    origin: str | None
    payload: msgspec.Raw


class SuspendedRun(msgspec.Struct, frozen=True, kw_only=True):
    """The kernel's record of a suspended run: who it was, the actions still waiting for
    their phase, plus the suspender's own detail."""

    run_id: str
    agent: str
    parent_thread_id: str | None = None
    parent_run_id: str | None = None
    active_hook_filter: tuple[str, ...] = ()
    actions: tuple[PendingAction, ...] = ()
    detail: bytes = b""


@attrs.define
class ThreadMemory:
    """What is known of one thread between its runs.

    `values` holds decoded thread-scope values (non-persistent ones included); `foreign` and
    `undecodable` hold stored bytes this kernel could not or may not decode, written back
    untouched. `saved_position` is the ThreadStore's write position for this thread as last
    loaded or saved, for compare-and-set. While a
    run is suspended, `suspended` is its record and `run_values` its run keys.
    """

    values: dict[str, Any] = attrs.field(factory=dict)
    foreign: dict[str, bytes] = attrs.field(factory=dict)
    undecodable: dict[str, bytes] = attrs.field(factory=dict)
    revision: int = 0
    saved_position: int = 0
    runs: int = 0
    suspended: SuspendedRun | None = None
    run_values: dict[str, Any] = attrs.field(factory=dict)


class ThreadKeeper:
    """Loads, saves and remembers threads for one kernel; one live run per thread."""

    def __init__(
        self, registry: KeyRegistry, store: ThreadStore | None, *, skip_undecodable: bool
    ) -> None:
        self._registry = registry
        self._store = store
        self._skip_undecodable = skip_undecodable
        self._threads: dict[str, ThreadMemory] = {}
        self._live: set[str] = set()

    async def claim(self, thread_id: str) -> ThreadMemory:
        """Mark the thread as having a live run and return it as last saved.

        Raises `StateError` if it already has one in this kernel. A failed load releases
        the claim again.
        """
        if not isinstance(thread_id, str) or not thread_id:
            raise ValueError(f"thread_id must be a non-empty string, got {thread_id!r}")
        if thread_id in self._live:
            raise StateError(
                f"thread {thread_id!r} already has a live run in this kernel; finish it "
                f"(await run.finish()) before starting another."
            )
        self._live.add(thread_id)
        try:
            thread = self._threads.get(thread_id) or ThreadMemory()
            if self._store is not None:
                thread = await self._load(thread_id, thread)
            self._threads[thread_id] = thread
            return thread
        except BaseException:
            self._live.discard(thread_id)
            raise

    def count_run(self, thread: ThreadMemory) -> int:
        """Count a new run of `thread` (saved with it); returns its number, from 1."""
        thread.runs += 1
        return thread.runs

    def release(self, thread_id: str) -> None:
        """End the thread's live run; forget what the store now holds in full."""
        self._live.discard(thread_id)
        thread = self._threads.get(thread_id)
        if (
            self._store is not None
            and thread is not None
            and thread.saved_position > 0
            and not thread.values
            and thread.suspended is None
        ):
            del self._threads[thread_id]  # everything it held is in the store

    async def save(
        self,
        thread_id: str,
        thread: ThreadMemory,
        values: Mapping[str, Any],
        *,
        revision: int,
        touched: frozenset[str],
        cache: EncodeCache,
        suspended: SuspendedRun | None = None,
    ) -> None:
        """Save a run's committed `values`: persistent keys to the store, the rest to memory.

        With `suspended`, the run keys are saved too, with the record. Raises before changing
        anything if a value cannot be encoded or the store refuses the save; the run then
        stays open, so the caller can still end it cleanly. `touched` names the keys the run
        wrote, whose set-aside undecodable bytes it replaced.
        """
        registry = self._registry
        thread_values, run_values = _split_by_scope(registry, values)
        if self._store is not None:
            undecodable = {
                name: data for name, data in thread.undecodable.items() if name not in touched
            }
            raw = {
                **thread.foreign,
                **undecodable,
                **encode_scope(registry, thread_values, KeyScope.THREAD, cache),
                _RUN_COUNT: msgspec.json.encode(thread.runs),
            }
            state = ThreadState(
                revision=revision,
                values=raw,
                run_values=(
                    encode_scope(registry, run_values, KeyScope.RUN, cache)
                    if suspended is not None
                    else None
                ),
                suspended=msgspec.json.encode(suspended) if suspended is not None else None,
            )
            try:
                await self._store.save(thread_id, state, expected_position=thread.saved_position)
            except StateError:
                raise
            except Exception as error:
                raise StoreError("thread save", error, key=thread_id) from error
            thread.saved_position += 1
            thread.undecodable = undecodable
            # The store holds the persistent keys; memory keeps only what it must not.
            thread_values = _volatile(registry, thread_values)
            run_values = _volatile(registry, run_values)
        thread.values = thread_values
        thread.run_values = run_values if suspended is not None else {}
        thread.revision = revision
        thread.suspended = suspended

    async def _load(self, thread_id: str, memory: ThreadMemory) -> ThreadMemory:
        """The thread as the store has it, with non-persistent keys from memory."""
        assert self._store is not None
        try:
            stored = await self._store.load(thread_id)
        except StateError:
            raise
        except Exception as error:
            raise StoreError("thread load", error, key=thread_id) from error
        registry = self._registry
        if stored is None:
            return ThreadMemory(
                values=_volatile(registry, memory.values),
                revision=memory.revision,
                runs=memory.runs,
            )
        raw = dict(stored.values)
        runs_raw = raw.pop(_RUN_COUNT, None)
        restored = decode_values(
            registry,
            raw,
            record=thread_id,
            skip_undecodable=self._skip_undecodable,
            scope=KeyScope.THREAD,
        )
        values = {**_volatile(registry, memory.values), **restored.values}
        suspended = None
        run_values: dict[str, Any] = {}
        if stored.suspended is not None:
            suspended = msgspec.json.decode(stored.suspended, type=SuspendedRun)
            run_values = {
                **_volatile(registry, memory.run_values),
                **decode_values(
                    registry,
                    stored.run_values or {},
                    record=thread_id,
                    skip_undecodable=self._skip_undecodable,
                    scope=KeyScope.RUN,
                ).values,
            }
        return ThreadMemory(
            values=values,
            foreign=restored.foreign,
            undecodable=restored.undecodable,
            revision=stored.revision,
            saved_position=stored.position,
            runs=_int_decoder.decode(runs_raw) if runs_raw is not None else 0,
            suspended=suspended,
            run_values=run_values,
        )


def _split_by_scope(
    registry: KeyRegistry, values: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Registered values split into (thread-scoped, run-scoped)."""
    thread_values: dict[str, Any] = {}
    run_values: dict[str, Any] = {}
    for name, value in values.items():
        binding = registry.by_name.get(name)
        if binding is not None:
            target = thread_values if binding.scope is KeyScope.THREAD else run_values
            target[name] = value
    return thread_values, run_values


def _volatile(registry: KeyRegistry, values: Mapping[str, Any]) -> dict[str, Any]:
    """The non-persistent keys among `values`: they live in kernel memory only."""
    return {
        name: value
        for name, value in values.items()
        if (binding := registry.by_name.get(name)) is not None and not binding.persistent
    }
