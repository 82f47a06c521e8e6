"""The `statekernel` command line, run as a user runs it: a real process on real stores.

The demo writes a SQLite folder; every reading command is then run against it in a fresh
process, and what it prints is held against what the kernel itself reads. Reading must
never create or change a store, and every way a command cannot start is one line on
stderr and exit status 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from statekernel import (
    Agent,
    InferenceResponse,
    Kernel,
    ScriptedModel,
    StoreError,
    ToolCall,
    tool,
)
from statekernel.stores import (
    PostgresProfileStore,
    PostgresThreadStore,
    SqliteProfileStore,
    SqliteThreadStore,
)
from statekernel.testing.postgres import PostgresServer

pytestmark = pytest.mark.slow  # the command line, run as a process

THREAD = "demo-thread"


def cli(
    *args: str, cwd: Path | None = None, umask: int = -1, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """Run `statekernel` in a process of its own (after `prefix`, a command that runs it)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "statekernel", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        umask=umask,
    )


def answer(*args: str) -> Any:
    """The JSON a reading command prints (which must have succeeded)."""
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def fingerprint(path: Path) -> tuple[str, float]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("demo") / "data"
    done = cli("demo", "--dir", str(folder))
    assert done.returncode == 0, done.stderr
    assert "statekernel history" in done.stdout  # the demo says how to look inside
    return folder


async def test_threads_lists_each_thread_with_its_revision(demo_folder: Path) -> None:
    db = demo_folder / "statekernel.db"
    listed = answer("threads", str(db))
    async with SqliteThreadStore(db, read_only=True) as store:
        kernel = Kernel([], thread_store=store)
        expected = {t: (await kernel.get_state(t)).revision for t in await kernel.threads()}
        last = (await kernel.history(THREAD))[-1]
    assert {row["thread_id"]: row["revision"] for row in listed} == expected
    assert set(expected) == {"demo-thread", "demo-helper"}
    row = next(row for row in listed if row["thread_id"] == THREAD)
    assert row["last_run"] == last.run_id
    assert row["last_change"] == last.created_at.isoformat(timespec="seconds")
    assert answer("threads", str(db), "--prefix", "demo-h")[0]["thread_id"] == "demo-helper"
    table = cli("threads", str(db)).stdout.splitlines()
    assert table[0].split() == ["thread", "revision", "last", "change", "last", "run"]
    assert any(line.split()[:2] == [THREAD, str(expected[THREAD])] for line in table)


async def test_history_json_is_every_commit_with_its_ops_as_json(demo_folder: Path) -> None:
    db = demo_folder / "statekernel.db"
    records = answer("history", str(db), "--thread", THREAD)
    async with SqliteThreadStore(db, read_only=True) as store:
        expected = await Kernel([], thread_store=store).history(THREAD)
    assert [r["revision"] for r in records] == [r.revision for r in expected]
    assert [r["sources"] for r in records] == [list(r.sources) for r in expected]
    assert [r["phase"] for r in records] == [r.phase and r.phase.value for r in expected]
    first = records[0]
    assert first["sources"] == ["agent:input"] and first["phase"] == "RUN_START"
    (op,) = first["ops"]
    assert op["key"] == "statekernel.messages" and op["kind"] == "update"
    assert op["update"][0]["content"] == "Learn about statekernel and publish a short note."
    assert any("tool:publish" in r["sources"] for r in records)
    some = answer("history", str(db), "--thread", THREAD, "--since", "10", "--limit", "3")
    assert [r["revision"] for r in some] == [11, 12, 13]
    lines = cli("history", str(db), "--thread", THREAD).stdout.splitlines()
    assert lines[0].split() == ["rev", "phase", "step", "sources", "ops"]
    assert lines[1].split()[:4] == ["1", "RUN_START", "0", "agent:input"]


async def test_show_json_lists_an_agents_messages_from_a_fresh_process(demo_folder: Path) -> None:
    db = demo_folder / "statekernel.db"
    shown = answer("show", str(db), "--thread", THREAD)
    messages = shown["statekernel.messages"]
    assert messages[0] == {
        "role": "user",
        "content": "Learn about statekernel and publish a short note.",
        "tool_call_id": None,
        "is_error": False,
        "id": "demo-thread:run-1:m0",
        "tool_calls": [],
    }
    assert any(m["role"] == "tool" and "REVIEWED" in m["content"] for m in messages)
    assert messages[-1]["content"] == "Two facts reviewed and published."
    # the same as a plain kernel in this process reads it, and the same at a revision
    async with SqliteThreadStore(db, read_only=True) as store:
        kernel = Kernel([], thread_store=store)
        assert shown == dict((await kernel.export_state(THREAD)).values)
        at_eight = (await kernel.state_at(THREAD, 8)).to_dict()
    earlier = answer("show", str(db), "--thread", THREAD, "--at", "8")
    assert len(earlier["statekernel.messages"]) == len(at_eight["statekernel.messages"]) == 2
    text = cli("show", str(db), "--thread", THREAD, "--at", "8")
    assert text.stdout.splitlines()[0] == "thread demo-thread  (revision 8)"
    assert "key 'context.step'" in text.stderr  # a key no plugin of a plain kernel declares


async def test_inspect_shows_threads_and_profile_namespaces(
    demo_folder: Path, tmp_path: Path
) -> None:
    inspected = answer("inspect", str(demo_folder / "statekernel.db"))
    assert set(inspected["threads"]) == {"demo-thread", "demo-helper"}
    assert "statekernel.messages" in inspected["threads"][THREAD]["values"]
    db = str(demo_folder / "statekernel.db")
    revisions = {row["thread_id"]: row["revision"] for row in answer("threads", db)}
    assert {t: v["revision"] for t, v in inspected["threads"].items()} == revisions
    assert inspected["threads"][THREAD]["values"] == answer("show", db, "--thread", THREAD)
    (entry,) = inspected["profiles"]["team_context"].values()
    assert entry["value"]["goals"] == [
        "Publish a note about statekernel",
        "Collect reader questions",
    ]
    text = cli("inspect", str(demo_folder / "statekernel.db")).stdout
    assert "thread demo-thread  (revision" in text
    assert "profile namespace team_context" in text
    # a file of profiles only: no threads, and nothing added to it
    only = tmp_path / "profiles.db"
    async with SqliteProfileStore(only) as profiles:
        await profiles.set("prefs", "alice", {"tone": "brief"})
    before = fingerprint(only)
    assert answer("inspect", str(only)) == {
        "threads": {},
        "profiles": {"prefs": {"alice": {"version": 1, "value": {"tone": "brief"}}}},
    }
    assert answer("threads", str(only)) == []
    assert fingerprint(only) == before


def test_verify_passes_then_names_the_revision_of_a_tampered_record(
    demo_folder: Path, tmp_path: Path
) -> None:
    done = cli("verify", str(demo_folder / "statekernel.db"), "--thread", THREAD)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: thread demo-thread rebuilds from its journal")
    copy = tmp_path / "tampered.db"
    with sqlite3.connect(demo_folder / "statekernel.db") as source, sqlite3.connect(copy) as target:
        source.backup(target)
    with sqlite3.connect(copy) as raw:
        (data,) = raw.execute(
            "SELECT record FROM thread_records WHERE thread_id = ? AND revision = 20", (THREAD,)
        ).fetchone()
        forged = data[:-1] + bytes([data[-1] ^ 1])
        raw.execute(
            "UPDATE thread_records SET record = ? WHERE thread_id = ? AND revision = 20",
            (forged, THREAD),
        )
    done = cli("verify", str(copy), "--thread", THREAD)
    assert done.returncode == 1
    assert "revision 20" in done.stdout
    report = json.loads(cli("verify", str(copy), "--thread", THREAD, "--json").stdout)
    assert report["ok"] is False and report["first_divergence"] == 20


def test_reading_never_changes_the_store(demo_folder: Path) -> None:
    db = demo_folder / "statekernel.db"
    before = fingerprint(db)
    for args in (
        ["threads"],
        ["inspect"],
        ["history", "--thread", THREAD],
        ["show", "--thread", THREAD, "--at", "3"],
        ["verify", "--thread", THREAD],
        ["show", "--thread", "no-such-thread"],
    ):
        cli(args[0], str(db), *args[1:])
    assert fingerprint(db) == before


@pytest.mark.parametrize(
    "case", ["missing file", "foreign file", "other database", "unknown thread"]
)
def test_what_cannot_be_read_is_one_line_and_exit_2(
    case: str, demo_folder: Path, tmp_path: Path
) -> None:
    db = demo_folder / "statekernel.db"
    thread = THREAD
    if case == "missing file":
        db = tmp_path / "nothing-here.db"
    elif case == "foreign file":
        db = tmp_path / "notes.txt"
        db.write_text("not a database\n")
    elif case == "other database":
        db = tmp_path / "other.db"
        with sqlite3.connect(db) as raw:
            raw.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    else:
        thread = "no-such-thread"
    before = sorted(os.listdir(db.parent)), fingerprint(db) if db.exists() else None
    for command in ("show", "history", "verify"):
        done = cli(command, str(db), "--thread", thread)
        assert done.returncode == 2, (command, done.stderr)
        assert done.stdout == ""
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("statekernel: ")
        assert "Traceback" not in done.stderr
    expected = {
        "missing file": "no such file",
        "foreign file": "not a statekernel store",
        "other database": "not a statekernel store",
        "unknown thread": "thread 'no-such-thread' does not exist",
    }[case]
    assert expected in done.stderr
    if case != "unknown thread":
        assert (sorted(os.listdir(db.parent)), fingerprint(db) if db.exists() else None) == before


def test_bad_arguments_exit_2_with_usage() -> None:
    done = cli("show", "x.db", "--thread", "t", "--at", "minus-one")
    assert done.returncode == 2
    assert "expected a revision" in done.stderr
    done = cli("history", "x.db", "--thread", "t", "--limit", "-3")
    assert done.returncode == 2
    assert "--limit: expected a count of commits (an integer >= 0), got '-3'" in done.stderr


def test_the_demo_ends_with_the_commands_that_look_inside_and_they_work(tmp_path: Path) -> None:
    folder = tmp_path / "a folder"  # a space in its name: the commands quote it
    told = cli("demo", "--dir", str(folder)).stdout.splitlines()
    commands = [shlex.split(line) for line in told if line.startswith("  statekernel ")]
    assert [c[1] for c in commands] == ["threads", "history", "show", "verify"]
    for command in commands:
        assert command[2] == str(folder / "statekernel.db")
        done = cli(*command[1:])
        assert done.returncode == 0, (command, done.stderr)
        if "--app" in command:  # the demo's plugins type every key it stored: no notes
            assert done.stderr == "", (command, done.stderr)
    facts = answer(*commands[2][1:])["demo.facts"]
    assert facts == [{"topic": "kernel", "text": "hooks return commands"}]


def test_the_console_script_and_version() -> None:
    script = Path(sys.executable).parent / "statekernel"
    done = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0
    import statekernel

    assert done.stdout.strip() == f"statekernel {statekernel.__version__}"


@tool
def note(text: str) -> str:
    """Keep a note."""
    return f"noted {text}"


async def test_every_command_reads_a_postgresql_dsn(postgres_dsn: str, tmp_path: Path) -> None:
    script = [
        InferenceResponse(tool_calls=(ToolCall("c1", "note", {"text": "pg"}),)),
        InferenceResponse(text="done"),
    ]
    async with (
        PostgresThreadStore(postgres_dsn) as threads,
        PostgresProfileStore(postgres_dsn) as profiles,
    ):
        agent = Agent(
            [], ScriptedModel(script), [note], thread_store=threads, profile_store=profiles
        )
        result = await agent.run("pg-thread", ["write a note"])
        await profiles.set("notes", "first", {"text": "pg"})
        expected = await Kernel([], thread_store=threads).verify("pg-thread")
    assert result.outcome == "success"
    assert [row["thread_id"] for row in answer("threads", postgres_dsn)] == ["pg-thread"]
    shown = answer("show", postgres_dsn, "--thread", "pg-thread")
    assert [m["content"] for m in shown["statekernel.messages"]][-2:] == ["noted pg", "done"]
    records = answer("history", postgres_dsn, "--thread", "pg-thread")
    assert ["tool:note"] in [r["sources"] for r in records]
    report = answer("verify", postgres_dsn, "--thread", "pg-thread")
    assert report["ok"] and report["state_hash"] == expected.state_hash
    inspected = answer("inspect", postgres_dsn)
    assert inspected["profiles"]["notes"]["first"]["value"] == {"text": "pg"}
    assert "pg-thread" in inspected["threads"]
    missing = cli("show", postgres_dsn, "--thread", "nope")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    page = tmp_path / "pg-trace.html"
    drawn = cli("trace", postgres_dsn, "--thread", "pg-thread", "--html", str(page))
    assert drawn.returncode == 0, drawn.stderr
    html = page.read_text(encoding="utf-8")
    assert html.count('class="commit"') == len(records)
    assert 'data-lane="TOOL_GATE"' in html and "note: succeeded" in html


async def test_a_database_statekernel_never_wrote_is_refused_and_left_empty(
    postgres_dsn: str,
) -> None:
    import asyncpg

    done = cli("threads", postgres_dsn)
    assert done.returncode == 2
    assert "no statekernel store" in done.stderr
    schema = postgres_dsn.rsplit("search_path=", 1)[1]
    conn = await asyncpg.connect(postgres_dsn)
    try:
        tables = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
        )
    finally:
        await conn.close()
    assert tables == []


async def test_read_only_stores_refuse_writes_and_create_nothing(tmp_path: Path) -> None:
    from statekernel import StoreError

    missing = tmp_path / "missing.db"
    with pytest.raises(StoreError, match="no such file"):
        async with SqliteThreadStore(missing, read_only=True) as store:
            await store.threads()
    assert not missing.exists()
    path = tmp_path / "both.db"
    async with SqliteThreadStore(path) as threads, SqliteProfileStore(path) as profiles:
        await profiles.set("n", "k", 1)
        await threads.threads()
    async with SqliteProfileStore(path, read_only=True) as reader:
        assert (await reader.get("n", "k")).value == 1  # type: ignore[union-attr]
        assert await reader.namespaces() == ["n"]
        with pytest.raises(StoreError, match="read_only=True"):
            await reader.set("n", "k", 2)
    async with SqliteProfileStore(path) as writer:
        assert (await writer.get("n", "k")).value == 1  # type: ignore[union-attr]


def test_odd_arguments_and_outputs_are_one_line_and_exit_2(
    demo_folder: Path, tmp_path: Path
) -> None:
    db = demo_folder / "statekernel.db"
    before = fingerprint(db)
    cases = [
        (["show", str(db), "--thread", ""], "thread_id"),
        (
            ["trace", str(db), "--thread", THREAD, "--html", str(tmp_path / "no" / "t.html")],
            "does not exist",
        ),
        (["trace", str(db), "--thread", THREAD, "--html", str(tmp_path)], "it is a folder"),
        (["trace", str(db), "--thread", THREAD, "--html", str(db)], "is the store itself"),
        (["threads", str(tmp_path)], "it is a folder"),
    ]
    for args, said in cases:
        done = cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.splitlines()) == 1 and said in done.stderr, (args, done.stderr)
    assert fingerprint(db) == before


async def test_tables_of_chinese_state_line_up_and_fit_the_terminal(tmp_path: Path) -> None:
    db = tmp_path / "cjk.db"
    reply = "好的我会把季度报告翻译成中文并发送给团队的每一位成员"
    async with SqliteThreadStore(db) as store:
        asked = (("对话", "请把这份\u200b季度报告翻译成中文"), ("english", "translate it"))
        for thread, said in asked:
            model = ScriptedModel([InferenceResponse(text=reply)])
            await Agent([], model, thread_store=store).run(thread, [said])

    def columns(line: str) -> int:  # every character here is ASCII, wide CJK or zero-width
        return sum(0 if char == "\u200b" else 2 if ord(char) > 0x2E80 else 1 for char in line)

    def shown(*args: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-m", "statekernel", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "COLUMNS": "60"},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    threads = shown("threads", str(db))
    # the revision column starts at the same terminal column on every line
    starts = {columns(line[: line.index(" 2 ") + 1]) for line in threads[1:]}
    assert len(threads) == 3 and len(starts) == 1
    assert columns(threads[0][: threads[0].index("revision")]) in starts
    state = shown("show", str(db), "--thread", "对话")
    history = shown("history", str(db), "--thread", "对话")
    inspected = shown("inspect", str(db))  # its tables are indented: they fit all the same
    for line in [*threads, *state, *history, *inspected]:
        assert columns(line) <= 60, line
    assert state[-1].endswith("…") and "请把这" in state[-1]


def test_a_reader_that_stops_early_ends_the_command_quietly(demo_folder: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "statekernel",
            "history",
            str(demo_folder / "statekernel.db"),
            "--thread",
            THREAD,
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.read(10)
    process.stdout.close()  # like `| head -c 10`
    errors = process.stderr.read().decode()
    assert process.wait(timeout=60) == 0 and "Traceback" not in errors, errors


def test_a_store_that_fails_while_read_is_exit_1(demo_folder: Path, tmp_path: Path) -> None:
    copy = tmp_path / "damaged.db"
    with sqlite3.connect(demo_folder / "statekernel.db") as source, sqlite3.connect(copy) as target:
        source.backup(target)
    with sqlite3.connect(copy) as raw:
        (pages,) = raw.execute("PRAGMA page_count").fetchone()
        (size,) = raw.execute("PRAGMA page_size").fetchone()
    data = bytearray(copy.read_bytes())
    for page in range(2, pages):  # every page but the schema's
        data[page * size : page * size + 64] = b"\xff" * 64
    copy.write_bytes(bytes(data))
    done = cli("history", str(copy), "--thread", THREAD)
    assert done.returncode == 1, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "failed" in done.stderr


async def test_a_store_of_the_previous_version_is_read_as_it_is(
    demo_folder: Path, tmp_path: Path
) -> None:
    old = tmp_path / "old.db"
    with sqlite3.connect(demo_folder / "statekernel.db") as source, sqlite3.connect(old) as target:
        source.backup(target)
    with sqlite3.connect(old) as raw:  # as version 3 wrote it: no run events
        raw.execute("DROP TABLE thread_events")
        raw.execute("UPDATE statekernel_schema SET version = 3 WHERE component = 'thread_store'")
    before = fingerprint(old)
    assert [row["thread_id"] for row in answer("threads", str(old))] == [
        "demo-helper",
        "demo-thread",
    ]
    page = tmp_path / "old.html"
    done = cli("trace", str(old), "--thread", THREAD, "--html", str(page))
    assert done.returncode == 0 and "0 run events" in done.stdout, done.stdout + done.stderr
    assert page.read_text(encoding="utf-8").count('class="commit"') == 83
    assert fingerprint(old) == before
    async with SqliteThreadStore(old, read_only=True) as store:
        assert await Kernel([], thread_store=store).run_events(THREAD) == []


# -- file safety: outputs, permissions, read-only media, DSNs --------------------------------


def copy_of(db: Path, folder: Path) -> Path:
    """A copy of the store `db` in `folder`, as one file (no -wal or -shm beside it)."""
    copy = folder / "statekernel.db"
    with (
        sqlite3.connect(f"file:{db}?mode=ro", uri=True) as source,
        sqlite3.connect(copy) as target,
    ):
        source.backup(target)
    return copy


def revisions(db: Path | str, *, prefix: Sequence[str] = ()) -> dict[str, int]:
    """The threads `statekernel threads` lists, with their revisions."""
    done = cli("threads", str(db), "--json", prefix=prefix)
    assert done.returncode == 0, done.stderr
    return {row["thread_id"]: row["revision"] for row in json.loads(done.stdout)}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_output_that_is_the_store_by_any_link_is_refused(
    demo_folder: Path, tmp_path: Path
) -> None:
    db = copy_of(demo_folder / "statekernel.db", tmp_path)
    stored = revisions(db)  # reading leaves the -wal and -shm files every reader shares
    before = fingerprint(db)
    links = tmp_path / "links"
    links.mkdir()
    (links / "hard.html").hardlink_to(db)
    (links / "soft.html").symlink_to(db)
    outputs = [db, links / "hard.html", links / "soft.html"]
    for end in ("-wal", "-shm"):
        (links / f"hard{end}.html").hardlink_to(f"{db}{end}")
        outputs.append(links / f"hard{end}.html")
    for out in outputs:
        done = cli("trace", str(db), "--thread", THREAD, "--html", str(out))
        assert done.returncode == 2, (out, done.stderr)
        assert done.stdout == "" and len(done.stderr.splitlines()) == 1
        assert "is the store itself" in done.stderr and "nothing was written" in done.stderr
    assert fingerprint(db) == before
    assert revisions(db) == stored
    assert (links / "hard.html").stat().st_ino == db.stat().st_ino


def test_what_the_command_line_writes_is_owner_only(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()
    kept.chmod(0o755)
    folder = kept / "new" / "data"
    done = cli("demo", "--dir", str(folder), umask=0o002)  # a umask that lets the group in
    assert done.returncode == 0, done.stderr
    assert mode(kept) == 0o755  # a folder that exists keeps its own
    assert (mode(kept / "new"), mode(folder)) == (0o700, 0o700)
    assert mode(folder / "statekernel.db") == 0o600
    page = tmp_path / "trace.html"
    page.write_text("an older page")
    page.chmod(0o644)
    fresh = tmp_path / "fresh.html"
    db = str(folder / "statekernel.db")
    for out in (page, fresh):
        done = cli("trace", db, "--thread", THREAD, "--html", str(out), umask=0o002)
        assert done.returncode == 0, done.stderr
        assert mode(out) == 0o600
        assert out.read_text(encoding="utf-8").startswith("<!doctype html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.html", "kept", "trace.html"]


@contextlib.contextmanager
def read_only_media(folder: Path) -> Iterator[list[str]]:
    """`folder` as read-only media to the commands run after the prefix this yields: a
    read-only bind mount in a mount namespace of their own (`unshare`, for root or not);
    where that is not allowed, the folder and its files made read-only by their modes,
    which only root would write through."""
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    prefix = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, str(folder)]
    probe = folder / ".probe"
    if shutil.which("unshare") is not None:
        mounted = subprocess.run([*prefix, "true"], capture_output=True, check=False)
        written = subprocess.run([*prefix, "touch", str(probe)], capture_output=True, check=False)
        if mounted.returncode == 0 and written.returncode != 0 and not probe.exists():
            yield prefix
            return
    if os.geteuid() == 0:
        pytest.skip(
            "no way to make a folder read-only here: unshare cannot mount a read-only view "
            "(user namespaces disallowed), and root writes through read-only modes"
        )
    modes = {path: mode(path) for path in [folder, *folder.iterdir()]}
    for path in folder.iterdir():
        path.chmod(0o444)
    folder.chmod(0o555)
    try:
        yield []
    finally:
        for path, kept in modes.items():
            path.chmod(kept)


def test_a_store_on_read_only_media_is_read_and_never_written(
    demo_folder: Path, tmp_path: Path
) -> None:
    media = tmp_path / "media"
    media.mkdir()
    db = copy_of(demo_folder / "statekernel.db", media)  # as a backup on a read-only disk
    before = fingerprint(db)
    with read_only_media(media) as prefix:
        assert revisions(db, prefix=prefix) == revisions(demo_folder / "statekernel.db")
        page = tmp_path / "trace.html"
        for args in (
            ["show", str(db), "--thread", THREAD, "--json"],
            ["verify", str(db), "--thread", THREAD],
            ["trace", str(db), "--thread", THREAD, "--html", str(page)],
        ):
            done = cli(*args, prefix=prefix)
            assert done.returncode == 0, (args, done.stderr)
        written = cli("demo", "--dir", str(media), prefix=prefix)
    assert written.returncode == 2, written.stderr
    assert len(written.stderr.splitlines()) == 1
    said = written.stderr
    assert "cannot be opened for writing" in said and "read-only" in said, said
    assert "reading commands" in said and "not a statekernel store" not in said
    assert fingerprint(db) == before
    assert sorted(os.listdir(media)) == ["statekernel.db"]


def test_a_wal_on_read_only_media_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    media = tmp_path / "media"
    db = media / "statekernel.db"
    crash = (  # commits in the -wal, not yet in the database file, as a crash leaves them
        "import asyncio, os, sys\n"
        "from statekernel.stores import SqliteProfileStore\n"
        "async def main():\n"
        "    await SqliteProfileStore(sys.argv[1]).set('notes', 'first', 1)\n"
        "    os._exit(0)\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", crash, str(db)], check=True, timeout=60)
    assert Path(f"{db}-wal").stat().st_size > 0
    Path(f"{db}-shm").unlink()  # copied without it
    with read_only_media(media) as prefix:
        done = cli("inspect", str(db), prefix=prefix)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "-wal file holds changes not yet in the database file" in done.stderr
    assert "writable folder" in done.stderr and "not a statekernel store" not in done.stderr


async def test_a_key_value_dsn_is_read_and_its_password_never_shown(
    postgres_dsn: str, postgres_server: PostgresServer
) -> None:
    async with PostgresThreadStore(postgres_dsn) as threads:
        agent = Agent([], ScriptedModel([InferenceResponse(text="hi")]), thread_store=threads)
        await agent.run("kv-thread", ["hello"])
        revision = (await Kernel([], thread_store=threads).get_state("kv-thread")).revision
    schema = postgres_dsn.rsplit("search_path=", 1)[1]
    secret = "kv-secret-8d3f"  # the throwaway server trusts local connections: unused
    pairs = (
        f"host=127.0.0.1 port={postgres_server.port} dbname=postgres user=postgres "
        f"password={secret} options='-c search_path={schema}'"
    )
    uri = postgres_dsn.replace("postgresql://postgres@", f"postgresql://postgres:{secret}@")
    for dsn, hidden in ((pairs, "password=***"), (uri, "postgres:***@")):
        assert revisions(dsn) == {"kv-thread": revision}
        shown = answer("show", dsn, "--thread", "kv-thread")
        assert [m["content"] for m in shown["statekernel.messages"]] == ["hello", "hi"]
        empty = cli("threads", dsn, "--prefix", "none-")  # names the database it read
        assert empty.returncode == 0 and hidden in empty.stdout, empty.stdout
        missing = cli("show", dsn, "--thread", "none")
        assert missing.returncode == 2
        for done in (empty, missing):
            assert secret not in done.stdout + done.stderr
    async with PostgresThreadStore(pairs, read_only=True) as store:
        assert await store.threads() == ["kv-thread"]
        assert store.dsn == pairs
        assert secret not in repr(store) and "password=***" in repr(store)


async def test_a_refused_or_unreachable_dsn_says_so_without_its_password(
    postgres_server: PostgresServer,
) -> None:
    import asyncpg

    role, right, wrong = "sk_cli_password", "right-3c1e", "wrong-a77b"
    port = postgres_server.port
    conn = await asyncpg.connect(postgres_server.dsn)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role):
            await conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{right}'")
        rules = postgres_server.data / "pg_hba.conf"  # this role alone signs in by password
        rule = f"host all {role} 127.0.0.1/32 scram-sha-256\n"
        if rule not in rules.read_text():
            rules.write_text(rule + rules.read_text())
            await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()
    uri = f"postgresql://{role}:{wrong}@127.0.0.1:{port}/postgres"
    for _ in range(400):  # until the server has read its new rules
        try:
            await (await asyncpg.connect(uri)).close()
        except asyncpg.InvalidPasswordError:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the server never asked for a password")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]  # nothing listens there once it is closed
    cases = [
        (uri, "password authentication failed"),
        (f"host=127.0.0.1 port={port} user={role} password={wrong}", "password authentication"),
        (uri.replace(f":{port}/", f":{closed}/"), "Connect call failed"),
        (f"host=127.0.0.1 port={closed} user={role} password='{wrong} x'", "Connect call failed"),
    ]
    for dsn, said in cases:
        done = cli("threads", dsn)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert said in done.stderr, done.stderr
        assert wrong not in done.stdout + done.stderr, done.stderr
        store = PostgresThreadStore(dsn, retry_for=0)
        with pytest.raises(StoreError) as failed:
            await store.threads()
        await store.close()
        assert wrong not in str(failed.value) and wrong not in repr(store)


async def three_threads(store: SqliteThreadStore | PostgresThreadStore) -> None:
    """Threads alpha, beta and gamma, each an Agent's run of one answer."""
    for name in ("alpha", "beta", "gamma"):
        model = ScriptedModel([InferenceResponse(text=f"hello from {name}")])
        await Agent([], model, thread_store=store).run(name, [f"hi {name}"])


def assert_beta_is_named_and_the_others_listed(db: str, head: int) -> None:
    """`threads` and `inspect` list alpha and gamma as before and beta in its own row,
    saying what is wrong (exit 1, one line on stderr); the commands that read beta alone
    stop with that error, and `verify` names the revision."""
    healthy = {"alpha", "gamma"}
    listed = cli("threads", db, "--json")
    assert listed.returncode == 1, listed.stderr
    rows = {row["thread_id"]: row for row in json.loads(listed.stdout)}
    assert set(rows) == {"alpha", "beta", "gamma"}
    for name in healthy:
        assert (rows[name]["status"], rows[name]["error"]) == ("ok", None)
        assert rows[name]["revision"] > 0 and rows[name]["last_run"] == f"{name}:run-1"
    beta = rows["beta"]
    assert (beta["status"], beta["revision"], beta["last_run"]) == ("damaged", head, None)
    assert (
        f"thread 'beta' is damaged: its stored journal cannot be trusted from revision {head}"
        in (beta["error"])
    )
    assert "Restore the store from a backup" in beta["error"]
    (said,) = listed.stderr.splitlines()
    assert said == f"statekernel: {beta['error']}"
    table = cli("threads", db)
    assert table.returncode == 1
    lines = {line.split()[0]: line for line in table.stdout.splitlines()[1:]}
    assert lines["alpha"].split()[-1] == "ok" and lines["gamma"].split()[-1] == "ok"
    assert lines["beta"].split()[:3] == ["beta", str(head), "damaged"]  # cut to fit
    inspected = cli("inspect", db, "--json")
    assert inspected.returncode == 1, inspected.stderr
    shown = json.loads(inspected.stdout)["threads"]
    for name in healthy:
        assert shown[name]["status"] == "ok"
        assert shown[name]["values"] == answer("show", db, "--thread", name)
    assert (shown["beta"]["status"], shown["beta"]["values"]) == ("damaged", None)
    assert shown["beta"]["error"] == beta["error"]
    text = cli("inspect", db)
    assert text.returncode == 1 and "thread alpha  (revision" in text.stdout
    assert f"thread beta  (revision {head}, damaged at revision {head}:" in text.stdout
    for command in ("history", "show"):
        done = cli(command, db, "--thread", "beta")
        assert done.returncode == 1, (command, done.stderr)
        assert done.stdout == "" and done.stderr.splitlines() == [said], command
    report = json.loads(cli("verify", db, "--thread", "beta", "--json").stdout)
    assert (report["ok"], report["first_divergence"]) == (False, head)


@pytest.mark.parametrize("damage", ["newest record deleted", "newest record altered"])
async def test_a_damaged_thread_has_its_own_row_and_the_others_are_listed(
    tmp_path: Path, damage: str
) -> None:
    db = tmp_path / "three.db"
    async with SqliteThreadStore(db) as store:
        await three_threads(store)
    with sqlite3.connect(db) as raw:
        (head, data) = raw.execute(
            "SELECT revision, record FROM thread_records WHERE thread_id = 'beta' "
            "ORDER BY revision DESC LIMIT 1"
        ).fetchone()
        if damage == "newest record deleted":
            raw.execute(
                "DELETE FROM thread_records WHERE thread_id = 'beta' AND revision = ?", (head,)
            )
        else:  # one byte of its body changed
            raw.execute(
                "UPDATE thread_records SET record = ? WHERE thread_id = 'beta' AND revision = ?",
                (data[:-1] + bytes([data[-1] ^ 1]), head),
            )
    assert_beta_is_named_and_the_others_listed(str(db), head)
    if damage == "newest record deleted":
        said = cli("history", str(db), "--thread", "beta").stderr
        assert f"its head names revision {head}, but the store holds no record of revision" in said


async def test_a_damaged_thread_of_a_postgresql_store_has_its_own_row(postgres_dsn: str) -> None:
    import asyncpg

    async with PostgresThreadStore(postgres_dsn) as store:
        await three_threads(store)
    raw = await asyncpg.connect(postgres_dsn)
    try:
        head = await raw.fetchval(
            "DELETE FROM statekernel_thread_records WHERE thread_id = 'beta' AND revision = "
            "(SELECT max(revision) FROM statekernel_thread_records WHERE thread_id = 'beta') "
            "RETURNING revision"
        )
    finally:
        await raw.close()
    assert_beta_is_named_and_the_others_listed(postgres_dsn, head)
