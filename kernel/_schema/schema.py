"""`StateSchema`: a model class compiled into keys, a plugin, partial-update commands and views."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import attrs
import pydantic

from .._engine.plugin import Plugin, PluginRegistrar
from .._engine.snapshot import COMPILED_MODELS, SCHEMA_ATTRIBUTE
from .._errors import InvalidDeclaration, StateError, UnknownSchemaField, cause_text
from .._values.commands import Overwrite, StateCommand
from .._values.keys import RESERVED_PLUGIN_ID, KeyScope, StateKey, StateKeyOptions
from .._values.phases import Phase
from .compile import (
    SchemaField,
    compile_field,
    dataclass_fields,
    is_pydantic_model,
    mismatch,
    pydantic_fields,
    typeddict_fields,
)
from .constraints import BY_NAME, by_alias, by_validation_name
from .markers import EphemeralScope

if TYPE_CHECKING:
    from .._engine.context import PhaseContext
    from .._engine.snapshot import Snapshot

M = TypeVar("M")

_RESET_PHASES: Mapping[EphemeralScope, Phase] = {
    "step": Phase.STEP_START,
    "call": Phase.BEFORE_INFERENCE,
}


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
    """A pydantic model, dataclass or TypedDict compiled into state keys.

    ```python
    from typing import Annotated

    from pydantic import BaseModel, ConfigDict

    from statekernel import Agent, InferenceResponse, KeyScope, ScriptedModel, StateSchema
    from statekernel.testing import snapshot_of


    class Msg(BaseModel):
        model_config = ConfigDict(frozen=True)
        text: str


    class ChatState(BaseModel):
        messages: Annotated[list[Msg], "append_messages"] = []
        turns: Annotated[int, "overwrite"] = 0


    chat = StateSchema(ChatState, prefix="chat", scope=KeyScope.THREAD)
    model = ScriptedModel([InferenceResponse(text="hello")])
    agent = Agent([chat.plugin], model)  # the schema's fields are the agent's keys
    # in a hook: a partial update, each field through its reducer
    command = chat.command({"messages": [Msg(text="hi")], "turns": 1})
    # anywhere: the snapshot's values as a validated ChatState
    state = chat.view(snapshot_of(chat.plugin))
    assert state.turns == 0
    ```

    `StateSchema(model, *, prefix=None, scope=KeyScope.RUN, persistent=True)` compiles a
    pydantic `BaseModel`, a dataclass or a `TypedDict` whose fields carry `Annotated`
    reducers into ordinary state keys, one per field.

    - `prefix` defaults to the class name. A prefix starting with `statekernel` is refused.
    - `scope` applies to every field except `Ephemeral("run")` fields, which are always run
      keys.
    - `persistent=False` keeps thread fields out of the ThreadStore.
    - Any mistake in the declaration raises `InvalidDeclaration` naming the field.

    See [schema: what you get](schema.md) and
    [the rules, field by field](schema.md#the-rules-field-by-field).
    """

    model: type[M]
    """The compiled class."""
    prefix: str
    """The prefix of the generated key strings."""
    scope: KeyScope
    """The `KeyScope` of the fields (except `Ephemeral("run")` ones, always run keys)."""
    fields: Mapping[str, SchemaField]
    """Field name -> how the field compiled (its `key`, `reducer`, `merge`, `ephemeral`,
    `held_as`)."""
    keys: Mapping[str, type[StateKey[Any, Any]]]
    """Field name -> generated `StateKey` class, with key string `f"{prefix}.{field}"`.

    Usable anywhere a hand-written key is (`snapshot.get`, `cmd.update`,
    `statekernel.testing`)."""
    plugin: SchemaPlugin
    """A plugin with id `f"schema:{prefix}"`. It registers the keys and the step/call reset
    hooks. Register it before the plugins that write its fields."""
    _is_pydantic: bool

    def __init__(
        self,
        model: type[M],
        *,
        prefix: str | None = None,
        scope: KeyScope = KeyScope.RUN,
        persistent: bool = True,
    ) -> None:
        is_pydantic = is_pydantic_model(model)
        is_dataclass = isinstance(model, type) and dataclasses.is_dataclass(model)
        if not is_pydantic and not is_dataclass and not typing.is_typeddict(model):
            raise InvalidDeclaration(
                f"StateSchema({model!r})",
                "the state must be declared as a pydantic BaseModel subclass, a dataclass or a "
                "TypedDict",
                "Declare `class MyState(BaseModel): ...`, `@dataclass class MyState: ...` or "
                "`class MyState(TypedDict): ...`.",
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
        if is_pydantic:
            declared = pydantic_fields(model)
        elif is_dataclass:
            declared = dataclass_fields(model)
        else:
            declared = typeddict_fields(model)
        if not declared:
            raise InvalidDeclaration(
                owner, "declares no fields", "Add at least one annotated field to the class."
            )
        fields = {
            spec.name: compile_field(model, prefix, scope, spec, persistent=persistent)
            for spec in declared
        }
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
        for key in self.keys.values():
            # How `snapshot.view(Model)` finds this schema without the snapshot importing
            # schemas: the keys it registered point back at it.
            setattr(key, SCHEMA_ATTRIBUTE, self)
        COMPILED_MODELS.add(model)

    def command(self, updates: Mapping[str, Any] | None = None, /, **fields: Any) -> StateCommand:
        """A command applying a partial update, given as a dict and/or keyword arguments.

        Each value goes through its field's reducer at commit (`{"messages": [m]}` appends on
        an appending field). Checked right here: an unknown field raises
        `UnknownSchemaField`; a wrong value type, down to items, or a value the model's
        constraints refuse (`Field(gt=0)`, a `@field_validator`), raises
        `StateValidationError` naming the field. A merged value the constraints refuse fails
        its commit with `CommitRejected`. Messages may be given in any `MessageLike`
        spelling; `Overwrite(value)` replaces a reducer field.
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
                if type(value) is Overwrite:
                    field.overwrite(command, value.value)
                    continue
                value = field.prepare(value)
                command.update(field.key, value)
                field.check(value)
        return command

    def view(self, snapshot: Snapshot) -> M:
        """The state in `snapshot` as a validated instance of the model.

        A dict for a TypedDict, an instance for a dataclass, with every field in its
        declared type (Vector-held lists back as lists). A state the model refuses raises
        `StateError`.

        O(size of the state): it builds a fresh object. Hot hooks that need one field read it
        with `snapshot.get(schema.keys[name])` instead.
        """
        values = {name: f.declared(snapshot.get(f.key)) for name, f in self.fields.items()}
        if self._is_pydantic:
            model: Any = self.model
            try:
                return cast(M, model.model_validate(by_validation_name(model, values), **BY_NAME))
            except pydantic.ValidationError as error:
                raise self._invalid(snapshot, str(error)) from error
            except Exception as error:  # a validator that refused with another exception
                raise self._invalid(snapshot, cause_text(error)) from error
        for name, value in values.items():  # checked here, as nothing else will
            problem = mismatch(value, self.fields[name].annotation, (name,))
            if problem is not None:
                raise self._invalid(snapshot, problem)
        if dataclasses.is_dataclass(self.model):
            try:
                return self.model(**by_alias(self.model, values))
            except Exception as error:  # a __post_init__ that refuses, a pydantic dataclass
                raise self._invalid(snapshot, f"{type(error).__name__}: {error}") from error
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
        `command(...)`), a model instance (a pydantic model's set fields, or every field of
        a dataclass), a StateCommand, or None. Sync or async; any awaitable it returns is
        awaited. Building the view costs O(size of the state) per call; write a plain hook
        for hot paths.
        """
        if inspect.iscoroutinefunction(node):

            async def run_async(ctx: PhaseContext) -> StateCommand | None:
                return self._as_command(await node(self.view(ctx.snapshot)), node)

            return run_async

        def run(ctx: PhaseContext) -> StateCommand | Awaitable[StateCommand | None] | None:
            result = node(self.view(ctx.snapshot))
            if inspect.isawaitable(result):  # an object with `async def __call__`, a partial
                return self._awaited(result, node)
            return self._as_command(result, node)

        return run

    async def _awaited(
        self, result: Awaitable[Any], node: Callable[..., Any]
    ) -> StateCommand | None:
        return self._as_command(await result, node)

    def _as_command(self, result: Any, node: Callable[..., Any]) -> StateCommand | None:
        # A node is a hook: the engine's user-code policy applies to what it raises (this
        # TypeError included), naming the plugin that registered it.
        if result is None or isinstance(result, StateCommand):
            return result
        if isinstance(result, Mapping):
            return self.command(result)
        if not typing.is_typeddict(self.model) and isinstance(result, self.model):
            return self.command(self._updates_of(result))
        raise TypeError(
            f"node {getattr(node, '__qualname__', node)!r} of schema {self.prefix!r} must return "
            f"a dict of field updates, an instance of {self.model.__qualname__}, a StateCommand "
            f"or None, got {result!r}"
        )

    def _updates_of(self, instance: Any) -> dict[str, Any]:
        """A model instance as a partial update: a pydantic model's fields that were set
        (`model_fields_set`: `ChatState(turns=1)` updates `turns` only), every field of a
        dataclass. Each goes through its reducer, as in a dict."""
        if self._is_pydantic:
            return {name: getattr(instance, name) for name in instance.model_fields_set}
        return {name: getattr(instance, name) for name in self.fields}

    def __repr__(self) -> str:
        fields = ", ".join(self.fields)
        return f"<StateSchema {self.model.__qualname__} prefix={self.prefix!r} fields=[{fields}]>"
