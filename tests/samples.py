"""Sample plugins and run helpers the tests share: plugins of keys or hooks, commit, read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statekernel import (
    Kernel,
    Message,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ProfileKey,
    StateCommand,
    StateKey,
    StateKeyOptions,
)

Options = StateKeyOptions | Mapping[type[StateKey[Any, Any]], StateKeyOptions] | None


class Keys(Plugin):
    """Declares the given keys and nothing else: state keys with `register_key`, profile keys
    with `register_profile_key`. `options` applies to every state key, or, as a mapping, to
    the keys it names (the others get none)."""

    def __init__(self, *keys: type[Any], id: str = "keys", options: Options = None) -> None:
        self.id = id
        self.keys = keys
        self.options = options

    def register(self, r: PluginRegistrar) -> None:
        for key in self.keys:
            if issubclass(key, ProfileKey):
                r.register_profile_key(key)
            elif isinstance(self.options, Mapping):
                r.register_key(key, self.options.get(key))
            else:
                r.register_key(key, self.options)


class Hook(Plugin):
    """One phase hook under the plugin id `id`."""

    def __init__(self, id: str, phase: Phase, hook: Any) -> None:
        self.id = id
        self.phase = phase
        self.hook = hook

    def register(self, r: PluginRegistrar) -> None:
        r.register_phase_hook(self.phase, self.hook)


class Hooks(Plugin):
    """Hooks named by their phase, in any case (`Hooks("id", STEP_START=f, run_end=g)`), in
    the order given; `gate=` registers a tool gate."""

    def __init__(self, id: str = "hooks", /, **by_phase: Any) -> None:
        self.id = id
        self.by_phase = by_phase

    def register(self, r: PluginRegistrar) -> None:
        for name, hook in self.by_phase.items():
            if name == "gate":
                r.register_tool_gate(hook)
            else:
                r.register_phase_hook(Phase[name.upper()], hook)


class Ends(Plugin):
    """Counts RUN_END phases: a run that ended cleanly ran it."""

    id = "ends"

    def __init__(self) -> None:
        self.ended = 0

    def register(self, r: PluginRegistrar) -> None:
        r.register_phase_hook(Phase.RUN_END, self.on_end)

    def on_end(self, ctx: PhaseContext) -> None:
        self.ended += 1


async def commit_all(
    kernel: Kernel, thread: str, *commands: StateCommand, checkpoints: bool = False
) -> int:
    """Commit `commands` in one run and finish it; with `checkpoints`, save after each (a
    snapshot policy is applied at each save, so that is when snapshots are written)."""
    run = await kernel.start_run(thread)
    for command in commands:
        await run.submit(command)
        if checkpoints:
            await run.checkpoint()
    await run.finish()
    return run.revision


async def read(kernel: Kernel, thread: str, key: type[StateKey[Any, Any]]) -> Any:
    """The value of `key` as a new run of `thread` loads it (the run is abandoned)."""
    run = await kernel.start_run(thread)
    try:
        return run.snapshot.get(key)
    finally:
        await run.abandon()


def answered(messages: tuple[Message, ...]) -> bool:
    """Whether every tool call in `messages` has its result before the next message that is
    not a tool result: what model APIs require."""
    open_calls: set[str] = set()
    for message in messages:
        if message.role == "tool":
            open_calls.discard(message.tool_call_id or "")
            continue
        if open_calls:
            return False
        open_calls = {call.id for call in message.tool_calls}
    return not open_calls
