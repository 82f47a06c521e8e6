"""Fixtures the test modules share: a live state of the sample keys, thread and profile stores,
a throwaway PostgreSQL server, and a headless Chromium."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from browser import HOW_TO_INSTALL as HOW_TO_INSTALL_BROWSER
from browser import Browser, find_browser, headless_chromium
from mutant_deadline import (  # noqa: F401  (hooks: a deadline per test under mutmut)
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
)
from mutant_order import (  # noqa: F401  (hook: fastest modules first under mutmut)
    pytest_collection_modifyitems,
)
from pgbouncer import HOW_TO_INSTALL as HOW_TO_INSTALL_PGBOUNCER
from pgbouncer import find_pgbouncer
from sample_keys import ALL_KEYS

from statekernel import ProfileStore, ThreadStore
from statekernel.lowlevel import KeyRegistry, LiveState
from statekernel.stores import (
    MemoryProfileStore,
    MemoryThreadStore,
    PostgresProfileStore,
    PostgresThreadStore,
    SqliteProfileStore,
    SqliteThreadStore,
)
from statekernel.testing.postgres import (
    HOW_TO_INSTALL,
    PostgresServer,
    find_binaries,
    throwaway_postgres,
)

# .ci/run sets it: there, a test that needs PostgreSQL fails instead of being skipped.
REQUIRE_POSTGRES = os.environ.get("STATEKERNEL_REQUIRE_POSTGRES") == "1"
_NO_POSTGRES = f"PostgreSQL is not installed here: {HOW_TO_INSTALL}"
_skipped_for_postgres: list[str] = []
# .ci/run sets it too: there, a test that needs the browser fails instead of being skipped.
REQUIRE_BROWSER = os.environ.get("STATEKERNEL_REQUIRE_BROWSER") == "1"
_NO_BROWSER = f"Chromium is not installed here: {HOW_TO_INSTALL_BROWSER}"
_skipped_for_browser: list[str] = []
# And there, the long crash and fault trials run in full (here, a few of each).
FULL_TRIALS = os.environ.get("STATEKERNEL_FULL_TRIALS") == "1"
_shortened: list[str] = []
# And there, a test that needs PgBouncer fails instead of being skipped.
REQUIRE_PGBOUNCER = os.environ.get("STATEKERNEL_REQUIRE_PGBOUNCER") == "1"
_NO_PGBOUNCER = f"PgBouncer is not installed here: {HOW_TO_INSTALL_PGBOUNCER}"
_skipped_for_pgbouncer: list[str] = []
# The PostgreSQL variant of a test that runs on every backend: a schema of its own on the
# throwaway server costs more than the test. `make unit-fast` runs such a test on the others.
_POSTGRES = pytest.param("postgres", marks=pytest.mark.slow)


@pytest.fixture
def registry() -> KeyRegistry:
    return KeyRegistry.of(*ALL_KEYS)


@pytest.fixture
def state(registry: KeyRegistry) -> LiveState:
    return LiveState(registry)


@pytest.fixture(params=["memory", "sqlite", _POSTGRES])
async def thread_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ThreadStore]:
    """Each ThreadStore backend in turn, open: memory, SQLite on a file under tmp_path, and
    PostgreSQL in a fresh schema of the throwaway server."""
    async with _thread_store(request, tmp_path, request.param) as made:
        yield made


@contextlib.asynccontextmanager
async def _thread_store(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> AsyncIterator[ThreadStore]:
    made: ThreadStore
    if kind == "memory":
        made = MemoryThreadStore()
    elif kind == "sqlite":
        made = SqliteThreadStore(tmp_path / "threads.db")
    else:
        made = PostgresThreadStore(await _fresh_schema(request))
    async with made:
        yield made


@pytest.fixture(params=["kernel memory", "memory", "sqlite", _POSTGRES])
async def thread_store_or_none(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ThreadStore | None]:
    """None (a kernel without a store keeps threads in its own memory), then each
    ThreadStore backend, open."""
    if request.param == "kernel memory":
        yield None
        return
    async with _thread_store(request, tmp_path, request.param) as made:
        yield made


@pytest.fixture
async def sqlite_thread_store(tmp_path: Path) -> AsyncIterator[SqliteThreadStore]:
    """A SqliteThreadStore on a fresh file under tmp_path, open."""
    async with SqliteThreadStore(tmp_path / "threads.db") as opened:
        yield opened


@pytest.fixture(params=["memory", "sqlite", _POSTGRES])
async def profile_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ProfileStore]:
    """Each ProfileStore backend in turn, open: memory, SQLite on a file under tmp_path, and
    PostgreSQL in a fresh schema of the throwaway server."""
    made: ProfileStore
    if request.param == "memory":
        made = MemoryProfileStore()
    elif request.param == "sqlite":
        made = SqliteProfileStore(tmp_path / "profiles.db")
    else:
        made = PostgresProfileStore(await _fresh_schema(request))
    async with made:
        yield made


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL cluster for the whole session (fsync off), from the machine's
    own binaries; the tests that need it are skipped, and say so, where there are none."""
    if find_binaries() is None:
        if REQUIRE_POSTGRES:
            pytest.fail(_NO_POSTGRES)
        pytest.skip(_NO_POSTGRES)
    with throwaway_postgres() as server:
        yield server


@pytest.fixture
async def postgres_dsn(postgres_server: PostgresServer) -> str:
    """A DSN on the throwaway server whose tables land in a fresh, empty schema."""
    return await _fresh_schema_dsn(postgres_server)


async def _fresh_schema(request: pytest.FixtureRequest) -> str:
    return await _fresh_schema_dsn(request.getfixturevalue("postgres_server"))


async def _fresh_schema_dsn(server: PostgresServer) -> str:
    import asyncpg

    # Random, not counted: mutmut's in-process runs import this module again, and a counter
    # would restart there on a server that already has its schemas.
    schema = f"test_{uuid.uuid4().hex}"
    conn = await asyncpg.connect(server.dsn)
    try:
        await conn.execute(f"CREATE SCHEMA {schema}")
    finally:
        await conn.close()
    return f"{server.dsn}?search_path={schema}"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    """A headless Chromium session (Debian's chromium and chromium-driver), ended after the
    test; the tests that need it are skipped, and say so, where there is none."""
    found = find_browser()
    if found is None:
        if REQUIRE_BROWSER:
            pytest.fail(_NO_BROWSER)
        pytest.skip(_NO_BROWSER)
    with headless_chromium(*found, tmp_path / "chromium-profile") as session:
        yield session


@pytest.fixture
def pgbouncer() -> str:
    """The path of Debian's `pgbouncer` binary; the tests that need it are skipped, and say
    so, where there is none."""
    found = find_pgbouncer()
    if found is None:
        if REQUIRE_PGBOUNCER:
            pytest.fail(_NO_PGBOUNCER)
        pytest.skip(_NO_PGBOUNCER)
    return found


@pytest.fixture
def trials(request: pytest.FixtureRequest) -> Callable[[int, int], int]:
    """`trials(full, short)`: how many trials a long crash or fault test runs: `full`
    under .ci/run, else `short` (and the summary names the tests that ran fewer)."""

    def count(full: int, short: int) -> int:
        if FULL_TRIALS:
            return full
        _shortened.append(f"{request.node.nodeid} ({short} of {full})")
        return short

    return count


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and _NO_POSTGRES in str(report.longrepr):
        _skipped_for_postgres.append(report.nodeid)
    if report.skipped and _NO_BROWSER in str(report.longrepr):
        _skipped_for_browser.append(report.nodeid)
    if report.skipped and _NO_PGBOUNCER in str(report.longrepr):
        _skipped_for_pgbouncer.append(report.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _skipped_for_postgres:
        terminalreporter.write_sep("!", "PostgreSQL tests skipped", yellow=True)
        terminalreporter.write_line(
            f"{len(_skipped_for_postgres)} tests that need a PostgreSQL server were SKIPPED: "
            f"{_NO_POSTGRES}. (.ci/run installs it and never skips them.)"
        )
    if _skipped_for_browser:
        terminalreporter.write_sep("!", "browser tests skipped", yellow=True)
        terminalreporter.write_line(
            f"{len(_skipped_for_browser)} tests that need a browser were SKIPPED: "
            f"{_NO_BROWSER}. (.ci/run installs it and never skips them.)"
        )
    if _shortened:
        terminalreporter.write_sep("!", "trials shortened", yellow=True)
        terminalreporter.write_line(
            f"{len(_shortened)} crash and fault tests ran fewer trials: "
            f"{', '.join(_shortened)}. STATEKERNEL_FULL_TRIALS=1 runs them all, as .ci/run does."
        )
    if _skipped_for_pgbouncer:
        terminalreporter.write_sep("!", "PgBouncer tests skipped", yellow=True)
        terminalreporter.write_line(
            f"{len(_skipped_for_pgbouncer)} tests that need PgBouncer were SKIPPED: "
            f"{_NO_PGBOUNCER}. (.ci/run installs it and never skips them.)"
        )
