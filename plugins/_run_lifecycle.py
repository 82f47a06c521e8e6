"""Run lifecycle: where a run is (phase, status, step) and how much work is still pending.

Other plugins need these facts constantly ("only nudge the model after step 3", "do not end
while work is pending") and should not each keep their own counters. The facts live in run
keys, so they reset at every run start, are read synchronously from any snapshot, and change
only through the commit loop like everything else.

Timing, the one subtlety. All hooks of a phase read the snapshot taken when the phase began,
and this plugin's own hook for that phase commits with theirs. So inside a hook of phase X
the keys still describe the end of the previous phase; everything that runs after X's gather
round -- X's scheduled actions, tool gates (TOOL_GATE), tools (BEFORE_TOOL_EXECUTE), request
transforms (BEFORE_INFERENCE), effect handlers, `RunResult.snapshot` -- sees X. `lifecycle_of(ctx)`
gives every reader the view as of its own phase, whichever side of the commit it sits on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import msgspec

from statekernel import (
    MergeStrategy,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    Snapshot,
    StateCommand,
    StateKey,
)

__all__ = [
    "Lifecycle",
    "PendingWork",
    "RunLifecycle",
    "RunPhase",
    "RunStatus",
    "StepCount",
    "lifecycle_of",
]

Status = Literal["idle", "running", "done"]


class RunPhase(StateKey[Phase | None, Phase]):
    """The phase the run is in (None until RUN_START commits).

    Run key `"run_lifecycle.phase"`: the `Phase` the run is in, registered by
    `RunLifecycle`.
    """

    key = "run_lifecycle.phase"
    default = None


class RunStatus(StateKey[Status, Status]):
    """Status: "idle" before RUN_START, "running" from it on, "done" once RUN_END commits.

    Run key `"run_lifecycle.status"`, registered by `RunLifecycle`. RUN_END also runs after
    a failed run, so "done" says the run ended, not that it succeeded: that is
    `RunResult.outcome`. A suspended run stays "running"; use
    `statekernel.run_status(snapshot)` to see that it waits for a decision.
    """

    key = "run_lifecycle.status"
    default = "idle"


class StepCount(StateKey[int, int]):
    """Steps started in this run (1 during the first step). Commutative: ops add up.

    Run key `"run_lifecycle.steps"`, COMMUTATIVE, registered by `RunLifecycle`.
    """

    key = "run_lifecycle.steps"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class PendingWork(StateKey[int, int]):
    """Units of asynchronous work started and not yet finished, from any plugin.

    Run key `"run_lifecycle.pending_work"`, COMMUTATIVE, registered by `RunLifecycle`. Add
    `+n` when work starts and `-n` when it ends (`cmd.update(PendingWork, +n / -n)`). It is
    commutative, so any number of hooks may adjust it in one phase without a conflict. A
    total below zero means some plugin finished work it never started: the commit is
    rejected with `CommitRejected`, which names the plugin, instead of a negative count
    hiding the bug. See [counting pending work](howto-run-lifecycle.md#counting-pending-work).
    """

    key = "run_lifecycle.pending_work"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update

    @staticmethod
    def validate(value: int) -> None:
        if value < 0:
            raise ValueError(
                f"pending work would drop to {value}: a plugin subtracted work it never "
                f"added. Subtract only what you added (cmd.update(PendingWork, -n) after +n)."
            )


class Lifecycle(msgspec.Struct, frozen=True):
    """The run's lifecycle as of one phase, from `lifecycle_of`.

    `Lifecycle(phase, status, step, pending_work)`: a frozen view of the four keys
    (`RunPhase`, `RunStatus`, `StepCount`, `PendingWork`).
    """

    phase: Phase | None
    status: Status
    step: int
    pending_work: int


def lifecycle_of(source: PhaseContext | Snapshot) -> Lifecycle:
    """The lifecycle as of the reader's phase.

    Given a `Snapshot`: the keys as committed. Given a hook's `PhaseContext`: the view as of
    `ctx.phase`, even before the lifecycle's own commit for that phase lands. While that
    commit is not in the snapshot yet (the gather round of that phase), the view is moved
    forward to `ctx.phase` exactly as that commit will move it, so a STEP_START hook of step
    3 reads step 3, not 2.

    See [reading it](howto-run-lifecycle.md#reading-it-lifecycle_of).
    """
    if isinstance(source, PhaseContext):
        snapshot, phase = source.snapshot, source.phase
    else:
        snapshot, phase = source, None
    view = Lifecycle(
        phase=snapshot.get(RunPhase),
        status=snapshot.get(RunStatus),
        step=snapshot.get(StepCount),
        pending_work=snapshot.get(PendingWork),
    )
    if phase is None or view.phase is phase:
        return view
    return Lifecycle(
        phase=phase,
        status=_STATUS_AT.get(phase, view.status),
        step=view.step + (phase is Phase.STEP_START),
        pending_work=view.pending_work,
    )


_STATUS_AT: dict[Phase, Status] = {Phase.RUN_START: "running", Phase.RUN_END: "done"}


class RunLifecycle(Plugin):
    """Keeps RunPhase, RunStatus and StepCount current and registers PendingWork.

    `RunLifecycle()`: plugin (id `"run_lifecycle"`). It registers the four keys
    (`RunPhase`, `RunStatus`, `StepCount`, `PendingWork`) and keeps the first three current,
    using one sync hook per phase, each returning a one- or two-op command: no task, no
    await, no read of the snapshot.

    See [how-to: run lifecycle](howto-run-lifecycle.md).
    """

    id = "run_lifecycle"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(RunPhase)
        registrar.register_key(RunStatus)
        registrar.register_key(StepCount)
        registrar.register_key(PendingWork)
        for phase in Phase:
            registrar.register_phase_hook(phase, _hook_for(phase))


def _hook_for(phase: Phase) -> Callable[[PhaseContext], StateCommand]:
    if phase is Phase.RUN_START or phase is Phase.RUN_END:
        status = _STATUS_AT[phase]

        def enter_edge(ctx: PhaseContext) -> StateCommand:
            return StateCommand().update(RunPhase, phase).update(RunStatus, status)

        return enter_edge
    if phase is Phase.STEP_START:

        def enter_step(ctx: PhaseContext) -> StateCommand:
            return StateCommand().update(RunPhase, phase).update(StepCount, 1)

        return enter_step

    def enter(ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(RunPhase, phase)

    return enter
