"""Shared and profile state through ProfileAccess: declarations, scopes, typed reads and writes.

Compare-and-set, and the errors a user meets."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs
import msgspec
import pydantic
import pytest

from statekernel import (
    DecodeFailed,
    InvalidDeclaration,
    ProfileAccess,
    ProfileKey,
    ProfileStore,
    StateScope,
    StateValidationError,
    StoreError,
    UnknownProfileKey,
    UnknownStateKey,
    Vector,
    VersionConflict,
)
from statekernel.lowlevel import Entry, profile_key_info
from statekernel.stores import MemoryProfileStore, SqliteProfileStore


class TeamData(msgspec.Struct):
    goals: list[str] = msgspec.field(default_factory=list)
    lead: str = ""


class TeamContext(ProfileKey[TeamData]):
    key = "team_context"


class Locale(ProfileKey[str]):
    key = "locale"
    default = "en-US"


class Visits(ProfileKey[int]):
    key = "visits"


# -- declarations ---------------------------------------------------------------------------


def test_a_profile_key_binds_a_namespace_to_a_value_type() -> None:
    info = profile_key_info(TeamContext)
    assert (info.name, info.value_type) == ("team_context", TeamData)
    assert info.make_default() == TeamData()
    assert profile_key_info(Locale).make_default() == "en-US"


def test_a_mutable_default_is_fresh_each_time() -> None:
    class Tags(ProfileKey[list[str]]):
        key = "t.tags"
        default_factory = lambda: ["seed"]  # noqa: E731

    first = profile_key_info(Tags).make_default()
    first.append("mutated")
    assert profile_key_info(Tags).make_default() == ["seed"]


def test_a_type_without_zero_value_needs_a_default_when_declared() -> None:
    with pytest.raises(InvalidDeclaration, match=r"no zero value.*default"):

        class Maybe(ProfileKey[int | None]):
            key = "t.maybe"

    class WithDefault(ProfileKey[int | None]):
        key = "t.maybe"
        default = None

    assert profile_key_info(WithDefault).make_default() is None


def test_a_key_class_is_a_token_not_an_instance() -> None:
    with pytest.raises(TypeError, match=r"use the class itself"):
        TeamContext()


def test_generic_bases_and_keyless_classes_are_abstract() -> None:
    T = TypeVar("T")

    class Setting(ProfileKey[T], Generic[T]):
        pass

    class Keyed(Setting[T], Generic[T]):
        key = "t.generic"

    class Theme(Setting[str]):
        key = "t.theme"

    for abstract in (Setting, Keyed):
        with pytest.raises(InvalidDeclaration, match=r"abstract profile key"):
            profile_key_info(abstract)
    assert profile_key_info(Theme).value_type is str
    with pytest.raises(TypeError, match=r"expected a ProfileKey subclass"):
        profile_key_info(str)


def test_a_bad_key_string_fails_at_class_creation() -> None:
    with pytest.raises(InvalidDeclaration, match=r"non-empty string"):

        class Empty(ProfileKey[int]):
            key = ""


# -- scopes ---------------------------------------------------------------------------------


def test_scopes_are_the_agreed_strings() -> None:
    assert StateScope.global_() == "global"
    assert StateScope.parent_thread("p1") == "parent_thread::p1"
    assert StateScope.agent_type("researcher") == "agent_type::researcher"
    assert StateScope.thread("t9") == "thread::t9"
    assert StateScope("tenant::acme") == "tenant::acme"
    assert str(StateScope.thread("t9")) == "thread::t9"
    assert type(str(StateScope.thread("t9"))) is str
    assert repr(StateScope.global_()) == "StateScope('global')"


def test_scopes_equal_and_hash_like_their_strings() -> None:
    records = {StateScope.parent_thread("p1"): "a", "thread::t1": "b"}
    assert records["parent_thread::p1"] == "a"
    assert records[StateScope.thread("t1")] == "b"
    assert StateScope("x") == StateScope("x") != StateScope("y")
    assert len({StateScope("x"), "x"}) == 1


def test_a_missing_parent_id_is_refused_not_shared() -> None:
    for bad in (None, ""):
        with pytest.raises(ValueError, match=r"parent_thread_id None"):
            StateScope.parent_thread(bad)  # type: ignore[arg-type]


# -- typed access ---------------------------------------------------------------------------


async def test_a_missing_record_reads_as_the_default(profile_store: ProfileStore) -> None:
    access = ProfileAccess(profile_store)
    assert await access.read(TeamContext, StateScope.global_()) == TeamData()
    assert await access.read(Locale, "alice") == "en-US"


async def test_values_are_stored_as_builtins_at_key_and_scope(profile_store: ProfileStore) -> None:
    access = ProfileAccess(profile_store)
    scope = StateScope.parent_thread("p1")
    await access.write(TeamContext, scope, TeamData(goals=["ship"], lead="ana"))
    entry = await profile_store.get("team_context", "parent_thread::p1")
    assert entry is not None and entry.value == {"goals": ["ship"], "lead": "ana"}
    assert await access.read(TeamContext, "parent_thread::p1") == TeamData(["ship"], "ana")


async def test_profile_state_is_keyed_by_owner(profile_store: ProfileStore) -> None:
    access = ProfileAccess(profile_store)
    await access.write(Locale, "alice", "fr-FR")
    await access.write(Locale, "system", "de-DE")
    assert await access.read(Locale, "alice") == "fr-FR"
    assert await access.read(Locale, "bob") == "en-US"
    await access.delete(Locale, "alice")
    await access.delete(Locale, "alice")
    assert await access.read(Locale, "alice") == "en-US"
    assert await access.read(Locale, "system") == "de-DE"


async def test_agents_under_one_parent_share_a_record_and_others_do_not(tmp_path: Path) -> None:
    """Three agents in three threads, each with its own store handle on one file."""
    path = tmp_path / "team.db"
    async with (
        SqliteProfileStore(path) as store_a,
        SqliteProfileStore(path) as store_b,
        SqliteProfileStore(path) as store_c,
    ):
        agent_a, agent_b, agent_c = (ProfileAccess(s) for s in (store_a, store_b, store_c))
        family, stranger = StateScope.parent_thread("p"), StateScope.parent_thread("q")

        def add(goal: str) -> Callable[[TeamData], TeamData]:
            return lambda team: TeamData(goals=[*team.goals, goal], lead=team.lead or goal)

        await agent_a.update(TeamContext, family, add("from thread a"))
        assert (await agent_b.read(TeamContext, family)).goals == ["from thread a"]
        await agent_b.update(TeamContext, family, add("from thread b"))
        seen = await agent_a.read(TeamContext, family)
        assert seen == TeamData(["from thread a", "from thread b"], "from thread a")
        assert await agent_c.read(TeamContext, stranger) == TeamData()
        await agent_c.write(TeamContext, stranger, TeamData(["private to q"]))
        assert (await agent_a.read(TeamContext, family)).goals == seen.goals


@dataclasses.dataclass
class Point:
    x: int
    y: int


@attrs.define
class Badge:
    name: str
    earned: datetime.datetime


class Profile(pydantic.BaseModel):
    nickname: str
    scores: dict[int, float] = {}


VALUES: list[tuple[Any, Any]] = [
    (list[Point], [Point(1, 2), Point(3, 4)]),
    (Badge, Badge("first", datetime.datetime(2024, 5, 1, 12, 30))),
    (Profile, Profile(nickname="al", scores={1: 0.5, 2: 1.0})),
    (dict[int, str], {1: "one", 22: "twenty-two"}),
    (Vector[int], Vector([1, 2, 3])),
    (tuple[str, ...], ("a", "b")),
    (frozenset[int], frozenset({3, 1})),
    (bytes, b"\x00\xffraw"),
]


@pytest.mark.parametrize(("value_type", "value"), VALUES, ids=lambda v: repr(v)[:24])
async def test_every_msgspec_encodable_type_round_trips(
    profile_store: ProfileStore, value_type: Any, value: Any
) -> None:
    class Key(ProfileKey[value_type]):  # type: ignore[valid-type]
        key = "t.value"
        default_factory = lambda: None  # noqa: E731

    access = ProfileAccess(profile_store)
    await access.write(Key, "r", value)
    back = await access.read(Key, "r")
    assert back == value
    assert type(back) is type(value)


async def test_a_value_of_the_wrong_type_is_refused_before_any_write(
    profile_store: ProfileStore,
) -> None:
    access = ProfileAccess(profile_store)
    with pytest.raises(StateValidationError, match=r"'visits'.*must be int, got str") as caught:
        await access.write(Visits, "alice", "3")  # type: ignore[arg-type]
    assert caught.value.key == "visits"
    with pytest.raises(StateValidationError, match=r"team_context.*goals"):
        await access.write(TeamContext, "global", TeamData(goals=[1, 2]))  # type: ignore[list-item]
    with pytest.raises(StateValidationError):
        await access.update(Visits, "alice", lambda n: str(n))  # type: ignore[arg-type, return-value]
    assert await profile_store.list("visits") == []
    assert await profile_store.list("team_context") == []


class Settings(ProfileKey[dict[str, Any]]):
    key = "t.settings"
    default_factory = dict


async def test_a_value_json_cannot_hold_names_the_part_inside_it(
    profile_store: ProfileStore,
) -> None:
    access = ProfileAccess(profile_store)
    with pytest.raises(StateValidationError) as caught:
        await access.write(Settings, "alice", {"ok": 1, "when": [1, object()]})
    message = str(caught.value)
    assert "must be dict[str, Any] holding only JSON-compatible builtins, got dict" in message
    assert "value['when'][1] is <object object at" in message and "of type object" in message
    with pytest.raises(StateValidationError, match=r"value has the key \(1, 2\) \(tuple\)"):
        await profile_store.set("ns", "k", {(1, 2): 3})
    with pytest.raises(StateValidationError, match=r"value\['a'\]\[0\] is \{1j\}, of type set"):
        await profile_store.set("ns", "k", {"a": [{1j}]})
    assert await profile_store.list("t.settings") == [] and await profile_store.list("ns") == []


async def test_a_value_over_the_size_limit_is_refused_before_any_write(
    profile_store: ProfileStore,
) -> None:
    class Note(ProfileKey[str]):
        key = "t.note"

    access = ProfileAccess(profile_store, max_value_bytes=1_024)
    await access.write(Note, "n", "short")
    with pytest.raises(
        StoreError, match=r"above the limit of 1,024.*nothing was written"
    ) as caught:
        await access.write(Note, "n", "x" * 2_000)
    assert caught.value.key == "t.note"
    with pytest.raises(StoreError):
        await access.buffered().write(Note, "n", "x" * 2_000)
    assert (await profile_store.get("t.note", "n")).value == "short"  # type: ignore[union-attr]


async def test_a_record_that_no_longer_decodes_fails_for_that_record_only(
    profile_store: ProfileStore,
) -> None:
    access = ProfileAccess(profile_store)
    await profile_store.set("team_context", "old", {"goals": "not a list"})
    await access.write(TeamContext, "new", TeamData(goals=["ok"]))
    with pytest.raises(DecodeFailed, match=r"'team_context'.*'old'") as caught:
        await access.read(TeamContext, "old")
    assert (caught.value.key, caught.value.record) == ("team_context", "old")
    assert (await access.read(TeamContext, "new")).goals == ["ok"]
    await access.write(TeamContext, "old", TeamData(goals=["migrated"]))
    assert (await access.read(TeamContext, "old")).goals == ["migrated"]


async def test_a_key_the_kernel_did_not_register_is_refused(profile_store: ProfileStore) -> None:
    class Impostor(ProfileKey[int]):
        key = "visits"  # same string, another class

    access = ProfileAccess(profile_store, keys={"team_context": TeamContext, "visits": Visits})
    await access.write(Visits, "a", 1)
    for key in (Locale, Impostor):
        with pytest.raises(UnknownProfileKey, match=r"register_profile_key") as caught:
            await access.read(key, "a")
        assert isinstance(caught.value, UnknownStateKey)
    with pytest.raises(UnknownProfileKey, match=r"Registered profile keys: team_context, visits"):
        await access.write(Locale, "a", "fr")
    assert await profile_store.get("locale", "a") is None


async def test_arguments_of_the_wrong_kind_are_refused(profile_store: ProfileStore) -> None:
    access = ProfileAccess(profile_store)
    with pytest.raises(TypeError, match=r"StateScope or a string"):
        await access.read(Visits, 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"expected a ProfileKey subclass"):
        await access.read(int, "a")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"max_update_attempts"):
        ProfileAccess(profile_store, max_update_attempts=0)


# -- update ---------------------------------------------------------------------------------


async def test_update_never_loses_a_concurrent_increment(profile_store: ProfileStore) -> None:
    access = ProfileAccess(profile_store)
    results = await asyncio.gather(
        *(access.update(Visits, "alice", lambda n: n + 1) for _ in range(100))
    )
    assert sorted(results) == list(range(1, 101))
    assert await access.read(Visits, "alice") == 100


class CasOnlyStore:
    """A ProfileStore without atomic update, yielding to other tasks between calls, so
    that ProfileAccess must fall back on compare-and-set and really meets conflicts."""

    def __init__(self, inner: ProfileStore) -> None:
        self.inner = inner
        self.conflicts = 0
        self.sets = 0

    async def get(self, namespace: str, key: str) -> Entry | None:
        await asyncio.sleep(0)
        return await self.inner.get(namespace, key)

    async def set(
        self, namespace: str, key: str, value: Any, *, expected_version: int | None = None
    ) -> Entry:
        await asyncio.sleep(0)
        self.sets += 1
        try:
            return await self.inner.set(namespace, key, value, expected_version=expected_version)
        except VersionConflict:
            self.conflicts += 1
            raise

    async def delete(self, namespace: str, key: str) -> None:
        await self.inner.delete(namespace, key)

    async def list(self, namespace: str, prefix: str = "") -> list[Entry]:
        return await self.inner.list(namespace, prefix)

    async def clear(self, namespace: str) -> None:
        await self.inner.clear(namespace)

    async def close(self) -> None:
        await self.inner.close()

    async def __aenter__(self) -> CasOnlyStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def test_compare_and_set_retries_until_every_update_lands() -> None:
    cas = CasOnlyStore(MemoryProfileStore())
    access = ProfileAccess(cas)

    async def worker() -> None:
        for _ in range(10):
            await access.update(Visits, "bob", lambda n: n + 1)

    await asyncio.gather(*(worker() for _ in range(6)))
    assert await access.read(Visits, "bob") == 60
    assert cas.conflicts > 0  # the retries were really exercised
    entry = await cas.inner.get("visits", "bob")
    assert entry is not None and entry.version == 60


async def test_update_gives_up_with_version_conflict_after_the_bound() -> None:
    class AlwaysRaced(CasOnlyStore):
        async def set(
            self, namespace: str, key: str, value: Any, *, expected_version: int | None = None
        ) -> Entry:
            self.sets += 1
            await self.inner.set(namespace, key, -1)  # someone else always wins the race
            return await super().set(namespace, key, value, expected_version=expected_version)

    raced = AlwaysRaced(MemoryProfileStore())
    access = ProfileAccess(raced, max_update_attempts=3)
    with pytest.raises(VersionConflict):
        await access.update(Visits, "carol", lambda n: n + 1)
    assert raced.conflicts == 3


async def test_update_passes_the_functions_own_error_through(profile_store: ProfileStore) -> None:
    access = ProfileAccess(profile_store)
    await access.write(Visits, "dan", 1)

    def broken(n: int) -> int:
        raise ZeroDivisionError("boom")

    for target in (access, ProfileAccess(CasOnlyStore(profile_store))):
        with pytest.raises(ZeroDivisionError, match="boom"):
            await target.update(Visits, "dan", broken)
    assert await access.read(Visits, "dan") == 1


async def test_a_failing_foreign_store_surfaces_as_store_error_naming_the_key() -> None:
    class Broken(CasOnlyStore):
        async def get(self, namespace: str, key: str) -> Entry | None:
            raise ConnectionError("backend down")

    access = ProfileAccess(Broken(MemoryProfileStore()))
    with pytest.raises(StoreError, match=r"get of entry 'x'.*backend down") as caught:
        await access.read(Visits, "x")
    assert caught.value.key == "visits"
    assert isinstance(caught.value.cause, ConnectionError)


class Anything(ProfileKey[Any]):
    key = "test.anything"
    default = None


class _Opaque:
    """An object msgspec has no encoding for."""


@pytest.mark.parametrize(
    "value",
    [_Opaque(), {"inner": [_Opaque()]}, "deep"],
    ids=["unencodable", "nested unencodable", "nested past the stack"],
)
async def test_a_value_that_cannot_be_stored_is_refused_naming_the_key(value: Any) -> None:
    if value == "deep":
        value = []
        for _ in range(100_000):
            value = [value]
    store = MemoryProfileStore()
    access = ProfileAccess(store)
    with pytest.raises(
        StateValidationError,
        match=r"'test.anything'.*entry 'alice'|entry 'alice'.*'test.anything'",
    ) as caught:
        await access.write(Anything, "alice", value)
    assert caught.value.key == "test.anything"
    assert await store.get("test.anything", "alice") is None
    assert await access.read(Anything, "alice") is None
