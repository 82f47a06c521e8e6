"""A deadline for each test while `make mutation` runs one mutant's tests.

A mutant can turn a loop endless (the codec's type walk, Vector's slicing). mutmut stops
such a run only after about three times the covering tests' whole time: up to half an hour
for a function most of the suite covers, per mutant. Here each test gets its own deadline
instead, a few times what it took in mutmut's clean run plus half a minute, after which it
fails with `MutantDeadline`: the mutant counts as killed (a hang a test catches), as it would
after mutmut's own timeout, only sooner. Outside a mutation run nothing is armed.

The error is a BaseException so that code under test which catches Exception (a hook's
failure becomes a `HookFailed`) cannot swallow it; it fires again every few seconds in case
something swallows it anyway. A test that still has not ended after a few more tries (stuck
where no exception reaches, such as an event loop's shutdown waiting for a worker thread)
ends the process with exit status 1, which mutmut also counts as killed.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Generator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

_SLACK_S = 30.0
_TIMES = 5.0
_UNKNOWN_S = 180.0  # a test mutmut has no time for: three times the slowest one's
_AGAIN_S = 5.0
_TRIES = 4


class MutantDeadline(BaseException):
    """A test ran past its deadline under a mutant: the mutant made it hang."""


def _durations() -> dict[str, float]:
    """Each test's time in mutmut's clean run (`mutants/mutmut-stats.json`), by node id."""
    for folder in (Path.cwd(), Path.cwd() / "mutants"):
        stats = folder / "mutmut-stats.json"
        if stats.is_file():
            durations: dict[str, float] = json.loads(stats.read_bytes())["duration_by_test"]
            return durations
    return {}


_cache: dict[str, float] | None = None


def _deadline(nodeid: str) -> float:
    global _cache
    if _cache is None:
        _cache = _durations()
    took = _cache.get(nodeid)
    return _UNKNOWN_S if took is None else _SLACK_S + _TIMES * took


_fired = 0


def _expired(signum: int, frame: FrameType | None) -> None:
    global _fired
    _fired += 1
    if _fired > _TRIES:
        os._exit(1)
    raise MutantDeadline("the test ran past its deadline under a mutant")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[Any]:
    """Arm a deadline for `item` while mutmut runs a mutant's tests."""
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return (yield)
    global _fired
    _fired = 0
    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, _deadline(item.nodeid), _AGAIN_S)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
