"""Options: every public constructor refuses the same kinds of values the same way, and a team
hands the kernel's options to the agents it builds.

A bool is an int to Python, so `Kernel(max_phase_rounds=True)` once meant one round while
`Kernel(snapshot_every=True)` was refused. Every option of one kind now goes through the same
check: a value of the wrong kind (a bool or a string where an int goes) is a `TypeError`
(and, as it always was, a `ValueError`), one out of range a `ValueError`, and the message
starts with the option's name, then says what was given and what the option takes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekernel import (
    Agent,
    AgentTeam,
    InferenceRequest,
    InferenceResponse,
    Kernel,
    PhaseReport,
    ProfileAccess,
    Retention,
    Role,
    Run,
    StateError,
)
from statekernel.models import OpenAIChatModel
from statekernel.stores import (
    MemoryProfileStore,
    PostgresProfileStore,
    PostgresThreadStore,
    SqliteProfileStore,
    SqliteThreadStore,
)


def kernel(**kw: Any) -> object:
    return Kernel([], **kw)


def agent(**kw: Any) -> object:
    return Agent([], kw.pop("model", answer), **kw)


def team(**kw: Any) -> object:
    return AgentTeam({"r": Role()}, model=answer, profile_store=MemoryProfileStore(), **kw)


def openai_model(**kw: Any) -> object:
    return OpenAIChatModel("gpt-test", client=object(), **kw)  # type: ignore[arg-type]


async def answer(request: InferenceRequest) -> InferenceResponse:
    """The same final answer to every request: a run of one step."""
    return InferenceResponse("done")


# (who, option, a value of the wrong kind, a value out of range or None)
OPTIONS: list[tuple[Callable[..., object], str, object, object]] = [
    *(
        (make, option, True, 0)
        for make in (kernel, agent, team)
        for option in ("max_phase_rounds", "snapshot_every")
    ),
    *((make, "restore_errors", True, "ignore") for make in (kernel, agent, team)),
    *((make, "unknown_keys", 1, "drop") for make in (kernel, agent, team)),
    *((make, "retention", 100, None) for make in (kernel, agent, team)),
    (agent, "max_steps", True, 0),
    (agent, "max_steps", "25", -1),
    (agent, "model", "gpt-4o", None),
    (agent, "system_prompt", ["be brief"], None),
    (agent, "on_phase", "print", None),
    (team, "max_steps", True, 0),
    (team, "max_restarts", True, -1),
    (team, "restart_policy", False, "always"),
    (team, "lease_seconds", True, float("inf")),
    (team, "lease_seconds", "10", 0),
    (team, "on_phase", 1, None),
    (lambda **kw: Role(**kw), "max_steps", True, 0),
    (lambda **kw: Retention(**kw), "revisions", True, 0),
    (lambda **kw: ProfileAccess(MemoryProfileStore(), **kw), "max_update_attempts", True, 0),
    (lambda **kw: ProfileAccess(MemoryProfileStore(), **kw), "max_value_bytes", 1.5, 0),
    (openai_model, "max_retries", True, -1),
    (openai_model, "backoff", "0.5", float("nan")),
    (openai_model, "timeout", True, 0),
]


def _id(case: tuple[Callable[..., object], str, object, object]) -> str:
    make, option, wrong, _ = case
    return f"{getattr(make, '__name__', 'make')}-{option}-{wrong!r}"


@pytest.mark.parametrize("case", OPTIONS, ids=[_id(c) for c in OPTIONS])
def test_an_option_refuses_the_wrong_kind_of_value_and_one_out_of_range(
    case: tuple[Callable[..., object], str, object, object],
) -> None:
    make, option, wrong, out_of_range = case
    named = rf"^(Retention\()?{option}\b.* must be .*, got "
    with pytest.raises(TypeError, match=named) as refused:
        make(**{option: wrong})
    assert isinstance(refused.value, StateError) and isinstance(refused.value, ValueError)
    assert repr(wrong)[:20] in str(refused.value)
    if isinstance(wrong, bool) and isinstance(out_of_range, int | float):  # where a number goes
        assert "A bool is not taken for a number" in str(refused.value)
    if out_of_range is not None:
        with pytest.raises(ValueError, match=named) as refused:
            make(**{option: out_of_range})
        assert isinstance(refused.value, StateError)


def test_a_bool_is_refused_wherever_an_int_goes_and_the_ints_around_it_are_taken() -> None:
    """The cases that once disagreed: `True` passed as one round and as one step."""
    for make, option in ((kernel, "max_phase_rounds"), (agent, "max_steps")):
        with pytest.raises(TypeError, match=f"^{option} must be a positive int, got True"):
            make(**{option: True})
        make(**{option: 1})
    assert Kernel([], snapshot_every=1, max_phase_rounds=1) is not None


async def test_methods_with_counts_refuse_bools_too() -> None:
    async with AgentTeam(
        {"r": Role()}, model=answer, profile_store=MemoryProfileStore()
    ) as the_team:
        with pytest.raises(TypeError, match="^max_rounds must be a positive int, got True"):
            await the_team.run_until_idle(max_rounds=True)
        with pytest.raises(ValueError, match="^timeout must be a finite number of seconds"):
            await the_team.wait_idle(timeout=float("nan"))
    with pytest.raises(TypeError, match="^limit must be None or an int >= 0, got False"):
        await Kernel([]).threads(limit=False)


# -- a team gives its agents the kernel's options ---------------------------------------------


async def test_a_team_gives_every_agent_its_snapshot_policy(tmp_path: Path) -> None:
    """With `snapshot_every=1` every save of an agent's thread writes a snapshot; with the
    default, a short run writes none past the first."""
    heads: dict[str, tuple[int, int]] = {}
    for name, every in (("every-save", {"snapshot_every": 1}), ("default", {})):
        async with (
            SqliteProfileStore(tmp_path / f"{name}-profiles.db") as profiles,
            SqliteThreadStore(tmp_path / f"{name}-threads.db") as threads,
        ):
            roles = {"worker": Role(model=answer)}
            async with AgentTeam(
                roles, profile_store=profiles, thread_store=threads, **every
            ) as the_team:
                agent_id = the_team.spawn("worker", "first")
                await the_team.run_until_idle()
                await the_team.send("user", "second", to=agent_id)
                await the_team.run_until_idle()
                (info,) = the_team.list_agents()
            loaded = await threads.load(info.thread_id)
            assert loaded is not None
            heads[name] = (loaded.revision, loaded.snapshot_revision)
    revision, snapshot = heads["every-save"]
    assert revision > 1 and snapshot == revision  # the last save wrote one
    revision, snapshot = heads["default"]
    assert revision > 1 and snapshot < revision


async def test_a_team_gives_every_agent_its_phase_listener_and_phase_rounds() -> None:
    seen: list[tuple[str, str]] = []

    def listener(run: Run, report: PhaseReport) -> None:
        seen.append((run.agent.name, report.phase.name))

    roles = {"a": Role(), "b": Role()}
    async with AgentTeam(
        roles,
        model=answer,
        profile_store=MemoryProfileStore(),
        on_phase=listener,
        max_phase_rounds=3,
        unknown_keys="refuse",
    ) as the_team:
        the_team.spawn("a", "go")
        the_team.spawn("b", "go")
        await the_team.run_until_idle()
        assert {the_team.agent(r).kernel.max_phase_rounds for r in roles} == {3}
    assert {name for name, _ in seen} == {"a", "b"}
    assert ("a", "RUN_END") in seen and ("b", "RUN_START") in seen


@pytest.mark.parametrize("option", ["retry_for", "call_timeout"])
@pytest.mark.parametrize("value", [math.nan, -1, True, "30"])
def test_a_postgresql_store_refuses_a_time_that_is_not_one(option: str, value: object) -> None:
    for store in (PostgresProfileStore, PostgresThreadStore):
        with pytest.raises(ValueError, match=f"{option} must be a number of seconds >= 0"):
            store("postgresql://app@127.0.0.1/db", **{option: value})
