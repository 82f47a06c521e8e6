"""Names every store can keep: the one check of every id and name a user hands the kernel.

Thread ids, run and agent names, commit sources, key and plugin names, team ids, topics and
snapshot names all end up as text in a database. Two kinds of text cannot get there: a lone
surrogate (UTF-8 cannot encode it) and a NUL character (PostgreSQL's text refuses it). A
name holding either is refused where it is given, before anything is stored, so that no
save fails later on a name the caller gave long before.
"""

from __future__ import annotations

from .._errors import InvalidName, NameNotAString

__all__ = ["check_name"]


def check_name(label: str, name: object) -> str:
    """`name` itself, once it is a name every store can keep.

    A name that is not a string raises `NameNotAString` (a `TypeError`); a string that is
    not text every database can hold (a lone surrogate, which UTF-8 cannot encode, or a NUL
    character, which PostgreSQL's text refuses) raises `InvalidName` (a `ValueError`) naming
    the index. Both are `StateError`s. `label` says what the name is in the message
    (`"thread id"`, ...). The kernel checks every id and name its public calls take with it
    (thread, run, agent, team and snapshot names, topics, commit sources, key and plugin
    names), and the bundled stores every thread id, profile namespace and key, so all refuse
    the same names the same way, before anything is stored; a store of your own should too.
    """
    if not isinstance(name, str):
        raise NameNotAString(label, name)
    try:
        if not name.isascii():  # (an ASCII string is valid UTF-8; the check is O(1))
            name.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidName(
            label,
            name,
            f"is not valid Unicode text: it holds a lone surrogate at index {error.start}, "
            f"which no store can keep",
            "Use text that encodes as UTF-8.",
            index=error.start,
        ) from None
    if "\x00" in name:
        index = name.index(chr(0))
        raise InvalidName(
            label,
            name,
            f"holds a NUL character at index {index}, which not every store can keep",
            "Leave it out of names.",
            index=index,
        )
    return name
