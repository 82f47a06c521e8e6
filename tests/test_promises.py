"""Promises a user relies on that no other test pinned: each test here fails on one realistic
change to the commit, copy, vector, persistence, profile or stage code."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any

import attrs
import pytest
from sample_keys import Counter, Positive, Title

from statekernel import (
    Agent,
    CommitRejected,
    InferenceResponse,
    Kernel,
    KeyScope,
    MergeStrategy,
    Phase,
    Plugin,
    PluginRegistrar,
    ProfileAccess,
    ProfileKey,
    ScriptedModel,
    StateCommand,
    StateKey,
    StoreError,
    ToolCall,
    Vector,
)
from statekernel.lowlevel import KeyRegistry, LiveState
from statekernel.plugins import StageKey, StageWorkflow
from statekernel.stores import MemoryProfileStore, SqliteProfileStore, SqliteThreadStore


class Keys(Plugin):
    def __init__(self, *keys: type[StateKey[Any, Any]], id: str = "keys") -> None:
        self.id = id
        self._keys = keys

    def register(self, r: PluginRegistrar) -> None:
        for key in self._keys:
            r.register_key(key)


class Hook(Plugin):
    def __init__(self, id: str, phase: Phase, hook: Any) -> None:
        self.id = id
        self._phase = phase
        self._hook = hook

    def register(self, r: PluginRegistrar) -> None:
        r.register_phase_hook(self._phase, self._hook)


# -- 1. one commit that updates one key and clears another ----------------------------------


def test_a_commit_may_update_one_key_and_clear_another() -> None:
    state = LiveState(KeyRegistry.of(Counter, Title, Positive))
    state.submit(StateCommand().update(Counter, 1).update(Title, "draft").update(Positive, 2))
    state.submit(StateCommand().update(Counter, 4).clear(Title))

    snapshot = state.snapshot
    assert snapshot.get(Counter) == 5
    assert Title not in snapshot
    assert snapshot.get(Title) == ""
    assert snapshot.get(Positive) == 2  # untouched by the second commit
    assert snapshot.to_dict() == {"test.counter": 5, "test.positive": 2}


def test_within_one_commit_later_ops_see_earlier_clears_and_updates() -> None:
    state = LiveState(KeyRegistry.of(Counter, Title))
    state.submit(StateCommand().update(Counter, 7).update(Title, "old"))
    state.submit(
        StateCommand()
        .clear(Counter)
        .update(Counter, 2)  # applies to the default after the clear
        .update(Title, "new")
        .clear(Title)  # the last op wins: cleared
    )
    assert state.snapshot.get(Counter) == 2
    assert Title not in state.snapshot
    assert state.revision == 2


# -- 2. a mutable declared default is never shared -----------------------------------------


class Tags(StateKey[list[str], str]):
    key = "promise.tags"
    default = ["seed"]  # deliberately mutable: the kernel must copy it

    @staticmethod
    def apply(value: list[str], update: str) -> list[str]:
        value.append(update)
        return value


def test_a_mutable_default_is_a_fresh_copy_for_every_read_and_commit() -> None:
    state = LiveState(KeyRegistry.of(Tags))
    read = state.snapshot.get(Tags)
    read.append("mutated by a hook")
    assert state.snapshot.get(Tags) == ["seed"]

    state.submit(StateCommand().update(Tags, "a"))  # apply appends to the default in place
    assert state.snapshot.get(Tags) == ["seed", "a"]
    state.submit(StateCommand().clear(Tags))
    assert state.snapshot.get(Tags) == ["seed"]
    assert Tags.default == ["seed"]

    fresh = LiveState(KeyRegistry.of(Tags))
    fresh.submit(StateCommand().update(Tags, "b"))
    assert fresh.snapshot.get(Tags) == ["seed", "b"]


# -- 3. unfrozen record classes are copied, frozen ones shared -----------------------------


@attrs.define
class AttrsBox:
    count: int
    label: str


@dataclasses.dataclass
class DataBox:
    count: int
    label: str


@attrs.frozen
class FrozenBox:
    count: int
    label: str


class AttrsState(StateKey[AttrsBox, AttrsBox]):
    key = "promise.attrs_box"
    default_factory = staticmethod(lambda: AttrsBox(0, ""))


class DataState(StateKey[DataBox, DataBox]):
    key = "promise.data_box"
    default_factory = staticmethod(lambda: DataBox(0, ""))


class FrozenState(StateKey[FrozenBox, FrozenBox]):
    key = "promise.frozen_box"
    default = FrozenBox(0, "")


@pytest.mark.parametrize(
    ("key", "box"), [(AttrsState, AttrsBox), (DataState, DataBox)], ids=["attrs", "dataclass"]
)
def test_mutating_an_unfrozen_record_read_from_a_snapshot_changes_no_state(
    key: type[StateKey[Any, Any]], box: type
) -> None:
    state = LiveState(KeyRegistry.of(key, Counter))
    given = box(1, "one")
    state.submit(StateCommand().update(key, given))
    given.count = 100  # the caller keeps its object: the committed value must not follow
    before = state.snapshot

    read = before.get(key)
    read.count = 99
    read.label = "tampered"
    assert before.get(key) == box(1, "one")
    state.submit(StateCommand().update(Counter, 1))  # a later commit carries the value over
    assert state.snapshot.get(key) == box(1, "one")


def test_a_frozen_record_is_shared_without_copying() -> None:
    state = LiveState(KeyRegistry.of(FrozenState))
    value = FrozenBox(3, "three")
    state.submit(StateCommand().update(FrozenState, value))
    assert state.snapshot.get(FrozenState) is value
    assert state.snapshot.get(FrozenState) is state.snapshot.get(FrozenState)


# -- 4. clearing a key that declares validate ----------------------------------------------


class Strict(StateKey[int, int]):
    """Refuses anything that is not a non-negative int, so a placeholder would be refused."""

    key = "promise.strict"

    @staticmethod
    def validate(value: int) -> None:
        if type(value) is not int or value < 0:
            raise ValueError(f"not a non-negative int: {value!r}")


def test_clearing_a_validated_key_is_not_validated() -> None:
    state = LiveState(KeyRegistry.of(Strict, Counter))
    state.submit(StateCommand().update(Strict, 5))
    state.submit(StateCommand().clear(Strict))
    assert Strict not in state.snapshot
    assert state.snapshot.get(Strict) == 0
    state.submit(StateCommand().update(Strict, 3).update(Counter, 1))
    state.submit(StateCommand().clear(Strict).update(Counter, 1))  # the multi-key path
    assert Strict not in state.snapshot
    assert state.snapshot.get(Counter) == 2
    with pytest.raises(CommitRejected):
        state.submit(StateCommand().update(Strict, -1))


# -- 5. a clear by another Kernel is not undone by stale memory -----------------------------


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


# -- 6. vectors with equal items are equal however they were built --------------------------


def _builds(n: int) -> dict[str, Vector[int]]:
    appended: Vector[int] = Vector()
    for i in range(n):
        appended = appended.append(i)
    halves = Vector(range(n // 2)) + Vector(range(n // 2, n))
    return {
        "constructor": Vector(range(n)),
        "extend": Vector[int]().extend(range(n)),
        "append": appended,
        "concatenation": halves,
        "slice": Vector(range(n + 40))[:n],
        "offset slice": Vector(range(-33, n))[33:],
        "chunked extend": Vector(range(3)).extend(range(3, 40)).extend(range(40, n))
        if n >= 40
        else Vector(range(n)),
    }


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 64, 65, 1025, 1100])
def test_vectors_with_the_same_items_are_equal_however_built(n: int) -> None:
    builds = _builds(n)
    expected = list(range(n))
    for name, vector in builds.items():
        assert list(vector) == expected, name
        for other_name, other in builds.items():
            assert vector == other, (name, other_name)
            assert hash(vector) == hash(other), (name, other_name)
        assert vector == expected and vector == tuple(expected), name


@pytest.mark.parametrize("n", [1, 33, 65, 1100])
def test_vectors_differing_in_one_item_are_unequal_however_built(n: int) -> None:
    for position in sorted({0, n // 2, n - 1}):
        changed = list(range(n))
        changed[position] = -1
        other = Vector(changed)
        for name, vector in _builds(n).items():
            assert vector != other, (name, position)
            assert other != vector, (name, position)
            assert vector != changed, (name, position)
        assert Vector(range(n)) != Vector(range(n + 1))


# -- 7. a refused validated write names the plugin that wrote it ---------------------------


class Budget(StateKey[int, int]):
    key = "promise.budget"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update

    @staticmethod
    def validate(value: int) -> None:
        if value < 0:
            raise ValueError(f"budget would be {value}")


def _spend(amount: int) -> Any:
    return lambda ctx: StateCommand().update(Budget, amount)


async def test_a_refused_commit_names_the_plugin_whose_write_was_refused() -> None:
    kernel = Kernel(
        [
            Keys(Budget, Title),
            Hook("first", Phase.STEP_START, _spend(1)),
            Hook("overspender", Phase.STEP_START, _spend(-5)),
            Hook("bystander", Phase.STEP_START, lambda ctx: StateCommand().update(Title, "x")),
        ]
    )
    run = await kernel.start_run("t")
    with pytest.raises(CommitRejected) as caught:
        await run.run_phase(Phase.STEP_START)
    assert caught.value.key == "promise.budget"
    assert caught.value.plugin == "overspender"
    assert "overspender" in str(caught.value)
    assert run.revision == 0


# -- 8. the profile size limit is exact ------------------------------------------------------


class Blob(ProfileKey[str]):
    key = "promise.blob"


async def test_a_profile_value_of_exactly_the_limit_is_accepted_one_byte_more_refused(
    tmp_path: Path,
) -> None:
    limit = 1_000
    at_limit = "y" * (limit - 2)  # JSON adds the two quotes
    for store in (
        MemoryProfileStore(max_value_bytes=limit),
        SqliteProfileStore(tmp_path / "p.db", max_value_bytes=limit),
    ):
        async with store:
            entry = await store.set("ns", "k", at_limit)
            assert entry.version == 1
            with pytest.raises(StoreError, match="1,001 bytes"):
                await store.set("ns", "k", at_limit + "y")
            stored = await store.get("ns", "k")
            assert stored is not None and (stored.value, stored.version) == (at_limit, 1)

    access = ProfileAccess(MemoryProfileStore(), max_value_bytes=limit)
    await access.write(Blob, "owner", at_limit)
    with pytest.raises(StoreError, match="1,001 bytes"):
        await access.write(Blob, "owner", at_limit + "y")
    assert await access.read(Blob, "owner") == at_limit


# -- 9. the stage gate names the shortest route in a branching graph -----------------------


class Doc(enum.Enum):
    DRAFT = "draft"
    OUTLINED = "outlined"
    EDITED = "edited"
    POLISHED = "polished"
    REVIEWED = "reviewed"
    PUBLISHED = "published"


class DocStage(StageKey[Doc]):
    """Two routes from DRAFT to REVIEWED: the short one through OUTLINED, the long one through
    EDITED and POLISHED (declared later); from EDITED only the long route remains."""

    key = "promise.doc_stage"
    transitions = {
        Doc.DRAFT: {Doc.EDITED, Doc.OUTLINED},
        Doc.OUTLINED: {Doc.REVIEWED},
        Doc.EDITED: {Doc.POLISHED},
        Doc.POLISHED: {Doc.REVIEWED},
        Doc.REVIEWED: {Doc.PUBLISHED},
    }


class LateShortStage(StageKey[Doc]):
    """The mirror image: the short route goes through the stage declared later."""

    key = "promise.late_short_stage"
    transitions = {
        Doc.DRAFT: {Doc.OUTLINED, Doc.EDITED},
        Doc.OUTLINED: {Doc.POLISHED},
        Doc.POLISHED: {Doc.REVIEWED},
        Doc.EDITED: {Doc.REVIEWED},
        Doc.REVIEWED: {Doc.PUBLISHED},
    }


_ADVANCES = {
    "outline": Doc.OUTLINED,
    "edit": Doc.EDITED,
    "polish": Doc.POLISHED,
    "review": Doc.REVIEWED,
}


async def _block_reason(key: type[StageKey[Doc]], *moves: str) -> str:
    flow = StageWorkflow(key, requires={"publish": Doc.REVIEWED}, advances=_ADVANCES)
    tools = flow.tools({name: (lambda a, c: "ok") for name in [*_ADVANCES, "publish"]})
    script = [
        InferenceResponse("", (ToolCall(f"c{i}", name, {}),))
        for i, name in enumerate([*moves, "publish"])
    ]
    result = await Agent([flow], ScriptedModel(script), tools).run("doc", ["go"])
    errors = [m.content for m in result.messages if m.role == "tool" and m.is_error]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize(
    ("key", "moves", "hint"),
    [
        (DocStage, (), "(now DRAFT): call `outline` first, then `review`"),
        (DocStage, ("edit",), "(now EDITED): call `polish` first, then `review`"),
        (LateShortStage, (), "(now DRAFT): call `edit` first, then `review`"),
        (LateShortStage, ("outline",), "(now OUTLINED): call `polish` first, then `review`"),
    ],
)
async def test_the_block_names_the_shortest_route_in_a_branching_graph(
    key: type[StageKey[Doc]], moves: tuple[str, ...], hint: str
) -> None:
    reason = await _block_reason(key, *moves)
    assert reason == f"publish needs stage REVIEWED {hint}"
