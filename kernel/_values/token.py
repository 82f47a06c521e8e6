"""The one base of declared tokens: `StateKey`, the action and effect specs, `ProfileKey`.

A token is a class used as a name (`snapshot.get(Counter)`, `cmd.schedule(Retry, 3)`), never
instantiated. Every family of tokens needs the same things, so they are written once here:
instantiation refused with a message that shows the right use, the `key` string checked, the
generic arguments read through any chain of subclasses, and what the kernel derived from
the declaration cached on the class when it is created (so the hot path reads one attribute
and a mistake surfaces at the class statement, not mid-run). Each family adds only its own
checks and its own info record, in `_declare`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from .._errors import InvalidDeclaration, _preview
from .declared_types import generic_args
from .names import check_name

__all__ = ["DeclaredToken", "TokenFamily", "declared_info"]


@attrs.frozen
class TokenFamily:
    """How one family of tokens is named in messages and where it caches its info."""

    kind: str
    """What a member is called in messages: "state key", "action spec"."""
    attribute: str
    """The class attribute holding the derived info (None on an abstract member)."""
    arity: int
    """How many type arguments the family's base takes."""
    binds: str
    """The parameterisation a concrete member needs: "StateKey[Value, Update]"."""
    example: str
    """A whole declaration, for messages."""
    usage: str
    """How the class is used instead of instantiated; `{name}` is the class name."""


class DeclaredToken:
    """Base of token families. A family's base sets `_family` in its own body."""

    key: ClassVar[str]
    _family: ClassVar[TokenFamily]

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        family = cls._family
        raise InvalidDeclaration(
            cls.__qualname__,
            f"is a {family.kind}: use the class itself as the token, do not instantiate it",
            family.usage.format(name=cls.__name__) + ".",
        )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        family: TokenFamily | None = getattr(cls, "_family", None)
        if family is None:
            return  # a base shared by several families (the specs' common base)
        setattr(cls, family.attribute, None)
        if "_family" in cls.__dict__:
            return  # a family's own base: abstract by definition
        name = getattr(cls, "key", None)
        if name is None:
            return  # no key string: an abstract base for other members
        if not isinstance(name, str) or not name:
            raise InvalidDeclaration(
                cls.__qualname__,
                f"`key` must be a non-empty string, got {_preview(name)}",
                "Set key = 'some_name'.",
            )
        try:
            check_name("key", name)  # it is journaled and stored, as a thread id is
        except ValueError as error:
            problem = "`key` must be a name every store can keep"
            raise InvalidDeclaration(cls.__qualname__, problem, str(error)) from None
        args = generic_args(cls, _family_base(cls)) or (Any,) * family.arity
        setattr(cls, family.attribute, cls._declare(name, args))

    @classmethod
    def _declare(cls, name: str, args: tuple[Any, ...]) -> Any:
        """The family's info record for a member with `key = name` and these type arguments,
        or None while a type argument is still a type variable (an abstract generic base)."""
        raise InvalidDeclaration(
            cls.__qualname__,
            "belongs to a token family whose base defines no `_declare`",
            "Define `_declare` on the family's base class.",
        )


def _family_base(cls: type) -> type:
    return next(base for base in cls.__mro__ if "_family" in base.__dict__)


def declared_info(token: Any, base: type[DeclaredToken]) -> Any:
    """The facts cached on a concrete member of `base`'s family, or an error that teaches."""
    family = base._family
    info = getattr(token, family.attribute, None) if isinstance(token, type) else None
    if info is not None and issubclass(token, base):
        return info
    if isinstance(token, type) and issubclass(token, base):
        raise InvalidDeclaration(
            token.__qualname__,
            f"is an abstract {family.kind} (no `key` string, or unbound type parameters)",
            f"Use a concrete subclass that sets `key` and binds {family.binds}.",
        )
    # Not a declaration at all (an instance, a string): a plain TypeError, which the engine
    # reports as the failure of the hook that passed it, naming its plugin.
    raise TypeError(
        f"expected a {base.__name__} subclass (the class itself), got {_preview(token)}. "
        f"Declare one as `{family.example}`."
    )
