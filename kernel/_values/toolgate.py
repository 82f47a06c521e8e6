"""Tool gates: runtime contracts on tool calls ("must review before publish").

A gate reads the snapshot and answers None (no opinion), `Block(reason)`, `Suspend(ticket)`
or `SetResult(result)`. Several gates may answer; the strongest kind wins (Block > Suspend >
SetResult) and within a kind the first in registration order wins, so the outcome never
depends on timing. Gates change nothing, so they can be re-evaluated freely.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import attrs

logger = logging.getLogger("statekernel")


@attrs.frozen
class Block:
    """Refuse the call: it fails, and the model sees `reason` as the tool's error.

    `Block(reason)`. The run goes on.

    One of the answers a tool gate may return (`None` means no opinion): `Block`,
    `Suspend` or `SetResult`. The strongest kind wins (Block > Suspend > SetResult). Within a
    kind, the first gate in registration order wins. A gate that returns anything else fails
    with `HookFailed`. See [concepts: tool gates](concepts.md#tool-gates-and-tool-commands).
    """

    reason: str
    """What the model sees as the tool's error."""


@attrs.frozen
class Suspend:
    """Hold the call until an outside decision arrives; `ticket` says what is awaited.

    `Suspend(ticket=None)`: the call waits for an outside decision, and the run is
    suspended.

    One of the answers a tool gate may return (`None` means no opinion): `Block`,
    `Suspend` or `SetResult`. The strongest kind wins (Block > Suspend > SetResult). Within a
    kind, the first gate in registration order wins. A gate that returns anything else fails
    with `HookFailed`. See [concepts: tool gates](concepts.md#tool-gates-and-tool-commands).
    """

    ticket: Any = None
    """What the call awaits, as data statekernel can save (JSON data, a msgspec Struct, a
    dataclass, a pydantic model): it is saved with the suspended run and shown by the trace.
    A gate whose ticket cannot be saved, or is nested more than 100 levels deep (dicts and
    lists inside one another), fails with `HookFailed`."""


@attrs.frozen
class SetResult:
    """Skip the tool and use `result` as its result.

    `SetResult(result)`.

    One of the answers a tool gate may return (`None` means no opinion): `Block`,
    `Suspend` or `SetResult`. The strongest kind wins (Block > Suspend > SetResult). Within a
    kind, the first gate in registration order wins. A gate that returns anything else fails
    with `HookFailed`. See [concepts: tool gates](concepts.md#tool-gates-and-tool-commands).
    """

    result: Any
    """The result used in place of running the tool. A gate whose result is nested more
    than 100 levels deep fails with `HookFailed`, caused by `ToolResultTooDeep`."""


GateDecision = Block | Suspend | SetResult


def _priority(answer: GateDecision) -> int:
    """Block beats Suspend beats SetResult (lower wins); subclasses rank as their base."""
    if isinstance(answer, Block):
        return 0
    return 1 if isinstance(answer, Suspend) else 2


def decide(answers: Sequence[tuple[str, GateDecision | None]]) -> GateDecision | None:
    """Pick the winning gate answer from `(plugin, answer)` pairs in registration order."""
    winner: tuple[str, GateDecision] | None = None
    for plugin, answer in answers:
        if answer is None:
            continue
        if winner is None or _priority(answer) < _priority(winner[1]):
            winner = (plugin, answer)
        elif _priority(answer) == _priority(winner[1]):
            logger.info(
                "tool gates clash: %s from %r kept over %s from %r (first registered wins)",
                winner[1],
                winner[0],
                answer,
                plugin,
            )
    return None if winner is None else winner[1]
