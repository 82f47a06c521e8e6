"""The team mailbox: messages between agents, stored before `send` returns and delivered
into each recipient's thread exactly once, in order per sender, across crashes.

Exactly once needs two facts to be one: "the message is in the recipient's history" and
"the message was consumed". So the mailbox never marks anything consumed. Each recipient
has an inbox in the ProfileStore; a send appends a letter to it with one compare-and-set
(or, after lost races, one atomic `update`), numbering it per sender. The recipient's
thread keeps, in its own state (`MailCursor`), the last number delivered from each sender,
and a delivery commits the messages and the cursor's advance in one commit, saved by the
run's next checkpoint. Before that save a crash loses both, and the letters are delivered
again; after it the cursor says they were. Letters at or below the saved cursor are pruned
from the inbox, only ever by the cursor as a store holds it.

An inbox is a small head entry and sealed pages. A send appends to the head, so what it
writes stays small however much mail waits; once the head holds `PAGE_LETTERS` letters, the
sender copies them into a page entry and then drops them from the head. Every letter has a
fixed place (its index) in the inbox, so a page written twice, or a page and a head that
both hold a letter after a crash between the two writes, read as one letter. A reader takes
the head first and the pages after: a letter moves to a page before it leaves the head, so
the reader never misses one that later letters of its sender were read beyond.

A letter from a run comes out of its sender's outbox (`outbox.py`) and names its origin:
the sender's thread and the entry's number there. The inbox keeps, per origin thread, the
highest number it took, and drops a letter at or below it: its sender posts entries in
order, so whatever was posted before is in. A send from outside a run given a `message_id`
is dropped when the recipient's inbox saw that id from that sender among the last
`RECENT_IDS`, so a caller retrying a send whose answer it lost sends once.

Every store call goes through `ProfileAccess` (its compare-and-set, its atomic update), so
values are checked and a store's failure becomes a `StoreError` in one place.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping

import attrs
import msgspec

from .._errors import StateError, VersionConflict
from .._profile.access import ProfileAccess
from .._profile.keys import ProfileKey
from .._values.messages import Message

__all__ = [
    "PRUNE_AT",
    "TASK_SENDER",
    "Delivery",
    "Inbox",
    "InboxData",
    "InboxPage",
    "Letter",
    "Mailbox",
    "deliverable",
    "sender_of",
]

TASK_SENDER = "@task"
"""The sender of a spawned agent's task: its one letter is its first message, as given."""

PRUNE_AT = 32
"""How many delivered letters an inbox may hold before a team prunes it: pruning is a write,
and one per run would double what a delivery costs the store."""

CAS_ATTEMPTS = 4
"""How many compare-and-set races a send loses before it takes the store's atomic update."""

CACHED_HEADS = 1024
"""How many inbox heads a mailbox keeps (the ones it wrote last) to send without a read."""

PAGE_LETTERS = 32
"""How many letters an inbox head holds before its sender seals them into a page."""

RECENT_IDS = 8
"""How many message ids per sender an inbox remembers to drop a repeated send."""

_ID_PREFIX = "mail:"


class Letter(msgspec.Struct, frozen=True):
    """One stored message for one recipient: `seq` numbers it among its sender's letters
    to that recipient; `via` says how it was addressed ("topic t", "group g", or None for
    point-to-point); `traceparent`, the span it was sent under (W3C trace context), if any:
    the delivering run's span links to it."""

    sender: str
    seq: int
    content: str
    via: str | None = None
    traceparent: str | None = None


class InboxData(msgspec.Struct, frozen=True):
    """A recipient's inbox (or its head): the letters not yet pruned, in arrival order, the
    first one at index `base`; the last number given to each sender, and each sender's
    recent message ids."""

    letters: tuple[Letter, ...] = ()
    last_seq: dict[str, int] = {}
    recent: dict[str, tuple[str, ...]] = {}
    base: int = 0
    moved_to: str | None = None
    """Set by a team restore on the inbox of a thread it left: the agent's new thread
    ("": the agent is gone). A send to it is refused (`InboxMoved`)."""
    origins: dict[str, int] = {}
    """Per sender thread, the highest outbox number of a letter this inbox took."""

    def posted(self, letter_of: LetterOf, message_id: str | None) -> InboxData | None:
        """This inbox with the sender's next letter appended, or None when it holds that
        letter already (its origin, or `message_id` from that sender, was seen)."""
        if self.moved_to is not None:  # first: a send repeated after a restore follows it
            raise InboxMoved
        sender = letter_of.sender
        origins = self.origins
        if letter_of.origin is not None:
            thread, number = letter_of.origin
            if number <= origins.get(thread, 0):
                return None
            origins = {**origins, thread: number}
        seen = self.recent.get(sender, ())
        if message_id is not None and message_id in seen:
            return None
        seq = self.last_seq.get(sender, 0) + 1
        letter = Letter(sender, seq, letter_of.content, letter_of.via, letter_of.traceparent)
        recent = self.recent
        if message_id is not None:
            recent = {**recent, sender: (*seen, message_id)[-RECENT_IDS:]}
        letters = (*self.letters, letter)
        return msgspec.structs.replace(
            self,
            letters=letters,
            last_seq={**self.last_seq, sender: seq},
            recent=recent,
            origins=origins,
        )

    def undelivered(self, cursor: Mapping[str, int]) -> InboxData:
        """Only the letters `cursor` does not count as delivered (for reading: the letters
        left keep no index; `delivered_dropped` is what a stored head may become)."""
        kept = tuple(x for x in self.letters if x.seq > cursor.get(x.sender, 0))
        return msgspec.structs.replace(self, letters=kept)

    def sealed(self, base: int, count: int) -> InboxData:
        """Without its first `count` letters, once a page holds them (unchanged unless the
        head still starts at `base`: another writer sealed or pruned it meanwhile)."""
        if self.base != base:
            return self
        return msgspec.structs.replace(self, letters=self.letters[count:], base=base + count)

    def delivered_dropped(self, cursor: Mapping[str, int]) -> InboxData:
        """Without the delivered letters it starts with (letters keep their indexes)."""
        count = 0
        for letter in self.letters:
            if letter.seq > cursor.get(letter.sender, 0):
                break
            count += 1
        return self.sealed(self.base, count)


class InboxMoved(StateError):
    """A send reached the inbox of a thread a team restore left (the team follows it to
    the agent's new thread; it reaches users only if restores keep coming)."""

    def __init__(self) -> None:
        super().__init__("this inbox moved in a team restore; read the roster again")


@attrs.frozen
class LetterOf:
    """What a send gives the mailbox for each recipient: the number is assigned inside the
    store's atomic update. `origin`: the sender's thread and the letter's outbox number, for
    a letter out of an outbox; `traceparent`: the span it was sent under, if any."""

    sender: str
    content: str
    via: str | None = None
    origin: tuple[str, int] | None = None
    traceparent: str | None = None


class Inbox(ProfileKey[InboxData]):
    """Inboxes, one entry per recipient thread: a team snapshot restored into new threads
    starts new inboxes, and the old ones stay as they were until the roster points away."""

    key = "statekernel.team_inbox"
    _kernel_values = True


class InboxPage(ProfileKey[tuple[Letter, ...]]):
    """Sealed pages of inboxes, one entry per `<thread id>#<index of its first letter>`."""

    key = "statekernel.team_inbox_page"
    _kernel_values = True


@attrs.frozen
class Delivery:
    """What a run commits in one command: the messages, and the cursor's advance; and the
    spans the letters were sent under, `(traceparent, sender)` once each, for the run's
    span to link to (they are not committed)."""

    messages: tuple[Message, ...]
    cursor: tuple[tuple[str, int], ...]
    senders: tuple[tuple[str, str], ...] = ()


def deliverable(inbox: InboxData, cursor: tuple[tuple[str, int], ...]) -> Delivery | None:
    """The letters beyond `cursor`, as messages in arrival order (so in order per sender),
    with the cursor that counts them; None when there are none."""
    delivered = dict(cursor)
    fresh = [x for x in inbox.letters if x.seq > delivered.get(x.sender, 0)]
    if not fresh:
        return None
    advance: dict[str, int] = {}
    senders: dict[str, str] = {}
    for letter in fresh:  # (a sender's letters arrive in the order of their numbers)
        advance[letter.sender] = letter.seq
        if letter.traceparent is not None:
            senders.setdefault(letter.traceparent, letter.sender)
    messages = tuple(_message(letter) for letter in fresh)
    return Delivery(messages, tuple(sorted(advance.items())), tuple(senders.items()))


def _message(letter: Letter) -> Message:
    message_id = f"{_ID_PREFIX}{letter.sender}:{letter.seq}"
    if letter.sender == TASK_SENDER:
        return Message("user", letter.content, id=message_id)
    how = f" ({letter.via})" if letter.via else ""
    return Message("user", f"[message from {letter.sender}{how}]\n{letter.content}", id=message_id)


def sender_of(message: Message) -> str | None:
    """Who sent a message the mailbox delivered (None for any other message, and for a
    spawned agent's task)."""
    if message.id is None or not message.id.startswith(_ID_PREFIX):
        return None
    sender, _, seq = message.id[len(_ID_PREFIX) :].rpartition(":")
    if not sender or not seq.isdigit() or sender == TASK_SENDER:
        return None
    return sender


class Mailbox:
    """The inboxes of recipient threads in a ProfileStore."""

    def __init__(self, profile: ProfileAccess) -> None:
        self._profile = profile
        self._heads: dict[str, tuple[InboxData, int]] = {}  # the heads this mailbox last wrote
        # One send per inbox at a time in this process: a lock lives while a send holds it.
        self._posting: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    async def post(self, thread_id: str, letter: LetterOf, message_id: str | None = None) -> None:
        """Append `letter` to the thread's inbox atomically, unless the inbox holds it
        already (its origin, or `message_id` from its sender, was seen): then nothing is
        written.

        A compare-and-set on the head this mailbox last wrote, when it has one: one write
        and no read while it is the only writer of the inbox (a sender's usual case), and a
        fresh read after anyone else wrote. After `CAS_ATTEMPTS` lost races it takes the
        store's atomic update (compare-and-set retried, on a store without one). Sends of
        this process to one inbox take turns, so that they never race each other."""
        lock = self._posting.get(thread_id)
        if lock is None:
            lock = self._posting[thread_id] = asyncio.Lock()
        async with lock:
            await self._post(thread_id, letter, message_id)

    async def _post(self, thread_id: str, letter: LetterOf, message_id: str | None) -> None:
        for _ in range(CAS_ATTEMPTS):
            known = self._heads.pop(thread_id, None)
            read = known is None
            if known is None:
                known = await self.head(thread_id)
            head, version = known
            posted = head.posted(letter, message_id)
            if posted is None:  # the letter was seen
                if read:
                    return
                continue  # in this process's copy: ask the store (a restore may have moved it)
            try:
                written = await self._profile.compare_and_set(
                    Inbox, thread_id, posted, version=version
                )
            except VersionConflict:
                continue
            self._remember_head(thread_id, written, posted)
            await self._seal_full(thread_id, posted)
            return
        head = await self._profile.update(
            Inbox, thread_id, lambda inbox: inbox.posted(letter, message_id) or inbox
        )
        await self._seal_full(thread_id, head)

    async def _seal_full(self, thread_id: str, head: InboxData) -> None:
        while len(head.letters) >= PAGE_LETTERS:
            self._heads.pop(thread_id, None)
            head = await self._seal(thread_id, head)

    async def _seal(self, thread_id: str, head: InboxData) -> InboxData:
        """Copy the head's first page of letters into a page entry, then drop them from it."""
        base = head.base
        await self._profile.write(InboxPage, _page(thread_id, base), head.letters[:PAGE_LETTERS])
        return await self._profile.update(
            Inbox, thread_id, lambda now: now.sealed(base, PAGE_LETTERS)
        )

    async def read(self, thread_id: str) -> InboxData:
        """The whole inbox, its pages' letters and the head's in index order."""
        return (await self.read_with_version(thread_id))[0]

    async def read_with_version(self, thread_id: str) -> tuple[InboxData, int]:
        """The whole inbox, with its head's version (0: no inbox): a send, a seal and a
        prune each change it."""
        # The head first: see the module's docstring.
        head, version = await self._profile.read_with_version(Inbox, thread_id)
        return await self._with_pages(thread_id, head), version

    async def _with_pages(self, thread_id: str, head: InboxData) -> InboxData:
        if head.base == 0:
            return head  # nothing was ever sealed (or pruned): there are no pages
        pages = await self._pages(thread_id)
        if not pages:
            return head
        placed: dict[int, Letter] = {}
        for start, letters in pages:
            placed.update(enumerate(letters, start))
        placed.update(enumerate(head.letters, head.base))
        order = sorted(placed)
        letters = tuple(placed[index] for index in order)
        return msgspec.structs.replace(head, letters=letters, base=order[0])

    async def _pages(self, thread_id: str) -> list[tuple[int, tuple[Letter, ...]]]:
        prefix = f"{thread_id}#"
        pages = []
        for key, letters in await self._profile.list_entries(InboxPage, prefix):
            start = key[len(prefix) :]
            if start.isdigit():  # (another thread's pages hold a "#" after the prefix)
                pages.append((int(start), letters))
        return pages

    def _remember_head(self, thread_id: str, version: int, head: InboxData) -> None:
        self._heads[thread_id] = (head, version)
        while len(self._heads) > CACHED_HEADS:
            del self._heads[next(iter(self._heads))]

    async def prune(self, thread_id: str, saved_cursor: Mapping[str, int]) -> None:
        """Drop the letters a saved cursor counts as delivered: pages all of whose letters
        were, and the head's delivered first letters. Only ever give it a cursor the thread
        store holds: pruning by an unsaved one would lose letters in a crash."""

        def delivered(letter: Letter) -> bool:
            return letter.seq <= saved_cursor.get(letter.sender, 0)

        for start, letters in await self._pages(thread_id):
            if all(delivered(letter) for letter in letters):
                await self._profile.delete(InboxPage, _page(thread_id, start))
        await self._profile.update(
            Inbox, thread_id, lambda inbox: inbox.delivered_dropped(saved_cursor)
        )

    async def head(self, thread_id: str) -> tuple[InboxData, int]:
        """The inbox's head as stored, with its version (0: no inbox)."""
        return await self._profile.read_with_version(Inbox, thread_id)

    async def move(self, thread_id: str, moved_to: str) -> None:
        """Mark the thread's inbox as left for `moved_to` ("": for nowhere)."""
        self._heads.pop(thread_id, None)
        await self._profile.update(
            Inbox, thread_id, lambda inbox: msgspec.structs.replace(inbox, moved_to=moved_to)
        )

    async def replace(self, thread_id: str, inbox: InboxData) -> None:
        """Set the thread's inbox (a new thread's) as a team snapshot held it."""
        await self._profile.write(Inbox, thread_id, inbox)


_INDEX_DIGITS = 12


def _page(thread_id: str, start: int) -> str:
    return f"{thread_id}#{start:0{_INDEX_DIGITS}d}"
