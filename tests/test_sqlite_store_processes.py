"""The SQLite ProfileStore across processes: concurrent writers, a writer killed mid-stream."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import msgspec
import pytest

pytestmark = pytest.mark.slow  # writer processes racing on one file

COUNTER_WORKER = textwrap.dedent(
    """
    import asyncio, sys, time
    from statekernel import ProfileAccess, ProfileKey
    from statekernel.stores import SqliteProfileStore

    class Counter(ProfileKey[int]):
        key = "counter"

    async def main(path, updates, start_at):
        async with SqliteProfileStore(path) as store:
            await store.get("warm", "up")  # open the file before the start line
            while time.time() < start_at:  # all workers start together
                await asyncio.sleep(0.005)
            access = ProfileAccess(store)
            for _ in range(updates):
                await access.update(Counter, "global", lambda n: n + 1)

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
    """
)


def test_four_processes_updating_one_counter_lose_no_increment(tmp_path: Path) -> None:
    path = tmp_path / "counter.db"
    start_at = time.time() + 2.0  # time for every interpreter to start and open the file
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", COUNTER_WORKER, str(path), "500", str(start_at)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        errors = [worker.communicate(timeout=120)[1] for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    assert [worker.returncode for worker in workers] == [0, 0, 0, 0], errors
    assert not any("locked" in text for text in errors)
    with sqlite3.connect(path) as raw:
        value, version = raw.execute(
            "SELECT value, version FROM profile_records WHERE namespace = 'counter'"
        ).fetchone()
    assert (msgspec.json.decode(value), version) == (2000, 2000)


STREAM_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from statekernel.stores import SqliteProfileStore

    async def writer(store, lane):
        for i in range(20_000):  # a bound, in case nobody kills us
            key = f"lane{lane}-{i:05d}"
            await store.set("acks", key, {"lane": lane, "i": i, "pad": "x" * 200})
            sys.stdout.write(key + "\\n")  # acknowledged: set returned
            sys.stdout.flush()

    async def main(path):
        store = SqliteProfileStore(path)
        await asyncio.gather(*(writer(store, lane) for lane in range(8)))

    asyncio.run(main(sys.argv[1]))
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")
def test_every_acknowledged_set_survives_sigkill_and_the_file_stays_sound(
    tmp_path: Path,
) -> None:
    path = tmp_path / "killed.db"
    child = subprocess.Popen(
        [sys.executable, "-c", STREAM_WRITER, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    watchdog = threading.Timer(60, child.kill)  # a hung child must not hang the suite
    watchdog.start()
    acked: list[str] = []
    try:
        while len(acked) < 400:
            line = child.stdout.readline()
            if not line:
                break
            acked.append(line.rstrip("\n"))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        watchdog.cancel()
    rest, errors = child.communicate(timeout=60)
    assert len(acked) >= 400, errors
    # Lines the child flushed before it died were acknowledged too; a torn last line was not.
    acked.extend(line for line in rest.split("\n")[:-1] if line)
    assert child.returncode == -signal.SIGKILL

    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        stored = dict(
            raw.execute("SELECT key, value FROM profile_records WHERE namespace = 'acks'")
        )
    missing = [key for key in acked if key not in stored]
    assert missing == []
    for key in acked:
        lane, index = key.removeprefix("lane").split("-")
        assert msgspec.json.decode(stored[key]) == {
            "lane": int(lane),
            "i": int(index),
            "pad": "x" * 200,
        }
