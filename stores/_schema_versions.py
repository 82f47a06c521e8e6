"""Which schema versions a read-only store reads, and what it says of the others.

A store opened for writing migrates an older schema; one opened read-only cannot (a
migration writes), so it reads a version only if this code reads it as it is (from
`readable_from` up to its own `version`) and refuses the rest with the fix. Both backends
ask this one question with their own words for the place ("the file", "the database").
"""

from __future__ import annotations

__all__ = ["read_only_refusal"]


def read_only_refusal(
    place: str, component: str, found: int | None, version: int, readable_from: int
) -> str | None:
    """Why a read-only open of `component` at schema version `found` (None: absent) in
    `place` is refused; None when it is read as it is."""
    if found is not None and readable_from <= found <= version:
        return None
    if found is None:
        return f"{place} holds no {component} tables"
    if found > version:
        return (
            f"{place}'s {component} tables are at schema version {found}, newer than this "
            f"statekernel's {version}: upgrade statekernel to read them"
        )
    return (
        f"{place}'s {component} tables are at schema version {found}, older than this "
        f"statekernel's {version}: open it once for writing to migrate them"
    )
