"""Snapshots: frozen, point-in-time views of the state.

Every hook of a phase reads the same snapshot, so none sees another's half-written state.
Values live in a persistent hash map (`immutables.Map`, a C-backed HAMT): taking a snapshot
is handing out a reference, and a commit builds a new map sharing every untouched entry, so
neither costs anything in proportion to the state held.

Values of immutable declared types are returned as they are. Values of mutable declared types
(list, dict, mutable models) are deep-copied on every `get`, an O(size) cost paid only by
such keys, so that nothing a hook does to what it read can reach another snapshot.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Iterator
from typing import Any, TypeVar

import immutables
import msgspec

from .._errors import StateError, StateValidationError, _preview
from .._values.codec import CODEC_ERRORS, as_json_data, enc_hook
from .._values.declared_types import copy_of
from .._values.keys import StateKey
from .registry import KeyRegistry

V = TypeVar("V")

_MISSING: Any = object()
_canonical = msgspec.json.Encoder(enc_hook=enc_hook, order="sorted")
_HASH_ERRORS: tuple[type[BaseException], ...] = (*CODEC_ERRORS, TypeError)  # unsortable sets


class Snapshot:
    """The state as of one `revision`; `get` reads a key, `K in snapshot` asks if it is set.

    A frozen, point-in-time view of the state. Taking one costs O(1). Get a snapshot from
    `run.snapshot`, `ctx.snapshot`, `RunResult.snapshot` or `snapshot_of`. Do not construct
    one yourself.

    - `K in snapshot`: whether `K` holds a value. It is False after `clear(K)`, and False
      for a key that is not registered (asking is harmless, reading one with `get` is an
      error).
    - `iter(snapshot)`: the registered key classes that hold a value.

    See [concepts: snapshots](concepts.md#snapshots).
    """

    # A plain slotted class rather than an attrs one: msgspec encodes attrs classes field by
    # field, and a snapshot is encoded (`enc_hook`) as the map of its keys instead.
    __slots__ = ("_registry", "_values", "revision")
    revision: int
    """An int that grows by one with each commit that carries at least one state op."""
    _values: immutables.Map[str, Any]
    _registry: KeyRegistry

    def __init__(
        self, revision: int, values: immutables.Map[str, Any], registry: KeyRegistry
    ) -> None:
        object.__setattr__(self, "revision", revision)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_registry", registry)

    def __copy__(self) -> Snapshot:
        return self  # frozen: a copy would be the same

    def __deepcopy__(self, memo: dict[int, Any]) -> Snapshot:
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            f"a Snapshot is frozen (cannot set {name!r}); change state with a StateCommand"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Snapshot is frozen (cannot delete {name!r})")

    def get(self, key: type[StateKey[V, Any]]) -> V:
        """The value of `key`, or its default when it holds none.

        Raises `UnknownStateKey` if `key` is not registered. A value of a mutable declared
        type is deep-copied on every call.
        """
        binding = self._registry.by_class.get(key)
        if binding is None:
            binding = self._registry.binding(key)  # raises UnknownStateKey
        value = self._values.get(binding.name, _MISSING)
        if value is _MISSING:
            return binding.make_default()  # type: ignore[no-any-return]
        if binding.copy_values:
            return copy_of(value, binding.name)  # type: ignore[no-any-return]
        return value  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        """Whether `key` holds a value (False after a clear, and for a key nobody
        registered: asking is harmless, reading one with `get` is an error)."""
        binding = self._registry.by_class.get(key)  # type: ignore[call-overload]
        return binding is not None and binding.name in self._values

    def view(self, schema: Any) -> Any:
        """The state as a validated model instance of a schema-declared state.

        Pass the compiled `StateSchema` or the model / TypedDict class it was compiled from.
        Given the class, the schema is the one whose keys this snapshot's kernel registered;
        if the class was compiled under several prefixes and more than one is registered,
        pass the StateSchema itself. See [schema](schema.md).
        """
        if isinstance(schema, type):
            return _registered_schema(self._registry, schema).view(self)
        if callable(getattr(schema, "view", None)):
            return schema.view(self)  # a StateSchema: it knows how to read itself
        raise StateError(
            f"snapshot.view takes a StateSchema or the model class it was compiled from, got "
            f"{_preview(schema)}"
        )

    def state_hash(self) -> str:
        """A hex SHA-256 digest of the state itself.

        It covers every key that holds a value (run and thread keys, the reserved
        `statekernel.` ones too), sorted by key string, each value in canonical msgspec JSON
        (dict keys, set items and record fields sorted).

        Equal held values give an equal hash in any process, whatever history produced them,
        so two replicas, or a restored thread and the live one, can be compared cheaply; the
        revision is not part of it. (A key set to its default holds a value; a key never set
        or cleared holds none. Dict keys count as their strings.) A value without a canonical
        encoding (one msgspec cannot encode) raises `StateValidationError` naming its key.
        Costs O(size of the state).
        """
        digest = hashlib.sha256()
        for name in sorted(self._values):
            value = self._values[name]
            try:
                # Builtins first, so that non-string dict keys become strings and sort too.
                canonical = msgspec.to_builtins(
                    value, enc_hook=enc_hook, str_keys=True, order="sorted"
                )
                data = _canonical.encode(canonical)
            except _HASH_ERRORS as error:
                raise StateValidationError(
                    name,
                    "a value with a canonical encoding",
                    value,
                    what="value to hash",
                    detail=(
                        f"{error}; state_hash() needs every held value msgspec-encodable, "
                        f"and the items of each set of one comparable type"
                    ),
                ) from error
            encoded_name = name.encode()
            for part in (encoded_name, data):
                digest.update(len(part).to_bytes(8, "big"))
                digest.update(part)
        return digest.hexdigest()

    @property
    def registry(self) -> KeyRegistry:
        """The `KeyRegistry` of the kernel that made this snapshot."""
        return self._registry

    def _stored_values(self) -> immutables.Map[str, Any]:
        """The stored values by key string, uncopied: for the kernel's own persistence only."""
        return self._values

    def __statekernel_encode__(self) -> dict[str, Any]:
        """How `enc_hook` encodes a snapshot (in an event, a `RunResult`): its key -> value
        map, a value msgspec cannot encode (a key kept in memory only, say) as its repr."""
        shown = {name: as_json_data(value, _MISSING) for name, value in self.to_dict().items()}
        return {
            name: repr(self._values[name]) if value is _MISSING else value
            for name, value in shown.items()
        }

    def to_dict(self) -> dict[str, Any]:
        """Every key that holds a value, by key string and sorted (copied like `get`).

        Meant for display.
        """
        by_name = self._registry.by_name
        return {
            name: copy_of(value, name) if by_name[name].copy_values else value
            for name, value in sorted(self._values.items())
            if name in by_name
        }

    def __iter__(self) -> Iterator[type[StateKey[Any, Any]]]:
        """The registered keys that hold a value."""
        by_name = self._registry.by_name
        return (by_name[name].key for name in self._values if name in by_name)

    def __repr__(self) -> str:
        return f"<Snapshot revision={self.revision} keys={len(self._values)}>"


SCHEMA_ATTRIBUTE = "__statekernel_schema__"
"""Set by `StateSchema` on each key it compiles: the schema the key belongs to. Schemas build
on snapshots, so the snapshot finds them through their keys rather than by importing them."""

COMPILED_MODELS: weakref.WeakSet[type] = weakref.WeakSet()
"""Every class some `StateSchema` was compiled from, so that `view` can tell a class that was
never compiled from one whose schema this kernel lacks."""


def _registered_schema(registry: KeyRegistry, model: type) -> Any:
    found = {
        id(schema): schema
        for binding in registry
        if (schema := getattr(binding.key, SCHEMA_ATTRIBUTE, None)) is not None
        and schema.model is model
    }
    if len(found) == 1:
        return next(iter(found.values()))
    name = model.__qualname__
    if not found and model not in COMPILED_MODELS:
        raise StateError(
            f"{name} has not been compiled into a StateSchema. Create "
            f"`schema = StateSchema({name})` and add `schema.plugin` to the kernel's plugins."
        )
    if not found:
        raise StateError(
            f"no StateSchema of {name} is registered with this kernel. Add `schema.plugin` to "
            f"the kernel's (or Agent's) plugins."
        )
    prefixes = sorted(schema.prefix for schema in found.values())
    raise StateError(
        f"{name} is registered under several prefixes ({prefixes}); call `schema.view(snapshot)` "
        f"on the StateSchema you mean."
    )
