"""The key registry: which state keys this kernel knows, and how each one behaves here.

A key class says what its values are; a registration says how this kernel keeps them (its
scope after `StateKeyOptions`, whether it persists, which plugin owns it). Snapshots and
commits consult the registry so that a key nobody registered is an error, never a silent
write into a slot nobody reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import attrs

from .._errors import DuplicateRegistration, InvalidDeclaration, UnknownStateKey
from .._values.codec import is_exact, unencodable_part
from .._values.keys import KeyScope, MergeStrategy, StateKey, StateKeyOptions, key_info


class Exactness(NamedTuple):
    """Whether a key's values and its updates always decode back equal (`_values.codec.is_exact`).

    When one does not, each is decoded again before the journal keeps it, and one that comes
    back different is not kept as it is (`OpWriter`). (A named tuple, so that it still
    unpacks and indexes as the pair it was.)"""

    values: bool
    updates: bool


_EXACT = Exactness(values=True, updates=True)


@attrs.frozen
class KeyBinding:
    """One registered key as the registry holds it, flattened for the hot path.

    One lookup gives every fact: `key` (the class), `name` (its string), `scope`, `merge`,
    `persistent`, `copy_values`, `copy_items`, `has_validate`, `make_default`, `value_type`,
    `update_type` and `plugin` (the id of the plugin that registered it, None for none).
    `KeyBinding.of(K, options=None, *, plugin=None)` derives one from a key class.
    """

    key: type[StateKey[Any, Any]]
    name: str
    scope: KeyScope
    merge: MergeStrategy
    persistent: bool
    copy_values: bool
    copy_items: bool
    has_validate: bool
    make_default: Callable[[], Any]
    value_type: Any
    update_type: Any = Any
    plugin: str | None = None
    stored: bool = False
    """A persistent thread key: the one kind a ThreadStore journals and snapshots."""
    retain_on_uninstall: bool = True
    exact: Exactness = _EXACT
    checks: bool = attrs.field(init=False)
    """Whether a commit that touches the key has work after its ops: items to check for
    changes made in place, or a `validate` to call."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "checks", self.copy_items or self.has_validate)

    @classmethod
    def of(
        cls,
        key: type[StateKey[Any, Any]],
        options: StateKeyOptions | None = None,
        *,
        plugin: str | None = None,
    ) -> KeyBinding:
        """The binding of key class `key`, registered with `options` (`StateKeyOptions`;
        None: the defaults) by `plugin`. Options that are not `StateKeyOptions` raise
        `TypeError`; a persistent thread key whose update type msgspec cannot encode raises
        `InvalidDeclaration`."""
        info = key_info(key)
        options = options or StateKeyOptions()
        if not isinstance(options, StateKeyOptions):
            raise TypeError(
                f"options for key {info.name!r} must be StateKeyOptions, got {options!r}"
            )
        scope = options.scope if options.scope is not None else key.scope
        if scope is KeyScope.THREAD and options.persistent:
            _check_journaled(key, info.name, info.update_type)
        return cls(
            key=key,
            name=info.name,
            scope=scope,
            merge=key.merge,
            persistent=options.persistent,
            copy_values=info.copy_values,
            copy_items=info.copy_items,
            has_validate=info.has_validate,
            make_default=info.make_default,
            value_type=info.value_type,
            update_type=info.update_type,
            plugin=plugin,
            stored=scope is KeyScope.THREAD and options.persistent,
            retain_on_uninstall=options.retain_on_uninstall,
            exact=Exactness(is_exact(info.value_type), is_exact(info.update_type)),
        )


def _check_journaled(key: type[StateKey[Any, Any]], name: str, update_type: Any) -> None:
    """A persistent thread key's updates are its durable history, so they must encode."""
    part = unencodable_part(update_type)
    if part is not None:
        raise InvalidDeclaration(
            key.__qualname__,
            f"key {name!r} is a persistent thread key, so every update is journaled in the "
            f"ThreadStore, but msgspec cannot encode and decode its update type "
            f"{update_type!r}: {part}",
            "Use msgspec-encodable update types (builtins, Struct, dataclass, attrs class, "
            "pydantic model, Vector), or register the key with "
            "StateKeyOptions(persistent=False) to keep it in memory only.",
        )


class KeyRegistry:
    """An immutable set of registered keys (`KeyBinding`s), indexed by class and by key string.

    Built once (a kernel builds it from its plugins at construction) and shared by every
    snapshot, so it never changes under a snapshot that refers to it; `snapshot.registry`
    returns it. `KeyRegistry.of(*keys)` builds one from key classes. Registering a key string
    twice raises `DuplicateRegistration`.

    `K in registry` tells whether key class `K` is registered, `iter(registry)` gives the
    bindings and `len(registry)` their count.

    See [concepts: plugins](concepts.md#plugins).
    """

    __slots__ = (
        "by_class",
        "by_name",
        "dropped_on_uninstall",
        "run_names",
        "stored_names",
        "volatile_run_names",
        "volatile_thread_names",
    )

    def __init__(self, bindings: Iterable[KeyBinding] = ()) -> None:
        by_class: dict[type[StateKey[Any, Any]], KeyBinding] = {}
        by_name: dict[str, KeyBinding] = {}
        for binding in bindings:
            earlier = by_name.get(binding.name)
            if earlier is not None:
                raise DuplicateRegistration(
                    "state key", binding.name, earlier.plugin, binding.plugin
                )
            by_name[binding.name] = binding
            by_class[binding.key] = binding
        # Plain attributes holding plain dicts, typed read-only: snapshots and commits look
        # keys up here on every get and op, where a property or mapping proxy would cost.
        self.by_class: Mapping[type[StateKey[Any, Any]], KeyBinding] = by_class
        """Read-only mapping from each key class to its binding."""
        self.by_name: Mapping[str, KeyBinding] = by_name
        """Read-only mapping from each key string to its binding."""
        # Key strings by how a ThreadStore keeps them, so a save looks up only those.
        run = KeyScope.RUN
        self.stored_names = tuple(n for n, b in by_name.items() if b.stored)
        self.dropped_on_uninstall = frozenset(
            n for n, b in by_name.items() if b.stored and not b.retain_on_uninstall
        )
        """Stored keys a kernel without their plugin drops (`retain_on_uninstall=False`)."""
        self.run_names = tuple(n for n, b in by_name.items() if b.scope is run)
        self.volatile_thread_names = tuple(
            n for n, b in by_name.items() if b.scope is not run and not b.persistent
        )
        self.volatile_run_names = tuple(
            n for n, b in by_name.items() if b.scope is run and not b.persistent
        )

    @classmethod
    def of(cls, *keys: type[StateKey[Any, Any]]) -> KeyRegistry:
        """A registry of the given keys with their class defaults (handy in tests and scripts)."""
        return cls(KeyBinding.of(key) for key in keys)

    def binding(self, key: type[StateKey[Any, Any]], *, plugin: str | None = None) -> KeyBinding:
        """The binding of key class `key`. Raises `UnknownStateKey` when `key` is not
        registered (naming `plugin` as the one that asked, if given)."""
        found = self.by_class.get(key)
        if found is None:
            name = getattr(key, "key", repr(key))
            raise UnknownStateKey(str(name), plugin, tuple(self.by_name))
        return found

    def __contains__(self, key: object) -> bool:
        return key in self.by_class

    def __iter__(self) -> Any:
        return iter(self.by_name.values())

    def __len__(self) -> int:
        return len(self.by_name)
