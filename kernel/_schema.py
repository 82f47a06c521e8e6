"""Schema-style state: a whole state declared as one pydantic model or TypedDict.

Jianmu and EvoFabric users declare their state as one class whose fields carry `Annotated`
metadata -- a reducer (`operator.add`, `"append_messages"`), an `Ephemeral` reset scope -- and
write partial updates as dicts. `StateSchema` compiles such a class into ordinary `StateKey`
classes, one per field, plus a plugin that registers them. Compiling rather than wrapping is
the point: after compilation nothing is special, so merge, atomic commit, conflicts, replay and
thread persistence treat schema fields exactly like hand-written keys, and the two styles mix
freely in one kernel.

What the compilation decides, per field, once (so mistakes fail at import time, naming the
field):
- how an update merges: the reducer, or overwrite when there is none;
- how concurrent writers merge: EXCLUSIVE, unless the field says `Commutative()` (a reducer
  alone is no promise that order does not matter: `operator.add` on lists is not commutative);
- how the value is held: a list under an appending reducer becomes a `Vector`, so an append
  costs O(appended) instead of a copy of the whole list, while `view()` still hands back the
  declared list;
- when the value resets: `Ephemeral("run")` fields are run-scoped keys (the kernel resets those
  at every run start), `"step"` and `"call"` fields are cleared by the plugin's STEP_START and
  BEFORE_INFERENCE hooks, through the normal commit path.
"""

from __future__ import annotations

import collections.abc
import copy
import functools
import inspect
import types
import typing
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast, get_args, get_origin

import attrs
import pydantic
from pydantic_core import PydanticUndefined

from . import _declared_types
from ._commands import StateCommand
from ._errors import (
    InvalidDeclaration,
    StateError,
    StateValidationError,
    UnknownSchemaField,
    UnknownUpdater,
)
from ._keys import RESERVED_PLUGIN_ID, KeyScope, MergeStrategy, StateKey, StateKeyOptions
from ._phases import Phase
from ._plugin import Plugin, PluginRegistrar
from ._reducers import Reducer, StateUpdater, check_reducer, describe_reducer, is_appending
from ._vector import Vector

if TYPE_CHECKING:
    from ._context import PhaseContext
    from ._snapshot import Snapshot

M = TypeVar("M")

EphemeralScope = Literal["run", "step", "call"]
_EPHEMERAL_SCOPES: tuple[EphemeralScope, ...] = ("run", "step", "call")

_RESET_PHASES: Mapping[EphemeralScope, Phase] = {
    "step": Phase.STEP_START,
    "call": Phase.BEFORE_INFERENCE,
}


@attrs.frozen
class Ephemeral:
    """Field marker: reset the field to its default at every run, step or inference call.

    `Annotated[bool, Ephemeral("run")] = False`. "run" resets when a run starts, "step" at
    each STEP_START, "call" at each BEFORE_INFERENCE. Hooks of the reset phase itself still
    read the value from before the reset; their writes to the field land after it, provided
    `schema.plugin` is registered before their plugin (see docs/schema.md).
    """

    scope: EphemeralScope = "run"

    def __attrs_post_init__(self) -> None:
        if self.scope not in _EPHEMERAL_SCOPES:
            raise InvalidDeclaration(
                f"Ephemeral({self.scope!r})",
                f"scope must be one of {', '.join(map(repr, _EPHEMERAL_SCOPES))}",
                'Use Ephemeral("run"), Ephemeral("step") or Ephemeral("call").',
            )


@attrs.frozen
class Commutative:
    """Field marker: this field's reducer gives the same result in any order of updates.

    `Annotated[int, operator.add, Commutative()]`. Several hooks of one phase writing the
    field then have their updates concatenated instead of being re-run one by one. Declare it
    only when it is true (`statekernel.testing.assert_commutative(schema.keys[name], ...)` checks);
    a field without a reducer (overwrite) can never be commutative.
    """


@attrs.frozen
class SchemaField:
    """What compilation made of one field: its key and how it merges, resets and is held.

    `reducer` names the reducer (`"append_messages"`, `"operator.add"`), None for overwrite.
    `held_as` is `list` or `tuple` when the value is held as a `Vector` and converted back to
    that declared container by `view()`, else None.
    """

    name: str
    annotation: Any
    key: type[StateKey[Any, Any]]
    reducer: str | None
    merge: MergeStrategy
    ephemeral: EphemeralScope | None
    held_as: type[list[Any]] | type[tuple[Any, ...]] | None
    _deep: bool = attrs.field(repr=False, eq=False)

    def check(self, value: Any) -> None:
        """Check an update all the way down (items of lists, values of dicts, literals).

        The key's own check, at `cmd.update`, stops at the origin class (`list`); a wrong item
        type would otherwise only surface when `view()` validates the whole state, far from the
        hook that wrote it. Nothing is converted (a dict is not a model), since the value is
        stored as given. O(size of the update).
        """
        if not self._deep:
            return
        problem = _mismatch(value, self.annotation, ())
        if problem is not None:
            raise StateValidationError(
                self.key.key, _declared_types.describe(self.annotation), value, detail=problem
            )

    def declared(self, value: Any) -> Any:
        """The held value in the field's declared container (a Vector back to a list)."""
        if self.held_as is list:
            return value.tolist()
        if self.held_as is tuple:
            return value.totuple()
        return value


class SchemaPlugin(Plugin):
    """Registers a schema's keys and the hooks that reset its step- and call-ephemeral fields."""

    def __init__(
        self,
        plugin_id: str,
        keys: tuple[type[StateKey[Any, Any]], ...],
        options: StateKeyOptions,
        resets: Mapping[Phase, tuple[type[StateKey[Any, Any]], ...]],
    ) -> None:
        self.id = plugin_id
        self._keys = keys
        self._options = options
        self._resets = resets

    def register(self, registrar: PluginRegistrar) -> None:
        for key in self._keys:
            registrar.register_key(key, self._options)
        for phase, keys in self._resets.items():
            registrar.register_phase_hook(phase, _reset_hook(keys))


def _reset_hook(
    keys: tuple[type[StateKey[Any, Any]], ...],
) -> Callable[[PhaseContext], StateCommand | None]:
    def reset(ctx: PhaseContext) -> StateCommand | None:
        # Only keys that hold a value: clearing an unset key changes nothing but the revision.
        held = [key for key in keys if key in ctx.snapshot]
        if not held:
            return None
        command = StateCommand()
        for key in held:
            command.clear(key)
        return command

    return reset


@attrs.frozen(init=False, eq=False, repr=False)
class StateSchema(Generic[M]):
    """A pydantic model or TypedDict compiled into state keys.

    ```python
    chat = StateSchema(ChatState, prefix="chat", scope=KeyScope.THREAD)
    agent = Agent([chat.plugin, MyPlugin()], model)
    # in a hook:
    return chat.command({"messages": [reply], "turns": 1})
    # anywhere:
    state = chat.view(snapshot)  # a validated ChatState
    ```
    `keys` maps each field name to its generated StateKey class (key string
    `f"{prefix}.{field}"`), usable anywhere a hand-written key is (`snapshot.get`,
    `cmd.update`, `statekernel.testing`). `plugin` (id `f"schema:{prefix}"`) registers them all.
    `prefix` defaults to the class name; `scope` applies to every field except
    `Ephemeral("run")` ones, which are always run-scoped; `persistent=False` keeps thread
    fields out of the ThreadStore.
    """

    model: type[M]
    prefix: str
    scope: KeyScope
    fields: Mapping[str, SchemaField]
    keys: Mapping[str, type[StateKey[Any, Any]]]
    plugin: SchemaPlugin
    _is_pydantic: bool

    def __init__(
        self,
        model: type[M],
        *,
        prefix: str | None = None,
        scope: KeyScope = KeyScope.RUN,
        persistent: bool = True,
    ) -> None:
        is_pydantic = _is_pydantic_model(model)
        if not is_pydantic and not typing.is_typeddict(model):
            raise InvalidDeclaration(
                f"StateSchema({model!r})",
                "the state must be declared as a pydantic BaseModel subclass or a TypedDict",
                "Declare `class MyState(BaseModel): ...` or `class MyState(TypedDict): ...`.",
            )
        owner = model.__qualname__
        prefix = model.__name__ if prefix is None else prefix
        if not isinstance(prefix, str) or not prefix or prefix.startswith(RESERVED_PLUGIN_ID):
            raise InvalidDeclaration(
                f"StateSchema({owner})",
                f"prefix must be a non-empty string not starting with {RESERVED_PLUGIN_ID!r} "
                f"(reserved for the Agent facade), got {prefix!r}",
                "Pass prefix='chat' or similar.",
            )
        if not isinstance(scope, KeyScope):
            raise InvalidDeclaration(
                f"StateSchema({owner})",
                f"scope must be a KeyScope, got {scope!r}",
                "Use KeyScope.RUN or KeyScope.THREAD.",
            )
        declared = _pydantic_fields(model) if is_pydantic else _typeddict_fields(model)
        if not declared:
            raise InvalidDeclaration(
                owner, "declares no fields", "Add at least one annotated field to the class."
            )
        fields = {spec.name: _compile_field(model, prefix, scope, spec) for spec in declared}
        resets: dict[Phase, tuple[type[StateKey[Any, Any]], ...]] = {}
        for ephemeral, phase in _RESET_PHASES.items():
            reset = tuple(f.key for f in fields.values() if f.ephemeral == ephemeral)
            if reset:
                resets[phase] = reset
        plugin = SchemaPlugin(
            f"schema:{prefix}",
            tuple(f.key for f in fields.values()),
            StateKeyOptions(persistent=persistent),
            MappingProxyType(resets),
        )
        self.__attrs_init__(
            model,
            prefix,
            scope,
            MappingProxyType(fields),
            MappingProxyType({name: f.key for name, f in fields.items()}),
            plugin,
            is_pydantic,
        )
        _compiled.setdefault(model, weakref.WeakSet()).add(self)

    def command(self, updates: Mapping[str, Any] | None = None, /, **fields: Any) -> StateCommand:
        """A command applying a partial update, given as a dict and/or keyword arguments.

        Each value goes through its field's reducer at commit (`{"messages": [m]}` appends on
        an appending field). Field names are checked (`UnknownSchemaField`), and values are
        type-checked all the way down (`StateValidationError`) right here.
        """
        if updates is not None and not isinstance(updates, Mapping):
            raise TypeError(
                f"{self.model.__qualname__} updates must be a mapping of field name to value "
                f"(like a LangGraph node's return), got {updates!r}"
            )
        command = StateCommand()
        for source in (updates or {}, fields):
            for name, value in source.items():
                field = self.fields.get(name)
                if field is None:
                    raise UnknownSchemaField(self.model.__qualname__, name, self.fields)
                command.update(field.key, value)
                field.check(value)
        return command

    def view(self, snapshot: Snapshot) -> M:
        """The state in `snapshot` as a validated instance of the model (a dict for a
        TypedDict), with every field in its declared type (Vector-held lists as lists).

        O(size of the state): it builds a fresh object. Hot hooks that need one field read it
        with `snapshot.get(schema.keys[name])` instead.
        """
        values = {name: f.declared(snapshot.get(f.key)) for name, f in self.fields.items()}
        if self._is_pydantic:
            model: Any = self.model
            try:
                return cast(M, model.model_validate(_by_validation_name(model, values), **_BY_NAME))
            except pydantic.ValidationError as error:
                raise self._invalid(snapshot, str(error)) from error
        for name, value in values.items():  # a TypedDict: checked here, as nothing else will
            problem = _mismatch(value, self.fields[name].annotation, (name,))
            if problem is not None:
                raise self._invalid(snapshot, problem)
        return cast(M, values)

    def _invalid(self, snapshot: Snapshot, problem: str) -> StateError:
        return StateError(
            f"the state of schema {self.prefix!r} at revision {snapshot.revision} does not "
            f"validate as {self.model.__qualname__}: {problem}. A value was written that the "
            f"declaration refuses; write updates through schema.command(...), which checks them."
        )

    def hook(
        self, node: Callable[[M], Any]
    ) -> Callable[[PhaseContext], StateCommand | Awaitable[StateCommand | None] | None]:
        """A phase hook running a Jianmu/LangGraph-style node: `node(state) -> dict | None`.

        The node receives `view(ctx.snapshot)` and returns a partial update (a dict, turned into
        `command(...)`), a StateCommand, or None. Sync or async. Building the view costs
        O(size of the state) per call; write a plain hook for hot paths.
        """
        if inspect.iscoroutinefunction(node):

            async def run_async(ctx: PhaseContext) -> StateCommand | None:
                return self._as_command(await node(self.view(ctx.snapshot)), node)

            return run_async

        def run(ctx: PhaseContext) -> StateCommand | None:
            return self._as_command(node(self.view(ctx.snapshot)), node)

        return run

    def _as_command(self, result: Any, node: Callable[..., Any]) -> StateCommand | None:
        if result is None or isinstance(result, StateCommand):
            return result
        if isinstance(result, Mapping):
            return self.command(result)
        raise TypeError(
            f"node {getattr(node, '__qualname__', node)!r} of schema {self.prefix!r} must return "
            f"a dict of field updates, a StateCommand or None, got {result!r}"
        )

    def __repr__(self) -> str:
        fields = ", ".join(self.fields)
        return f"<StateSchema {self.model.__qualname__} prefix={self.prefix!r} fields=[{fields}]>"


def view(snapshot: Snapshot, schema: StateSchema[M] | type[M]) -> M:
    """`snapshot` as a validated instance of `schema` (a StateSchema, or the model class).

    Given the model class, the compiled schema is the one whose keys `snapshot`'s kernel
    registered; if the class was compiled under several prefixes and more than one is
    registered, pass the StateSchema itself.
    """
    if isinstance(schema, StateSchema):
        return schema.view(snapshot)
    return schema_of(snapshot, schema).view(snapshot)


def schema_of(snapshot: Snapshot, model: type[M]) -> StateSchema[M]:
    """The StateSchema compiled from `model` whose keys `snapshot`'s kernel registered."""
    compiled = list(_compiled.get(model, ()))
    registered = [s for s in compiled if next(iter(s.keys.values())) in snapshot.registry]
    if len(registered) == 1:
        return registered[0]
    name = getattr(model, "__qualname__", repr(model))
    if not compiled:
        raise StateError(
            f"{name} has not been compiled into a StateSchema. Create "
            f"`schema = StateSchema({name})` and add `schema.plugin` to the kernel's plugins."
        )
    prefixes = sorted(s.prefix for s in (registered or compiled))
    if not registered:
        raise StateError(
            f"no StateSchema of {name} is registered with this kernel (compiled with prefixes "
            f"{prefixes}). Add `schema.plugin` to the kernel's (or Agent's) plugins."
        )
    raise StateError(
        f"{name} is registered under several prefixes ({prefixes}); call `schema.view(snapshot)` "
        f"on the StateSchema you mean."
    )


_compiled: weakref.WeakKeyDictionary[type, weakref.WeakSet[StateSchema[Any]]] = (
    weakref.WeakKeyDictionary()
)
"""Schemas by the class they were compiled from, so `view(snapshot, Model)` can find them."""


# -- compilation --------------------------------------------------------------------------


@attrs.frozen
class _Declared:
    """One field as the class declares it, before compilation."""

    name: str
    annotation: Any
    metadata: tuple[Any, ...]
    default: Callable[[], Any] | None
    default_is_factory: bool


def _is_pydantic_model(model: Any) -> bool:
    return isinstance(model, type) and issubclass(model, pydantic.BaseModel)


def _pydantic_fields(model: Any) -> list[_Declared]:
    found: list[_Declared] = []
    for name, info in model.model_fields.items():
        default: Callable[[], Any] | None = None
        is_factory = False
        if info.default_factory is not None:
            factory = info.default_factory
            try:
                inspect.signature(factory).bind()
            except TypeError:
                raise InvalidDeclaration(
                    f"{model.__qualname__}.{name}",
                    "its default_factory takes the validated data; a state field's default must "
                    "not depend on other fields",
                    "Use a default_factory without parameters, or a plain default.",
                ) from None
            except ValueError:  # no signature (a builtin such as list): callable without args
                pass
            default, is_factory = factory, True
        elif info.default is not PydanticUndefined:
            value = info.default
            default = lambda value=value: value  # noqa: E731 - copied by the caller when mutable
        found.append(_Declared(name, info.annotation, tuple(info.metadata), default, is_factory))
    return found


def _typeddict_fields(model: Any) -> list[_Declared]:
    try:
        hints = typing.get_type_hints(model, include_extras=True)
    except NameError as error:
        raise InvalidDeclaration(
            model.__qualname__,
            f"an annotation cannot be resolved ({error})",
            "Define the types a TypedDict field refers to at module level, before the schema.",
        ) from None
    found: list[_Declared] = []
    for name, hint in hints.items():
        while get_origin(hint) in _REQUIREDNESS:
            hint = get_args(hint)[0]
        metadata: tuple[Any, ...] = ()
        if get_origin(hint) is typing.Annotated:
            hint, *rest = get_args(hint)
            metadata = tuple(rest)
        found.append(_Declared(name, hint, metadata, None, False))
    return found


_REQUIREDNESS = frozenset(
    {typing.Required, typing.NotRequired, getattr(typing, "ReadOnly", typing.Required)}
)


def _compile_field(model: Any, prefix: str, scope: KeyScope, spec: _Declared) -> SchemaField:
    owner = f"{model.__qualname__}.{spec.name}"
    reducer, reducer_name, commutative, ephemeral = _read_metadata(owner, spec.metadata)
    if commutative and reducer is None:
        raise InvalidDeclaration(
            owner,
            "is marked Commutative() but has no reducer: overwriting is last-write-wins, which "
            "depends on order",
            "Add a commutative reducer (Annotated[int, operator.add, Commutative()]) or drop "
            "the marker.",
        )
    annotation = spec.annotation
    held_as = (
        _vector_container(annotation) if reducer is not None and is_appending(reducer) else None
    )
    value_type: Any = annotation
    if held_as is not None:
        args = get_args(annotation)
        value_type = cast(Any, Vector)[args[0] if args else Any]
    make_default = _default_maker(owner, spec, annotation, value_type, held_as is not None)
    name = f"{prefix}.{spec.name}"
    merge = MergeStrategy.COMMUTATIVE if commutative else MergeStrategy.EXCLUSIVE
    key_scope = KeyScope.RUN if ephemeral == "run" else scope

    def body(namespace: dict[str, Any]) -> None:
        namespace["key"] = name
        namespace["merge"] = merge
        namespace["scope"] = key_scope
        namespace["default_factory"] = staticmethod(make_default)
        if reducer is not None:
            namespace["apply"] = staticmethod(reducer)
        namespace["__qualname__"] = owner
        namespace["__module__"] = model.__module__
        namespace["__doc__"] = (
            f"Field {spec.name!r} of {model.__qualname__}, compiled by StateSchema."
        )

    base = cast(Any, StateKey)[value_type, annotation]
    key = cast(type[StateKey[Any, Any]], types.new_class(spec.name, (base,), exec_body=body))
    if key.__statekernel_key__ is None:
        raise InvalidDeclaration(
            owner,
            f"its type {_declared_types.describe(annotation)} still has unbound type variables",
            "Declare the field with concrete types.",
        )
    return SchemaField(
        name=spec.name,
        annotation=annotation,
        key=key,
        reducer=reducer_name,
        merge=merge,
        ephemeral=ephemeral,
        held_as=held_as,
        deep=get_origin(annotation) is not None,
    )


def _read_metadata(
    owner: str, metadata: tuple[Any, ...]
) -> tuple[Reducer | None, str | None, bool, EphemeralScope | None]:
    """The field's reducer (None: overwrite), its display name, commutativity and reset scope.

    As in Jianmu, a string names a registered updater and any other callable is a reducer.
    Metadata of other kinds (pydantic's Field, annotated_types constraints) belongs to pydantic
    and is left alone.
    """
    reducer: Reducer | None = None
    reducer_name: str | None = None
    commutative = False
    ephemeral: EphemeralScope | None = None
    for item in metadata:
        if isinstance(item, Ephemeral):
            if ephemeral is not None and ephemeral != item.scope:
                raise InvalidDeclaration(
                    owner,
                    f"declares two Ephemeral scopes ({ephemeral!r} and {item.scope!r})",
                    "Keep one Ephemeral marker per field.",
                )
            ephemeral = item.scope
            continue
        if isinstance(item, Commutative):
            commutative = True
            continue
        if isinstance(item, str):
            found, found_name = _named_reducer(owner, item), item
        elif callable(item) and not isinstance(item, type):
            check_reducer(owner, item)
            found, found_name = item, describe_reducer(item)
        else:
            continue
        if reducer_name is not None:
            raise InvalidDeclaration(
                owner,
                f"declares two reducers ({reducer_name} and {found_name})",
                "A field merges one way: keep one reducer.",
            )
        reducer, reducer_name = found, found_name
    if reducer_name == "overwrite":
        reducer, reducer_name = None, None
    return reducer, reducer_name, commutative, ephemeral


def _named_reducer(owner: str, name: str) -> Reducer:
    try:
        return StateUpdater.get(name)
    except UnknownUpdater:
        raise InvalidDeclaration(
            owner,
            f"names the updater {name!r}, which is not registered; known updaters: "
            f"{', '.join(StateUpdater.names())}",
            "Fix the name, or register it with @StateUpdater.register(name) before the schema "
            "is compiled.",
        ) from None


def _vector_container(annotation: Any) -> type[list[Any]] | type[tuple[Any, ...]] | None:
    """`list` or `tuple` if a field of this type may be held as a Vector, else None."""
    origin = get_origin(annotation) or annotation
    args = get_args(annotation)
    if origin is list:
        return list
    if origin is tuple and (not args or (len(args) == 2 and args[1] is Ellipsis)):
        return tuple
    return None


def _default_maker(
    owner: str, spec: _Declared, annotation: Any, value_type: Any, as_vector: bool
) -> Callable[[], Any]:
    """A callable giving a fresh default in the held representation.

    Order: the class's default or default_factory; else the type's zero value (`0`, `""`,
    `[]`); else None when the type admits None. A TypedDict cannot declare defaults, so for
    it only the last two apply.
    """
    source = spec.default
    from_factory = spec.default_is_factory
    if source is None:
        source = _declared_types.zero_factory(annotation)
        from_factory = True
    if source is None:
        if not _admits_none(annotation):
            raise InvalidDeclaration(
                owner,
                f"has no default and its type {_declared_types.describe(annotation)} has no zero "
                f"value to start from",
                "Give the field a default (`= ...` or Field(default_factory=...)); in a "
                "TypedDict, which cannot hold defaults, use a type with a zero value or `| None`.",
            )
        return _none
    produce = source
    if as_vector:
        produce = lambda: Vector(source())  # noqa: E731
    if from_factory:  # a fresh value per call already
        return produce
    if _declared_types.is_immutable(value_type):
        shared = produce()
        return lambda: shared
    return lambda: copy.deepcopy(produce())


def _none() -> None:
    return None


def _admits_none(annotation: Any) -> bool:
    if annotation is None or annotation is type(None) or annotation is Any:
        return True
    origin = get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return any(_admits_none(arg) for arg in get_args(annotation))
    if origin is Literal:
        return None in get_args(annotation)
    return False


def _mismatch(value: Any, annotation: Any, path: tuple[Any, ...]) -> str | None:
    """Where `value` departs from `annotation`, or None when it conforms.

    A structural isinstance walk rather than pydantic validation: pydantic accepts a dict where
    a model is declared (it would convert it), but a state value is stored as given, so it must
    already be of the declared type. Models are trusted to be valid: they validated themselves
    when built.
    """
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is typing.Annotated:
        return _mismatch(value, args[0], path)
    if origin is typing.Union or origin is types.UnionType:
        if any(_mismatch(value, arg, path) is None for arg in args):
            return None
        return _wrong(value, annotation, path)
    if origin is Literal:
        if any(value == arg and type(value) is type(arg) for arg in args):
            return None
        return _wrong(value, annotation, path)
    classes = _declared_types.runtime_classes(annotation)
    if classes is not None and not isinstance(value, classes):
        return _wrong(value, annotation, path)
    if typing.is_typeddict(origin or annotation):
        hints = _typeddict_hints(origin or annotation)
        for name, item in value.items():
            problem = _mismatch(item, hints.get(name, Any), (*path, name))
            if problem is not None:
                return problem
        return None
    if not args:
        return None
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _first_mismatch(enumerate(value), args[0], path)
        if len(value) != len(args):
            return _wrong(value, annotation, path)
        for index, (item, arg) in enumerate(zip(value, args, strict=True)):
            problem = _mismatch(item, arg, (*path, index))
            if problem is not None:
                return problem
        return None
    if origin in _MAPPINGS and len(args) == 2:
        for name, item in value.items():
            problem = _mismatch(name, args[0], (*path, name)) or _mismatch(
                item, args[1], (*path, name)
            )
            if problem is not None:
                return problem
        return None
    if origin in _COLLECTIONS and len(args) == 1:
        return _first_mismatch(enumerate(value), args[0], path)
    return None  # another generic class: its origin class was checked, its insides are its own


_MAPPINGS = frozenset({dict, collections.abc.Mapping, collections.abc.MutableMapping})
_COLLECTIONS = frozenset(
    {
        list,
        set,
        frozenset,
        Vector,
        collections.abc.Sequence,
        collections.abc.MutableSequence,
        collections.abc.Set,
        collections.abc.MutableSet,
        collections.abc.Collection,
    }
)


@functools.cache
def _typeddict_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except NameError:  # an unresolvable annotation: nothing to check against
        return {}


def _first_mismatch(
    items: Iterable[tuple[int, Any]], annotation: Any, path: tuple[Any, ...]
) -> str | None:
    for index, item in items:
        problem = _mismatch(item, annotation, (*path, index))
        if problem is not None:
            return problem
    return None


def _wrong(value: Any, annotation: Any, path: tuple[Any, ...]) -> str:
    where = ".".join(map(str, path)) or "top level"
    expected = _declared_types.describe(annotation)
    return f"at {where}: expected {expected}, got {type(value).__name__} {value!r:.60}"


_BY_NAME: Mapping[str, Any] = (
    {"by_name": True}
    if "by_name" in inspect.signature(pydantic.BaseModel.model_validate).parameters
    else {}
)


def _by_validation_name(model: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Key `values` so that model_validate finds them (pydantic < 2.11 has no by_name)."""
    if _BY_NAME:
        return values
    return {
        (info.alias if isinstance(info.alias, str) else name): values[name]
        for name, info in model.model_fields.items()
    }
