"""docs/architecture.md stays the true map of the kernel.

Its folders table gives each layer folder (and each top-level module) of `kernel/` a layer;
its modules table lists every module. A module may import only modules of its own layer or
lower ones. This fails, naming the module and the import, when a module is missing from the
map, the map lists one that no longer exists, a module sits at `kernel/`'s top level that is
neither a face nor a foundation module, or an import runs against the flow (values -> engine
-> durable -> host -> agents).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The repository's kernel/, or statekernel/ in the mutation mirror laid out as the package
# (there plugins/ and stores/ sit inside it, and are not kernel modules).
KERNEL = ROOT / "kernel" if (ROOT / "kernel").is_dir() else ROOT / "statekernel"
NOT_KERNEL = {"plugins", "stores"}
MAP = ROOT / "docs" / "architecture.md"
# What kernel/'s top level may hold besides the layer folders: the faces (public paths) and
# the foundation every layer uses.
TOP_LEVEL = {"__init__", "__main__", "lowlevel", "testing", "events", "_errors", "_public"}

_FOLDER = re.compile(r"^\| `(?P<room>[\w]+)/?` \| (?P<layer>\d+) [a-z ]+ \| .+ \| .+ \|$", re.M)
_MODULE = re.compile(r"^\| `(?P<module>[\w.]+)` \| (?P<what>[^|]+) \|$", re.M)


def _section(title: str) -> str:
    text = MAP.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _layers() -> dict[str, int]:
    """Layer of each room: a folder of kernel/ (`_engine`) or a top-level module (`events`)."""
    return {m["room"]: int(m["layer"]) for m in _FOLDER.finditer(_section("Folders"))}


def _mapped_modules() -> set[str]:
    return {m["module"] for m in _MODULE.finditer(_section("Modules"))}


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


def _room(name: str) -> str:
    """The room a module belongs to: its top-level folder, or itself at the top level."""
    return name.split(".")[0]


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
    mapped, modules = _mapped_modules(), _kernel_modules()
    missing = sorted(name for name in modules if name not in mapped)
    stale = sorted(name for name in mapped if name not in modules)
    assert not missing, f"docs/architecture.md has no row for: {', '.join(missing)}"
    assert not stale, f"docs/architecture.md lists modules that do not exist: {stale}"


def test_every_room_has_a_layer_and_the_top_level_holds_only_faces() -> None:
    layers, modules = _layers(), _kernel_modules()
    rooms = {_room(name) for name in modules}
    assert rooms <= layers.keys(), f"folders without a layer: {sorted(rooms - layers.keys())}"
    assert not layers.keys() - rooms, f"layers of no room: {sorted(layers.keys() - rooms)}"
    loose = sorted(path.stem for path in KERNEL.glob("*.py") if path.stem not in TOP_LEVEL)
    assert not loose, (
        f"kernel/ holds modules that are neither faces nor foundation: {loose}; "
        f"put each in the folder of its layer"
    )
    for folder in (p for p in KERNEL.iterdir() if p.is_dir() and p.name not in NOT_KERNEL):
        if folder.name == "__pycache__":
            continue
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder.name}/ has no __init__.py"
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), f"{folder.name}/__init__.py must say what the layer is"
        if folder.name.startswith("_"):
            exports = [n for n in tree.body if not isinstance(n, ast.Expr)]
            assert not exports, f"{folder.name}/__init__.py must export nothing"


def test_no_module_imports_a_higher_layer() -> None:
    layers = _layers()
    modules = _kernel_modules()
    upward: list[str] = []
    for name, path in modules.items():
        room = _room(name)
        for line, target in _imports(path):
            target_room = _room(target)
            if target_room == room or target_room not in layers:
                continue
            if layers[target_room] > layers[room]:
                upward.append(
                    f"{path.relative_to(ROOT)}:{line}: {room} (layer {layers[room]}) imports "
                    f"{target_room} (layer {layers[target_room]})"
                )
    assert not upward, "imports against the flow:\n" + "\n".join(upward)


def test_the_map_is_linked_from_the_readme() -> None:
    assert "docs/architecture.md" in (ROOT / "README.md").read_text(encoding="utf-8")
