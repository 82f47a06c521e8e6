"""A child process for the team's exactly-once trials: agents that send through their own
`send_message` tool, asked by a scripted model that picks a fresh random call id each time
it is asked (as OpenAI's and every real model's API does).

    python team_agents_process.py DB SEED [until-complete]

DB is a SQLite file's path or a `postgresql://` DSN. Five agents p0..p4 each get a task that
lists the messages they are to send (the plan made from SEED): `plan m3>p1 m8>p4 ...`; p0's
plan starts with `spawn>peer`, a helper it spawns through `spawn_agent` (whose own plan is
empty). Asked, the model carries out the next item of the plan the history has no tool
result for yet, then answers "done". Each letter wakes its recipient, whose run answers too.

The process opens the team, spawns the five agents (the same ids every time: a spawn of an
id the roster holds adopts it), prints "started" and runs the team to idle, then prints
"idle". That is all the code there is after a crash too: started again, it does exactly the
same. With `until-complete` it runs rounds until the whole plan is delivered and answered,
for several processes sharing one team.
"""

from __future__ import annotations

import asyncio
import random
import sys
import uuid

from statekernel import AgentTeam, InferenceRequest, InferenceResponse, Role, ToolCall
from statekernel.stores import open_stores

AGENTS = [f"p{n}" for n in range(5)]
PER_AGENT = 10
TEAM_ID = "tool-team"


def plan(seed: int) -> dict[str, list[tuple[int, str]]]:
    """Per sender, the (message number, recipient) pairs it sends, in order."""
    rng = random.Random(seed)
    plans: dict[str, list[tuple[int, str]]] = {a: [] for a in AGENTS}
    for n in range(PER_AGENT * len(AGENTS)):
        sender = AGENTS[n % len(AGENTS)]
        plans[sender].append((n, rng.choice([a for a in AGENTS if a != sender])))
    return plans


SPAWNER = "p0"
"""The agent whose plan starts by spawning a helper."""


def task(plans: dict[str, list[tuple[int, str]]], me: str) -> str:
    spawn = ["spawn>peer"] if me == SPAWNER else []
    return "plan " + " ".join([*spawn, *(f"m{n}>{to}" for n, to in plans[me])])


def tool_results(plans: dict[str, list[tuple[int, str]]], me: str) -> int:
    """How many tool results an agent's history holds once its plan is done."""
    return len(plans.get(me, ())) + (me == SPAWNER)


class PlanModel:
    """Sends the plan's next message through `send_message`, then answers "done"."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        await asyncio.sleep(self.rng.random() * 0.01)
        steps = next(m.content for m in request.messages if m.content.startswith("plan "))
        todo = [item.split(">") for item in steps.split()[1:]]
        sent = sum(1 for m in request.messages if m.role == "tool" and not m.is_error)
        if sent < len(todo):
            what, to = todo[sent]
            call_id = f"call_{uuid.uuid4().hex[:16]}"  # new each time the model is asked
            if what == "spawn":
                call = ToolCall(call_id, "spawn_agent", {"role": to, "task": "plan "})
            else:
                call = ToolCall(call_id, "send_message", {"content": what, "to": to})
            return InferenceResponse("", tool_calls=(call,))
        return InferenceResponse("done")


def roles(rng: random.Random) -> dict[str, Role]:
    return {"peer": Role(model=PlanModel(rng))}


def team(stores: object, rng: random.Random) -> AgentTeam:
    return AgentTeam(
        roles(rng),
        stores=stores,  # type: ignore[arg-type]
        team_id=TEAM_ID,
        spawn_tool=True,
    )


async def complete(team: AgentTeam, plans: dict[str, list[tuple[int, str]]]) -> bool:
    """Whether every agent (and the helper) has answered its whole plan and holds its mail."""
    kernel = team.agent("peer").kernel
    expected = {a: sum(1 for p in plans.values() for _, to in p if to == a) for a in AGENTS}
    for info in team.list_agents():
        try:
            state = await kernel.get_state(info.thread_id)
        except Exception:
            return False
        messages = tuple(state.to_dict()["statekernel.messages"])
        mail = sum(1 for m in messages if AgentTeam.sender_of(m) is not None)
        sent = sum(1 for m in messages if m.role == "tool" and not m.is_error)
        last = messages[-1] if messages else None
        if mail < expected.get(info.id, 0) or sent < tool_results(plans, info.id):
            return False
        if last is None or last.role != "assistant":
            return False
    return len(team.list_agents()) == len(AGENTS) + 1  # and the helper


async def main(db: str, seed: int, mode: str) -> None:
    plans = plan(seed)
    async with open_stores(db) as stores, team(stores, random.Random()) as agents:
        print("started", flush=True)
        for agent_id in AGENTS:
            agents.spawn("peer", task(plans, agent_id), agent_id=agent_id)
        if mode == "until-complete":
            while not await complete(agents, plans):
                await agents.run_until_idle()
                await asyncio.sleep(0.02)
        else:
            while not (await agents.run_until_idle()).idle:
                pass
    print("idle", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], int(args[1]), args[2] if len(args) > 2 else "to-idle"))
