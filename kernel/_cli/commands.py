"""What each reading command reads, and how it says it: a table for people, `--json` for
programs.

Every command reads through a `Location` (a `Kernel` with no plugin, or with the keys of
the application given as `--app`, and the stores, read-only) and writes to standard output;
notes that a program should not have to parse go to standard error: each key the kernel
could not type (shown as its stored JSON, or as of an older revision; not checked by
`verify`), named one per line, and what a commit with no stored ops is. The exit status is
the command's answer: 0, or 1 when `verify` finds a divergence, or `threads` and `inspect`
find a damaged thread: they show it in its own row, say on standard error what is wrong with
it, and go on with the others.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import msgspec

from statekernel import (
    ChainKeyMismatch,
    ChainKeyMissing,
    CommitRecord,
    DecodeFailed,
    ExportedState,
    JournalCorrupted,
    KeyScope,
    ReplayFailed,
    StateError,
    UnknownThread,
)
from statekernel.lowlevel import SupportsHead, SupportsNamespaces

from .location import Location
from .tables import table, width

__all__ = ["history", "inspect", "note_untyped", "show", "threads", "verify"]


# What makes one thread unreadable while the others read: its stored journal or values
# were changed outside statekernel (or no longer decode, or replay). A store that fails
# (a lost connection) ends the command instead: then no thread can be trusted to read.
_DAMAGE = (JournalCorrupted, DecodeFailed, ReplayFailed)
# What makes one thread unreadable without being damaged: it is chained with a key, and
# none was given. `threads` and `inspect` show it in its own row too.
_UNREADABLE = (*_DAMAGE, ChainKeyMissing)


async def threads(where: Location, *, prefix: str, as_json: bool) -> int:
    """`statekernel threads`: the stored threads, their revision and last change; a
    damaged thread in its own row, and exit 1."""
    rows: list[dict[str, Any]] = []
    damaged: dict[str, StateError] = {}
    for thread_id in await where.kernel.threads(prefix=prefix):
        try:
            rows.append(await _thread_row(where, thread_id))
        except UnknownThread:
            continue  # deleted since it was listed
        except _UNREADABLE as failure:
            damaged[thread_id] = failure
            head = await _readable_head(where, thread_id)
            rows.append(
                {
                    "thread_id": thread_id,
                    "revision": head,
                    "last_change": None,
                    "last_run": None,
                    **_state_of(failure),
                }
            )
    if as_json:
        _print_json(rows)
    elif rows:
        # A status column only when it has something to say: a store that is whole reads
        # as it always did.
        status = ["status"] if damaged else []
        print(
            table(
                ["thread", "revision", "last change", "last run", *status],
                [
                    [
                        r["thread_id"],
                        "?" if r["revision"] is None else str(r["revision"]),
                        r["last_change"] or "",
                        r["last_run"] or "",
                        *([_status(damaged.get(r["thread_id"]))] if damaged else []),
                    ]
                    for r in rows
                ],
            )
        )
    else:
        print(f"no threads in {where.shown}")
    return _report(damaged)


async def inspect(where: Location, *, as_json: bool) -> int:
    """`statekernel inspect`: every thread with its keys and values, every profile
    namespace with its entries; a damaged thread with what is wrong, and exit 1."""
    found: dict[str, ExportedState] = {}
    heads: dict[str, int | None] = {}  # of the damaged threads, as far as they read
    damaged: dict[str, StateError] = {}
    listed = await where.kernel.threads()
    for thread_id in listed:
        try:
            found[thread_id] = await where.kernel.export_state(thread_id)
        except UnknownThread:
            continue  # deleted since it was listed
        except _UNREADABLE as failure:
            damaged[thread_id] = failure
            heads[thread_id] = await _readable_head(where, thread_id)
    namespaces = await _profiles(where)
    ids = [thread_id for thread_id in listed if thread_id in found or thread_id in damaged]
    if as_json:
        shown: dict[str, dict[str, Any]] = {}
        for thread_id in ids:
            if thread_id in damaged:
                shown[thread_id] = {"revision": heads[thread_id], "values": None}
            else:
                state = found[thread_id]
                shown[thread_id] = {"revision": state.revision, "values": state.values}
            shown[thread_id].update(_state_of(damaged.get(thread_id)))
        _print_json({"threads": shown, "profiles": namespaces})
        note_untyped(where, found)
        return _report(damaged)
    for thread_id in ids:
        if thread_id in damaged:
            head = heads[thread_id]
            at = "revision ?" if head is None else f"revision {head}"
            print(f"thread {thread_id}  ({at}, {_status(damaged[thread_id])})")
            print()
            continue
        state = found[thread_id]
        print(f"thread {thread_id}  (revision {state.revision})")
        print(_indent(_values_table(state, limit=width() - len(_INDENT))))
        print()
    for namespace, entries in namespaces.items():
        print(f"profile namespace {namespace}")
        rows = [[key, str(e["version"]), _json(e["value"])] for key, e in entries.items()]
        print(_indent(table(["key", "version", "value"], rows, limit=width() - len(_INDENT))))
        print()
    if not ids and not namespaces:
        print(f"{where.shown} holds no threads and no profile entries")
    note_untyped(where, found)
    return _report(damaged)


async def history(
    where: Location,
    thread_id: str,
    *,
    since: int,
    limit: int | None,
    key: str | None = None,
    as_json: bool,
) -> int:
    """`statekernel history`: the thread's commits, oldest first; with `key`, only those
    that changed it, each with its ops on it."""
    if key is None:
        records = await where.kernel.history(thread_id, since=since, limit=limit)
    else:
        records = await _changing(where, thread_id, key, since=since, limit=limit)
        if not records and limit != 0:
            _no_commits_note(where, thread_id, key, since)
    if as_json:
        _print_json([_record(record) for record in records])
        return 0
    print(
        table(
            ["rev", "phase", "step", "sources", "ops" if key is None else f"ops on {key}"],
            [
                [
                    str(r.revision),
                    r.phase.value if r.phase is not None else "-",
                    str(r.step),
                    ", ".join(r.sources),
                    _ops_cell(r, shown_whole=key is not None),
                ]
                for r in records
            ],
        )
    )
    if any(not r.ops for r in records):
        print(
            f"note: a commit whose ops are {_NOT_STORED} changed only run keys or "
            f"persistent=False thread keys: a store keeps no ops of those (a run key starts "
            f"afresh in every run; a persistent=False key lives in the writing process's "
            f"memory); its sources say who made it",
            file=sys.stderr,
        )
    return 0


_NOT_STORED = "(not stored)"
_PAGE = 1000


async def _changing(
    where: Location, thread_id: str, key: str, *, since: int, limit: int | None
) -> list[CommitRecord]:
    """The commits after `since` that changed `key` (at most `limit`), each with only its
    ops on it, read a page at a time."""
    found: list[CommitRecord] = []
    while limit is None or len(found) < limit:
        page = await where.kernel.history(thread_id, since=since, limit=_PAGE)
        for record in page:
            ops = tuple(op for op in record.ops if op.key == key)
            if ops:
                found.append(msgspec.structs.replace(record, ops=ops))
        if len(page) < _PAGE:
            break
        since = page[-1].revision
    return found if limit is None else found[:limit]


def _no_commits_note(where: Location, thread_id: str, key: str, since: int) -> None:
    binding = where.kernel.components.keys.by_name.get(key)
    if binding is not None and not binding.stored:
        kind = "a run key" if binding.scope is KeyScope.RUN else "a persistent=False thread key"
        why = f"key {key!r} is {kind}: a store keeps no ops of it"
    else:
        why = f"no commit after revision {since} changed key {key!r}"
    print(f"note: thread {thread_id}: {why}", file=sys.stderr)


def _ops_cell(record: CommitRecord, *, shown_whole: bool) -> str:
    """The record's ops for the table: kind and key, or (for one key) kind and update."""
    if not record.ops:
        return _NOT_STORED
    if shown_whole:
        return ", ".join(
            op.kind if op.update is None else f"{op.kind} {op.update.decode('utf-8')}"
            for op in record.ops
        )
    return ", ".join(f"{op.kind} {op.key}" for op in record.ops)


async def show(where: Location, thread_id: str, *, at: int | None, as_json: bool) -> int:
    """`statekernel show`: the thread's keys and values at its head, or at `--at`."""
    state = await where.kernel.export_state(thread_id, revision=at)
    if as_json:
        _print_json(dict(state.values))
    else:
        print(f"thread {thread_id}  (revision {state.revision})")
        print(_values_table(state))
    note_untyped(where, {thread_id: state})
    return 0


async def verify(
    where: Location, thread_id: str, *, as_json: bool, expect_head: str | None = None
) -> int:
    """`statekernel verify`: rebuild the thread from its journal alone and compare; exit 1
    naming the first revision that differs (or the first record that cannot be trusted,
    or a kept head digest the journal no longer holds). A key the reading kernel does not
    type is not checked: the answer names each one."""
    answer: dict[str, Any]
    try:
        report = await where.kernel.verify(thread_id, expect_head=expect_head)
    except JournalCorrupted as error:
        answer = {
            "ok": False,
            "revision": error.revision,
            "first_divergence": error.revision,
            "state_hash": None,
            "detail": str(error),
            "keyed": isinstance(error, ChainKeyMismatch),
            "head_digest": None,
        }
    else:
        answer = {
            "ok": report.ok,
            "revision": report.revision,
            "first_divergence": report.first_divergence,
            "state_hash": report.state_hash,
            "detail": report.detail,
            "keyed": report.keyed,
            "head_digest": report.head_digest or None,
        }
    # An ok report's detail names what replay could not rebuild, and is empty when it
    # rebuilt every key: only then is there anything to name, key by key.
    unchecked = await _unchecked(where, thread_id) if answer["ok"] and answer["detail"] else []
    answer["unchecked"] = unchecked
    if as_json:
        _print_json(answer)
    elif answer["ok"]:
        but = (
            f"; {len(unchecked)} {'key was' if len(unchecked) == 1 else 'keys were'} not "
            f"checked (see the notes)"
            if unchecked
            else ""
        )
        print(
            f"ok: thread {thread_id} rebuilds from its journal (revision {answer['revision']}, "
            f"state hash {answer['state_hash']}){but}"
        )
        if answer["head_digest"]:
            kind = "keyed" if answer["keyed"] else "unkeyed"
            print(f"head digest {answer['head_digest']} ({kind} chain): keep it to check later")
    else:
        print(f"diverged at revision {answer['first_divergence']}: {answer['detail']}")
    for name in unchecked:
        print(
            f"note: thread {thread_id}: key {name!r} was not checked: "
            f"{_without_declaration(where, name)}",
            file=sys.stderr,
        )
    if answer["ok"] and answer["detail"] and not unchecked:
        print(f"note: {answer['detail']}", file=sys.stderr)
    return 0 if answer["ok"] else 1


async def _unchecked(where: Location, thread_id: str) -> list[str]:
    """The keys of the thread that replay cannot rebuild here: those the store holds a
    value or an op of that the kernel does not type."""
    names = {op.key for record in await where.kernel.history(thread_id) for op in record.ops}
    state = await where.kernel.export_state(thread_id)
    names |= {*state.values, *state.as_of}
    return sorted(name for name in names if not where.typed(name))


def _without_declaration(where: Location, name: str) -> str:
    """Why the key `name` is not typed, and what to do about it."""
    if where.app is None:
        return (
            "no plugin of the reading kernel declares it: give the application with --app "
            "module:attr (its plugin list, Kernel, Agent or AgentTeam)"
        )
    binding = where.kernel.components.keys.by_name.get(name)
    if binding is None:
        return f"the application {where.app!r} does not declare it"
    kind = "a run key" if binding.scope is KeyScope.RUN else "persistent=False"
    return f"the application {where.app!r} declares it as {kind}, and a store kept it"


# -- shared pieces --------------------------------------------------------------------------


async def _thread_row(where: Location, thread_id: str) -> dict[str, Any]:
    """The thread's row: its head revision and its newest record, which the head must name
    (a history read checks that)."""
    revision = await _head_revision(where, thread_id)
    # Without a limit: a record past the head is read too, and is damage.
    records = await where.kernel.history(thread_id, since=max(revision - 1, 0))
    last = next((record for record in records if record.revision == revision), None)
    return {
        "thread_id": thread_id,
        "revision": revision,
        "last_change": last.created_at.isoformat(timespec="seconds") if last else None,
        "last_run": last.run_id if last else None,
        **_state_of(None),
    }


async def _readable_head(where: Location, thread_id: str) -> int | None:
    """The revision a damaged thread's head names, when it can be read at all."""
    try:
        return await _head_revision(where, thread_id)
    except (*_UNREADABLE, UnknownThread):
        return None


def _state_of(failure: StateError | None) -> dict[str, str | None]:
    """A thread's `status` and `error` for `--json`: "ok" and null, or "damaged" and the
    error's message on one line."""
    if failure is None:
        return {"status": "ok", "error": None}
    if isinstance(failure, ChainKeyMissing):
        return {"status": "keyed", "error": _one_line(failure)}
    return {"status": "damaged", "error": _one_line(failure)}


def _status(failure: StateError | None) -> str:
    """A thread's status for people: "ok", or "damaged" and what is wrong, as short as
    the error allows (the whole message goes to standard error)."""
    if failure is None:
        return "ok"
    if isinstance(failure, ChainKeyMissing):
        return "keyed: give its chain key (--chain-key-file or STATEKERNEL_CHAIN_KEY)"
    if isinstance(failure, JournalCorrupted):
        return f"damaged at revision {failure.revision}: {failure.problem}"
    return f"damaged: {_one_line(failure)}"


def _report(damaged: Mapping[str, StateError]) -> int:
    """Say on standard error what is wrong with each damaged thread, one line each, as
    any error of the command line is said; the exit status: 1 when one is."""
    for failure in damaged.values():
        print(f"statekernel: {_one_line(failure)}", file=sys.stderr)
    return 1 if damaged else 0


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


async def _head_revision(where: Location, thread_id: str) -> int:
    if isinstance(where.threads, SupportsHead):
        head = await where.threads.head(thread_id)
        if head is None:
            raise UnknownThread(thread_id)
        return head.revision
    return (await where.kernel.get_state(thread_id)).revision


async def _profiles(where: Location) -> dict[str, dict[str, dict[str, Any]]]:
    store = where.profiles
    if store is None or not isinstance(store, SupportsNamespaces):
        return {}
    return {
        namespace: {
            entry.key: {"version": entry.version, "value": entry.value}
            for entry in await store.list(namespace)
        }
        for namespace in await store.namespaces()
    }


def _values_table(state: ExportedState, *, limit: int | None = None) -> str:
    rows = [[name, _json(value)] for name, value in state.values.items()]
    rows += [
        [name, "(no value before its first update)"]
        for name in state.as_of
        if name not in state.values
    ]
    return table(["key", "value"], rows, limit=limit) if rows else "(no keys)"


def note_untyped(where: Location, states: Mapping[str, ExportedState]) -> None:
    """Say on stderr which keys the kernel could not type, each by name: shown as their
    stored JSON, or as of an earlier revision, and why."""
    for thread_id, state in states.items():
        for name in sorted({*state.values, *state.as_of}):
            if where.typed(name):
                continue
            revision = state.as_of.get(name)
            shown = (
                "is shown as its stored JSON, untyped"
                if revision is None
                else f"is shown as of revision {revision} (its later updates need its apply)"
            )
            print(
                f"note: thread {thread_id}: key {name!r} {shown}: "
                f"{_without_declaration(where, name)}",
                file=sys.stderr,
            )


def _record(record: CommitRecord) -> dict[str, Any]:
    """A commit as JSON data: the record's fields, each op's update as the JSON it holds."""
    data = msgspec.to_builtins(record)
    data["ops"] = [
        {
            "key": op.key,
            "kind": op.kind,
            "update": None if op.update is None else msgspec.json.decode(op.update),
        }
        for op in record.ops
    ]
    return dict(data)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2))


_INDENT = "  "


def _indent(text: str) -> str:
    return "\n".join(_INDENT + line for line in text.splitlines())
