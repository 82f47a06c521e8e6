"""`statekernel trace`: the demo's thread as one self-contained HTML page, checked as written
and as a real browser (headless Chromium) renders it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from browser import Browser
from run_event_samples import First, Second

from statekernel import GateRun, Kernel, Phase
from statekernel.stores import SqliteThreadStore

pytestmark = pytest.mark.slow  # the page is written by the command line, run as a process

THREAD = "demo-thread"
BLOCK_REASON = "publish needs stage REVIEWED (now DRAFT): call `review` first"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statekernel", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The demo's store, and its writer thread's trace."""
    folder = tmp_path_factory.mktemp("trace")
    done = cli("demo", "--dir", str(folder / "data"))
    assert done.returncode == 0, done.stderr
    db = folder / "data" / "statekernel.db"
    page = folder / "trace.html"
    done = cli("trace", str(db), "--thread", THREAD, "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {page}: 83 commits")
    return db, page


class _Elements(HTMLParser):
    """Every start tag's attributes, and the text under elements of a class."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text += data


def parsed(page: Path) -> _Elements:
    elements = _Elements()
    elements.feed(page.read_text(encoding="utf-8"))
    return elements


async def test_the_page_holds_every_phase_commit_and_decision(traced: tuple[Path, Path]) -> None:
    db, page = traced
    async with SqliteThreadStore(db, read_only=True) as store:
        kernel = Kernel([], thread_store=store)
        history = await kernel.history(THREAD)
        events = await kernel.run_events(THREAD)
    elements = parsed(page)
    commits = [a for tag, a in elements.tags if "commit" in (a.get("class") or "").split()]
    assert sorted(int(a["data-commit"] or 0) for a in commits) == [r.revision for r in history]
    lanes = {a["data-lane"] for tag, a in elements.tags if "lane-label" in (a.get("class") or "")}
    assert {phase.value for phase in Phase} <= lanes
    runs = [a["data-run"] for tag, a in elements.tags if tag == "section"]
    assert runs == ["demo-thread:run-1", "demo-thread:run-2"]
    blocks = [e for e in events if isinstance(e, GateRun) and e.decision == "block"]
    assert [b.reason for b in blocks] == [BLOCK_REASON]
    assert BLOCK_REASON in elements.text
    assert "stage_workflow" in elements.text  # the plugin whose gate blocked, and hooks' plugins
    # the state of every revision is in the page, as `export_state` gives it
    data = page.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="states">(.*?)</script>', data, re.S)
    assert found is not None
    states = json.loads(found.group(1))
    assert set(states) == {str(r.revision) for r in history}
    async with SqliteThreadStore(db, read_only=True) as store:
        at_eight = await Kernel([], thread_store=store).export_state(THREAD, revision=8)
    assert states["8"] == json.loads(json.dumps(dict(at_eight.values)))


def test_the_page_names_nothing_outside_itself(traced: tuple[Path, Path]) -> None:
    _, page = traced
    elements = parsed(page)
    for tag, attributes in elements.tags:
        for name in ("src", "href", "action", "srcset", "poster"):
            assert name not in attributes, (tag, attributes)
    text = page.read_text(encoding="utf-8")
    assert "default-src 'none'" in text
    assert not re.search(r"url\(|@import|https?://", text)


def test_an_unknown_thread_writes_no_page(traced: tuple[Path, Path], tmp_path: Path) -> None:
    db, _ = traced
    page = tmp_path / "nothing.html"
    done = cli("trace", str(db), "--thread", "nope", "--html", str(page))
    assert done.returncode == 2 and "does not exist" in done.stderr
    assert not page.exists()


@pytest.mark.slow
def test_chromium_renders_the_trace_and_shows_the_state_on_click(
    traced: tuple[Path, Path], browser: Browser, tmp_path: Path
) -> None:
    _, page = traced
    browser.open(page)
    lanes = {browser.attribute(e, "data-lane") for e in browser.find_all(".lane-label")}
    assert {phase.value for phase in Phase} <= lanes
    commits = browser.find_all("button.commit")
    assert len(commits) == 83
    reasons = [browser.text(e) for e in browser.find_all(".event.gate.block .reason")]
    assert reasons == [BLOCK_REASON]
    # a click shows the state right after that commit: revision 8 holds two messages
    eighth = next(e for e in commits if browser.attribute(e, "data-revision") == "8")
    browser.run("document.querySelector('[data-commit=\"8\"]').scrollIntoView()")
    browser.click(eighth)
    assert browser.text(browser.find_all("#state-revision")[0]) == "8"
    shown = json.loads(browser.run("return document.getElementById('state-values').textContent"))
    assert len(shown["statekernel.messages"]) == 2
    assert shown["statekernel.messages"][0]["role"] == "user"
    screenshot = Path(__file__).parent.parent / ".statekernel" / "trace-screenshot.png"
    screenshot.parent.mkdir(exist_ok=True)
    browser.screenshot(screenshot)
    assert screenshot.read_bytes().startswith(b"\x89PNG")
    # the page requested nothing but itself (the browser's own pages load chrome:// files),
    # and nothing anywhere went to a network
    sent = browser.requests()
    uri = page.resolve().as_uri()
    assert {url for url, document in sent if document == uri} == {uri}
    assert not [url for url, _ in sent if not url.startswith(("file:", "chrome", "data:"))]


async def test_re_runs_failed_effects_and_actions_are_drawn(tmp_path: Path) -> None:
    from statekernel import Agent, InferenceResponse, ScriptedModel

    db = tmp_path / "racing.db"
    async with SqliteThreadStore(db) as store:
        model = ScriptedModel([InferenceResponse(text="ok")])
        await Agent([First(), Second()], model, thread_store=store).run("race", ["go"])
    page = tmp_path / "race.html"
    done = cli("trace", str(db), "--thread", "race", "--html", str(page))
    assert done.returncode == 0, done.stderr
    elements = parsed(page)
    classes = [(a.get("class") or "") for _, a in elements.tags]
    assert "hook rerun" in classes and "effect failed" in classes and "action" in classes
    assert "RuntimeError: cannot explode" in elements.text and "second ↻" in elements.text
    assert "t.later" in elements.text


async def test_a_suspended_call_shows_what_it_awaits(tmp_path: Path) -> None:
    from samples import Hooks

    from statekernel import Agent, InferenceResponse, ScriptedModel, Suspend, ToolCall

    approval = Hooks("approval", gate=lambda ctx: Suspend({"approver": "<finance>"}))
    db = tmp_path / "waiting.db"
    model = ScriptedModel([InferenceResponse(tool_calls=(ToolCall("c1", "pay", {}),))])
    async with SqliteThreadStore(db) as store:
        agent = Agent([approval], model, {"pay": lambda args, ctx: "paid"}, thread_store=store)
        assert (await agent.run("w", ["pay"])).outcome == "suspended"
    page = tmp_path / "waiting.html"
    assert cli("trace", str(db), "--thread", "w", "--html", str(page)).returncode == 0
    elements = parsed(page)
    assert 'awaits: {"approver":"<finance>"}' in elements.text
    assert "&lt;finance&gt;" in page.read_text(encoding="utf-8")  # escaped in the markup


async def test_state_that_looks_like_markup_cannot_break_the_page(tmp_path: Path) -> None:
    from statekernel import Agent, InferenceResponse, ScriptedModel

    db = tmp_path / "markup.db"
    said = '</script><!--<script>alert("x")</script> & more'
    async with SqliteThreadStore(db) as store:
        agent = Agent([], ScriptedModel([InferenceResponse(text="ok")]), thread_store=store)
        await agent.run("t<b>", [said])
    page = tmp_path / "markup.html"
    assert cli("trace", str(db), "--thread", "t<b>", "--html", str(page)).returncode == 0
    text = page.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="states">(.*?)</script>', text, re.S)
    assert found is not None and not set("<>&") & set(found.group(1))
    states = json.loads(found.group(1))
    assert states["1"]["statekernel.messages"][0]["content"] == said
    assert text.count("<script") == 2 and "thread t&lt;b&gt;" in text


async def test_a_long_heavy_thread_keeps_the_page_small_and_the_newest_states(
    tmp_path: Path,
) -> None:
    from statekernel import Agent, InferenceResponse, ScriptedModel

    db = tmp_path / "heavy.db"
    async with SqliteThreadStore(db) as store:
        replies = [InferenceResponse(text=f"reply {n}") for n in range(60)]
        agent = Agent([], ScriptedModel(replies), thread_store=store)
        for n in range(60):
            await agent.run("heavy", [f"{n} " + "x" * 30_000])
        head = (await agent.kernel.history("heavy"))[-1].revision
    page = tmp_path / "heavy.html"
    assert cli("trace", str(db), "--thread", "heavy", "--html", str(page)).returncode == 0
    assert page.stat().st_size < 12 * 1024 * 1024  # the whole states would be over 100 MB
    text = page.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="states">(.*?)</script>', text, re.S)
    assert found is not None
    kept = sorted(int(revision) for revision in json.loads(found.group(1)))
    assert kept[-1] == head and kept[0] > 1 and kept == list(range(kept[0], head + 1))
    assert text.count('class="commit"') == head  # every commit is still drawn
