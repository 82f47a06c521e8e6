"""Buffered and read-only ProfileAccess: what hooks and tool gates get as `ctx.profile`.

Writes made inside a hook travel with its command: recorded, read back by the hook itself,
applied once after the command commits, or dropped if the hook is deferred or fails."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from statekernel import (
    ProfileAccess,
    ProfileKey,
    ProfileStore,
    StateError,
    StateScope,
    StateValidationError,
    StoreError,
    UnknownProfileKey,
)
from statekernel.lowlevel import BufferedProfileAccess, Entry, ReadOnlyProfileAccess
from statekernel.stores import MemoryProfileStore


class Visits(ProfileKey[int]):
    key = "visits"


class Notes(ProfileKey[list[str]]):
    key = "notes"


class Doc(msgspec.Struct, frozen=True):
    title: str = ""


class Draft(ProfileKey[Doc]):
    key = "draft"


@pytest.fixture
def access(profile_store: ProfileStore) -> ProfileAccess:
    return ProfileAccess(profile_store, keys={"visits": Visits, "notes": Notes, "draft": Draft})


async def test_views_are_profile_accesses(access: ProfileAccess) -> None:
    """Hook authors type ctx.profile as ProfileAccess whichever view the engine hands in."""
    assert isinstance(access.buffered(), ProfileAccess)
    assert isinstance(access.buffered(), BufferedProfileAccess)
    assert isinstance(access.read_only(), ProfileAccess)
    assert isinstance(access.read_only(), ReadOnlyProfileAccess)
    assert access.buffered().store is access.store


async def test_buffered_writes_reach_nobody_until_applied(
    access: ProfileAccess, profile_store: ProfileStore
) -> None:
    buffer = access.buffered()
    assert buffer.is_empty()
    await buffer.write(Visits, "alice", 5)
    await buffer.write(Draft, StateScope.thread("t1"), Doc("v1"))
    assert not buffer.is_empty()
    assert await profile_store.get("visits", "alice") is None
    assert await access.read(Visits, "alice") == 0
    await buffer.apply()
    assert buffer.is_empty()
    assert await access.read(Visits, "alice") == 5
    assert await access.read(Draft, "thread::t1") == Doc("v1")


async def test_a_hook_reads_its_own_buffered_writes(access: ProfileAccess) -> None:
    await access.write(Visits, "alice", 1)
    await access.write(Notes, "alice", ["kept"])
    buffer = access.buffered()
    assert await buffer.read(Visits, "alice") == 1  # nothing buffered yet: the store
    await buffer.write(Visits, "alice", 7)
    await buffer.delete(Notes, "alice")
    assert await buffer.read(Visits, "alice") == 7
    assert await buffer.read(Notes, "alice") == []  # deleted: the default
    assert await buffer.read(Visits, "bob") == 0
    other_hook = access.buffered()
    assert await other_hook.read(Visits, "alice") == 1  # buffers are private to their hook


async def test_buffered_reads_are_copies(access: ProfileAccess) -> None:
    buffer = access.buffered()
    notes = ["a"]
    await buffer.write(Notes, "n", notes)
    notes.append("mutated after write")
    first = await buffer.read(Notes, "n")
    first.append("mutated after read")
    assert await buffer.read(Notes, "n") == ["a"]
    await buffer.apply()
    assert await access.read(Notes, "n") == ["a"]


async def test_update_is_provisional_in_the_hook_and_recomputed_at_apply(
    access: ProfileAccess,
) -> None:
    await access.write(Visits, "alice", 5)
    buffer = access.buffered()
    assert await buffer.update(Visits, "alice", lambda n: n + 1) == 6
    assert await buffer.read(Visits, "alice") == 6
    assert await buffer.update(Visits, "alice", lambda n: n * 10) == 60
    await access.write(Visits, "alice", 100)  # another agent writes meanwhile
    await buffer.apply()
    assert await access.read(Visits, "alice") == (100 + 1) * 10


async def test_apply_sends_operations_in_the_order_they_were_made(
    access: ProfileAccess, profile_store: ProfileStore
) -> None:
    await access.write(Notes, "gone", ["old"])
    buffer = access.buffered()
    await buffer.write(Visits, "a", 1)
    await buffer.write(Visits, "a", 2)
    await buffer.update(Visits, "a", lambda n: n + 40)
    await buffer.delete(Notes, "gone")
    await buffer.write(Notes, "gone", ["reborn"])
    await buffer.delete(Visits, "never-existed")
    await buffer.apply()
    assert await access.read(Visits, "a") == 42
    visits = await profile_store.get("visits", "a")
    assert visits is not None and visits.version == 3  # three writes, in order
    notes = await profile_store.get("notes", "gone")
    assert notes is not None and (notes.value, notes.version) == (["reborn"], 1)


async def test_a_discarded_buffer_writes_nothing_and_its_rerun_writes_once(
    access: ProfileAccess,
) -> None:
    """The engine's deferred-hook path: discard the first run's buffer, re-run the hook on
    a new one, apply that. However often that happens, the shared write lands once."""

    async def hook(profile: ProfileAccess) -> None:
        await profile.update(Visits, "team", lambda n: n + 1)
        await profile.update(Notes, "team", lambda notes: [*notes, "hello"])

    for _ in range(3):
        deferred = access.buffered()
        await hook(deferred)
        deferred.discard()
        assert deferred.is_empty()
        await deferred.apply()  # nothing left to apply
    rerun = access.buffered()
    await hook(rerun)
    await rerun.apply()
    await rerun.apply()  # applying twice never writes twice
    assert await access.read(Visits, "team") == 1
    assert await access.read(Notes, "team") == ["hello"]


async def test_buffered_writes_are_checked_when_made(access: ProfileAccess) -> None:
    buffer = access.buffered()
    with pytest.raises(StateValidationError, match=r"'visits'"):
        await buffer.write(Visits, "a", "many")  # type: ignore[arg-type]

    class Unregistered(ProfileKey[int]):
        key = "unregistered"

    with pytest.raises(UnknownProfileKey):
        await buffer.write(Unregistered, "a", 1)
    assert buffer.is_empty()


class FlakyStore(MemoryProfileStore):
    """Fails every write to one record, as a broken disk or network would."""

    def __init__(self, failing_key: str) -> None:
        super().__init__()
        self.failing_key = failing_key

    async def set(
        self, namespace: str, key: str, value: Any, *, expected_version: int | None = None
    ) -> Entry:
        if key == self.failing_key:
            raise OSError("disk on fire")
        return await super().set(namespace, key, value, expected_version=expected_version)


async def test_a_store_failure_while_applying_is_a_store_error_naming_the_key() -> None:
    access = ProfileAccess(FlakyStore("doomed"))
    buffer = access.buffered()
    await buffer.write(Visits, "first", 1)
    await buffer.write(Visits, "doomed", 2)
    await buffer.write(Visits, "after", 3)
    with pytest.raises(StoreError, match=r"'doomed'.*disk on fire") as caught:
        await buffer.apply()
    assert caught.value.key == "visits"
    assert isinstance(caught.value.cause, OSError)
    assert await access.read(Visits, "first") == 1  # what was applied before it stands
    assert await access.read(Visits, "after") == 0  # the rest is dropped, not retried later
    assert buffer.is_empty()


async def test_an_update_refused_at_apply_time_is_a_store_error(access: ProfileAccess) -> None:
    buffer = access.buffered()
    await buffer.update(Visits, "a", lambda n: 10 // (1 - n))  # fine against 0
    await access.write(Visits, "a", 1)  # the value at apply time makes fn raise
    with pytest.raises(StoreError, match=r"buffered update.*'a'") as caught:
        await buffer.apply()
    assert isinstance(caught.value.cause, ZeroDivisionError)
    assert caught.value.key == "visits"
    assert await access.read(Visits, "a") == 1


async def test_read_only_view_reads_and_refuses_every_write(
    access: ProfileAccess, profile_store: ProfileStore
) -> None:
    await access.write(Visits, "alice", 3)
    gate_view = access.read_only()
    assert await gate_view.read(Visits, "alice") == 3
    for attempt in (
        gate_view.write(Visits, "alice", 4),
        gate_view.delete(Visits, "alice"),
        gate_view.update(Visits, "alice", lambda n: n + 1),
    ):
        with pytest.raises(StateError, match=r"tool gates are re-evaluated freely.*read-only"):
            await attempt
    entry = await profile_store.get("visits", "alice")
    assert entry is not None and (entry.value, entry.version) == (3, 1)
    custom = access.read_only("effect handlers run after the commit")
    with pytest.raises(StateError, match=r"^effect handlers run after the commit"):
        await custom.write(Visits, "alice", 5)
