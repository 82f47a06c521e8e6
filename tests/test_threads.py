"""Thread state across runs and kernels: carry-over, emptiness, CAS, decode failures."""

from __future__ import annotations

import types
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from samples import Keys, commit_all

from statekernel import (
    DecodeFailed,
    Kernel,
    KeyScope,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    RevisionConflict,
    StateCommand,
    StateKey,
    StateKeyOptions,
    ThreadStore,
)
from statekernel.stores import MemoryThreadStore, SqliteThreadStore


class Notes(StateKey[tuple[str, ...], str]):
    key = "t.notes"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: tuple[str, ...], update: str) -> tuple[str, ...]:
        return (*value, update)


class Mood(StateKey[str, str]):
    key = "t.mood"
    scope = KeyScope.THREAD


class Scratch(StateKey[int, int]):
    """A thread key that stays in kernel memory only."""

    key = "t.scratch"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


@pytest.fixture(params=["memory", "sqlite"])
async def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], ThreadStore]]:
    """Opens the same store again: a new handle on one SQLite file, or the one memory store."""
    opened: list[ThreadStore] = []
    shared = MemoryThreadStore()

    def open_store() -> ThreadStore:
        store: ThreadStore = (
            shared if request.param == "memory" else SqliteThreadStore(tmp_path / "threads.db")
        )
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        await store.close()


async def read(kernel: Kernel, thread: str, key: type[StateKey[Any, Any]]) -> Any:
    run = await kernel.start_run(thread)
    value = run.snapshot.get(key), key in run.snapshot, run.revision
    await run.abandon()
    return value


async def test_keys_of_a_plugin_missing_for_one_run_are_carried_over(
    store_factory: Callable[[], ThreadStore],
) -> None:
    both = [Keys(Notes, id="notes"), Keys(Mood, id="mood")]
    await commit_all(
        Kernel(both, thread_store=store_factory()), "t", StateCommand().update(Mood, "calm")
    )
    notes_only = Kernel([Keys(Notes, id="notes")], thread_store=store_factory())
    await commit_all(notes_only, "t", StateCommand().update(Notes, "hello"))
    value, held, revision = await read(Kernel(both, thread_store=store_factory()), "t", Mood)
    assert (value, held, revision) == ("calm", True, 2)


async def test_an_emptied_state_is_saved_as_empty(store_factory: Callable[[], ThreadStore]) -> None:
    plugins = [Keys(Mood, id="mood")]
    await commit_all(
        Kernel(plugins, thread_store=store_factory()), "t", StateCommand().update(Mood, "x")
    )
    await commit_all(Kernel(plugins, thread_store=store_factory()), "t", StateCommand().clear(Mood))
    value, held, revision = await read(Kernel(plugins, thread_store=store_factory()), "t", Mood)
    assert (value, held, revision) == ("", False, 2)


async def test_revision_is_monotonic_per_thread_so_base_revisions_carry_across_runs(
    store_factory: Callable[[], ThreadStore],
) -> None:
    plugins = [Keys(Notes, id="notes")]
    kernel = Kernel(plugins, thread_store=store_factory())
    assert await commit_all(kernel, "t", StateCommand().update(Notes, "a")) == 1
    later = Kernel(plugins, thread_store=store_factory())
    run = await later.start_run("t")
    assert run.revision == 1
    await run.submit(StateCommand(base_revision=1).update(Notes, "b"))
    with pytest.raises(RevisionConflict):
        await run.submit(StateCommand(base_revision=1).update(Notes, "c"))
    await run.finish()
    assert await read(Kernel(plugins, thread_store=store_factory()), "t", Notes) == (
        ("a", "b"),
        True,
        2,
    )


async def test_a_stale_writer_gets_a_revision_conflict(
    store_factory: Callable[[], ThreadStore],
) -> None:
    plugins = [Keys(Mood, id="mood")]
    first = await Kernel(plugins, thread_store=store_factory()).start_run("t")
    second = await Kernel(plugins, thread_store=store_factory()).start_run("t")
    await first.submit(StateCommand().update(Mood, "first"))
    await first.checkpoint()
    await second.submit(StateCommand().update(Mood, "second"))
    with pytest.raises(RevisionConflict):
        await second.checkpoint()
    await first.finish()
    assert (await read(Kernel(plugins, thread_store=store_factory()), "t", Mood))[0] == "first"


@pytest.mark.parametrize("b_commits", [True, False])
async def test_of_two_kernels_that_loaded_one_position_only_the_first_save_lands(
    store_factory: Callable[[], ThreadStore], b_commits: bool
) -> None:
    """A suspends without committing; the stale B then ends its run (with or without a
    commit). B must lose: A's suspended run survives, and no run id is used twice."""
    plugins = [Keys(Mood, id="mood")]
    await commit_all(
        Kernel(plugins, thread_store=store_factory()), "t", StateCommand().update(Mood, "x")
    )
    a = await Kernel(plugins, thread_store=store_factory()).start_run("t")
    b = await Kernel(plugins, thread_store=store_factory()).start_run("t")
    assert a.identity.run_id == b.identity.run_id == "t:run-2"  # both loaded run count 1
    await a.suspend(b"waiting")
    if b_commits:
        await b.submit(StateCommand().update(Mood, "stale"))
    with pytest.raises(RevisionConflict, match="write position"):
        await b.finish()
    later = Kernel(plugins, thread_store=store_factory())
    resumed, detail = await later.resume_run("t")
    assert (resumed.identity.run_id, detail) == ("t:run-2", b"waiting")
    assert resumed.snapshot.get(Mood) == "x"
    await resumed.finish()
    after = await later.start_run("t")
    assert after.identity.run_id == "t:run-3"
    await after.abandon()


async def test_a_second_save_of_a_run_that_only_ended_also_loses(
    store_factory: Callable[[], ThreadStore],
) -> None:
    plugins = [Keys(Mood, id="mood")]
    a = await Kernel(plugins, thread_store=store_factory()).start_run("t")
    b = await Kernel(plugins, thread_store=store_factory()).start_run("t")
    await a.finish()
    with pytest.raises(RevisionConflict):
        await b.finish()


async def test_non_persistent_thread_keys_live_in_kernel_memory_only(
    store_factory: Callable[[], ThreadStore],
) -> None:
    plugins = [
        Keys(Notes, id="notes"),
        Keys(Scratch, id="scratch", options=StateKeyOptions(persistent=False)),
    ]
    kernel = Kernel(plugins, thread_store=store_factory())
    await commit_all(kernel, "t", StateCommand().update(Scratch, 3).update(Notes, "kept"))
    assert (await read(kernel, "t", Scratch))[0] == 3
    fresh = Kernel(plugins, thread_store=store_factory())
    assert (await read(fresh, "t", Scratch))[0] == 0
    assert (await read(fresh, "t", Notes))[0] == ("kept",)


def _thread_counter(index: int) -> type[StateKey[int, int]]:
    def body(namespace: dict[str, Any]) -> None:
        namespace.update(key=f"t.counter{index}", scope=KeyScope.THREAD)

    return types.new_class(f"Counter{index}", (StateKey[int, int],), exec_body=body)


async def test_every_persistent_key_is_saved_whatever_volatile_keys_sit_among_them(
    store_factory: Callable[[], ThreadStore],
) -> None:
    """The stored values come in hash order, so with one volatile key among many the
    volatile one sits before most persistent ones: none of those may be skipped."""
    counters = [_thread_counter(i) for i in range(50)]
    plugins = [
        Keys(*counters, id="counters"),
        Keys(Scratch, id="scratch", options=StateKeyOptions(persistent=False)),
    ]
    command = StateCommand().update(Scratch, 1)
    for index, counter in enumerate(counters):
        command.update(counter, index)
    await commit_all(Kernel(plugins, thread_store=store_factory()), "t", command)
    fresh = Kernel(plugins, thread_store=store_factory())
    run = await fresh.start_run("t")
    assert [run.snapshot.get(c) for c in counters] == list(range(50))
    assert Scratch not in run.snapshot
    await run.abandon()


class MoodAsNumber(StateKey[int, int]):
    """Same key string as Mood, new type: stored strings no longer decode."""

    key = "t.mood"
    scope = KeyScope.THREAD


async def test_a_value_that_no_longer_decodes_names_the_key(
    store_factory: Callable[[], ThreadStore],
) -> None:
    await commit_all(
        Kernel([Keys(Mood, id="mood"), Keys(Notes, id="notes")], thread_store=store_factory()),
        "t",
        StateCommand().update(Mood, "calm").update(Notes, "n"),
    )
    changed = [Keys(MoodAsNumber, id="mood"), Keys(Notes, id="notes")]
    strict = Kernel(changed, thread_store=store_factory())
    with pytest.raises(DecodeFailed) as caught:
        await strict.start_run("t")
    assert caught.value.key == "t.mood" and "t.mood" in str(caught.value)
    with pytest.raises(DecodeFailed):  # the failed restore claimed nothing: it fails again
        await strict.start_run("t")

    lenient = Kernel(changed, thread_store=store_factory(), restore_errors="skip")
    run = await lenient.start_run("t")
    assert run.snapshot.get(Notes) == ("n",) and run.snapshot.get(MoodAsNumber) == 0
    await run.submit(StateCommand().update(Notes, "m"))
    await run.finish()
    # The undecodable bytes were kept: the old declaration still reads them.
    old = Kernel([Keys(Mood, id="mood"), Keys(Notes, id="notes")], thread_store=store_factory())
    assert (await read(old, "t", Mood))[0] == "calm"


async def test_thread_state_survives_into_a_new_process_view(tmp_path: Path) -> None:
    plugins = [Keys(Notes, id="notes")]
    async with SqliteThreadStore(tmp_path / "a.db") as store:
        await commit_all(
            Kernel(plugins, thread_store=store), "t", StateCommand().update(Notes, "x")
        )
    async with SqliteThreadStore(tmp_path / "a.db") as reopened:
        assert (await read(Kernel(plugins, thread_store=reopened), "t", Notes))[0] == ("x",)


def _count_steps(ctx: PhaseContext) -> StateCommand:
    return StateCommand().update(Notes, f"step at {ctx.snapshot.revision}")


async def test_checkpoint_saves_mid_run_state(store_factory: Callable[[], ThreadStore]) -> None:
    class Stepper(Plugin):
        id = "stepper"

        def register(self, r: PluginRegistrar) -> None:
            r.register_key(Notes)
            r.register_phase_hook(Phase.STEP_END, _count_steps)

    run = await Kernel([Stepper()], thread_store=store_factory()).start_run("t")
    await run.run_phase(Phase.STEP_END)
    await run.checkpoint()
    await run.run_phase(Phase.STEP_END)  # not checkpointed: lost with the process
    await run.abandon()
    assert (await read(Kernel([Stepper()], thread_store=store_factory()), "t", Notes))[0] == (
        "step at 0",
    )


# -- a clear made by another kernel --------------------------------------------------------


class Note(StateKey[str, str]):
    key = "promise.note"
    scope = KeyScope.THREAD


async def test_a_key_cleared_by_another_kernel_stays_cleared(tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    async with SqliteThreadStore(path) as store_a, SqliteThreadStore(path) as store_b:
        kernel_a = Kernel([Keys(Note)], thread_store=store_a)
        kernel_b = Kernel([Keys(Note)], thread_store=store_b)

        run = await kernel_a.start_run("t")
        await run.submit(StateCommand().update(Note, "remember me"))
        await run.finish()
        run = await kernel_a.start_run("t")  # loads the note into kernel A's memory
        assert run.snapshot.get(Note) == "remember me"
        await run.abandon()

        run = await kernel_b.start_run("t")
        await run.submit(StateCommand().clear(Note))
        await run.finish()

        run = await kernel_a.start_run("t")
        assert Note not in run.snapshot
        assert run.snapshot.get(Note) == ""
        await run.finish()


# -- run ids -------------------------------------------------------------------------------


async def test_run_ids_do_not_repeat_when_a_run_was_never_saved(tmp_path: Path) -> None:
    async with SqliteThreadStore(tmp_path / "t.db") as store:
        kernel = Kernel([], thread_store=store)
        first = await kernel.start_run("t")
        await first.abandon()
        second = await kernel.start_run("t")
        assert (first.identity.run_id, second.identity.run_id) == ("t:run-1", "t:run-2")
        await second.finish()


class CountingLoads:
    """A ThreadStore proxy that counts loads (and can hide `head`, as a store without it)."""

    def __init__(self, store: ThreadStore, *, with_head: bool = True) -> None:
        self.store = store
        self.loads = 0
        self.with_head = with_head

    async def load(self, thread_id: str) -> Any:
        self.loads += 1
        return await self.store.load(thread_id)

    def __getattr__(self, name: str) -> Any:
        if name == "head" and not self.with_head:
            raise AttributeError(name)
        return getattr(self.store, name)


class NotesPlugin(Plugin):
    id = "notes"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Notes)


async def note(kernel: Kernel, thread: str, text: str) -> tuple[str, ...]:
    run = await kernel.start_run(thread)
    await run.submit(StateCommand().update(Notes, text))
    notes: tuple[str, ...] = run.snapshot.get(Notes)
    await run.finish()
    return notes


async def test_a_kernel_that_saved_a_thread_runs_it_again_without_loading_it(
    store_factory: Callable[[], ThreadStore],
) -> None:
    store = CountingLoads(store_factory())
    kernel = Kernel([NotesPlugin()], thread_store=store)  # type: ignore[arg-type]
    assert await note(kernel, "t", "a") == ("a",)
    loads = store.loads
    for text in "bcd":
        await note(kernel, "t", text)
    assert store.loads == loads  # the head said nobody saved since: no load, no replay
    assert await note(kernel, "t", "e") == ("a", "b", "c", "d", "e")

    # Another kernel saves the thread: the first sees it moved, loads, and has its note.
    other = Kernel([NotesPlugin()], thread_store=store_factory())
    await note(other, "t", "from the other")
    assert await note(kernel, "t", "f") == ("a", "b", "c", "d", "e", "from the other", "f")
    assert store.loads == loads + 1

    # Deleted and made again elsewhere at the same position: the seal tells them apart.
    await store.delete("t")
    await note(other, "t", "anew")
    for _ in range(6):  # the other kernel's saves bring the position back to where it was
        await note(other, "t", "x")
    assert await note(kernel, "t", "g") == ("anew", *"xxxxxx", "g")


async def test_without_head_a_store_is_loaded_for_every_run(
    store_factory: Callable[[], ThreadStore],
) -> None:
    store = CountingLoads(store_factory(), with_head=False)
    kernel = Kernel([NotesPlugin()], thread_store=store)  # type: ignore[arg-type]
    for text in "abc":
        await note(kernel, "t", text)
    assert store.loads == 3
    assert await note(kernel, "t", "d") == ("a", "b", "c", "d")


KEPT = 1024
"""How many threads' values a kernel keeps (docs/durability.md says so)."""


async def test_a_kernel_keeps_the_values_of_its_most_recent_threads_only(
    store_factory: Callable[[], ThreadStore],
) -> None:
    from statekernel.lowlevel import SupportsHead

    store = CountingLoads(store_factory())
    assert isinstance(store.store, SupportsHead)
    kernel = Kernel([NotesPlugin()], thread_store=store)  # type: ignore[arg-type]
    for n in range(KEPT + 2):
        await note(kernel, f"t{n}", "first")
    loads = store.loads
    await note(kernel, f"t{KEPT + 1}", "second")  # recent: kept
    assert store.loads == loads
    assert await note(kernel, "t0", "second") == ("first", "second")  # let go: loaded
    assert store.loads == loads + 1


async def test_a_thread_let_go_while_its_head_is_read_is_loaded(
    store_factory: Callable[[], ThreadStore],
) -> None:
    """A kernel keeps the values of its 1,024 most recent threads. A run whose thread is let
    go (by the saves of others) while its head is being read still runs: the thread is
    loaded (a team's worker with more agents at once than that meets this)."""
    import asyncio

    store = CountingLoads(store_factory())
    reading, go_on = asyncio.Event(), asyncio.Event()
    plain_head = store.store.head  # type: ignore[attr-defined]

    async def head(thread_id: str) -> Any:
        if thread_id == "t0" and not go_on.is_set():
            reading.set()
            await go_on.wait()  # the head read of t0 is slow
        return await plain_head(thread_id)

    store.head = head  # type: ignore[attr-defined]
    kernel = Kernel([NotesPlugin()], thread_store=store)  # type: ignore[arg-type]
    await note(kernel, "t0", "first")
    run_of_t0 = asyncio.create_task(note(kernel, "t0", "second"))
    await reading.wait()
    for n in range(KEPT + 2):  # meanwhile, newer threads push t0's kept values out
        await note(kernel, f"u{n}", "x")
    go_on.set()
    assert await run_of_t0 == ("first", "second")


async def test_a_kernel_lists_the_threads_saved_where_it_keeps_them(
    thread_store_or_none: ThreadStore | None,
) -> None:
    kernel = Kernel([NotesPlugin()], thread_store=thread_store_or_none)
    assert await kernel.threads() == []
    for thread in ("team/b", "team/a", "solo"):
        await note(kernel, thread, "x")
    run = await kernel.start_run("never-saved")
    assert await kernel.threads() == ["solo", "team/a", "team/b"]  # sorted; unsaved left out
    await run.abandon()
    assert await kernel.threads(prefix="team/") == ["team/a", "team/b"]
    assert await kernel.threads(prefix="team/", limit=1) == ["team/a"]
    with pytest.raises(ValueError, match="limit"):
        await kernel.threads(limit=-1)
