"""A child process that a test kills at a chosen point of an agent's run.

    python team_cut_process.py DB MODE

MODE `between-steps`: the agent's model calls an idempotent tool `look` in its first step;
the first step is saved, and in the second the model prints "asking" and hangs. MODE
`in-tool`: the model calls the tool `pay` (not idempotent: saved as in flight before it
runs), which prints "paying" and hangs. The test kills the process there.
"""

from __future__ import annotations

import asyncio
import sys

from statekernel import AgentTeam, InferenceRequest, InferenceResponse, Role, ToolCall, tool
from statekernel.stores import open_stores

TEAM_ID = "cut-team"
HANG = {"on": True}


async def model(request: InferenceRequest) -> InferenceResponse:
    last = request.messages[-1]
    if last.role == "tool":
        if HANG["on"] and last.content == "looked":
            print("asking", flush=True)
            await asyncio.sleep(3600)
        return InferenceResponse(f"done after {last.content}")
    name = "pay" if "pay" in last.content else "look"
    return InferenceResponse("", tool_calls=(ToolCall("call-1", name, {}),))


@tool(idempotent=True)
def look() -> str:
    """Look around."""
    return "looked"


@tool
async def pay() -> str:
    """Pay."""
    if HANG["on"]:
        print("paying", flush=True)
        await asyncio.sleep(3600)
    return "paid"


def team(stores: object) -> AgentTeam:
    return AgentTeam(
        {"a": Role(model=model, tools=[look, pay])},
        stores=stores,  # type: ignore[arg-type]
        team_id=TEAM_ID,
    )


async def main(db: str, mode: str) -> None:
    async with open_stores(db) as stores, team(stores) as cut:
        cut.spawn("a", "please pay" if mode == "in-tool" else "please look", agent_id="w")
        await cut.run_until_idle()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
