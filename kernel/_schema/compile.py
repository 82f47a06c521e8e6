"""Reading a schema class's fields and compiling each into a `StateKey` (a `SchemaField`).

Everything is decided here once per field, so a mistake fails when the schema is built,
naming the field. The checks `view()` and `command()` run on values live here too, beside
the annotation reading they share.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, Literal, cast, get_args, get_origin

import attrs
import msgspec
import pydantic
from pydantic_core import PydanticUndefined

from .._errors import InvalidDeclaration, StateValidationError, UnknownUpdater
from .._values import declared_types as _declared_types
from .._values.codec import dec_hook
from .._values.commands import Overwrite, StateCommand
from .._values.keys import KeyScope, MergeStrategy, StateKey
from .._values.messages import Message, RemoveMessage, as_message, is_role_pair
from .._values.vector import Vector
from .constraints import Refused, constraint_check
from .markers import Commutative, Ephemeral, EphemeralScope
from .message_reducers import add_messages, append_messages
from .reducers import Reducer, StateUpdater, check_reducer, describe_reducer, is_appending


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
    update_annotation: Any = attrs.field(repr=False, eq=False)
    """What an update must be: the declared type, except under `add_messages`, whose
    updates are lists of messages and `RemoveMessage`s."""
    _deep: bool = attrs.field(repr=False, eq=False)
    _refuses: Callable[[Any], None] | None = attrs.field(repr=False, eq=False)
    """The model's constraints, for a field whose update is its new value (no reducer)."""
    _messages: bool = attrs.field(repr=False, eq=False)
    """The field's reducer is a message reducer: one message is an update too."""
    _coerces: bool = attrs.field(repr=False, eq=False)
    """The field holds `Message`s: strings, (role, content) tuples and dicts become ones."""

    def prepare(self, value: Any) -> Any:
        """An update as a user writes it, as the key takes it: one message in a list, input
        spellings as Messages (`as_message`), a tuple where the field is a tuple."""
        if self._messages and (
            not isinstance(value, list | tuple | Vector)
            or isinstance(value, RemoveMessage)
            or (self._coerces and is_role_pair(value))
        ):
            value = [value]
        if self._coerces and isinstance(value, list | tuple | Vector):
            where = self.key.key
            value = [m if isinstance(m, RemoveMessage) else as_message(m, where) for m in value]
            if get_origin(self.update_annotation) is tuple:
                value = tuple(value)
        return value

    def overwrite(self, command: StateCommand, value: Any) -> None:
        """Write `Overwrite(value)`: the value, checked as the field's type, replaces the
        field's value whatever its reducer (the op carries the marker, holding the value as
        the field holds it, to `apply`)."""
        if self._coerces and (isinstance(value, list | tuple | Vector) or is_role_pair(value)):
            items = [value] if is_role_pair(value) else value
            value = [as_message(m, self.key.key) for m in items]
        if self.held_as is not None and isinstance(value, list | tuple | Vector):
            value = self.held_as(value)  # the container the field declares
        if get_origin(self.annotation) is not None:
            problem = mismatch(value, self.annotation, ())
            if problem is not None:
                raise StateValidationError(
                    self.key.key, _declared_types.describe(self.annotation), value, detail=problem
                )
        self._check_refused(value)
        if get_origin(self.update_annotation) is list and isinstance(value, tuple):
            value = list(value)  # what the key's update type takes, to be checked and copied
        command.update(self.key, value)
        if self.reducer is not None:
            ops = command.patch.ops
            written = ops[-1][1]
            ops[-1] = (self.key, Overwrite(Vector(written) if self.held_as else written))

    def check(self, value: Any) -> None:
        """Check an update all the way down (items of lists, values of dicts, literals).

        The key's own check, at `cmd.update`, stops at the origin class (`list`); a wrong item
        type would otherwise only surface when `view()` validates the whole state, far from the
        hook that wrote it. Nothing is converted (a dict is not a model), since the value is
        stored as given. O(size of the update). A field without a reducer is also checked
        against the model's constraints here, as its update is the value it will hold; a
        reducer field's merged value is checked when it commits (`constraints`).
        """
        if self._deep:
            problem = mismatch(value, self.update_annotation, ())
            if problem is not None:
                raise StateValidationError(
                    self.key.key,
                    _declared_types.describe(self.update_annotation),
                    value,
                    detail=problem,
                )
        self._check_refused(value)

    def _check_refused(self, value: Any) -> None:
        """The model's constraints on a value the field will hold as it is (no reducer)."""
        if self._refuses is not None:
            try:
                self._refuses(value)
            except Refused as refused:
                raise StateValidationError(
                    self.key.key,
                    f"{_declared_types.describe(self.annotation)} that the model accepts",
                    value,
                    detail=refused.reasons,
                ) from None

    def declared(self, value: Any) -> Any:
        """The held value in the field's declared container (a Vector back to a list)."""
        if self.held_as is list:
            return value.tolist()
        if self.held_as is tuple:
            return value.totuple()
        return value


# -- compilation --------------------------------------------------------------------------


@attrs.frozen
class _Declared:
    """One field as the class declares it, before compilation."""

    name: str
    annotation: Any
    metadata: tuple[Any, ...]
    default: Callable[[], Any] | None
    default_is_factory: bool


def is_pydantic_model(model: Any) -> bool:
    return isinstance(model, type) and issubclass(model, pydantic.BaseModel)


def pydantic_fields(model: Any, infos: dict[str, Any] | None = None) -> list[_Declared]:
    """A pydantic model's fields (or `infos`, a pydantic dataclass's), their defaults and
    metadata."""
    found: list[_Declared] = []
    for name, info in (model.model_fields if infos is None else infos).items():
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


def dataclass_fields(model: Any) -> list[_Declared]:
    """A dataclass's fields, their defaults and `Annotated` metadata (a pydantic dataclass
    is read as pydantic reads it: `Field(...)` defaults and constraints)."""
    infos = getattr(model, "__pydantic_fields__", None)
    if isinstance(infos, dict):
        taken = {item.name for item in dataclasses.fields(model) if item.init}
        return pydantic_fields(model, {n: i for n, i in infos.items() if n in taken})
    hints = _resolved_hints(model)
    found: list[_Declared] = []
    for item in dataclasses.fields(model):
        if not item.init:
            continue
        hint = hints.get(item.name, item.type)
        metadata: tuple[Any, ...] = ()
        if get_origin(hint) is typing.Annotated:
            hint, *rest = get_args(hint)
            metadata = tuple(rest)
        default: Callable[[], Any] | None = None
        is_factory = False
        if item.default_factory is not dataclasses.MISSING:
            default, is_factory = item.default_factory, True
        elif item.default is not dataclasses.MISSING:
            value = item.default
            default = lambda value=value: value  # noqa: E731 - copied by the caller when mutable
        found.append(_Declared(item.name, hint, metadata, default, is_factory))
    return found


def _resolved_hints(model: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(model, include_extras=True)
    except NameError as error:
        raise InvalidDeclaration(
            model.__qualname__,
            f"an annotation cannot be resolved ({error})",
            "Define the types a field refers to at module level, before the schema.",
        ) from None


def typeddict_fields(model: Any) -> list[_Declared]:
    hints = _resolved_hints(model)
    found: list[_Declared] = []
    for name, hint in hints.items():
        # PEP 655 allows both `NotRequired[Annotated[T, ...]]` and `Annotated[NotRequired[T],
        # ...]` (and nesting of either): peel the layers in whatever order they come.
        metadata: list[Any] = []
        while True:
            origin = get_origin(hint)
            if origin in _REQUIREDNESS:
                hint = get_args(hint)[0]
            elif origin is typing.Annotated:
                hint, *rest = get_args(hint)
                metadata.extend(rest)
            else:
                break
        found.append(_Declared(name, hint, tuple(metadata), None, False))
    return found


_REQUIREDNESS = frozenset(
    {typing.Required, typing.NotRequired, getattr(typing, "ReadOnly", typing.Required)}
)


def compile_field(
    model: Any, prefix: str, scope: KeyScope, spec: _Declared, *, persistent: bool = True
) -> SchemaField:
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
    update_type: Any = annotation
    accepted: Any = annotation
    item = _item_type(annotation)
    if reducer is add_messages:
        accepted = update_type = list[item | RemoveMessage]  # type: ignore[valid-type]
        stored = persistent and (KeyScope.RUN if ephemeral == "run" else scope) is KeyScope.THREAD
        problem = _journal_problem(update_type) if stored else None
        if problem is not None:
            raise InvalidDeclaration(
                owner,
                f"uses add_messages with messages of type {_declared_types.describe(item)}, "
                f"and a saved thread journals each update, but msgspec cannot decode a list of "
                f"these beside RemoveMessage ({problem})",
                "Declare the messages as one msgspec Struct, dataclass or attrs class (such as "
                "statekernel.Message), or as dicts; or keep the field out of the thread store "
                "(persistent=False, or run scope); or use append_messages.",
            )
    make_default = _default_maker(owner, spec, annotation, value_type, held_as is not None)
    name = f"{prefix}.{spec.name}"
    merge = MergeStrategy.COMMUTATIVE if commutative else MergeStrategy.EXCLUSIVE
    key_scope = KeyScope.RUN if ephemeral == "run" else scope
    refuses = constraint_check(model, spec.name, annotation, spec.metadata, held_as)

    def body(namespace: dict[str, Any]) -> None:
        namespace["key"] = name
        namespace["merge"] = merge
        namespace["scope"] = key_scope
        namespace["default_factory"] = staticmethod(make_default)
        if reducer is not None:
            namespace["apply"] = staticmethod(_overwritable(reducer))
        if refuses is not None:
            namespace["validate"] = staticmethod(refuses)
        namespace["__qualname__"] = owner
        namespace["__module__"] = model.__module__
        namespace["__doc__"] = (
            f"Field {spec.name!r} of {model.__qualname__}, compiled by StateSchema."
        )

    base = cast(Any, StateKey)[value_type, update_type]
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
        update_annotation=accepted,
        deep=get_origin(accepted) is not None,
        refuses=refuses if reducer is None else None,
        messages=reducer is add_messages or reducer is append_messages,
        coerces=isinstance(item, type) and issubclass(item, Message),
    )


def _overwritable(reducer: Reducer) -> Reducer:
    """The field's `apply`: the reducer, except for an `Overwrite`, whose value replaces the
    field's (`schema.command` writes one; it journals as the value it leaves)."""

    def apply(old: Any, new: Any) -> Any:
        if type(new) is Overwrite:  # its value is already held as the field holds it
            return new.value
        return reducer(old, new)

    apply.__qualname__ = apply.__name__ = getattr(reducer, "__name__", "apply")
    apply.__wrapped__ = reducer  # type: ignore[attr-defined]
    return apply


def _journal_problem(update_type: Any) -> str | None:
    """Why msgspec cannot decode updates of this type (so the journal could not replay
    them), or None when it can."""
    try:
        msgspec.json.Decoder(update_type, dec_hook=dec_hook)
    except TypeError as error:
        return str(error)
    return None


def _item_type(annotation: Any) -> Any:
    """The item type of a list-like declared type (`list[Message]` -> `Message`), else Any."""
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin in _LISTS or origin is Vector or (origin is tuple and len(args) == 2):
        return args[0] if args else Any
    return Any


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
    if origin in _LISTS:
        return list
    if origin is tuple and (not args or (len(args) == 2 and args[1] is Ellipsis)):
        return tuple
    return None


_LISTS = frozenset({list, collections.abc.Sequence, collections.abc.MutableSequence})
"""Declared containers held as a Vector under an appending reducer and viewed as a list
(LangGraph's `Sequence[AnyMessage]` spelling starts, and is read back, as a list)."""


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
    return lambda: _declared_types.copy_of(produce(), owner, "default")


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


def mismatch(value: Any, annotation: Any, path: tuple[Any, ...]) -> str | None:
    """Where `value` departs from `annotation`, or None when it conforms.

    A structural isinstance walk rather than pydantic validation: pydantic accepts a dict where
    a model is declared (it would convert it), but a state value is stored as given, so it must
    already be of the declared type. Models are trusted to be valid: they validated themselves
    when built.
    """
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is typing.Annotated:
        return mismatch(value, args[0], path)
    if origin is typing.Union or origin is types.UnionType:
        if any(mismatch(value, arg, path) is None for arg in args):
            return None
        return _wrong(value, annotation, path)
    if origin is Literal:
        if any(value == arg and type(value) is type(arg) for arg in args):
            return None
        return _wrong(value, annotation, path)
    classes = _declared_types.runtime_classes(annotation)
    if classes is not None and not isinstance(value, classes):
        return _wrong(value, annotation, path)
    if origin in _NOT_TEXT and isinstance(value, str | bytes):
        # A string is a sequence of its characters: appended to a Sequence[str] field it
        # would add one item per character. pydantic refuses it here too.
        return _wrong(value, annotation, path)
    if typing.is_typeddict(origin or annotation):
        hints = _typeddict_hints(origin or annotation)
        for name, item in value.items():
            problem = mismatch(item, hints.get(name, Any), (*path, name))
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
            problem = mismatch(item, arg, (*path, index))
            if problem is not None:
                return problem
        return None
    if origin in _MAPPINGS and len(args) == 2:
        for name, item in value.items():
            problem = mismatch(name, args[0], (*path, name)) or mismatch(
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


_NOT_TEXT = frozenset(
    {collections.abc.Sequence, collections.abc.Collection, collections.abc.Iterable}
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
        problem = mismatch(item, annotation, (*path, index))
        if problem is not None:
            return problem
    return None


def _wrong(value: Any, annotation: Any, path: tuple[Any, ...]) -> str:
    where = ".".join(map(str, path)) or "top level"
    expected = _declared_types.describe(annotation)
    return f"at {where}: expected {expected}, got {type(value).__name__} {value!r:.60}"
