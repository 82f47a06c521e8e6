"""`statekernel`'s arguments, and the one policy for how a command ends.

Exit status: 0 done; 1 the command's answer is "no" (`verify` found a divergence), a thread
it read is damaged (`JournalCorrupted`, a value that no longer decodes: `history` and `show`
stop, `threads` and `inspect` show it in its own row and go on), or the store failed while
reading; 2 the command could not start: bad arguments, a missing file, a file or database
that is not a statekernel store, an unknown thread or revision, an output file that cannot
be written or that is the store itself, an application (`module:attr`, `worker`'s or a
reading command's `--app`) that cannot be loaded or is not what the command takes. `worker`
exits 0 once a signal's drain is done. An error is one line on standard error, never a
traceback, and never holds a DSN's password (the line goes through the store backends'
`redacted`, whatever raised it). A reader that stops reading (`| head`) ends the command
quietly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from statekernel import (
    ChainKeyMissing,
    StateError,
    StoreNotOpened,
    UnknownRevision,
    __version__,
)

from . import commands, extensions, trace, worker
from .application import ApplicationNotFound
from .location import CHAIN_KEY_VARIABLE, Location, chain_key_given, opened

__all__ = ["main"]

# UnknownThread is an UnknownRevision. A ValueError or TypeError is an argument the kernel
# refused (an empty thread id, a name no store can keep); an OSError, the output file.
_CANNOT_START = (
    ChainKeyMissing,
    StoreNotOpened,
    UnknownRevision,
    ApplicationNotFound,
    worker.CannotServe,
    ValueError,
    TypeError,
    OSError,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default: the process's) and return its exit status."""
    args = _parser().parse_args(argv)
    run: Callable[[argparse.Namespace], Coroutine[Any, Any, int]] = args.run
    try:
        return asyncio.run(run(args))
    except BrokenPipeError:
        # The reader went away (`| head`): what it wanted it has. Python would complain at
        # exit while flushing stdout, so stdout goes to nowhere first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except StateError as error:
        return _fail(error, 2 if isinstance(error, _CANNOT_START) else 1)
    except _CANNOT_START as error:
        return _fail(error, 2)
    except KeyboardInterrupt:
        return 130


def _fail(error: BaseException, status: int) -> int:
    line = " ".join(str(error).split())
    with contextlib.suppress(StateError):  # no backends installed: no store was opened
        line = extensions.store_backends().redacted(line)
    print("statekernel: " + line, file=sys.stderr)
    return status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="statekernel",
        description="Look inside statekernel stores (a SQLite file or a PostgreSQL DSN: "
        "reading never creates or changes a store), and serve a team from them.",
    )
    parser.add_argument("--version", action="version", version=f"statekernel {__version__}")
    sub = parser.add_subparsers(required=True, metavar="command")

    run_demo = sub.add_parser("demo", help="run the demo (offline, scripted model) into a folder")
    run_demo.add_argument(
        "--dir", type=Path, default=Path(".statekernel"), help="where its SQLite file goes"
    )
    run_demo.add_argument("--trace", action="store_true", help="one line per phase")
    run_demo.set_defaults(run=_demo)

    serving = sub.add_parser(
        "worker",
        help="serve a team: run its agents as work arrives, until SIGTERM or SIGINT",
        description="Serve a team from this process: run its agents as work arrives, "
        "until SIGTERM or SIGINT (then drain: each running agent ends its step, and exit 0).",
    )
    serving.add_argument(
        "app",
        metavar="APP",
        help="module:attr, a function that takes the Stores and returns the AgentTeam",
    )
    serving.add_argument(
        "--store",
        required=True,
        metavar="DB",
        help="a SQLite file, or a PostgreSQL DSN (postgresql://... or libpq key=value pairs)",
    )
    serving.add_argument(
        "--roles",
        type=_names,
        default=None,
        metavar="R,...",
        help="only these roles' agents (default: every role the team runs here)",
    )
    serving.set_defaults(run=lambda a: worker.worker(a.app, a.store, a.roles))

    def reading(
        name: str, help: str, *, thread: bool, as_json: bool = True
    ) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=help, description=help)
        command.add_argument(
            "db",
            metavar="DB",
            help="a SQLite file, or a PostgreSQL DSN (postgresql://... or libpq key=value pairs)",
        )
        if thread:
            command.add_argument("--thread", required=True, metavar="T", help="the thread's id")
        if as_json:
            command.add_argument("--json", action="store_true", help="machine-readable output")
        command.add_argument(
            "--chain-key-file",
            type=Path,
            default=None,
            metavar="PATH",
            help=f"the key of keyed threads' chains, in hex (default: ${CHAIN_KEY_VARIABLE}, "
            "else the chain_key= the --app application was built with)",
        )
        command.add_argument(
            "--app",
            default=None,
            metavar="MODULE:ATTR",
            help="the application whose keys to read with: its Plugin list, Kernel, Agent or "
            "AgentTeam, or a callable returning one (given the Stores if it takes an "
            "argument); every key is then typed, shown whole and checked, and its "
            "chain_key=, if any, reads keyed threads",
        )
        return command

    listing = reading(
        "threads", "the stored threads with their revision and last change", thread=False
    )
    listing.add_argument("--prefix", default="", help="only threads whose id starts with it")
    listing.set_defaults(
        run=_reading(lambda w, a: commands.threads(w, prefix=a.prefix, as_json=a.json))
    )

    everything = reading(
        "inspect", "every thread's keys and values, every profile entry", thread=False
    )
    everything.set_defaults(run=_reading(lambda w, a: commands.inspect(w, as_json=a.json)))

    commits = reading("history", "a thread's commits: revision, phase, sources, ops", thread=True)
    commits.add_argument(
        "--since", type=_revision, default=0, metavar="REV", help="only commits after it"
    )
    commits.add_argument(
        "--limit", type=_count, default=None, metavar="N", help="at most this many commits"
    )
    commits.add_argument(
        "--key", default=None, metavar="K", help="only the commits that changed key K, its ops"
    )
    commits.set_defaults(
        run=_reading(
            lambda w, a: commands.history(
                w, a.thread, since=a.since, limit=a.limit, key=a.key, as_json=a.json
            )
        )
    )

    state = reading("show", "a thread's keys and values, now or at a revision", thread=True)
    state.add_argument("--at", type=_revision, default=None, metavar="REV", help="the revision")
    state.set_defaults(
        run=_reading(lambda w, a: commands.show(w, a.thread, at=a.at, as_json=a.json))
    )

    timeline = reading("trace", "a thread's runs as a self-contained HTML timeline", thread=True)
    timeline.add_argument(
        "--html", required=True, type=Path, metavar="OUT", help="the HTML file to write"
    )
    timeline.set_defaults(run=_reading(lambda w, a: trace.trace(w, a.thread, a.html)))

    check = reading(
        "verify",
        "rebuild a thread from its journal and compare (exit 1 if it differs)",
        thread=True,
    )
    check.add_argument(
        "--expect-head",
        default=None,
        metavar="DIGEST",
        help="a head digest kept from an earlier verify (REV:HEX): exit 1 unless the journal "
        "still holds exactly that history",
    )
    check.set_defaults(
        run=_reading(
            lambda w, a: commands.verify(w, a.thread, as_json=a.json, expect_head=a.expect_head)
        )
    )
    return parser


def _reading(
    command: Callable[[Location, argparse.Namespace], Coroutine[Any, Any, int]],
) -> Callable[[argparse.Namespace], Coroutine[Any, Any, int]]:
    """A reading command, run on its database opened read-only."""

    async def run(args: argparse.Namespace) -> int:
        key = chain_key_given(args.chain_key_file)
        async with opened(args.db, args.app, chain_key=key) as where:
            return await command(where, args)

    return run


async def _demo(args: argparse.Namespace) -> int:
    async with extensions.store_backends().embedded(args.dir) as stores:
        await extensions.demo()(stores, trace=args.trace)
    return 0


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected names separated by commas, got {text!r}")
    return names


def _revision(text: str) -> int:
    return _whole_number(text, "a revision")


def _count(text: str) -> int:
    return _whole_number(text, "a count of commits")


def _whole_number(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected {what} (an integer >= 0), got {text!r}")
    return value
