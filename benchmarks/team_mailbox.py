"""AgentTeam: durable messages per second through the mailbox, and agent steps per second in
a team of 100, beside AutoGen Core's in-memory runtime, in one run.

**mail**: M messages (`--messages`, 2,000) from S senders to R recipient agents, 1 -> 1 and
10 -> 10, each message sent with `team.send(..., to=...)` and then delivered into its
recipient's thread by `run_until_idle` (a scripted model answers each run). Two figures per
store: *stored*, the sends alone (each message in the recipient's inbox, durably, before
`send` returns); *delivered*, sends and delivery together: from the first send until every
message is in a recipient's history, saved by a checkpoint (the clock runs over both). On
SQLite (files in a temporary folder, WAL, synchronous=NORMAL) and PostgreSQL (a throwaway
local server, fsync on, sharing the machine's cores).

Beside it, AutoGen Core's `SingleThreadedAgentRuntime` (in memory, nothing stored): the same
M messages published (`publish_message`) by S concurrent publishers to R agents, each
message to one agent through a type subscription and a topic source, until the runtime is
idle and every handler ran. Skipped, and said so, when `autogen-core` is not installed.

**team**: 100 agents of one role with a scripted model (no network, no sleep). Each of
`--rounds` (5) rounds sends every agent one message and runs `run_until_idle`: every agent
runs once, one step with a model call and a checkpoint. Reports agent steps/s, the time per
step, and the kernel's share of it (all but the time spent inside the model function). On
memory and SQLite.

**tool**: the same 100 agents, each sending through its own `send_message` tool: per round,
every agent is given one message, its model (scripted, a fresh random call id each time it
is asked, as real models pick them) calls `send_message(to=<a sink agent>)` in the first
step and answers in the second. The sinks' role runs in no process here (`local_roles`), so
only the senders' steps are timed. Reports ms per step and the sends' share: a tool step's
time over a plain step's (the **team** part's, same store).

Run: .venv-bench/bin/python benchmarks/team_mailbox.py [--quick] [--only mail|team|tool]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from postgres_stores import fresh_schema

from statekernel import AgentTeam, InferenceRequest, InferenceResponse, Role, ToolCall
from statekernel.stores import (
    MemoryProfileStore,
    MemoryThreadStore,
    PostgresProfileStore,
    PostgresThreadStore,
    SqliteProfileStore,
    SqliteThreadStore,
)
from statekernel.testing.postgres import PostgresUnavailable, throwaway_postgres


class ModelClock:
    """A scripted model that answers "ok" and keeps the time spent inside it."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        start = time.perf_counter()
        self.calls += 1
        response = InferenceResponse("ok")
        self.seconds += time.perf_counter() - start
        return response


@contextlib.asynccontextmanager
async def stores(kind: str, folder: Path, dsn: str | None) -> AsyncIterator[tuple[Any, Any]]:
    if kind == "memory":
        yield MemoryProfileStore(), MemoryThreadStore()
    elif kind == "sqlite":
        async with (
            SqliteProfileStore(folder / "profiles.db") as profiles,
            SqliteThreadStore(folder / "threads.db") as threads,
        ):
            yield profiles, threads
    else:
        assert dsn is not None
        async with PostgresProfileStore(dsn) as profiles, PostgresThreadStore(dsn) as threads:
            yield profiles, threads


# -- mail ----------------------------------------------------------------------------------------


async def send_all(team: AgentTeam, me: int, count: int, targets: list[str]) -> None:
    """Sender `s<me>`'s messages, one after the other, to the agents in turn."""
    for k in range(count):
        await team.send(f"s{me}", f"m{k}", to=targets[(me + k) % len(targets)])


async def statekernel_mail(
    kind: str, senders: int, recipients: int, messages: int, server_dsn: str | None
) -> tuple[float, float]:
    """(stored msgs/s, delivered msgs/s) on one store kind."""
    rates = []
    for phase in ("stored", "delivered"):
        with tempfile.TemporaryDirectory() as folder:
            dsn = None
            if server_dsn is not None:
                dsn = await fresh_schema(server_dsn)
            async with stores(kind, Path(folder), dsn) as (profiles, threads):
                team = AgentTeam(
                    {"r": Role(model=ModelClock())},
                    profile_store=profiles,
                    thread_store=threads,
                    mail_tool=False,
                )
                async with team:
                    targets = [team.spawn("r", "wait") for _ in range(recipients)]
                    await team.run_until_idle()
                    per_sender = messages // senders
                    start = time.perf_counter()
                    sending = asyncio.gather(
                        *(send_all(team, me, per_sender, targets) for me in range(senders))
                    )
                    if phase == "stored":
                        await sending
                    else:
                        delivered = 0
                        while True:
                            report = await team.run_until_idle()
                            delivered += sum(a.delivered for a in report.agents.values())
                            if sending.done() and delivered >= per_sender * senders:
                                break
                            await asyncio.sleep(0)
                        await sending
                    rates.append(per_sender * senders / (time.perf_counter() - start))
    return rates[0], rates[1]


try:
    from autogen_core import (
        AgentId,
        MessageContext,
        RoutedAgent,
        SingleThreadedAgentRuntime,
        TopicId,
        TypeSubscription,
        message_handler,
    )
except ImportError:
    HAVE_AUTOGEN = False
else:
    HAVE_AUTOGEN = True

    @dataclasses.dataclass
    class Mail:
        content: str

    class Peer(RoutedAgent):
        received = 0

        def __init__(self) -> None:
            super().__init__("a peer")

        @message_handler
        async def on_mail(self, message: Mail, ctx: MessageContext) -> None:
            Peer.received += 1


async def autogen_mail(senders: int, recipients: int, messages: int) -> float | None:
    if not HAVE_AUTOGEN:
        return None
    Peer.received = 0
    runtime = SingleThreadedAgentRuntime()
    await Peer.register(runtime, "peer", Peer)
    await runtime.add_subscription(TypeSubscription(topic_type="mail", agent_type="peer"))
    runtime.start()
    for r in range(recipients):  # create the agents before the clock starts
        await runtime.get(AgentId("peer", f"r{r}"))
    per_sender = messages // senders

    async def publish(me: int) -> None:
        for k in range(per_sender):
            topic = TopicId("mail", source=f"r{(me + k) % recipients}")
            await runtime.publish_message(Mail(f"m{k}"), topic)

    start = time.perf_counter()
    await asyncio.gather(*(publish(me) for me in range(senders)))
    await runtime.stop_when_idle()
    elapsed = time.perf_counter() - start
    assert Peer.received == per_sender * senders, Peer.received
    return per_sender * senders / elapsed


async def mail_part(messages: int, server_dsn: str | None) -> None:
    print(f"\n## mail: {messages:,} messages, durable (statekernel) vs in memory (AutoGen)\n")
    print(
        "| senders -> agents | store | stored msgs/s | delivered msgs/s "
        "| AutoGen in-memory msgs/s | delivered / AutoGen |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for senders, recipients in ((1, 1), (10, 10)):
        autogen = await autogen_mail(senders, recipients, messages)
        kinds = ["sqlite"] + (["postgres"] if server_dsn else [])
        for kind in kinds:
            stored, delivered = await statekernel_mail(
                kind, senders, recipients, messages, server_dsn
            )
            shown = "not installed" if autogen is None else f"{autogen:,.0f}"
            ratio = "" if autogen is None else f"{autogen / delivered:.1f}x slower"
            print(
                f"| {senders} -> {recipients} | {kind} | {stored:,.0f} | {delivered:,.0f} | "
                f"{shown} | {ratio} |"
            )


# -- team ----------------------------------------------------------------------------------------


async def team_part(agents: int, rounds: int) -> None:
    print(f"\n## team: {agents} agents, {rounds} rounds of one message and one step each\n")
    print("| store | agent steps/s | ms per step | kernel share of a step |")
    print("|---|---:|---:|---:|")
    for kind in ("memory", "sqlite"):
        with tempfile.TemporaryDirectory() as folder:
            async with stores(kind, Path(folder), None) as (profiles, threads):
                clock = ModelClock()
                team = AgentTeam(
                    {"peer": Role(model=clock)},
                    profile_store=profiles,
                    thread_store=threads,
                    mail_tool=False,
                )
                async with team:
                    ids = [team.spawn("peer", "start") for _ in range(agents)]
                    await team.run_until_idle()  # the tasks: not timed
                    clock.seconds, steps, elapsed = 0.0, 0, 0.0
                    for r in range(rounds):
                        for agent_id in ids:
                            await team.send("user", f"round {r}", to=agent_id)
                        start = time.perf_counter()
                        report = await team.run_until_idle()
                        elapsed += time.perf_counter() - start
                        steps += sum(a.steps for a in report.agents.values())
                    assert steps == agents * rounds, steps
                    share = 1 - clock.seconds / elapsed
                    print(
                        f"| {kind} | {steps / elapsed:,.0f} | {1000 * elapsed / steps:.2f} | "
                        f"{share:.1%} |"
                    )


class SendingModel:
    """A scripted model whose first answer of a run calls `send_message` to the agent's
    sink (a fresh random call id each time, as real models do), and whose second answers."""

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        last = request.messages[-1]
        if last.role == "tool" or ": to " not in last.content:  # answered, or its task
            return InferenceResponse("ok")
        me = last.content.rsplit(" ", 1)[-1]
        call = ToolCall(
            f"call_{uuid.uuid4().hex[:12]}", "send_message", {"content": "hi", "to": f"sink-{me}"}
        )
        return InferenceResponse("", tool_calls=(call,))


async def tool_part(agents: int, rounds: int) -> None:
    print(f"\n## tool: {agents} agents, {rounds} rounds of one send through send_message each\n")
    print("| store | agent steps/s | ms per step |")
    print("|---|---:|---:|")
    for kind in ("memory", "sqlite"):
        with tempfile.TemporaryDirectory() as folder:
            async with stores(kind, Path(folder), None) as (profiles, threads):
                team = AgentTeam(
                    {"sender": Role(model=SendingModel()), "sink": Role(model=ModelClock())},
                    profile_store=profiles,
                    thread_store=threads,
                    local_roles=("sender",),
                )
                async with team:
                    ids = [f"a{n}" for n in range(agents)]
                    for agent_id in ids:
                        team.spawn("sink", "wait", agent_id=f"sink-{agent_id}")
                        team.spawn("sender", "start", agent_id=agent_id)
                    await team.run_until_idle()  # the tasks: not timed
                    steps, elapsed = 0, 0.0
                    for r in range(rounds):
                        for agent_id in ids:
                            await team.send("user", f"round {r}: to {agent_id}", to=agent_id)
                        start = time.perf_counter()
                        report = await team.run_until_idle()
                        elapsed += time.perf_counter() - start
                        steps += sum(a.steps for a in report.agents.values())
                    assert steps == 2 * agents * rounds, steps
                    print(f"| {kind} | {steps / elapsed:,.0f} | {1000 * elapsed / steps:.2f} |")


async def main(args: argparse.Namespace) -> None:
    messages = 400 if args.quick else args.messages
    if args.only in (None, "team"):
        await team_part(100, 2 if args.quick else args.rounds)
    if args.only in (None, "tool"):
        await tool_part(100, 2 if args.quick else args.rounds)
    if args.only in (None, "mail"):
        try:
            with throwaway_postgres(durable=True) as server:
                await mail_part(messages, server.dsn)
        except PostgresUnavailable as error:
            print(f"(PostgreSQL skipped: {error})")
            await mail_part(messages, None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["mail", "team", "tool"])
    asyncio.run(main(parser.parse_args()))
