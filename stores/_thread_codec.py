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

__all__ = ["check_position", "decode_state", "encode_state"]

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(ThreadState)


def encode_state(thread_id: object, state: object, expected_position: object) -> bytes:
    """The state as MessagePack, after checking the arguments of a `save`."""
    if not isinstance(thread_id, str):
        raise TypeError(f"thread_id must be a string, got {type(thread_id).__name__}")
    if not isinstance(state, ThreadState):
        raise TypeError(
            f"a thread store saves kernel.threads.ThreadState, got {type(state).__name__}"
        )
    if (
        isinstance(expected_position, bool)
        or not isinstance(expected_position, int)
        or expected_position < 0
    ):
        raise ValueError(
            f"expected_position must be the thread's write position last loaded or saved "
            f"(0: never saved), got {expected_position!r}"
        )
    return _ENCODER.encode(state)


def decode_state(thread_id: str, data: bytes, position: int) -> ThreadState:
    """The saved state at the store's write `position`; a document that no longer decodes
    names the thread. (The position lives beside the document, not in it: documents saved
    before there were positions load with the column that held their revision, which only
    ever grew, so their next save still chains.)"""
    try:
        state = _DECODER.decode(data)
    except msgspec.MsgspecError as exc:
        raise DecodeFailed("thread state", thread_id, exc) from exc
    return msgspec.structs.replace(state, position=position)


def check_position(expected: int, current: int | None) -> int:
    """The position a save expecting `expected` moves the thread to, or RevisionConflict.

    A thread never saved is at position 0, so a first save passes `expected_position=0`.
    Every save moves the position by one, whatever it carries, so two savers that loaded the
    same position can never both win.
    """
    actual = 0 if current is None else current
    if actual != expected:
        raise RevisionConflict(expected, actual, what="thread save", position=True)
    return expected + 1
