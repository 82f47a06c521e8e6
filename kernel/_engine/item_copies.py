"""`ItemCopies`: a Vector of mutable items as a commit hands it to `apply`.

A `Vector` is persistent, so the vector itself never needs copying; its items may be
mutable (`Vector[dict]`, a bare `Vector`), and they are shared with every earlier snapshot.
Deep-copying the whole vector before each `apply` kept those snapshots frozen at a cost
that grew with the vector's length. This view keeps them frozen at the cost of what `apply`
reads: each item is deep-copied when it is read, and growing it (`append`, `extend`, `+`)
returns a plain `Vector` sharing every item it did not read, which nobody could have changed.

An `apply` is pure and returns a new value, so it never sees the difference, with one
exception: an item changed in place after reading it would be a change to a copy, lost. So
the view remembers each item it handed out, and `check` refuses the commit when one of them
was changed (`CommitRejected` saying what to do instead: return a new vector with the new
item, `value[:-1].append(new_item)`), rather than lose the change silently.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from .._values.vector import Vector

__all__ = ["ItemCopies"]


class ItemCopies(Sequence[Any]):
    """A read-only view of `vector` whose items are deep copies, made as they are read."""

    __slots__ = ("_handed", "vector")

    def __init__(self, vector: Vector[Any]) -> None:
        self.vector = vector
        self._handed: list[tuple[Any, Any]] = []  # (item as stored, the copy handed out)

    def _copy(self, item: Any) -> Any:
        handed = copy.deepcopy(item)
        self._handed.append((item, handed))
        return handed

    def changed_in_place(self) -> bool:
        """Whether a copy handed out no longer equals the item it was made from."""
        return any(handed != item for item, handed in self._handed)

    def __len__(self) -> int:
        return len(self.vector)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> ItemCopies: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            view = ItemCopies(self.vector[index])
            view._handed = self._handed  # one record of what this apply was handed
            return view
        return self._copy(self.vector[index])

    def __iter__(self) -> Iterator[Any]:
        return map(self._copy, self.vector)

    def __reversed__(self) -> Iterator[Any]:
        return map(self._copy, reversed(self.vector))

    def __contains__(self, value: object) -> bool:
        return value in self.vector

    def index(self, value: Any, start: int = 0, stop: int = sys.maxsize) -> int:
        return self.vector.index(value, start, stop)

    def count(self, value: Any) -> int:
        return self.vector.count(value)

    def append(self, item: Any) -> Vector[Any]:
        return self.vector.append(item)

    def extend(self, items: Iterable[Any]) -> Vector[Any]:
        return self.vector.extend(items)

    def __add__(self, other: Iterable[Any]) -> Vector[Any]:
        return self.vector + other

    def tolist(self) -> list[Any]:
        return list(self)

    def totuple(self) -> tuple[Any, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return self.vector == other

    def __hash__(self) -> int:
        return hash(self.vector)

    def __repr__(self) -> str:
        return repr(self.vector)
