"""`statekernel trace`: one thread's runs as a self-contained HTML timeline.

The page is drawn here, on the server side, from what the store holds: the commit records
(`kernel.history`), the run events journaled beside them (`kernel.run_events`: phases with
their hooks, re-runs, effects and actions; tool gate decisions; tool calls) and the state at
each revision (`kernel.export_state`, typed by the application's keys given `--app`; the
keys it could not type are named on standard error, as `show` names them). Each run is a
grid: one lane per phase, a lane for tool calls and one for commits; one column per thing
that happened, in order. The only script is the one that shows the state at a revision
when its commit or phase is clicked, from data in the page: the file needs no network to be
viewed, and its Content Security Policy forbids any request.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from statekernel import CommitRecord, GateRun, Phase, PhaseRun, RunEvent, ToolRun

from .commands import note_untyped
from .location import Location
from .output import Output

__all__ = ["MAX_STATE_BYTES", "trace"]

MAX_STATE_BYTES = 8 * 1024 * 1024
"""How much state the page carries: the whole state of the newest revisions, as many as fit
(each is a replay, and a long history repeated at every revision would make the page grow
with the square of the thread)."""

_LANES = (*(phase.value for phase in Phase), "tool calls", "outside a phase", "commits")
_COMMITS_LANE = len(_LANES)


@attrs.frozen
class _Column:
    """One column of a run's grid: an event (or a commit made outside any phase run) and
    the commits it made."""

    event: RunEvent | None
    commits: tuple[CommitRecord, ...]


async def trace(where: Location, thread_id: str, out: Path) -> int:
    """Write the thread's trace to `out` (owner-only; never the store itself)."""
    output = Output("--html", out, where.db)
    output.check()
    records = await where.kernel.history(thread_id)
    events = await where.kernel.run_events(thread_id)
    states: dict[int, Any] = {}
    size = 0
    for record in reversed(records):
        exported = await where.kernel.export_state(thread_id, revision=record.revision)
        if not states:  # the head: name the keys the page shows untyped, as `show` does
            note_untyped(where, {thread_id: exported})
        size += len(json.dumps(exported.values, ensure_ascii=False))
        if states and size > MAX_STATE_BYTES:
            break
        states[record.revision] = exported.values
    output.write(page(thread_id, records, events, states))
    print(
        f"wrote {out}: {len(records)} commits, {len(events)} run events, "
        f"{len(_run_ids(records, events))} runs"
    )
    return 0


def page(
    thread_id: str,
    records: Sequence[CommitRecord],
    events: Sequence[RunEvent],
    states: dict[int, Any],
) -> str:
    """The whole HTML document."""
    runs = "\n".join(
        _run_section(
            run_id,
            [r for r in records if r.run_id == run_id],
            [e for e in events if e.run_id == run_id],
        )
        for run_id in _run_ids(records, events)
    )
    head = records[-1].revision if records else 0
    data = json.dumps({str(k): v for k, v in sorted(states.items())}, ensure_ascii=False)
    # Inside <script> no text may look like markup (`</script>`, `<!--`): JSON says these
    # characters as escapes, which only strings can hold.
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return _TEMPLATE.format(
        title=_e(f"statekernel trace: {thread_id}"),
        thread=_e(thread_id),
        summary=_e(
            f"{len(records)} commits, {len(_run_ids(records, events))} runs, head revision {head}"
        ),
        runs=runs,
        states=data,
        style=_STYLE,
        script=_SCRIPT,
        policy=_POLICY,
    )


def _run_ids(records: Iterable[CommitRecord], events: Iterable[RunEvent]) -> list[str]:
    seen: dict[str, None] = {}
    for item in sorted(
        [(r.revision, 0, r.run_id) for r in records if r.run_id is not None]
        + [(e.revision, 1, e.run_id) for e in events]
    ):
        seen.setdefault(item[2], None)
    return list(seen)


def _columns(records: Sequence[CommitRecord], events: Sequence[RunEvent]) -> list[_Column]:
    """The run's columns in order: each event with the commits it made, and each commit no
    phase run made (a submission, or one of a run whose events were not kept) before the
    first event that came after it."""
    by_revision = {r.revision: r for r in records}
    owned: set[int] = set()
    columns: list[_Column] = []
    for event in events:
        made: tuple[CommitRecord, ...] = ()
        if isinstance(event, PhaseRun) and event.commits:
            revisions = range(event.revision - event.commits + 1, event.revision + 1)
            made = tuple(by_revision[n] for n in revisions if n in by_revision)
            owned.update(r.revision for r in made)
        columns.append(_Column(event, made))
    loose = [r for r in records if r.revision not in owned]
    merged: list[_Column] = []
    for column in columns:
        at = column.event.revision if column.event is not None else 0
        first = min((r.revision for r in column.commits), default=at + 1)
        while loose and loose[0].revision < first and loose[0].revision <= at:
            merged.append(_Column(None, (loose.pop(0),)))
        merged.append(column)
    merged.extend(_Column(None, (record,)) for record in loose)
    return merged


def _run_section(run_id: str, records: Sequence[CommitRecord], events: Sequence[RunEvent]) -> str:
    columns = _columns(records, events)
    cells = [
        f'<div class="lane-label" data-lane="{_e(lane)}" style="grid-row:{row}">{_e(lane)}</div>'
        for row, lane in enumerate(_LANES, start=1)
    ]
    for index, column in enumerate(columns, start=2):
        cells.append(_event_cell(column, index))
        if column.commits:
            chips = "".join(_commit_chip(record) for record in column.commits)
            cells.append(
                f'<div class="commits" style="grid-row:{_COMMITS_LANE};grid-column:{index}">'
                f"{chips}</div>"
            )
    return (
        f'<section class="run" data-run="{_e(run_id)}"><h2>run {_e(run_id)}</h2>'
        f'<div class="timeline" style="grid-template-columns:11em repeat({max(len(columns), 1)},'
        f' minmax(10em, max-content))">{"".join(cells)}</div></section>'
    )


def _event_cell(column: _Column, index: int) -> str:
    event = column.event
    if event is None:  # a commit made outside any phase run: where its record says
        (record,) = column.commits
        lane = record.phase.value if record.phase is not None else "outside a phase"
        body = f'<div class="what">{_e(", ".join(record.sources))}</div>'
        return _cell("submit", lane, index, record.revision, body)
    if isinstance(event, PhaseRun):
        hooks = "".join(f'<span class="hook">{_e(p)}</span>' for p in event.hooks)
        hooks += "".join(
            f'<span class="hook rerun" title="re-run after an exclusive conflict">{_e(p)} ↻</span>'
            for p in event.reruns
        )
        effects = "".join(
            f'<span class="effect{" failed" if e.error else ""}"'
            f"{f' title={_q(e.error)}' if e.error else ''}>{_e(e.key)}"
            f"{' ✗ ' + _e(e.error) if e.error else ''}</span>"
            for e in event.effects
        )
        actions = "".join(f'<span class="action">{_e(a)}</span>' for a in event.actions)
        failed = f'<div class="reason">failed: {_e(event.error)}</div>' if event.error else ""
        body = (
            f'<div class="step">step {event.step}</div>'
            + failed
            + (f'<div class="hooks">{hooks}</div>' if hooks else "")
            + (f'<div class="effects">effects: {effects}</div>' if effects else "")
            + (f'<div class="actions">actions: {actions}</div>' if actions else "")
        )
        kind = "phase failed" if event.error else "phase"
        return _cell(kind, event.phase.value, index, event.revision, body)
    if isinstance(event, GateRun):
        reason = f'<div class="reason">{_e(event.reason)}</div>' if event.reason else ""
        by = f'<div class="by">{_e(event.plugin)}</div>' if event.plugin else ""
        ticket = event.ticket_text()
        awaits = f'<div class="ticket">awaits: {_e(ticket)}</div>' if ticket is not None else ""
        body = f'<div class="what">{_e(event.decision)}: {_e(event.tool)}</div>{by}{reason}{awaits}'
        return _cell(f"gate {event.decision}", Phase.TOOL_GATE.value, index, event.revision, body)
    assert isinstance(event, ToolRun)
    error = f'<div class="reason">{_e(event.error)}</div>' if event.error else ""
    body = f'<div class="what">{_e(event.tool)}: {_e(event.status)}</div>{error}'
    return _cell(f"tool {event.status}", "tool calls", index, event.revision, body)


def _cell(kind: str, lane: str, column: int, revision: int, body: str) -> str:
    return (
        f'<div class="event {_e(kind)}" data-lane="{_e(lane)}" data-revision="{revision}" '
        f'style="grid-row:{_LANES.index(lane) + 1};grid-column:{column}">{body}</div>'
    )


def _commit_chip(record: CommitRecord) -> str:
    ops = "".join(f"<li>{_e(op.kind)} {_e(op.key)}</li>" for op in record.ops)
    return (
        f'<button type="button" class="commit" data-commit="{record.revision}" '
        f'data-revision="{record.revision}">r{record.revision} '
        f'<span class="sources">{_e(", ".join(record.sources))}</span>'
        f"{f'<ul class=ops>{ops}</ul>' if ops else ''}</button>"
    )


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _q(text: object) -> str:
    return '"' + _e(text) + '"'


# No request of any kind: the page is whole in itself.
_POLICY = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'"

_STYLE = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 0; display: flex; color: #1d1d1f; }
main { flex: 1; overflow: auto; padding: 1em 1.5em; height: 100vh; box-sizing: border-box; }
aside { width: 34%; border-left: 1px solid #ccc; padding: 1em; height: 100vh;
  box-sizing: border-box; overflow: auto; background: #fafafa; }
h1 { font-size: 1.3em; margin: 0 0 .2em; } h2 { font-size: 1.05em; margin: 1.2em 0 .4em; }
.timeline { display: grid; gap: 3px; align-items: start; }
.lane-label { grid-column: 1; font-weight: 600; color: #555; padding: .3em .4em;
  position: sticky; left: 0; background: #fff; }
.event { border: 1px solid #bbb; border-radius: 4px; padding: .25em .4em; cursor: pointer;
  background: #eef4ff; }
.event.submit { background: #f2f2f2; } .event.gate { background: #fff7e0; }
.event.gate.block { background: #ffe3e0; border-color: #d33; }
.event.tool.failed, .event.phase.failed { background: #ffe3e0; border-color: #d33; }
.event.tool.succeeded { background: #e7f7e9; }
.hook, .action, .effect { display: inline-block; margin: 0 .3em .1em 0; padding: 0 .3em;
  border-radius: 3px; background: #dde7f7; }
.hook.rerun { background: #ffd8a8; } .effect.failed { background: #f8b4b4; }
.reason { color: #a11; } .step, .by { color: #666; font-size: .9em; }
.commit { display: block; text-align: left; font: inherit; margin: 0 0 2px; width: 100%;
  border: 1px solid #8a8; border-radius: 4px; background: #f3fbf3; cursor: pointer; }
.commit.selected, .event.selected { outline: 2px solid #36c; }
.ops { margin: .1em 0 0 1em; padding: 0; color: #444; }
pre { white-space: pre-wrap; word-break: break-word; font-size: 12px; }
"""

_SCRIPT = """
const states = JSON.parse(document.getElementById("states").textContent);
function show(element) {
  const revision = element.dataset.revision;
  document.querySelectorAll(".selected").forEach((e) => e.classList.remove("selected"));
  element.classList.add("selected");
  document.getElementById("state-revision").textContent = revision;
  const state = states[revision];
  document.getElementById("state-values").textContent = state === undefined
    ? "(this page keeps the state of the newest revisions only)"
    : JSON.stringify(state, null, 2);
}
document.querySelectorAll(".commit, .event").forEach((element) =>
  element.addEventListener("click", (event) => { event.stopPropagation(); show(element); }));
"""

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<title>{title}</title><style>{style}</style></head>
<body><main><h1>thread {thread}</h1><p class="summary">{summary}</p>
{runs}
</main>
<aside><h2>state at revision <span id="state-revision">-</span></h2>
<p>Click a commit or a phase to see the thread's keys right after it.</p>
<pre id="state-values"></pre></aside>
<script type="application/json" id="states">{states}</script>
<script>{script}</script>
</body></html>
"""
