"""The profile store protocol: what the kernel asks of wherever shared and profile state lives.

The kernel defines it and never imports an implementation: `statekernel.stores` implements it
(memory, SQLite), and so can anyone. A store sees only encoded values and versions; it never
needs to know a key's type, so a value whose type changed since it was saved is found out when
the kernel decodes it, and the error can name the key.

A `ProfileStore` keeps JSON-compatible entries by `(namespace, key)` for shared and profile
state; `set(..., expected_version=n)` is a compare-and-set. `SupportsAtomicUpdate` is the
optional read-modify-write in one step. `encode_entry` is the one JSON-and-size check a
profile value passes before any store sees it.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from types import TracebackType
from typing import Any, ClassVar, Protocol, runtime_checkable

import attrs
import msgspec

from .._errors import StateValidationError, StoreError
from .._public import renamed
from .._values.codec import CODEC_ERRORS

__all__ = [
    "DEFAULT_MAX_VALUE_BYTES",
    "AcceptsEncodedValues",
    "EncodedValue",
    "Entry",
    "ProfileStore",
    "SupportsAtomicUpdate",
    "SupportsNamespaces",
    "accepts_encoded_values",
    "check_size",
    "encode_entry",
    "encode_json",
    "encode_record",
    "json_refusal",
]

DEFAULT_MAX_VALUE_BYTES = 16 * 1024 * 1024
"""Largest value, measured as encoded JSON, that a ProfileAccess or store accepts (16 MiB).

It is the profile stores' default size limit per encoded value (their `max_value_bytes`).
A profile entry is read whole on every access; anything bigger belongs in a file or blob
store, with a reference kept here."""


# -- profile entries -------------------------------------------------------------------------


class Entry(msgspec.Struct, frozen=True):
    """One stored entry as a store returns it: the value is JSON-compatible builtins.

    `Entry(namespace, key, value, version, updated_at)`: `value` is made of JSON-compatible
    builtins. `version` is 1 when the entry is created and grows by one per write;
    `updated_at` is the time of the last write in seconds since the epoch. A msgspec Struct
    rather than an attrs class because it is a stored entry, and because every get and set
    builds one: a Struct is built several times faster.
    """

    namespace: str
    key: str
    value: Any
    version: int
    updated_at: float


@runtime_checkable
class ProfileStore(Protocol):
    """Async storage of JSON-compatible entries by `(namespace, key)`: a runtime-checkable
    protocol.

    `set(..., expected_version=n)` is a compare-and-set: it writes only if the entry's
    version is `n` (`0`: the entry must not exist) and raises `VersionConflict` otherwise;
    without it the last write wins. `list` returns entries sorted by key whose key starts
    with `prefix` taken literally (no wildcards). Stores connect lazily on first use, close
    with `await store.close()` and work as `async with store:`.
    """

    async def get(self, namespace: str, key: str) -> Entry | None:
        """The entry, or None when absent.

        An entry that no longer decodes raises `DecodeFailed`.
        """
        ...

    async def set(
        self, namespace: str, key: str, value: Any, *, expected_version: int | None = None
    ) -> Entry:
        """Write the entry; returns it with its new version.

        `expected_version=n` is a compare-and-set: the entry must be at version `n` (`0`: it
        must not exist), or else `VersionConflict` and nothing is written. Without it, the
        last write wins.
        """
        ...

    async def delete(self, namespace: str, key: str) -> None:
        """Remove the entry. A no-op when absent."""
        ...

    async def list(self, namespace: str, prefix: str = "") -> builtins.list[Entry]:
        """The entries of `namespace` whose key starts with `prefix`, sorted by key.

        `prefix` is a literal prefix, no wildcards. A row that no longer decodes is left out
        and logged (a warning naming it); `get` of it raises `DecodeFailed`.
        """
        ...

    async def clear(self, namespace: str) -> None:
        """Remove every entry of `namespace`."""
        ...

    async def close(self) -> None:
        """Close the store's connections; `async with store:` closes it when the block ends.

        Stores connect on first use, and a closed store reopens on its next use.
        """
        ...

    async def __aenter__(self) -> ProfileStore: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class SupportsAtomicUpdate(Protocol):
    """A ProfileStore that can also read-modify-write one entry atomically.

    An optional, runtime-checkable protocol: `await store.update(namespace, key, fn) -> Entry`
    sets the entry to `fn(current entry or None)` in one atomic step. Every bundled profile
    store implements it.
    `ProfileAccess.update` uses it when the store has it, and falls back to
    compare-and-set retries otherwise. Under contention compare-and-set makes losers retry,
    and a writer that keeps losing to others (several processes hammering one counter) can
    run out of attempts; a store that holds its write lock from the read to the write never
    makes anyone retry. `fn` gets the current entry (None when absent) and returns the new
    value; it may run on the store's own thread while the lock is held, so it must be pure
    and quick. Exceptions from `fn` propagate unchanged and nothing is written.

    See [state layers: compare-and-set](state-layers.md#compare-and-set-and-update).
    """

    async def update(self, namespace: str, key: str, fn: Callable[[Entry | None], Any]) -> Entry:
        """Set the entry to `fn(current entry or None)` atomically; returns the new entry."""
        ...


@runtime_checkable
class SupportsNamespaces(Protocol):
    """A ProfileStore that can list the namespaces holding entries.

    An optional, runtime-checkable protocol: `await store.namespaces(prefix="")`. Nothing in
    a run needs it (a plugin knows its namespaces); it is how a tool that sees a store for
    the first time (`statekernel inspect`) finds what is in it. All three bundled profile
    stores have it, and the store contract checks it.
    """

    async def namespaces(self, prefix: str = "") -> builtins.list[str]:
        """The namespaces that hold at least one entry and start with `prefix` (literally),
        sorted."""
        ...


@attrs.frozen(slots=True)
class EncodedValue:
    """A profile value already encoded and checked: its JSON builtins and their JSON bytes.

    `EncodedValue(value, data)`: `value` is the JSON builtins, `data` their JSON bytes, as
    `encode_entry` returns them. `ProfileAccess` encodes each write once, to check its type,
    that it reads back and its size, and hands a store that `AcceptsEncodedValues` this pair
    in `set`, and as the result of an `update` function, instead of the builtins, so the
    store writes the bytes as they are instead of encoding them again.
    """

    value: Any
    data: bytes


@runtime_checkable
class AcceptsEncodedValues(Protocol):
    """A ProfileStore whose `set`, and the function of whose `update`, may also pass an
    `EncodedValue` (every bundled profile store does).

    A store says so with a class attribute `accepts_encoded_values = True`. It then gets the
    `EncodedValue` that `ProfileAccess` made in `set`, and as the result of an `update`
    function, instead of the plain builtins; it passes what it got to `encode_entry` and
    writes `data` as it is. A store without the attribute always gets plain JSON builtins.
    A subclass of such a store that overrides `set` or `update` receives the pair too, or
    sets the attribute back to False."""

    accepts_encoded_values: ClassVar[bool]


def accepts_encoded_values(store: object) -> bool:
    """Whether `store` says it takes `EncodedValue`s (the attribute set, and set to True)."""
    return getattr(type(store), "accepts_encoded_values", False) is True


_JSON_BUILTINS = "JSON-compatible builtins (dict, list, str, int, float, bool, None)"


def encode_entry(
    namespace: str,
    key: str,
    value: Any,
    max_bytes: int,
    *,
    operation: str = "set",
    limit: str = "the store's limit",
) -> EncodedValue:
    """An entry's value as JSON within `max_bytes`, refused before anything is written.

    The one place a profile value becomes bytes: it encodes `value` as JSON and returns the
    pair `EncodedValue(value, data)`. `ProfileAccess` uses it for every write (in its two
    steps, with its type check between them) and stores call it on what they are given. A
    value that is not JSON raises `StateValidationError`, and one whose JSON is longer than
    `max_bytes` raises `StoreError`; both errors name the namespace and the entry, and
    nothing is written. An `EncodedValue` is not encoded again; only its size is compared
    with this limit. `operation` and `limit` word the size error for the caller.
    """
    encoded = encode_json(namespace, key, value)
    check_size(namespace, key, encoded, max_bytes, operation=operation, limit=limit)
    return encoded


encode_record = renamed(encode_entry, "encode_record", until="0.2.0")
"""The earlier name of `encode_entry`: it still works, and warns (`DeprecationWarning`).

It is removed in 0.2.0: "record" now means only a journal's `CommitRecord`."""


def encode_json(
    namespace: str,
    key: str,
    value: Any,
    *,
    expected: str = _JSON_BUILTINS,
    what: str = "profile store value",
) -> EncodedValue:
    """`value` with its JSON; a value that is not JSON raises `StateValidationError` naming
    the namespace and entry (`expected` says what was declared)."""
    if isinstance(value, EncodedValue):
        return value
    try:
        return EncodedValue(value, msgspec.json.encode(value))
    except CODEC_ERRORS as exc:
        raise json_refusal(namespace, expected, value, f"{what} (entry {key!r})", exc) from exc


def json_refusal(
    name: str, expected: str, value: Any, what: str, error: BaseException
) -> StateValidationError:
    """The error for a value JSON cannot hold. For a container of the declared type, it
    names the part inside that is wrong and where (`value['when'][2]`), instead of repeating
    the type."""
    inside = _obstacle(value, "value", 0) if isinstance(value, dict | list | tuple) else None
    if inside is not None and expected != _JSON_BUILTINS:
        expected = f"{expected} holding only JSON-compatible builtins"
    return StateValidationError(name, expected, value, what=what, detail=inside or str(error))


_MAX_DEPTH = 64  # deeper than any value a person means; beyond it, msgspec's own message


def _obstacle(value: Any, path: str, depth: int) -> str | None:
    """What inside `value` JSON cannot hold, and where (`value['when'][2]`): a container of
    the right type whose content is wrong should say which part, not repeat the type."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str | int | float) or isinstance(key, bool):
                return (
                    f"{path} has the key {key!r} ({type(key).__name__}); JSON object keys are "
                    f"strings (or numbers, written as strings)"
                )
            found = _obstacle(item, f"{path}[{key!r}]", depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _obstacle(item, f"{path}[{index}]", depth + 1)
            if found is not None:
                return found
        return None
    try:
        msgspec.json.encode(value)
    except CODEC_ERRORS:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return f"{path} is {shown}, of type {type(value).__name__}, which JSON cannot hold"
    return None


def check_size(
    namespace: str,
    key: str,
    encoded: EncodedValue,
    max_bytes: int,
    *,
    operation: str = "set",
    limit: str = "the store's limit",
) -> None:
    """Raise `StoreError` naming the entry when its JSON is longer than `max_bytes`."""
    size = len(encoded.data)
    if size > max_bytes:
        raise StoreError(
            f"{operation} of entry {key!r}",
            ValueError(
                f"the value encodes to {size:,} bytes of JSON, above {limit} of "
                f"{max_bytes:,}; nothing was written. Keep large data in a file or blob store "
                f"and record a reference, or raise max_value_bytes"
            ),
            key=namespace,
        )
