"""What every store shares: `async with store:` closes it on the way out."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class ClosingStore:
    """Base of the bundled stores: an async context manager around `close()`.

    Stores open lazily on first use, so entering does nothing; leaving closes, and a closed
    store reopens on its next use.
    """

    async def close(self) -> None:
        """Release what the store holds (nothing, for the memory stores)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
