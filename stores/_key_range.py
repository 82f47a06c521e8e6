"""A literal prefix as a range of names, for SQL stores: LIKE would treat % and _ as
wildcards, and a range uses the primary key's index."""

from __future__ import annotations

__all__ = ["prefix_upper_bound"]

_MAX_CODE_POINT = 0x10FFFF


def prefix_upper_bound(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix`, or None if none.

    SQL databases compare text bytewise in UTF-8 (SQLite) or by code point (PostgreSQL's C
    collation), which order alike, so bumping the last code point that can be bumped gives
    the bound (skipping the surrogate range, which UTF-8 cannot hold). Callers still filter
    with startswith, so the bound only has to be safe, and it is exact. (A range, because
    LIKE would treat % and _ as wildcards, and a range uses the primary key's index.)
    """
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < _MAX_CODE_POINT:
            bumped = last + 1
            if 0xD800 <= bumped <= 0xDFFF:
                bumped = 0xE000
            return "".join(chars) + chr(bumped)
    return None
