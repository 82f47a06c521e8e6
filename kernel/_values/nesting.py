"""How deep free-form data may nest: the one depth policy for what users hand the kernel.

A tool call's arguments and a tool's parameter schema, a tool's result, a gate's `SetResult`
or `Suspend` ticket, an outside `Decision`, a model request's parameters: each is data of any
shape, and each passes hands that copy, freeze, encode, store or send it by recursion
(`freeze`, `copy.deepcopy`, JSON, the journal). Nested deeper than the interpreter's stack
allows, it would end in a `RecursionError` in whichever hand came first. So such data is
measured once, where it is handed in, without recursion, against one limit, and refused
whole there (`ValueTooDeep` and its kinds); nothing of it is kept, and nothing is cut short.

State values have a check of their own: every committed mutable value is copied when it is
committed (`copy_of`), and one too deep to copy is refused there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_NESTING_DEPTH", "nested_deeper"]

MAX_NESTING_DEPTH = 100
"""How many levels of dicts and lists (tuples, sets) inside one another free-form data may
have. Real tool schemas, arguments and results nest a few levels; 100 leaves every hand that
walks the data by recursion a wide margin on the interpreter's stack."""


def nested_deeper(value: object, limit: int = MAX_NESTING_DEPTH) -> bool:
    """Whether `value` holds dicts and lists (tuples, sets) more than `limit` levels inside
    one another. Iterative, so any depth is measured without the stack; a container that
    holds itself counts as too deep. Other objects are leaves: what they hold is theirs."""
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple | set | frozenset):
            children = item
        else:
            continue
        if depth > limit:
            return True
        deeper = depth + 1
        # Plain leaves are most of a result (ids, names, numbers): never queued.
        pending.extend((child, deeper) for child in children if type(child) not in _LEAVES)
    return False


_LEAVES = frozenset({str, int, float, bool, bytes, type(None)})
