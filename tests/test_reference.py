"""docs/reference.md keeps up with the code: every public name is in it, and its links work.

A name counts as documented when the page has an inline code span holding exactly that name
(`Kernel`, not only `Kernel(plugins, ...)`), outside fenced code blocks. Adding a name to an
`__all__` without documenting it fails here, naming what is missing.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

import statekernel
import statekernel.events
import statekernel.lowlevel
import statekernel.models
import statekernel.plugins
import statekernel.stores
import statekernel.testing

DOCS = Path(__file__).resolve().parent.parent / "docs"
REFERENCE = DOCS / "reference.md"

TESTING_FUNCTIONS = ("snapshot_of", "run_hooks", "run_hooks_sync", "assert_commutative")

_FENCE = re.compile(r"^(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The page without its fenced code blocks."""
    kept: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(line)
    return "\n".join(kept)


def _code_spans(text: str) -> set[str]:
    return {" ".join(match.group(2).split()) for match in _CODE_SPAN.finditer(_prose(text))}


def _testing_functions() -> list[str]:
    """The public functions defined in statekernel.testing (it has no __all__)."""
    return sorted(
        name
        for name, value in vars(statekernel.testing).items()
        if not name.startswith("_")
        and inspect.isfunction(value)
        and value.__module__ == statekernel.testing.__name__
    )


def _public_names() -> list[tuple[str, str]]:
    modules: tuple[ModuleType, ...] = (
        statekernel,
        statekernel.events,
        statekernel.models,
        statekernel.lowlevel,
        statekernel.stores,
        statekernel.plugins,
    )
    names = [(module.__name__, name) for module in modules for name in module.__all__]
    names += [("statekernel.testing", name) for name in _testing_functions()]
    return names


def test_the_testing_functions_are_found() -> None:
    assert set(TESTING_FUNCTIONS) <= set(_testing_functions())


def _sections(text: str) -> dict[str, str]:
    """The page cut at its level-2 module headings: module name -> that section's text."""
    sections: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines(keepends=True):
        heading = re.fullmatch(r"## `([\w.]+)`\s*", line)
        if heading:
            current = heading.group(1)
            sections[current] = ""
        elif current is not None:
            sections[current] += line
    return sections


def test_every_public_name_is_in_its_modules_section() -> None:
    sections = _sections(REFERENCE.read_text(encoding="utf-8"))
    missing = [
        f"{module}.{name}"
        for module, name in _public_names()
        if name not in _code_spans(sections.get(module, ""))
    ]
    assert not missing, (
        f"docs/reference.md does not mention {len(missing)} public name(s) as `Name` in the "
        f"section of their module: {', '.join(missing)}. Document them there (signature, "
        f"what it is for, a link)."
    )


def test_the_user_api_section_documents_no_lowlevel_name() -> None:
    """A name in `statekernel.lowlevel` only is documented there, not among the user API."""
    sections = _sections(REFERENCE.read_text(encoding="utf-8"))
    headings = re.findall(r"^#{3,4} (.+)$", sections["statekernel"], re.MULTILINE)
    documented = {name for heading in headings for name in re.findall(r"`(\w+)`", heading)}
    lowlevel_only = set(statekernel.lowlevel.__all__) - set(statekernel.__all__)
    assert not documented & lowlevel_only


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {
        _slug(line.lstrip("#"))
        for line in _prose(page.read_text(encoding="utf-8")).splitlines()
        if line.startswith("#")
    }


def _local_links() -> list[str]:
    links = _LINK.findall(_prose(REFERENCE.read_text(encoding="utf-8")))
    return [link for link in links if "://" not in link]


@pytest.mark.parametrize("link", sorted(set(_local_links())))
def test_reference_links_resolve(link: str) -> None:
    target, _, anchor = link.partition("#")
    page = (DOCS / target).resolve() if target else REFERENCE
    assert page.is_file(), f"docs/reference.md links to {link!r}, but {page} does not exist"
    if anchor:
        assert anchor in _anchors(page), (
            f"docs/reference.md links to {link!r}, but {page.name} has no heading with that anchor"
        )
