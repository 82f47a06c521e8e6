"""How the journal encodes a commit: updates it cannot encode, and key types it refuses."""

from __future__ import annotations

import dataclasses
import enum
import math
import types
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import msgspec
import pytest
from journal_samples import Jot, Log, Mood, Score, Total, plugins
from sample_keys import Handle, LiveHandle
from samples import Hook, Keys, commit_all, read

from statekernel import (
    CommitRecord,
    InvalidDeclaration,
    Kernel,
    KeyScope,
    Phase,
    Plugin,
    PluginRegistrar,
    StateCommand,
    StateError,
    StateKey,
    StateKeyOptions,
    StateValidationError,
    ThreadStore,
    Vector,
)
from statekernel.stores import MemoryThreadStore, SqliteThreadStore

# -- a record's bytes ----------------------------------------------------------------------


async def test_a_record_survives_its_encoding_exactly(tmp_path: Path) -> None:
    async with SqliteThreadStore(tmp_path / "j.db") as store:
        kernel = Kernel(plugins(), thread_store=store)
        await commit_all(kernel, "t", StateCommand().update(Log, ("a", "b")).update(Mood, "x"))
        (record,) = await Kernel(plugins(), thread_store=store).history("t")
    assert isinstance(record, CommitRecord)
    assert msgspec.json.decode(record.ops[0].update or b"") == ["a", "b"]
    assert record == msgspec.msgpack.decode(msgspec.msgpack.encode(record), type=CommitRecord)


# -- updates that cannot be encoded --------------------------------------------------------


class Doubler(Plugin):
    id = "doubler"

    def register(self, r: PluginRegistrar) -> None:
        r.register_key(Score)
        r.register_phase_hook(
            Phase.STEP_START, lambda ctx: StateCommand().update(Score, lambda v: v * 2)
        )


def add_ten() -> Hook:
    return Hook("add ten", Phase.STEP_START, lambda ctx: StateCommand().update(Score, 10))


@pytest.mark.parametrize("with_store", [False, True])
async def test_a_key_written_twice_in_a_commit_by_an_unencodable_update_replays_right(
    with_store: bool, tmp_path: Path
) -> None:
    store = SqliteThreadStore(tmp_path / "e.db") if with_store else None
    kernel = Kernel([Doubler(), add_ten()], thread_store=store)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Score, 1))
    await run.run_phase(Phase.STEP_START)  # one commit: 1 * 2, then + 10
    assert run.snapshot.get(Score) == 12
    await run.finish()
    (_, doubled) = await kernel.history("t")
    # one op for both: the value they made, which replay sets as it is
    assert [(op.kind, op.update) for op in doubled.ops] == [("value", b"12")]
    if store is not None:
        assert await read(Kernel([Doubler(), add_ten()], thread_store=store), "t", Score) == 12
    assert (await kernel.state_at("t", 2)).get(Score) == 12
    assert (await kernel.verify("t")).ok
    if store is not None:
        await store.close()


class Blob(StateKey[Any, Any]):
    key = "e.blob"
    scope = KeyScope.THREAD
    default = None


async def test_an_unencodable_value_of_a_stored_key_is_refused_at_commit_and_the_run_goes_on(
    thread_store: ThreadStore,
) -> None:
    """Neither the update nor the value can be journaled: the journal could never rebuild
    the key, so the commit is refused before anything of it is published."""
    kernel = Kernel([Keys(Blob)], thread_store=thread_store)
    run = await kernel.start_run("t")
    with pytest.raises(StateValidationError) as refused:
        await run.submit(StateCommand().update(Blob, object()))
    assert refused.value.key == "e.blob"
    assert refused.value.expected == "a value a thread store keeps exactly"
    assert str(refused.value).startswith(
        "value for 'e.blob' must be a value a thread store keeps exactly, got object"
    )
    assert "nothing was committed" in str(refused.value)
    assert "cannot be encoded for persistence" in str(refused.value)
    assert "persistent=False" in str(refused.value)
    assert (run.revision, run.snapshot.get(Blob)) == (0, None)
    await run.submit(StateCommand().update(Blob, "fine now"))
    await run.finish()
    assert await read(Kernel([Keys(Blob)], thread_store=thread_store), "t", Blob) == "fine now"
    (first,) = await kernel.history("t")
    assert (first.ops[0].kind, first.ops[0].update) == ("update", b'"fine now"')
    assert (await kernel.verify("t")).ok


async def test_an_unencodable_value_without_a_store_is_held_and_travels_back() -> None:
    """Without a store nothing is encoded to be kept: the kernel's memory holds the value
    itself, and time travel and verify see it."""
    kernel = Kernel([Keys(Blob)], snapshot_every=100)
    thing = 1 + 2j  # no JSON for it
    await commit_all(
        kernel, "t", StateCommand().update(Blob, thing), StateCommand().update(Blob, "later")
    )
    first, _ = await kernel.history("t")
    assert (first.ops[0].kind, first.ops[0].update) == ("value", None)
    assert (await kernel.state_at("t", 1)).get(Blob) == thing
    assert (await kernel.state_at("t", 2)).get(Blob) == "later"
    assert (await kernel.verify("t")).ok
    await kernel.fork("t", 1, "copy")
    assert (await kernel.state_at("copy", 1)).get(Blob) == thing


async def test_with_a_record_listener_an_unencodable_value_of_a_stored_key_is_still_refused(
    thread_store: ThreadStore,
) -> None:
    """A listener has the run write every op, yet the thread is still the store's: a value
    it could never keep is refused at its commit, as without one."""
    kernel = Kernel([Keys(Blob)], thread_store=thread_store)
    run = await kernel.start_run("t")
    heard: list[CommitRecord] = []
    run.add_record_listener(heard.append)
    with pytest.raises(StateValidationError, match="a value a thread store keeps exactly"):
        await run.submit(StateCommand().update(Blob, object()))
    assert (run.revision, heard) == (0, [])
    await run.submit(StateCommand().update(Blob, "fine now"))
    await run.finish()
    assert [[(op.kind, op.update) for op in r.ops] for r in heard] == [[("update", b'"fine now"')]]
    assert await read(Kernel([Keys(Blob)], thread_store=thread_store), "t", Blob) == "fine now"


def memory_only_blob() -> Keys:
    return Keys(Blob, Total, options={Blob: StateKeyOptions(persistent=False)})


async def test_a_memory_only_value_no_codec_encodes_is_held_and_costs_the_store_nothing(
    thread_store: ThreadStore,
) -> None:
    """A `persistent=False` key given a value that neither its update nor the value can
    journal: the kernel's memory holds the value, a record listener and this kernel's history
    see its op (without bytes), and the store keeps the other keys' ops and needs no
    snapshot for it."""
    kernel = Kernel([memory_only_blob()], thread_store=thread_store)
    run = await kernel.start_run("t")
    heard: list[CommitRecord] = []
    run.add_record_listener(heard.append)
    await run.submit(StateCommand().update(Blob, 1j).update(Total, 1))
    await run.submit(StateCommand().update(Total, 1))
    await run.finish()

    def ops(records: list[CommitRecord]) -> list[list[tuple[str, str, bytes | None]]]:
        return [[(op.key, op.kind, op.update) for op in r.ops] for r in records]

    whole = [
        [("e.blob", "value", None), ("e.total", "update", b"1")],
        [("e.total", "update", b"1")],
    ]
    assert ops(heard) == whole
    assert ops(await kernel.history("t")) == whole
    loaded = await thread_store.load("t")
    assert loaded is not None and loaded.values == {}  # no snapshot was needed
    other = Kernel([memory_only_blob()], thread_store=thread_store)
    assert ops(await other.history("t")) == [[("e.total", "update", b"1")]] * 2
    run = await kernel.start_run("t")
    assert (run.snapshot.get(Blob), run.snapshot.get(Total)) == (1j, 2)  # held in memory
    await run.abandon()


class Floats(StateKey[Vector[float], Vector[float]]):
    """Floats are inexact (JSON has no infinity): each update is checked before it is kept."""

    key = "e.floats"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: Vector[float], update: Vector[float]) -> Vector[float]:
        return value.extend(update)


async def test_an_update_of_an_inexact_type_that_decodes_back_is_journaled_as_itself(
    thread_store: ThreadStore,
) -> None:
    kernel = Kernel([Keys(Score, Floats)], thread_store=thread_store)
    await commit_all(
        kernel,
        "t",
        StateCommand().update(Score, 3).update(Floats, Vector([1.5, 2.0])),
        checkpoints=True,
    )
    loaded = await thread_store.load("t")
    assert loaded is not None and loaded.values == {}  # no snapshot was needed
    (record,) = await Kernel([Keys(Score, Floats)], thread_store=thread_store).history("t")
    assert [(op.key, op.kind, op.update) for op in record.ops] == [
        ("e.score", "update", b"3"),
        ("e.floats", "update", b"[1.5,2.0]"),
    ]


async def test_a_vector_of_floats_holding_infinity_is_refused_not_stored_inexactly(
    thread_store: ThreadStore,
) -> None:
    """JSON has no infinity: a Vector's float items make its key inexact, so each update is
    checked, and one that would come back different commits nothing."""
    kernel = Kernel([Keys(Score, Floats)], thread_store=thread_store)
    run = await kernel.start_run("t")
    with pytest.raises(
        StateValidationError, match=r"'e\.floats' must be a value a thread store"
    ) as e:
        await run.submit(StateCommand().update(Floats, Vector([1.5, math.inf])))
    assert ".." not in str(e.value)  # the detail's own full stop is not doubled
    assert list(run.snapshot.get(Floats)) == []
    await run.submit(StateCommand().update(Floats, Vector([1.5])))
    await run.finish()
    reloaded = await Kernel([Keys(Score, Floats)], thread_store=thread_store).get_state("t")
    assert list(reloaded.get(Floats)) == [1.5]


def thread_key(
    update_type: Any, *, value_type: Any = Any, key: str = "e.typed", default: Any = None
) -> type[StateKey[Any, Any]]:
    """A persistent thread key whose updates replace its value (the base `apply`)."""
    namespace = {"key": key, "scope": KeyScope.THREAD, "default": default}
    made = types.new_class(
        "Typed", (StateKey[value_type, update_type],), {}, lambda ns: ns.update(namespace)
    )
    return cast("type[StateKey[Any, Any]]", made)


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


async def test_a_number_must_come_back_a_number_of_either_kind_and_nothing_else(
    tmp_path: Path,
) -> None:
    """An inexact type's update is kept only if it decodes back equal and of the same kind:
    an int may come back a float, but an IntEnum that comes back a plain int would change
    what later reads see."""

    Anything = thread_key(Any, key="e.anything")
    Ratio = thread_key(float, value_type=float, key="e.ratio", default=0.0)

    async with SqliteThreadStore(tmp_path / "t.db") as store:
        kernel = Kernel([Keys(Anything, Ratio)], thread_store=store)
        run = await kernel.start_run("t")
        with pytest.raises(StateValidationError, match=r"'e\.anything'"):
            await run.submit(StateCommand().update(Anything, Level.HIGH))
        await run.submit(StateCommand().update(Ratio, 3))  # an int comes back 3.0: equal
        await run.finish()
        reloaded = await Kernel([Keys(Anything, Ratio)], thread_store=store).get_state("t")
    assert reloaded.get(Ratio) == 3 and reloaded.get(Anything) is None


async def test_a_value_msgspec_cannot_decode_is_refused_at_the_save_not_stored(
    tmp_path: Path,
) -> None:
    class Unknown:
        pass

    # its updates journal, but msgspec cannot decode a value of its value type
    Mixed = thread_key(float, value_type=float | Unknown, key="e.mixed")

    async with SqliteThreadStore(tmp_path / "t.db") as store:
        kernel = Kernel([Keys(Mixed)], thread_store=store, snapshot_every=1)
        refused = r"value of key 'e\.mixed' cannot be encoded for persistence: Type unions"
        with pytest.raises(StateError, match=refused):
            await commit_all(kernel, "t", StateCommand().update(Mixed, 1.0), checkpoints=True)


async def test_the_other_ops_of_a_commit_with_an_unencodable_update_replay_and_load(
    thread_store: ThreadStore,
) -> None:
    kernel = Kernel([Keys(Score, Total)], thread_store=thread_store)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Score, 10))
    await run.submit(StateCommand().update(Score, lambda v: v * 2).update(Total, 1))
    await run.submit(StateCommand().update(Score, 1).update(Total, 1))
    await run.submit(StateCommand().update(Total, 1))
    await run.finish()  # one save: the snapshot at 4 covers the unencodable update
    _, doubled, _, _ = await kernel.history("t")
    assert [(op.key, op.kind, op.update) for op in doubled.ops] == [
        ("e.score", "value", b"20"),  # the value the function made
        ("e.total", "update", b"1"),
    ]
    assert (await thread_store.load("t")).values == {}  # type: ignore[union-attr]  # no snapshot
    await kernel.fork("t", 3, "copy")  # no snapshot at or before 3: records 1 to 3 only
    assert (await kernel.state_at("copy", 3)).to_dict() == {"e.score": 21, "e.total": 2}
    run = await kernel.start_run("copy")
    assert run.snapshot.to_dict() == {"e.score": 21, "e.total": 2}
    await run.abandon()


@pytest.mark.parametrize("with_store", [False, True])
async def test_a_non_persistent_key_with_an_unencodable_update_is_journaled_in_memory(
    with_store: bool,
) -> None:
    store = MemoryThreadStore() if with_store else None
    kernel = Kernel(
        [
            Keys(Jot, Total, options={Jot: StateKeyOptions(persistent=False)}),
            Hook(
                "adds",
                Phase.STEP_START,
                lambda ctx: StateCommand().update(Jot, 10).update(Total, 1),
            ),
            Hook(
                "doubles", Phase.STEP_START, lambda ctx: StateCommand().update(Jot, lambda v: v * 2)
            ),
        ],
        thread_store=store,
        snapshot_every=100,
    )
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Jot, 3))
    await run.run_phase(Phase.STEP_START)  # one commit: + 10, then * 2, with Total + 1
    assert run.snapshot.get(Jot) == 26
    await run.finish()
    records = await kernel.history("t")
    assert [[(op.key, op.kind, op.update) for op in r.ops] for r in records] == [
        [("e.jot", "update", b"3")],
        [("e.total", "update", b"1"), ("e.jot", "value", b"26")],  # one op for both
    ]
    if store is not None:
        loaded = await store.load("t")
        assert loaded is not None and loaded.values == {}  # the store needs no snapshot for it
        return
    # Without a store the kernel's memory is all there is: a snapshot keeps the value.
    assert (await kernel.state_at("t", 2)).to_dict() == {"e.jot": 26, "e.total": 1}
    assert (await kernel.verify("t")).ok


class Tokens(int):
    """A user's own int subclass: an int to the type check, but not to the codec."""


class Tally(StateKey[int, int]):
    key = "e.tally"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + int(update)


async def test_an_update_of_an_int_subclass_that_cannot_be_encoded_is_still_kept(
    thread_store: ThreadStore,
) -> None:
    """An update of a key declared to take ints that cannot be encoded all the same is
    journaled as a "value" op holding the value it made, which replay sets."""
    kernel = Kernel([Keys(Tally, Total)], thread_store=thread_store, snapshot_every=1_000)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Tally, 1))
    await run.submit(StateCommand().update(Tally, Tokens(2)).update(Total, 1))
    await run.submit(StateCommand().update(Tally, 4))
    assert run.snapshot.get(Tally) == 7
    await run.finish()
    _, second, _ = await kernel.history("t")
    assert [(op.key, op.kind, op.update) for op in second.ops] == [
        ("e.tally", "value", b"3"),
        ("e.total", "update", b"1"),
    ]
    assert await read(Kernel([Keys(Tally, Total)], thread_store=thread_store), "t", Tally) == 7
    assert (await Kernel([Keys(Tally, Total)], thread_store=thread_store).verify("t")).ok


class Peak(StateKey[float, float]):
    key = "e.peak"
    scope = KeyScope.THREAD
    default = 0.0

    @staticmethod
    def apply(value: float, update: float) -> float:
        return max(value, update)


class Pair(StateKey[tuple[int, int], Any]):
    key = "e.pair"
    scope = KeyScope.THREAD
    default = (0, 0)

    @staticmethod
    def apply(value: tuple[int, int], update: Any) -> tuple[int, int]:
        assert type(update) is tuple, update  # a list would be a different update
        return (int(update[0]), int(update[1]))


async def test_updates_that_would_not_decode_back_equal_are_journaled_as_their_values(
    thread_store: ThreadStore,
) -> None:
    kernel = Kernel([Keys(Peak, Pair)], thread_store=thread_store)
    await commit_all(
        kernel,
        "t",
        StateCommand().update(Peak, float("-inf")),
        StateCommand().update(Peak, 2.5).update(Pair, (1, 2)),
        checkpoints=True,
    )
    fresh = Kernel([Keys(Peak, Pair)], thread_store=thread_store)
    assert await read(fresh, "t", Peak) == 2.5
    assert await read(fresh, "t", Pair) == (1, 2)
    assert (await fresh.verify("t")).ok


async def test_encoding_failures_are_state_errors_naming_the_key() -> None:
    from statekernel.stores import MemoryThreadStore

    plug = Keys(LiveHandle, id="plug", options=StateKeyOptions(scope=KeyScope.THREAD))
    run = await Kernel([plug], thread_store=MemoryThreadStore()).start_run("t")
    with pytest.raises(StateError, match="t.handle.*persistent=False"):
        await run.submit(StateCommand().update(LiveHandle, Handle()))


# -- what registration refuses -------------------------------------------------------------


def test_a_persistent_thread_key_whose_updates_cannot_be_journaled_is_refused() -> None:
    class Handle:
        pass

    class Live(StateKey[Any, Handle]):
        key = "j.live"
        scope = KeyScope.THREAD
        default = None

    with pytest.raises(InvalidDeclaration, match=r"'j\.live'.*Handle.*persistent=False"):
        Kernel([Keys(Live, id="live")])
    Kernel(
        [Keys(Live, id="volatile", options=StateKeyOptions(persistent=False))]
    )  # in memory only it is fine

    class RunLive(StateKey[Any, Handle]):
        key = "j.run_live"
        default = None

    Kernel([Keys(RunLive, id="run live")])  # run keys are not journaled in a store


class Opaque:
    pass


def test_registration_looks_inside_vectors_and_at_dict_keys() -> None:
    class Items(StateKey[Vector[Any], Vector[Opaque]]):
        key = "e.items"
        scope = KeyScope.THREAD

    class Pairs(StateKey[Any, dict[tuple[int, int], int]]):
        key = "e.pairs"
        scope = KeyScope.THREAD
        default = None

    with pytest.raises(InvalidDeclaration, match=r"'e\.items'.*items of a Vector.*Opaque"):
        Kernel([Keys(Items)])
    pairs = (
        r"'e\.pairs'.*: a dict whose keys are neither strings nor numbers \(JSON object keys are\)"
    )
    with pytest.raises(InvalidDeclaration, match=pairs):
        Kernel([Keys(Pairs)])


class Point(msgspec.Struct):
    x: int


class Holder(msgspec.Struct):
    handle: Opaque


class DumpsOnly:
    """Looks half like a pydantic model: `model_dump`, but no `model_validate`."""

    def model_dump(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize(
    ("update_type", "part"),
    [
        (list[Opaque], "Opaque"),
        (dict[str, Opaque], "Opaque"),
        (dict[Annotated[Opaque, msgspec.Meta(title="id")], int], "Opaque"),
        (Opaque | None, "Opaque"),
        (Holder, "Opaque"),  # a struct's field
        (tuple[Opaque, Point, Point], "Opaque"),  # behind a part the type names twice
        (Annotated[Opaque, msgspec.Meta(description="a handle")], "Opaque"),
        (tuple[Vector[Opaque], int, int], "Opaque"),
        (dict[str, Vector[Opaque]], "Opaque"),
        (DumpsOnly, "DumpsOnly are not supported"),
    ],
    ids=lambda value: getattr(value, "__name__", None) or str(value)[:40],
)
def test_registration_finds_an_unencodable_part_anywhere_in_the_update_type(
    update_type: Any, part: str
) -> None:
    with pytest.raises(InvalidDeclaration, match=rf"'e\.typed'.*{part}"):
        Kernel([Keys(thread_key(update_type))])


def test_an_update_type_msgspec_cannot_read_is_refused_with_its_reason() -> None:
    @dataclasses.dataclass
    class Unsayable:  # its hint raises an error with no message when it is evaluated
        x: "(_ for _ in ()).throw(ValueError())"  # noqa: UP037

    union = r"'e\.typed'.*: Type unions may not contain more than one array-like"
    with pytest.raises(InvalidDeclaration, match=union):
        Kernel([Keys(thread_key(list[int] | tuple[int, int]))])
    with pytest.raises(InvalidDeclaration, match=r"'e\.typed'.*Unsayable.*: ValueError\b"):
        Kernel([Keys(thread_key(Unsayable))])


def test_a_persistent_key_of_a_literal_type_is_accepted() -> None:
    """A Literal's arguments are values, not types: nothing in them is looked into."""
    Kernel([Keys(thread_key(Literal["up", "down"]))])


class AnyLog(StateKey[Any, str]):
    key = "e.any_log"
    scope = KeyScope.THREAD
    default = None

    @staticmethod
    def apply(value: Any, update: str) -> Any:
        return (value or Vector()).append(update)


async def test_a_vector_in_a_key_typed_any_is_refused_rather_than_stored_as_something_else(
    thread_store: ThreadStore,
) -> None:
    run = await Kernel([Keys(AnyLog)], thread_store=thread_store, snapshot_every=1).start_run("t")
    await run.submit(StateCommand().update(AnyLog, "m0"))
    with pytest.raises(StateError, match=r"'e\.any_log'.*typed Any comes back a list"):
        await run.checkpoint()
    await run.abandon()
    assert await thread_store.load("t") is None


class Blob2(StateKey[Any, Any]):
    key = "e.blob2"
    scope = KeyScope.THREAD
    default = None


async def test_unencodable_updates_cleared_in_the_same_commit_are_journaled_as_clears(
    thread_store: ThreadStore,
) -> None:
    """The value such an update made is gone by the end of the commit: the journal keeps a
    clear, which replays to the default, for every key it happens to."""
    kernel = Kernel([Keys(Blob, Blob2)], thread_store=thread_store)
    run = await kernel.start_run("t")
    await run.submit(StateCommand().update(Blob, "kept").update(Blob2, "kept too"))
    await run.submit(
        StateCommand().update(Blob, object()).clear(Blob).update(Blob2, object()).clear(Blob2)
    )
    assert (run.snapshot.get(Blob), run.snapshot.get(Blob2)) == (None, None)
    await run.finish()
    _, cleared = await kernel.history("t")
    assert sorted((op.key, op.kind, op.update) for op in cleared.ops) == [
        ("e.blob", "clear", None),
        ("e.blob2", "clear", None),
    ]
    reader = Kernel([Keys(Blob, Blob2)], thread_store=thread_store)
    assert (await read(reader, "t", Blob), await read(reader, "t", Blob2)) == (None, None)
    assert (await reader.state_at("t", 1)).get(Blob2) == "kept too"
    assert (await reader.verify("t")).ok


async def test_unencodable_values_of_several_keys_without_a_store_are_all_held() -> None:
    kernel = Kernel([Keys(Blob, Blob2)])
    one, two = 1 + 2j, 3 + 4j  # no JSON for either
    await commit_all(
        kernel,
        "t",
        StateCommand().update(Blob, one).update(Blob2, two),
        StateCommand().update(Blob, "later").update(Blob2, "later"),
    )
    travelled = await kernel.state_at("t", 1)
    assert (travelled.get(Blob), travelled.get(Blob2)) == (one, two)
    assert (await kernel.verify("t")).ok
