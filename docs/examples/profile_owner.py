"""Everything one owner holds in the profile store, across every profile key: list, forget.

Two users have preferences and a quota in a SQLite profile store. We list what alice holds,
forget her from inside a hook (the deletes apply when the hook's command commits), and
check that bob's records stayed.

Run: .venv/bin/python docs/examples/profile_owner.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import msgspec

from statekernel import Kernel, Phase, PhaseContext, Plugin, PluginRegistrar, ProfileKey
from statekernel.stores import SqliteProfileStore


class Preferences(msgspec.Struct, frozen=True):
    tone: str = "plain"


class Prefs(ProfileKey[Preferences]):
    key = "prefs"


class Quota(ProfileKey[int]):
    key = "quota"
    default = 100


class Forget(Plugin):
    """Forgets whoever the run is for, at its first step (say, on a deletion request)."""

    id = "forget"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_profile_key(Prefs)
        registrar.register_profile_key(Quota)
        registrar.register_phase_hook(Phase.STEP_START, self.forget)

    async def forget(self, ctx: PhaseContext) -> None:
        assert ctx.profile is not None
        await ctx.profile.forget(ctx.agent.name)


def names(records: dict[type[ProfileKey[Any]], Any]) -> dict[str, Any]:
    return {key.key: value for key, value in records.items()}


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        async with SqliteProfileStore(Path(folder) / "profiles.db") as store:
            kernel = Kernel([Forget()], profile_store=store)
            profile = kernel.profile
            assert profile is not None
            for user, tone in (("alice", "warm"), ("bob", "brief")):
                await profile.write(Prefs, user, Preferences(tone))
                await profile.write(Quota, user, 7)
            print("alice holds:", names(await profile.list("alice")))
            run = await kernel.start_run("thread-1", agent="alice")
            await run.run_phase(Phase.STEP_START)
            await run.finish()
            print("after forgetting alice:", names(await profile.list("alice")))
            print("bob still holds:", names(await profile.list("bob")))


if __name__ == "__main__":
    asyncio.run(main())
