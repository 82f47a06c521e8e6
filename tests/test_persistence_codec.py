"""The persistence path as users meet it: values through a real SQLite thread store.

The validate-before-persist check, what a restore does with bytes it cannot or may not
decode, the store's argument checks and the codec hooks' promises.

The kernels here write a snapshot at every checkpoint (`snapshot_every=1`), so the values a
thread holds can be read back from the store as the bytes of its newest snapshot."""

from __future__ import annotations

import functools
import logging
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pydantic
import pytest
from samples import Keys, commit_all, read

import statekernel
from statekernel import (
    CommitRejected,
    DecodeFailed,
    KeyScope,
    StateCommand,
    StateError,
    StateKey,
    StateKeyOptions,
    StateScope,
    ThreadStore,
    Vector,
    dec_hook,
    enc_hook,
)
from statekernel.lowlevel import ThreadSave
from statekernel.stores import SqliteThreadStore

Kernel = functools.partial(statekernel.Kernel, snapshot_every=1)


class Mood(StateKey[str, str]):
    key = "t.mood"
    scope = KeyScope.THREAD


class Notes(StateKey[tuple[str, ...], str]):
    key = "t.notes"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: tuple[str, ...], update: str) -> tuple[str, ...]:
        return (*value, update)


class Level(StateKey[int, int]):
    key = "t.level"
    scope = KeyScope.THREAD


validated: list[Any] = []


class CappedLevel(StateKey[int, int]):
    """The same key string as Level, with a validate that records what it saw."""

    key = "t.level"
    scope = KeyScope.THREAD

    @staticmethod
    def validate(value: int) -> None:
        validated.append(value)
        if value > 3:
            raise ValueError(f"level {value} is above the cap of 3")


@pytest.fixture(autouse=True)
def _fresh_validate_log() -> None:
    validated.clear()


async def stored_values(store: ThreadStore, thread: str) -> dict[str, bytes]:
    state = await store.load(thread)
    assert state is not None
    return state.values


# -- values through the store -----------------------------------------------------------------


class Attachment(pydantic.BaseModel):
    name: str
    payload: bytes
    source: pydantic.AnyUrl


class Files(StateKey[Vector[Attachment], Attachment]):
    key = "t.files"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[Attachment], update: Attachment) -> Vector[Attachment]:
        return value.append(update)


async def test_pydantic_models_in_a_vector_round_trip_through_sqlite(
    sqlite_thread_store: SqliteThreadStore,
) -> None:
    attachment = Attachment(
        name="a.bin", payload=b"\x00raw bytes", source=pydantic.AnyUrl("https://example.org/a")
    )
    plugins = [Keys(Files, id="files")]
    await commit_all(
        Kernel(plugins, thread_store=sqlite_thread_store),
        "t",
        StateCommand().update(Files, attachment),
    )
    back = await read(Kernel(plugins, thread_store=sqlite_thread_store), "t", Files)
    assert type(back) is Vector and list(back) == [attachment]


class HalfModel:
    """Has a pydantic-style dump but no way back: the kernel could never restore it."""

    def model_dump(self, mode: str = "python") -> dict[str, str]:
        return {"text": "x"}


class Half(StateKey[Any, Any]):
    key = "t.half"
    scope = KeyScope.THREAD
    default = None


async def test_a_value_that_could_not_be_restored_is_refused_at_commit(
    sqlite_thread_store: SqliteThreadStore,
) -> None:
    run = await Kernel([Keys(Half, id="half")], thread_store=sqlite_thread_store).start_run("t")
    with pytest.raises(StateError, match=r"'t\.half'.*cannot be encoded.*persistent=False"):
        await run.submit(StateCommand().update(Half, HalfModel()))
    await run.abandon()
    assert await sqlite_thread_store.load("t") is None


async def test_a_value_that_would_come_back_different_is_refused_at_commit_saying_why(
    sqlite_thread_store: SqliteThreadStore,
) -> None:
    run = await Kernel([Keys(Half, id="half")], thread_store=sqlite_thread_store).start_run("t")
    with pytest.raises(StateError, match=r"'t\.half'.*cannot be encoded for persistence") as e:
        await run.submit(StateCommand().update(Half, (1, 2)))  # typed Any: JSON gives a list
    assert "it would not decode back equal (JSON has no infinity or NaN, and a tuple" in str(
        e.value
    )
    assert "comes back a list); declare the type it holds" in str(e.value)
    await run.abandon()
    assert await sqlite_thread_store.load("t") is None


async def test_a_value_of_an_inexact_type_that_comes_back_equal_is_snapshotted(
    sqlite_thread_store: SqliteThreadStore,
) -> None:
    kernel = Kernel([Keys(Half, id="half")], thread_store=sqlite_thread_store, snapshot_every=1)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Half, {"a": [1, 2.5], "b": None}))
    await run.finish()  # a snapshot: the value is checked to decode back equal, and does
    snapshot = await sqlite_thread_store.snapshot_at("t", 1)
    assert snapshot is not None and "t.half" in snapshot.values
    fresh = Kernel([Keys(Half, id="half")], thread_store=sqlite_thread_store)
    assert (await fresh.get_state("t")).get(Half) == {"a": [1, 2.5], "b": None}


async def test_non_persistent_keys_never_reach_the_store(
    sqlite_thread_store: SqliteThreadStore,
) -> None:
    class Draft(StateKey[str, str]):
        key = "r.draft"

    volatile = StateKeyOptions(persistent=False)
    plugins = [Keys(Mood, id="kept"), Keys(Level, id="volatile", options=volatile)]
    kernel = Kernel(plugins, thread_store=sqlite_thread_store)
    await commit_all(kernel, "t", StateCommand().update(Mood, "calm").update(Level, 2))
    saved_values = await stored_values(sqlite_thread_store, "t")
    assert "t.mood" in saved_values and "t.level" not in saved_values

    class RunLevel(StateKey[int, int]):
        key = "r.level"

    suspending = Kernel(
        [Keys(Draft, id="kept"), Keys(RunLevel, id="volatile", options=volatile)],
        thread_store=sqlite_thread_store,
    )
    run = await suspending.start_run("t")
    await run.submit(StateCommand().update(Draft, "half done").update(RunLevel, 7))
    await run.suspend()
    saved = await sqlite_thread_store.load("t")
    assert saved is not None and saved.run_values is not None
    assert "r.draft" in saved.run_values and "r.level" not in saved.run_values
    resumed, _ = await suspending.resume_run("t")
    assert (resumed.snapshot.get(Draft), resumed.snapshot.get(RunLevel)) == ("half done", 7)
    await resumed.abandon()


# -- validate before persisting ---------------------------------------------------------------


async def test_an_unchanged_value_is_validated_once_not_at_every_checkpoint(
    sqlite_thread_store: SqliteThreadStore,
) -> None:
    run = await Kernel(
        [Keys(CappedLevel, Mood, id="levels")], thread_store=sqlite_thread_store
    ).start_run("t")
    await run.submit(StateCommand().update(CappedLevel, 2))
    before = len(validated)
    await run.checkpoint()
    assert validated[before:] == [2]  # the persist check saw the value itself
    await run.checkpoint()
    # another key changes: the next checkpoint writes a snapshot holding the level unchanged
    await run.submit(StateCommand().update(Mood, "calm"))
    await run.checkpoint()
    await run.finish()
    assert len(validated) == before + 1
    assert (await stored_values(sqlite_thread_store, "t")).keys() >= {"t.level", "t.mood"}


async def test_a_value_changed_after_a_checkpoint_is_saved_by_the_next(
    sqlite_thread_store: SqliteThreadStore,
) -> None:
    plugins = [Keys(CappedLevel, id="levels")]
    run = await Kernel(plugins, thread_store=sqlite_thread_store).start_run("t")
    await run.submit(StateCommand().update(CappedLevel, 1))
    await run.checkpoint()
    await run.submit(StateCommand().update(CappedLevel, 3))
    before = len(validated)
    await run.checkpoint()
    await run.abandon()
    assert validated[before:] == [3]
    assert await read(Kernel(plugins, thread_store=sqlite_thread_store), "t", CappedLevel) == 3


async def test_a_stored_value_the_new_validate_refuses_is_not_persisted_again(
    sqlite_thread_store: SqliteThreadStore,
) -> None:
    await commit_all(
        Kernel([Keys(Level, id="levels")], thread_store=sqlite_thread_store),
        "t",
        StateCommand().update(Level, 5),
    )
    before = await sqlite_thread_store.load("t")
    stricter = Kernel(
        [Keys(CappedLevel, id="levels"), Keys(Mood, id="mood")], thread_store=sqlite_thread_store
    )
    run = await stricter.start_run("t")
    await run.submit(StateCommand().update(Mood, "calm"))  # commits: Level is not touched
    with pytest.raises(CommitRejected) as caught:
        await run.checkpoint()
    error = caught.value
    assert (error.key, error.plugin, error.stage) == ("t.level", "levels", "persist")
    assert isinstance(error.cause, ValueError) and str(error.cause) in str(error)
    assert "'t.level'" in str(error) and "'levels'" in str(error) and "persist" in str(error)
    assert await sqlite_thread_store.load("t") == before  # nothing was saved
    await run.submit(StateCommand().update(CappedLevel, 3))  # the run stays open: fix it
    await run.finish()
    assert (
        await read(Kernel([Keys(Level, id="levels")], thread_store=sqlite_thread_store), "t", Level)
        == 3
    )


# -- what a restore does with bytes it cannot or may not decode -------------------------------


async def test_keys_no_plugin_registered_are_carried_over_byte_for_byte(
    sqlite_thread_store: SqliteThreadStore,
) -> None:
    both = Kernel(
        [Keys(Mood, id="mood"), Keys(Notes, id="notes")], thread_store=sqlite_thread_store
    )
    await commit_all(both, "t", StateCommand().update(Mood, "calm"))
    await commit_all(both, "t", StateCommand().update(Notes, "first"))
    mood_bytes = (await stored_values(sqlite_thread_store, "t"))["t.mood"]
    notes_only = Kernel([Keys(Notes, id="notes")], thread_store=sqlite_thread_store)
    run = await notes_only.start_run("t")
    assert run.snapshot.get(Notes) == ("first",)  # the unknown key hides nothing
    await run.submit(StateCommand().update(Notes, "second"))
    await run.finish()
    assert (await stored_values(sqlite_thread_store, "t"))["t.mood"] == mood_bytes
    assert await read(both, "t", Mood) == "calm"


async def test_a_key_that_moved_to_run_scope_starts_fresh_and_keeps_its_thread_bytes(
    sqlite_thread_store: SqliteThreadStore,
) -> None:
    await commit_all(
        Kernel([Keys(Mood, id="mood")], thread_store=sqlite_thread_store),
        "t",
        StateCommand().update(Mood, "calm"),
    )
    per_run = Kernel(
        [Keys(Mood, id="mood", options=StateKeyOptions(scope=KeyScope.RUN))],
        thread_store=sqlite_thread_store,
    )
    run = await per_run.start_run("t")
    assert Mood not in run.snapshot  # a run key always starts at its default
    await run.submit(StateCommand().update(Mood, "this run only"))
    await run.finish()
    assert (
        await read(Kernel([Keys(Mood, id="mood")], thread_store=sqlite_thread_store), "t", Mood)
        == "calm"
    )


class MoodAsNumber(StateKey[int, int]):
    """Same key string as Mood, new type: the stored string no longer decodes."""

    key = "t.mood"
    scope = KeyScope.THREAD


async def _stored_mood(store: SqliteThreadStore) -> bytes:
    await commit_all(
        Kernel([Keys(Mood, id="mood"), Keys(Notes, id="notes")], thread_store=store),
        "thread-7",
        StateCommand().update(Mood, "calm").update(Notes, "n"),
    )
    return (await stored_values(store, "thread-7"))["t.mood"]


async def test_a_value_that_no_longer_decodes_names_key_thread_and_reason(
    sqlite_thread_store: SqliteThreadStore,
) -> None:
    data = await _stored_mood(sqlite_thread_store)
    with pytest.raises(msgspec.ValidationError) as reason:
        msgspec.json.decode(data, type=int)
    strict = Kernel([Keys(MoodAsNumber, id="mood")], thread_store=sqlite_thread_store)
    with pytest.raises(DecodeFailed) as caught:
        await strict.start_run("thread-7")
    error = caught.value
    assert (error.key, error.record) == ("t.mood", "thread-7")
    assert isinstance(error.cause, msgspec.ValidationError)
    assert str(reason.value) in str(error)
    assert "'t.mood'" in str(error) and "'thread-7'" in str(error)


async def test_skipped_values_start_from_the_default_with_a_warning_and_keep_their_bytes(
    sqlite_thread_store: SqliteThreadStore, caplog: pytest.LogCaptureFixture
) -> None:
    data = await _stored_mood(sqlite_thread_store)
    with pytest.raises(msgspec.ValidationError) as reason:
        msgspec.json.decode(data, type=int)
    changed = [Keys(MoodAsNumber, id="mood"), Keys(Notes, id="notes")]
    lenient = Kernel(changed, thread_store=sqlite_thread_store, restore_errors="skip")
    with caplog.at_level(logging.WARNING, logger="statekernel"):
        run = await lenient.start_run("thread-7")
    warnings = [r for r in caplog.records if r.name == "statekernel"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    message = warnings[0].getMessage()
    assert "thread-7" in message and "t.mood" in message and str(reason.value) in message
    assert (run.snapshot.get(MoodAsNumber), run.snapshot.get(Notes)) == (0, ("n",))
    await run.submit(StateCommand().update(Notes, "m"))
    await run.finish()
    # written back untouched
    assert (await stored_values(sqlite_thread_store, "thread-7"))["t.mood"] == data

    run = await lenient.start_run("thread-7")
    await run.submit(StateCommand().update(MoodAsNumber, 4))  # written anew: replaces them
    await run.finish()
    assert (
        await read(Kernel(changed, thread_store=sqlite_thread_store), "thread-7", MoodAsNumber) == 4
    )


class LiveSession:
    """A type the codec cannot decode at all."""


class MoodAsSession(StateKey[LiveSession, LiveSession]):
    key = "t.mood"
    scope = KeyScope.THREAD
    default_factory = LiveSession


async def test_a_key_redeclared_with_a_type_the_codec_cannot_carry_is_refused_at_once(
    sqlite_thread_store: SqliteThreadStore,
) -> None:
    data = await _stored_mood(sqlite_thread_store)
    with pytest.raises(statekernel.InvalidDeclaration) as caught:
        Kernel([Keys(MoodAsSession, id="mood")], thread_store=sqlite_thread_store)
    message = str(caught.value)
    assert "'t.mood'" in message and "LiveSession" in message and "persistent=False" in message
    # In memory only, it is allowed; the stored bytes are left alone.
    volatile = StateKeyOptions(persistent=False)
    run = await Kernel(
        [Keys(MoodAsSession, id="mood", options=volatile)], thread_store=sqlite_thread_store
    ).start_run("thread-7")
    assert type(run.snapshot.get(MoodAsSession)) is LiveSession
    await run.finish()
    assert (await stored_values(sqlite_thread_store, "thread-7"))["t.mood"] == data


# -- the store's own checks -------------------------------------------------------------------


async def test_bad_save_arguments_say_what_was_given(thread_store: ThreadStore) -> None:
    state = ThreadSave(revision=0)
    with pytest.raises(TypeError, match=r"thread_id must be a string, got int"):
        await thread_store.save(7, state, expected_position=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"ThreadSave, got dict"):
        await thread_store.save("t", {"revision": 1}, expected_position=0)  # type: ignore[arg-type]
    for bad in (True, "0", 1.0, None, -1):
        with pytest.raises(ValueError, match=rf"expected_position.*got {bad!r}$"):
            await thread_store.save("t", state, expected_position=bad)  # type: ignore[arg-type]
    assert await thread_store.load("t") is None


async def test_a_document_that_no_longer_decodes_is_blamed_on_the_thread_state(
    tmp_path: Path,
) -> None:
    path = tmp_path / "corrupt.db"
    async with SqliteThreadStore(path) as made:
        await made.save("bad", ThreadSave(revision=0), expected_position=0)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE thread_states SET state = x'c1' WHERE thread_id = 'bad'")
    async with SqliteThreadStore(path) as made:
        with pytest.raises(DecodeFailed) as caught:
            await made.load("bad")
    error = caught.value
    assert (error.key, error.record) == ("thread state", "bad")
    assert isinstance(error.cause, msgspec.MsgspecError) and str(error.cause) in str(error)


# -- the codec hooks --------------------------------------------------------------------------


def test_converting_a_vector_checks_and_converts_its_items_like_a_list() -> None:
    as_floats = msgspec.convert(Vector([1, 2]), Vector[float], dec_hook=dec_hook)
    assert type(as_floats) is Vector and as_floats == msgspec.convert([1, 2], list[float])
    assert [type(x) for x in as_floats] == [float, float]
    with pytest.raises(msgspec.ValidationError) as as_list:
        msgspec.convert([1, "two"], list[int])
    with pytest.raises(msgspec.ValidationError) as as_vector:
        msgspec.convert(Vector([1, "two"]), Vector[int], dec_hook=dec_hook)
    assert str(as_vector.value) == str(as_list.value)
    untyped = msgspec.convert(Vector([1, "two"]), Vector, dec_hook=dec_hook)
    assert type(untyped) is Vector and untyped == [1, "two"]


def test_the_decode_hook_names_a_type_it_cannot_make() -> None:
    """msgspec's protocol: a hook says NotImplementedError for a type it does not handle."""

    class Opaque:
        pass

    with pytest.raises(NotImplementedError, match=r"Opaque'> is not supported"):
        msgspec.json.decode(b"1", type=Opaque, dec_hook=dec_hook)


class SharedWith(StateKey[str, str]):
    key = "codec.shared_with"
    scope = KeyScope.THREAD


async def test_a_scope_held_in_a_str_thread_key_is_saved_as_its_string(tmp_path: Path) -> None:
    assert msgspec.json.encode(StateScope.parent_thread("p1"), enc_hook=enc_hook) == (
        b'"parent_thread::p1"'
    )
    path = tmp_path / "scope.db"
    async with SqliteThreadStore(path) as store:
        run = await Kernel([Keys(SharedWith, id="keys")], thread_store=store).start_run("t")
        await run.submit(StateCommand().update(SharedWith, StateScope.global_()))
        await run.finish()
    async with SqliteThreadStore(path) as store:
        run = await Kernel([Keys(SharedWith, id="keys")], thread_store=store).start_run("t")
        restored = run.snapshot.get(SharedWith)
        assert restored == "global" and type(restored) is str
        await run.abandon()
