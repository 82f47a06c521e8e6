"""Named reducers: the `(old, new) -> merged` functions a schema field can name by string.

EvoFabric declares how a field merges with a string (`Annotated[list[Msg], "append_messages"]`)
that refers to a function registered with `@StateUpdater.register(name)`. Keeping that
registry lets a state declared for EvoFabric compile here unchanged. Names are resolved once,
when a schema is compiled, so a typo fails at import time and nothing is looked up per write.

The registry is process-global, like EvoFabric's: a name means one function everywhere. That
is why registering a name twice is an error rather than a silent replacement -- two modules
that picked the same name would otherwise change each other's state semantics depending on
import order.
"""

from __future__ import annotations

import inspect
import operator
import threading
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from .._errors import InvalidDeclaration, UnknownUpdater
from .message_reducers import add_messages, append_messages

Reducer = Callable[[Any, Any], Any]
"""`(old, new) -> merged`: pure, returns the field's new value."""

R = TypeVar("R", bound=Reducer)


def overwrite(old: Any, new: Any) -> Any:
    """The new value replaces the old one (a field with no reducer behaves this way)."""
    return new


_APPENDING: frozenset[Any] = frozenset({operator.add, append_messages, add_messages})


def is_appending(reducer: Reducer) -> bool:
    """Whether `reducer` only ever appends to a sequence: fields it reduces may be held as a
    Vector, so that an append costs O(appended) instead of copying the whole list."""
    return any(reducer is known for known in _APPENDING)


class StateUpdater:
    """The process-wide registry of named reducers (EvoFabric's `StateUpdater`).

    ```python
    from typing import Annotated

    from pydantic import BaseModel

    from statekernel import StateSchema, StateUpdater


    @StateUpdater.register("max")
    def keep_max(old: int, new: int) -> int:
        return max(old, new)


    class Scores(BaseModel):
        best: Annotated[int, "max"] = 0


    scores = StateSchema(Scores)  # the field's key keeps the larger of two writes
    ```

    `"overwrite"`, `"append_messages"` (EvoFabric's) and `"add_messages"` (LangGraph's) are
    built in. A name can be registered once per process; a schema naming an unknown updater
    is an `InvalidDeclaration` listing the names that exist. The class is not meant to be
    instantiated: that raises `InvalidDeclaration` (which is also a `TypeError`).
    See [schema: from EvoFabric](schema.md#from-evofabric-stateupdater).
    """

    _reducers: ClassVar[dict[str, Reducer]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __new__(cls) -> StateUpdater:
        raise InvalidDeclaration(
            "StateUpdater",
            "is a registry, not something to instantiate",
            "Use @StateUpdater.register('name') and StateUpdater.get('name').",
        )

    @classmethod
    def register(cls, name: str) -> Callable[[R], R]:
        """Decorator registering an `(old, new) -> merged` function under `name`.

        Use it as `@StateUpdater.register(name)`. A name already taken, an empty name, or a
        function not callable as `(old, new)`, raises `InvalidDeclaration`.
        """
        owner = f"@StateUpdater.register({name!r})"
        if not isinstance(name, str) or not name:
            raise InvalidDeclaration(
                owner, "the updater name must be a non-empty string", "Pass a name like 'max'."
            )

        def decorate(function: R) -> R:
            check_reducer(owner, function)
            with cls._lock:
                earlier = cls._reducers.get(name)
                if earlier is not None:
                    raise InvalidDeclaration(
                        owner,
                        f"the name {name!r} is already registered to {_describe(earlier)}; "
                        f"now {_describe(function)} claims it too",
                        "Updater names are process-wide: pick another name for one of them.",
                    )
                cls._reducers[name] = function
            return function

        return decorate

    @classmethod
    def get(cls, name: str) -> Reducer:
        """The reducer registered under `name`.

        Raises `UnknownUpdater` (a `KeyError`), listing the known names, if there is none.
        """
        found = cls._reducers.get(name)
        if found is None:
            raise UnknownUpdater(name, cls.names())
        return found

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every registered name, sorted.

        `"overwrite"`, `"append_messages"` and `"add_messages"` are built in.
        """
        return tuple(sorted(cls._reducers))


def check_reducer(owner: str, function: Any) -> None:
    """Refuse, as an InvalidDeclaration against `owner`, anything not callable as (old, new)."""
    if not callable(function):
        raise InvalidDeclaration(
            owner,
            f"a reducer must be callable as reducer(old, new), got {function!r}",
            "Decorate a function taking (old, new) and returning the merged value.",
        )
    try:
        inspect.signature(function).bind(None, None)
    except TypeError:
        raise InvalidDeclaration(
            owner,
            f"reducer {_describe(function)} cannot be called as reducer(old, new)",
            "Give it exactly two positional parameters: the old value and the new one.",
        ) from None
    except ValueError:  # no signature available (some builtins): trust it
        pass


def describe_reducer(function: Reducer) -> str:
    """A readable name for a reducer: its updater name when registered (`append_messages`),
    else where it lives (`operator.add`, `mymodule.keep_max`)."""
    for name, registered in StateUpdater._reducers.items():
        if registered is function:
            return name
    return _describe(function)


def _describe(function: Any) -> str:
    module = getattr(function, "__module__", None) or ""
    name = getattr(function, "__qualname__", None) or repr(function)
    if module.startswith("_") and not module.startswith("__"):
        module = module[1:]  # operator.add lives in `_operator`
    return f"{module}.{name}" if module else name


StateUpdater.register("overwrite")(overwrite)
StateUpdater.register("append_messages")(append_messages)
StateUpdater.register("add_messages")(add_messages)
