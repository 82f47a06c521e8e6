"""Reading commands given the application (`--app module:attr`), run as a user runs them: a
process of their own, on a SQLite file and on a PostgreSQL database that an application
with its own plugins wrote (`reading_app.py`).

With the application, every key is typed and shown whole: its value at every revision is
what the writing process's own kernel gives (`get_state`, `state_at`), and `verify` checks
every key. Without it, `show` and `verify` name each key they could not type or check. An
application built with a `chain_key=` gives the reader its key too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import reading_app
from conftest import _fresh_schema

from statekernel import CommitRecord, Kernel, Snapshot, StateCommand, enc_hook
from statekernel.stores import open_stores

pytestmark = pytest.mark.slow  # the command line with an application, run as a process

HERE = Path(__file__).parent
APP = "reading_app:make_agent"
THREAD = "t"
COUNTED = "k"
"""A thread whose first commit is a plugin's key's update: `show --at 1` needs its apply."""


def cli(*args: str, chain_key: str | None = None) -> subprocess.CompletedProcess[str]:
    """`statekernel` in a process of its own, from the folder that holds the application;
    given `chain_key` (hex) in the environment, else none."""
    env = {k: v for k, v in os.environ.items() if k != "STATEKERNEL_CHAIN_KEY"}
    if chain_key is not None:
        env["STATEKERNEL_CHAIN_KEY"] = chain_key
    return subprocess.run(
        [sys.executable, "-m", "statekernel", *args],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def answer(*args: str) -> Any:
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def as_json(snapshot: Snapshot) -> dict[str, Any]:
    """A snapshot's keys as the JSON data the command line prints."""
    return {
        name: msgspec.json.decode(msgspec.json.encode(value, enc_hook=enc_hook))
        for name, value in snapshot.to_dict().items()
    }


class Written(msgspec.Struct, frozen=True):
    """What the writing process itself read of what it wrote."""

    db: str
    states: dict[str, dict[int, dict[str, Any]]]  # thread -> revision -> key -> JSON
    hashes: dict[str, str]  # thread -> get_state's state hash
    history: list[CommitRecord]  # of THREAD


@pytest.fixture(params=["sqlite", "postgres"])
async def written(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Written]:
    """A store written by the application, and what its kernel reads there."""
    if request.param == "sqlite":
        db = str(tmp_path / "app.db")
    else:
        db = await _fresh_schema(request)
    async with open_stores(db) as stores:
        agent = reading_app.make_agent(stores)
        assert (await agent.run(THREAD, ["go"])).outcome == "success"
        assert (await agent.run(THREAD, ["again"])).outcome == "success"
        kernel = Kernel(reading_app.plugins(), stores=stores)
        await kernel.update_state(COUNTED, StateCommand().update(reading_app.Counter, 2))
        await kernel.update_state(COUNTED, StateCommand().update(reading_app.Counter, 3))
        states: dict[str, dict[int, dict[str, Any]]] = {}
        hashes: dict[str, str] = {}
        for thread in (THREAD, COUNTED):
            head = await agent.kernel.get_state(thread)
            hashes[thread] = head.state_hash()
            states[thread] = {
                r: as_json(await agent.kernel.state_at(thread, r))
                for r in range(1, head.revision + 1)
            }
            assert states[thread][head.revision] == as_json(head)
        history = await agent.kernel.history(THREAD)
    yield Written(db, states, hashes, history)


def fingerprint(db: str) -> str:
    path = Path(db)
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else db


async def test_with_the_app_every_key_at_every_revision_is_what_the_writer_reads(
    written: Written, tmp_path: Path
) -> None:
    before = fingerprint(written.db)
    db, states = written.db, written.states[THREAD]
    assert {"tally.count", "tally.notes", "tally.stage", "context.step"} <= set(states[len(states)])
    # every revision, in the trace's data
    page = tmp_path / "trace.html"
    drawn = cli("trace", db, "--thread", THREAD, "--html", str(page), "--app", APP)
    assert drawn.returncode == 0 and drawn.stderr == "", drawn.stderr
    found = re.search(
        r'<script type="application/json" id="states">(.*?)</script>', page.read_text()
    )
    assert found is not None
    assert json.loads(found.group(1)) == {str(r): state for r, state in states.items()}
    # and `show --json` at a few, the head and the issue's own case: a counter at revision 1
    for revision in (2, 11, 43, len(states)):
        done = cli("show", db, "--thread", THREAD, "--at", str(revision), "--json", "--app", APP)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert json.loads(done.stdout) == states[revision]
    assert answer("show", db, "--thread", THREAD, "--app", APP) == states[len(states)]
    assert answer("show", db, "--thread", COUNTED, "--at", "1", "--app", APP) == {"tally.count": 2}
    assert answer("show", db, "--thread", COUNTED, "--app", APP) == {"tally.count": 5}
    inspected = answer("inspect", db, "--app", APP)["threads"]
    assert {t: v["values"] for t, v in inspected.items()} == {
        t: s[len(s)] for t, s in written.states.items()
    }
    table = cli("show", db, "--thread", THREAD, "--at", "2", "--app", APP).stdout.splitlines()
    assert ["tally.count", "2"] in [line.split() for line in table]
    assert fingerprint(written.db) == before  # the application's factory got read-only stores


async def test_verify_with_the_app_checks_every_key_and_without_it_names_each_it_did_not(
    written: Written,
) -> None:
    checked = cli("verify", written.db, "--thread", THREAD, "--app", APP)
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr
    assert checked.stdout.startswith("ok: ") and "not checked" not in checked.stdout
    report = answer("verify", written.db, "--thread", THREAD, "--app", APP)
    assert report["ok"] and report["unchecked"] == []
    assert report["state_hash"] == written.hashes[THREAD]
    bare = set(Kernel([]).components.keys.by_name)
    untyped = sorted(
        name for name in written.states[THREAD][len(written.states[THREAD])] if name not in bare
    )
    assert untyped == ["context.step", "tally.count", "tally.notes", "tally.stage"]
    plain = cli("verify", written.db, "--thread", THREAD)
    assert plain.returncode == 0
    ok_line = plain.stdout.splitlines()[0]
    assert ok_line.endswith(f"{len(untyped)} keys were not checked (see the notes)")
    notes = plain.stderr.splitlines()
    assert len(notes) == len(untyped)
    for name, line in zip(untyped, notes, strict=True):
        assert line.startswith(f"note: thread t: key {name!r} was not checked: ")
        assert "--app module:attr" in line
    assert answer("verify", written.db, "--thread", THREAD)["unchecked"] == untyped


async def test_without_the_app_show_names_each_key_it_could_not_type(
    written: Written, tmp_path: Path
) -> None:
    head = written.states[THREAD][len(written.states[THREAD])]
    drawn = cli("trace", written.db, "--thread", THREAD, "--html", str(tmp_path / "t.html"))
    assert drawn.returncode == 0, drawn.stderr
    named = re.findall(r"^note: thread t: key '([^']+)' is shown", drawn.stderr, re.M)
    assert sorted(named) == sorted(set(head) - {"statekernel.messages"})
    for at in ([], ["--at", "11"]):
        done = cli("show", written.db, "--thread", THREAD, *at)
        assert done.returncode == 0, done.stderr
        named = re.findall(r"^note: thread t: key '([^']+)' is shown", done.stderr, re.M)
        typed_here = {"statekernel.messages"}
        shown = head if not at else written.states[THREAD][11]
        assert sorted(named) == sorted(set(shown) - typed_here)
    counted = cli("show", written.db, "--thread", COUNTED, "--at", "1", "--json")
    assert json.loads(counted.stdout) == {}  # no apply, no value
    assert "key 'tally.count' is shown as of revision 0" in counted.stderr


async def test_history_key_lists_only_the_commits_that_changed_it(written: Written) -> None:
    db = written.db
    changed = [r for r in written.history if any(op.key == "tally.count" for op in r.ops)]
    assert len(changed) == 5  # a RUN_START hook twice, the tool three times
    records = answer("history", db, "--thread", THREAD, "--key", "tally.count", "--app", APP)
    assert [r["revision"] for r in records] == [r.revision for r in changed]
    assert [r["sources"] for r in records] == [list(r.sources) for r in changed]
    for record in records:
        assert [op["key"] for op in record["ops"]] == ["tally.count"]
    assert [r["ops"][0]["update"] for r in records] == [2, 1, 1, 2, 1]
    some = answer("history", db, "--thread", THREAD, "--key", "tally.count", "--since", "11")
    assert [r["revision"] for r in some] == [r.revision for r in changed if r.revision > 11]
    first = answer("history", db, "--thread", THREAD, "--key", "tally.count", "--limit", "2")
    assert [r["revision"] for r in first] == [r.revision for r in changed[:2]]
    lines = cli("history", db, "--thread", THREAD, "--key", "tally.notes").stdout.splitlines()
    assert lines[0].split() == ["rev", "phase", "step", "sources", "ops", "on", "tally.notes"]
    assert lines[1].split()[:5] == ["11", "-", "1", "tool:note", "update"]
    assert '{"author":"ana","text":"counters add up"}' in lines[1]
    assert len(lines) == 4
    run_key = cli("history", db, "--thread", THREAD, "--key", "tally.scratch", "--app", APP)
    assert run_key.stdout.splitlines()[1:] == []
    assert "key 'tally.scratch' is a run key: a store keeps no ops of it" in run_key.stderr


async def test_a_commit_with_no_stored_ops_says_why(written: Written) -> None:
    empty = [r.revision for r in written.history if not r.ops]
    assert empty  # RunLifecycle's run keys, the Agent's tool-call states, Tally's scratch
    done = cli("history", written.db, "--thread", THREAD)
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert all(rows[str(r)].endswith("(not stored)") for r in empty)
    assert "only run keys or persistent=False thread keys" in done.stderr
    records = answer("history", written.db, "--thread", THREAD)
    assert [r["revision"] for r in records if not r["ops"]] == empty


def test_every_form_of_the_app_reads_the_same(tmp_path: Path) -> None:
    db = str(tmp_path / "forms.db")
    writer = subprocess.run(
        [sys.executable, "-c", _WRITE, db], cwd=HERE, capture_output=True, text=True, check=False
    )
    assert writer.returncode == 0, writer.stderr
    shown = [
        answer("show", db, "--thread", THREAD, "--at", "11", "--app", f"reading_app:{attr}")
        for attr in ("make_agent", "plugins", "PLUGINS", "KERNEL", "make_team")
    ]
    assert shown[0]["tally.count"] == 3 and shown[0]["tally.notes"][0]["author"] == "ana"
    assert all(found == shown[0] for found in shown)


_WRITE = """
import asyncio, sys
import reading_app
from statekernel.stores import open_stores

async def main():
    async with open_stores(sys.argv[1]) as stores:
        await reading_app.make_agent(stores).run("t", ["go"])

asyncio.run(main())
"""


@pytest.mark.parametrize(
    ("app", "said"),
    [
        ("reading_app:NOT_AN_APP", "is int 42: give a Plugin list, a Kernel, an Agent"),
        (
            "reading_app:clashing_team",
            "role 'kept' and role 'loose' register key 'tally.count' differently",
        ),
        ("reading_app:nothing_here", "module 'reading_app' has no 'nothing_here'"),
        ("no_such_app:make", "no module 'no_such_app'"),
        ("reading_app", "write it as module:attr"),
    ],
)
def test_an_app_it_cannot_take_is_one_line_and_exit_2(app: str, said: str, tmp_path: Path) -> None:
    db = str(tmp_path / "forms.db")
    writer = subprocess.run(
        [sys.executable, "-c", _WRITE, db], cwd=HERE, capture_output=True, text=True, check=False
    )
    assert writer.returncode == 0, writer.stderr
    before = fingerprint(db)
    for command in (["show", db, "--thread", THREAD], ["threads", db]):
        done = cli(*command, "--app", app)
        assert done.returncode == 2, done.stderr
        assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith("statekernel: ") and said in done.stderr
    assert fingerprint(db) == before


def test_an_app_built_with_a_chain_key_reads_its_keyed_threads(tmp_path: Path) -> None:
    """`--app` of an application built with `chain_key=` reads and verifies its threads
    with no key file; a key given on the command line wins, and a note says they differ."""
    db = str(tmp_path / "keyed.db")
    writer = subprocess.run(
        [
            sys.executable,
            "-c",
            _WRITE.replace("make_agent(stores)", "make_keyed_agent(stores)"),
            db,
        ],
        cwd=HERE,
        capture_output=True,
        text=True,
        check=False,
    )
    assert writer.returncode == 0, writer.stderr
    before = fingerprint(db)
    for app in ("reading_app:make_keyed_agent", "reading_app:make_keyed_team"):
        checked = cli("verify", db, "--thread", THREAD, "--app", app)
        assert checked.returncode == 0 and checked.stderr == "", checked.stderr
        assert checked.stdout.startswith("ok: ") and "(keyed chain)" in checked.stdout
        report = answer("verify", db, "--thread", THREAD, "--app", app)
        assert (report["ok"], report["keyed"], report["unchecked"]) == (True, True, [])
        assert (
            answer("show", db, "--thread", THREAD, "--at", "11", "--app", app)["tally.count"] == 3
        )
    # Without the key: the keys of a plugin list, or no application at all, read nothing.
    for app in (["--app", "reading_app:plugins"], []):
        missing = cli("show", db, "--thread", THREAD, *app)
        assert missing.returncode == 2 and "is chained with a key" in missing.stderr
    # The key given wins over the application's: the same key reads quietly, another one
    # is read with (and is the wrong key here), with a note saying so.
    same = cli(
        "verify",
        db,
        "--thread",
        THREAD,
        "--app",
        "reading_app:make_keyed_agent",
        chain_key=reading_app.CHAIN_KEY.hex(),
    )
    assert same.returncode == 0 and same.stderr == "", same.stderr
    other = cli(
        "verify",
        db,
        "--thread",
        THREAD,
        "--app",
        "reading_app:make_keyed_agent",
        chain_key=bytes(range(100, 132)).hex(),
    )
    assert other.returncode == 1 and "another key" in other.stdout, other.stdout
    assert other.stderr.startswith(
        "note: the chain key given (STATEKERNEL_CHAIN_KEY or "
        "--chain-key-file) is not the one the application "
        "'reading_app:make_keyed_agent' was built with"
    )
    assert fingerprint(db) == before
