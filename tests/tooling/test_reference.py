"""The API reference is generated from the code, and covers every public name.

The reference pages (docs/reference*.md, one per public module) hold `::: statekernel.Name`
blocks that mkdocstrings fills in from the docstrings when `make docs` builds the site. A
name added to an `__all__` without a block on its module's page, or without a docstring
(mkdocstrings would show an empty entry), fails here, naming what is missing. The build
itself (`mkdocs build --strict`, run by `make test`) fails on a block that names nothing and
on every broken link or anchor.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import griffe
import pytest
from docs_page import directives

import statekernel
import statekernel.events
import statekernel.lowlevel
import statekernel.models
import statekernel.plugins
import statekernel.stores
import statekernel.testing

DOCS = Path(__file__).resolve().parents[2] / "docs"

PAGES: dict[ModuleType, str] = {
    statekernel: "reference.md",
    statekernel.events: "reference-events.md",
    statekernel.models: "reference-models.md",
    statekernel.stores: "reference-stores.md",
    statekernel.plugins: "reference-plugins.md",
    statekernel.testing: "reference-testing.md",
    statekernel.lowlevel: "reference-lowlevel.md",
}


def _public_names(module: ModuleType) -> list[str]:
    return list(module.__all__)


def _directives(page: str) -> list[str]:
    return directives((DOCS / page).read_text(encoding="utf-8"))


def _documented_objects() -> dict[int, str]:
    """id(object) -> the dotted path of a block that documents it, over every page."""
    documented: dict[int, str] = {}
    for page in PAGES.values():
        for path in _directives(page):
            module_name, _, name = path.rpartition(".")
            module = _module(module_name)
            if module is not None and hasattr(module, name):
                documented.setdefault(id(getattr(module, name)), path)
    return documented


def _module(name: str) -> ModuleType | None:
    return next((module for module in PAGES if module.__name__ == name), None)


@pytest.fixture(scope="module")
def package() -> griffe.Object | griffe.Alias:
    """The package as mkdocstrings sees it: griffe's model of the source."""
    return griffe.load("statekernel", resolve_aliases=True, resolve_external=False)


def test_testing_exports_what_it_defines() -> None:
    """`statekernel.testing.__all__` keeps up with the functions it defines for users."""
    defined = {
        name
        for name, value in vars(statekernel.testing).items()
        if not name.startswith("_")
        and inspect.isfunction(value)
        and value.__module__.startswith(statekernel.testing.__name__)
    }
    assert defined <= set(statekernel.testing.__all__)


@pytest.mark.parametrize("module", list(PAGES), ids=lambda module: module.__name__)
def test_every_public_name_has_a_block_on_its_modules_page(module: ModuleType) -> None:
    """A name is documented on its module's page, unless it re-exports one documented."""
    page = PAGES[module]
    blocks = set(_directives(page))
    documented = _documented_objects()
    missing = [
        f"{module.__name__}.{name}"
        for name in _public_names(module)
        if f"{module.__name__}.{name}" not in blocks and id(getattr(module, name)) not in documented
    ]
    assert not missing, (
        f"docs/{page} has no `::: NAME` block for {len(missing)} public name(s): "
        f"{', '.join(missing)}. Add one where the name belongs, and give the name a docstring."
    )


def test_every_block_names_a_public_name() -> None:
    """A block names what users import: a module's public name, never a private path."""
    wrong = []
    for module, page in PAGES.items():
        for path in _directives(page):
            owner, _, name = path.rpartition(".")
            if path.startswith(f"{module.__name__}.") and owner == module.__name__:
                if name not in _public_names(module) and not _is_public_submodule(path):
                    wrong.append(f"{page}: {path} (not in {owner}'s public names)")
            elif not path.startswith(f"{module.__name__}.") or "._" in path:
                wrong.append(f"{page}: {path} (not a public name of {module.__name__})")
    assert not wrong, "\n".join(wrong)


def _is_public_submodule(path: str) -> bool:
    """`statekernel.testing.store_contract` and the like: modules users import by name."""
    if "._" in path:
        return False
    try:
        importlib.import_module(path)
    except ImportError:
        return False
    return True


@pytest.mark.slow
def test_every_documented_name_has_a_docstring(package: griffe.Object) -> None:
    """mkdocstrings shows a name with no docstring as its bare signature: say something."""
    bare = []
    for page in PAGES.values():
        for path in _directives(page):
            found = package[path.removeprefix("statekernel.")]
            target = found.final_target if isinstance(found, griffe.Alias) else found
            if target.docstring is None or not target.docstring.value.strip():
                bare.append(f"{path} ({page})")
    assert not bare, f"{len(bare)} documented name(s) have no docstring: {', '.join(bare)}"


def test_the_user_api_page_documents_no_lowlevel_name() -> None:
    """A name in `statekernel.lowlevel` only is documented there, not among the user API."""
    documented = {path.rpartition(".")[2] for path in _directives(PAGES[statekernel])}
    lowlevel_only = set(statekernel.lowlevel.__all__) - set(statekernel.__all__)
    assert not documented & lowlevel_only


@pytest.mark.slow
def test_no_signature_shows_a_private_constant_as_a_default() -> None:
    """`snapshot_every: int = SNAPSHOT_EVERY` would send readers after a name they cannot
    look up: the site's Griffe extension shows the constant's value instead."""
    # the extensions the site's build loads, as mkdocs.yml lists them
    mkdocs = (DOCS.parent / "mkdocs.yml").read_text(encoding="utf-8")
    listed = re.findall(r"^\s+- (docs/extensions/\S+\.py:\w+)$", mkdocs, re.MULTILINE)
    assert listed, "mkdocs.yml loads no Griffe extension from docs/extensions/"
    package = griffe.load(
        "statekernel",
        resolve_aliases=True,
        resolve_external=False,
        extensions=griffe.load_extensions(*(str(DOCS.parent / e) for e in listed)),
    )
    public = {name for module in PAGES for name in _public_names(module)}
    shown = []
    for page in PAGES.values():
        for path in _directives(page):
            found = package[path.removeprefix("statekernel.")]
            target = found.final_target if isinstance(found, griffe.Alias) else found
            for function in _signatures(target):
                for parameter in function.parameters:
                    default = str(parameter.default) if parameter.default is not None else ""
                    literal = default in {"None", "True", "False"}
                    if default.isidentifier() and not literal and default not in public:
                        shown.append(f"{path}: {function.name}({parameter.name}={default})")
    assert not shown, "\n".join(shown)


def _signatures(obj: griffe.Object) -> list[griffe.Function]:
    """The functions a block shows: the object itself, or a class's public methods."""
    if isinstance(obj, griffe.Function):
        return [obj]
    if not isinstance(obj, griffe.Class):
        return []
    return [
        member
        for name, member in obj.members.items()
        if isinstance(member, griffe.Function) and (name == "__init__" or not name.startswith("_"))
    ]
