"""Owner-wide profile access: every record of one owner across the registered profile keys.

`ProfileAccess.list(owner)` and `forget(owner)`, as Awaken's profile access offers it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from samples import Keys

from statekernel import (
    DecodeFailed,
    Kernel,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ProfileAccess,
    ProfileKey,
    StateCommand,
    StateError,
    StateScope,
)
from statekernel.stores import SqliteProfileStore


class Preferences(msgspec.Struct, frozen=True):
    tone: str = "plain"
    languages: tuple[str, ...] = ()


class Prefs(ProfileKey[Preferences]):
    key = "prefs"


class Quota(ProfileKey[int]):
    key = "quota"
    default = 100


class Notes(ProfileKey[list[str]]):
    key = "notes"


@pytest.fixture
async def kernel(tmp_path: Path) -> AsyncIterator[Kernel]:
    async with SqliteProfileStore(tmp_path / "profiles.db") as store:
        yield Kernel([Keys(Prefs, Quota, Notes, id="profiles")], profile_store=store)


def access(kernel: Kernel) -> ProfileAccess:
    assert kernel.profile is not None
    return kernel.profile


async def test_list_returns_every_record_of_one_owner_typed(kernel: Kernel) -> None:
    profile = access(kernel)
    await profile.write(Prefs, "alice", Preferences("warm", ("en", "fr")))
    await profile.write(Quota, "alice", 7)
    await profile.write(Quota, "bob", 9)
    await profile.write(Notes, StateScope.agent_type("planner"), ["shared"])
    records = await profile.list("alice")
    assert records == {Prefs: Preferences("warm", ("en", "fr")), Quota: 7}
    assert type(records[Prefs]) is Preferences  # decoded to the key's type
    assert list(records) == [Prefs, Quota]  # by key string; Notes: alice holds none
    assert await profile.list(StateScope.agent_type("planner")) == {Notes: ["shared"]}
    assert await profile.list("nobody") == {}


async def test_one_entry_that_no_longer_decodes_costs_list_only_itself(
    kernel: Kernel, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    profile = access(kernel)
    await profile.write(Quota, "alice", 7)
    await profile.write(Notes, "alice", ["kept"])
    store = kernel.profile_store
    assert store is not None
    await store.set("prefs", "alice", {"tone": 3})  # not a Preferences any more
    assert await profile.list("alice") == {Notes: ["kept"], Quota: 7}
    assert "left out an entry" in caplog.text and "'prefs'" in caplog.text
    with pytest.raises(DecodeFailed):
        await profile.read(Prefs, "alice")


async def test_forget_removes_one_owners_records_and_nothing_of_another(kernel: Kernel) -> None:
    profile = access(kernel)
    for owner in ("alice", "bob"):
        await profile.write(Quota, owner, 1)
        await profile.write(Notes, owner, [owner])
    await profile.forget("alice")
    assert await profile.list("alice") == {}
    assert await profile.read(Quota, "alice") == 100  # the default again
    assert await profile.list("bob") == {Quota: 1, Notes: ["bob"]}


class Forget(Plugin):
    """A hook that forgets alice and reads what is left, inside one phase."""

    id = "forget"

    def __init__(self) -> None:
        self.seen: list[dict[type[ProfileKey[Any]], Any]] = []

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_phase_hook(Phase.STEP_START, self.forget)

    async def forget(self, ctx: PhaseContext) -> StateCommand | None:
        assert ctx.profile is not None
        await ctx.profile.write(Quota, "alice", 5)
        self.seen.append(await ctx.profile.list("alice"))  # its own write, buffered
        await ctx.profile.forget("alice")
        self.seen.append(await ctx.profile.list("alice"))
        return None


async def test_inside_a_hook_list_and_forget_go_through_the_hooks_buffer(tmp_path: Path) -> None:
    async with SqliteProfileStore(tmp_path / "profiles.db") as store:
        forget = Forget()
        kernel = Kernel([Keys(Prefs, Quota, Notes, id="profiles"), forget], profile_store=store)
        await access(kernel).write(Notes, "alice", ["kept until the commit"])
        run = await kernel.start_run("t")
        await run.run_phase(Phase.STEP_START)
        assert forget.seen == [{Quota: 5, Notes: ["kept until the commit"]}, {}]
        assert await access(kernel).list("alice") == {}  # the deletes applied at the commit


async def test_a_read_only_view_refuses_forget_and_lists_fine(kernel: Kernel) -> None:
    profile = access(kernel)
    await profile.write(Quota, "alice", 3)
    gate_view = profile.read_only("tool gates must not write")
    assert await gate_view.list("alice") == {Quota: 3}
    with pytest.raises(StateError, match="tool gates must not write"):
        await gate_view.forget("alice")
    assert await profile.list("alice") == {Quota: 3}


async def test_without_registered_keys_owner_wide_access_says_what_to_do(tmp_path: Path) -> None:
    async with SqliteProfileStore(tmp_path / "p.db") as store:
        bare = ProfileAccess(store)
        with pytest.raises(StateError, match="built without them"):
            await bare.list("alice")
        keyed = ProfileAccess(store, keys={"quota": Quota})
        await keyed.write(Quota, "alice", 2)
        assert await keyed.list("alice") == {Quota: 2}
        with pytest.raises(TypeError, match="StateScope or a string"):
            await keyed.forget(3)  # type: ignore[arg-type]
