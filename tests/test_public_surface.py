"""One public face: what users import is public; nothing outside the kernel uses its privates.

The kernel's modules are private (`statekernel._engine.commit`, ...) so that they can move. That
only holds while nothing outside `kernel/` imports them: the bundled stores and plugins are
written against `statekernel` and `statekernel.lowlevel` like any user's, and so are the
tests, benchmarks and examples. This file fails, naming the file and line, when one does not.
"""

from __future__ import annotations

import ast
import inspect
import re
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

import statekernel
import statekernel.lowlevel
import statekernel.plugins
import statekernel.stores

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE_KERNEL = ("stores", "plugins", "tests", "benchmarks", "docs")
ALLOWED_IN_BUNDLED = {"statekernel", "statekernel.lowlevel"}


PACKAGE_OF = {"stores": "statekernel.stores", "plugins": "statekernel.plugins"}


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) for every import in a Python file; relative imports in
    stores/ and plugins/ are resolved against the package they install as."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    top, *folders, _ = path.relative_to(ROOT).parts
    package = [*PACKAGE_OF.get(top, "").split("."), *folders]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:  # `from statekernel import _commit` imports a module too
                yield node.lineno, f"{module}.{alias.name}"


def _python_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def _is_private(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "statekernel" and any(part.startswith("_") for part in parts[1:])


def test_nothing_outside_the_kernel_imports_a_private_kernel_module() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _python_files(*OUTSIDE_KERNEL)
        for line, module in _imports(path)
        if _is_private(module)
        and not module.startswith(f"statekernel.{path.relative_to(ROOT).parts[0]}.")
    ]
    assert not offenders, (
        "private statekernel modules imported from outside the kernel: "
        + "; ".join(offenders)
        + ". Import the name from statekernel or statekernel.lowlevel (add it to "
        "statekernel.lowlevel, with a block in docs/reference-lowlevel.md, if a store or tool "
        "needs it)."
    )


def test_stores_and_plugins_use_only_the_public_kernel() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _python_files("stores", "plugins")
        for line, module in _imports(path)
        if module.split(".")[0] == "statekernel"
        and module not in ALLOWED_IN_BUNDLED
        and module.rsplit(".", 1)[0] not in ALLOWED_IN_BUNDLED  # `from statekernel import X`
        and not module.startswith(PACKAGE_OF[path.relative_to(ROOT).parts[0]] + ".")  # its own
    ]
    assert not offenders, "; ".join(offenders)


def test_the_kernel_never_imports_stores_or_plugins() -> None:
    """Stores implement protocols the kernel defines; the kernel knows neither backend nor
    plugin (data flows one way). The command line finds them through the package's
    metadata (entry points), never by import. Nor do the examples in its docstrings, which
    the reference shows and the docs tests run: an example needing a store lives with the
    store."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _python_files("kernel")
        for line, module in _imports(path)
        if module.startswith(("statekernel.stores", "statekernel.plugins"))
    ]
    example_import = re.compile(r"^\s*(from|import) statekernel\.(stores|plugins)\b")
    offenders += [
        f"{path.relative_to(ROOT)}:{number} shows an import of a layer above the kernel"
        for path in _python_files("kernel")
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if example_import.match(text)
    ]
    assert not offenders, "; ".join(offenders)


def _public_objects() -> list[tuple[str, str, object]]:
    found: list[tuple[str, str, object]] = []
    for module in (statekernel, statekernel.lowlevel):
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) or inspect.isfunction(value):
                found.append((module.__name__, name, value))
    return found


@pytest.mark.parametrize(
    ("module", "name", "value"), _public_objects(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_public_objects_carry_their_public_path(module: str, name: str, value: object) -> None:
    assert f"{value.__module__}.{value.__qualname__}" == f"{module}.{name}"  # type: ignore[attr-defined]
    if isinstance(value, type):
        typing.get_type_hints(value)  # annotations still resolve after the rename


def test_the_user_api_holds_no_engine_parts() -> None:
    engine_parts = {"LiveState", "KeyRegistry", "Contribution", "partition", "Partition"}
    assert not engine_parts & set(statekernel.__all__)
    assert engine_parts <= set(statekernel.lowlevel.__all__)


def test_every_name_in_all_exists_and_nothing_public_is_left_out() -> None:
    for module in (statekernel, statekernel.lowlevel, statekernel.stores, statekernel.plugins):
        assert sorted(set(module.__all__)) == sorted(module.__all__), module.__name__
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.__all__ names missing {name}"
    public_classes = {
        name
        for name, value in vars(statekernel).items()
        if not name.startswith("_") and isinstance(value, type)
    }
    assert public_classes <= set(statekernel.__all__)


def test_the_version_is_the_distributions() -> None:
    import importlib.metadata
    import tomllib

    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert statekernel.__version__ == project["project"]["version"]
    assert statekernel.__version__ == importlib.metadata.version("statekernel")
