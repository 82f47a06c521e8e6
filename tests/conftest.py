"""Fixtures the test modules share: a live state of the sample keys, thread and profile stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sample_keys import ALL_KEYS

from statekernel import ProfileStore, ThreadStore
from statekernel.lowlevel import KeyRegistry, LiveState
from statekernel.stores import (
    MemoryProfileStore,
    MemoryThreadStore,
    SqliteProfileStore,
    SqliteThreadStore,
)


@pytest.fixture
def registry() -> KeyRegistry:
    return KeyRegistry.of(*ALL_KEYS)


@pytest.fixture
def state(registry: KeyRegistry) -> LiveState:
    return LiveState(registry)


@pytest.fixture(params=["memory", "sqlite"])
async def thread_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ThreadStore]:
    """Each ThreadStore backend in turn, open: memory, and SQLite on a file under tmp_path."""
    made: ThreadStore = (
        MemoryThreadStore()
        if request.param == "memory"
        else SqliteThreadStore(tmp_path / "threads.db")
    )
    async with made:
        yield made


@pytest.fixture(params=["kernel memory", "memory", "sqlite"])
async def thread_store_or_none(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ThreadStore | None]:
    """None (a kernel without a store keeps threads in its own memory), then each
    ThreadStore backend, open."""
    if request.param == "kernel memory":
        yield None
        return
    made: ThreadStore = (
        MemoryThreadStore()
        if request.param == "memory"
        else SqliteThreadStore(tmp_path / "threads.db")
    )
    async with made:
        yield made


@pytest.fixture
async def sqlite_thread_store(tmp_path: Path) -> AsyncIterator[SqliteThreadStore]:
    """A SqliteThreadStore on a fresh file under tmp_path, open."""
    async with SqliteThreadStore(tmp_path / "threads.db") as opened:
        yield opened


@pytest.fixture(params=["memory", "sqlite"])
async def profile_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ProfileStore]:
    """Each ProfileStore backend in turn, open: memory, and SQLite on a file under tmp_path."""
    made: ProfileStore = (
        MemoryProfileStore()
        if request.param == "memory"
        else SqliteProfileStore(tmp_path / "profiles.db")
    )
    async with made:
        yield made
