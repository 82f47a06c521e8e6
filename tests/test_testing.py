"""kernel.testing: what plugin authors use to test hooks and commutativity claims, and the
throwaway PostgreSQL server store tests run on."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from sample_keys import Counter, Items, Log, Msg, Title

from statekernel import (
    MergeStrategy,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    StateCommand,
    StateKey,
    Vector,
)
from statekernel.testing import (
    assert_commutative,
    assert_deterministic,
    run_hooks,
    run_hooks_sync,
    snapshot_of,
)
from statekernel.testing.postgres import PostgresServer


class Greeter(Plugin):
    id = "greeter"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Counter)
        r.register_key(Title)
        r.register_phase_hook(Phase.STEP_START, self.count)
        r.register_phase_hook(Phase.STEP_START, self.title)
        r.register_phase_hook(Phase.STEP_END, lambda ctx: None)

    def count(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Counter, ctx.snapshot.get(Counter) * 2)

    async def title(self, ctx: PhaseContext) -> StateCommand | None:
        if ctx.snapshot.get(Title):
            return None
        return StateCommand().update(Title, "hello")


async def test_run_hooks_returns_commands_against_given_values() -> None:
    commands = await run_hooks(Greeter(), Phase.STEP_START, values={Counter: 21})
    assert [c.patch.ops for c in commands] == [[(Counter, 42)], [(Title, "hello")]]
    commands = await run_hooks(Greeter(), Phase.STEP_START, values={Title: "set"})
    assert [c.patch.ops for c in commands] == [[(Counter, 0)]]
    assert await run_hooks(Greeter(), Phase.STEP_END) == []


async def test_run_hooks_refuses_a_field_no_phase_has_as_a_run_does() -> None:
    with pytest.raises(TypeError, match=r"unknown phase field\(s\) \['tool'\]; a phase takes"):
        await run_hooks(Greeter(), Phase.STEP_START, tool="search")
    with pytest.raises(TypeError, match="messages must be a tuple"):
        await run_hooks(Greeter(), Phase.STEP_START, messages=[])


def test_run_hooks_sync_and_snapshot_of() -> None:
    snap = snapshot_of(Greeter(), {Counter: 1}, revision=4)
    assert snap.revision == 4 and snap.get(Counter) == 1
    commands = run_hooks_sync(Greeter(), Phase.STEP_START, snapshot=snap)
    assert commands[0].patch.ops == [(Counter, 2)]
    assert snapshot_of([Log], {Log: Vector([Msg("a", "b")])}).get(Log)[0].text == "b"


def test_assert_commutative_accepts_keys_that_commute() -> None:
    assert_commutative(Counter, 0, [1, 2, 3, 4])
    assert_commutative(Items, [7], [1, 1, 1])  # equal updates: every order agrees


def test_assert_commutative_names_two_disagreeing_orders() -> None:
    with pytest.raises(AssertionError) as caught:
        assert_commutative(Log, Vector(), [Msg("a", "1"), Msg("b", "2")])
    text = str(caught.value)
    assert "test.log" in text and "do not commute" in text and "EXCLUSIVE" in text


def test_assert_commutative_samples_when_orders_are_many() -> None:
    class Sub(StateKey[int, int]):
        key = "t.sub"
        merge = MergeStrategy.COMMUTATIVE

        @staticmethod
        def apply(value: int, update: int) -> int:
            return update - value  # order-dependent

    with pytest.raises(AssertionError, match="t.sub"):
        assert_commutative(Sub, 0, list(range(10)), max_orders=50)


class Seen(StateKey[int, int]):
    key = "t.seen"

    @staticmethod
    def apply(value: int, update: int) -> int:
        return update


class Leaky(Plugin):
    """Two async hooks that talk behind the kernel's back: a list both reach. What the
    second writes depends on whether the first got there before it."""

    id = "leaky"

    def __init__(self) -> None:
        self.arrived: list[str] = []

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Seen)
        r.register_phase_hook(Phase.STEP_START, self.first)
        r.register_phase_hook(Phase.STEP_START, self.second)

    async def first(self, ctx: PhaseContext) -> None:
        self.arrived.append("first")

    async def second(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Seen, len(self.arrived))


async def test_assert_deterministic_passes_plugins_that_only_read_their_snapshot() -> None:
    ended = await assert_deterministic(
        [Greeter()], Phase.STEP_START, setup=StateCommand().update(Counter, 3), runs=30
    )
    assert ended.get(Counter) == 9 and ended.get(Title) == "hello"


async def test_assert_deterministic_catches_hooks_that_depend_on_timing() -> None:
    with pytest.raises(AssertionError) as caught:
        await assert_deterministic(lambda: [Leaky()], "step_start", runs=40)
    message = str(caught.value)
    assert message.startswith("phase STEP_START is not deterministic: 't.seen': ")
    assert "Its hooks finished in the order" in message
    with pytest.raises(ValueError, match="runs must be an int >= 2"):
        await assert_deterministic([Greeter()], runs=1)


@pytest.mark.slow
def test_a_throwaway_postgres_whose_owner_is_killed_is_stopped_and_deleted(
    postgres_server: PostgresServer,  # skips (or fails, under .ci/run) without the binaries
) -> None:
    """A test run killed outright (SIGKILL, as a timeout does) runs no `finally`: the
    cluster's watchdog stops it and deletes its folder instead of leaving a server running."""
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\n"
            "from statekernel.testing.postgres import throwaway_postgres\n"
            "with throwaway_postgres() as server:\n"
            "    print(server.folder, flush=True)\n"
            "    time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    folder = Path(owner.stdout.readline().strip())
    assert (folder / "data" / "postmaster.pid").exists()
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 30
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not folder.exists()
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(folder) not in running
