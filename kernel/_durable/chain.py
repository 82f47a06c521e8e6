"""The journal's chain: how a thread's stored journal proves that it is whole and unchanged.

A store is a file or a server that an operator restores, a disk corrupts and a hand edits;
a thread must not load from it missing a record, or with one nobody committed. So every
record the kernel stores begins with the *link* of the record before it (16 bytes of
BLAKE2b over that record's stored bytes), the head's *seal* names the newest link and the
revision the chain starts at, and every snapshot carries its own seal: the link at its
revision and a digest of its values and revision. A record lost, reordered, altered,
inserted or forged, a head moved, or a snapshot altered (even one that still decodes)
breaks a link, and the walk here names the first revision that cannot be trusted.

A record is vouched for by the next one (whose link must be its digest) or, for the newest,
by the head; so a broken link between two records names the earlier one, which is where
the doubt starts. Unkeyed, the chain catches damage and edits, not an adversary who
rewrites every record after the one they forge and the head too. A kernel given a
`ChainKey` keys every link and snapshot digest of the threads it starts (BLAKE2b's own
`key`), and their heads name the key's id: such a thread can be re-chained only by whoever
holds the key, and a reader with another key (or none) is told so before anything is read,
not shown a forgery at revision 1. A thread keeps the kind of chain it started with: one
stored without a key stays unkeyed (a keyed kernel reads and extends it as such; a fork a
keyed kernel makes is keyed).

Threads stored before the chain have no seal; their records begin with a digest of their
own body. They load as they are, and their next save starts the chain (`chained_from`):
from then on every record and snapshot is sealed, and the older records keep only their
own digests until pruning drops them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import attrs
import msgspec

from .._errors import ChainKeyMismatch, ChainKeyMissing, JournalCorrupted
from .journal import LINK_SIZE, CommitRecord, decode_record, encode_record_bytes, record_prev
from .store import JournalEntry, ThreadSnapshot

__all__ = [
    "SEAL",
    "START",
    "Chain",
    "ChainKey",
    "HeadSeal",
    "chain_key_of",
    "chain_records",
    "check_head",
    "link_of",
    "read_head_seal",
    "seal_snapshot",
    "snapshot_link",
    "walk",
]

START = bytes(LINK_SIZE)
"""The link before a thread's first record."""
SEAL = "statekernel.seal"
"""Where a snapshot's values hold its seal (a name no key can have)."""


KEY_SIZES = (16, 64)
"""The shortest and longest chain key: BLAKE2b takes keys up to 64 bytes; below 16, a key
could be guessed."""


@attrs.frozen
class ChainKey:
    """The secret a kernel keys its threads' chains with, and its id (8 bytes of keyed
    BLAKE2b over a fixed text): what a keyed head names, so that a reader can tell another
    key from a forged record without the id giving anything of the secret away."""

    secret: bytes = attrs.field(repr=False)
    id: bytes = attrs.field(init=False)
    # BLAKE2b with the key's block already hashed: a link copies it, so that a keyed link
    # costs what an unkeyed one does (hashing the key afresh would add a block to each).
    keyed: hashlib.blake2b = attrs.field(init=False, repr=False, eq=False)

    @id.default
    def _id(self) -> bytes:
        return hashlib.blake2b(b"statekernel chain key id", key=self.secret, digest_size=8).digest()

    @keyed.default
    def _keyed(self) -> hashlib.blake2b:
        return hashlib.blake2b(digest_size=LINK_SIZE, key=self.secret)


def chain_key_of(value: object) -> ChainKey | None:
    """A `chain_key=` argument as a `ChainKey`: bytes of 16 to 64, else `TypeError`
    (a `str` above all: text is not a key) or `ValueError`."""
    if value is None:
        return None
    if isinstance(value, str):
        raise TypeError(
            "chain_key must be bytes, not a str: give the key's bytes (e.g. "
            "bytes.fromhex(...) of the hex the command line reads, or secrets.token_bytes(32))"
        )
    if not isinstance(value, bytes | bytearray):
        raise TypeError(
            f"chain_key must be bytes (e.g. secrets.token_bytes(32)), got {type(value).__name__}"
        )
    shortest, longest = KEY_SIZES
    if not shortest <= len(value) <= longest:
        raise ValueError(
            f"chain_key must be {shortest} to {longest} bytes long, got "
            f"{len(value)} (secrets.token_bytes(32) makes one)"
        )
    return ChainKey(bytes(value))


def link_of(data: bytes, key: ChainKey | None = None) -> bytes:
    """The link of a stored record: the digest of its bytes (keyed, in a keyed chain), which
    the next record names."""
    if key is None:
        return hashlib.blake2b(data, digest_size=LINK_SIZE).digest()
    hasher = key.keyed.copy()
    hasher.update(data)
    return hasher.digest()


class HeadSeal(msgspec.Struct, frozen=True, array_like=True):
    """What a thread's head says of its journal: the newest record's link, the first
    revision whose record is chained (1, unless the thread was stored before the chain),
    and, for a keyed chain, the key's id. (An unkeyed seal is the two-item array it always
    was; readers from before keys read a keyed one's first two items.)"""

    link: bytes
    chained_from: int
    key_id: bytes | None = None


_seal_encoder = msgspec.msgpack.Encoder()
_head_seal = msgspec.msgpack.Decoder(HeadSeal)


class _SnapshotSeal(msgspec.Struct, frozen=True):
    link: str  # hex
    digest: str  # hex


_snapshot_seal = msgspec.json.Decoder(_SnapshotSeal)


@attrs.frozen
class Chain:
    """Where a thread's chain stands: the link at its head, the revision it starts at
    (None: a thread stored before the chain, whose next save starts it), and the key its
    links are computed with (None: an unkeyed chain)."""

    link: bytes = START
    chained_from: int | None = 1
    key: ChainKey | None = None

    def seal(self) -> bytes | None:
        if self.chained_from is None:
            return None
        if self.key is None:
            return _seal_encoder.encode([self.link, self.chained_from])
        return _seal_encoder.encode(HeadSeal(self.link, self.chained_from, self.key.id))


def read_head_seal(
    thread_id: str, revision: int, data: bytes | None, key: ChainKey | None
) -> Chain:
    """The chain a loaded head names (`ThreadState.seal`), read by a kernel holding `key`:
    a keyed chain needs that very key (`ChainKeyMissing`, `ChainKeyMismatch`); an unkeyed
    one is read as it is, whatever the kernel holds."""
    if data is None:
        return Chain(START, None)
    try:
        seal = _head_seal.decode(data)
    except msgspec.MsgspecError as error:
        raise JournalCorrupted(
            thread_id, revision, f"the head's seal does not decode ({error})"
        ) from error
    if seal.key_id is None:
        return Chain(seal.link, seal.chained_from)
    if key is None:
        raise ChainKeyMissing(thread_id, seal.key_id.hex())
    if key.id != seal.key_id:
        raise ChainKeyMismatch(thread_id, seal.chained_from, seal.key_id.hex(), key.id.hex())
    return Chain(seal.link, seal.chained_from, key)


def chain_records(
    records: Iterable[CommitRecord], chain: Chain
) -> tuple[tuple[JournalEntry, ...], Chain]:
    """`records` as stored entries, each linked to the one before; and the chain after them
    (a thread stored before the chain starts it at the first of them)."""
    link = chain.link
    entries: list[JournalEntry] = []
    for record in records:
        data = encode_record_bytes(record, link)
        entries.append(JournalEntry(record.revision, data))
        link = link_of(data, chain.key)
    if not entries:
        return (), chain
    chained_from = chain.chained_from if chain.chained_from is not None else entries[0].revision
    return tuple(entries), Chain(link, chained_from, chain.key)


def seal_snapshot(
    thread_id: str, values: dict[str, bytes], revision: int, link: bytes, key: ChainKey | None
) -> dict[str, bytes]:
    """`values` with their seal: the link at `revision` and a digest of everything else
    (the thread's id included: a snapshot of another thread does not pass for this one's),
    keyed in a keyed chain."""
    digest = _snapshot_digest(thread_id, values, revision, link, key)
    sealed = {name: data for name, data in values.items() if name != SEAL}
    sealed[SEAL] = msgspec.json.encode(_SnapshotSeal(link.hex(), digest.hex()))
    return sealed


def _snapshot_digest(
    thread_id: str, values: dict[str, bytes], revision: int, link: bytes, key: ChainKey | None
) -> bytes:
    """BLAKE2b (16 bytes; keyed with `key`) of the MessagePack array
    `[thread_id, revision, link, [[name, bytes], ...]]`, the values sorted by name, the seal
    left out."""
    items = sorted((name, data) for name, data in values.items() if name != SEAL)
    return link_of(_seal_encoder.encode([thread_id, revision, link, items]), key)


def snapshot_link(thread_id: str, snapshot: ThreadSnapshot, chain: Chain) -> bytes | None:
    """The link at a snapshot's revision, once its seal proves its values unchanged; None
    for a snapshot stored before the chain (nothing to check it against)."""
    revision = snapshot.revision
    raw = snapshot.values.get(SEAL)
    if raw is None:
        if chain.chained_from is not None and revision >= chain.chained_from:
            raise JournalCorrupted(
                thread_id, revision, f"the snapshot at revision {revision} lost its seal"
            )
        return None
    try:
        seal = _snapshot_seal.decode(raw)
        link, digest = bytes.fromhex(seal.link), bytes.fromhex(seal.digest)
    except (msgspec.MsgspecError, ValueError) as error:
        raise JournalCorrupted(
            thread_id, revision, f"the seal of the snapshot at revision {revision} is damaged"
        ) from error
    if _snapshot_digest(thread_id, snapshot.values, revision, link, chain.key) != digest:
        raise JournalCorrupted(
            thread_id,
            revision,
            f"the snapshot at revision {revision} does not match its seal: it was changed",
        )
    return link


def walk(
    thread_id: str,
    entries: Sequence[JournalEntry],
    *,
    after: int,
    link: bytes | None,
    chain: Chain,
    then: bytes | None = None,
) -> tuple[list[CommitRecord], list[bytes]]:
    """The records of `entries`, which must follow revision `after` one by one, checked
    link by link from `link` (the link at `after`, trusted; None: unknown, the first is
    taken as it is), and the link at each of them. `then` is the link that vouches for the
    last (the head's, when they end there). Every record from `chain.chained_from` on must
    carry its link; before that (a thread stored before the chain) a record is checked
    only if it carries one. A break is `JournalCorrupted`."""
    records: list[CommitRecord] = []
    links: list[bytes] = []
    expected = after + 1
    for index, entry in enumerate(entries):
        revision = entry.revision
        if revision != expected:
            raise JournalCorrupted(
                thread_id, expected, f"the record of revision {expected} is missing"
            )
        record = decode_record(entry.data, thread_id=thread_id, revision=revision)
        own = link_of(entry.data, chain.key)
        prev = record_prev(entry.data)
        chained = chain.chained_from is not None and revision >= chain.chained_from
        if link is not None and (chained or prev is not None) and prev != link:
            if chain.key is not None and index > 0 and prev == link_of(entries[index - 1].data):
                raise JournalCorrupted(
                    thread_id,
                    revision - 1,
                    f"the record of revision {revision - 1} was changed: the record after it "
                    f"names its unkeyed link, as if the journal was re-chained by someone "
                    f"without the thread's chain key",
                )
            _broken(thread_id, entries, index, own, then, trusted_start=index == 0)
        records.append(record)
        links.append(own)
        link = own
        expected = revision + 1
    return records, links


def _broken(
    thread_id: str,
    entries: Sequence[JournalEntry],
    index: int,
    own: bytes,
    then: bytes | None,
    *,
    trusted_start: bool,
) -> None:
    """Name the record a broken link condemns. The record at `index` does not name the link
    of the one before it: either it was changed (then nothing after it vouches for it
    either) or the one before it was (and the record after this one still vouches for it)."""
    revision = entries[index].revision
    successor = record_prev(entries[index + 1].data) if index + 1 < len(entries) else then
    if trusted_start or (successor is not None and successor != own):
        raise JournalCorrupted(
            thread_id,
            revision,
            f"the record of revision {revision} was changed or put there by hand: it does not "
            f"follow the one before it",
        )
    raise JournalCorrupted(
        thread_id,
        revision - 1,
        f"the record of revision {revision - 1} was changed: the record after it names another",
    )


def _lost_newest(head: int, reached: int) -> str:
    """What is wrong with a journal whose records end at `reached`, before its `head`."""
    if reached + 1 == head:
        gone = f"no record of revision {head}"
    else:
        gone = f"no records of revisions {reached + 1} to {head}"
    return (
        f"its head names revision {head}, but the store holds {gone} (deleted, or lost in "
        f"a partial restore)"
    )


def _beyond_head(head: int, reached: int) -> str:
    """What is wrong with a journal holding records up to `reached`, past its `head`.

    No save leaves one: a store writes a save's records and its head in one transaction,
    so a record past the head was put there by hand, or the head was restored from an
    older backup than the records (a head moved back)."""
    extra = (
        f"a record of revision {head + 1}"
        if reached == head + 1
        else (f"records of revisions {head + 1} to {reached}")
    )
    return (
        f"the store holds {extra} beyond its head (revision {head}), which no save leaves "
        f"(put there by hand, or the head restored from an older backup than the records)"
    )


def check_head(
    thread_id: str, head: int, reached: int, link: bytes | None, chain: Chain, *, sealed: bool
) -> None:
    """The head must name the revision and the link the walk reached; and a head without a
    seal is a thread stored before the chain only if nothing read was `sealed` (a record
    with a link, a snapshot with a seal): else its seal was taken away."""
    if chain.chained_from is None and sealed:
        raise JournalCorrupted(
            thread_id, reached, "the head lost its seal: nothing vouches for the newest record"
        )
    if reached < head:
        raise JournalCorrupted(thread_id, reached + 1, _lost_newest(head, reached))
    if reached > head:
        raise JournalCorrupted(thread_id, head + 1, _beyond_head(head, reached))
    if chain.chained_from is not None and link is not None and link != chain.link:
        raise JournalCorrupted(
            thread_id,
            head,
            f"the head's seal does not name the record of revision {head}: one of them was changed",
        )
