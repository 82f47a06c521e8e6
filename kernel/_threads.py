"""The ThreadStore protocol: where thread state lives between runs and processes.

The kernel defines the protocol; `statekernel.stores` implements it (memory, SQLite). A store
sees only encoded bytes and a revision: it never needs to know a key's type, and a value whose type
changed since it was saved is found out when the kernel decodes it, key by key, so the error
can name the key.

Saving is a compare-and-set on the thread's revision: `expected_revision` is the revision
the saver last loaded or saved (0 when the thread was never saved). A stale writer, such as
a second process that loaded the thread before the first one checkpointed, gets a
`RevisionConflict` instead of overwriting newer state.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, runtime_checkable

import msgspec


class ThreadState(msgspec.Struct, frozen=True, kw_only=True):
    """One thread's saved state.

    `values`: thread-scoped keys by key string, each encoded as msgspec JSON.
    `revision`: the thread's revision when saved (monotonic across runs).
    `run_values`: while a run is suspended, that run's own (run-scoped) keys, encoded alike.
    `suspended`: while a run is suspended, the kernel's encoded record of it (pending calls,
    identity, step); opaque to the store.
    """

    revision: int
    values: dict[str, bytes] = msgspec.field(default_factory=dict)
    run_values: dict[str, bytes] | None = None
    suspended: bytes | None = None


@runtime_checkable
class ThreadStore(Protocol):
    """Async storage of `ThreadState` by thread id.

    Stores connect lazily on first use, close with `await store.close()` and work as
    `async with store:`. A Kernel or Agent never closes a store it was given.
    """

    async def load(self, thread_id: str) -> ThreadState | None:
        """The thread's saved state, or None if it was never saved."""
        ...

    async def save(self, thread_id: str, state: ThreadState, *, expected_revision: int) -> None:
        """Replace the thread's state in one transaction, if its stored revision is still
        `expected_revision` (0: must not exist yet); else raise `RevisionConflict`."""
        ...

    async def delete(self, thread_id: str) -> None:
        """Forget the thread (a no-op when absent)."""
        ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> ThreadStore: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...
