"""Snapshots of a thread's keys as a store keeps them: whole values, or a Vector as the
extension of the one an earlier snapshot holds.

A snapshot bounds how many records a load replays, but a whole-value snapshot of a history
that only grows would rewrite every item at every snapshot, and the bytes a thread occupies
would grow with the square of its length. So a `Vector` that extends the value the previous
snapshot wrote for its key is written as a reference to that snapshot plus the new items:

    {"statekernel.extends": <revision>, "length": <items there>, "items": [<new items>]}

(a Vector encodes as a JSON array, so an object in its place is unambiguous). A chain of
such references is cut, and the whole value written again, once it is `MAX_CHAIN` long or
the items added along it outnumber the whole value it started from: the bytes written stay
proportional to the items added, and a read follows at most `MAX_CHAIN` references.
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import msgspec

from .._engine.registry import KeyBinding, KeyRegistry
from .._errors import DecodeFailed
from .._values.codec import CODEC_ERRORS, dec_hook, enc_hook
from .._values.keys import KeyScope
from .._values.vector import Vector
from .chain import SEAL
from .key_codec import EncodeCache, Restored, decode_values, encode_scope
from .store import ThreadSnapshot

__all__ = [
    "DROPPED_ON_UNINSTALL",
    "MAX_CHAIN",
    "RESERVED_VALUES",
    "RUN_COUNT",
    "VectorBase",
    "differing_keys",
    "holds_references",
    "plain_value",
    "read_snapshot",
    "referenced_revisions",
    "whole_snapshot",
    "write_snapshot",
]

MAX_CHAIN = 64
RUN_COUNT = "statekernel.run_count"
"""Where heads saved before the journal kept the thread's run count: in their values, so a
snapshot read from one must leave it out."""
DROPPED_ON_UNINSTALL = "statekernel.dropped_on_uninstall"
"""A snapshot's list of the keys a kernel without their plugin drops (declared with
`retain_on_uninstall=False`): how a kernel that does not know a key learns it."""
RESERVED_VALUES = frozenset({RUN_COUNT, DROPPED_ON_UNINSTALL, SEAL})
"""Names in a snapshot's values that are the kernel's notes, not keys."""
_EXTENDS = "statekernel.extends"
_encoder = msgspec.json.Encoder(enc_hook=enc_hook)
_any = msgspec.json.Decoder()


@attrs.frozen
class VectorBase:
    """A Vector as the newest snapshot wrote it: extensions are checked against it."""

    revision: int
    value: Vector[Any]
    chain: int  # references between this snapshot and the last whole value
    whole: int  # how many items the last whole value held
    origin: int  # the revision of the snapshot that holds that whole value


class _Extension(msgspec.Struct, frozen=True, rename={"extends": _EXTENDS}):
    extends: int
    length: int
    items: msgspec.Raw


FetchSnapshot = Callable[[int], Awaitable[ThreadSnapshot | None]]


def write_snapshot(
    registry: KeyRegistry,
    values: Mapping[str, Any],
    cache: EncodeCache,
    bases: Mapping[str, VectorBase],
    revision: int,
) -> tuple[dict[str, bytes], dict[str, VectorBase]]:
    """The persistent thread keys as snapshot bytes at `revision`, and the new bases."""
    whole = dict(values)
    extended: dict[str, bytes] = {}
    new_bases: dict[str, VectorBase] = {}
    by_name = registry.by_name
    for name, value in values.items():
        binding = by_name.get(name)
        if type(value) is not Vector or binding is None or not _holds_vector(binding):
            continue  # (a reference is read back only where a Vector is declared)
        base = bases.get(name)
        if base is not None and _extends(value, base):
            extension = _extension(registry, name, value, base, cache)
            if extension is not None:
                extended[name] = extension
                new_bases[name] = VectorBase(
                    revision, value, base.chain + 1, base.whole, base.origin
                )
                del whole[name]
                continue
        new_bases[name] = VectorBase(revision, value, 0, len(value), revision)
    encoded = encode_scope(registry, whole, KeyScope.THREAD, cache)
    return {**encoded, **extended}, {
        n: b for n, b in new_bases.items() if n in encoded or n in extended
    }


def _extends(value: Vector[Any], base: VectorBase) -> bool:
    """Whether `value` holds base's items first, and a reference to it is still worth
    writing."""
    old = base.value
    if len(value) < len(old) or base.chain + 1 >= MAX_CHAIN:
        return False
    if len(value) - base.whole >= base.whole:  # added more than the whole value held: rewrite
        return False
    return value.startswith(old)


def _extension(
    registry: KeyRegistry, name: str, value: Vector[Any], base: VectorBase, cache: EncodeCache
) -> bytes | None:
    binding = registry.by_name.get(name)
    if binding is None or not binding.persistent or binding.scope is not KeyScope.THREAD:
        return None
    if binding.has_validate:  # validated like a whole value would be, once per value
        encode_scope(registry, {name: value}, KeyScope.THREAD, cache)
    try:
        items = _encoder.encode(value[len(base.value) :])
    except CODEC_ERRORS:
        return None  # the whole value then fails with the codec's own error, naming the key
    return _encoder.encode(_Extension(base.revision, len(base.value), msgspec.Raw(items)))


async def read_snapshot(
    registry: KeyRegistry,
    snapshot: ThreadSnapshot,
    fetch: FetchSnapshot,
    *,
    record: str,
    skip_undecodable: bool,
    exclude: Callable[[str], bool] = lambda name: False,
) -> tuple[Restored, dict[str, VectorBase]]:
    """Decode a snapshot's values of registered thread keys, following Vector references
    to the snapshots they extend; the rest is kept raw, as `decode_values` does."""
    raw = {name: data for name, data in snapshot.values.items() if not exclude(name)}
    by_name = registry.by_name
    references = {
        name: data
        for name, data in raw.items()
        if _is_reference(data) and (b := by_name.get(name)) is not None and _holds_vector(b)
    }
    restored = decode_values(
        registry,
        {name: data for name, data in raw.items() if name not in references},
        record=record,
        skip_undecodable=skip_undecodable,
        scope=KeyScope.THREAD,
    )
    bases: dict[str, VectorBase] = {
        name: VectorBase(snapshot.revision, value, 0, len(value), snapshot.revision)
        for name, value in restored.values.items()
        if type(value) is Vector
    }
    for name, data in references.items():
        binding = by_name.get(name)
        if binding is None or not binding.persistent or binding.scope is not KeyScope.THREAD:
            restored.foreign[name] = data
            continue
        try:
            value, chain, whole, origin = await _follow(
                binding.value_type, name, data, fetch, record, snapshot.revision
            )
        except DecodeFailed:
            if not skip_undecodable:
                raise
            restored.undecodable[name] = data
            continue
        restored.values[name] = value
        bases[name] = VectorBase(snapshot.revision, value, chain, whole, origin)
    return restored, bases


async def _unchain(
    name: str, data: bytes, fetch: FetchSnapshot, record: str, revision: int
) -> tuple[bytes, list[bytes], int]:
    """A key's snapshot bytes (of the snapshot at `revision`) followed back through its
    references: the whole value they start from, the items each reference added, newest
    first, and the revision of the snapshot that holds the whole value."""
    parts: list[bytes] = []
    while _is_reference(data):
        try:
            extension = msgspec.json.decode(data, type=_Extension)
        except msgspec.MsgspecError as error:
            raise DecodeFailed(name, record, error) from error
        parts.append(bytes(extension.items))
        older = await fetch(extension.extends)
        if older is None or older.revision != extension.extends or name not in older.values:
            raise DecodeFailed(
                name,
                record,
                ValueError(
                    f"its snapshot extends the one at revision {extension.extends}, which "
                    f"the store no longer holds"
                ),
            )
        data = older.values[name]
        revision = older.revision
    return data, parts, revision


async def _follow(
    value_type: Any, name: str, data: bytes, fetch: FetchSnapshot, record: str, revision: int
) -> tuple[Vector[Any], int, int, int]:
    """The Vector a reference stands for (its base's items, then its own), how many
    references led to it, how many items the whole value held, and where that is."""
    data, parts, origin = await _unchain(name, data, fetch, record, revision)
    chain = len(parts)
    try:
        value = msgspec.json.decode(data, type=value_type, dec_hook=dec_hook)
        whole = len(value)
        for items in reversed(parts):
            value = value.extend(msgspec.json.decode(items, type=value_type, dec_hook=dec_hook))
    except CODEC_ERRORS as error:
        raise DecodeFailed(name, record, error) from error
    return value, chain, whole, origin  # a Vector: `read_snapshot` follows only where declared


async def plain_value(
    name: str, data: bytes, fetch: FetchSnapshot, record: str, revision: int
) -> Any:
    """A key's snapshot bytes as plain JSON data, without its declaration: a reference is
    followed back to the whole array it extends, and its items added."""
    data, parts, _ = await _unchain(name, data, fetch, record, revision)
    try:
        value = _any.decode(data)
        for items in reversed(parts):
            value = [*value, *_any.decode(items)]
    except CODEC_ERRORS as error:
        raise DecodeFailed(name, record, error) from error
    return value


def holds_references(values: Mapping[str, bytes]) -> bool:
    """Whether any of a snapshot's values refers to an older snapshot."""
    return any(_is_reference(data) for data in values.values())


def referenced_revisions(snapshot: ThreadSnapshot) -> set[int]:
    """The revisions of older snapshots this one's values point to (one level)."""
    found: set[int] = set()
    for data in snapshot.values.values():
        if _is_reference(data):
            try:
                found.add(int(_any.decode(data)[_EXTENDS]))
            except (msgspec.MsgspecError, KeyError, TypeError, ValueError):
                continue
    return found


_PREFIX = b'{"' + _EXTENDS.encode() + b'"'


def _is_reference(data: bytes) -> bool:
    return data.startswith(_PREFIX)


def _holds_vector(binding: KeyBinding) -> bool:
    return (typing.get_origin(binding.value_type) or binding.value_type) is Vector


async def whole_snapshot(
    snapshot: ThreadSnapshot, fetch: FetchSnapshot, *, record: str
) -> dict[str, bytes]:
    """The snapshot's values with every Vector reference replaced by the whole array it
    stands for, key by key as JSON, whatever the key (for a copy that must stand alone)."""
    whole: dict[str, bytes] = {}
    for name, stored in snapshot.values.items():
        data, parts, _ = await _unchain(name, stored, fetch, record, snapshot.revision)
        if parts:
            items: list[Any] = _any.decode(data)
            for part in reversed(parts):
                items.extend(_any.decode(part))
            data = _encoder.encode(items)
        whole[name] = data
    return whole


def differing_keys(
    registry: KeyRegistry,
    snapshot: ThreadSnapshot,
    values: Mapping[str, Any],
    *,
    ignore: set[str],
    record: str,
    skip_undecodable: bool,
) -> set[str]:
    """The stored thread keys whose value in `snapshot` differs from `values` (what replay
    rebuilt at its revision). A Vector reference is checked by its own new items against
    the end of the rebuilt value, so a check costs what the snapshot holds, not the whole
    history (the value it extends is checked at its own snapshot)."""
    by_name = registry.by_name
    differing: set[str] = set()
    names = {n for n in snapshot.values if n not in RESERVED_VALUES} | {
        n for n, b in ((n, by_name.get(n)) for n in values) if b is not None and b.stored
    }
    for name in names - ignore:
        binding = by_name.get(name)
        if binding is None or not binding.stored:
            continue
        data = snapshot.values.get(name)
        if data is None or name not in values:
            if (data is None) != (name not in values):
                differing.add(name)
            continue
        rebuilt = values[name]
        try:
            if _is_reference(data) and _holds_vector(binding):
                extension = msgspec.json.decode(data, type=_Extension)
                items = msgspec.json.decode(
                    extension.items, type=binding.value_type, dec_hook=dec_hook
                )
                same = (
                    type(rebuilt) is Vector
                    and len(rebuilt) == extension.length + len(items)
                    and rebuilt[extension.length :] == items
                )
            else:
                same = (
                    msgspec.json.decode(data, type=binding.value_type, dec_hook=dec_hook) == rebuilt
                )
        except CODEC_ERRORS as error:
            if not skip_undecodable:
                raise DecodeFailed(name, record, error) from error
            continue
        if not same:
            differing.add(name)
    return differing
