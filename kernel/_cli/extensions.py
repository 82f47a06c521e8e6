"""What the command line finds in the package's metadata: the store backends it opens and
the demo it runs.

The kernel never imports the layers above it, and the command line is part of the kernel
(`python -m statekernel` must be). So it depends on what they offer, not on them: the
distribution names them as entry points of the group `statekernel.cli` (`pyproject.toml`),
`stores` (the module `statekernel.stores`) and `demo` (`statekernel.plugins._demo:demo`),
and the command line loads them when a command needs them. A backend that implements the
same four functions could take their place.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from importlib.metadata import entry_points
from typing import Any, Protocol, cast

from statekernel import StateError, Stores

__all__ = ["GROUP", "Demo", "StoreBackends", "demo", "store_backends"]

GROUP = "statekernel.cli"


class StoreBackends(Protocol):
    """What `statekernel.stores` offers a tool that is handed a database by name."""

    async def stored_components(self, db: str | os.PathLike[str]) -> dict[str, int]: ...

    def open_stores(self, db: str | os.PathLike[str], *, read_only: bool = False) -> Stores: ...

    def embedded(self, folder: str | os.PathLike[str] = ...) -> Stores: ...

    def redacted(self, text: str) -> str: ...


Demo = Callable[..., Awaitable[None]]
"""`await demo(stores, trace=False)`: tells the demo's story on `stores`."""


def store_backends() -> StoreBackends:
    return cast(StoreBackends, _load("stores"))


def demo() -> Demo:
    return cast(Demo, _load("demo"))


def _load(name: str) -> Any:
    found = entry_points(group=GROUP, name=name)
    if not found:
        raise StateError(
            f"the command line's {name!r} is not installed: this statekernel has no entry "
            f"point {name!r} in the group {GROUP!r}. Reinstall the package (pip install "
            f"statekernel) so that its metadata names it."
        )
    return next(iter(found)).load()
