"""Turning a run's keys into stored bytes and back, one key at a time.

Each key is encoded separately (msgspec JSON, through the kernel's `enc_hook` and
`dec_hook`) so that a value whose declared type changed since it was saved fails alone, with
an error naming the key, instead of taking the whole thread down with an opaque message.
Keys in the stored state that no plugin of this kernel registered are kept as raw bytes and
written back untouched: a plugin missing from one run must not cost another plugin its state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import msgspec

from .._engine.registry import KeyBinding, KeyRegistry
from .._errors import CommitRejected, DecodeFailed, StateError
from .._values.codec import (
    CODEC_ERRORS,
    NOT_EXACT,
    STORABLE_TYPES,
    dec_hook,
    decodes_back,
    enc_hook,
)
from .._values.keys import KeyScope

logger = logging.getLogger("statekernel")

_encoder = msgspec.json.Encoder(enc_hook=enc_hook)


@attrs.frozen
class Restored:
    """Decoded values ready to seed a run, and what had to be set aside."""

    values: dict[str, Any]
    foreign: dict[str, bytes]
    undecodable: dict[str, bytes]


class EncodeCache:
    """Remembers the bytes of each value last encoded, so an unchanged value is neither
    re-validated nor re-encoded at every checkpoint. Stored values are never mutated in
    place (snapshots are frozen), so identity is a safe test for "unchanged"."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[str, tuple[Any, bytes]] = {}

    def encode(
        self,
        name: str,
        value: Any,
        validate: Callable[[Any], None] | None = None,
        *,
        check_type: Any = None,
    ) -> bytes:
        """The value's bytes; a value not seen before is first checked by `validate`, and,
        given `check_type`, decoded again to check that it comes back equal."""
        seen = self._seen.get(name)
        if seen is not None and seen[0] is value:
            return seen[1]
        if validate is not None:
            validate(value)
        try:
            raw = _encoder.encode(value)
            if check_type is not None and not decodes_back(
                raw, msgspec.json.Decoder(check_type, dec_hook=dec_hook), value
            ):
                raise ValueError(NOT_EXACT)
        except CODEC_ERRORS as error:
            raise StateError(
                f"value of key {name!r} cannot be encoded for persistence: {error}. "
                f"{STORABLE_TYPES}"
            ) from error
        self._seen[name] = (value, raw)
        return raw


def encode_scope(
    registry: KeyRegistry,
    values: Mapping[str, Any],
    scope: KeyScope,
    cache: EncodeCache,
) -> dict[str, bytes]:
    """Encode the held values of the persistent keys in `scope`, validating each first."""
    encoded: dict[str, bytes] = {}
    by_name = registry.by_name
    for name, value in values.items():
        binding = by_name.get(name)
        if binding is None or binding.scope is not scope or not binding.persistent:
            continue
        encoded[name] = cache.encode(
            name,
            value,
            _persist_check(binding) if binding.has_validate else None,
            check_type=None if binding.exact.values else binding.value_type,
        )
    return encoded


def _persist_check(binding: KeyBinding) -> Callable[[Any], None]:
    """`validate` before persisting (the seed's validate_for_persist), as a CommitRejected."""

    def check(value: Any) -> None:
        try:
            binding.key.validate(value)
        except Exception as error:
            raise CommitRejected(
                binding.name, error, plugin=binding.plugin, stage="persist"
            ) from error

    return check


def decode_values(
    registry: KeyRegistry,
    raw: Mapping[str, bytes],
    *,
    record: str,
    skip_undecodable: bool,
    scope: KeyScope | None = None,
) -> Restored:
    """Decode stored values of registered keys; keep the rest raw.

    A value that no longer decodes raises `DecodeFailed` naming the key, unless
    `skip_undecodable`: then the key starts from its default in this run and its stored
    bytes are kept, to be written back unless the run writes the key anew.
    """
    values: dict[str, Any] = {}
    foreign: dict[str, bytes] = {}
    undecodable: dict[str, bytes] = {}
    by_name = registry.by_name
    for name, data in raw.items():
        binding = by_name.get(name)
        if (
            binding is None
            or not binding.persistent  # memory only here: the stored bytes are someone else's
            or (scope is not None and binding.scope is not scope)
        ):
            foreign[name] = data
            continue
        try:
            values[name] = msgspec.json.decode(data, type=binding.value_type, dec_hook=dec_hook)
        except CODEC_ERRORS as error:
            if not skip_undecodable:
                raise DecodeFailed(name, record, error) from error
            logger.warning(
                "thread %r: key %r does not decode and starts from its default: %s",
                record,
                name,
                error,
            )
            undecodable[name] = data
    return Restored(values, foreign, undecodable)
