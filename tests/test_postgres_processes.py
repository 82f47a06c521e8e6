"""The PostgreSQL stores across processes, against a real server: concurrent updates from
many processes, a server restart under writers, two kernels on one thread, a team whose
children run in different processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import asyncpg
import msgspec
import pytest

from statekernel import (
    Kernel,
    KeyScope,
    MergeStrategy,
    Plugin,
    PluginRegistrar,
    ProfileAccess,
    ProfileKey,
    RevisionConflict,
    StateCommand,
    StateKey,
    StateScope,
)
from statekernel.plugins import TeamContext
from statekernel.stores import PostgresProfileStore, PostgresThreadStore
from statekernel.testing.postgres import PostgresServer

pytestmark = pytest.mark.slow  # writer processes racing on one server


def run_workers(script: str, argvs: Sequence[Sequence[str]], timeout: float = 120) -> list[str]:
    """Run one process per argv with `script`; their stdouts, once all exited 0."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    try:
        outputs = [worker.communicate(timeout=timeout) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    assert [w.returncode for w in workers] == [0] * len(workers), [err for _, err in outputs]
    return [out for out, _ in outputs]


COUNTER_WORKER = textwrap.dedent(
    """
    import asyncio, sys, time
    from statekernel import ProfileAccess, ProfileKey
    from statekernel.stores import PostgresProfileStore

    class Counter(ProfileKey[int]):
        key = "counter"

    async def main(dsn, updates, start_at):
        async with PostgresProfileStore(dsn, pool_size=2) as store:
            await store.get("warm", "up")  # connect before the start line
            while time.time() < start_at:  # all workers start together
                await asyncio.sleep(0.005)
            access = ProfileAccess(store)
            for _ in range(updates):
                await access.update(Counter, "global", lambda n: n + 1)

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
    """
)


async def test_eight_processes_updating_one_counter_end_at_exactly_4000(
    postgres_dsn: str,
) -> None:
    start_at = str(time.time() + 3.0)  # time for every interpreter to start and connect
    run_workers(COUNTER_WORKER, [(postgres_dsn, "500", start_at)] * 8, timeout=240)
    conn = await asyncpg.connect(postgres_dsn)
    try:
        row = await conn.fetchrow(
            "SELECT value, version FROM statekernel_profile_entries WHERE namespace = 'counter'"
        )
    finally:
        await conn.close()
    assert (msgspec.json.decode(row["value"]), row["version"]) == (4000, 4000)


APPEND_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from statekernel import ProfileAccess, ProfileKey, StoreError
    from statekernel.stores import PostgresProfileStore

    class Tokens(ProfileKey[list[str]]):
        key = "tokens"

    async def main(dsn, writer, count):
        # A short retry window, so that the restart reaches the writer as errors.
        async with PostgresProfileStore(dsn, pool_size=2, retry_for=0.3) as store:
            access = ProfileAccess(store)
            for index in range(count):
                token = f"{writer}-{index}"
                while True:
                    try:
                        await access.update(Tokens, "shared", lambda held: [*held, token])
                    except StoreError as error:
                        if "unknown" in str(error):  # it may have landed: never write it again
                            print("unknown", token, flush=True)
                            break
                        print("retry", token, flush=True)  # it did not land: write it again
                        await asyncio.sleep(0.05)
                        continue
                    print("ack", token, flush=True)
                    break

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


async def test_a_server_restart_under_four_writers_loses_no_acknowledged_write_and_repeats_none(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    async with PostgresProfileStore(postgres_dsn) as store:
        await store.get("warm", "up")  # creates the table before the writers race to
    restarted = threading.Event()
    at_restart: list[int] = []

    def restart_when_writing() -> None:
        async def held() -> int:
            conn = await asyncpg.connect(postgres_dsn)
            try:
                value = await conn.fetchval(
                    "SELECT value FROM statekernel_profile_entries WHERE namespace = 'tokens'"
                )
            finally:
                await conn.close()
            return 0 if value is None else len(msgspec.json.decode(value))

        deadline = time.monotonic() + 120
        while asyncio.run(held()) < 300 and time.monotonic() < deadline:
            time.sleep(0.05)  # the writers are well under way
        at_restart.append(asyncio.run(held()))
        postgres_server.stop()  # as an operator's restart, with a moment in between
        time.sleep(1.0)
        postgres_server.start()
        restarted.set()

    restarter = threading.Thread(target=restart_when_writing)
    restarter.start()
    try:
        outputs = run_workers(
            APPEND_WORKER, [(postgres_dsn, f"w{n}", "250") for n in range(4)], timeout=240
        )
    finally:
        restarter.join()
    assert restarted.is_set() and 300 <= at_restart[0] < 1000  # it fell amid the writes
    lines = [line.split() for output in outputs for line in output.splitlines()]
    acked = {token for verdict, token in lines if verdict == "ack"}
    async with PostgresProfileStore(postgres_dsn) as store:
        tokens = await ProfileAccess(store).read(Tokens, "shared")
    assert sorted(set(tokens)) == sorted(tokens), "a write was applied twice"
    assert acked <= set(tokens), f"acknowledged but lost: {sorted(acked - set(tokens))[:5]}"
    unknown = {token for verdict, token in lines if verdict == "unknown"}
    assert set(tokens) <= acked | unknown


class Tokens(ProfileKey[list[str]]):  # the workers' key, read back here
    key = "tokens"


class Tally(StateKey[int, int]):
    key = "pg.tally"
    scope = KeyScope.THREAD
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Owner(StateKey[str, str]):
    key = "pg.owner"
    scope = KeyScope.THREAD
    default = ""


class Keys(Plugin):
    id = "pg-keys"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Tally)
        registrar.register_key(Owner)


OTHER_KERNEL = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[3])
    from test_postgres_processes import Keys, Owner, Tally
    from statekernel import Kernel, StateCommand
    from statekernel.stores import PostgresThreadStore

    async def main(dsn, what):
        async with PostgresThreadStore(dsn) as store:
            run = await Kernel([Keys()], thread_store=store).start_run("shared")
            command = StateCommand().update(Tally, 10) if what == "tally" else (
                StateCommand().update(Owner, "other process"))
            await run.submit(command)
            await run.finish()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_two_kernels_in_two_processes_conflict_on_exclusive_keys_and_rebase_the_rest(
    postgres_dsn: str,
) -> None:
    tests_folder = str(Path(__file__).parent)
    async with PostgresThreadStore(postgres_dsn) as store:
        kernel = Kernel([Keys()], thread_store=store)
        first = await kernel.start_run("shared")
        await first.submit(StateCommand().update(Tally, 1))
        await first.finish()

        stale = await kernel.start_run("shared")  # loads the head, then another process moves it
        run_workers(OTHER_KERNEL, [(postgres_dsn, "tally", tests_folder)])
        await stale.submit(StateCommand().update(Tally, 100))
        await stale.finish()  # commutative only: rebases onto the other process's commit
        assert [(r.onto, r.revision) for r in stale.rebases] == [(2, 3)]
        assert (await kernel.state_at("shared", 3)).get(Tally) == 111

        stale = await kernel.start_run("shared")
        run_workers(OTHER_KERNEL, [(postgres_dsn, "owner", tests_folder)])
        await stale.submit(StateCommand().update(Owner, "this process"))
        with pytest.raises(RevisionConflict):
            await stale.finish()
        reader = Kernel([Keys()], thread_store=store)
        assert (await reader.state_at("shared", 4)).get(Owner) == "other process"
        assert (await reader.verify("shared")).ok


TEAM_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from statekernel import Agent, InferenceResponse, ScriptedModel, ToolCall
    from statekernel.plugins import ContextInjection, Team
    from statekernel.stores import PostgresProfileStore

    async def main(dsn, name, goal):
        call = ToolCall("call-goal", "add_team_goal", {"goal": goal})
        model = ScriptedModel([InferenceResponse("adding", (call,)), InferenceResponse("done")])
        async with PostgresProfileStore(dsn) as store:
            team = Team()
            agent = Agent([ContextInjection(), team], model, team.tools(), profile_store=store)
            result = await agent.run(name, ["help"], parent_thread_id="parent")
            seen = [
                [m.content for m in request.messages if m.id == "context:team"]
                for request in model.requests
            ]
            print(json.dumps({"outcome": result.outcome, "seen": seen}))

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
    """
)


async def test_children_of_one_parent_in_different_processes_share_team_context(
    postgres_dsn: str,
) -> None:
    async with PostgresProfileStore(postgres_dsn) as store:
        await store.get("warm", "up")
    together = run_workers(
        TEAM_CHILD,
        [(postgres_dsn, f"child-{n}", f"goal of child {n}") for n in range(3)],
    )
    assert [json.loads(out)["outcome"] for out in together] == ["success"] * 3
    (later,) = run_workers(TEAM_CHILD, [(postgres_dsn, "child-late", "goal of the late child")])
    first_context = json.loads(later)["seen"][0]
    assert all(f"goal of child {n}" in first_context[0] for n in range(3)), first_context
    async with PostgresProfileStore(postgres_dsn) as store:
        team = await ProfileAccess(store).read(TeamContext, StateScope.parent_thread("parent"))
        other = await ProfileAccess(store).read(TeamContext, StateScope.parent_thread("other"))
    assert sorted(team.goals) == sorted(
        [*(f"goal of child {n}" for n in range(3)), "goal of the late child"]
    )
    assert other.goals == ()


TEAM_HALF = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from statekernel import AgentTeam, InferenceResponse, Role
    from statekernel.stores import PostgresProfileStore, PostgresThreadStore

    async def ok(request):
        return InferenceResponse("ok")

    async def main(dsn, role, count):
        other = "b" if role == "a" else "a"
        roles = {"a": Role(model=ok), "b": Role(model=ok)}
        async with (
            PostgresProfileStore(dsn) as profiles,
            PostgresThreadStore(dsn) as threads,
            AgentTeam(
                roles, profile_store=profiles, thread_store=threads, team_id="pg-team",
                local_roles=[role],
            ) as team,
        ):
            mine = [f"{role}{n}" for n in range(2)]
            theirs = [f"{other}{n}" for n in range(2)]

            async def send(me):
                for k in range(count):
                    await team.send(me, f"{me}:{k}", to=theirs[k % 2], message_id=f"{me}:{k}")

            async def mail_of(agent_id):
                info = next(i for i in team.list_agents() if i.id == agent_id)
                state = await team.agent(role).kernel.get_state(info.thread_id)
                return [
                    m.content.split("\\n", 1)[1]
                    for m in state.to_dict()["statekernel.messages"]
                    if AgentTeam.sender_of(m)
                ]

            sending = asyncio.gather(*(send(me) for me in mine))
            deadline = time.monotonic() + 90
            while True:
                await team.run_until_idle()
                got = {me: await mail_of(me) for me in mine}
                if sending.done() and all(len(m) >= count for m in got.values()):
                    break
                assert time.monotonic() < deadline, {k: len(v) for k, v in got.items()}
                await asyncio.sleep(0.05)
            await sending
            print(json.dumps(got))

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


async def test_a_team_split_across_two_processes_delivers_every_message_exactly_once(
    postgres_dsn: str,
) -> None:
    from statekernel import AgentTeam, InferenceResponse, Role

    async def ok(request: object) -> InferenceResponse:
        return InferenceResponse("ok")

    roles = {"a": Role(model=ok), "b": Role(model=ok)}
    async with (
        PostgresProfileStore(postgres_dsn) as profiles,
        PostgresThreadStore(postgres_dsn) as threads,
        AgentTeam(roles, profile_store=profiles, thread_store=threads, team_id="pg-team") as team,
    ):
        for agent_id in ("a0", "a1", "b0", "b1"):
            team.spawn(agent_id[0], "wait for mail", agent_id=agent_id)
    count = 150
    outputs = run_workers(
        TEAM_HALF, [(postgres_dsn, "a", str(count)), (postgres_dsn, "b", str(count))]
    )
    received: dict[str, list[str]] = {}
    for out in outputs:
        received.update(json.loads(out))
    assert sorted(received) == ["a0", "a1", "b0", "b1"]
    for agent_id, mail in received.items():
        assert len(mail) == len(set(mail)) == count  # nothing lost, nothing twice
        senders = [s for s in ("a0", "a1", "b0", "b1") if s[0] != agent_id[0]]
        for sender in senders:
            numbers = [int(m.split(":")[1]) for m in mail if m.startswith(sender + ":")]
            assert numbers == [k for k in range(count) if k % 2 == int(agent_id[1])]


async def test_four_processes_adding_to_one_thread_never_conflict(postgres_dsn: str) -> None:
    """Saves that only commute rebase onto one another however often they race: from four
    processes at once, every run lands, once, and the sum is whole."""
    from commutative_process import Adder, Done, Tally, contend

    runs = 60
    outcomes = contend("postgres", postgres_dsn, "shared", workers=4, runs=runs)
    assert [outcome["conflicts"] for outcome in outcomes] == [0, 0, 0, 0], outcomes
    async with PostgresThreadStore(postgres_dsn) as store:
        reader = Kernel([Adder()], thread_store=store)
        state = await reader.get_state("shared")
        assert state.get(Tally) == runs * (1 + 2 + 3 + 4)
        done = list(state.get(Done))
        assert sorted(done) == sorted(f"{w}:{n}" for w in range(1, 5) for n in range(1, runs + 1))
        assert state.revision == 4 * runs
        assert (await reader.verify("shared")).ok
