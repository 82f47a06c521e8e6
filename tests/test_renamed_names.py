"""Names renamed for one word per thing: the new names work, and each earlier name still
does exactly the same for one release, warning with the name to use instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekernel import (
    Kernel,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ProfileAccess,
    ProfileKey,
    StateCommand,
    StateKey,
    ToolCall,
    ToolCallStatus,
    ToolOutput,
)
from statekernel.lowlevel import EncodedValue, encode_entry, encode_record
from statekernel.stores import MemoryProfileStore, SqliteProfileStore


class Quota(ProfileKey[int]):
    key = "test.quota"
    default = 0


class Tally(StateKey[int, int]):
    key = "test.tally"
    default = 0

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Tallies(Plugin):
    id = "tallies"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Tally)


async def test_forget_and_its_earlier_name_clear_delete_only_that_owners_entries(
    tmp_path: Path,
) -> None:
    async with SqliteProfileStore(tmp_path / "p.db") as store:
        access = ProfileAccess(store, keys={Quota.key: Quota})
        for owner in ("alice", "bob", "carol"):
            await access.write(Quota, owner, 5)
        await access.forget("alice")
        with pytest.warns(DeprecationWarning, match=r"ProfileAccess\.clear.*ProfileAccess\.forget"):
            await access.clear("bob")
        assert [await access.read(Quota, o) for o in ("alice", "bob", "carol")] == [0, 0, 5]
        # the store's own clear(namespace) is a different operation: every owner of one key
        await store.clear(Quota.key)
        assert await access.read(Quota, "carol") == 0


async def test_handle_tool_call_and_its_earlier_name_call_tool_give_the_same_result() -> None:
    def add(arguments: dict[str, int], ctx: PhaseContext) -> ToolOutput:
        return ToolOutput("added", StateCommand().update(Tally, arguments["n"]))

    run = await Kernel([Tallies()]).start_run("t")
    first = await run.handle_tool_call(ToolCall("a", "add", {"n": 2}), add)
    with pytest.warns(DeprecationWarning, match=r"Run\.call_tool.*Run\.handle_tool_call"):
        second = await run.call_tool(ToolCall("b", "add", {"n": 3}), add)
    assert (first.status, second.status) == (ToolCallStatus.SUCCEEDED,) * 2
    assert run.snapshot.get(Tally) == 5
    await run.finish()


async def test_encode_entry_and_its_earlier_name_encode_record_encode_alike() -> None:
    entry = encode_entry("ns", "k", {"a": [1]}, 100)
    with pytest.warns(DeprecationWarning, match="encode_entry"):
        record = encode_record("ns", "k", {"a": [1]}, 100)
    assert isinstance(entry, EncodedValue) and entry == record
    # and the bundled store still accepts what it encodes
    store = MemoryProfileStore()
    assert (await store.set("ns", "k", entry)).value == {"a": [1]}


def test_an_earlier_name_says_which_release_removes_it() -> None:
    assert "0.2.0" in (ProfileAccess.clear.__doc__ or "")
    assert ProfileAccess.clear.__name__ == "clear"


async def test_an_earlier_method_name_calls_a_subclass_override_of_the_new_one() -> None:
    forgotten: list[str] = []

    class Audited(ProfileAccess):
        async def forget(self, owner: str) -> None:
            forgotten.append(owner)
            await super().forget(owner)

    access = Audited(MemoryProfileStore(), keys={Quota.key: Quota})
    await access.write(Quota, "dave", 1)
    with pytest.warns(DeprecationWarning):
        await access.clear("dave")
    assert forgotten == ["dave"] and await access.read(Quota, "dave") == 0
