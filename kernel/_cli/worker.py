"""`statekernel worker APP --store DB`: one process serving a team until told to stop.

`APP` (`module:attr`) is the user's factory: given the `Stores` the command opened on `DB`,
it returns the `AgentTeam` (or an awaitable of it), built as in the application itself, so
the worker runs the same roles, models and tools. The command enters the team and serves it
(`team.serve`); SIGTERM or SIGINT sets the stop, the worker drains (each running agent ends
its step and saves, the leases are released), and the command exits 0. A second signal
while draining is not special: draining is bounded by one step of each agent.

It says when it starts and when it stopped on standard error, one line each, and the
statekernel logger's warnings go there too (an outage, a failed run).

The process is the worker's own, so it tunes Python's cyclic garbage collector for serving
(`GEN0_THRESHOLD`, `gc.freeze`): with the default threshold a worker holding 1,000 agents
spent about half its CPU in collections whose cost grows with every agent it holds.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import signal
import sys
from collections.abc import Sequence

from statekernel import AgentTeam, StateError

from .application import load_application
from .extensions import store_backends

__all__ = ["CannotServe", "worker"]


GEN0_THRESHOLD = 50_000
"""Allocations between two young-generation collections in a worker (Python's default is
700; an application that set a higher one keeps it). Every step of every agent allocates
thousands of short-lived objects, and each collection also walks whatever the step left
alive; measured on 1,000 agents (`benchmarks/team_workers.py`, scale): collections took
4.8 s of 10.4 s of CPU at the default, 0.6 s at this threshold, for 3 % more peak memory."""


def tune_collector() -> None:
    """Set the garbage collector up for a long-lived serving process: what exists once the
    application is built (modules, classes, the team) is frozen out of every collection,
    and young collections come every `GEN0_THRESHOLD` allocations."""
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, GEN0_THRESHOLD), middle, old)


class CannotServe(StateError):
    """The application given to `statekernel worker` is not a team factory, or the team
    it makes cannot be served as asked."""


async def worker(app: str, db: str, roles: Sequence[str] | None) -> int:
    factory = load_application(app)
    if not callable(factory):
        raise CannotServe(
            f"{app!r} is {type(factory).__name__} {factory!r}, not a factory: give a function "
            f"that takes the Stores and returns the AgentTeam"
        )
    backends = store_backends()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("statekernel worker: %(message)s"))
    logger = logging.getLogger("statekernel")
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    try:
        async with backends.open_stores(db) as stores:
            try:
                made = factory(stores)
                team = await made if inspect.isawaitable(made) else made
            except Exception as error:
                raise CannotServe(
                    f"{app!r} raised {type(error).__name__} when called with the Stores: {error}"
                ) from error
            if not isinstance(team, AgentTeam):
                raise CannotServe(
                    f"{app!r} returned {type(team).__name__} {team!r}, not an AgentTeam: the "
                    f"factory takes the Stores and returns the team to serve"
                )
            if roles:
                try:
                    team._limit_roles(roles)
                except StateError as error:
                    raise CannotServe(str(error)) from error
            tune_collector()
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop.set)
            async with team:
                serving = asyncio.ensure_future(team.serve(stop=stop))
                started = asyncio.ensure_future(team._serving.wait())  # its first beat landed
                await asyncio.wait({serving, started}, return_when=asyncio.FIRST_COMPLETED)
                started.cancel()
                if not serving.done():
                    print(
                        f"statekernel worker: serving team {team.team_id!r} on "
                        f"{backends.redacted(db)} as worker {team.worker_id}; SIGTERM or "
                        f"SIGINT stops it",
                        file=sys.stderr,
                        flush=True,
                    )
                report = await serving
            ran = sum(a.runs for a in report.agents.values())
            print(
                f"statekernel worker: stopped after {ran} runs of {len(report.agents)} agents",
                file=sys.stderr,
                flush=True,
            )
    finally:
        logger.removeHandler(handler)
    return 0
