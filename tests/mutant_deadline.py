"""A deadline for each test while `make mutation` runs one mutant's tests.

A mutant can turn a loop endless (the codec's type walk, Vector's slicing). mutmut stops
such a run only after about three times the covering tests' whole time: up to half an hour
for a function most of the suite covers, per mutant. Here each test gets its own deadline
instead: five times what it took in mutmut's clean run, plus half a minute (its setup and
teardown, where servers start, two minutes each). Past it the test fails with
`MutantDeadline`, and the mutant counts as killed (a hang a test catches), as it would
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
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import pytest

_SLACK_S = 30.0
_TIMES = 5.0
_FIXTURES_S = 120.0  # a test's setup or teardown: a PostgreSQL server or a browser starts there
_AGAIN_S = 5.0
_TRIES = 4


class MutantDeadline(BaseException):
    """A test ran past its deadline under a mutant: the mutant made it hang."""


_durations: dict[str, float] | None = None


def clean_run_durations() -> dict[str, float]:
    """Each test's time in mutmut's clean run (`mutants/mutmut-stats.json`, its call
    phase only), by node id; empty when there is none to read. Read once per process: the
    file holds every test's stats, megabytes of JSON."""
    global _durations
    if _durations is None:
        _durations = _read_durations()
    return _durations


def _read_durations() -> dict[str, float]:
    for folder in (Path.cwd(), Path.cwd() / "mutants"):
        try:
            durations = json.loads((folder / "mutmut-stats.json").read_bytes())
        except (OSError, ValueError):
            continue
        found = durations.get("duration_by_test") if isinstance(durations, dict) else None
        if isinstance(found, dict):
            return {name: float(took) for name, took in found.items()}
    return {}


def _call_deadline(nodeid: str) -> float:
    durations = clean_run_durations()
    took = durations.get(nodeid)
    if took is None:  # a test the clean run did not time: as long as the slowest may take
        took = max(durations.values(), default=60.0)
    return _SLACK_S + _TIMES * took


_fired = 0


def _expired(signum: int, frame: FrameType | None) -> None:
    global _fired
    _fired += 1
    if _fired > _TRIES:
        os._exit(1)  # skips fixture teardown, as mutmut's own kill does
    raise MutantDeadline("the test ran past its deadline under a mutant")


def under_mutant() -> bool:
    """Whether mutmut is running a mutant's tests (it names the mutant in the environment)."""
    return "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", "")


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Armed only while mutmut runs a mutant's tests; elsewhere nothing changes."""
    if not under_mutant():
        yield
        return
    global _fired
    _fired = 0
    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds, _AGAIN_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _deadline(_FIXTURES_S):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _deadline(_call_deadline(item.nodeid)):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    with _deadline(_FIXTURES_S):
        return (yield)
