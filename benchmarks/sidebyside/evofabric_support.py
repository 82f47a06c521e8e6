"""What the EvoFabric sides share: the named updaters, a quiet logger, state schemas.

EvoFabric names a field's reducer with a string registered in its process-wide
`StateUpdater` (`Annotated[int, "name"]`); its schemas must carry real `Annotated` objects,
which is why they are built with the functional `TypedDict(...)` form (this package's
modules use `from __future__ import annotations`, which would turn a class body's
annotations into strings EvoFabric does not read).

Its engine logs every node's input and output at INFO through loguru, to stderr. The suite
hands it a logger that drops them, so that the numbers are not the terminal's; the messages
are still formatted, as they are in any EvoFabric run.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, TypedDict

ADD = "statekernel_bench_add"
EXTEND = "statekernel_bench_extend"
OVERWRITE = "overwrite"  # EvoFabric's own


class _Silent:
    """A logger whose every method does nothing."""

    def __getattr__(self, name: str) -> Any:
        return _drop


def _drop(*args: Any, **kwargs: Any) -> None:
    return None


@functools.cache
def prepare() -> None:
    """Register the updaters and silence the engine's log, once per process."""
    from evofabric.core.graph import StateUpdater
    from evofabric.core.typing import MISSING
    from evofabric.logger import set_logger

    def add(old: Any = MISSING, new: Any = MISSING) -> Any:
        return (0 if old is MISSING else old) + (0 if new is MISSING else new)

    def extend(old: Any = MISSING, new: Any = MISSING) -> Any:
        return (old if old is not MISSING else []) + (new if new is not MISSING else [])

    for name, function in ((ADD, add), (EXTEND, extend)):
        if not StateUpdater.registered(name):
            StateUpdater.register(name)(function)
    set_logger(_Silent())


def schema(name: str, held: int = 0) -> Any:
    """A state with `count` (add), `log` (extend) and `held` int fields k0.. (overwrite)."""
    fields: dict[str, Any] = {"count": Annotated[int, ADD], "log": Annotated[list[int], EXTEND]}
    fields.update({f"k{i}": Annotated[int, OVERWRITE] for i in range(held)})
    return TypedDict(name, fields)  # type: ignore[operator]
