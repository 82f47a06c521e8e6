"""A throwaway PgBouncer (Debian's `pgbouncer` package) in front of a test's PostgreSQL, on a
free port of 127.0.0.1, in transaction or session pooling, stopped at the end of the block
(also on failure)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["HOW_TO_INSTALL", "find_pgbouncer", "throwaway_pgbouncer"]

HOW_TO_INSTALL = (
    "install Debian's pgbouncer package (`apt-get install pgbouncer`) to run it; .ci/run does"
)


def find_pgbouncer() -> str | None:
    found = shutil.which("pgbouncer")
    if found is None and os.access("/usr/sbin/pgbouncer", os.X_OK):
        found = "/usr/sbin/pgbouncer"
    return found


@contextlib.contextmanager
def throwaway_pgbouncer(
    binary: str, server_port: int, database: str, mode: str, pool_size: int
) -> Iterator[str]:
    """Start PgBouncer in `mode` ("transaction" or "session") for `database` on the server at
    `server_port`, with `pool_size` server connections; yields the DSN that reaches the
    database through it."""
    folder = Path(tempfile.mkdtemp(prefix="statekernel-pgbouncer-"))
    port = _free_port()
    (folder / "users.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n{database} = host=127.0.0.1 port={server_port} dbname={database}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n"
        f"unix_socket_dir =\nauth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        f"pool_mode = {mode}\ndefault_pool_size = {pool_size}\nmax_client_conn = 200\n"
        f"logfile = {folder / 'log'}\npidfile = {folder / 'pid'}\n"
    )
    user = "postgres" if os.geteuid() == 0 else None
    if user is not None:
        shutil.chown(folder, user, user)
        for path in folder.iterdir():
            shutil.chown(path, user, user)
    process = subprocess.Popen(
        [binary, str(folder / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        user=user,
        group=user,
        cwd="/",
    )
    try:
        _wait_for(port, process, folder)
        yield f"postgresql://postgres@127.0.0.1:{port}/{database}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_for(port: int, process: subprocess.Popen[bytes], folder: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (folder / "log").read_text(errors="replace") if (folder / "log").exists() else ""
            raise RuntimeError(f"pgbouncer exited with {process.returncode}:\n{log}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError("pgbouncer did not listen within 20 s")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
