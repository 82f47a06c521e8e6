"""Every page of the docs runs: each page's Python code, block after block, exits cleanly.

That includes the reference pages, whose code is the examples in the docstrings they show.
Each page runs in a process of its own (tests/docs_page.py), in an empty folder, as a reader
would paste it. The pages that talk to something real get that thing, on 127.0.0.1 only:
"connect a real model" a local server speaking the Chat Completions wire format, "tracing"
a local OTLP/HTTP receiver (which must then hold the run's spans), "PostgreSQL" a throwaway
server (and so does the testing reference, whose `throwaway_postgres` example starts one).
A page drifting from the API fails here instead of in front of a reader.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from chat_server import ChatServer, calls, text
from docs_page import python_blocks, rendered_text

from statekernel.testing.postgres import PostgresServer

pytestmark = pytest.mark.slow  # each page runs in a process of its own

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RUNNER = ROOT / "tests" / "docs_page.py"
PAGES = sorted(DOCS.glob("*.md"))
# The pages that talk to a server, each run by a test of its own that starts it.
SERVED = ("models.md", "observability.md", "postgres.md", "reference-testing.md")


def _has_code(page: Path) -> bool:
    return bool(python_blocks(rendered_text(page)))


@dataclass(frozen=True)
class _PageRun:
    """One page's code running in a process of its own, its output going to a file."""

    page: Path
    process: subprocess.Popen[str]
    output: Path

    def check(self) -> None:
        self.process.wait(timeout=180)
        assert self.process.returncode == 0, (
            f"docs/{self.page.name} failed:\n{self.output.read_text(encoding='utf-8')}"
        )


def _start(page: Path, folder: Path, env: dict[str, str] | None = None) -> _PageRun:
    """The page's run, started in `folder` (rendered here: griffe loads once, in this process)."""
    rendered = folder / f"rendered-{page.name}"
    rendered.write_text(rendered_text(page), encoding="utf-8")
    output = folder / "output.txt"
    with output.open("w", encoding="utf-8") as file:  # the child keeps its own copy
        process = subprocess.Popen(
            [sys.executable, str(RUNNER), str(page), str(rendered)],
            stdout=file,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=folder,
            env={**os.environ, **(env or {})},
        )
    return _PageRun(page, process, output)


def _run(page: Path, folder: Path, env: dict[str, str] | None = None) -> None:
    _start(page, folder, env).check()


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        ("assert 1 == 2", "AssertionError"),
        (
            "from statekernel import Kernel, StateCommand\n"
            "run = await Kernel([]).start_run('t')\n"
            "run.submit(StateCommand())  # not awaited: Python would only warn",
            "was never awaited",
        ),
    ],
    ids=["a block that raises", "a coroutine never awaited"],
)
def test_a_broken_page_fails(tmp_path: Path, code: str, problem: str) -> None:
    page = tmp_path / "broken.md"
    page.write_text(f"# Broken\n\n```python\n{code}\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match=problem):
        _run(page, tmp_path)


def test_pages_are_found() -> None:
    assert DOCS / "concepts.md" in PAGES
    assert python_blocks((DOCS / "concepts.md").read_text(encoding="utf-8"))
    # a reference page's code is in the docstrings it shows
    assert "```python" not in (DOCS / "reference.md").read_text(encoding="utf-8")
    assert _has_code(DOCS / "reference.md")


PLAIN = [page for page in PAGES if page.name not in SERVED and _has_code(page)]


@pytest.fixture(scope="module")
def plain_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, _PageRun]:
    """Every page that needs no server, started two at a time (the suite's machine has two
    cores) as the first of their tests asks; each test then checks its own page."""
    started: dict[Path, _PageRun] = {}
    for page in PLAIN:
        running = [run.process for run in started.values() if run.process.poll() is None]
        if len(running) >= 2:
            running[0].wait(timeout=180)
        started[page] = _start(page, tmp_path_factory.mktemp(page.stem))
    return started


@pytest.mark.parametrize("page", PLAIN, ids=lambda page: page.name)
def test_the_page_runs(page: Path, plain_pages: dict[Path, _PageRun]) -> None:
    plain_pages[page].check()


def test_the_models_page_runs_against_a_local_chat_server(tmp_path: Path) -> None:
    server = ChatServer(
        [
            calls(("call_1", "lookup", {"city": "Oslo"})),
            text("It is sunny in Oslo."),
        ]
        * 4
    )
    with server:
        _run(
            DOCS / "models.md",
            tmp_path,
            {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test-key"},
        )
    assert server.requests, "the page's model never reached the local server"
    assert not server.refused, server.refused


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint: keeps every export request's path and body."""

    received: list[tuple[str, bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads what arrived, not the log."""


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    received: list[tuple[str, bytes]] = []
    handler = type("Receiver", (_Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # shutdown() waits for the serving loop's next poll (0.5 s by default)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def test_the_tracing_page_sends_its_run_to_a_local_otlp_endpoint(
    tmp_path: Path, otlp_receiver: tuple[str, list[tuple[str, bytes]]]
) -> None:
    endpoint, received = otlp_receiver
    _run(DOCS / "observability.md", tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    traces = [body for path, body in received if path == "/v1/traces"]
    assert traces, f"nothing reached {endpoint}/v1/traces (got {[p for p, _ in received]})"
    sent = b"".join(traces)
    for name in (b"invoke_agent", b"statekernel.revision"):
        assert name in sent, f"the exported spans hold no {name!r}"


def test_the_postgres_page_runs_against_a_throwaway_server(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    _run(DOCS / "postgres.md", tmp_path, {"DATABASE_URL": postgres_server.dsn})


def test_the_testing_reference_runs_where_postgres_can_start(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    """Its `throwaway_postgres` example starts a cluster of its own from the same binaries
    (the `postgres_server` fixture only decides whether they are there, and says so)."""
    _run(DOCS / "reference-testing.md", tmp_path)
