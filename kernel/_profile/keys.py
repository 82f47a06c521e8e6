"""`ProfileKey`: the declaration of a shared or profile entry (namespace and value type)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import attrs

from .._values import declared_types as _declared_types
from .._values.token import DeclaredToken, TokenFamily, declared_info

__all__ = ["ProfileKey", "ProfileKeyInfo", "profile_key_info"]

V = TypeVar("V")


@attrs.frozen
class ProfileKeyInfo:
    """What the kernel derived from a ProfileKey declaration, cached on the class."""

    name: str
    value_type: Any
    make_default: Callable[[], Any]
    classes: tuple[type, ...] | None
    """Runtime classes a value may be (None: any); checked before the deeper msgspec check."""
    reads_back: bool = True
    """Whether a write decodes what it encoded, to refuse a value that would not read back
    (see `ProfileKey._kernel_values`)."""


class ProfileKey(DeclaredToken, Generic[V]):
    """Base class of shared/profile entry types: subclass as `ProfileKey[Value]`.

    ```python
    from statekernel import ProfileKey


    class Locale(ProfileKey[str]):  # ProfileKey[Value]
        key = "locale"  # the namespace in the store
        default = "en-US"
    ```

    It names a kind of shared or profile entry: a namespace string and a value type. The
    class itself is the token: `await ctx.profile.read(Locale, scope)`. Creating an instance
    raises `TypeError` (`InvalidDeclaration`).

    - Set `key` (the namespace string in the store) and optionally `default` (immutable) or
      `default_factory`. A missing entry reads as `default`, or `default_factory()`, or
      else `Value()`. A type with no zero value must declare a default
      (`InvalidDeclaration` when the class is created).
    - Values must be msgspec-encodable.
    - Register the key with `registrar.register_profile_key(P)`.

    A subclass without `key`, or with an unbound type variable, is an abstract base for
    other keys. See
    [state layers: declaring](state-layers.md#declaring-shared-and-profile-state).
    """

    _family = TokenFamily(
        kind="profile key",
        attribute="__statekernel_profile_key__",
        arity=1,
        binds="ProfileKey[Value]",
        example="class TeamContext(ProfileKey[TeamData]): key = 'team_context'",
        usage="Pass the class: await ctx.profile.read({name}, scope)",
    )
    key: ClassVar[str]
    """Required. The namespace string of the key's entries in the store."""
    __statekernel_profile_key__: ClassVar[ProfileKeyInfo | None] = None
    _kernel_values: ClassVar[bool] = False
    """True only on the kernel's own keys (a team's inboxes, roster, leases): their values
    are built by kernel code alone, so a write skips the read-back check that guards a
    user's values, which would cost a decode of every letter an inbox holds at every send."""

    @classmethod
    def _declare(cls, name: str, args: tuple[Any, ...]) -> ProfileKeyInfo | None:
        (value_type,) = args
        if _declared_types.is_unresolved(value_type):
            return None
        return ProfileKeyInfo(
            name=name,
            value_type=value_type,
            make_default=_declared_types.default_maker(cls, value_type),
            classes=_declared_types.runtime_classes(value_type),
            reads_back=not cls._kernel_values,
        )


def profile_key_info(key: Any) -> ProfileKeyInfo:
    """The derived facts of a concrete ProfileKey class, or a clear error for anything else.

    Returns what the kernel derived from the declaration when the class was created: `name`
    (the namespace string), `value_type` and `make_default()` (a fresh default value).

    An abstract key (no `key` string, or an unbound type variable) or a class that is not a
    profile key raises `InvalidDeclaration` saying which.
    """
    info: ProfileKeyInfo = declared_info(key, ProfileKey)
    return info
