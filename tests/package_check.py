"""`make package-check`: the package installs as one face, from a wheel and editable alike.

Builds the wheel and checks that its top level holds only `statekernel` (and its dist-info);
installs it into a fresh virtual environment outside the repository; checks there that the
public modules import and that `kernel`, `plugins` and `stores` do not; type-checks a user's
module with `mypy --strict` against that install and against the repository's editable one
(a correct module passes, a wrong update type is reported at its line); and runs an
application that has its own `plugins` and `stores` packages beside `statekernel.plugins`.

Run from the repository root with the development venv's Python.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ("statekernel", "statekernel.stores", "statekernel.plugins", "statekernel.testing")
PUBLIC += ("statekernel.lowlevel", "statekernel.events", "statekernel.models")  # no extras

USER_MODULE = """
import enum

from statekernel import MergeStrategy, StateCommand, StateKey
from statekernel.plugins import StageWorkflow


class Doc(enum.Enum):
    DRAFT = "draft"
    DONE = "done"


class Steps(StateKey[int, int]):
    key = "user.steps"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


def bump() -> StateCommand:
    return StateCommand().update(Steps, 1)


def plugin_id(flow: StageWorkflow[Doc]) -> str:
    return flow.id
"""

WRONG_LINE = 'def wrong() -> StateCommand:\n    return StateCommand().update(Steps, "one")\n'

APP_MAIN = """
from plugins import MINE
from stores import OURS
from statekernel.plugins import StageWorkflow
from statekernel.stores import SqliteThreadStore

print(MINE, OURS, StageWorkflow.__name__, SqliteThreadStore.__name__)
"""


def run(*command: str | Path, cwd: Path, expect: int = 0) -> str:
    done = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != expect:
        sys.exit(
            f"`{' '.join(map(str, command))}` exited {done.returncode}, expected {expect}:\n"
            f"{done.stdout}{done.stderr}"
        )
    return done.stdout + done.stderr


def check_wheel(work: Path) -> Path:
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", work, ROOT, cwd=work)
    (wheel,) = work.glob("statekernel-*.whl")
    tops = {name.split("/", 1)[0] for name in zipfile.ZipFile(wheel).namelist()}
    extra = {top for top in tops if top != "statekernel" and not top.endswith(".dist-info")}
    if extra:
        sys.exit(f"the wheel puts more than statekernel at the top level: {sorted(extra)}")
    print(f"wheel top level: {sorted(tops)}")
    return wheel


def check_fresh_install(work: Path, wheel: Path) -> Path:
    venv = work / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=work)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", wheel, cwd=work)
    run(python, "-c", f"import {', '.join(PUBLIC)}", cwd=work)
    for legacy in ("kernel", "plugins", "stores"):
        run(python, "-c", f"import {legacy}", cwd=work, expect=1)
    print(f"fresh install: {', '.join(PUBLIC)} import; kernel, plugins, stores do not")
    return python


def check_types(work: Path, python: Path) -> None:
    app = work / "typed"
    app.mkdir()
    (app / "user.py").write_text(textwrap.dedent(USER_MODULE))
    (app / "wrong.py").write_text(textwrap.dedent(USER_MODULE) + "\n\n" + WRONG_LINE)
    wrong_line = (app / "wrong.py").read_text().splitlines().index(WRONG_LINE.splitlines()[1]) + 1
    mypy = Path(sys.executable).parent / "mypy"
    for label, target in (("wheel", ("--python-executable", str(python))), ("editable", ())):
        run(mypy, "--strict", "--no-incremental", *target, "user.py", cwd=app)
        report = run(mypy, "--strict", "--no-incremental", *target, "wrong.py", cwd=app, expect=1)
        if f"wrong.py:{wrong_line}: error" not in report:
            sys.exit(f"mypy ({label} install) did not report the wrong update type:\n{report}")
        print(f"mypy --strict against the {label} install: user module passes, wrong type caught")


def check_app_with_its_own_plugins(work: Path, python: Path) -> None:
    app = work / "app"
    for package, name in (("plugins", "MINE"), ("stores", "OURS")):
        (app / package).mkdir(parents=True)
        (app / package / "__init__.py").write_text(f"{name} = {package!r}\n")
    (app / "main.py").write_text(textwrap.dedent(APP_MAIN))
    for interpreter in (python, Path(sys.executable)):
        output = run(interpreter, "main.py", cwd=app)
        if "plugins stores StageWorkflow SqliteThreadStore" not in output:
            sys.exit(f"the application's own packages clash with statekernel's:\n{output}")
    print("an application with its own plugins/ and stores/ imports statekernel.plugins too")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="statekernel-package-") as folder:
        work = Path(folder)
        wheel = check_wheel(work)
        python = check_fresh_install(work, wheel)
        check_types(work, python)
        check_app_with_its_own_plugins(work, python)


if __name__ == "__main__":
    main()
