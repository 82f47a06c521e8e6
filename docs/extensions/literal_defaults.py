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
    member = function.module.members.get(name)
    if member is None:
        return None
    try:
        target = member.final_target if member.is_alias else member
    except griffe.AliasResolutionError:
        return None
    if not isinstance(target, griffe.Attribute) or target.value is None:
        return None
    # the assignment as written (`0o600`, not the `384` the parsed value would print)
    written = target.source.partition("=")[2].strip() if target.source else ""
    for text in (written, str(target.value)):
        try:
            ast.literal_eval(text)
        except (ValueError, SyntaxError):
            continue  # not a literal (a call, another name, a trailing comment)
        return text
    return None
