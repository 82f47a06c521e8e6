"""Run the Python code of one docs page, as a reader who pastes each block in turn would.

`python tests/docs_page.py docs/concepts.md` runs the page's ```python blocks in order, in
one namespace (a later block uses what an earlier one defined) and in the current folder.
A block may `await` at its top level, as in an asyncio REPL: such a block runs on one event
loop kept for the whole page, so that what one block opens (a store, a run) the next can
use; a block without `await` runs as plain code, free to call `asyncio.run` itself.

A page may also hold code the reader does not see, as an HTML comment opened by a line
`<!-- python` and closed by a line `-->`. It runs in page order like a block. It stands for
what the page leaves to the reader (their model, their database's address), never for
what would make a visible block's claims true: a visible block still asserts its own.

A reference page (docs/reference*.md) shows docstrings: each `::: statekernel.Name` block
there is replaced by the docstrings mkdocstrings renders for it (the name's and its public
members', in source order, read by griffe as mkdocstrings reads them), so their examples run
too, each example with its own imports, as a reader pastes it. A block whose directive says
`members: false` shows its name's docstring alone, and so runs only that one's examples.

A block that leaves a coroutine un-awaited (`run.submit(cmd)` without `await`), or raises
a RuntimeWarning anywhere, fails like one that raises: Python would only warn, and the
reader's program would silently skip the call.

It exits 1 at the first block that raises, printing the block's line on the page and the
traceback; tests/tooling/test_docs_code.py runs every page through it.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import gc
import inspect
import re
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)(?P<info>[^\n`]*)$")
_HIDDEN = "<!-- python"
# A reference page's `::: statekernel.Name` line, with the indented options under it.
_DIRECTIVE = re.compile(
    r"^::: (?P<path>[\w.]+)[ \t]*\n(?P<options>(?:[ \t]+\S.*\n)*)", re.MULTILINE
)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """The page's ```python blocks (and hidden ones) as (first line, code), in page order."""
    blocks: list[tuple[int, str]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() == _HIDDEN:
            body = []
            index += 1
            while index < len(lines) and lines[index].strip() != "-->":
                body.append(lines[index])
                index += 1
            blocks.append((index - len(body) + 1, "\n".join(body) + "\n"))
            index += 1
            continue
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        language = opening.group("info").strip().split(" ")[0].lower()
        body: list[str] = []
        index += 1
        while index < len(lines) and lines[index].strip() != fence:
            body.append(lines[index].removeprefix(indent))
            index += 1
        if language in ("python", "py"):
            blocks.append((index - len(body), "\n".join(body) + "\n"))
        index += 1
    return blocks


def directives(text: str) -> list[str]:
    """The names a page's `:::` blocks document, in page order."""
    return [match["path"] for match in _DIRECTIVE.finditer(text)]


@functools.cache
def rendered_text(page: Path) -> str:
    """The page as a reader sees it: each `:::` block replaced by the docstrings it shows."""
    text = page.read_text(encoding="utf-8")
    if not _DIRECTIVE.search(text):
        return text
    import griffe  # only the reference pages need it (the `docs` extra, installed by dev)

    package = _package()

    def docstrings(found: griffe.Object | griffe.Alias, members: bool) -> list[str]:
        target = found.final_target if isinstance(found, griffe.Alias) else found
        shown = [target.docstring.value] if target.docstring else []
        if members and (target.is_module or target.is_class):
            for name, member in target.members.items():
                if not name.startswith("_") and not member.is_alias:
                    shown += docstrings(member, members=True)
        return shown

    def replace(match: re.Match[str]) -> str:
        found = package[match.group("path").removeprefix("statekernel.")]
        members = not re.search(r"^\s*members:\s*false\s*$", match["options"], re.MULTILINE)
        return "\n\n".join(docstrings(found, members)) + "\n"

    return _DIRECTIVE.sub(replace, text)


@functools.cache
def _package() -> Any:
    """The package as mkdocstrings reads it (griffe's model of the source), loaded once."""
    import griffe

    return griffe.load("statekernel", resolve_aliases=True, resolve_external=False)


def run_page(page: Path, rendered: str | None = None) -> int:
    """Run the page's code; `rendered` is its `rendered_text`, when the caller has it."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    lost: list[str] = []  # what Python could only report (a finalizer's exception)
    sys.unraisablehook = lambda report: lost.append(
        f"{report.exc_type.__name__}: {report.exc_value}"
    )
    warnings.simplefilter("error", RuntimeWarning)
    loop = asyncio.new_event_loop()
    try:
        text = rendered_text(page) if rendered is None else rendered
        for line, code in python_blocks(text):
            where = f"{page.name}, the block at line {line}"
            try:
                compiled = compile(
                    code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
                )
                if compiled.co_flags & inspect.CO_COROUTINE:
                    loop.run_until_complete(eval(compiled, namespace))
                else:
                    exec(compiled, namespace)
                gc.collect()
                if lost:
                    raise RuntimeError("; ".join(lost))
            except BaseException:
                print(f"{where} raised:\n{code}", file=sys.stderr)
                traceback.print_exc()
                return 1
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    # docs_page.py PAGE [RENDERED]: RENDERED is a file holding the page's rendered text.
    rendered = Path(sys.argv[2]).read_text(encoding="utf-8") if len(sys.argv) > 2 else None
    sys.exit(run_page(Path(sys.argv[1]).resolve(), rendered))
