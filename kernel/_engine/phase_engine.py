"""The phase engine: gather, merge, commit, effects, actions -- one phase at a time.

Running a phase:

1. Gather: every active hook of the phase runs against the same snapshot (sync hooks are
   called in place, async hooks concurrently). Each returns a StateCommand or None.
2. Merge in registration order. Commands that write disjoint EXCLUSIVE keys commit together
   (COMMUTATIVE ops concatenated); a command that overlaps one already kept is deferred and
   its hook re-run alone on a fresh snapshot. A gather round is atomic: its commits are
   staged and published together, so a failure anywhere in it commits nothing.
3. Effects of each committed command go to their handlers with the post-commit snapshot.
   A failing handler is logged and counted, never fatal.
4. Scheduled actions due in this phase run, each on a fresh snapshot, each committing its
   own command, round after round until none are left (or `max_phase_rounds` is exceeded).

Tool commands and direct submissions go through the same commit path (`submit`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from types import CoroutineType
from typing import Any

import msgspec

from .._errors import (
    HookFailed,
    PhaseRunLoopExceeded,
    ToolResultTooDeep,
    UnknownActionHandler,
    UnknownEffectHandler,
    ValueTooDeep,
    cause_text,
)
from .._profile.access import BufferedProfileAccess, ProfileAccess
from .._values.codec import CODEC_ERRORS, enc_hook
from .._values.commands import StateCommand
from .._values.dead_letters import DeadLetter, DeadLetters, Retried, letter_for, payload_text
from .._values.nesting import MAX_NESTING_DEPTH, nested_deeper
from .._values.phases import Phase
from .._values.run_events import EffectRun
from .._values.specs import ScheduledAction
from .._values.toolgate import Block, GateDecision, SetResult, Suspend, decide
from .._values.tools import ToolCall
from .commit import LiveState
from .context import PhaseContext
from .invoke import call, checked, outcome, reraise
from .merge import Contribution, Partition, partition
from .plugin import Components, Registered
from .snapshot import Snapshot

logger = logging.getLogger("statekernel")

ContextFactory = Callable[[Phase, Snapshot, Mapping[str, Any]], PhaseContext]
"""Builds the context a hook sees for a phase, a snapshot and the phase's fields."""


class PhaseReport(msgspec.Struct, frozen=True, weakref=True):
    """What one phase (or one submission, `phase=None`) did.

    `PhaseReport(phase, revision, commits=0, conflicts=0, effects_dispatched=0,
    effects_failed=0, actions_run=0, hooks_run=(), reruns=(), effects=(), actions=())`.
    `str(report)` gives a one-line summary.
    See [concepts: the phase loop](concepts.md#the-phase-loop).

    (A frozen msgspec Struct, like PhaseContext: one is built for every phase.)
    """

    phase: Phase | None
    """The `Phase`; `None` for a `submit`."""
    revision: int
    """The live revision afterwards."""
    commits: int = 0
    """Commits that moved the revision."""
    conflicts: int = 0
    """Hooks deferred and re-run because of an EXCLUSIVE overlap."""
    effects_dispatched: int = 0
    """Effects handed to handlers."""
    effects_failed: int = 0
    """How many of the dispatched effects' handlers raised."""
    actions_run: int = 0
    """Action handler calls."""
    hooks_run: tuple[str, ...] = ()
    """The plugin id of each hook call, re-runs included, in order."""
    reruns: tuple[str, ...] = ()
    """The plugin ids of the hooks re-run after an exclusive conflict, in order."""
    effects: tuple[EffectRun, ...] = ()
    """Each effect dispatched, as an [`EffectRun`](reference.md#statekernel.EffectRun): its
    key, and its failure if the handler raised."""
    actions: tuple[str, ...] = ()
    """The key of each scheduled action run, in order."""

    @property
    def round_hooks(self) -> tuple[str, ...]:
        """The plugin ids of the phase's round, in order: `hooks_run` without the re-runs.

        The re-runs come last in `hooks_run`."""
        hooks = self.hooks_run
        return hooks[: len(hooks) - len(self.reruns)] if self.reruns else hooks

    def __str__(self) -> str:
        name = self.phase.name if self.phase is not None else "submit"
        hooks = ", ".join(self.hooks_run) or "none"
        return (
            f"{name}: revision {self.revision}, {self.commits} commit(s), "
            f"{self.conflicts} conflict(s), {self.effects_dispatched} effect(s) "
            f"({self.effects_failed} failed), {self.actions_run} action(s); hooks run: {hooks}"
        )


class _Tally(msgspec.Struct, gc=False):
    """What a phase did so far, counted as it goes (a msgspec Struct: one per phase)."""

    commits: int = 0
    conflicts: int = 0
    effects: int = 0
    effects_failed: int = 0
    actions: int = 0
    hooks: tuple[str, ...] = ()  # the round's hooks, then each re-run
    reruns: tuple[str, ...] = ()
    effect_runs: tuple[EffectRun, ...] = ()
    action_keys: tuple[str, ...] = ()

    def report(self, phase: Phase | None, revision: int) -> PhaseReport:
        return PhaseReport(  # in field order: positional arguments take half the time
            phase,
            revision,
            self.commits,
            self.conflicts,
            self.effects,  # effects_dispatched
            self.effects_failed,
            self.actions,  # actions_run
            self.hooks,  # hooks_run
            self.reruns,
            self.effect_runs,  # effects
            self.action_keys,  # actions
        )


class PhaseEngine:
    """Runs the phases of one run against its live state.

    It owns the queue of scheduled actions waiting for a later phase. It is not reentrant:
    the run serialises calls into it.
    """

    def __init__(
        self,
        components: Components,
        state: LiveState,
        make_context: ContextFactory,
        *,
        allows: Callable[[str], bool],
        max_phase_rounds: int = 16,
        profile: ProfileAccess | None = None,
    ) -> None:
        self._components = components
        self._profile = profile
        self._state = state
        self._make_context = make_context
        self._allows = allows
        self._max_rounds = max_phase_rounds
        self._pending: list[tuple[ScheduledAction, str | None]] = []
        self._active: dict[Phase, tuple[Registered, ...]] = {}
        self._hook_names: dict[Phase, tuple[str, ...]] = {}

    @property
    def pending_actions(self) -> tuple[tuple[ScheduledAction, str | None], ...]:
        """Actions scheduled for a phase that has not run yet, with who scheduled them."""
        return tuple(self._pending)

    def restore_pending(self, pending: Sequence[tuple[ScheduledAction, str | None]]) -> None:
        """Put back actions saved with a suspended run, ahead of anything scheduled since."""
        self._pending[:0] = list(pending)

    def active_hooks(self, phase: Phase) -> tuple[Registered, ...]:
        hooks = self._active.get(phase)
        if hooks is None:
            hooks = tuple(h for h in self._components.hooks[phase] if self._allows(h.plugin))
            self._active[phase] = hooks
            self._hook_names[phase] = tuple(hook.plugin for hook in hooks)
        return hooks

    async def run_phase(self, phase: Phase, fields: Mapping[str, Any]) -> PhaseReport:
        state = self._state
        state.phase = phase
        hooks = self._active.get(phase)
        if hooks is None:
            hooks = self.active_hooks(phase)
        tally = _Tally()
        if hooks:
            context = self._make_context(phase, state.snapshot, fields)
            await self._gather_round(hooks, context, tally)
        if self._pending:
            await self._run_actions(phase, fields, tally)
        return tally.report(phase, state.revision)

    async def submit(
        self,
        command: StateCommand,
        origin: str | None = None,
        *,
        source: str = "submit",
        phase: Phase | None = None,
    ) -> PhaseReport:
        """Commit one command from outside a hook (a tool's, a caller's), through the same path.

        `source` is what the journal records it as (`"submit"`, `"tool:<name>"`), and
        `phase` the phase it belongs to (None: outside any)."""
        if not isinstance(command, StateCommand):
            raise TypeError(f"submit takes a StateCommand, got {command!r}")
        tally = _Tally()
        self._state.phase = phase
        contribution = Contribution(origin, command, source)
        self._check_handlers(contribution)
        before = self._state.revision
        snapshot = self._state.commit((contribution,))
        tally.commits += snapshot.revision != before
        await self._after_commit((contribution,), snapshot, tally)
        return tally.report(None, self._state.revision)

    async def tool_gate(
        self, fields: Mapping[str, Any]
    ) -> tuple[GateDecision | None, str | None, PhaseReport]:
        """Run the TOOL_GATE phase, then every active gate on the resulting snapshot; the
        decision, and the plugin whose gate made it."""
        report = await self.run_phase(Phase.TOOL_GATE, fields)
        context = self._make_context(Phase.TOOL_GATE, self._state.snapshot, fields)
        if self._profile is not None:
            context = msgspec.structs.replace(context, profile=self._profile.read_only())
        answers: list[tuple[str, GateDecision | None]] = []
        for gate in self._components.gates:
            if not self._allows(gate.plugin):
                continue
            answer = checked(
                await call(gate.function, context, owner=gate.plugin, phase=Phase.TOOL_GATE),
                (Block, Suspend, SetResult),
                owner=gate.plugin,
                phase=Phase.TOOL_GATE,
                what="a tool gate",
                expected="Block, Suspend, SetResult or None",
            )
            if isinstance(answer, Suspend) and answer.ticket is not None:
                _check_ticket(answer.ticket, gate.plugin, fields["tool_call"])
            elif isinstance(answer, SetResult):
                _check_set_result(answer.result, gate.plugin, fields["tool_call"])
            answers.append((gate.plugin, answer))
        decision = decide(answers)
        decided_by = next((plugin for plugin, a in answers if a is decision), None)
        return decision, decided_by if decision is not None else None, report

    # -- gather and merge ------------------------------------------------------------

    async def _gather_round(
        self, hooks: Sequence[Registered], context: PhaseContext, tally: _Tally
    ) -> None:
        """One round of a phase: call every hook on one snapshot, keep what they returned
        in registration order, commit it (re-running on a staged state the hooks whose
        commands overlap an earlier one's), then dispatch."""
        contexts = self._hook_contexts(context, len(hooks))
        phase = context.phase
        tally.hooks += self._hook_names[phase]
        results, waiting = _call_hooks(hooks, contexts, phase)
        if waiting:
            await _settle(hooks, results, waiting, phase)
        contributions, dispatches = self._kept(hooks, results, phase)
        if len(contributions) > 1:  # else nothing to partition
            split = partition(contributions)
            if split.deferred:
                owner_of = _owners(hooks, results, contributions)
                await self._settle_conflicts(split, owner_of, hooks, contexts, context, tally)
                return
        done: list[tuple[Sequence[Contribution], Snapshot]] = []
        if contributions:
            before = self._state.revision
            snapshot = self._state.commit(contributions)
            tally.commits += snapshot.revision != before
            done.append((contributions, snapshot))
        if dispatches or self._profile is not None:  # anything for `_after_commits` to do
            await self._after_commits(done, contexts, tally)

    def _kept(
        self, hooks: Sequence[Registered], results: Sequence[Any], phase: Phase
    ) -> tuple[list[Contribution], bool]:
        """The hooks' results as contributions, in registration order; and whether any
        carries effects or actions to dispatch after the commit (their handlers checked
        here). Results are checked only now, once every hook has been called and awaited,
        so that a hook's error outranks an earlier hook's wrong result."""
        contributions: list[Contribution] = []
        dispatches = False
        for hook, result in zip(hooks, results, strict=True):
            if result is None:
                continue
            contribution: Contribution | None
            if type(result) is StateCommand and result.patch.ops:  # the common case, inline
                contribution = Contribution(hook.plugin, result, hook.source)
                command = result
            else:
                contribution = self._contribution(hook, result, phase)  # checked
                if contribution is None:
                    continue
                command = contribution.command
            if command.scheduled_actions or command.effects:
                self._check_handlers(contribution)
                dispatches = True
            contributions.append(contribution)
        return contributions, dispatches

    def _hook_contexts(self, context: PhaseContext, count: int) -> list[PhaseContext]:
        """One context per hook: each hook gets its own profile buffer, so the writes of a
        hook that is deferred or fails can be dropped without touching anyone else's."""
        if self._profile is None:
            return [context] * count
        replace = msgspec.structs.replace
        return [replace(context, profile=self._profile.buffered()) for _ in range(count)]

    async def _settle_conflicts(
        self,
        split: Partition,
        owner_of: Mapping[int, Registered],
        hooks: Sequence[Registered],
        contexts: Sequence[PhaseContext],
        context: PhaseContext,
        tally: _Tally,
    ) -> None:
        """Commit what can commit together on a staged state, re-run each deferred hook
        alone on the staged state's fresh snapshot and commit its command, then publish the
        round at once and dispatch. (`owner_of` gives each contribution's hook by its id;
        `contexts` are the round's hooks', in order.)"""
        deferred_hooks = {id(owner_of[id(c)]) for c in split.deferred}
        kept_contexts = [
            ctx for hook, ctx in zip(hooks, contexts, strict=True) if id(hook) not in deferred_hooks
        ]
        staged = self._state.stage()
        done: list[tuple[Sequence[Contribution], Snapshot]] = [
            (split.kept, staged.commit(split.kept))
        ]
        rerun_contexts: list[PhaseContext] = []
        for contribution in split.deferred:
            hook = owner_of[id(contribution)]
            tally.conflicts += 1
            tally.hooks += (hook.plugin,)
            tally.reruns += (hook.plugin,)
            rerun_context = msgspec.structs.replace(context, snapshot=staged.snapshot)
            (fresh,) = self._hook_contexts(rerun_context, 1)
            results, waiting = _call_hooks((hook,), (fresh,), context.phase)
            if waiting:
                await _settle((hook,), results, waiting, context.phase)
            rerun_contexts.append(fresh)
            rerun = self._contribution(hook, results[0], context.phase)
            if rerun is not None:
                self._check_handlers(rerun)
                done.append(((rerun,), staged.commit((rerun,))))
        published = self._state.publish(staged)
        tally.commits += published
        await self._after_commits(done, [*kept_contexts, *rerun_contexts], tally)

    def _contribution(self, hook: Registered, result: Any, phase: Phase) -> Contribution | None:
        """The hook's result as a contribution, checked; None for nothing to commit or
        dispatch. (`_kept` takes a command with ops without asking: the common case.) Its
        command is the result itself, never a copy: `_owners` finds the hook by it."""
        command = checked(
            result,
            (StateCommand,),
            owner=hook.plugin,
            phase=phase,
            what="a phase hook",
            expected="a StateCommand or None",
        )
        if command is None or command.is_empty():
            return None
        return Contribution(hook.plugin, command, hook.source)

    def _check_handlers(self, contribution: Contribution) -> None:
        command = contribution.command
        if not (command.scheduled_actions or command.effects):
            return
        for action in command.scheduled_actions:
            entry = self._components.actions.get(action.spec.key)
            if entry is None or entry.spec is not action.spec:
                raise UnknownActionHandler(action.spec.key, contribution.origin)
        for effect in command.effects:
            entry = self._components.effects.get(effect.spec.key)
            if entry is None or entry.spec is not effect.spec:
                raise UnknownEffectHandler(effect.spec.key, contribution.origin)

    # -- after a commit: effects and actions --------------------------------------------

    async def _after_commits(
        self,
        done: Sequence[tuple[Sequence[Contribution], Snapshot]],
        contexts: Sequence[PhaseContext],
        tally: _Tally,
    ) -> None:
        """After commits: the hooks' profile writes, then effects and actions.

        Effects and actions go out even when a profile write fails (`StoreError` is raised
        after them): the commits stand, so nothing their commands asked for may be dropped.
        """
        try:
            if self._profile is not None:
                await _apply_profile_writes(contexts)
        finally:
            for contributions, snapshot in done:
                await self._after_commit(contributions, snapshot, tally)

    async def _after_commit(
        self, contributions: Sequence[Contribution], snapshot: Snapshot, tally: _Tally
    ) -> None:
        for contribution in contributions:
            command = contribution.command
            for action in command.scheduled_actions:
                self._pending.append((action, contribution.origin))
            for effect in command.effects:
                entry = self._components.effects[effect.spec.key]
                tally.effects += 1
                try:
                    await outcome(entry.function, effect.payload, snapshot)
                except Exception as error:
                    # Effects are terminal: the commit stands, so a failure is logged and
                    # counted, never raised (the one exception to the user-code policy).
                    tally.effects_failed += 1
                    tally.effect_runs += (EffectRun(effect.spec.key, cause_text(error)),)
                    logger.exception(
                        "effect handler for %r (plugin %r) failed; the commit stands",
                        effect.spec.key,
                        entry.plugin,
                    )
                else:
                    tally.effect_runs += (EffectRun(effect.spec.key),)

    async def _run_actions(self, phase: Phase, fields: Mapping[str, Any], tally: _Tally) -> None:
        if not self._pending:
            return
        rounds = 0
        while any(action.spec.phase is phase for action, _ in self._pending):
            due = [item for item in self._pending if item[0].spec.phase is phase]
            self._pending = [item for item in self._pending if item[0].spec.phase is not phase]
            if rounds >= self._max_rounds:
                names = tuple(dict.fromkeys(action.spec.key for action, _ in due))
                raise PhaseRunLoopExceeded(phase, rounds, names)
            rounds += 1
            for index, (action, _origin) in enumerate(due):
                try:
                    await self._run_action(phase, action, fields, tally)
                except BaseException:
                    self._pending[:0] = due[index + 1 :]  # the failure drops no other action
                    raise

    async def _run_action(
        self, phase: Phase, action: ScheduledAction, fields: Mapping[str, Any], tally: _Tally
    ) -> None:
        entry = self._components.actions[action.spec.key]
        (context,) = self._hook_contexts(self._make_context(phase, self._state.snapshot, fields), 1)
        tally.actions += 1
        tally.action_keys += (action.spec.key,)
        try:
            result = checked(
                await call(
                    entry.function, action.payload, context, owner=entry.plugin, phase=phase
                ),
                (StateCommand,),
                owner=entry.plugin,
                phase=phase,
                what=f"action handler for {action.spec.key!r}",
                expected="a StateCommand or None",
            )
            if action.retries is not None:  # a retried dead letter is done with
                done = StateCommand().update(DeadLetters, Retried(action.retries))
                result = done if result is None else StateCommand().extend(result).extend(done)
            if result is None:
                committed: tuple[tuple[tuple[Contribution, ...], Snapshot], ...] = ()
            else:
                contribution = Contribution(entry.plugin, result, f"action:{action.spec.key}")
                self._check_handlers(contribution)
                before = self._state.revision
                snapshot = self._state.commit((contribution,))
                tally.commits += snapshot.revision != before
                committed = (((contribution,), snapshot),)
        except Exception as error:
            if action.spec.on_failure != "dead_letter":
                raise
            # Its profile writes go with its command: nothing of a failed action lands.
            if isinstance(context.profile, BufferedProfileAccess):
                context.profile.discard()
            self._dead_letter(phase, action, entry.plugin, error, context, tally)
            return
        await self._after_commits(committed, (context,), tally)

    def _dead_letter(
        self,
        phase: Phase,
        action: ScheduledAction,
        plugin: str,
        error: Exception,
        context: PhaseContext,
        tally: _Tally,
    ) -> None:
        """Commit the failure of an action whose spec keeps failures as dead letters."""
        key = action.spec.key
        letter = letter_for(
            key,
            action.attempt,
            payload_text(action.payload),
            error.cause if isinstance(error, HookFailed) else error,  # what the handler raised
            phase=phase,
            revision=self._state.revision + 1,
            run_id=context.run.run_id,
        )
        logger.warning(
            "action %r (plugin %r) failed in %s; kept as dead letter %r",
            key,
            plugin,
            phase.name,
            letter.id,
            exc_info=error,
        )
        self.keep_dead_letter(letter, plugin, replacing=action.retries)
        tally.commits += 1

    def keep_dead_letter(
        self, letter: DeadLetter, plugin: str | None, *, replacing: str | None = None
    ) -> None:
        """Commit `letter` to `DeadLetters` (in place of letter `replacing`, the one whose
        retry failed), journaled as `"dead_letter:<action>"`."""
        command = StateCommand().update(DeadLetters, letter)
        if replacing is not None:
            command.update(DeadLetters, Retried(replacing))
        self._state.commit((Contribution(plugin, command, f"dead_letter:{letter.action}"),))


async def _apply_profile_writes(contexts: Sequence[PhaseContext]) -> None:
    """Send each hook's buffered profile writes to the store, in registration order.

    Called only after the hooks' commands committed: writes travel with the command.
    """
    for context in contexts:
        profile = context.profile
        if isinstance(profile, BufferedProfileAccess) and not profile.is_empty():
            await profile.apply()


def _check_ticket(ticket: Any, plugin: str, call: ToolCall) -> None:
    """A `Suspend` ticket is saved with the suspended run and shown by the trace, so it must
    encode, and nest no deeper than the kernel's limit: refused here, naming the gate's
    plugin, rather than later, when the run saves."""
    if nested_deeper(ticket, MAX_NESTING_DEPTH):
        what = f"tool call {call.id!r} of tool {call.name!r}: the Suspend ticket"
        fix = "Describe what the call awaits with flatter data."
        raise HookFailed(plugin, Phase.TOOL_GATE, ValueTooDeep(what, MAX_NESTING_DEPTH, fix))
    try:
        msgspec.json.encode(ticket, enc_hook=enc_hook)
    except CODEC_ERRORS as error:
        problem = TypeError(
            f"a Suspend ticket must be data statekernel can save (JSON data, a msgspec "
            f"Struct, a dataclass, a pydantic model); {type(ticket).__qualname__} is not "
            f"({error}). Pass a description of what the call awaits, such as a dict"
        )
        raise HookFailed(plugin, Phase.TOOL_GATE, problem) from error


def _check_set_result(result: Any, plugin: str, call: ToolCall) -> None:
    """A `SetResult` stands for the tool's result, so it is held to the same depth; too deep,
    it is the gate's mistake, named here, not a failed call."""
    if nested_deeper(result, MAX_NESTING_DEPTH):
        too_deep = ToolResultTooDeep(call.name, call.id, MAX_NESTING_DEPTH)
        raise HookFailed(plugin, Phase.TOOL_GATE, too_deep)


def _owners(
    hooks: Sequence[Registered], results: Sequence[Any], contributions: Sequence[Contribution]
) -> dict[int, Registered]:
    """Each contribution's hook, by the contribution's id: the hook whose result is the
    contribution's command, matched in order (`_kept` keeps them in registration order),
    so that a command two hooks both returned goes to each of them once. Only a round with
    deferred commands needs it."""
    owner_of: dict[int, Registered] = {}
    remaining = iter(contributions)
    contribution = next(remaining, None)
    for hook, result in zip(hooks, results, strict=True):
        if contribution is not None and contribution.command is result:
            owner_of[id(contribution)] = hook
            contribution = next(remaining, None)
    return owner_of


def _call_hooks(
    hooks: Sequence[Registered], contexts: Sequence[PhaseContext], phase: Phase
) -> tuple[list[Any], list[int]]:
    """Call every hook in registration order, sync ones in place: what each returned (an
    awaitable still to be awaited), and where those awaitables are (`_settle`). A hook that
    raises is reported at once, the awaitables of the hooks before it closed unawaited."""
    results: list[Any] = []
    waiting: list[int] = []
    for hook, context in zip(hooks, contexts, strict=True):
        try:
            result = hook.function(context)
        except Exception as error:
            _close_unawaited(results, waiting)
            reraise(hook.plugin, phase, error)
        if (
            type(result) is not StateCommand
            and result is not None
            and (hook.is_async or inspect.isawaitable(result))
        ):
            waiting.append(len(results))
        results.append(result)
    return results, waiting


async def _settle(
    hooks: Sequence[Registered], results: list[Any], waiting: Sequence[int], phase: str
) -> None:
    """Await the hooks' awaitables in `results` concurrently, in place.

    If several hooks fail, the first in registration order is reported, so the error does
    not depend on timing either.
    """
    # One awaitable runs in the run's own task (a lone one needs no task), the others each
    # in a task of its own, started before it, so that they all run concurrently; each is
    # awaited in turn, which costs about half of what `gather` does. Tasks that start
    # eagerly (Python 3.12+, no task factory) run up to their first suspension as they are
    # made, so the hook kept for the run's task is then the last: either way, the hooks
    # start in registration order.
    if len(waiting) == 1:
        (index,) = waiting
        try:
            results[index] = await results[index]
        except Exception as error:
            reraise(hooks[index].plugin, phase, error)
        return
    loop = asyncio.get_running_loop()
    eager = _EAGER and loop.get_task_factory() is None
    if eager:
        *others, own = waiting
    else:
        own, *others = waiting
    tasks = [_start(loop, results[index], eager) for index in others]
    failures: dict[int, Exception] = {}
    try:
        try:
            results[own] = await results[own]
        except Exception as error:
            failures[own] = error
        for index, task in zip(others, tasks, strict=True):
            try:
                results[index] = await task
            except Exception as error:
                failures[index] = error
    except BaseException:
        for task in tasks:
            task.cancel()
        # Like gather: no hook runs on past its phase, and every task's outcome is taken.
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    if failures:
        failed_at = min(failures)
        reraise(hooks[failed_at].plugin, phase, failures[failed_at])


def _start(loop: asyncio.AbstractEventLoop, awaitable: Any, eager: bool) -> asyncio.Future[Any]:
    """Run a hook's awaitable concurrently: a task for a coroutine (started eagerly if
    `eager`), anything else wrapped as asyncio does."""
    if isinstance(awaitable, CoroutineType):
        if eager:
            task: asyncio.Future[Any] = asyncio.Task(
                awaitable,
                loop=loop,
                eager_start=True,  # type: ignore[call-arg,unused-ignore]
            )
            return task
        return loop.create_task(awaitable)
    future: asyncio.Future[Any] = asyncio.ensure_future(awaitable)
    return future


_EAGER = sys.version_info >= (3, 12)
"""Whether tasks can run their first step at creation (`eager_start`, Python 3.12+). On
3.11 a hook's coroutine cannot start in the run's own task and then move to a task of its
own: `asyncio.timeout`, task groups and anyio would stay bound to the run's task. (One
awaited to its end in the run's task is fine, as any awaited coroutine is.)"""


def _close_unawaited(results: list[Any], waiting: list[int]) -> None:
    """Close coroutines that will never be awaited because a later hook failed."""
    for index in waiting:
        close = getattr(results[index], "close", None)
        if close is not None:
            close()
