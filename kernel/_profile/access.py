"""`ProfileAccess` and its views: typed, async access to entries in a `ProfileStore`.

Typing happens here, not in the store: a value is checked against its key's declared type
*before* anything is written (what was written can always be read back), and a stored entry
that no longer fits its declaration fails with `DecodeFailed` for that entry only. Hooks get
a `BufferedProfileAccess` (writes recorded, applied once after the hook's command commits)
and tool gates a `ReadOnlyProfileAccess`; both are `ProfileAccess`es, so a hook author types
`ctx.profile` as `ProfileAccess` whatever the engine gave.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn, TypeVar, cast

import attrs
import msgspec

from .._errors import (
    DecodeFailed,
    StateError,
    StateValidationError,
    StoreError,
    UnknownProfileKey,
    VersionConflict,
)
from .._public import renamed
from .._values import declared_types as _declared_types
from .._values import options
from .._values.codec import CODEC_ERRORS, dec_hook, enc_hook
from .keys import ProfileKey, ProfileKeyInfo, profile_key_info
from .store import (
    DEFAULT_MAX_VALUE_BYTES,
    EncodedValue,
    Entry,
    ProfileStore,
    SupportsAtomicUpdate,
    accepts_encoded_values,
    check_size,
    encode_json,
    json_refusal,
)

logger = logging.getLogger("statekernel")

__all__ = [
    "DEFAULT_MAX_UPDATE_ATTEMPTS",
    "BufferedProfileAccess",
    "ProfileAccess",
    "ReadOnlyProfileAccess",
]

V = TypeVar("V")
T = TypeVar("T")

DEFAULT_MAX_UPDATE_ATTEMPTS = 32
"""How often `update` re-reads and retries after losing a compare-and-set race."""

_GATE_REASON = "tool gates are re-evaluated freely, so ctx.profile is read-only there"


def _to_raw(value: Any) -> Any:
    # str_keys: JSON object keys are strings, so the builtins match what a store returns.
    return msgspec.to_builtins(value, enc_hook=enc_hook, str_keys=True)


def _from_raw(raw: Any, value_type: Any) -> Any:
    return msgspec.convert(raw, value_type, dec_hook=dec_hook, str_keys=True)


_DECODERS: dict[Any, msgspec.json.Decoder[Any] | None] = {}


def _read_back(data: bytes, value_type: Any) -> Any:
    """`data` (a value's JSON) decoded as `value_type`, in one pass where msgspec can build
    a decoder for the type (the same result as decoding to builtins and converting them)."""
    try:
        decoder = _DECODERS[value_type]
    except KeyError:
        try:
            decoder = msgspec.json.Decoder(value_type, dec_hook=dec_hook)
        except TypeError:
            decoder = None
        _DECODERS[value_type] = decoder
    except TypeError:  # a type that cannot be a dict key: no cache
        decoder = None
    if decoder is None:
        return _from_raw(msgspec.json.decode(data), value_type)
    return decoder.decode(data)


_DESCRIBED: dict[Any, str] = {}


def _expected(info: ProfileKeyInfo) -> str:
    """How the key's value type reads in a message (worked out once per type)."""
    try:
        return _DESCRIBED[info.value_type]
    except KeyError:
        described = _DESCRIBED[info.value_type] = _declared_types.describe(info.value_type)
        return described
    except TypeError:  # a type that cannot be a dict key: no cache
        return _declared_types.describe(info.value_type)


_View = TypeVar("_View", bound="ProfileAccess")


class ProfileAccess:
    """Typed, async access to shared and profile entries: what hooks see as `ctx.profile`.

    Build one on any `ProfileStore` (`store`). `keys`, when given (the kernel passes the
    profile keys its plugins registered), is checked on every call, so a key nobody
    registered fails with `UnknownProfileKey` instead of writing a namespace nobody reads.
    `key` arguments are a `StateScope` or any string. Reads go to the store, never the
    snapshot.

    Each written value is checked before anything is written. A value of the wrong type, or
    one that would not read back, raises `StateValidationError`. A value over
    `max_value_bytes` (default 16 MiB, `16 * 1024 * 1024`) of encoded JSON raises
    `StoreError`. `update` is a read-modify-write that never loses a concurrent write:
    atomic in the store when it `SupportsAtomicUpdate`, otherwise compare-and-set retried up
    to `max_update_attempts` (default 32) times with jittered backoff. A store error that is
    not a `StateError` is wrapped in `StoreError`. Non-positive limits raise `ValueError`.
    See [state layers: `ctx.profile`](state-layers.md#reading-and-writing-ctxprofile).
    """

    __slots__ = (
        "_atomic",
        "_encoded",
        "_keys",
        "_max_update_attempts",
        "_max_value_bytes",
        "_store",
    )

    def __init__(
        self,
        store: ProfileStore,
        *,
        keys: Mapping[str, type[Any]] | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        max_update_attempts: int = DEFAULT_MAX_UPDATE_ATTEMPTS,
    ) -> None:
        options.positive_int("max_value_bytes", max_value_bytes)
        options.positive_int("max_update_attempts", max_update_attempts)
        self._store = store
        self._keys = keys
        self._max_value_bytes = max_value_bytes
        self._max_update_attempts = max_update_attempts
        self._atomic = isinstance(store, SupportsAtomicUpdate)
        self._encoded = accepts_encoded_values(store)

    @property
    def store(self) -> ProfileStore:
        """The underlying store this access reads from and (eventually) writes to."""
        return self._store

    # -- the hook-facing API ---------------------------------------------------------------

    async def read(self, key_cls: type[ProfileKey[V]], key: str) -> V:
        """The entry's value, or the key's default when the entry does not exist.

        A stored value that no longer decodes raises `DecodeFailed`, for that entry only.
        """
        info, record = self._resolve(key_cls, key)
        entry = await self._store_call("get", info, record, self._store.get(info.name, record))
        return cast(V, self._decode(info, record, _ABSENT if entry is None else entry.value))

    async def write(self, key_cls: type[ProfileKey[V]], key: str, value: V) -> None:
        """Replace the entry's value (last write wins)."""
        info, record = self._resolve(key_cls, key)
        outgoing = self._outgoing(self._encode(info, record, value))
        await self._store_call("set", info, record, self._store.set(info.name, record, outgoing))

    async def delete(self, key_cls: type[ProfileKey[Any]], key: str) -> None:
        """Remove the entry; it reads as the default again. A no-op when absent."""
        info, record = self._resolve(key_cls, key)
        await self._store_call("delete", info, record, self._store.delete(info.name, record))

    async def update(self, key_cls: type[ProfileKey[V]], key: str, fn: Callable[[V], V]) -> V:
        """Set the entry to `fn(current value)` without losing concurrent writes.

        `fn` gets the current value (the default when absent) and must be pure: it may run
        more than once, and on another thread. With a store that `SupportsAtomicUpdate`
        (every bundled store) the read, `fn` and the write are one atomic step and nobody
        retries. With any other store it reads, computes, and writes with compare-and-set on
        the version read; on `VersionConflict` it reads again and retries, and after
        `max_update_attempts` losses it raises the last `VersionConflict`. Returns the value
        written.
        """
        info, record = self._resolve(key_cls, key)
        return cast(V, await self._update(info, record, fn))

    async def read_with_version(self, key_cls: type[ProfileKey[V]], key: str) -> tuple[V, int]:
        """The entry's value and its version: `(default, 0)` when the entry does not exist.

        The version is what `compare_and_set` takes, to write only if nobody wrote since.
        """
        info, record = self._resolve(key_cls, key)
        entry = await self._store_call("get", info, record, self._store.get(info.name, record))
        if entry is None:
            return cast(V, info.make_default()), 0
        return cast(V, self._decode(info, record, entry.value)), entry.version

    async def compare_and_set(
        self, key_cls: type[ProfileKey[V]], key: str, value: V, *, version: int
    ) -> int:
        """Write `value` only if the entry is still at `version` (0: only if it does not
        exist); returns the new version.

        Anyone else's write since raises `VersionConflict` and writes nothing: read again
        with `read_with_version` and decide anew. The value is checked as `write` checks it.
        Inside a hook (a buffered view) or a tool gate (a read-only one) it raises
        `StateError`: a compare-and-set needs the store's answer at once.
        """
        info, record = self._resolve(key_cls, key)
        outgoing = self._outgoing(self._encode(info, record, value))
        entry = await self._store_call(
            "set",
            info,
            record,
            self._store.set(info.name, record, outgoing, expected_version=version),
        )
        return entry.version

    async def list_entries(
        self, key_cls: type[ProfileKey[V]], prefix: str = ""
    ) -> builtins.list[tuple[str, V]]:
        """Every entry of `key_cls` whose entry key starts with `prefix` (literally), as
        `(entry key, value)` pairs sorted by entry key.

        An entry that no longer decodes raises `DecodeFailed` naming it."""
        info = profile_key_info(key_cls)
        if self._keys is not None and self._keys.get(info.name) is not key_cls:
            raise UnknownProfileKey(info.name, tuple(self._keys))
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a string, got {type(prefix).__name__} {prefix!r}")
        entries = await self._store_call("list", info, prefix, self._store.list(info.name, prefix))
        return [(e.key, cast(V, self._decode(info, e.key, e.value))) for e in entries]

    async def list(self, owner: str) -> dict[type[ProfileKey[Any]], Any]:
        """Every entry `owner` holds, across every registered profile key.

        `owner` is a string or `StateScope` (an agent, `"system"`, a scope string). The
        result maps key class -> its value, decoded to the key's type. A key `owner` holds
        no entry of is left out (rather than given its default), so the result says what is
        stored. Keys come in the order of their key strings.

        An entry that no longer decodes is left out and logged (a warning naming its key,
        owner and why), so one bad entry costs only itself; `read` of it still raises
        `DecodeFailed`. Needs the registered keys (`ctx.profile`, `kernel.profile`, or
        `keys=`): otherwise `StateError`."""
        keys = self._registered("list", owner)
        raws = await asyncio.gather(
            *(self._raw(key_cls, owner) for key_cls in keys), return_exceptions=True
        )
        found: dict[type[ProfileKey[Any]], Any] = {}
        for key_cls, raw in zip(keys, raws, strict=True):
            if isinstance(raw, BaseException) and not isinstance(raw, DecodeFailed):
                raise raw
            if raw is _ABSENT:
                continue
            try:
                if isinstance(raw, DecodeFailed):
                    raise raw
                found[key_cls] = self._decode(profile_key_info(key_cls), owner, raw)
            except DecodeFailed as error:
                logger.warning("profile list of %r left out an entry: %s", owner, error)
        return found

    async def forget(self, owner: str) -> None:
        """Remove every entry `owner` holds, across every registered profile key.

        Entries of other owners stay. Each key's entry is deleted as `delete` does it (so a
        buffered view records the deletes, and a read-only one refuses). Named apart from
        `ProfileStore.clear(namespace)`, which empties one namespace of every owner.
        `access.clear(owner)`, its earlier name, still works and warns
        (`DeprecationWarning`) until 0.2.0. Needs the registered keys (`ctx.profile`,
        `kernel.profile`, or `keys=`): otherwise `StateError`."""
        for key_cls in self._registered("forget", owner):
            await self.delete(key_cls, owner)

    clear = renamed(forget, "clear", until="0.2.0")

    def buffered(self) -> BufferedProfileAccess:
        """A `BufferedProfileAccess` on the same store.

        Its writes are recorded and sent to the store only by `apply()`.
        """
        view = self._view_as(BufferedProfileAccess)
        view._ops = []
        view._overlay = {}
        return view

    def read_only(self, reason: str | None = None) -> ReadOnlyProfileAccess:
        """A `ReadOnlyProfileAccess` on the same store.

        It reads like this one and refuses every write with `StateError`, saying `reason`.
        Without one it says why tool gates, which are given this view, cannot write: they
        are re-evaluated freely.
        """
        view = self._view_as(ReadOnlyProfileAccess)
        view._reason = _GATE_REASON if reason is None else reason
        return view

    def _view_as(self, kind: type[_View]) -> _View:
        """A view of the same store and settings, built without re-checking them: the
        engine makes one per hook call, so this is on the phase's path."""
        view = object.__new__(kind)
        view._store = self._store
        view._keys = self._keys
        view._max_value_bytes = self._max_value_bytes
        view._max_update_attempts = self._max_update_attempts
        view._atomic = self._atomic
        view._encoded = self._encoded
        return view

    # -- shared machinery -----------------------------------------------------------------

    def _registered(self, operation: str, owner: str) -> builtins.list[type[ProfileKey[Any]]]:
        """The registered profile keys, by key string, for an owner-wide operation."""
        if self._keys is None:
            raise StateError(
                f"profile {operation}({owner!r}) goes over every registered profile key, and "
                f"this ProfileAccess was built without them. Use ctx.profile (or "
                f"kernel.profile), or build ProfileAccess(store, keys={{K.key: K, ...}})."
            )
        if not isinstance(owner, str):
            raise TypeError(
                f"the owner for profile {operation} must be a StateScope or a string, got "
                f"{type(owner).__name__} {owner!r}"
            )
        return [self._keys[name] for name in sorted(self._keys)]

    async def _raw(self, key_cls: type[ProfileKey[Any]], owner: str) -> Any:
        """The stored builtins of `owner`'s entry of `key_cls`, or `_ABSENT`."""
        info, record = self._resolve(key_cls, owner)
        entry = await self._store_call("get", info, record, self._store.get(info.name, record))
        return _ABSENT if entry is None else entry.value

    def _resolve(self, key_cls: type[ProfileKey[Any]], key: str) -> tuple[ProfileKeyInfo, str]:
        info = profile_key_info(key_cls)
        if self._keys is not None and self._keys.get(info.name) is not key_cls:
            raise UnknownProfileKey(info.name, tuple(self._keys))
        if not isinstance(key, str):
            raise TypeError(
                f"the entry key for profile key {info.name!r} must be a StateScope or a "
                f"string, got {type(key).__name__} {key!r}"
            )
        return info, str(key)

    def _encode(self, info: ProfileKeyInfo, record: str, value: Any) -> EncodedValue:
        """Check `value` against the key's type, that it reads back, and the size limit,
        encoding it once; the result is what goes to the store (see `_outgoing`)."""
        what = f"profile value (entry {record!r})"
        if info.classes is not None and not isinstance(value, info.classes):
            raise StateValidationError(info.name, _expected(info), value, what=what)
        try:
            raw = _to_raw(value)
        except CODEC_ERRORS as exc:
            raise json_refusal(info.name, _expected(info), value, what, exc) from exc
        encoded = encode_json(
            info.name, record, raw, expected=_expected(info), what="profile value"
        )
        try:
            if info.reads_back:
                _read_back(encoded.data, info.value_type)  # what was written can be read
        except CODEC_ERRORS as exc:
            raise StateValidationError(
                info.name, _expected(info), value, what=what, detail=str(exc)
            ) from exc
        check_size(
            info.name,
            record,
            encoded,
            self._max_value_bytes,
            operation="write",
            limit="the limit",
        )
        return encoded

    def _outgoing(self, encoded: EncodedValue) -> Any:
        """The encoded pair for a store that takes it as is, else the plain builtins."""
        return encoded if self._encoded else encoded.value

    def _decode(self, info: ProfileKeyInfo, record: str, raw: Any) -> Any:
        if raw is _ABSENT or raw is _DELETED:
            return info.make_default()
        try:
            return _from_raw(raw, info.value_type)
        except CODEC_ERRORS as exc:
            raise DecodeFailed(info.name, record, exc) from exc

    async def _update(self, info: ProfileKeyInfo, record: str, fn: Callable[[Any], Any]) -> Any:
        if self._atomic:
            return await self._atomic_update(info, record, fn)
        store = self._store
        for attempt in range(self._max_update_attempts):
            entry = await self._store_call("get", info, record, store.get(info.name, record))
            current = self._decode(info, record, _ABSENT if entry is None else entry.value)
            new = fn(current)
            outgoing = self._outgoing(self._encode(info, record, new))
            expected = 0 if entry is None else entry.version
            try:
                await self._store_call(
                    "set",
                    info,
                    record,
                    store.set(info.name, record, outgoing, expected_version=expected),
                )
            except VersionConflict:
                if attempt + 1 == self._max_update_attempts:
                    raise
                # Jittered exponential backoff: racing writers spread out instead of
                # colliding again in lockstep.
                await asyncio.sleep(random.uniform(0, min(0.05, 0.0002 * 2**attempt)))
                continue
            return new
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    async def _atomic_update(
        self, info: ProfileKeyInfo, record: str, fn: Callable[[Any], Any]
    ) -> Any:
        produced: list[Any] = []
        failed: list[BaseException] = []

        def step(entry: Entry | None) -> Any:
            try:
                new = fn(self._decode(info, record, _ABSENT if entry is None else entry.value))
                outgoing = self._outgoing(self._encode(info, record, new))
            except Exception as exc:
                failed.append(exc)
                raise
            produced[:] = [new]
            return outgoing

        store = cast(SupportsAtomicUpdate, self._store)
        try:
            await store.update(info.name, record, step)
        except Exception as exc:
            # The function's own errors (and the kernel's checks) reach the caller as they
            # are; anything else is the store failing.
            if (failed and exc is failed[-1]) or isinstance(exc, StateError):
                raise
            raise StoreError(f"update of entry {record!r}", exc, key=info.name) from exc
        return produced[0]

    async def _store_call(
        self, operation: str, info: ProfileKeyInfo, record: str, call: Awaitable[T]
    ) -> T:
        # Stores of this package raise StateErrors already; anything else a third-party
        # store raises is wrapped so callers handle one error type that names the key.
        try:
            return await call
        except StateError:
            raise
        except Exception as exc:
            raise StoreError(f"{operation} of entry {record!r}", exc, key=info.name) from exc


_ABSENT: Any = object()
_DELETED: Any = object()


@attrs.frozen
class _Op:
    kind: str  # "write", "delete" or "update"
    info: ProfileKeyInfo
    record: str
    raw: Any = None
    fn: Callable[[Any], Any] | None = None


class BufferedProfileAccess(ProfileAccess):
    """A ProfileAccess whose `write`, `delete` and `update` are recorded, not sent.

    Made by `access.buffered()`; the engine gives one to each hook call, action handler and
    tool. Reads see the buffer first, so a hook reads its own writes (after `update`, the
    provisional value computed against the value read then).
    `apply()` sends the recorded operations to the store in order, right after the hook's
    command commits; `discard()` drops them (a deferred or failed hook: its re-run gets a new
    buffer and makes its writes anew, so nothing is ever written twice). A recorded `update`
    runs its function again at apply time against the store's value then, exactly as
    `ProfileAccess.update` does: the value returned inside the hook was provisional.

    See [state layers: writes travel with the
    command](state-layers.md#writes-travel-with-the-command).
    """

    __slots__ = ("_ops", "_overlay")
    _ops: list[_Op]
    _overlay: dict[tuple[str, str], Any]

    async def read(self, key_cls: type[ProfileKey[V]], key: str) -> V:
        info, record = self._resolve(key_cls, key)
        raw = self._overlay.get((info.name, record), _ABSENT)
        if raw is _ABSENT:
            return await super().read(key_cls, key)
        return cast(V, self._decode(info, record, raw))

    async def write(self, key_cls: type[ProfileKey[V]], key: str, value: V) -> None:
        info, record = self._resolve(key_cls, key)
        encoded = self._encode(info, record, value)
        self._record(_Op("write", info, record, raw=self._outgoing(encoded)), encoded.value)

    async def _raw(self, key_cls: type[ProfileKey[Any]], owner: str) -> Any:
        info, record = self._resolve(key_cls, owner)
        raw = self._overlay.get((info.name, record), _ABSENT)
        if raw is _DELETED:
            return _ABSENT
        return await super()._raw(key_cls, owner) if raw is _ABSENT else raw

    async def delete(self, key_cls: type[ProfileKey[Any]], key: str) -> None:
        info, record = self._resolve(key_cls, key)
        self._record(_Op("delete", info, record), _DELETED)

    async def update(self, key_cls: type[ProfileKey[V]], key: str, fn: Callable[[V], V]) -> V:
        info, record = self._resolve(key_cls, key)
        new = fn(await self.read(key_cls, key))
        encoded = self._encode(info, record, new)
        self._record(_Op("update", info, record, fn=fn), encoded.value)
        return new

    async def compare_and_set(
        self, key_cls: type[ProfileKey[V]], key: str, value: V, *, version: int
    ) -> int:
        info, record = self._resolve(key_cls, key)
        raise StateError(
            f"compare_and_set of profile key {info.name!r} (entry {record!r}) needs the "
            f"store's answer at once, and a hook's profile writes are buffered until its "
            f"command commits; use update(), which re-reads and retries at apply time."
        )

    def is_empty(self) -> bool:
        """True when nothing is recorded (apply would do nothing)."""
        return not self._ops

    async def apply(self) -> None:
        """Send the recorded operations to the store in order, then forget them.

        The buffer is emptied first, so applying twice never writes twice. If an operation
        fails, the ones before it stand, the rest are dropped, and `StoreError` naming the
        key and entry is raised (its `cause` is what failed: the store, a `VersionConflict`
        after every retry, or an update function that refused the value at apply time).
        """
        ops, self._ops, self._overlay = self._ops, [], {}
        store = self._store
        for op in ops:
            name, record = op.info.name, op.record
            try:
                if op.kind == "write":
                    await self._store_call("set", op.info, record, store.set(name, record, op.raw))
                elif op.kind == "delete":
                    await self._store_call("delete", op.info, record, store.delete(name, record))
                else:
                    assert op.fn is not None
                    await self._update(op.info, record, op.fn)
            except Exception as exc:
                if isinstance(exc, StoreError) and exc.key == name:
                    raise
                raise StoreError(
                    f"apply of buffered {op.kind} of entry {record!r}", exc, key=name
                ) from exc

    def discard(self) -> None:
        """Drop every recorded operation; nothing of them reaches the store."""
        self._ops.clear()
        self._overlay.clear()

    def _record(self, op: _Op, raw: Any) -> None:
        self._ops.append(op)
        self._overlay[(op.info.name, op.record)] = raw


class ReadOnlyProfileAccess(ProfileAccess):
    """A ProfileAccess that reads and refuses every write with `StateError`.

    Made by `access.read_only(reason)`. Tool gates get this one: a gate is re-evaluated
    whenever the engine likes, so a write there could happen any number of times. `write`,
    `delete` and `update` raise `StateError` (naming `reason`); reads work as usual.

    See [state layers: writes travel with the
    command](state-layers.md#writes-travel-with-the-command).
    """

    __slots__ = ("_reason",)
    _reason: str

    async def write(self, key_cls: type[ProfileKey[V]], key: str, value: V) -> None:
        self._refuse("write", key_cls, key)

    async def delete(self, key_cls: type[ProfileKey[Any]], key: str) -> None:
        self._refuse("delete", key_cls, key)

    async def update(self, key_cls: type[ProfileKey[V]], key: str, fn: Callable[[V], V]) -> V:
        self._refuse("update", key_cls, key)

    async def compare_and_set(
        self, key_cls: type[ProfileKey[V]], key: str, value: V, *, version: int
    ) -> int:
        self._refuse("compare_and_set", key_cls, key)

    def _refuse(self, operation: str, key_cls: type[ProfileKey[Any]], key: str) -> NoReturn:
        info, record = self._resolve(key_cls, key)
        raise StateError(
            f"{self._reason}: {operation} of profile key {info.name!r} (entry {record!r}) "
            f"refused. Write from a phase hook (e.g. BEFORE_TOOL_EXECUTE) instead: its profile "
            f"writes are buffered and applied once, when its command commits."
        )
