"""A child process for the team crash trials: five agents exchanging messages on SQLite files.

    python team_process.py PROFILES_DB THREADS_DB ACK_LOG MESSAGES SEED

Message n of the plan (made from SEED) goes from agent p<n % 5> to a random other agent,
with `message_id` "m<n>". Each agent sends its messages in order, with random pauses, while
the team runs rounds; every `send` that returned is appended to ACK_LOG (and synced) before
the next. Started again after a kill, it sends each agent's messages from the first one not
acknowledged (the one in flight, if it was stored, is dropped by its id), then runs until
idle and prints "idle" (after "started", once its team is open). The parent kills it with
SIGKILL at random points.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from pathlib import Path

from statekernel import AgentTeam, InferenceRequest, InferenceResponse, Role
from statekernel.stores import SqliteProfileStore, SqliteThreadStore

AGENTS = [f"p{n}" for n in range(5)]
TEAM_ID = "crash-team"


def plan(messages: int, seed: int) -> list[tuple[str, str]]:
    """(sender, recipient) of each message."""
    rng = random.Random(seed)
    return [
        (AGENTS[n % 5], rng.choice([a for a in AGENTS if a != AGENTS[n % 5]]))
        for n in range(messages)
    ]


def roles(rng: random.Random) -> dict[str, Role]:
    async def model(request: InferenceRequest) -> InferenceResponse:
        await asyncio.sleep(rng.random() * 0.003)
        return InferenceResponse("ok")

    return {"peer": Role(model=model)}


async def main(profiles: str, threads: str, ack_log: str, messages: int, seed: int) -> None:
    rng = random.Random()
    planned = plan(messages, seed)
    log = Path(ack_log)
    acked = {int(line) for line in log.read_text().split()} if log.exists() else set()
    fd = os.open(ack_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    async with (
        SqliteProfileStore(profiles) as profile_store,
        SqliteThreadStore(threads) as thread_store,
        AgentTeam(
            roles(rng), profile_store=profile_store, thread_store=thread_store, team_id=TEAM_ID
        ) as team,
    ):
        for agent_id in AGENTS:
            team.spawn("peer", f"you are {agent_id}", agent_id=agent_id)
        print("started", flush=True)

        async def sender(me: str) -> None:
            for n, (who, to) in enumerate(planned):
                if who != me or n in acked:
                    continue
                await team.send(me, f"m{n}", to=to, message_id=f"m{n}")
                os.write(fd, f"{n}\n".encode())
                os.fsync(fd)
                await asyncio.sleep(rng.random() * 0.002)

        sending = asyncio.gather(*(sender(a) for a in AGENTS))
        while not sending.done():
            await team.run_until_idle(max_rounds=2)
            await asyncio.sleep(0)
        await sending
        while not (await team.run_until_idle()).idle:
            pass
    print("idle", flush=True)


if __name__ == "__main__":
    profiles_db, threads_db, log_path, count, seed_text = sys.argv[1:6]
    asyncio.run(main(profiles_db, threads_db, log_path, int(count), int(seed_text)))
