"""The application's declarations, as a reading command takes them (`--app module:attr`).

A plain kernel reads every stored key as far as its bytes go, but an update op means what
its key's `apply` makes of it, and only the code that declares the key has that. So a
reading command can be handed the application the way `uvicorn`, Flask and Celery take
theirs, and the kernel it reads with then registers the same keys as the application's
kernels: the same key classes, registered the same way (scope, `persistent`,
`retain_on_uninstall`), under the same plugin ids. Nothing else of the application is
used: no hook, tool or model runs, and the reading kernel reads only the database the
command opened read-only, whatever stores the application's own kernel was given.

`attr` names one of these, or a callable returning one (or an awaitable of one):

- a `Plugin`, or an iterable of them (a list, a tuple): the plugins of the application's
  kernel, as `Kernel(plugins)` or `Agent(plugins, ...)` takes them;
- a `Kernel`; an `Agent` (its kernel's keys, the `Agent`'s own included);
- an `AgentTeam`: every role's `Agent` (`team.agent(role)`), whose keys are united. Two
  roles that register one key string differently cannot be read as one: that is refused,
  naming the key and the roles.

A callable that requires an argument is handed the `Stores` opened on the database
(read-only: it cannot write there), like the factory `statekernel worker` takes, so the
same `module:make_team` serves both; one that requires none is called with none.

An application built with a `chain_key=` (a `Kernel`, an `Agent`, an `AgentTeam`) gives
that key too: its threads are chained with it, so a reader of them needs it as much as
their keys' declarations.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from statekernel import (
    Agent,
    AgentTeam,
    Kernel,
    Plugin,
    PluginRegistrar,
    StateError,
    StateKeyOptions,
    Stores,
)
from statekernel.lowlevel import KeyBinding

from .application import ApplicationNotFound

__all__ = ["Declarations", "NotAnApplication", "declarations"]

_KINDS = "a Plugin list, a Kernel, an Agent, an AgentTeam, or a callable returning one"


class NotAnApplication(ApplicationNotFound):
    """`module:attr` names something a reading kernel cannot take its keys from."""


@attrs.frozen
class Declarations:
    """What a reading kernel takes from the application: plugins that register its keys
    as it registers them, and the key its threads are chained with (None: none, or an
    application of plugins only, which holds no key)."""

    plugins: tuple[Plugin, ...]
    chain_key: bytes | None = attrs.field(repr=False)  # a secret: never printed


async def declarations(app: str, found: Any, stores: Stores) -> Declarations:
    """The declarations of the application `found` (what `app` named, `load_application`);
    `stores` goes to a factory."""
    if callable(found) and not isinstance(found, (Plugin, Kernel, Agent, AgentTeam)):
        found = await _made(app, found, stores)
    kernels = _kernels(app, found)
    bindings = _united(app, {owner: k.components.keys for owner, k in kernels.items()})
    built_in = set(Kernel([]).components.keys.by_name)  # every kernel registers these
    by_plugin: dict[str, list[KeyBinding]] = {}
    for binding in bindings:
        if binding.name not in built_in:
            by_plugin.setdefault(binding.plugin or "application", []).append(binding)
    plugins = tuple(_Declared(plugin_id, tuple(keys)) for plugin_id, keys in by_plugin.items())
    # A team gives every role's kernel its one key; a plugin list's kernel was given none.
    keys = {k.chain_key for k in kernels.values()}
    return Declarations(plugins, keys.pop() if len(keys) == 1 else None)


class _Declared(Plugin):
    """One plugin of the application as far as reading goes: its keys, registered as it
    registered them, and nothing else."""

    def __init__(self, plugin_id: str, keys: tuple[KeyBinding, ...]) -> None:
        self.id = plugin_id
        self._keys = keys

    def register(self, registrar: PluginRegistrar) -> None:
        for binding in self._keys:
            registrar.register_key(
                binding.key,
                StateKeyOptions(
                    scope=binding.scope,
                    persistent=binding.persistent,
                    retain_on_uninstall=binding.retain_on_uninstall,
                ),
            )


async def _made(app: str, factory: Any, stores: Stores) -> Any:
    """What the factory returns (awaited), called with the Stores when it requires an
    argument."""
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: called with none
        parameters = []
    required = [
        p
        for p in parameters
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    try:
        made = factory(stores) if required else factory()
        return await made if inspect.isawaitable(made) else made
    except Exception as error:
        given = "the Stores (opened read-only)" if required else "no argument"
        raise NotAnApplication(
            f"{app!r} raised {type(error).__name__} when called with {given}: {error}. A "
            f"reading command calls it only to learn the keys the application declares"
        ) from error


def _kernels(app: str, found: Any) -> dict[str, Kernel]:
    """The application's kernels, by what they belong to."""
    if isinstance(found, Kernel):
        return {"the kernel": found}
    if isinstance(found, Agent):
        return {"the agent": found.kernel}
    if isinstance(found, AgentTeam):
        return {f"role {r!r}": found.agent(r).kernel for r in found.roles}
    plugins = [found] if isinstance(found, Plugin) else found
    if isinstance(plugins, Iterable) and not isinstance(plugins, (str, bytes, Mapping)):
        plugins = list(plugins)
        if all(isinstance(p, Plugin) for p in plugins):
            try:
                return {"the plugins": Kernel(plugins)}
            except (StateError, TypeError, ValueError) as error:
                raise NotAnApplication(
                    f"{app!r}: its plugins cannot make a kernel: {error}"
                ) from error
        strays = [p for p in plugins if not isinstance(p, Plugin)]
        raise NotAnApplication(f"{app!r} holds {strays[0]!r}, which is not a Plugin: give {_KINDS}")
    raise NotAnApplication(
        f"{app!r} is {type(found).__name__} {found!r}: give {_KINDS} (its keys are what "
        f"the command reads the store with)"
    )


def _united(app: str, registries: Mapping[str, Iterable[KeyBinding]]) -> list[KeyBinding]:
    """Every key of the registries once; a key string two of them register differently
    is refused."""
    found: dict[str, tuple[str, KeyBinding]] = {}
    for owner, registry in registries.items():
        for binding in registry:
            earlier = found.get(binding.name)
            if earlier is None:
                found[binding.name] = (owner, binding)
            elif _declaration(earlier[1]) != _declaration(binding):
                raise NotAnApplication(
                    f"{app!r}: {earlier[0]} and {owner} register key {binding.name!r} "
                    f"differently ({_shown(earlier[1])}; {_shown(binding)}), so no one kernel "
                    f"reads both kinds of thread: give --app one role's Agent "
                    f"(team.agent(role)) for the threads of that role"
                )
    return [binding for _, binding in found.values()]


def _declaration(binding: KeyBinding) -> tuple[Any, ...]:
    return (binding.key, binding.scope, binding.persistent, binding.retain_on_uninstall)


def _shown(binding: KeyBinding) -> str:
    return (
        f"{binding.key.__qualname__}, {binding.scope.name.lower()} scope"
        f"{'' if binding.persistent else ', persistent=False'}"
    )
