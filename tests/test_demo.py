"""The demo, the engine tour and the history example run from a clean directory as promised."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from samples import Keys

from statekernel import Kernel, StateCommand, StateKey
from statekernel.plugins import TeamContext
from statekernel.stores import embedded
from statekernel.testing import assert_commutative

EXAMPLES = Path(__file__).parent.parent / "docs" / "examples"


def run_example(name: str, cwd: Path, *args: str) -> str:
    return run_python(cwd, str(EXAMPLES / name), *args)


def run_demo(cwd: Path, *args: str) -> str:
    return run_python(cwd, "-m", "statekernel", "demo", *args)


def run_python(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_demo_tells_its_story_and_persists_to_sqlite(tmp_path: Path) -> None:
    for _ in range(2):  # rerunnable: the demo thread starts afresh each time
        output = run_demo(tmp_path)
        assert (tmp_path / ".statekernel" / "statekernel.db").exists()  # stores.embedded()
        lines = [line.strip() for line in output.splitlines()]
        # what was blocked and why, and which tool the model called
        assert "model    calls publish()" in lines
        assert "BLOCKED  publish needs stage REVIEWED (now DRAFT): call `review` first" in lines
        assert "=> success after 3 steps; facts ['kernel'], note stage DRAFT" in lines
        # what was carried over between runs, read from the second run's start
        assert "carried over from run 1 (thread keys): facts ['kernel'], note stage DRAFT" in lines
        assert "started again (run key): step counter 0 (run 1 ended at 3)" in lines
        assert "=> success after 4 steps; facts ['kernel', 'merge'], note stage PUBLISHED" in lines
        # what the team shared, and the injected context
        assert "system: Style: short, plain sentences." in lines
        assert "- Collect reader questions" in lines
        assert "review before publishing. The model is scripted: the demo runs offline." in lines
        assert "[trace]" not in output
        assert len(lines) < 50


@pytest.mark.slow
def test_the_team_demo_plans_delegates_talks_and_publishes_after_review(tmp_path: Path) -> None:
    for _ in range(2):  # rerunnable: it starts its SQLite files afresh
        output = run_example("team.py", tmp_path)
        lines = [line.strip() for line in output.splitlines()]
        assert lines[0] == "team demo-team: idle after 3 rounds"
        roles = [line.split()[0].rsplit("-", 1)[0] for line in lines[1:4]]
        assert roles == ["planner", "researcher", "writer"]
        assert all(" done " in line for line in lines[1:4])
        assert "team context goals: ['Explain exactly-once delivery in one note']" in lines
        assert "the writer's model was shown the planner's goal: True" in lines
        blocked = (
            "writer publish: failed: publish needs stage REVIEWED (now DRAFT): call `review` first"
        )
        assert blocked in lines
        assert "writer publish: succeeded: published the note" in lines
        assert any(line.startswith("writer's mail: '[message from researcher-") for line in lines)
        assert lines[-1] == "note stage: PUBLISHED"
        assert (tmp_path / ".statekernel" / "team" / "statekernel.db").exists()


@pytest.mark.slow
def test_the_demo_trace_shows_every_phase(tmp_path: Path) -> None:
    output = run_demo(tmp_path, "--trace")
    traced = [line.split()[1] for line in output.splitlines() if "[trace]" in line]
    assert traced.count("RUN_START") == 2 and traced.count("RUN_END") == 2
    assert "TOOL_GATE" in traced and "BEFORE_TOOL_EXECUTE" in traced


def test_the_demo_keeps_its_commutative_promise() -> None:
    (entry,) = entry_points(group="statekernel.cli", name="demo")  # as the command finds it
    demo = sys.modules[entry.load().__module__]
    facts = [demo.Fact("kernel", "a"), demo.Fact("merge", "b"), demo.Fact("kernel", "c")]
    assert_commutative(demo.Facts, (), facts)
    assert_commutative(demo.Facts, (demo.Fact("kernel", "a"),), facts)


@pytest.mark.slow
def test_engine_tour_runs(tmp_path: Path) -> None:
    output = run_example("engine_tour.py", tmp_path)
    assert "commit rejected" in output and "conflict" in output


@pytest.mark.slow
def test_the_history_example_travels_forks_and_verifies(tmp_path: Path) -> None:
    output = run_example("history.py", tmp_path)
    assert "notes right after revision" in output and "('buy milk',)" in output
    assert "the fork 'errands-draft' starts from: ('buy milk',)" in output
    assert "verify: ok=True" in output


@pytest.mark.slow
def test_the_migrating_example_runs_three_frameworks_state_and_restores_it(
    tmp_path: Path,
) -> None:
    output = run_example("migrating.py", tmp_path)
    assert "LangGraph messages: [('msg-2', 'question 1'), ('msg-3', 'ok')]" in output
    assert "EvoFabric state:    steps=['step', 'step'] user_name='ada'" in output
    assert "Jianmu state:       rounds=2 done=True" in output
    assert "restored from SQLite, journal verified: True" in output


@pytest.mark.slow
def test_the_profile_owner_example_lists_and_forgets_one_owner(tmp_path: Path) -> None:
    output = run_example("profile_owner.py", tmp_path)
    assert "alice holds: {'prefs': Preferences(tone='warm'), 'quota': 7}" in output
    assert "after forgetting alice: {}" in output
    assert "bob still holds: {'prefs': Preferences(tone='brief'), 'quota': 7}" in output


@pytest.mark.slow
def test_the_dead_letters_example_keeps_a_failure_and_retries_it(tmp_path: Path) -> None:
    output = run_example("dead_letters.py", tmp_path)
    assert "dead letter dl-1: shop.deliver attempt 1" in output
    assert "error: ConnectionError: courier unreachable" in output
    assert "after the retry: delivered ('tea',)" in output
    assert "agent run: success, dead letters ['shop.deliver']" in output
    assert "agent retry: delivered ('tea',)" in output
    assert output.count("dead letters left: 0") == 2


@pytest.mark.slow
def test_the_plugins_come_and_go_example_keeps_drops_and_refuses(tmp_path: Path) -> None:
    output = run_example("plugins_come_and_go.py", tmp_path)
    assert "notes, carried over while away: ('a note',)" in output
    assert "drafts, dropped while away:     ()" in output
    assert "steps taken, by every kernel:   2" in output
    assert "a strict kernel refuses: thread 'thread-1' holds keys" in output


@pytest.mark.slow
def test_the_demo_leaves_an_applications_data_in_its_folder_alone(tmp_path: Path) -> None:
    """`statekernel demo` writes to .statekernel/, the embedded default's folder: it starts
    its own threads and team context afresh, and nothing else there."""

    class Note(StateKey[str, str]):
        key = "app.note"

        @staticmethod
        def apply(value: str, update: str) -> str:
            return update

    async def write_and_read(write: bool) -> tuple[list[str], object]:
        async with embedded(tmp_path / ".statekernel") as stores:
            kernel = Kernel([Keys(Note)], stores=stores)
            if write:
                run = await kernel.start_run("app-thread")
                await run.submit(StateCommand().update(Note, "mine"))
                await run.finish()
                await stores.profile_store.set(TeamContext.key, "app-team", {"goals": ["ship"]})
            entry = await stores.profile_store.get(TeamContext.key, "app-team")
            return await kernel.threads(), entry.value if entry else None

    asyncio.run(write_and_read(True))
    run_demo(tmp_path)
    threads, team = asyncio.run(write_and_read(False))
    assert "app-thread" in threads and {"demo-thread", "demo-helper"} <= set(threads)
    assert team == {"goals": ["ship"]}
