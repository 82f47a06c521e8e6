"""The application of the worker tests, served by `statekernel worker
team_worker_app:make_team --store DB`, the way a user's module is.

Eight agents w0..w7 are spawned, then each is sent (by "planner") a letter listing the
letters it is to send (`plan m3>w1 ...`, made from a seed): 200 in all. Asked, the model
sends the plan's next letter through `send_message`, with a fresh random call id each time
it is asked (as every real model's API does), then answers "done"; each letter wakes its
recipient, whose run answers "done" too once its own plan is through. The team's id and
lease come from the environment, so that each trial has its own team and a short lease.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import uuid

from statekernel import (
    AgentTeam,
    InferenceRequest,
    InferenceResponse,
    Message,
    Role,
    Stores,
    ToolCall,
)

AGENTS = [f"w{n}" for n in range(8)]
MESSAGES = 200


def plan(seed: int, messages: int = MESSAGES) -> dict[str, list[tuple[int, str]]]:
    """Per sender, the (message number, recipient) pairs it sends, in order."""
    rng = random.Random(seed)
    plans: dict[str, list[tuple[int, str]]] = {a: [] for a in AGENTS}
    for n in range(messages):
        sender = AGENTS[n % len(AGENTS)]
        plans[sender].append((n, rng.choice([a for a in AGENTS if a != sender])))
    return plans


def task(plans: dict[str, list[tuple[int, str]]], me: str) -> str:
    return "plan " + " ".join(f"m{n}>{to}" for n, to in plans[me])


PLANNER = "planner"
"""Who sends each agent its plan (from outside the team's runs)."""


async def start_plans(team: AgentTeam, plans: dict[str, list[tuple[int, str]]]) -> None:
    """Spawn every agent, then send each its plan: an agent may only send to agents that
    are in the roster, so all are spawned (and recorded) before any gets its plan."""
    for agent_id in AGENTS:
        team.spawn("peer", f"plan #{agent_id}", agent_id=agent_id)
    for agent_id in AGENTS:
        await team.send(PLANNER, task(plans, agent_id), to=agent_id)


def text_of(message: Message) -> str:
    """A message's text, without the header a letter starts with."""
    return message.content.split("\n", 1)[-1] if AgentTeam.sender_of(message) else message.content


class PlanModel:
    """Sends the plan's next letter through `send_message`, then answers "done"."""

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        await asyncio.sleep(random.random() * 0.01)
        plans = [text_of(m) for m in request.messages if text_of(m).startswith("plan ")]
        steps = plans[-1]
        todo = [item.split(">") for item in steps.split()[1:] if ">" in item]  # "#..": a name
        sent = sum(1 for m in request.messages if m.role == "tool" and not m.is_error)
        if sent < len(todo):
            what, to = todo[sent]
            call_id = f"call_{uuid.uuid4().hex[:16]}"  # new each time the model is asked
            call = ToolCall(call_id, "send_message", {"content": what, "to": to})
            return InferenceResponse("", tool_calls=(call,))
        return InferenceResponse("done")


def make_team(stores: Stores) -> AgentTeam:
    return AgentTeam(
        {"peer": Role(model=PlanModel())},
        stores=stores,
        team_id=os.environ.get("TEAM_WORKER_TEAM", "worker-team"),
        lease_seconds=float(os.environ.get("TEAM_WORKER_LEASE", "10")),
        max_steps=100,  # a plan of 25 letters takes 26 steps
    )


class CollectorModel:
    """Writes, when asked, how the worker process set its garbage collector up."""

    def __init__(self, path: str) -> None:
        self._path = path

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        with open(self._path, "w") as out:
            out.write(f"{gc.get_threshold()[0]} {gc.get_freeze_count()}")
        return InferenceResponse("noted")


def collector_team(stores: Stores) -> AgentTeam:
    """A team whose model notes the collector's set-up in the file COLLECTOR_LOG names."""
    model = CollectorModel(os.environ["COLLECTOR_LOG"])
    return AgentTeam({"peer": Role(model=model)}, stores=stores, team_id="collector")


def not_a_team(stores: Stores) -> str:
    """A factory that returns something else: `statekernel worker` refuses it."""
    return "a team?"


def failing(stores: Stores) -> AgentTeam:
    """A factory that raises: `statekernel worker` says so in one line."""
    raise RuntimeError("the model's API key is not set")
