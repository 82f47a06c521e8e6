"""How many machine instructions does one durable step cost, at this commit and another?

Wall-clock timings of a ~200 µs step move by 10-30 % between runs on a shared VM, which
hides a change of a few per cent. Instruction counts do not: valgrind's callgrind counts the
instructions a process executes, the same from run to run whatever else the machine does.
This runs the statekernel side of `journal_checkpoint.py` (append one message to a thread
of 1,000, checkpoint to SQLite) under callgrind twice, with 200 and with 600 timed steps,
and divides the difference by 400: the set-up cancels out, and what is left is one step.

With `--against REV` it does the same for another commit of this repository (checked out
into a temporary folder and laid out as the installed package, which the measured process
imports first), so that a change is measured against what it changed, in one run.

Run: .venv/bin/python benchmarks/instructions_per_step.py [--against REV]
(needs valgrind; about two minutes per side)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = (200, 600)
HISTORY = 1000

_CHILD = """
import sys, tempfile
from pathlib import Path
sys.path.insert(0, {benchmarks!r})
import journal_checkpoint
with tempfile.TemporaryDirectory() as folder:
    journal_checkpoint.statekernel_side(Path(folder) / "t.db", {history}, int(sys.argv[1]))
"""


def instructions(steps: int, package: Path | None, scratch: Path) -> int:
    """The instructions callgrind counts for a run of `steps` timed steps."""
    env = dict(os.environ)
    if package is not None:
        env["PYTHONPATH"] = str(package)
    script = scratch / "child.py"
    script.write_text(_CHILD.format(benchmarks=str(ROOT / "benchmarks"), history=HISTORY))
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={scratch / 'callgrind.out'}",
            sys.executable,
            str(script),
            str(steps),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{done.stderr}")
    return int(found.group(1))


def per_step(package: Path | None, scratch: Path) -> float:
    low, high = (instructions(steps, package, scratch) for steps in STEPS)
    return (high - low) / (STEPS[1] - STEPS[0])


def package_of(revision: str, scratch: Path) -> Path:
    """The commit `revision` laid out as the installed package: statekernel/ is kernel/,
    with stores/ and plugins/ inside it."""
    tree = scratch / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), revision],
        check=True,
        capture_output=True,
    )
    try:
        package = scratch / "package" / "statekernel"
        shutil.copytree(tree / "kernel", package)
        shutil.copytree(tree / "stores", package / "stores")
        shutil.copytree(tree / "plugins", package / "plugins")
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
            check=True,
            capture_output=True,
        )
    return package.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="REV", help="also measure this commit")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        here = per_step(None, scratch)
        print(f"this tree: {here:,.0f} instructions per durable step")
        if args.against:
            there = per_step(package_of(args.against, scratch), scratch)
            change = (here - there) / there * 100
            print(f"{args.against}: {there:,.0f} instructions per durable step")
            print(f"change: {here - there:+,.0f} ({change:+.1f} %)")


if __name__ == "__main__":
    main()
