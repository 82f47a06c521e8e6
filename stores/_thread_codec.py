"""What every ThreadStore does to a thread's state, whatever it keeps it in.

A thread's whole `ThreadState` is one MessagePack document, written and replaced as a unit:
an emptied state is saved as empty (no stale key can come back from an earlier save), and a
load is all-or-nothing. The values inside are already encoded per key by the kernel, so the
store never needs to know a key's type.
"""

from __future__ import annotations

import msgspec

from statekernel import DecodeFailed, RevisionConflict
from statekernel.lowlevel import ThreadState

__all__ = ["check_revision", "decode_state", "encode_state"]

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(ThreadState)


def encode_state(thread_id: object, state: object, expected_revision: object) -> bytes:
    """The state as MessagePack, after checking the arguments of a `save`."""
    if not isinstance(thread_id, str):
        raise TypeError(f"thread_id must be a string, got {type(thread_id).__name__}")
    if not isinstance(state, ThreadState):
        raise TypeError(
            f"a thread store saves kernel.threads.ThreadState, got {type(state).__name__}"
        )
    if (
        isinstance(expected_revision, bool)
        or not isinstance(expected_revision, int)
        or expected_revision < 0
    ):
        raise ValueError(
            f"expected_revision must be the revision last loaded or saved (0: never saved), "
            f"got {expected_revision!r}"
        )
    return _ENCODER.encode(state)


def decode_state(thread_id: str, data: bytes) -> ThreadState:
    """The saved state; a document that no longer decodes names the thread."""
    try:
        return _DECODER.decode(data)
    except msgspec.MsgspecError as exc:
        raise DecodeFailed("thread state", thread_id, exc) from exc


def check_revision(expected: int, current: int | None) -> None:
    """Raise RevisionConflict unless a save expecting `expected` may replace `current`.

    A thread never saved counts as revision 0, so a first save passes `expected_revision=0`;
    a thread saved at revision 0 (no commit yet) also matches 0, since that is what its
    saver last loaded.
    """
    actual = 0 if current is None else current
    if actual != expected:
        raise RevisionConflict(expected, actual, what="thread checkpoint")
