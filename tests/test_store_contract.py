"""The store contract (`statekernel.testing.store_contract`) run against the bundled
backends (memory, SQLite, PostgreSQL) and the stores docs/custom-stores.md builds: every one
behaves the same on every input the contract tries. That page shows its stores as their
files hold them, and names every test of the contract."""

from __future__ import annotations

import ast
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from doc_examples import EXAMPLES, example
from docs_page import python_blocks

from statekernel.lowlevel import JournalEntry
from statekernel.stores import (
    MemoryProfileStore,
    MemoryThreadStore,
    PostgresProfileStore,
    PostgresThreadStore,
    SqliteProfileStore,
    SqliteThreadStore,
)
from statekernel.testing.store_contract import (
    EditRecord,
    ProfileStoreContract,
    ThreadStoreContract,
)

BreakEntry = Callable[[str, str], Awaitable[None]]


class TestMemoryThreadStore(ThreadStoreContract):
    @pytest.fixture
    async def thread_store(self) -> AsyncIterator[MemoryThreadStore]:
        async with MemoryThreadStore() as store:
            yield store

    @pytest.fixture
    def edit_record(self, thread_store: MemoryThreadStore) -> EditRecord:
        async def edit(thread_id: str, revision: int, data: bytes | None) -> None:
            thread = thread_store._threads[thread_id]  # the store's own table
            kept = [entry for entry in thread.records if entry.revision != revision]
            if data is not None:
                kept.append(JournalEntry(revision, data))
            thread.records = sorted(kept, key=lambda entry: entry.revision)

        return edit


class TestSqliteThreadStore(ThreadStoreContract):
    @pytest.fixture
    async def thread_store(self, tmp_path: Path) -> AsyncIterator[SqliteThreadStore]:
        async with SqliteThreadStore(tmp_path / "threads.db") as store:
            yield store

    @pytest.fixture
    def edit_record(self, thread_store: SqliteThreadStore) -> EditRecord:
        async def edit(thread_id: str, revision: int, data: bytes | None) -> None:
            await thread_store.close()  # every write is in the file
            with sqlite3.connect(thread_store.path) as raw:
                raw.execute(
                    "DELETE FROM thread_records WHERE thread_id = ? AND revision = ?",
                    (thread_id, revision),
                )
                if data is not None:
                    raw.execute(
                        "INSERT INTO thread_records (thread_id, revision, record) VALUES (?, ?, ?)",
                        (thread_id, revision, data),
                    )

        return edit


class TestPostgresThreadStore(ThreadStoreContract):
    @pytest.fixture
    async def thread_store(self, postgres_dsn: str) -> AsyncIterator[PostgresThreadStore]:
        async with PostgresThreadStore(postgres_dsn) as store:
            yield store

    @pytest.fixture
    def edit_record(self, postgres_dsn: str) -> EditRecord:
        async def edit(thread_id: str, revision: int, data: bytes | None) -> None:
            import asyncpg

            raw = await asyncpg.connect(postgres_dsn)
            try:
                await raw.execute(
                    "DELETE FROM statekernel_thread_records WHERE thread_id = $1 AND revision = $2",
                    thread_id,
                    revision,
                )
                if data is not None:
                    await raw.execute(
                        "INSERT INTO statekernel_thread_records (thread_id, revision, record) "
                        "VALUES ($1, $2, $3)",
                        thread_id,
                        revision,
                        data,
                    )
            finally:
                await raw.close()

        return edit


class TestMemoryProfileStore(ProfileStoreContract):
    @pytest.fixture
    async def profile_store(self) -> AsyncIterator[MemoryProfileStore]:
        async with MemoryProfileStore() as store:
            yield store

    @pytest.fixture
    def break_entry(self, profile_store: MemoryProfileStore) -> BreakEntry:
        async def corrupt(namespace: str, key: str) -> None:
            entry = profile_store._records[namespace][key]  # the store's own table
            profile_store._records[namespace][key] = type(entry)(
                b"{not json", entry.version, entry.updated_at
            )

        return corrupt


class TestSqliteProfileStore(ProfileStoreContract):
    @pytest.fixture
    async def profile_store(self, tmp_path: Path) -> AsyncIterator[SqliteProfileStore]:
        async with SqliteProfileStore(tmp_path / "profiles.db") as store:
            yield store

    @pytest.fixture
    def break_entry(self, profile_store: SqliteProfileStore) -> BreakEntry:
        async def corrupt(namespace: str, key: str) -> None:
            await profile_store.close()  # every write is in the file
            with sqlite3.connect(profile_store.path) as raw:
                raw.execute(
                    "UPDATE profile_records SET value = '{not json' "
                    "WHERE namespace = ? AND key = ?",
                    (namespace, key),
                )

        return corrupt


class TestPostgresProfileStore(ProfileStoreContract):
    @pytest.fixture
    async def profile_store(self, postgres_dsn: str) -> AsyncIterator[PostgresProfileStore]:
        async with PostgresProfileStore(postgres_dsn) as store:
            yield store

    @pytest.fixture
    def break_entry(self, postgres_dsn: str) -> BreakEntry:
        async def corrupt(namespace: str, key: str) -> None:
            import asyncpg

            raw = await asyncpg.connect(postgres_dsn)
            try:
                await raw.execute(
                    "UPDATE statekernel_profile_entries SET value = '{not json' "
                    "WHERE namespace = $1 AND key = $2",
                    namespace,
                    key,
                )
            finally:
                await raw.close()

        return corrupt


class TestDictProfileStore(ProfileStoreContract):
    """The ProfileStore of docs/custom-stores.md (docs/examples/dict_profile_store.py)."""

    @pytest.fixture
    async def profile_store(self) -> AsyncIterator[Any]:
        async with example("dict_profile_store").DictProfileStore() as store:
            yield store

    @pytest.fixture
    def break_entry(self, profile_store: Any) -> BreakEntry:
        async def corrupt(namespace: str, key: str) -> None:
            _, version, updated_at = profile_store.rows[namespace][key]
            profile_store.rows[namespace][key] = (b"{not json", version, updated_at)

        return corrupt


class TestDictThreadStore(ThreadStoreContract):
    """The ThreadStore of docs/custom-stores.md (docs/examples/dict_thread_store.py)."""

    @pytest.fixture
    async def thread_store(self) -> AsyncIterator[Any]:
        async with example("dict_thread_store").DictThreadStore() as store:
            yield store

    @pytest.fixture
    def edit_record(self, thread_store: Any) -> EditRecord:
        async def edit(thread_id: str, revision: int, data: bytes | None) -> None:
            records = thread_store.threads_by_id[thread_id].records
            if data is None:
                del records[revision]
            else:
                records[revision] = data

        return edit


PAGE = EXAMPLES.parent / "custom-stores.md"


@pytest.mark.parametrize("name", ["dict_profile_store", "dict_thread_store"])
def test_the_store_page_shows_each_example_store_as_its_file_holds_it(name: str) -> None:
    """Every statement of the file (its docstring aside) is in one of the page's blocks, as
    it is: the store the page walks through is the one the contract runs against."""
    source = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8")
    blocks = [code for _, code in python_blocks(PAGE.read_text(encoding="utf-8"))]
    statements = ast.parse(source).body[1:]
    missing = [
        segment.splitlines()[0]
        for node in statements
        if (segment := ast.get_source_segment(source, node)) is not None
        and not any(segment in block for block in blocks)
    ]
    assert not missing, f"docs/custom-stores.md does not show these of {name}.py: {missing}"


def test_the_store_page_lists_every_test_of_the_contract() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for contract in (ProfileStoreContract, ThreadStoreContract):
        tests = [name for name in vars(contract) if name.startswith("test_")]
        assert tests
        unlisted = [name for name in tests if f"| `{name}` |" not in page]
        assert not unlisted, f"docs/custom-stores.md lists no {unlisted} of {contract.__name__}"
