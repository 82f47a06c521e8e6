"""`statekernel worker` processes for the tests: started as a user starts them (the
command line, the application module found from the working directory), each one's
standard error read as it comes, stopped with the signals an operator sends."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
APP = "team_worker_app:make_team"


class Worker:
    """One `statekernel worker` process."""

    def __init__(self, db: str, env: dict[str, str], *args: str, app: str = APP) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "statekernel", "worker", app, "--store", db, *args],
            cwd=HERE,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._new: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            self._new.put(line)
        self._new.put(None)

    def wait_for(self, text: str, timeout: float = 30) -> str:
        """The first line of its standard error holding `text`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._new.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {text!r} in {timeout} s: {self.lines}") from None
            if line is None:
                raise AssertionError(f"ended without {text!r}: {self.lines}")
            if text in line:
                return line

    @property
    def worker_id(self) -> str:
        line = next(line for line in self.lines if "as worker " in line)
        return line.split("as worker ", 1)[1].split()[0].strip(";,")

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 30) -> int:
        self.process.send_signal(signum)
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)

    @property
    def output(self) -> str:
        return "".join(self.lines)


def start_workers(db: str, count: int, env: dict[str, str], *args: str) -> list[Worker]:
    """`count` workers, each serving once this returns."""
    workers = [Worker(db, env, *args) for _ in range(count)]
    for worker in workers:
        worker.wait_for("serving team")
    return workers


def stop_all(workers: list[Worker]) -> list[int]:
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    return [w.process.wait(timeout=60) for w in workers]
