"""Under a mutant, the covering tests run fastest module first.

mutmut runs a mutant's covering tests with `-x`, so a mutant is decided at its first failing
test. It hands them over in a set's order, so that first failure often comes only after a
PostgreSQL fault trial or a test of killed processes that spends a minute waiting on
servers. Ordered by their modules' time in mutmut's clean run, fastest first, a mutant that
a quick test kills is decided in seconds; one that survives still runs every test. A
module's tests stay together and in their order, so a fixture a module shares is set up once.
Outside a mutation run nothing changes.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from mutant_deadline import clean_run_durations, under_mutant


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not under_mutant():
        return
    durations = clean_run_durations()
    module_time: defaultdict[str, float] = defaultdict(float)
    for item in items:
        module_time[item.nodeid.partition("::")[0]] += durations.get(item.nodeid, 0.0)
    items.sort(key=lambda item: module_time[item.nodeid.partition("::")[0]])  # stable
