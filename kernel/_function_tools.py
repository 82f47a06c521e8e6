"""Tools built from typed functions: `@statekernel.tool`.

A model can only call a tool well if it is told the arguments, and a tool can only trust
its arguments if they were checked. Both come from one place, the function's signature:
its type hints (read by pydantic) give the JSON Schema the model is shown and the
validation the arguments pass before the function runs; its docstring gives the
descriptions. A call whose arguments do not fit is a tool error the model sees, naming the
argument, never a crash of the run.

A decorated tool is still a tool in the kernel's own convention, `tool(arguments, ctx)`, so
it fits anywhere a plain tool does (`Agent(tools=...)`, `run.call_tool`, the stage
workflow's wrappers); the function itself stays at `.function`.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, overload

import pydantic

from ._context import PhaseContext
from ._errors import InvalidDeclaration, InvalidToolArguments
from ._tools import ToolSpec

__all__ = ["FunctionTool", "spec_of", "tool"]


class FunctionTool:
    """A tool made from a function by `@tool`: `.spec` is what the model is told, `.name`
    its name, `.idempotent` whether a crash may simply run it again."""

    __statekernel_tool__: ClassVar[bool] = True

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
    ) -> None:
        if not callable(function):
            raise TypeError(f"@tool decorates a function, got {function!r}")
        self.function = function
        self.name = name or function.__name__
        self.idempotent = idempotent
        summary, documented = _read_docstring(inspect.getdoc(function) or "")
        self._context_parameter, fields = _fields(function, self.name, documented)
        self._arguments = pydantic.create_model(
            f"{self.name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True),
            **fields,
        )
        schema = self._arguments.model_json_schema()
        schema.pop("title", None)
        self.spec = ToolSpec(self.name, summary if description is None else description, schema)
        functools.update_wrapper(self, function)

    def __call__(self, arguments: Mapping[str, Any], ctx: PhaseContext | None = None) -> Any:
        """Run the tool as the kernel does: check `arguments` against the schema, then call
        the function with them (and with `ctx`, if it takes the PhaseContext)."""
        try:
            checked = self._arguments.model_validate(dict(arguments))
        except pydantic.ValidationError as error:
            problems = tuple(
                (".".join(str(part) for part in item["loc"]) or "(arguments)", item["msg"])
                for item in error.errors()
            )
            raise InvalidToolArguments(self.name, problems) from None
        values = {name: getattr(checked, name) for name in type(checked).model_fields}
        if self._context_parameter is not None:
            values[self._context_parameter] = ctx
        return self.function(**values)

    def __repr__(self) -> str:
        return f"<tool {self.name!r}>"


@overload
def tool(function: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, idempotent: bool = False
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool of a function, its schema from the signature's type hints and its
    descriptions from the docstring (the first paragraph, and an `Args:` section).

    Use as `@tool` or `@tool(name=..., description=..., idempotent=True)`. A parameter
    annotated `PhaseContext` receives the call's context and is not an argument the model
    gives. Arguments are validated (pydantic) before the function runs.
    """
    if function is not None:
        return FunctionTool(function)

    def decorate(inner: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(inner, name=name, description=description, idempotent=idempotent)

    return decorate


def spec_of(name: str, tool: Any) -> ToolSpec:
    """What the model is told of `tool`, offered under `name`: its own `.spec` if it has one
    (renamed if offered under another name), else its docstring's first paragraph and
    arguments of any shape (`{"type": "object"}`)."""
    spec = getattr(tool, "spec", None)
    if isinstance(spec, ToolSpec):
        if spec.name == name:
            return spec
        return ToolSpec(name, spec.description, spec.parameters)
    summary, _ = _read_docstring(inspect.getdoc(tool) or "")
    return ToolSpec(name, summary)


def _fields(
    function: Callable[..., Any], name: str, documented: Mapping[str, str]
) -> tuple[str | None, dict[str, Any]]:
    """The pydantic fields of the function's parameters, and the name of the one that takes
    the PhaseContext (if any)."""
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as error:
        raise InvalidDeclaration(
            f"tool {name!r}",
            f"its type hints cannot be read ({type(error).__name__}: {error})",
            "Import every type the signature names at module level.",
        ) from error
    context: str | None = None
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise InvalidDeclaration(
                f"tool {name!r}",
                f"parameter {parameter.name!r} is *args or **kwargs, which no schema can say",
                "Name every argument the model may give.",
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise InvalidDeclaration(
                f"tool {name!r}",
                f"parameter {parameter.name!r} is positional-only, but a model names arguments",
                "Drop the `/` from the signature.",
            )
        annotation = hints.get(parameter.name, Any)
        if annotation is PhaseContext:
            context = parameter.name
            continue
        default = ... if parameter.default is parameter.empty else parameter.default
        field = pydantic.Field(default, description=documented.get(parameter.name))
        fields[parameter.name] = (annotation, field)
    return context, fields


_ARG_LINE = re.compile(r"^\s*\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SECTIONS = {"args:", "arguments:", "parameters:", "params:"}


def _read_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph (the tool's description) and the argument descriptions of an
    `Args:` section (Google style: `name: text` or `name (type): text`, continued on
    lines indented further)."""
    first = doc.strip().split("\n\n")[0]
    summary = "" if first.strip().lower() in _SECTIONS else " ".join(first.split())
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().lower() in _SECTIONS), None)
    described: dict[str, str] = {}
    if start is None:
        return summary, described
    indent: int | None = None
    current: str | None = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        match = _ARG_LINE.match(line)
        if depth < indent or (depth == indent and match is None):
            break  # the section is over (Returns:, Raises:, ...)
        if depth == indent and match is not None:
            current = match.group(1)
            described[current] = match.group(2).strip()
        elif current is not None:
            described[current] = f"{described[current]} {line.strip()}".strip()
    return summary, described
