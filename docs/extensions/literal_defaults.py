"""A Griffe extension for the API reference: a default named by a module constant is shown
as the constant's value.

`Kernel(snapshot_every=SNAPSHOT_EVERY)` reads well in the code, where the constant is one
click away, but the reference would show a private name the reader cannot look up. So a
parameter whose default is a bare name of a module-level constant with a literal value
(`SNAPSHOT_EVERY = 1000`) is shown with that value (`snapshot_every: int = 1000`). mkdocs.yml
loads it (`extensions:` of the Python handler); nothing of statekernel imports it.
"""

from __future__ import annotations

import ast
import textwrap
from typing import Any

import griffe


class LiteralDefaults(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for function in _functions(pkg):
            for parameter in function.parameters:
                value = _constant_value(function, parameter.default)
                if value is not None:
                    parameter.default = value


def _functions(obj: griffe.Object) -> list[griffe.Function]:
    """Every function and method defined in `obj`, aliases (re-exports) left out."""
    found: list[griffe.Function] = []
    for member in obj.members.values():
        if member.is_alias:
            continue
        assert isinstance(member, griffe.Object)
        if isinstance(member, griffe.Function):
            found.append(member)
        elif isinstance(member, griffe.Module | griffe.Class):
            found.extend(_functions(member))
    return found


def _constant_value(function: griffe.Function, default: Any) -> str | None:
    """The literal a bare-name default stands for, or None when it is anything else."""
    name = str(default) if default is not None else ""
    if not name.isidentifier() or name in ("None", "True", "False"):
        return None
    # as Python resolves the name where the signature is evaluated: the class body first
    scopes = [function.parent] if isinstance(function.parent, griffe.Class) else []
    member = next((s.members[name] for s in [*scopes, function.module] if name in s.members), None)
    if member is None:
        return None
    try:
        target = member.final_target if member.is_alias else member
    except griffe.AliasResolutionError:
        return None
    if not isinstance(target, griffe.Attribute) or target.value is None:
        return None
    return _written_literal(target) or _literal(str(target.value))


def _written_literal(attribute: griffe.Attribute) -> str | None:
    """The assigned value as written (`0o600`, where the parsed value would print `384`),
    without a trailing comment; None when it is not a one-line literal."""
    source = textwrap.dedent(attribute.source or "")
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    if len(body) != 1 or not isinstance(body[0], ast.Assign | ast.AnnAssign):
        return None
    value = body[0].value
    return _literal(ast.get_source_segment(source, value) or "") if value is not None else None


def _literal(text: str) -> str | None:
    if not text or "\n" in text:
        return None
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None  # a call, another name: keep the name
    return text
