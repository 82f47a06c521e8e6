"""docs/architecture.md stays the true map of the kernel.

Its folders table gives each layer folder (and each top-level module) of `kernel/` a layer;
its modules tables list every module of `kernel/`, `stores/` and `plugins/`. A module may
import only modules of its own layer or lower ones, and the modules of one layer import each
other without a cycle. This fails, naming the module and the import, when a module is
missing from the map, the map lists one that no longer exists, a module sits at `kernel/`'s
top level that is neither a face nor a foundation module, an import runs against the flow
(values -> engine -> durable -> host -> agents) or closes a cycle within a layer, a kernel
module makes a `StoreError` without its row saying so (or the other way round), or the page
names a file that does not exist.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The repository's kernel/, or statekernel/ in the mutation mirror laid out as the package
# (there plugins/ and stores/ sit inside it, and are not kernel modules).
KERNEL = ROOT / "kernel" if (ROOT / "kernel").is_dir() else ROOT / "statekernel"
NOT_KERNEL = {"plugins", "stores"}
# plugins/ and stores/ beside kernel/ (or inside statekernel/ in the mutation mirror): their
# modules are on the map as `plugins._stages`, `stores._sqlite.connection`.
OUTSIDE = {name: (KERNEL if KERNEL.name == "statekernel" else ROOT) / name for name in NOT_KERNEL}
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


def _module_name(path: Path, base: Path = KERNEL) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _kernel_modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for path in sorted(KERNEL.rglob("*.py"))
        if path.relative_to(KERNEL).parts[0] not in NOT_KERNEL
    }


def _outside_modules() -> dict[str, Path]:
    """The modules of plugins/ and stores/, named from their folder: `stores._memory`."""
    return {
        _module_name(path, folder.parent): path
        for folder in OUTSIDE.values()
        for path in sorted(folder.rglob("*.py"))
    }


def _room(name: str) -> str:
    """The room a module belongs to: its top-level folder, or itself at the top level."""
    return name.split(".")[0]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, kernel module) for each import of the kernel in a kernel file: relative ones,
    and absolute ones of `statekernel` (`__init__`) or of a module in it. Imports for type
    checking only and imports inside functions count too: they are dependencies all the same.
    """
    package = list(path.relative_to(KERNEL).parts[:-1])
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = package[: len(package) - (node.level - 1)]
            module = [*base, *(node.module.split(".") if node.module else [])]
        elif isinstance(node, ast.ImportFrom) and _is_kernel(node.module or ""):
            module = (node.module or "").split(".")[1:]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_kernel(alias.name):
                    found.append((node.lineno, ".".join(alias.name.split(".")[1:]) or "__init__"))
            continue
        else:
            continue
        # `from ._schema import schema` imports a submodule: count each name as a possible
        # module (a name that is not one maps back to `module`, `_resolved` says).
        found.extend((node.lineno, ".".join([*module, a.name])) for a in node.names)
    return found


def _is_kernel(module: str) -> bool:
    top, _, rest = module.partition(".")
    return top == "statekernel" and _room(rest) not in NOT_KERNEL


def _resolved(target: str, modules: dict[str, Path]) -> str:
    """The module an import target names: itself, else the nearest package that holds it
    (`_engine.commit.LiveState` -> `_engine.commit`; a name of `statekernel` -> `__init__`)."""
    parts = target.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) if parts else "__init__"


def _import_graph() -> dict[str, dict[str, tuple[Path, int]]]:
    """module -> {module it imports: (file, line) of the first such import}."""
    modules = _kernel_modules()
    graph: dict[str, dict[str, tuple[Path, int]]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for line, target in _imports(path):
            imported = _resolved(target, modules)
            if imported != name:
                edges.setdefault(imported, (path, line))
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = {stack.pop()}
            while node not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _a_cycle_through(component: frozenset[str], graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `component`, as the modules it passes, from its first module back."""
    start = min(component)

    def paths(node: str, seen: list[str]) -> Iterator[list[str]]:
        for other in sorted(graph[node] & component):
            if other == start:
                yield [*seen, start]
            elif other not in seen:
                yield from paths(other, [*seen, other])

    return next(paths(start, [start]))


def test_every_module_is_on_the_map_and_nothing_else() -> None:
    mapped, modules = _mapped_modules(), {**_kernel_modules(), **_outside_modules()}
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
    upward: list[str] = []
    for name, edges in _import_graph().items():
        room = _room(name)
        for imported, (path, line) in edges.items():
            target_room = _room(imported)
            if target_room == room or target_room not in layers:
                continue
            if layers[target_room] > layers[room]:
                upward.append(
                    f"{path.relative_to(ROOT)}:{line}: {room} (layer {layers[room]}) imports "
                    f"{target_room} (layer {layers[target_room]})"
                )
    assert not upward, "imports against the flow:\n" + "\n".join(upward)


# Cycles that exist and are accepted, each with why; the test fails if one goes away, so
# that this list stays the list of what is left.
KNOWN_CYCLES: set[frozenset[str]] = set()


def test_no_import_cycle_within_a_layer() -> None:
    layers = _layers()
    full = _import_graph()
    graph = {
        name: {
            other
            for other in edges
            if _room(other) in layers and layers[_room(other)] == layers[_room(name)]
        }
        for name, edges in full.items()
    }
    found = _cycles(graph)
    new = [component for component in found if component not in KNOWN_CYCLES]
    described = []
    for component in new:
        cycle = _a_cycle_through(component, graph)
        steps = [
            f"  {full[a][b][0].relative_to(ROOT)}:{full[a][b][1]}: {a} imports {b}"
            for a, b in itertools.pairwise(cycle)
        ]
        described.append(f"{' -> '.join(cycle)}\n" + "\n".join(steps))
    assert not new, (
        "imports that run in a cycle within a layer (move what both need into a module "
        "of its own, or hand one the other's value instead of importing it):\n"
        + "\n".join(described)
    )
    gone = [sorted(component) for component in KNOWN_CYCLES if component not in found]
    assert not gone, f"no longer a cycle, remove it from KNOWN_CYCLES: {gone}"


def _makes_store_error(path: Path) -> list[int]:
    """Lines of `path` that construct a `StoreError`."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "StoreError")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "StoreError")
        )
    ]


def test_the_rows_name_every_kernel_module_that_makes_a_store_error() -> None:
    # A store's failure reaches the user as a StoreError made in a few known places; a new
    # place is a new policy, so its row says so (and a row that says so stays true).
    rows = {m["module"]: m["what"] for m in _MODULE.finditer(_section("Modules"))}
    making = {
        name: lines
        for name, path in _kernel_modules().items()
        if (lines := _makes_store_error(path))
    }
    said = {name for name, what in rows.items() if "`StoreError`" in what}
    unsaid = sorted(f"{name} (lines {lines})" for name, lines in making.items() if name not in said)
    assert not unsaid, f"make a StoreError, but their rows do not say so: {unsaid}"
    untrue = sorted(said - making.keys() - {"_errors"})
    assert not untrue, f"rows say these make a StoreError, but they do not: {untrue}"


_NAMED_FILE = re.compile(r"`([\w./-]+\.py)`")


def _file_suffixes() -> set[str]:
    """Every tail of every Python file's path that the page may name: `_engine/commit.py`,
    `commit.py`, `kernel/_engine/commit.py` (whatever the kernel's folder is called here)."""
    tails: set[str] = set()
    folders = [KERNEL, *OUTSIDE.values(), *(ROOT / name for name in ("tests", "docs"))]
    for folder in folders:
        for path in folder.rglob("*.py"):
            parts = path.relative_to(ROOT).parts
            tails.update("/".join(parts[i:]) for i in range(len(parts)))
            if folder == KERNEL:
                tails.add("kernel/" + path.relative_to(KERNEL).as_posix())
    return tails


def test_every_file_the_map_names_exists() -> None:
    named = set(_NAMED_FILE.findall(MAP.read_text(encoding="utf-8")))
    missing = sorted(named - _file_suffixes())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_the_map_is_linked_from_the_readme() -> None:
    assert "docs/architecture.md" in (ROOT / "README.md").read_text(encoding="utf-8")
