"""A merge strategy means the same in a process and across processes.

Two hooks of one phase writing a key race inside one kernel; two kernels saving one thread
race across processes. A strategy that lets both writes stand in a phase (the ops
concatenate) lets both saves stand (the later one rebases); one that claims its key in a
phase (the later hook re-runs on a fresh snapshot) refuses the later save (a
`RevisionConflict`, and the caller runs again on the newer state). Every `MergeStrategy`
member is checked both ways, on a real SQLite file and a second Python process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sample_keys import TOTALS
from samples import Hook, Keys, read

from statekernel import (
    Kernel,
    MergeStrategy,
    Phase,
    PhaseContext,
    RevisionConflict,
    StateCommand,
)
from statekernel.stores import SqliteThreadStore

OTHER_PROCESS = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[3])
    from sample_keys import TOTALS
    from samples import Keys
    from statekernel import Kernel, MergeStrategy, StateCommand
    from statekernel.stores import SqliteThreadStore

    async def main(path, strategy):
        total = TOTALS[MergeStrategy[strategy]]
        async with SqliteThreadStore(path) as store:
            run = await Kernel([Keys(total)], thread_store=store).start_run("t")
            await run.submit(StateCommand().update(total, 1))
            await run.finish()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def _in_a_phase(strategy: MergeStrategy) -> tuple[bool, int]:
    """Two hooks of one phase add 1 each: whether one was re-run, and the total."""
    total = TOTALS[strategy]

    def add(ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(total, 1)

    hooks = [Hook(name, Phase.STEP_START, add) for name in ("first", "second")]
    run = await Kernel([Keys(total), *hooks]).start_run("t")
    report = await run.run_phase(Phase.STEP_START)
    assert report.reruns in ((), ("second",))
    return bool(report.reruns), run.snapshot.get(total)


async def _across_processes(strategy: MergeStrategy, path: Path) -> tuple[bool, bool, int]:
    """A run adds 1 while another process saves the thread with 1 added: whether the run's
    save conflicted, whether it rebased, and the total once a conflicted run ran again."""
    total = TOTALS[strategy]
    async with SqliteThreadStore(path) as store:
        run = await Kernel([Keys(total)], thread_store=store).start_run("t")
        await run.submit(StateCommand().update(total, 1))
        other = subprocess.run(  # saves the thread while this run is open
            [
                sys.executable,
                "-c",
                OTHER_PROCESS,
                str(path),
                strategy.name,
                str(Path(__file__).parent),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert other.returncode == 0, other.stderr
        conflicted = False
        try:
            await run.checkpoint()
        except RevisionConflict:
            conflicted = True
            await run.abandon()
            again = await Kernel([Keys(total)], thread_store=store).start_run("t")
            await again.submit(StateCommand().update(total, 1))
            await again.finish()
        else:
            await run.finish()
        reader = Kernel([Keys(total)], thread_store=store)
        assert (await reader.verify("t")).ok
        return conflicted, bool(run.rebases), await read(reader, "t", total)


@pytest.mark.slow  # a process for each strategy
@pytest.mark.parametrize("strategy", list(MergeStrategy), ids=lambda strategy: strategy.name)
async def test_a_strategy_merges_in_a_phase_as_it_does_across_processes(
    strategy: MergeStrategy, tmp_path: Path
) -> None:
    rerun, phase_total = await _in_a_phase(strategy)
    conflicted, rebased, saved_total = await _across_processes(strategy, tmp_path / "shared.db")
    assert rerun == conflicted == strategy.claims_key  # claims: serialised both ways
    assert rebased == strategy.rebases == (not strategy.claims_key)  # commutes: merged both ways
    assert phase_total == saved_total == 2  # either way, both writers' updates land


@pytest.mark.parametrize("strategy", list(MergeStrategy), ids=lambda strategy: strategy.name)
def test_what_a_strategy_does_cannot_be_changed(strategy: MergeStrategy) -> None:
    """Every kernel in the process reads the same member: nobody may redefine it."""
    for name in ("claims_key", "rebases"):
        with pytest.raises(
            AttributeError, match=f"MergeStrategy.{strategy.name}.{name} is read-only"
        ):
            setattr(strategy, name, not getattr(strategy, name))
        with pytest.raises(AttributeError, match="read-only"):
            delattr(strategy, name)
    assert strategy.claims_key is not strategy.rebases
