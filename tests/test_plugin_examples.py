"""The how-to examples of the built-in plugins run offline and exit 0.

Each runs as its own process, exactly as a reader would run it, so an example that drifts
from the API fails here instead of in front of a reader.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each example runs as a process

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
PLUGIN_EXAMPLES = ["run_lifecycle", "context_injection", "stage_workflow", "team_context"]


@pytest.mark.parametrize("name", PLUGIN_EXAMPLES)
def test_the_example_runs_and_exits_0(name: str) -> None:
    script = EXAMPLES / f"{name}.py"
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=EXAMPLES.parent.parent,
        check=False,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"{script} printed nothing"


def test_every_plugin_how_to_has_its_example() -> None:
    docs = EXAMPLES.parent
    for name in PLUGIN_EXAMPLES:
        how_to = docs / f"howto-{name.replace('_', '-')}.md"
        assert how_to.is_file(), f"missing {how_to}"
        assert f"docs/examples/{name}.py" in how_to.read_text(), f"{how_to} never runs its example"
