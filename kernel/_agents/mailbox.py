"""The team mailbox: messages between agents, stored before `send` returns and delivered
into each recipient's thread exactly once, in order per sender, across crashes.

Exactly once needs two facts to be one: "the message is in the recipient's history" and
"the message was consumed". So the mailbox never marks anything consumed. Each recipient
has an inbox entry in the ProfileStore; a send appends a letter to it in one atomic
`update`, numbering it per sender. The recipient's thread keeps, in its own state
(`MailCursor`), the last number delivered from each sender, and a delivery commits the
messages and the cursor's advance in one commit, saved by the run's next checkpoint. Before
that save a crash loses both, and the letters are delivered again; after it the cursor says
they were. Letters at or below the saved cursor are pruned from the inbox, only ever by the
cursor as a store holds it.

A send given a `message_id` (a tool that sends uses its call's id) is dropped when the
recipient's inbox saw that id from that sender among the last `RECENT_IDS`, so a tool run
again after a crash, or a caller retrying a send whose answer it lost, sends once.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import msgspec

from .._profile.access import ProfileAccess
from .._profile.keys import ProfileKey
from .._values.messages import Message

__all__ = [
    "PRUNE_AT",
    "TASK_SENDER",
    "Delivery",
    "Inbox",
    "InboxData",
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

RECENT_IDS = 64
"""How many message ids per sender an inbox remembers to drop a repeated send."""

_ID_PREFIX = "mail:"


class Letter(msgspec.Struct, frozen=True):
    """One stored message for one recipient: `seq` numbers it among its sender's letters
    to that recipient; `via` says how it was addressed ("topic t", "group g", or None for
    point-to-point)."""

    sender: str
    seq: int
    content: str
    via: str | None = None


class InboxData(msgspec.Struct, frozen=True):
    """A recipient's inbox: the letters not yet pruned, in arrival order, the last number
    given to each sender, and each sender's recent message ids."""

    letters: tuple[Letter, ...] = ()
    last_seq: dict[str, int] = {}
    recent: dict[str, tuple[str, ...]] = {}

    def posted(self, letter_of: LetterOf, message_id: str | None) -> InboxData | None:
        """This inbox with the sender's next letter appended, or None when `message_id`
        was seen from that sender already."""
        sender = letter_of.sender
        seen = self.recent.get(sender, ())
        if message_id is not None and message_id in seen:
            return None
        seq = self.last_seq.get(sender, 0) + 1
        letter = Letter(sender, seq, letter_of.content, letter_of.via)
        recent = self.recent
        if message_id is not None:
            recent = {**recent, sender: (*seen, message_id)[-RECENT_IDS:]}
        return InboxData((*self.letters, letter), {**self.last_seq, sender: seq}, recent)

    def pruned(self, cursor: Mapping[str, int]) -> InboxData:
        """Without the letters `cursor` says were delivered."""
        kept = tuple(x for x in self.letters if x.seq > cursor.get(x.sender, 0))
        return InboxData(kept, self.last_seq, self.recent)


@attrs.frozen
class LetterOf:
    """What a send gives the mailbox for each recipient: the number is assigned inside the
    store's atomic update."""

    sender: str
    content: str
    via: str | None = None


class Inbox(ProfileKey[InboxData]):
    """Inboxes, one entry per recipient thread: a team snapshot restored into new threads
    starts new inboxes, and the old ones stay as they were until the roster points away."""

    key = "statekernel.team_inbox"


@attrs.frozen
class Delivery:
    """What a run commits in one command: the messages, and the cursor's advance."""

    messages: tuple[Message, ...]
    cursor: tuple[tuple[str, int], ...]


def deliverable(inbox: InboxData, cursor: tuple[tuple[str, int], ...]) -> Delivery | None:
    """The letters beyond `cursor`, as messages in arrival order (so in order per sender),
    with the cursor that counts them; None when there are none."""
    delivered = dict(cursor)
    fresh = [x for x in inbox.letters if x.seq > delivered.get(x.sender, 0)]
    if not fresh:
        return None
    advance: dict[str, int] = {}
    for letter in fresh:
        advance[letter.sender] = max(advance.get(letter.sender, 0), letter.seq)
    messages = tuple(_message(letter) for letter in fresh)
    return Delivery(messages, tuple(sorted(advance.items())))


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

    async def post(self, thread_id: str, letter: LetterOf, message_id: str | None = None) -> bool:
        """Append `letter` to the thread's inbox atomically; False when `message_id` shows
        it was posted before (nothing is written then)."""
        fresh = [True]

        def add(inbox: InboxData) -> InboxData:
            posted = inbox.posted(letter, message_id)
            fresh[0] = posted is not None  # `add` may run again on a retry: the last run counts
            return inbox if posted is None else posted

        await self._profile.update(Inbox, thread_id, add)
        return fresh[0]

    async def read(self, thread_id: str) -> InboxData:
        return await self._profile.read(Inbox, thread_id)

    async def prune(self, thread_id: str, saved_cursor: Mapping[str, int]) -> None:
        """Drop the letters a saved cursor counts as delivered. Only ever give it a cursor
        the thread store holds: pruning by an unsaved one would lose letters in a crash."""
        await self._profile.update(Inbox, thread_id, lambda inbox: inbox.pruned(saved_cursor))

    async def replace(self, thread_id: str, inbox: InboxData) -> None:
        """Set the thread's inbox as a team snapshot held it."""
        await self._profile.write(Inbox, thread_id, inbox)
