"""msgspec hooks that let kernel-owned types cross a persistence boundary.

Why hooks, and why never pickle: thread checkpoints, the journal and profile-store rows
must stay readable by other processes, other versions of this package and other
languages, and loading them must never run code chosen by whoever wrote the bytes.
Pickle fails all three.  msgspec JSON / MessagePack are plain data, validated against the
declared type on the way back in, so the kernel routes every value it persists through
`msgspec` with these hooks: a `Vector` is written as an ordinary array (indistinguishable
from a list on disk, so the storage format does not depend on the in-memory container)
and rebuilt, with its items converted to the declared item type, on decode.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any, get_args, get_origin

import msgspec
import msgspec.inspect

from .vector import Vector, _from_list

__all__ = ["CODEC_ERRORS", "NOT_EXACT", "STORABLE_TYPES", "as_json_data", "dec_hook", "enc_hook"]

CODEC_ERRORS: tuple[type[BaseException], ...] = (
    msgspec.MsgspecError,
    TypeError,
    ValueError,
    NotImplementedError,  # an object of a type msgspec cannot encode
    RecursionError,  # a value nested deeper than the interpreter's stack
)
"""What msgspec and the kernel's hooks raise for a value they cannot encode, convert or decode.

The tuple of exceptions, including the one for a value nested too deep: the one list every
boundary catches, so each failure becomes an error naming the key instead of escaping raw.
Catch it at a codec boundary and raise `StateValidationError` or `DecodeFailed` naming the
key."""

NOT_EXACT = (
    "it would not decode back equal (JSON has no infinity or NaN, and a tuple, set or Vector "
    "in a field typed Any comes back a list); declare the type it holds"
)
"""Why a value that encodes cannot be stored all the same."""
STORABLE_TYPES = (
    "Use a msgspec-encodable type (Struct, dataclass, attrs class, pydantic model, builtins, "
    "Vector) or register the key with StateKeyOptions(persistent=False)."
)
"""The fix for a value a thread store cannot keep."""

_ANY_ITEM: tuple[object, ...] = (Any, object)


def enc_hook(obj: Any) -> Any:
    """Encode kernel types msgspec does not know: the msgspec `enc_hook` for kernel types.

    Pass it as `msgspec.json.encode(value, enc_hook=enc_hook)`. A `Vector` becomes an
    array, a pydantic model its JSON-mode dump, a `Snapshot` its key -> value map, an
    exception its type name and message (so a run's events and results can be sent as JSON
    as they are). The kernel's own persistence uses it, with `dec_hook`.
    See [concepts: Vector](concepts.md#vector).
    """
    if type(obj) is Vector:
        return obj.tolist()
    if _is_pydantic_model(type(obj)):
        return obj.model_dump(mode="json")
    if isinstance(obj, str):  # a str subclass such as StateScope is stored as its string
        return str(obj)
    encode = getattr(type(obj), "__statekernel_encode__", None)
    if encode is not None:
        return encode(obj)
    if isinstance(obj, BaseException):
        return {"type": type(obj).__name__, "message": str(obj)}
    raise NotImplementedError(f"Objects of type {type(obj).__qualname__} are not supported")


def as_json_data(value: Any, fallback: Any) -> Any:
    """`value` as plain JSON data if it encodes as JSON, else `fallback`: for views of a
    run (events, results, snapshots) that must always encode, whatever a tool returned or
    a key holds. Through JSON itself, so only what JSON can say survives (a dict with tuple
    keys does not)."""
    try:
        return msgspec.json.decode(msgspec.json.encode(value, enc_hook=enc_hook))
    except CODEC_ERRORS:
        return fallback


def dec_hook(type_: Any, obj: Any) -> Any:
    """Decode kernel types from the raw value msgspec produced: the msgspec `dec_hook`.

    Pass it as `msgspec.json.decode(data, type=T, dec_hook=dec_hook)`. A `Vector` is decoded
    from an array, with its items converted to the declared item type; a pydantic model is
    validated from its dump. The kernel's own persistence uses it, with `enc_hook`.
    See [concepts: Vector](concepts.md#vector).

    msgspec passes the annotation as written: `Vector[int]` (a generic alias) or the bare
    `Vector` class.  Items are converted with `msgspec.convert` so they get the same
    validation as a `list[T]` field; a failure becomes a ValueError, which msgspec turns
    into a `msgspec.ValidationError` carrying the field path.
    """
    origin = get_origin(type_) or type_
    if isinstance(origin, type) and _is_pydantic_model(origin):
        model: Any = origin
        try:
            return model.model_validate(obj)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise ValueError(str(exc)) from None
    if origin is not Vector:
        raise NotImplementedError(f"Type {type_!r} is not supported")
    args = get_args(type_)
    item = args[0] if args else Any
    if type(obj) is Vector:
        if item in _ANY_ITEM:
            return obj
        obj = obj.tolist()
    try:
        # Converting to a list type always builds a new list, so the Vector may own it.
        items = msgspec.convert(obj, types.GenericAlias(list, (item,)), dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc)) from None
    return _from_list(items)


def _is_pydantic_model(cls: type) -> bool:
    """Duck-typed so that the codec does not import pydantic unless a model is in play."""
    return hasattr(cls, "model_validate") and hasattr(cls, "model_dump")


_JSON_KEYS = (
    msgspec.inspect.AnyType,
    msgspec.inspect.StrType,
    msgspec.inspect.IntType,
    msgspec.inspect.FloatType,
    msgspec.inspect.EnumType,
    msgspec.inspect.LiteralType,
    msgspec.inspect.UUIDType,
    msgspec.inspect.DecimalType,
    msgspec.inspect.DateTimeType,
    msgspec.inspect.DateType,
    msgspec.inspect.TimeType,
    msgspec.inspect.BytesType,
    msgspec.inspect.Metadata,
)


def _vector_items(type_: Any) -> list[Any]:
    """The item types of every `Vector[T]` inside `type_` (outermost first)."""
    found: list[Any] = []
    todo = [type_]
    seen: set[int] = set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        args = get_args(current)
        if get_origin(current) is Vector and args:
            found.append(args[0])
        todo.extend(arg for arg in args if not isinstance(arg, (str, int, bytes)))
    return found


def _nodes(root: Any) -> Iterator[Any]:
    """Every node of a `msgspec.inspect` type tree, each once (trees can be recursive)."""
    seen: set[int] = set()
    todo: list[Any] = [root]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        for attribute in ("type", "item_type", "key_type", "value_type"):
            child = getattr(node, attribute, None)
            if isinstance(child, msgspec.inspect.Type):
                todo.append(child)
        todo.extend(getattr(node, "types", ()))
        todo.extend(getattr(node, "item_types", ()))
        todo.extend(field.type for field in getattr(node, "fields", ()))


def unencodable_part(type_: Any) -> str | None:
    """The first part of `type_` that these hooks cannot carry both ways, or None if all of
    it can be encoded and decoded (checked once, when a key is registered)."""
    for item in _vector_items(type_):  # msgspec sees a Vector as one custom type
        problem = unencodable_part(item)
        if problem is not None:
            return f"the items of a Vector: {problem}"
    try:
        root = msgspec.inspect.type_info(type_)
    except Exception as error:  # TypeError, ValueError; NameError for an unresolved hint
        return str(error) or type(error).__name__
    for node in _nodes(root):
        if isinstance(node, msgspec.inspect.CustomType):
            cls = node.cls
            if not (cls is Vector or _is_pydantic_model(cls)):
                return f"objects of type {cls.__qualname__} are not supported"
        if isinstance(node, msgspec.inspect.DictType) and not isinstance(node.key_type, _JSON_KEYS):
            return "a dict whose keys are neither strings nor numbers (JSON object keys are)"
    return None


_INEXACT = (msgspec.inspect.FloatType, msgspec.inspect.AnyType)


def is_exact(type_: Any) -> bool:
    """Whether every value of `type_` decodes back equal to what was encoded.

    Not so for floats (JSON has no infinity or NaN: they encode as null) nor for anything
    typed `Any` (a tuple comes back a list, a set a list, a custom object not at all); a
    value of such a type is checked by `decodes_back` before it is stored."""
    if unencodable_part(type_) is not None:
        return False
    if any(not is_exact(item) for item in _vector_items(type_)):
        return False
    root = msgspec.inspect.type_info(type_)  # it worked in unencodable_part
    return not any(isinstance(node, _INEXACT) for node in _nodes(root))


def decodes_back(data: bytes, decoder: msgspec.json.Decoder[Any], value: Any) -> bool:
    """Whether `data` decodes to `value` again, of the same kind (a number may come back as
    the other kind of number): the one check before a value or update of an inexact type
    is stored."""
    try:
        back = decoder.decode(data)
    except CODEC_ERRORS:
        return False
    numbers = (int, float)
    same_kind = type(back) is type(value) or (type(back) in numbers and type(value) in numbers)
    return bool(same_kind and back == value)
