"""A child process for the spawn races: it spawns agents a0..a24 (each seeded with one count
of a commutative counter) and sends each one message right after, at the same moment as
another process doing the same.

    python team_spawn_process.py DB NAME START_AT

At the wall-clock time START_AT (so that the processes race), for each id in turn:
`team.spawn("r", "task <i>", agent_id=..., seed=...)` then `team.send(NAME, ...)` to it, and
prints the index once `send` returned (acknowledged).
"""

from __future__ import annotations

import asyncio
import sys
import time

from statekernel import (
    AgentTeam,
    InferenceRequest,
    InferenceResponse,
    KeyScope,
    MergeStrategy,
    Plugin,
    PluginRegistrar,
    Role,
    StateCommand,
    StateKey,
)
from statekernel.stores import open_stores

TEAM_ID = "spawn-race"
SPAWNS = 25


class Seeded(StateKey[int, int]):
    """How often the agent's thread was seeded: commutative, so a second seed would add."""

    key = "spawn_race.seeded"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Seeds(Plugin):
    id = "seeds"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Seeded)


async def answer(request: InferenceRequest) -> InferenceResponse:
    return InferenceResponse("ok")


def team(stores: object) -> AgentTeam:
    return AgentTeam(
        {"r": Role(model=answer, plugins=[Seeds()])},
        stores=stores,  # type: ignore[arg-type]
        team_id=TEAM_ID,
    )


async def main(db: str, name: str, start_at: float) -> None:
    async with open_stores(db) as stores, team(stores) as racing:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        for i in range(SPAWNS):
            seed = StateCommand().update(Seeded, 1)
            racing.spawn("r", f"task {i}", agent_id=f"a{i}", seed=seed)
            await racing.send(name, f"from {name}", to=f"a{i}")
            print(i, flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
