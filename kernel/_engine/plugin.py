"""Plugins: how behaviour and state declarations reach a kernel.

A plugin is a class with an `id` and a `register(registrar)` method. Registration happens
once, when the kernel is built, and produces `Components`: an immutable index of every key,
hook, gate, handler and transform, in registration order. That order -- plugins in the order
given to the kernel, then calls in the order each plugin made them -- is the order in which
commands are merged, so it is the one order that decides results.

Keys, profile keys and action/effect handlers are structural: always on. Phase hooks, tool
gates and request transforms are behavioural: an agent's `active_hook_filter` can switch them
off per run.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from .._errors import DuplicateRegistration, InvalidDeclaration
from .._values.keys import RESERVED_PLUGIN_ID, RESERVED_PREFIX, StateKey, StateKeyOptions
from .._values.names import check_name
from .._values.phases import Phase
from .._values.specs import EffectSpec, ScheduledActionSpec, spec_info
from .merge import hook_source
from .registry import KeyBinding, KeyRegistry

PhaseHook = Callable[..., Any]
"""`(ctx: PhaseContext) -> StateCommand | None`, sync or async."""
ToolGateHook = Callable[..., Any]
"""`(ctx: PhaseContext) -> Block | Suspend | SetResult | None`, sync or async."""
ActionHandler = Callable[..., Any]
"""`(payload, ctx: PhaseContext) -> StateCommand | None`, sync or async."""
EffectHandler = Callable[..., Any]
"""`(payload, snapshot: Snapshot) -> None`, sync or async."""
RequestTransform = Callable[..., Any]
"""`(request, snapshot) -> request`, sync or async."""


class Plugin:
    """Base class for plugins: set `id` and override `register`.

    A plugin without an `id` raises `InvalidDeclaration` when the `Kernel` is built. Two
    plugins with one id raise `DuplicateRegistration`. Passing the kernel something that is
    not a `Plugin` raises `TypeError`. See [concepts: plugins](concepts.md#plugins).
    """

    id: str = ""
    """Required. The plugin's id: a unique, non-empty string."""

    def register(self, registrar: PluginRegistrar) -> None:
        """Declare this plugin's keys, hooks and handlers on `registrar`.

        Override it. It runs once, when the `Kernel` is built.
        """

    def __repr__(self) -> str:
        return f"<{type(self).__name__} id={self.id!r}>"


@attrs.frozen
class Registered:
    """One registered callable and the plugin that owns it."""

    plugin: str
    function: Callable[..., Any]
    is_async: bool
    source: str = attrs.field(init=False)
    """For a phase hook, what the journal records as the origin of the commands it returns
    (made once here, not per command)."""

    @source.default
    def _source(self) -> str:
        return hook_source(self.plugin)


@attrs.frozen
class HandlerEntry:
    """A registered action or effect handler, with the spec it serves."""

    plugin: str
    spec: type[Any]
    function: Callable[..., Any]
    is_async: bool


def _is_async(function: Callable[..., Any]) -> bool:
    target = getattr(function, "func", function)  # functools.partial
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - an async __call__ on an instance
    )


class PluginRegistrar:
    """What a plugin's `register` receives: one method per kind of component.

    Registration order (plugins in the order given to the kernel, then calls in the order
    each plugin made them) is the merge order. Every callable may be sync or async. Passing
    something that is not callable raises `TypeError`.

    Structural components (keys, profile keys, action and effect handlers) are always on.
    Behavioural ones (phase hooks, tool gates, request transforms) run only when the run's
    `active_hook_filter` is empty or names the plugin. A key string registered twice, or two
    handlers for one action or effect, raise `DuplicateRegistration` when the kernel is
    built. See [concepts: plugins](concepts.md#plugins).
    """

    def __init__(self, plugin_id: str) -> None:
        self._plugin = plugin_id
        self.keys: list[KeyBinding] = []
        self.profile_keys: list[type[Any]] = []
        self.hooks: list[tuple[Phase, Registered]] = []
        self.gates: list[Registered] = []
        self.actions: list[HandlerEntry] = []
        self.effects: list[HandlerEntry] = []
        self.transforms: list[Registered] = []

    @property
    def plugin_id(self) -> str:
        """The id of the plugin being registered."""
        return self._plugin

    def register_key(
        self, key: type[StateKey[Any, Any]], options: StateKeyOptions | None = None
    ) -> None:
        """Register the state key `key` (structural).

        `options`, a `StateKeyOptions`, overrides the key's class defaults for this kernel.
        A key string under the reserved prefix `statekernel.` raises `InvalidDeclaration`.
        """
        binding = KeyBinding.of(key, options, plugin=self._plugin)
        if binding.name.startswith(RESERVED_PREFIX) and self._plugin != RESERVED_PLUGIN_ID:
            raise InvalidDeclaration(
                key.__qualname__,
                f"uses the key string {binding.name!r}, but the prefix {RESERVED_PREFIX!r} is "
                f"reserved for the kernel's own keys",
                "Choose a key string with your plugin's own prefix.",
            )
        self.keys.append(binding)

    def register_profile_key(self, key: type[Any]) -> None:
        """Register the `ProfileKey` class `key` (structural)."""
        self.profile_keys.append(key)

    def register_phase_hook(self, phase: Phase, hook: PhaseHook) -> None:
        """Register `hook(ctx) -> StateCommand | None` for `phase` (behavioural).

        A `phase` that is not a `Phase` raises `TypeError`.
        """
        if not isinstance(phase, Phase):
            raise TypeError(f"plugin {self._plugin!r}: phase must be a kernel.Phase, got {phase!r}")
        self.hooks.append((phase, self._entry(hook, "phase hook")))

    def register_tool_gate(self, gate: ToolGateHook) -> None:
        """Register `gate(ctx) -> Block | Suspend | SetResult | None` (behavioural).

        It runs for every tool call, with `ctx.tool_call` set.
        """
        self.gates.append(self._entry(gate, "tool gate"))

    def register_action(
        self, action: type[ScheduledActionSpec[Any]], handler: ActionHandler
    ) -> None:
        """Register `handler(payload, ctx) -> StateCommand | None` for `action` (structural)."""
        spec_info(action, ScheduledActionSpec)
        entry = self._entry(handler, "action handler")
        self.actions.append(HandlerEntry(self._plugin, action, handler, entry.is_async))

    def register_effect(self, effect: type[EffectSpec[Any]], handler: EffectHandler) -> None:
        """Register `handler(payload, snapshot) -> None` for `effect` (structural)."""
        spec_info(effect, EffectSpec)
        entry = self._entry(handler, "effect handler")
        self.effects.append(HandlerEntry(self._plugin, effect, handler, entry.is_async))

    def register_request_transform(self, transform: RequestTransform) -> None:
        """Register `transform(request, snapshot) -> request` (behavioural).

        It returns a request of the same type.
        """
        self.transforms.append(self._entry(transform, "request transform"))

    def _entry(self, function: Callable[..., Any], what: str) -> Registered:
        if not callable(function):
            raise TypeError(f"plugin {self._plugin!r}: {what} must be callable, got {function!r}")
        return Registered(self._plugin, function, _is_async(function))


@attrs.frozen
class Components:
    """Everything a kernel's plugins registered, indexed for the engine."""

    plugin_ids: tuple[str, ...]
    keys: KeyRegistry
    profile_keys: Mapping[str, type[Any]]
    hooks: Mapping[Phase, tuple[Registered, ...]]
    gates: tuple[Registered, ...]
    actions: Mapping[str, HandlerEntry]
    effects: Mapping[str, HandlerEntry]
    transforms: tuple[Registered, ...]

    @classmethod
    def build(
        cls, plugins: Iterable[Plugin], *, extra_keys: Sequence[KeyBinding] = ()
    ) -> Components:
        """Run every plugin's `register`, checking for clashes; the kernel calls this once."""
        plugin_ids: list[str] = []
        bindings: list[KeyBinding] = list(extra_keys)
        profile_keys: dict[str, type[Any]] = {}
        profile_owner: dict[str, str] = {}
        hooks: dict[Phase, list[Registered]] = {phase: [] for phase in Phase}
        gates: list[Registered] = []
        actions: dict[str, HandlerEntry] = {}
        effects: dict[str, HandlerEntry] = {}
        transforms: list[Registered] = []
        for plugin in plugins:
            plugin_id = _plugin_id(plugin)
            if plugin_id in plugin_ids:
                if plugin_id == RESERVED_PLUGIN_ID:
                    raise InvalidDeclaration(
                        type(plugin).__qualname__,
                        f"uses the plugin id {plugin_id!r}, which the Agent facade reserves",
                        "Give the plugin another `id`.",
                    )
                raise DuplicateRegistration("plugin", plugin_id, plugin_id, plugin_id)
            plugin_ids.append(plugin_id)
            registrar = PluginRegistrar(plugin_id)
            plugin.register(registrar)
            bindings.extend(registrar.keys)
            for key in registrar.profile_keys:
                name = getattr(key, "key", None)
                if not isinstance(name, str):
                    raise TypeError(f"plugin {plugin_id!r}: {key!r} is not a ProfileKey class")
                if name in profile_keys and profile_keys[name] is not key:
                    raise DuplicateRegistration("profile key", name, profile_owner[name], plugin_id)
                profile_keys[name] = key
                profile_owner[name] = plugin_id
            for phase, hook in registrar.hooks:
                hooks[phase].append(hook)
            gates.extend(registrar.gates)
            for table, entries, kind in (
                (actions, registrar.actions, "action handler"),
                (effects, registrar.effects, "effect handler"),
            ):
                for entry in entries:
                    name = entry.spec.key
                    if name in table:
                        raise DuplicateRegistration(kind, name, table[name].plugin, plugin_id)
                    table[name] = entry
            transforms.extend(registrar.transforms)
        return cls(
            plugin_ids=tuple(plugin_ids),
            keys=KeyRegistry(bindings),
            profile_keys=MappingProxyType(profile_keys),
            hooks=MappingProxyType({phase: tuple(found) for phase, found in hooks.items()}),
            gates=tuple(gates),
            actions=MappingProxyType(actions),
            effects=MappingProxyType(effects),
            transforms=tuple(transforms),
        )


def _plugin_id(plugin: Any) -> str:
    if not isinstance(plugin, Plugin):
        raise TypeError(
            f"{plugin!r} is not a Plugin: subclass kernel.Plugin, set `id` and implement "
            f"`register(self, registrar)`."
        )
    plugin_id = getattr(plugin, "id", "")
    if not isinstance(plugin_id, str) or not plugin_id:
        raise InvalidDeclaration(
            type(plugin).__qualname__,
            "has no `id`",
            "Set a unique string `id` on the plugin class.",
        )
    try:
        check_name("plugin id", plugin_id)  # it is journaled as the source of its commits
    except ValueError as error:
        problem = "`id` must be a name every store can keep"
        raise InvalidDeclaration(type(plugin).__qualname__, problem, str(error)) from None
    return plugin_id
