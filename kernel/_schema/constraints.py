"""What the model refuses, checked at every write of a field rather than at the next `view()`.

A field the model constrains (`Annotated[int, Field(gt=0)]`, a `@field_validator`, an
`AfterValidator`) must refuse a bad value when it is written, naming the field, as Jianmu
does by validating the merged state before the write lands. Left to `view()`, a bad write
would commit, and from then on every view of the state (so every `schema.hook` node) would
fail, far from the hook that wrote it.

The check runs as the compiled key's `validate`, so it sees the value after the reducer
merged the update, and a refusal is a `CommitRejected` that leaves the state unchanged.
Only fields with something to check get one: a plain `list[Message]` history pays nothing.
Each check validates the field on its own (a one-field model carrying the field's
constraints and field validators), so model-wide `@model_validator`s, and field validators
that need the rest of the model (other fields through `info.data`, the class's own
attributes), are left to `view()`: such a validator's error at the write is ignored.
Values are checked, never converted: the state stores what was written.
"""

from __future__ import annotations

import inspect
import logging
import typing
from collections.abc import Callable, Mapping
from typing import Any, get_args, get_origin

import pydantic
import pydantic.fields

from .._errors import cause_text
from .markers import Commutative, Ephemeral
from .message_reducers import held_vector

Check = Callable[[Any], None]

logger = logging.getLogger("statekernel")


def constraint_check(
    model: Any,
    name: str,
    annotation: Any,
    metadata: tuple[Any, ...],
    held_as: type[list[Any]] | type[tuple[Any, ...]] | None,
) -> Check | None:
    """A function raising `Refused` (with pydantic's reasons) for a value the model refuses
    for field `name`; None when the field has nothing beyond its type to check (the type
    itself is checked at `schema.command`), or when the field cannot be checked alone."""
    theirs = tuple(item for item in metadata if _is_constraint(item))
    validators = _field_validators(model, name, whole_field=held_as is None)
    if not theirs and not validators and not _constrained(annotation):
        return None
    owner = model.__qualname__
    try:
        validate = _validator(model, name, annotation, theirs, validators)
    except pydantic.PydanticUserError as error:
        # A type pydantic will not build a validator for on its own here (a typing.TypedDict
        # on Python < 3.12): the field's type is still checked, its constraints are not.
        logger.warning(
            "%s.%s: its constraints cannot be checked at each write (%s); view() checks the "
            "type only. Use typing_extensions.TypedDict for the items to have them checked.",
            owner,
            name,
            str(error).splitlines()[0],
        )
        return None

    def check(value: Any) -> None:
        held = held_vector(value)  # held as a Vector (or the commit's view of one)
        if held is not None:
            value = held.totuple() if held_as is tuple else held.tolist()
        try:
            validate(value)
        except pydantic.ValidationError as error:
            raise Refused(owner, name, value, reasons(error)) from None
        except Exception as error:  # a validator that refused with another exception
            raise Refused(owner, name, value, cause_text(error)) from None

    return check


def _validator(
    model: Any, name: str, annotation: Any, theirs: tuple[Any, ...], validators: dict[str, Any]
) -> Check:
    infos = _pydantic_fields(model)
    if infos is not None:  # pydantic's: the field as declared, the model's config
        field_info = infos[name]
        make_model: Any = pydantic.create_model  # (its overloads cannot type a field by name)
        checker = make_model(
            f"{model.__name__}.{name}",
            __config__=_config_of(model),
            __validators__=validators,
            **{name: (field_info.annotation, field_info)},
        )
        _lend_attributes(model, checker, infos)

        def validate(value: Any) -> None:
            checker.model_validate(by_validation_name(checker, {name: value}), **BY_NAME)

        return validate
    # A TypedDict or plain dataclass field: its type and the constraints annotating it.
    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(
        typing.Annotated[(annotation, *theirs)] if theirs else annotation,
        config=pydantic.ConfigDict(arbitrary_types_allowed=True),
    )
    return adapter.validate_python


def _lend_attributes(model: Any, checker: Any, fields: dict[str, Any]) -> None:
    """Give the one-field model the class attributes and methods of the model (a ClassVar
    limit, a helper method) that its validators may read through `cls`."""
    decorators = getattr(model, "__pydantic_decorators__", None)
    declared: set[str] = set()  # validators and serializers: the field's are re-declared
    for group in _DECORATOR_GROUPS:
        declared.update(getattr(decorators, group, None) or {})
    for base in reversed(model.__mro__):
        if base is object or base is pydantic.BaseModel or not hasattr(base, "__dict__"):
            continue
        for attribute, value in vars(base).items():
            if attribute.startswith("__") or attribute in fields or attribute in declared:
                continue
            if attribute in checker.__dict__ and not callable(value):
                continue
            try:
                setattr(checker, attribute, value)
            except (AttributeError, TypeError):  # one pydantic will not let be set
                continue


_DECORATOR_GROUPS = (
    "validators",
    "field_validators",
    "root_validators",
    "model_validators",
    "field_serializers",
    "model_serializers",
    "computed_fields",
)


def _pydantic_fields(model: Any) -> dict[str, Any] | None:
    """A pydantic model's or pydantic dataclass's fields (`FieldInfo`s), else None."""
    fields = getattr(model, "__pydantic_fields__", None)
    return fields if isinstance(fields, dict) else None


def _config_of(model: Any) -> Any:
    config = getattr(model, "model_config", None)
    return config if config is not None else getattr(model, "__pydantic_config__", None)


class Refused(ValueError):
    """A value the model's constraints refuse for one field; `reasons` are pydantic's."""

    def __init__(self, model: str, field: str, value: Any, reasons: str) -> None:
        self.reasons = reasons
        super().__init__(
            f"{model} refuses {value!r:.80} for field {field!r}: {reasons}. Write a value "
            f"the model accepts (with a reducer, one whose merged value it accepts)"
        )


BY_NAME: Mapping[str, Any] = (
    {"by_name": True}
    if "by_name" in inspect.signature(pydantic.BaseModel.model_validate).parameters
    else {}
)


def by_validation_name(model: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Key `values` so that model_validate finds them (pydantic < 2.11 has no by_name)."""
    if BY_NAME:
        return values
    return {
        (info.alias if isinstance(info.alias, str) else name): values[name]
        for name, info in model.model_fields.items()
        if name in values
    }


def by_alias(model: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Key `values` as a pydantic dataclass's `__init__` takes them (a field with an alias
    is passed by its alias); a plain dataclass's as they are."""
    fields = _pydantic_fields(model)
    if fields is None:
        return values
    return {
        (info.alias if isinstance(info.alias, str) else name): value
        for name, value in values.items()
        if (info := fields.get(name)) is not None
    }


def reasons(error: pydantic.ValidationError) -> str:
    """pydantic's reasons, one line each, without its links."""
    parts = []
    for item in error.errors(include_url=False):
        location = ".".join(str(part) for part in item["loc"][1:])
        parts.append(f"{location + ': ' if location else ''}{item['msg']}")
    return "; ".join(parts)


def _is_constraint(item: Any) -> bool:
    """Whether an `Annotated` item is for pydantic (a constraint, a validator, a `Field`),
    not for the schema compiler (a reducer, an updater name, a marker)."""
    if isinstance(item, str | Ephemeral | Commutative):
        return False
    if isinstance(item, pydantic.fields.FieldInfo):
        return bool(item.metadata)  # Field(gt=0) constrains; Field(description=...) does not
    return not callable(item) or isinstance(item, type)


def _constrained(annotation: Any) -> bool:
    """Whether a constraint sits inside the type (`list[Annotated[int, Gt(0)]]`)."""
    if get_origin(annotation) is typing.Annotated and any(
        _is_constraint(item) for item in annotation.__metadata__
    ):
        return True
    return any(_constrained(arg) for arg in get_args(annotation))


def _field_validators(model: Any, name: str, *, whole_field: bool) -> dict[str, Any]:
    """The model's `@field_validator`s that apply to `name`, re-declared for a one-field
    model. A validator of every field (`"*"`) skips a field held as a Vector: it would
    make every append to a history O(n); naming the field asks for that explicitly."""
    decorators = getattr(model, "__pydantic_decorators__", None)
    if decorators is None or _pydantic_fields(model) is None:
        return {}
    found: dict[str, Any] = {}
    for attribute, decorator in decorators.field_validators.items():
        fields = decorator.info.fields
        if name in fields or ("*" in fields and whole_field):
            function = getattr(decorator.func, "__func__", decorator.func)
            if _reads_other_fields(function, decorator.info.mode):
                continue  # its `info.data` would hold this field alone: view() runs it
            declare: Any = pydantic.field_validator(
                name, mode=decorator.info.mode, check_fields=False
            )
            found[attribute] = declare(function)
    return found


def _reads_other_fields(function: Any, mode: str) -> bool:
    """Whether a field validator takes pydantic's `info` (so it may read other fields
    through `info.data`): `(cls, value, info)`, or `(cls, value, handler, info)` in wrap
    mode."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= (4 if mode == "wrap" else 3)
