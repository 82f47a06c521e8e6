"""AgentTeam workers (`statekernel worker` processes serving one team): how fast a letter
wakes its recipient in another process, durable messages per second beside AutoGen Core's
in-memory runtime, and how agent steps per second grow with workers, in one run.

Every statekernel figure comes from real processes: `statekernel worker
team_workers:make_team --store DB` started as an operator starts it, this process sending
from outside as an application's front end would. The workers' model is scripted (no
network) and writes what it sees to a log file this process reads.

**wake** (PostgreSQL, and SQLite for contrast): one worker serves one agent; this process
sends it `--wakes` letters (200), one every 50 ms, each stamped with the wall-clock time
just before `team.send`. The worker's model notes, when asked, how long ago the newest stamp
was sent: the latency from the send in one process to the recipient's step (its model call,
after STEP_START and BEFORE_INFERENCE) in another. p50, p99 and max.

**mail**: M messages (`--messages`, 4,000) from 10 senders (tasks of this process) to 10
agents, served by one worker process, durable: from the first send until every message is
in a recipient's history, saved. Beside it AutoGen Core's `SingleThreadedAgentRuntime` (in
memory, nothing stored), the same M messages published by 10 concurrent publishers to 10
agents (`team_mailbox.py`'s measurement), in the same run.

**scale** (PostgreSQL): 1,000 agents (`--agents`), a model that waits 50 ms per call, each
agent told to take 10 steps (nine calls of a no-op tool, then an answer); served by 1, 2 and 4
worker processes. Agent steps per second from the letters' sending until every agent
answered, with the CPU each worker used.

Run: .venv-bench/bin/python benchmarks/team_workers.py [--quick] [--only wake|mail|scale]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from statekernel import (
    AgentTeam,
    InferenceRequest,
    InferenceResponse,
    Message,
    Role,
    Stores,
    ToolCall,
)
from statekernel.stores import open_stores

HERE = Path(__file__).parent

# -- the application the workers serve ------------------------------------------------------


class BenchModel:
    """Notes the newest stamp's age (wake), the mail it holds (mail), and takes the steps
    its task asks for (scale), writing each to the log file named by BENCH_LOG."""

    def __init__(self, log: Path, delay: float) -> None:
        self._log = log.open("a", buffering=1)
        self._delay = delay

    async def __call__(self, request: InferenceRequest) -> InferenceResponse:
        now = time.time_ns()
        if self._delay:
            await asyncio.sleep(self._delay)
        messages = request.messages
        texts = [text_of(m) for m in messages]
        stamps = [t for t in texts if "stamp " in t]
        if stamps:
            sent = int(stamps[-1].rsplit("stamp ", 1)[1])
            self._log.write(f"wake {now - sent}\n")
            return InferenceResponse("ok")
        task = next((t for t in reversed(texts) if t.startswith("steps ")), None)
        if task is not None:
            wanted = int(task.split()[1])
            taken = sum(1 for m in messages if m.role == "tool")
            if taken + 1 < wanted:
                call = ToolCall(f"call_{uuid.uuid4().hex[:12]}", "noop", {})
                return InferenceResponse("", tool_calls=(call,))
            self._log.write(f"done {task}\n")
            return InferenceResponse("done")
        mail = sum(1 for m in messages if AgentTeam.sender_of(m) is not None)
        self._log.write(f"mail {messages[0].content} {mail}\n")
        return InferenceResponse("ok")


def text_of(message: Message) -> str:
    """A message's text, without the header a letter starts with."""
    return message.content.split("\n", 1)[-1] if AgentTeam.sender_of(message) else message.content


def noop(arguments: dict[str, Any], ctx: Any) -> str:
    return "ok"


def make_team(stores: Stores) -> AgentTeam:
    """The factory `statekernel worker` is given (and this process's own team handle)."""
    model = BenchModel(Path(os.environ["BENCH_LOG"]), float(os.environ.get("BENCH_DELAY", 0)))
    return AgentTeam(
        {"peer": Role(model=model, tools={"noop": noop})},
        stores=stores,
        team_id=os.environ["BENCH_TEAM"],
        mail_tool=False,
        max_steps=10,
    )


# -- workers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def workers(db: str, count: int, env: dict[str, str]) -> Iterator[list[subprocess.Popen[str]]]:
    """`count` `statekernel worker` processes serving, stopped (SIGTERM) at the end."""
    command = [sys.executable, "-m", "statekernel", "worker", "team_workers:make_team"]
    started = [
        subprocess.Popen(
            [*command, "--store", db],
            cwd=HERE,
            env={**os.environ, **env},
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    try:
        for process in started:
            assert process.stderr is not None
            line = process.stderr.readline()
            assert "serving team" in line, line + process.stderr.read()
        yield started
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.wait(timeout=120)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Log:
    """The workers' log file, read as it grows."""

    def __init__(self, path: Path) -> None:
        path.touch()
        self._file = path.open()
        self._partial = ""

    def new_lines(self) -> list[str]:
        text = self._partial + self._file.read()
        lines = text.split("\n")
        self._partial = lines.pop()
        return lines


@contextlib.asynccontextmanager
async def team_handle(db: str, env: dict[str, str]) -> AsyncIterator[AgentTeam]:
    os.environ.update(env)
    async with open_stores(db) as stores, make_team(stores) as team:
        yield team


# -- wake ------------------------------------------------------------------------------------


async def wake_part(db: str, kind: str, wakes: int, folder: Path) -> None:
    log_path = folder / f"wake-{kind}.log"
    env = {"BENCH_TEAM": f"wake-{uuid.uuid4().hex[:6]}", "BENCH_LOG": str(log_path)}
    log = Log(log_path)
    with workers(db, 1, env):
        async with team_handle(db, env) as team:
            team.spawn("peer", "hello", agent_id="a")
            assert await team.wait_idle(timeout=60)
            for n in range(wakes):
                await team.send("user", f"n{n} stamp {time.time_ns()}", to="a")
                await asyncio.sleep(0.05)
            assert await team.wait_idle(timeout=60)
    latencies = sorted(
        int(line.split()[1]) / 1e6 for line in log.new_lines() if line.startswith("wake ")
    )
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(f"| {kind} | {len(latencies)} | {p50:.1f} | {p99:.1f} | {latencies[-1]:.1f} |")


# -- mail ------------------------------------------------------------------------------------


async def mail_part(db: str, kind: str, messages: int, folder: Path) -> float:
    log_path = folder / f"mail-{kind}.log"
    env = {"BENCH_TEAM": f"mail-{uuid.uuid4().hex[:6]}", "BENCH_LOG": str(log_path)}
    log = Log(log_path)
    senders = recipients = 10
    per_sender = messages // senders
    with workers(db, 1, env):
        async with team_handle(db, env) as team:
            targets = [team.spawn("peer", f"r{n}", agent_id=f"r{n}") for n in range(recipients)]
            assert await team.wait_idle(timeout=60)
            log.new_lines()
            seen: dict[str, int] = {}

            async def send_all(me: int) -> None:
                for k in range(per_sender):
                    await team.send(f"s{me}", f"m{k}", to=targets[(me + k) % recipients])

            start = time.perf_counter()
            sending = asyncio.gather(*(send_all(me) for me in range(senders)))
            while sum(seen.values()) < per_sender * senders:
                for line in log.new_lines():
                    if line.startswith("mail "):
                        _, who, count = line.split()
                        seen[who] = max(seen.get(who, 0), int(count))
                await asyncio.sleep(0.005)
            elapsed = time.perf_counter() - start
            await sending
    return per_sender * senders / elapsed


# -- scale -----------------------------------------------------------------------------------


async def scale_part(db: str, agents: int, counts: list[int], folder: Path) -> None:
    steps_each = 10
    print(f"\n## scale: {agents} agents, {steps_each} steps each, a model of 50 ms\n")
    print("| workers | agent steps/s | vs 1 worker | CPU s per worker |")
    print("|---:|---:|---:|---|")
    base = None
    for count in counts:
        log_path = folder / f"scale-{count}.log"
        team_id = f"scale-{count}-{uuid.uuid4().hex[:6]}"
        env = {"BENCH_TEAM": team_id, "BENCH_LOG": str(log_path), "BENCH_DELAY": "0.05"}
        log = Log(log_path)
        async with team_handle(db, env) as team:
            ids = [f"a{n}" for n in range(agents)]
            for agent_id in ids:
                team.spawn("peer", "wait", agent_id=agent_id)
            await team.wait_idle(timeout=0)  # records the spawns; nobody serves yet
        with workers(db, count, env) as running:
            async with team_handle(db, env) as team:
                assert await team.wait_idle(timeout=600)  # each agent's first run
                log.new_lines()
                cpu_before = [cpu_seconds(p.pid) for p in running]
                start = time.perf_counter()

                async def send(part: list[str]) -> None:
                    for agent_id in part:
                        await team.send("user", f"steps {steps_each}", to=agent_id)

                await asyncio.gather(*(send(ids[k::10]) for k in range(10)))
                done = 0
                while done < agents:
                    done += sum(1 for line in log.new_lines() if line.startswith("done "))
                    await asyncio.sleep(0.01)
                elapsed = time.perf_counter() - start
                cpu = [cpu_seconds(p.pid) - b for p, b in zip(running, cpu_before, strict=True)]
        rate = agents * steps_each / elapsed
        base = base or rate
        shown = ", ".join(f"{c:.1f}" for c in cpu)
        print(f"| {count} | {rate:,.0f} | {rate / base:.2f}x | {shown} |")


# -- the run ---------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE))
    from team_mailbox import autogen_mail  # the same measurement as the mailbox benchmark

    from statekernel.testing.postgres import PostgresUnavailable, throwaway_postgres

    wakes = 50 if args.quick else args.wakes
    messages = 1000 if args.quick else args.messages
    agents = 200 if args.quick else args.agents
    with tempfile.TemporaryDirectory() as temp, contextlib.ExitStack() as stack:
        folder = Path(temp)
        try:
            server = stack.enter_context(throwaway_postgres(durable=True))
            dsn: str | None = server.dsn
        except PostgresUnavailable as error:
            print(f"(PostgreSQL skipped: {error})")
            dsn = None
        dbs = [("sqlite", str(folder / "team.db"))] + ([("postgres", dsn)] if dsn else [])
        if args.only in (None, "wake"):
            print(f"\n## wake: {wakes} letters, one every 50 ms, to an agent in another process\n")
            print("| store | letters | p50 ms | p99 ms | max ms |")
            print("|---|---:|---:|---:|---:|")
            for kind, db in dbs:
                await wake_part(db, kind, wakes, folder)
        if args.only in (None, "mail"):
            print(f"\n## mail: {messages:,} messages, 10 senders -> 10 agents, one worker\n")
            print("| side | msgs/s |")
            print("|---|---:|")
            autogen = await autogen_mail(10, 10, messages)
            print(f"| AutoGen Core, in memory | {autogen or 0:,.0f} |")
            for kind, db in dbs:
                rate = await mail_part(db, kind, messages, folder)
                print(f"| statekernel worker, durable, {kind} | {rate:,.0f} |")
        if args.only in (None, "scale") and dsn is not None:
            await scale_part(dsn, agents, [1, 2, 4], folder)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wakes", type=int, default=200)
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["wake", "mail", "scale"])
    asyncio.run(main(parser.parse_args()))
