"""What every ProfileStore does to an entry, whatever it keeps it in.

Every backend holds a value as msgspec JSON, the memory store included, so that the backends
behave alike: a value that is not JSON-compatible is refused when it is set (not when some
other process reads it), a tuple reads back as a list everywhere, a caller mutating its value
after `set` changes nothing stored, and the size limit is measured on the same bytes. The
encoding itself is `statekernel.lowlevel.encode_entry`, the one the kernel's ProfileAccess
uses, so a value it already encoded (an `EncodedValue`) is written without encoding it again.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable
from typing import Any

import msgspec

from statekernel import DecodeFailed, VersionConflict
from statekernel.lowlevel import CODEC_ERRORS, Entry, check_name

__all__ = [
    "check_expected",
    "check_expected_version",
    "check_names",
    "decode_value",
    "listed",
]

logger = logging.getLogger("statekernel")


def check_names(namespace: object, key: object) -> tuple[str, str]:
    """Both names as plain strings (a StateScope becomes its string); a TypeError or
    ValueError for a name no store can keep (`statekernel.lowlevel.check_name`)."""
    for label, name in (("namespace", namespace), ("key", key)):
        check_name(f"profile store {label}", name)
    return str(namespace), str(key)


def listed(
    namespace: str, rows: Iterable[tuple[str, bytes | str, int, float]]
) -> builtins.list[Entry]:
    """The entries of a listing's rows (key, data, version, updated_at); a row that no
    longer decodes is left out and logged, so it costs only itself (a `get` of it still
    raises `DecodeFailed`)."""
    entries = []
    for key, data, version, updated_at in rows:
        try:
            value = decode_value(namespace, key, data)
        except DecodeFailed as error:
            logger.warning("profile store list left out an entry: %s", error)
            continue
        entries.append(Entry(namespace, key, value, version, updated_at))
    return entries


def decode_value(namespace: str, key: str, data: bytes | str) -> Any:
    """The stored JSON as builtins; a row that is no longer JSON fails for itself only."""
    try:
        return msgspec.json.decode(data)
    except CODEC_ERRORS as exc:
        raise DecodeFailed(namespace, key, exc) from exc


def check_expected(namespace: str, key: str, expected: int | None, current: int | None) -> None:
    """Raise VersionConflict unless a write expecting `expected` may replace `current`.

    `expected` None: last write wins. `0`: the entry must not exist. `n`: it must be at
    version `n` (versions start at 1, so an existing entry never matches 0).
    """
    if expected is None:
        return
    if (0 if current is None else current) != expected:
        raise VersionConflict(namespace, key, expected, current)


def check_expected_version(expected: object) -> int | None:
    """The `expected_version` argument, checked: None or an int >= 0."""
    if expected is None:
        return None
    if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
        raise ValueError(
            f"expected_version must be None, 0 (must not exist) or a version >= 1, got {expected!r}"
        )
    return expected
