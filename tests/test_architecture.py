"""docs/architecture.md stays the true map of the kernel.

Its rooms table lists every module inside `kernel/` with a layer; a module may import only
modules of its own layer or lower ones. This fails, naming the module and the import, when a
module is missing from the map, the map lists one that no longer exists, or an import runs
against the flow (declaration -> registry -> engine -> persistence -> store).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The repository's kernel/, or statekernel/ in the mutation mirror laid out as the package
# (there plugins/ and stores/ sit inside it, and are not kernel modules).
KERNEL = ROOT / "kernel" if (ROOT / "kernel").is_dir() else ROOT / "statekernel"
NOT_KERNEL = {"plugins", "stores"}
MAP = ROOT / "docs" / "architecture.md"

_ROW = re.compile(r"^\| `(?P<module>[\w.]+)` \| (?P<layer>\d+) [a-z ]+ \| .+ \|$", re.MULTILINE)


def _layers() -> dict[str, int]:
    return {m["module"]: int(m["layer"]) for m in _ROW.finditer(MAP.read_text(encoding="utf-8"))}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(KERNEL).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _kernel_modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for path in sorted(KERNEL.rglob("*.py"))
        if path.relative_to(KERNEL).parts[0] not in NOT_KERNEL
    }


def _room(name: str, layers: dict[str, int]) -> str | None:
    """The mapped room a module name belongs to (a package counts as its own room)."""
    while name and name not in layers:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, kernel module) for each relative import in a kernel file."""
    package = list(path.relative_to(KERNEL).parts[:-1])
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = package[: len(package) - (node.level - 1)]
            module = [*base, *(node.module.split(".") if node.module else [])]
            # `from ._schema import schema` imports a submodule: count each name as a
            # possible module (a name that is not one maps back to `module`'s room).
            found.extend((node.lineno, ".".join([*module, a.name])) for a in node.names)
    return found


def test_every_kernel_module_is_on_the_map_and_nothing_else() -> None:
    layers, modules = _layers(), _kernel_modules()
    missing = sorted(name for name in modules if name not in layers)
    stale = sorted(name for name in layers if name not in modules)
    assert not missing, f"docs/architecture.md has no row for: {', '.join(missing)}"
    assert not stale, f"docs/architecture.md lists modules that do not exist: {stale}"


def test_no_module_imports_a_higher_layer() -> None:
    layers = _layers()
    upward: list[str] = []
    for name, path in _kernel_modules().items():
        room = _room(name, layers)
        assert room is not None, name
        for line, target in _imports(path):
            target_room = _room(target, layers)
            if target_room is None or target_room == room:
                continue
            if layers[target_room] > layers[room]:
                upward.append(
                    f"{path.relative_to(ROOT)}:{line}: {room} (layer {layers[room]}) imports "
                    f"{target_room} (layer {layers[target_room]})"
                )
    assert not upward, "imports against the flow:\n" + "\n".join(upward)


def test_the_map_is_linked_from_the_readme() -> None:
    assert "docs/architecture.md" in (ROOT / "README.md").read_text(encoding="utf-8")
