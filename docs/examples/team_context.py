"""Team context: a parent seeds goals, three children extend them at the same time.

Run: .venv/bin/python docs/examples/team_context.py

All agents share one in-memory ProfileStore. The children run concurrently
(`asyncio.gather`) under the parent's thread and each adds a goal with the `add_team_goal`
tool; compare-and-set updates make sure none is lost. A child of another parent sees none of
it. Offline: every model is scripted.
"""

from __future__ import annotations

import asyncio

from statekernel import Agent, InferenceResponse, ProfileAccess, ScriptedModel, StateScope, ToolCall
from statekernel.plugins import ContextInjection, Team, TeamContext
from statekernel.stores import MemoryProfileStore


def child_agent(store: MemoryProfileStore, goal: str) -> tuple[Agent, ScriptedModel]:
    team = Team()
    model = ScriptedModel(
        [
            InferenceResponse("adding", (ToolCall("c1", "add_team_goal", {"goal": goal}),)),
            InferenceResponse("done"),
        ]
    )
    return Agent([ContextInjection(), team], model, team.tools(), profile_store=store), model


def team_message(model: ScriptedModel, request: int) -> str:
    found = [m.content for m in model.requests[request].messages if m.id == "context:team"]
    return found[0] if found else "(no team context)"


async def main() -> None:
    store = MemoryProfileStore()
    parent = Agent(
        [ContextInjection(), Team(goals=["Launch v1 on Friday"])],
        ScriptedModel([InferenceResponse("Delegating to three helpers.")]),
        profile_store=store,
    )
    await parent.run("lead", ["Plan the launch."])

    goals = ["Write the release notes", "Fix the flaky test", "Update the pricing page"]
    children = [child_agent(store, goal) for goal in goals]
    await asyncio.gather(
        *(
            agent.run(f"helper-{i}", ["Help with the launch."], parent_thread_id="lead")
            for i, (agent, _) in enumerate(children)
        )
    )

    team = await ProfileAccess(store).read(TeamContext, StateScope.parent_thread("lead"))
    print(f"team record under {StateScope.parent_thread('lead')!r}:")
    for goal in team.goals:
        print(f"  - {goal}")

    _, first_model = children[0]
    print("\nwhat helper-0 saw before its first inference:")
    print("  " + team_message(first_model, 0).replace("\n", "\n  "))

    outsider, outsider_model = child_agent(store, "Unrelated goal")
    await outsider.run("other-helper", ["Help."], parent_thread_id="another-lead")
    print("\nwhat a helper of another parent saw first:", team_message(outsider_model, 0))
    assert set(goals) <= set(team.goals) and "Unrelated goal" not in team.goals


if __name__ == "__main__":
    asyncio.run(main())
