"""Presenting objects from private modules under the public path users import them by.

The kernel lives in private modules (`statekernel._engine.commit`, ...) so that their layout can
change freely; what a user sees in a repr, a traceback or `help()` should still be the name
they wrote (`statekernel.StateKey`), as httpx and Trio do it.

Rewriting `__module__` has one trap: `typing.get_type_hints`, msgspec and pydantic resolve
a class's string annotations (`from __future__ import annotations`) in the namespace of
`sys.modules[cls.__module__]`. So each class's own annotations are resolved first, while the
class still names the module that wrote them, and only then is it renamed. They are
evaluated at import, so a public class must not annotate with a name imported only under
`TYPE_CHECKING` (`import statekernel` would fail, naming it, in every test run).

The price, shared with httpx and Trio: `inspect.getsource(statekernel.StateKey)` looks in
`statekernel/__init__.py` and finds nothing. Static tools (IDEs, mypy) follow the imports
and are not affected.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

__all__ = ["publish", "renamed"]

F = TypeVar("F", bound=Callable[..., Any])


def publish(public_module: str, namespace: Mapping[str, Any], names: Iterable[str]) -> None:
    """Give each named class or function defined in a private `statekernel._*` module the
    public path (constants keep theirs: they have no module of their own)."""
    for name in names:
        obj = namespace[name]
        if not isinstance(obj, type) and not inspect.isfunction(obj):
            continue
        defined_in = getattr(obj, "__module__", None)
        if not isinstance(defined_in, str) or not defined_in.startswith("statekernel._"):
            continue
        if isinstance(obj, type) and "__annotations__" in vars(obj):
            obj.__annotations__ = inspect.get_annotations(obj, eval_str=True)
        obj.__module__ = public_module


def renamed(new: F, old_name: str, *, until: str) -> F:
    """`new` under the name it had before, for one more release: each call warns with a
    `DeprecationWarning` naming the new name, then does exactly what `new` does. Works for
    functions and methods alike (assign it in the class body); a method alias calls the new
    name on the instance, so a subclass that overrides the new name is honoured."""
    owner = new.__qualname__.rpartition(".")[0]
    old = f"{owner}.{old_name}" if owner else old_name
    message = (
        f"{old} is deprecated and will be removed in statekernel {until}; "
        f"use {new.__qualname__} instead (same arguments, same behaviour)"
    )
    name = new.__name__

    def target(args: tuple[Any, ...]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        if owner:  # a method: look the new name up where the caller's instance finds it
            return getattr(args[0], name), args[1:]
        return new, args

    if inspect.iscoroutinefunction(new):

        @functools.wraps(new)
        async def alias(*args: Any, **kwargs: Any) -> Any:
            warnings.warn(message, DeprecationWarning, stacklevel=2)
            function, rest = target(args)
            return await function(*rest, **kwargs)

    else:

        @functools.wraps(new)
        def alias(*args: Any, **kwargs: Any) -> Any:
            warnings.warn(message, DeprecationWarning, stacklevel=2)
            function, rest = target(args)
            return function(*rest, **kwargs)

    alias.__name__ = old_name
    alias.__qualname__ = old
    alias.__doc__ = f"Deprecated alias of `{name}` (removed in {until})."
    return alias  # type: ignore[return-value]
