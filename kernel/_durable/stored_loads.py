"""How a thread is loaded from a ThreadStore, and how one stored value is read.

A load takes the newest snapshot and replays the records after it (`replay`), key by key
(`key_codec`), so a value that no longer decodes fails alone, naming its key, or, when
the kernel skips such values, is set aside and written back untouched. What the load
learns of the store's copy (its write position, what it could not read, what was saved
since its snapshot) becomes a `StoredThread`, which every save then moves on
(`StoredThreads`). A kernel that already holds the thread at a revision (a save another
kernel's overtook) reads only what was saved since (`load_newer`) and moves its
`StoredThread` on to the head the same way a whole load would have left it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import msgspec

from .._engine.registry import KeyBinding, KeyRegistry
from .._errors import DecodeFailed, JournalCorrupted, StateError
from .._values.codec import CODEC_ERRORS
from .._values.keys import RESERVED_PREFIX, KeyScope
from .chain import (
    SEAL,
    START,
    Chain,
    ChainKey,
    check_head,
    read_head_seal,
    snapshot_link,
    walk,
)
from .journal import CommitRecord, record_prev
from .key_codec import EncodeCache, Restored, decode_values
from .replay import ReplayPolicy, apply_records
from .store import (
    SupportsLoadSince,
    ThreadSnapshot,
    ThreadState,
    ThreadStore,
    store_failures,
)
from .stored_thread import StoredThread, snapshot_origin
from .thread_snapshots import (
    DROPPED_ON_UNINSTALL,
    RESERVED_VALUES,
    RUN_COUNT,
    FetchSnapshot,
    VectorBase,
    read_snapshot,
)
from .threads import HeldThread, SuspendedRun

__all__ = ["load_newer", "load_thread", "read_stored_as", "snapshot_fetcher"]

_int_decoder = msgspec.json.Decoder(int)
_names_decoder = msgspec.json.Decoder(list[str])


async def load_thread(
    store: ThreadStore,
    registry: KeyRegistry,
    thread_id: str,
    previous: StoredThread | None,
    *,
    skip_undecodable: bool,
    refuse_unknown: bool,
    chain_key: ChainKey | None,
) -> StoredThread:
    """The thread as the store has it, with the non-persistent keys this kernel kept of it
    (`previous`, as last loaded or saved), read by a kernel holding `chain_key`."""
    stored = await _loaded(store, thread_id)
    return await _thread_of(
        store,
        registry,
        thread_id,
        previous or StoredThread(),
        stored,
        skip_undecodable=skip_undecodable,
        refuse_unknown=refuse_unknown,
        chain_key=chain_key,
    )


async def load_newer(
    store: ThreadStore,
    registry: KeyRegistry,
    thread_id: str,
    kept: StoredThread,
    *,
    skip_undecodable: bool,
    refuse_unknown: bool,
    chain_key: ChainKey | None,
) -> StoredThread:
    """The thread as the store has it now, for a kernel that knew it as `kept`: the
    records saved since, applied to the values `kept` holds at its position (`base`), when
    the store `SupportsLoadSince` and no newer snapshot was written; else a whole load.

    What a save that another kernel's overtook reads before it rebases: its cost follows
    what the others saved meanwhile, not the length of the thread. It trusts what a load
    trusts: the new records must chain on from the link `kept` knows, up to the head's
    seal; anything else (a break, a thread deleted or written anew) is left to a whole
    load, which says what it finds."""
    since, base = kept.held.revision, kept.base
    if (
        base is not None
        and kept.position > 0
        and kept.chain.chained_from is not None
        and isinstance(store, SupportsLoadSince)
    ):
        with store_failures("thread load", thread_id):
            stored = await store.load_since(thread_id, since)
        if stored is None or stored.snapshot_revision > since:  # what `load` would say
            return await _thread_of(
                store,
                registry,
                thread_id,
                kept,
                stored,
                skip_undecodable=skip_undecodable,
                refuse_unknown=refuse_unknown,
                chain_key=chain_key,
            )
        followed = _chain_since(thread_id, kept, stored, chain_key)
        if followed is not None:
            records, chain = followed
            if refuse_unknown:
                _check_known(registry, thread_id, {}, records, stored.run_values, kept.dropped)
            return _caught_up(
                registry, thread_id, kept, base, stored, records, chain, skip_undecodable
            )
    return await load_thread(
        store,
        registry,
        thread_id,
        kept,
        skip_undecodable=skip_undecodable,
        refuse_unknown=refuse_unknown,
        chain_key=chain_key,
    )


def _caught_up(
    registry: KeyRegistry,
    thread_id: str,
    kept: StoredThread,
    base: dict[str, Any],
    stored: ThreadState,
    records: list[CommitRecord],
    chain: Chain,
    skip_undecodable: bool,
) -> StoredThread:
    """`kept` moved on to the head of `stored`: `records` (those after `kept`'s revision,
    trusted) applied to `base`, the values at `kept`'s position. What a whole load would
    make of the thread, with no snapshot newer than `kept`'s revision."""
    values = dict(base)
    stale = apply_records(
        registry,
        values,
        records,
        thread_id=thread_id,
        # (shared: the values are the live run's too)
        policy=ReplayPolicy(every_op=False, skip_undecodable=skip_undecodable, shared=True),
        unreadable=(*kept.foreign, *kept.undecodable),
    ).stale
    return attrs.evolve(
        kept,
        held=_held(registry, thread_id, stored, kept.held, values, skip_undecodable),
        position=stored.position,
        since_snapshot=kept.since_snapshot + len(records),
        bytes_since_snapshot=kept.bytes_since_snapshot + sum(len(e.data) for e in stored.records),
        stale=kept.stale | (stale - kept.dropped),
        chain=chain,
        cache=EncodeCache(),
        saved_values=None,
        base=values,
    )


def _chain_since(
    thread_id: str, kept: StoredThread, stored: ThreadState, chain_key: ChainKey | None
) -> tuple[list[CommitRecord], Chain] | None:
    """The records `stored` holds after `kept`'s revision, once the chain proves them
    whole from the link `kept` knows to the head's seal, and the chain there; None when
    they do not follow on (a break, or a thread deleted or written anew since)."""
    since = kept.held.revision
    try:
        chain = read_head_seal(thread_id, stored.revision, stored.seal, chain_key)
        if (
            chain.chained_from != kept.chain.chained_from
            or chain.key != kept.chain.key
            or stored.position < kept.position
        ):
            return None
        records, links = walk(
            thread_id,
            stored.records,
            after=since,
            link=kept.chain.link,
            chain=chain,
            then=chain.link,
        )
        link = links[-1] if links else kept.chain.link
        reached = records[-1].revision if records else since
        check_head(thread_id, stored.revision, reached, link, chain, sealed=True)
    except JournalCorrupted:
        return None  # a whole load says what it finds
    return records, Chain(link, chain.chained_from, chain.key)


async def _thread_of(
    store: ThreadStore,
    registry: KeyRegistry,
    thread_id: str,
    previous: StoredThread,
    stored: ThreadState | None,
    *,
    skip_undecodable: bool,
    refuse_unknown: bool,
    chain_key: ChainKey | None,
) -> StoredThread:
    """The thread `stored` holds (as `load` returned it), with what `previous` kept."""
    if stored is None:
        if previous.position > 0:
            return StoredThread()  # deleted from the store since: a new thread
        held = previous.held
        return StoredThread(
            HeldThread(_volatile(registry, held.values), held.revision, held.runs),
            whole=previous.whole,
        )
    records, chain = trusted_records(thread_id, stored, chain_key)  # before anything is decoded
    restored, bases = await _read_snapshot(
        store,
        registry,
        thread_id,
        stored,
        chain,
        skip_undecodable,
        lambda name: name in RESERVED_VALUES,
    )
    drop_marker = _drop_marker(stored, thread_id)
    dropped = frozenset(name for name in drop_marker if name not in registry.by_name)
    for name in dropped:  # its plugin is gone and said not to keep it
        restored.foreign.pop(name, None)
        restored.undecodable.pop(name, None)
    if refuse_unknown:
        _check_known(registry, thread_id, restored.foreign, records, stored.run_values, dropped)
    stale = apply_records(
        registry,
        restored.values,
        records,
        thread_id=thread_id,
        policy=ReplayPolicy(every_op=False, skip_undecodable=skip_undecodable),
        unreadable=(*restored.foreign, *restored.undecodable),
    ).stale  # (a lost key is unknown until a snapshot, but no reason to hold snapshots back)
    return StoredThread(
        _held(registry, thread_id, stored, previous.held, restored.values, skip_undecodable),
        base=restored.values,
        position=stored.position,
        foreign=restored.foreign,
        undecodable=restored.undecodable,
        since_snapshot=len(records),
        bytes_since_snapshot=sum(len(entry.data) for entry in stored.records),
        snapshot_bytes=sum(len(data) for data in stored.values.values()),
        stale=stale - dropped,
        vector_bases=bases,
        dropped=dropped,
        drop_marker=drop_marker,
        whole=previous.whole,
        chain=chain,
        snapshot_origins=(
            {
                stored.snapshot_revision: snapshot_origin(
                    stored.snapshot_revision, bases, {**restored.foreign, **restored.undecodable}
                )
            }
            if stored.values
            else {}
        ),
    )


async def read_stored_as(
    store: ThreadStore, thread_id: str, binding: KeyBinding, chain_key: ChainKey | None
) -> Any:
    """The thread's stored value of `binding`'s key string, decoded and replayed with
    `binding`'s declaration alone (None when it holds none)."""
    name = binding.name
    stored = await _loaded(store, thread_id)
    if stored is None:
        return None
    registry = KeyRegistry([binding])
    records, chain = trusted_records(thread_id, stored, chain_key)
    restored, _ = await _read_snapshot(
        store, registry, thread_id, stored, chain, False, lambda other: other != name
    )
    apply_records(
        registry,
        restored.values,
        records,
        thread_id=thread_id,
        policy=ReplayPolicy(every_op=False),
    )
    return restored.values.get(name)


async def _loaded(store: ThreadStore, thread_id: str) -> ThreadState | None:
    """The thread as the store holds it; a store's own failure is a `StoreError`."""
    with store_failures("thread load", thread_id):
        return await store.load(thread_id)


def snapshot_fetcher(store: ThreadStore, thread_id: str, chain: Chain) -> FetchSnapshot:
    """How `read_snapshot` fetches the older snapshots a Vector extends: each checked
    against its seal (`snapshot_link`) before anything of it is read."""

    async def fetch(revision: int) -> ThreadSnapshot | None:
        with store_failures("thread snapshot read", thread_id):
            snapshot = await store.snapshot_at(thread_id, revision)
        if snapshot is not None:
            snapshot_link(thread_id, snapshot, chain)
        return snapshot

    return fetch


async def _read_snapshot(
    store: ThreadStore,
    registry: KeyRegistry,
    thread_id: str,
    stored: ThreadState,
    chain: Chain,
    skip_undecodable: bool,
    exclude: Callable[[str], bool],
) -> tuple[Restored, dict[str, VectorBase]]:
    """The loaded thread's newest snapshot, decoded (`read_snapshot`)."""
    return await read_snapshot(
        registry,
        ThreadSnapshot(stored.snapshot_revision, stored.values),
        snapshot_fetcher(store, thread_id, chain),
        record=thread_id,
        skip_undecodable=skip_undecodable,
        exclude=exclude,
    )


def _held(
    registry: KeyRegistry,
    thread_id: str,
    stored: ThreadState,
    previous: HeldThread,
    values: dict[str, Any],
    skip_undecodable: bool,
) -> HeldThread:
    """What a run gets of a loaded thread: its replayed `values` with the non-persistent
    ones this kernel held, and a suspended run's record and run keys."""
    suspended = None
    run_values: dict[str, Any] = {}
    if stored.suspended is not None:
        suspended = msgspec.json.decode(stored.suspended, type=SuspendedRun)
        run_values = {
            **_volatile(registry, previous.run_values),
            **decode_values(
                registry,
                stored.run_values or {},
                record=thread_id,
                skip_undecodable=skip_undecodable,
                scope=KeyScope.RUN,
            ).values,
        }
    runs_raw = stored.values.get(RUN_COUNT)
    legacy_runs = _int_decoder.decode(runs_raw) if runs_raw is not None else 0
    return HeldThread(
        values={**_volatile(registry, previous.values), **values},
        revision=stored.revision,
        runs=max(stored.runs, legacy_runs),
        suspended=suspended,
        run_values=run_values,
    )


def _check_known(
    registry: KeyRegistry,
    thread_id: str,
    foreign: Mapping[str, bytes],
    records: list[CommitRecord],
    run_values: Mapping[str, bytes] | None,
    dropped: frozenset[str],
) -> None:
    """Refuse a thread that holds keys no plugin of this kernel registers (strict): in
    its snapshot, its journal since, or a suspended run's run keys."""
    by_name = registry.by_name
    unknown = {name for name in foreign if name not in RESERVED_VALUES}
    unknown.update(op.key for record in records for op in record.ops if op.key not in by_name)
    unknown -= dropped  # dropped on uninstall, as their plugin asked: not kept at all
    unknown.update(name for name in run_values or () if name not in by_name)
    if not unknown:
        return
    reserved = sorted(name for name in unknown if name.startswith(RESERVED_PREFIX))
    hint = (
        f" Keys {reserved} are the Agent facade's own: load the thread with an Agent."
        if reserved
        else ""
    )
    raise StateError(
        f"thread {thread_id!r} holds keys no plugin of this kernel registers: "
        f"{sorted(unknown)}, and this kernel refuses unknown stored keys "
        f"(unknown_keys='refuse'). Nothing was loaded. Add the plugins that declare "
        f"them, or load the thread with unknown_keys='keep' (the default), which carries "
        f"them over untouched.{hint}"
    )


def _drop_marker(stored: ThreadState, thread_id: str) -> frozenset[str]:
    """The keys the stored snapshot lists as dropped on uninstall."""
    marker = stored.values.get(DROPPED_ON_UNINSTALL)
    try:
        return frozenset(_names_decoder.decode(marker) if marker is not None else ())
    except CODEC_ERRORS as error:
        raise DecodeFailed(DROPPED_ON_UNINSTALL, thread_id, error) from error


def trusted_records(
    thread_id: str, stored: ThreadState, chain_key: ChainKey | None
) -> tuple[list[CommitRecord], Chain]:
    """The loaded thread's records after its snapshot, once the chain proves them whole
    and unchanged from the snapshot to the head (`chain`), read by a kernel holding
    `chain_key`; and the chain at the head."""
    chain = read_head_seal(thread_id, stored.revision, stored.seal, chain_key)
    after = stored.snapshot_revision
    link: bytes | None = START if after == 0 and chain.chained_from == 1 else None
    if stored.values or after:  # a snapshot the store says it has, even an emptied one
        link = snapshot_link(thread_id, ThreadSnapshot(after, stored.values), chain)
    then = chain.link if chain.chained_from is not None else None
    records, links = walk(thread_id, stored.records, after=after, link=link, chain=chain, then=then)
    link = links[-1] if links else link
    reached = records[-1].revision if records else after
    sealed = SEAL in stored.values or any(record_prev(e.data) for e in stored.records)
    check_head(thread_id, stored.revision, reached, link, chain, sealed=sealed)
    return records, Chain(START if link is None else link, chain.chained_from, chain.key)


def _volatile(registry: KeyRegistry, values: Mapping[str, Any]) -> dict[str, Any]:
    """The non-persistent keys among `values`: they live in kernel memory only."""
    return {
        name: value
        for name, value in values.items()
        if (binding := registry.by_name.get(name)) is not None and not binding.persistent
    }
