"""What a declared type annotation means at run time.

Keys and specs are declared with ordinary annotations (`StateKey[int, int]`,
`StateKey[Vector[Msg], Msg]`, `int | None`, `Literal["a", "b"]`). From such an annotation the
kernel needs three facts, worked out once when the class is created so that the hot path
pays nothing: which runtime classes a value may be (an `isinstance` check), whether values
of the type are immutable (shared without copying) or must be copied to keep snapshots
frozen, and what the type's zero value is (the default when none is declared).

Immutability is decided conservatively: a type counts as immutable only if every value it
admits is immutable all the way down, as far as annotations can tell. Anything unknown is
treated as mutable and copied, because a hook that mutates a shared object would silently
corrupt other snapshots.
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import attrs
import msgspec

from .._errors import InvalidDeclaration, StateValidationError, cause_clause

V = TypeVar("V")

_ATOMIC_IMMUTABLE: frozenset[Any] = frozenset(
    {int, float, complex, bool, str, bytes, type(None), None, range, type(Ellipsis)}
)


def describe(annotation: Any) -> str:
    """A short, readable name for an annotation, used in error messages."""
    if isinstance(annotation, type) and get_origin(annotation) is None:
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "").replace("kernel.vector.", "")


def generic_args(cls: type, base: type) -> tuple[Any, ...] | None:
    """The type arguments that `cls` binds for the generic class `base`.

    Follows chains of generic subclasses (`class StageKey(StateKey[S, S])` then
    `class DocStage(StageKey[Doc])`) by substituting type variables on the way down, so a
    concrete subclass sees concrete arguments. Returns None when `cls` never parameterises
    `base`; arguments may still be TypeVars for an intermediate generic class.
    """
    return _args_through(cls, base, {})


def _args_through(cls: type, base: type, bound: dict[Any, Any]) -> tuple[Any, ...] | None:
    parents = cls.__dict__.get("__orig_bases__", cls.__bases__)
    for parent in parents:
        origin = get_origin(parent) or parent
        args = tuple(_substitute(arg, bound) for arg in get_args(parent))
        if origin is base:
            return args
        if isinstance(origin, type) and issubclass(origin, base) and origin is not cls:
            params = getattr(origin, "__parameters__", ())
            found = _args_through(origin, base, dict(zip(params, args, strict=False)))
            if found is not None:
                return found
    return None


def _substitute(annotation: Any, bound: dict[Any, Any]) -> Any:
    if isinstance(annotation, TypeVar):
        return bound.get(annotation, annotation)
    params = getattr(annotation, "__parameters__", ())
    if params and get_origin(annotation) is not None:
        return annotation[tuple(bound.get(p, p) for p in params)]
    return annotation


def is_unresolved(annotation: Any) -> bool:
    """True for a type variable: the class is an intermediate generic, not yet concrete."""
    return isinstance(annotation, TypeVar)


def runtime_classes(annotation: Any) -> tuple[type, ...] | None:
    """Classes a value of `annotation` may be an instance of; None means "accept anything".

    Parameterised types are checked against their origin class only (`list[int]` → `list`);
    a deeper check would cost time on every update for little gain.
    """
    if annotation is Any or isinstance(annotation, TypeVar) or annotation is object:
        return None
    if annotation is None or annotation is type(None):
        return (type(None),)
    origin = get_origin(annotation)
    if origin is Annotated:
        return runtime_classes(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        found: list[type] = []
        for arg in get_args(annotation):
            classes = runtime_classes(arg)
            if classes is None:
                return None
            found.extend(c for c in classes if c not in found)
        return tuple(found)
    if origin is Literal:
        return tuple(dict.fromkeys(type(v) for v in get_args(annotation)))
    target = origin if origin is not None else annotation
    if target is float:
        return (float, int)
    if target is complex:
        return (complex, float, int)
    if typing.is_typeddict(target):
        return (dict,)
    if not isinstance(target, type):
        return None
    try:
        isinstance(None, target)
    except TypeError:  # a Protocol that is not runtime-checkable, or similar
        return None
    return (target,)


_FROZEN_BY_CONSTRUCTION = "__statekernel_frozen__"
"""A kernel class that sets this freezes its values all the way down itself (a `ToolCall`
freezes its arguments), whatever its fields' declared types say."""


def is_immutable(annotation: Any) -> bool:
    """Whether every value `annotation` admits is immutable all the way down."""
    return _immutable(annotation, set())


def _immutable(annotation: Any, seen: set[Any]) -> bool:
    # `Any`, `object` and type variables need no case of their own: none is a frozen record,
    # so each falls through to "mutable" below.
    if annotation in _ATOMIC_IMMUTABLE:
        return True
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        return _immutable(args[0], seen)
    if origin is Literal:
        return True
    if origin is Union or origin is types.UnionType:
        return all(_immutable(arg, seen) for arg in args)
    if origin is not None:
        if origin is tuple:
            items = [a for a in args if a is not Ellipsis]
            return bool(items) and all(_immutable(a, seen) for a in items)
        if origin is frozenset or _is_vector(origin):
            return bool(args) and _immutable(args[0], seen)
        if isinstance(origin, type) and annotation not in seen:
            # A parameterised frozen record (`Transition[Doc]`): its fields, with the type
            # variables bound to the arguments given.
            seen.add(annotation)
            field_types = _frozen_field_types(origin)
            params = getattr(origin, "__parameters__", ())
            if field_types is None or not all(isinstance(p, TypeVar) for p in params):
                return False  # (a TypeVarTuple or ParamSpec parameter cannot be bound here)
            bound = dict(zip(params, args, strict=False))
            return all(_immutable(_substitute(t, bound), seen) for t in field_types)
        return annotation in seen
    if not isinstance(annotation, type):
        return False
    if annotation in seen:  # a recursive type: decided by its other fields
        return True
    if issubclass(annotation, enum.Enum) or _FROZEN_BY_CONSTRUCTION in vars(annotation):
        return True
    seen.add(annotation)
    field_types = _frozen_field_types(annotation)
    return field_types is not None and all(_immutable(t, seen) for t in field_types)


def is_vector_of_mutables(annotation: Any) -> bool:
    """Whether `annotation` is a `Vector` whose items may be mutable (`Vector`, `Vector[Any]`,
    `Vector[dict]`): the vector itself is persistent, so only its items need copying, one at
    a time, as they are read."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    origin = get_origin(annotation) or annotation
    if not _is_vector(origin):
        return False
    args = get_args(annotation)
    return not args or not _immutable(args[0], set())


def _is_vector(origin: Any) -> bool:
    from .vector import Vector  # local: vector is a leaf module, keep this one import-light

    return isinstance(origin, type) and issubclass(origin, Vector)


def _frozen_field_types(cls: type) -> list[Any] | None:
    """Field annotations of a frozen record class, or None if `cls` is not one."""
    if issubclass(cls, msgspec.Struct):
        if not cls.__struct_config__.frozen:
            return None
        return [field.type for field in msgspec.structs.fields(cls)]
    if attrs.has(cls):
        if getattr(cls.__setattr__, "__name__", "") != "_frozen_setattrs":
            return None
        return list(_hints(cls).values()) if cls.__annotations__ else [Any]
    if dataclasses.is_dataclass(cls):
        params = getattr(cls, "__dataclass_params__", None)
        if params is None or not params.frozen:
            return None
        return [_hints(cls).get(f.name, Any) for f in dataclasses.fields(cls)]
    if _is_pydantic_model(cls):
        model: Any = cls
        if not model.model_config.get("frozen"):
            return None
        return [field.annotation for field in model.model_fields.values()]
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):  # NamedTuple
        return list(_hints(cls).values())
    return None


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)  # `Annotated` stripped: it never changes the answer
    except Exception:  # unresolvable forward reference: fall back to "unknown"
        return {"?": Any}


def _is_pydantic_model(cls: type) -> bool:
    module = type(cls).__module__
    return module.startswith("pydantic") and hasattr(cls, "model_fields")


def zero_factory(annotation: Any) -> Callable[[], Any] | None:
    """A callable giving the type's zero value (`int()`, `Vector()`...), or None if none exists.

    The origin class is called once here to find out; a class that needs arguments, an
    abstract class, a Union, a Literal or an enum has no zero value and needs a declared default.
    """
    origin = get_origin(annotation)
    if origin is Annotated:
        return zero_factory(get_args(annotation)[0])
    target = origin if origin is not None else annotation
    target = _CONCRETE.get(target, target)
    if not isinstance(target, type) or issubclass(target, enum.Enum):
        return None
    if typing.is_typeddict(target):
        return None
    try:
        target()
    except Exception:
        return None
    return target


def copy_of(value: V, key: str, what: str = "value") -> V:
    """A deep copy of a mutable value of key `key`: how the kernel keeps snapshots frozen.

    A value that cannot be copied (a lock, a client, a socket: anything holding a live
    resource) is a `StateValidationError` naming the key, instead of whatever `deepcopy`
    raised from deep inside the value.
    """
    try:
        return copy.deepcopy(value)
    except RecursionError:
        raise StateValidationError(
            key,
            "a value the kernel can copy",
            value,
            what=what,
            detail="it is nested too deeply to copy; keep state values shallower",
        ) from None
    except Exception as error:
        raise StateValidationError(
            key,
            "a value the kernel can copy",
            value,
            what=what,
            detail=(
                f"copying it raised {cause_clause(error)}. State is copied so that snapshots "
                f"stay frozen, so a live resource (a lock, a client, a connection) does not "
                f"belong in it: keep it on the plugin instance or in a closure, and keep "
                f"plain data in state"
            ),
        ) from None


_CONCRETE: dict[Any, type] = {
    collections.abc.Collection: list,
    collections.abc.Sequence: list,
    collections.abc.MutableSequence: list,
    collections.abc.Set: set,
    collections.abc.MutableSet: set,
    collections.abc.Mapping: dict,
    collections.abc.MutableMapping: dict,
}
"""Abstract collections start as the concrete class a literal of them makes (as LangGraph
starts them): `Sequence[str]` as `[]`, `Mapping[str, int]` as `{}`."""

_NOT_SET: Any = object()
_DEFAULT_FIX = "Set `default = ...` (an immutable value) or `default_factory = callable`."


def default_maker(declaring: type, value_type: Any) -> Callable[[], Any]:
    """How a declared key makes its default: `default_factory`, else a copy of `default`
    (shared when the type is immutable), else the type's zero value.

    A type with no zero value and no declared default is an `InvalidDeclaration` raised
    here, when the class is created, not when the first read finds nothing.
    """
    owner = declaring.__qualname__
    factory = getattr(declaring, "default_factory", None)
    if factory is not None:
        if not callable(factory):
            raise InvalidDeclaration(
                owner, f"`default_factory` must be callable, got {factory!r}", _DEFAULT_FIX
            )
        return factory  # type: ignore[no-any-return]
    mutable = not is_immutable(value_type)
    default = getattr(declaring, "default", _NOT_SET)
    if default is not _NOT_SET:
        name = getattr(declaring, "key", owner)
        return (lambda: copy_of(default, name, "default")) if mutable else (lambda: default)
    zero = zero_factory(value_type)
    if zero is None:
        raise InvalidDeclaration(
            owner,
            f"value type {describe(value_type)} has no zero value to use as the default",
            _DEFAULT_FIX,
        )
    if mutable:
        return zero
    shared = zero()
    return lambda: shared
