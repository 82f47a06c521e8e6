"""Tools built from typed functions: `@statekernel.tool`.

A model can only call a tool well if it is told the arguments, and a tool can only trust
its arguments if they were checked. Both come from one place, the function's signature:
its type hints (read by pydantic) give the JSON Schema the model is shown and the
validation the arguments pass before the function runs; its docstring gives the
descriptions. A call whose arguments do not fit is a tool error the model sees, naming the
argument, never a crash of the run.

A decorated tool is still a tool in the kernel's own convention, `tool(arguments, ctx)`, so
it fits anywhere a plain tool does (`Agent(tools=...)`, `run.handle_tool_call`, the stage
workflow's wrappers); the function itself stays at `.function`.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, overload

import pydantic

from .._engine.context import PhaseContext
from .._errors import InvalidDeclaration, InvalidToolArguments
from .._values.tools import ToolSpec

__all__ = ["FunctionTool", "spec_of", "tool"]


class FunctionTool:
    """A tool made from a function by `@tool`: `.spec` is what the model is told, `.name`
    its name, `.idempotent` whether a crash may simply run it again."""

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
        named = name or getattr(function, "__name__", None)
        if not isinstance(named, str) or not named:
            raise TypeError(f"@tool(name=...) is needed for {function!r}, which has no name")
        self.function = function
        self.name = named
        self.idempotent = idempotent
        self._bound: tuple[object] | None = None
        documented_by = function.func if isinstance(function, functools.partial) else function
        summary, documented = _read_docstring(inspect.getdoc(documented_by) or "")
        self._method = _is_method(function)
        self._context_parameter, fields, self._names = _fields(
            function, self.name, documented, method=self._method
        )
        # Fields are named arg0, arg1, ... with the parameters' names as aliases, so that no
        # parameter name can clash with pydantic's own (`model_config`, `_private`).
        self._arguments = pydantic.create_model(
            f"{self.name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True),
            **fields,
        )
        try:
            schema = self._arguments.model_json_schema(by_alias=True)
        except pydantic.PydanticUserError as error:
            raise InvalidDeclaration(
                f"tool {self.name!r}",
                f"its arguments have no JSON Schema ({error})",
                "Annotate every argument with a type pydantic can describe.",
            ) from error
        schema.pop("title", None)
        self.spec = ToolSpec(self.name, summary if description is None else description, schema)
        # The function's name and docstring, but not its attributes: a tool made of a tool
        # is named and described as asked here.
        functools.update_wrapper(self, function, updated=())

    def __get__(self, instance: object, owner: type | None = None) -> FunctionTool:
        """A `@tool` method: bound to its instance like any method (`self` is no argument
        the model gives)."""
        if instance is None or not self._method:
            return self  # a tool kept as a class attribute, or a staticmethod: not bound
        bound = copy.copy(self)
        bound._bound = (instance,)
        return bound

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
        values = {parameter: getattr(checked, field) for field, parameter in self._names.items()}
        if self._context_parameter is not None:
            values[self._context_parameter] = ctx
        if self._bound is not None:
            return self.function(*self._bound, **values)
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

    Use as `@tool` or `@tool(name=None, description=None, idempotent=False)`. The schema
    comes from the type hints (pydantic types, models and `Literal`s included), the tool's
    description from the docstring's first paragraph (or `description`), and each
    argument's description from an `Args:` section. A parameter annotated `PhaseContext`
    receives the call's context and is not part of the schema. The model's arguments are
    validated (pydantic) before the function runs; arguments that do not fit fail the call
    with `InvalidToolArguments`, whose message the model sees. `*args`, `**kwargs` and
    positional-only parameters raise `InvalidDeclaration`.

    The result is called like any tool, `(arguments, ctx)`, and has `.spec` (what the
    model is told), `.name`, `.idempotent` (whether a crash may simply run it again) and
    `.function` (the function itself). See [tools and schemas](tools.md).
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
    function: Callable[..., Any], name: str, documented: Mapping[str, str], *, method: bool
) -> tuple[str | None, dict[str, Any], dict[str, str]]:
    """The pydantic fields of the function's parameters (by field name), the name of the
    parameter that takes the PhaseContext (if any), and field name -> parameter name. The
    first parameter of a method (`self`, `cls`) is not an argument."""
    target = function.func if isinstance(function, functools.partial) else function
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except Exception as error:
        raise InvalidDeclaration(
            f"tool {name!r}",
            f"its type hints cannot be read ({type(error).__name__}: {error})",
            "Import every type the signature names at module level.",
        ) from error
    parameters = list(inspect.signature(function).parameters.values())
    if method:
        parameters = parameters[1:]  # `self`: bound when looked up on its instance
    context: str | None = None
    fields: dict[str, Any] = {}
    names: dict[str, str] = {}
    for parameter in parameters:
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
        if _is_context(annotation):
            context = parameter.name
            continue
        default = ... if parameter.default is parameter.empty else parameter.default
        described = documented.get(parameter.name)
        if described is None:  # a description in `Annotated[..., Field(...)]` then stands
            field = pydantic.Field(default, alias=parameter.name)
        else:
            field = pydantic.Field(default, alias=parameter.name, description=described)
        key = f"arg{len(fields)}"
        fields[key] = (annotation, field)
        names[key] = parameter.name
    return context, fields, names


def _is_context(annotation: Any) -> bool:
    """`PhaseContext`, or `PhaseContext | None`."""
    if annotation is PhaseContext:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return PhaseContext in typing.get_args(annotation)
    return False


def _is_method(function: Callable[..., Any]) -> bool:
    """A function defined in a class body whose first parameter is `self`: a method."""
    if not inspect.isfunction(function) or "." not in function.__qualname__:
        return False
    if "<locals>" in function.__qualname__.rsplit(".", 1)[-1]:
        return False
    parameters = list(inspect.signature(function).parameters)
    return bool(parameters) and parameters[0] == "self"


_ARG_LINE = re.compile(r"^\s*\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SECTIONS = {"args:", "arguments:", "parameters:", "params:"}


def _read_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph (the tool's description) and the argument descriptions of an
    `Args:` section (Google style: `name: text` or `name (type): text`, continued on
    lines indented further)."""
    lines = doc.splitlines()
    first: list[str] = []
    for line in doc.strip().splitlines():  # the first paragraph, up to a section
        if not line.strip() or line.strip().lower() in _SECTIONS:
            break
        first.append(line.strip())
    summary = " ".join(" ".join(first).split())
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
