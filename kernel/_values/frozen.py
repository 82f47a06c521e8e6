"""Deeply frozen data: what every hook of a tool call sees of its arguments and its result.

A tool call passes many hands: the gates approve its arguments, BEFORE_TOOL_EXECUTE hooks
look at them, the tool runs with them, AFTER_TOOL_EXECUTE hooks look at its result, and the
model is shown that result. If any of them could change a nested list in place, what the
gate approved would not be what the tool received. So the kernel freezes such data all the
way down: dicts become `FrozenDict`, lists `FrozenList` (both still equal to, and encoded
as, the plain dict or list), sets `frozenset`, tuples keep their type with frozen items.
Changing one raises `TypeError` saying what to do instead; `copy.deepcopy` (and `thaw`)
give back plain mutable data, which is what a tool receives.
"""

from __future__ import annotations

import copy
from typing import Any, NoReturn

__all__ = ["FrozenDict", "FrozenList", "freeze", "thaw"]

_HOW = (
    "it is frozen so that no hook can change what a gate approved, what the tool receives or "
    "what the model is shown. Work on a copy (copy.deepcopy gives a plain, mutable one); to "
    "change state, return a command"
)


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"cannot change a {type(self).__name__}: {_HOW}.")


class FrozenDict(dict[str, Any]):
    """A dict that cannot be changed: equal to and encoded as a plain dict, and hashable
    (so a frozen call or message is)."""

    __slots__ = ()
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class FrozenList(list[Any]):
    """A list that cannot be changed: equal to and encoded as a plain list, and hashable."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = remove = pop = clear = sort = reverse = _refuse

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __copy__(self) -> list[Any]:
        return list(self)

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


def freeze(value: Any) -> Any:
    """`value` with every dict, list and set in it frozen (new containers: the caller's are
    left alone). Other objects are kept as they are."""
    if isinstance(value, FrozenDict | FrozenList):
        return value
    if isinstance(value, dict):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list):
        return FrozenList(freeze(item) for item in value)
    if type(value) is tuple:
        return tuple(freeze(item) for item in value)
    if isinstance(value, set | frozenset):
        return frozenset(value)
    return value


def thaw(value: Any) -> Any:
    """Plain, mutable data again, all of it fresh: a dict for every dict, a list for every
    list (the shape the JSON it came from had), a deep copy of anything else."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    if type(value) is tuple:
        return tuple(thaw(item) for item in value)
    return copy.deepcopy(value)
