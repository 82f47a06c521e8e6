"""A PostgreSQL DSN in either of libpq's forms, and what of it may be shown.

libpq takes a URI (`postgresql://user:secret@host:5432/db`) or a string of `key=value`
pairs (`host=127.0.0.1 port=5432 dbname=db user=u password=secret`); deployments hand out
both. asyncpg reads only the URI, so a `key=value` string is rewritten as one here, in one
place: every pair becomes a query parameter, percent-encoded, which asyncpg reads exactly as
libpq reads the pair. The parsing follows libpq's (spaces around `=` are optional, a value
may be single-quoted, a backslash escapes the next character).

A DSN may hold a password, and what a program prints (a listing's header, an error, a
store's repr) ends up in logs and terminals: `redacted` hides it in any text, in both forms.
No message raised here quotes a value of the DSN, since the value may be the password.
"""

from __future__ import annotations

import os
import re
import urllib.parse

from statekernel import StoreNotOpened

__all__ = ["KEYWORDS", "as_uri", "is_dsn", "redacted"]

_URI_SCHEMES = ("postgresql://", "postgres://")

KEYWORDS = frozenset(
    {
        "host", "hostaddr", "port", "dbname", "user", "password", "passfile",
        "channel_binding", "connect_timeout", "client_encoding", "options",
        "application_name", "fallback_application_name", "keepalives", "keepalives_idle",
        "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication",
        "gssencmode", "sslmode", "requiressl", "sslcompression", "sslcert", "sslkey",
        "sslpassword", "sslcertmode", "sslrootcert", "sslcrl", "sslcrldir", "sslsni",
        "requirepeer", "require_auth", "ssl_min_protocol_version",
        "ssl_max_protocol_version", "krbsrvname", "gsslib", "gssdelegation", "service",
        "target_session_attrs", "load_balance_hosts", "sslnegotiation",
    }
)  # fmt: skip
"""libpq's connection keywords: a string that starts with one of them and `=` is a DSN."""

_STARTS_AS_PAIRS = re.compile(r"\s*([A-Za-z_]+)\s*=")

# A URI's `user:password@`: the password runs to the last `@` of the word (a host has none).
_URI_PASSWORD = re.compile(r"(postgres(?:ql)?://[^\s:@/'\"]*:)[^\s'\"]*(?=@)", re.IGNORECASE)
# `password=...` (also `sslpassword`, and a URI's `?password=`): quoted, or up to a space, a
# quote or the next query parameter.
_PAIR_PASSWORD = re.compile(r"(password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|[^\s'\"&]+)", re.IGNORECASE)
_HIDDEN = "***"


def is_dsn(db: str | os.PathLike[str]) -> bool:
    """Whether `db` names a PostgreSQL database rather than a file: a `postgresql://` (or
    `postgres://`) URI, or libpq `key=value` pairs starting with a libpq keyword (so a file
    whose name starts that way is named `./host=...`)."""
    if not isinstance(db, str):
        return False
    if db.startswith(_URI_SCHEMES):
        return True
    found = _STARTS_AS_PAIRS.match(db)
    return found is not None and found.group(1) in KEYWORDS


def as_uri(dsn: str) -> str:
    """`dsn` as a URI asyncpg reads: a URI as it is, `key=value` pairs rewritten.

    Anything that is not a non-empty string is returned as it is, for the store to refuse.
    Pairs that cannot be read, or a key libpq does not know, raise `StoreNotOpened`."""
    if not isinstance(dsn, str) or not dsn.strip() or dsn.startswith(_URI_SCHEMES):
        return dsn
    pairs = _pairs(dsn)
    unknown = [key for key, _ in pairs if key not in KEYWORDS]
    if unknown:
        # A key is named unless the DSN holds a password: a password with an unquoted space
        # in it reads as a password and a key, which is a piece of the password.
        named = "" if any(key == "password" for key, _ in pairs) else f" {unknown[0]!r}"
        raise _refused(
            f"the key{named} is not a libpq connection keyword (a server setting goes in "
            f"options='-c name=value'; a value with spaces is single-quoted)"
        )
    return "postgresql://?" + urllib.parse.urlencode(pairs)


def redacted(text: str) -> str:
    """`text` with the password of every PostgreSQL DSN in it replaced by `***`: a URI's
    `user:password@` and a `password=...` pair (a `key=value` DSN's or a URI's query
    parameter). What a tool prints of a database it was handed, or of an error about it."""
    return _PAIR_PASSWORD.sub(r"\1" + _HIDDEN, _URI_PASSWORD.sub(r"\1" + _HIDDEN, text))


def _pairs(dsn: str) -> list[tuple[str, str]]:
    """libpq's reading of `key=value` pairs."""
    pairs: list[tuple[str, str]] = []
    at, end = 0, len(dsn)
    while True:
        while at < end and dsn[at].isspace():
            at += 1
        if at == end:
            return pairs
        start = at
        while at < end and dsn[at] != "=" and not dsn[at].isspace():
            at += 1
        key = dsn[start:at]
        while at < end and dsn[at].isspace():
            at += 1
        if at == end or dsn[at] != "=" or not key:
            raise _refused(f'word {len(pairs) + 1} of the DSN is not a key=value pair (no "=")')
        at += 1
        while at < end and dsn[at].isspace():
            at += 1
        value: list[str] = []
        if at < end and dsn[at] == "'":
            at += 1
            while True:
                if at == end:
                    named = f" of {key!r}" if key in KEYWORDS else ""
                    raise _refused(f"the value{named} has no closing quote")
                if dsn[at] == "'":
                    at += 1
                    break
                if dsn[at] == "\\" and at + 1 < end:
                    at += 1
                value.append(dsn[at])
                at += 1
        else:
            while at < end and not dsn[at].isspace():
                if dsn[at] == "\\" and at + 1 < end:
                    at += 1
                value.append(dsn[at])
                at += 1
        pairs.append((key, "".join(value)))


def _refused(why: str) -> StoreNotOpened:
    return StoreNotOpened(
        "open",
        ValueError(
            f"the PostgreSQL DSN cannot be read: {why}. A DSN is a URI "
            f"(postgresql://user@host:5432/db) or libpq key=value pairs "
            f"(host=... port=... dbname=... user=...)"
        ),
    )
