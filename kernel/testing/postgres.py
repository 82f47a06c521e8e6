"""A throwaway PostgreSQL server for tests and benchmarks, started from the machine's own
PostgreSQL binaries: a fresh cluster in a temporary folder, on a free port of 127.0.0.1,
stopped and deleted when the `with` block ends, also when it ends in an error, and also
when the process that started it is killed outright (a watchdog process stops it then).

```python
from statekernel.testing.postgres import throwaway_postgres

with throwaway_postgres() as server:
    # hand the DSN to the code under test (a `PostgresThreadStore(server.dsn)`, say)
    assert server.dsn.startswith("postgresql://postgres@127.0.0.1:")
```

It needs the server binaries (`initdb`, `pg_ctl`: Debian's and Ubuntu's `postgresql`
package, or any install with them on PATH). PostgreSQL refuses to run as root, so as root it
runs them as the `postgres` user (which that package creates). Nothing here listens anywhere
but 127.0.0.1, and the cluster trusts local connections: it is for tests of your own
PostgreSQL-backed code, never for data.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs

__all__ = ["PostgresServer", "PostgresUnavailable", "find_binaries", "throwaway_postgres"]

HOW_TO_INSTALL = (
    "install PostgreSQL's server binaries (Debian/Ubuntu: `apt-get install postgresql`; "
    "`.ci/run` does it for you) or put a folder holding `initdb` and `pg_ctl` on PATH"
)


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries here, or the cluster would not start (the message says
    which, and how to fix it; when the cluster would not start, with the server's log).

    Also a `RuntimeError`.
    """


def find_binaries() -> Path | None:
    """The folder holding `initdb` and `pg_ctl`: PATH first, then Debian's versioned folders
    (newest first), else None."""
    found = shutil.which("initdb")
    if found is not None and shutil.which("pg_ctl") is not None:
        return Path(found).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda path: int(Path(path).parent.parent.name.split(".")[0]),
        reverse=True,
    )
    return Path(versions[0]).parent if versions else None


@attrs.define
class PostgresServer:
    """A running throwaway cluster: `dsn` reaches its `postgres` database as its superuser.

    `throwaway_postgres` makes it: `binaries` is the folder of the server binaries, `folder`
    the temporary folder holding the cluster, `port` its port on 127.0.0.1, and `durable`
    whether fsync is on.
    """

    binaries: Path
    folder: Path
    port: int
    durable: bool

    @property
    def dsn(self) -> str:
        """The connection string of its `postgres` database, as its superuser `postgres`
        (trusted locally, no password)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        options += " -c max_connections=200"
        if not self.durable:  # tests: a crash of the test machine loses nothing of value
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._pg_ctl("start", "-w", "-t", "60", "-o", options, "-l", str(self.folder / "log"))

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: `"fast"` cuts open connections and rolls running transactions
        back; `"immediate"` kills it outright, as a crash would (it recovers on start)."""
        if mode not in ("fast", "immediate", "smart"):
            raise ValueError(f"mode must be 'fast', 'immediate' or 'smart', got {mode!r}")
        self._pg_ctl("stop", "-m", mode, "-w", "-t", "60")

    def restart(self, mode: str = "fast") -> None:
        """Stop (see `stop`) and start again on the same port, as an operator's
        `pg_ctl restart` would."""
        self.stop(mode)
        self.start()

    def log(self) -> str:
        """The server's log so far (empty when there is none yet)."""
        path = self.folder / "log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _pg_ctl(self, *args: str) -> None:
        _run(self.binaries / "pg_ctl", "-D", str(self.data), *args)


@contextlib.contextmanager
def throwaway_postgres(*, durable: bool = False) -> Iterator[PostgresServer]:
    """A fresh PostgreSQL cluster for the block's duration; yields its `PostgresServer`.

    The cluster starts from the machine's own server binaries (`initdb` and `pg_ctl` on PATH,
    or Debian's `/usr/lib/postgresql/<version>/bin`) in a temporary folder, on a free port of
    127.0.0.1, and is stopped and deleted when the block ends, also on an error (and, through
    a small watchdog process, when the process that started it is killed outright). As root
    it runs the server as the `postgres` user.

    `durable=False` (tests) turns fsync off; benchmarks pass `durable=True` to measure what a
    real server does. Raises `PostgresUnavailable`, saying how to fix it, when there are no
    server binaries or the cluster does not start (with the server's log). It is for tests
    of your own PostgreSQL-backed code, never for data.
    """
    binaries = find_binaries()
    if binaries is None:
        raise PostgresUnavailable(f"PostgreSQL's server binaries were not found: {HOW_TO_INSTALL}")
    folder = Path(tempfile.mkdtemp(prefix="statekernel-pg-"))
    server = PostgresServer(binaries, folder, _free_port(), durable)
    started = False
    try:
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres", "postgres")
        _run(
            binaries / "initdb",
            "-D",
            str(server.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        server.start()
        started = True
        watchdog = _watch(server)
        try:
            yield server
        finally:
            watchdog.kill()
            watchdog.wait()
    except subprocess.CalledProcessError as error:
        output = (error.stdout or b"").decode(errors="replace")
        raise PostgresUnavailable(
            f"the throwaway PostgreSQL cluster did not start ({error}):\n{output}\n{server.log()}"
        ) from None
    finally:
        try:
            if started:
                with contextlib.suppress(subprocess.CalledProcessError):
                    server.stop()
        finally:
            shutil.rmtree(folder, ignore_errors=True)


# Stops the cluster and deletes its folder once the process that started it is gone: a
# test run killed by a timeout (SIGKILL, or SIGTERM, which runs no `finally`) would
# otherwise leave a server running.
_WATCHDOG = """
import os, shutil, subprocess, sys, time
owner, pg_ctl, data, folder, user = sys.argv[1:]
while True:
    try:
        os.kill(int(owner), 0)
    except ProcessLookupError:
        break
    time.sleep(0.5)
subprocess.run([pg_ctl, "-D", data, "stop", "-m", "immediate"], user=user or None,
               group=user or None, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
shutil.rmtree(folder, ignore_errors=True)
"""


def _watch(server: PostgresServer) -> subprocess.Popen[bytes]:
    user = "postgres" if os.geteuid() == 0 else ""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            _WATCHDOG,
            str(os.getpid()),
            str(server.binaries / "pg_ctl"),
            str(server.data),
            str(server.folder),
            user,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives a kill of the owner's process group
    )


def _run(*command: str | Path) -> None:
    """Run a server binary: as the `postgres` user when we are root (PostgreSQL refuses
    root), its output captured for the error message."""
    user = "postgres" if os.geteuid() == 0 else None
    subprocess.run(
        [str(part) for part in command],
        check=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd="/",
        user=user,
        group=user,
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
