"""The ProfileStore contract, held by both backends.

Versions, compare-and-set, literal prefixes, hostile input, decode failures and the size
limit."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekernel import (
    DecodeFailed,
    InvalidName,
    NameNotAString,
    ProfileAccess,
    ProfileKey,
    ProfileStore,
    StateError,
    StateScope,
    StateValidationError,
    StoreError,
    VersionConflict,
)
from statekernel.lowlevel import Entry, SupportsAtomicUpdate
from statekernel.stores import MemoryProfileStore, SqliteProfileStore


def test_both_backends_implement_the_protocols() -> None:
    for made in (MemoryProfileStore(), SqliteProfileStore(":memory:")):
        assert isinstance(made, ProfileStore)
        assert isinstance(made, SupportsAtomicUpdate)


async def test_versions_start_at_one_and_grow_by_one_per_write(profile_store: ProfileStore) -> None:
    assert await profile_store.get("ns", "k") is None
    first = await profile_store.set("ns", "k", {"a": 1})
    second = await profile_store.set("ns", "k", {"a": 2})
    assert (first.version, second.version) == (1, 2)
    entry = await profile_store.get("ns", "k")
    assert entry is not None
    assert (entry.namespace, entry.key, entry.value, entry.version) == ("ns", "k", {"a": 2}, 2)
    assert entry.updated_at >= first.updated_at > 0


async def test_expected_version_zero_means_must_not_exist(profile_store: ProfileStore) -> None:
    created = await profile_store.set("ns", "k", "first", expected_version=0)
    assert created.version == 1
    with pytest.raises(VersionConflict) as caught:
        await profile_store.set("ns", "k", "second", expected_version=0)
    assert (caught.value.expected, caught.value.actual) == (0, 1)
    assert (await profile_store.get("ns", "k")).value == "first"  # type: ignore[union-attr]


async def test_compare_and_set_writes_only_on_the_expected_version(
    profile_store: ProfileStore,
) -> None:
    await profile_store.set("ns", "k", 1)
    await profile_store.set("ns", "k", 2)
    assert (await profile_store.set("ns", "k", 3, expected_version=2)).version == 3
    with pytest.raises(VersionConflict, match=r"expected version 2 but found version 3"):
        await profile_store.set("ns", "k", 99, expected_version=2)
    with pytest.raises(VersionConflict) as caught:
        await profile_store.set("ns", "absent", 1, expected_version=4)
    assert caught.value.actual is None
    assert (await profile_store.get("ns", "k")).value == 3  # type: ignore[union-attr]
    assert await profile_store.get("ns", "absent") is None


async def test_without_expected_version_the_last_write_wins(profile_store: ProfileStore) -> None:
    await asyncio.gather(*(profile_store.set("ns", "k", i) for i in range(20)))
    entry = await profile_store.get("ns", "k")
    assert entry is not None and (entry.value, entry.version) == (19, 20)


async def test_one_failed_compare_and_set_fails_only_itself(profile_store: ProfileStore) -> None:
    """Concurrent sets share transactions in SQLite; a conflict must stay with its set."""
    for i in range(32):
        await profile_store.set("ns", f"k{i}", 0)
    outcomes = await asyncio.gather(
        *(profile_store.set("ns", f"k{i}", 1, expected_version=1 + i % 2) for i in range(32)),
        return_exceptions=True,
    )
    for i, outcome in enumerate(outcomes):
        if i % 2:
            assert isinstance(outcome, VersionConflict)
        else:
            assert not isinstance(outcome, BaseException) and outcome.version == 2
    stored = {entry.key: entry.value for entry in await profile_store.list("ns")}
    assert stored == {f"k{i}": 1 if i % 2 == 0 else 0 for i in range(32)}


async def test_concurrent_reads_each_get_their_own_record(profile_store: ProfileStore) -> None:
    for i in range(0, 40, 2):
        await profile_store.set(f"ns{i % 3}", f"k{i}", {"i": i})
    entries = await asyncio.gather(*(profile_store.get(f"ns{i % 3}", f"k{i}") for i in range(40)))
    for i, entry in enumerate(entries):
        if i % 2:
            assert entry is None
        else:
            assert entry is not None
            assert (entry.namespace, entry.key, entry.value) == (f"ns{i % 3}", f"k{i}", {"i": i})


async def test_a_set_that_fails_fails_alone_in_its_batch(tmp_path: Path) -> None:
    async with SqliteProfileStore(tmp_path / "batch.db") as made:
        await made.set("ns", "warm", 0)
        keys = [f"k{i}" for i in range(10)]
        outcomes = await asyncio.gather(
            *(
                made.set("ns", key, i, expected_version=5 if i == 4 else None)
                for i, key in enumerate(keys)
            ),
            return_exceptions=True,
        )
        failure = outcomes.pop(4)
        assert isinstance(failure, VersionConflict) and failure.key == "k4"
        assert all(isinstance(outcome, Entry) for outcome in outcomes)
        stored = {entry.key: entry.value for entry in await made.list("ns", "k")}
        assert stored == {key: i for i, key in enumerate(keys) if i != 4}


async def _cas_until_written(store: ProfileStore, key: str, value: Any) -> tuple[int, Entry]:
    """Read, then compare-and-set, until the write lands: the version read and the entry."""
    while True:
        entry = await store.get("ns", key)
        read = 0 if entry is None else entry.version
        try:
            return read, await store.set("ns", key, value, expected_version=read)
        except VersionConflict as conflict:
            assert (conflict.key, conflict.expected) == (key, read)
            assert conflict.actual is not None and conflict.actual > read


async def test_concurrent_compare_and_sets_on_many_keys_all_land(
    profile_store: ProfileStore,
) -> None:
    """Ten writers, each read-then-compare-and-set on ten keys in turn (a mailbox's posts):
    every write lands once, at the version after the one it read."""

    async def writer(task: int) -> list[tuple[int, Entry]]:
        return [
            await _cas_until_written(profile_store, f"k{(task + i) % 10}", [task, i])
            for i in range(30)
        ]

    written = [landed for each in await asyncio.gather(*map(writer, range(10))) for landed in each]
    assert len(written) == 300
    assert all(entry.version == read + 1 for read, entry in written)
    for k in range(10):
        versions = sorted(entry.version for _, entry in written if entry.key == f"k{k}")
        assert versions == list(range(1, 31))
        stored = await profile_store.get("ns", f"k{k}")
        assert stored is not None and stored.version == 30
        last = next(entry for _, entry in written if (entry.key, entry.version) == (f"k{k}", 30))
        assert stored.value == last.value


async def test_concurrent_compare_and_sets_on_one_key_have_one_winner_per_version(
    profile_store: ProfileStore,
) -> None:
    """Writers racing on one entry, with plain sets among them: each version is written by
    exactly one set, the losers see `VersionConflict` and retry, and nothing is lost."""

    async def casser(task: int) -> list[Entry]:
        return [(await _cas_until_written(profile_store, "k", [task, i]))[1] for i in range(20)]

    async def plain() -> list[Entry]:
        landed = []
        for i in range(20):
            landed.append(await profile_store.set("ns", "k", ["plain", i]))
            await asyncio.sleep(0)
        return landed

    results = await asyncio.gather(*map(casser, range(8)), plain())
    written = [entry for each in results for entry in each]
    assert sorted(entry.version for entry in written) == list(range(1, 181))
    stored = await profile_store.get("ns", "k")
    assert stored is not None and stored.version == 180
    assert stored.value == next(entry.value for entry in written if entry.version == 180)


async def test_writes_of_one_entry_at_once_apply_in_call_order(
    profile_store: ProfileStore,
) -> None:
    """Sets started together are applied in the order they were called: a compare-and-set
    sees the version the set before it made, and one that loses writes nothing."""
    await profile_store.set("ns", "k", "start")  # version 1
    outcomes = await asyncio.gather(
        profile_store.set("ns", "k", "a", expected_version=1),  # -> 2
        profile_store.set("ns", "k", "b", expected_version=2),  # -> 3, sees the first
        profile_store.set("ns", "k", "lost", expected_version=2),  # loses: it is at 3
        profile_store.set("ns", "k", "c"),  # -> 4
        profile_store.set("ns", "k", "d", expected_version=4),  # -> 5
        profile_store.set("ns", "other", "x", expected_version=0),  # -> 1, its own entry
        return_exceptions=True,
    )
    lost = outcomes.pop(2)
    assert isinstance(lost, VersionConflict)
    assert (lost.namespace, lost.key, lost.expected, lost.actual) == ("ns", "k", 2, 3)
    assert str(lost) == str(VersionConflict("ns", "k", 2, 3))
    assert [(e.key, e.value, e.version) for e in outcomes] == [  # type: ignore[union-attr]
        ("k", "a", 2),
        ("k", "b", 3),
        ("k", "c", 4),
        ("k", "d", 5),
        ("other", "x", 1),
    ]
    stored = await profile_store.get("ns", "k")
    assert stored is not None and (stored.value, stored.version) == ("d", 5)


async def test_callers_written_together_each_get_their_own_result(
    profile_store: ProfileStore,
) -> None:
    """Compare-and-sets in two namespaces started together: each caller gets its own
    entry, or its own `VersionConflict` naming its entry and the version found."""
    for i in range(24):
        if i % 4 in (0, 1):
            await profile_store.set(f"ns{i % 2}", f"k{i}", "old")
    expected = {0: 1, 1: 0, 2: 0, 3: 3}  # by i % 4: wins, loses, wins, loses
    outcomes = await asyncio.gather(
        *(
            profile_store.set(f"ns{i % 2}", f"k{i}", {"i": i}, expected_version=expected[i % 4])
            for i in range(24)
        ),
        return_exceptions=True,
    )
    for i, outcome in enumerate(outcomes):
        record = (f"ns{i % 2}", f"k{i}")
        if i % 4 in (0, 2):
            assert isinstance(outcome, Entry)
            assert (outcome.namespace, outcome.key, outcome.value) == (*record, {"i": i})
            assert outcome.version == (2 if i % 4 == 0 else 1)
        else:
            assert isinstance(outcome, VersionConflict)
            assert (outcome.namespace, outcome.key, outcome.expected) == (*record, expected[i % 4])
            assert outcome.actual == (1 if i % 4 == 1 else None)
        stored = await profile_store.get(*record)
        assert stored is not None or i % 4 == 3
        if stored is not None:
            assert stored.value == ({"i": i} if i % 4 in (0, 2) else "old")


async def test_a_name_no_store_can_keep_is_refused_alike_by_every_store(
    profile_store: ProfileStore,
) -> None:
    for namespace, key in (("ns", "lone surrogate \ud800"), ("\udfff", "k")):
        with pytest.raises(ValueError, match="lone surrogate at index"):
            await profile_store.set(namespace, key, 1)
        with pytest.raises(ValueError, match="not valid Unicode text"):
            await profile_store.get(namespace, key)
    with pytest.raises(TypeError, match="must be a string"):
        await profile_store.get("ns", 123)  # type: ignore[arg-type]
    assert await profile_store.list("ns") == []


async def test_a_refused_name_is_a_state_error_saying_what_where_and_how_to_fix(
    profile_store: ProfileStore,
) -> None:
    """Like every error the kernel means to tell, and still the ValueError or TypeError
    that Python's own argument errors are, for code that catches those."""
    with pytest.raises(InvalidName) as surrogate:
        await profile_store.set("ns", "ab\ud800", 1)
    assert isinstance(surrogate.value, StateError) and isinstance(surrogate.value, ValueError)
    assert (surrogate.value.label, surrogate.value.name) == ("profile store key", "ab\ud800")
    assert surrogate.value.index == 2
    assert str(surrogate.value) == (
        "profile store key 'ab\\ud800' is not valid Unicode text: it holds a lone surrogate "
        "at index 2, which no store can keep. Use text that encodes as UTF-8."
    )
    with pytest.raises(InvalidName) as nul:
        await profile_store.get("n\x00s", "k")
    assert (nul.value.label, nul.value.index) == ("profile store namespace", 1)
    assert str(nul.value) == (
        "profile store namespace 'n\\x00s' holds a NUL character at index 1, which not every "
        "store can keep. Leave it out of names."
    )
    with pytest.raises(NameNotAString) as not_text:
        await profile_store.get(b"ns", "k")  # type: ignore[arg-type]
    assert isinstance(not_text.value, StateError) and isinstance(not_text.value, TypeError)
    assert (not_text.value.label, not_text.value.name) == ("profile store namespace", b"ns")
    assert str(not_text.value) == (
        "profile store namespace must be a string, got bytes b'ns'. Pass the profile store "
        "namespace as a str."
    )
    assert await profile_store.list("ns") == []


async def test_delete_removes_and_is_a_no_op_when_absent(profile_store: ProfileStore) -> None:
    await profile_store.set("ns", "k", 1)
    await profile_store.delete("ns", "k")
    await profile_store.delete("ns", "k")
    await profile_store.delete("other", "never")
    assert await profile_store.get("ns", "k") is None
    assert (await profile_store.set("ns", "k", 2, expected_version=0)).version == 1


async def test_list_is_sorted_by_key_and_filtered_by_prefix(profile_store: ProfileStore) -> None:
    for key in ["b", "a/2", "a/10", "a/1", "ab", "A"]:
        await profile_store.set("ns", key, key.upper())
    await profile_store.set("elsewhere", "a/3", 0)
    assert [e.key for e in await profile_store.list("ns")] == ["A", "a/1", "a/10", "a/2", "ab", "b"]
    listed = await profile_store.list("ns", "a/")
    assert [(e.key, e.value, e.version) for e in listed] == [
        ("a/1", "A/1", 1),
        ("a/10", "A/10", 1),
        ("a/2", "A/2", 1),
    ]
    assert await profile_store.list("ns", "zzz") == []
    assert await profile_store.list("missing") == []


async def test_list_prefix_is_literal_not_a_pattern(profile_store: ProfileStore) -> None:
    keys = ["a%b", "a%%", "a_b", "axb", "a", "ab", "a\\b", "b%"]
    for key in keys:
        await profile_store.set("ns", key, key)
    assert [e.key for e in await profile_store.list("ns", "a%")] == ["a%%", "a%b"]
    assert [e.key for e in await profile_store.list("ns", "a_")] == ["a_b"]
    assert [e.key for e in await profile_store.list("ns", "a\\")] == ["a\\b"]
    assert [e.key for e in await profile_store.list("ns", "%")] == []


async def test_clear_empties_one_namespace_only(profile_store: ProfileStore) -> None:
    await profile_store.set("ns", "a", 1)
    await profile_store.set("ns", "b", 2)
    await profile_store.set("keep", "a", 3)
    await profile_store.clear("ns")
    assert await profile_store.list("ns") == []
    assert [e.value for e in await profile_store.list("keep")] == [3]


HOSTILE = [
    "it's",
    'say "hi"',
    "a; DROP TABLE profile_records; --",
    "'); DELETE FROM profile_records; --",
    "-- comment",
    "%_*?[]\\",
    "Ünïcødé ✓ 漢字 עברית 🧪",
    "e\u0301\u200b\ufeff",
    "\U0010ffff",
    "x" * 10_240,
]


async def test_hostile_names_and_values_are_stored_verbatim_and_harm_nothing(
    profile_store: ProfileStore,
) -> None:
    await profile_store.set("bystander", "safe", {"untouched": True})
    for namespace in HOSTILE[:4]:
        for key in HOSTILE:
            value = {"key": key, "list": [key, namespace], key[:50]: namespace}
            await profile_store.set(namespace, key, value)
    for namespace in HOSTILE[:4]:
        for key in HOSTILE:
            entry = await profile_store.get(namespace, key)
            assert entry is not None
            assert entry.value == {"key": key, "list": [key, namespace], key[:50]: namespace}
        listed = await profile_store.list(namespace)
        assert [e.key for e in listed] == sorted(HOSTILE)
    assert (await profile_store.get("bystander", "safe")).value == {"untouched": True}  # type: ignore[union-attr]
    for prefix in ["'", "a;", "%", "_", "\\", "Ü", "x" * 10_000]:
        found = [e.key for e in await profile_store.list(HOSTILE[2], prefix)]
        assert found == sorted(k for k in HOSTILE if k.startswith(prefix))


async def test_a_scope_and_its_plain_string_name_the_same_record(
    profile_store: ProfileStore,
) -> None:
    await profile_store.set("team", StateScope.parent_thread("p1"), "shared")
    entry = await profile_store.get("team", "parent_thread::p1")
    assert entry is not None and entry.value == "shared"
    assert type(entry.key) is str


async def test_values_must_be_json_compatible(profile_store: ProfileStore) -> None:
    with pytest.raises(StateValidationError, match=r"JSON-compatible"):
        await profile_store.set("ns", "k", {"when": object()})
    assert await profile_store.get("ns", "k") is None


async def test_a_value_over_the_size_limit_is_refused_before_any_write(tmp_path: Path) -> None:
    for made in (
        MemoryProfileStore(max_value_bytes=1_000),
        SqliteProfileStore(tmp_path / "small.db", max_value_bytes=1_000),
    ):
        async with made:
            await made.set("ns", "k", "small")
            with pytest.raises(StoreError, match=r"above the store's limit of 1,000") as caught:
                await made.set("ns", "k", "y" * 2_000)
            assert caught.value.key == "ns"
            with pytest.raises(StoreError):
                await made.update("ns", "k", lambda entry: "y" * 2_000)  # type: ignore[attr-defined]
            entry = await made.get("ns", "k")
            assert entry is not None and (entry.value, entry.version) == ("small", 1)


async def test_the_default_limit_is_16_mib(tmp_path: Path) -> None:
    async with SqliteProfileStore(tmp_path / "big.db") as made:
        with pytest.raises(StoreError, match=r"16,777,216"):
            await made.set("ns", "k", "z" * (16 * 1024 * 1024))
        assert await made.get("ns", "k") is None


async def test_atomic_update_sees_the_current_entry(profile_store: ProfileStore) -> None:
    updating: Any = profile_store
    created = await updating.update("ns", "n", lambda entry: 1 if entry is None else -1)
    assert (created.value, created.version) == (1, 1)
    await asyncio.gather(
        *(updating.update("ns", "n", lambda entry: entry.value + 1) for _ in range(50))
    )
    entry = await profile_store.get("ns", "n")
    assert entry is not None and (entry.value, entry.version) == (51, 51)


async def test_an_update_function_that_raises_writes_nothing(profile_store: ProfileStore) -> None:
    updating: Any = profile_store
    await profile_store.set("ns", "n", 1)

    def refuse(entry: Any) -> Any:
        raise LookupError("no thanks")

    with pytest.raises(LookupError, match="no thanks"):
        await updating.update("ns", "n", refuse)
    entry = await profile_store.get("ns", "n")
    assert entry is not None and (entry.value, entry.version) == (1, 1)


async def test_a_row_that_is_no_longer_json_fails_for_that_record_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "corrupt.db"
    async with SqliteProfileStore(path) as made:
        await made.set("ns", "bad", {"ok": True})
        await made.set("ns", "good", {"ok": True})
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE profile_records SET value = '{not json' WHERE key = 'bad'")
    async with SqliteProfileStore(path) as made:
        with pytest.raises(DecodeFailed) as caught:
            await made.get("ns", "bad")
        assert (caught.value.key, caught.value.record) == ("ns", "bad")
        assert (await made.get("ns", "good")).value == {"ok": True}  # type: ignore[union-attr]
        listed = await made.list("ns")  # the bad row costs only itself, and says so
        assert [entry.key for entry in listed] == ["good"]
        assert "left out an entry" in caplog.text and "'bad'" in caplog.text
        await made.set("ns", "bad", "repaired")
        assert (await made.get("ns", "bad")).value == "repaired"  # type: ignore[union-attr]


async def test_sqlite_file_records_its_schema_version_and_refuses_a_newer_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "schema.db"
    async with SqliteProfileStore(path) as made:
        await made.set("ns", "k", 1)
    with sqlite3.connect(path) as raw:
        (version,) = raw.execute(
            "SELECT version FROM statekernel_schema WHERE component = 'profile_store'"
        ).fetchone()
        assert version == 1
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        raw.execute("UPDATE statekernel_schema SET version = 99")
    async with SqliteProfileStore(path) as made:
        with pytest.raises(StoreError, match=r"schema version 99.*Upgrade statekernel"):
            await made.get("ns", "k")


async def test_a_store_reopens_after_close(tmp_path: Path) -> None:
    made = SqliteProfileStore(tmp_path / "reopen.db")
    await made.set("ns", "k", 1)
    await made.close()
    await made.close()
    assert (await made.get("ns", "k")).value == 1  # type: ignore[union-attr]
    await made.close()


async def test_an_unopenable_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "a file").write_text("not a folder")
    async with SqliteProfileStore(tmp_path / "a file" / "dir.db") as made:
        with pytest.raises(StoreError, match=r"open of SQLite file"):
            await made.get("ns", "k")


_ALPHABET = st.sampled_from(["a", "b", "%", "_", "\\", "'", "\U0010ffff", "\ud7ff", "\ue000"])
_NAMES = st.text(_ALPHABET, max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.sets(_NAMES, max_size=12), prefix=_NAMES)
def test_list_agrees_with_sorted_startswith(keys: set[str], prefix: str) -> None:
    expected = sorted(k for k in keys if k.startswith(prefix))

    async def check() -> None:
        for made in (MemoryProfileStore(), SqliteProfileStore(":memory:")):
            async with made:
                for key in keys:
                    await made.set("ns", key, key)
                assert [e.key for e in await made.list("ns", prefix)] == expected
                assert [e.key for e in await made.list("ns")] == sorted(keys)

    asyncio.run(check())


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


async def test_values_nested_past_the_stack_are_refused_naming_the_entry(
    profile_store: ProfileStore,
) -> None:
    with pytest.raises(StateValidationError, match=r"entry 'deep'") as caught:
        await profile_store.set("ns", "deep", _nested(100_000))
    assert caught.value.key == "ns"
    assert await profile_store.get("ns", "deep") is None


async def test_a_row_nested_past_the_stack_fails_for_that_record_only(tmp_path: Path) -> None:
    path = tmp_path / "deep.db"
    async with SqliteProfileStore(path) as made:
        await made.set("ns", "deep", 1)
        await made.set("ns", "fine", 2)
    with sqlite3.connect(path) as raw:
        raw.execute(
            "UPDATE profile_records SET value = ? WHERE key = 'deep'",
            ("[" * 100_000 + "]" * 100_000,),
        )
    async with SqliteProfileStore(path) as made:
        with pytest.raises(DecodeFailed) as caught:
            await made.get("ns", "deep")
        assert (caught.value.key, caught.value.record) == ("ns", "deep")
        assert (await made.get("ns", "fine")).value == 2  # type: ignore[union-attr]


# -- the size limit is exact ---------------------------------------------------------------


class Blob(ProfileKey[str]):
    key = "promise.blob"


async def test_a_profile_value_of_exactly_the_limit_is_accepted_one_byte_more_refused(
    tmp_path: Path,
) -> None:
    limit = 1_000
    at_limit = "y" * (limit - 2)  # JSON adds the two quotes
    for store in (
        MemoryProfileStore(max_value_bytes=limit),
        SqliteProfileStore(tmp_path / "p.db", max_value_bytes=limit),
    ):
        async with store:
            entry = await store.set("ns", "k", at_limit)
            assert entry.version == 1
            with pytest.raises(StoreError, match="1,001 bytes"):
                await store.set("ns", "k", at_limit + "y")
            stored = await store.get("ns", "k")
            assert stored is not None and (stored.value, stored.version) == (at_limit, 1)

    access = ProfileAccess(MemoryProfileStore(), max_value_bytes=limit)
    await access.write(Blob, "owner", at_limit)
    with pytest.raises(StoreError, match="1,001 bytes"):
        await access.write(Blob, "owner", at_limit + "y")
    assert await access.read(Blob, "owner") == at_limit
