"""Stage workflow: illegal or stale transitions are rejected, gated tools wait for their stage."""

from __future__ import annotations

import enum
from typing import Any

import pytest

from statekernel import (
    Agent,
    CommitRejected,
    InferenceResponse,
    InvalidDeclaration,
    Kernel,
    KeyScope,
    PhaseContext,
    ScriptedModel,
    StateCommand,
    ToolCall,
    ToolOutput,
    tool,
)
from statekernel.plugins import IllegalTransition, StageKey, StageWorkflow, Transition
from statekernel.stores import MemoryThreadStore


class Doc(enum.Enum):
    DRAFT = "draft"
    REVIEWED = "reviewed"
    PUBLISHED = "published"


class DocStage(StageKey[Doc]):
    key = "test.doc_stage"
    transitions = {Doc.DRAFT: {Doc.REVIEWED}, Doc.REVIEWED: {Doc.PUBLISHED}}


def workflow(**requires: Doc) -> StageWorkflow[Doc]:
    return StageWorkflow(
        DocStage,
        requires=requires,
        advances={"review": Doc.REVIEWED, "publish": Doc.PUBLISHED},
    )


def calls(*names: str) -> InferenceResponse:
    return InferenceResponse("calling", tuple(ToolCall(f"call-{n}", n, {}) for n in names))


def tool_messages(messages: Any) -> list[tuple[str, bool]]:
    return [(m.content, m.is_error) for m in messages if m.role == "tool"]


def test_the_declaration_yields_a_thread_key_starting_at_the_first_stage() -> None:
    assert DocStage.scope is KeyScope.THREAD
    assert DocStage.stages is Doc
    assert DocStage.graph == {Doc.DRAFT: {Doc.REVIEWED}, Doc.REVIEWED: {Doc.PUBLISHED}}
    assert DocStage.apply(Doc.DRAFT, Transition(Doc.DRAFT, Doc.REVIEWED)) is Doc.REVIEWED


async def test_publish_before_review_is_blocked_naming_the_missing_step_then_runs() -> None:
    published: list[str] = []
    flow = workflow()
    tools = flow.tools(
        {"review": lambda a, c: "looks good", "publish": lambda a, c: published.append("x") or "ok"}
    )
    model = ScriptedModel([calls("publish"), calls("review"), calls("publish")])
    result = await Agent([flow], model, tools).run("doc", ["ship it"])

    assert result.outcome == "success"
    assert tool_messages(result.messages) == [
        ("publish needs stage REVIEWED (now DRAFT): call `review` first", True),
        ("looks good", False),
        ("ok", False),
    ]
    assert published == ["x"]  # the blocked call never ran the tool
    assert result.snapshot.get(DocStage) is Doc.PUBLISHED


async def test_an_advancing_tool_is_blocked_where_its_move_is_illegal() -> None:
    reviews: list[int] = []
    flow = workflow()
    tools = flow.tools({"review": lambda a, c: reviews.append(1) or "ok"})
    model = ScriptedModel([calls("review"), calls("review")])
    result = await Agent([flow], model, tools).run("doc", ["review twice"])
    assert tool_messages(result.messages) == [
        ("ok", False),
        ("review needs stage DRAFT (now REVIEWED), which cannot be reached from REVIEWED", True),
    ]
    assert reviews == [1]


async def test_the_hint_lists_every_step_still_missing() -> None:
    flow = workflow(share=Doc.PUBLISHED)
    model = ScriptedModel([calls("share")])
    result = await Agent([flow], model, {"share": lambda a, c: "shared"}).run("doc", ["go"])
    assert tool_messages(result.messages) == [
        ("share needs stage PUBLISHED (now DRAFT): call `review` first, then `publish`", True)
    ]


@pytest.mark.parametrize(
    ("stale", "cause"),
    [
        (Transition(Doc.REVIEWED, Doc.REVIEWED), "illegal transition REVIEWED → REVIEWED"),
        (Transition(Doc.DRAFT, Doc.PUBLISHED), "stale transition DRAFT → PUBLISHED"),
    ],
)
async def test_a_stale_or_illegal_patch_is_rejected_at_commit(
    stale: Transition[Doc], cause: str
) -> None:
    run = await Kernel([workflow()]).start_run("doc")
    await run.submit(StateCommand().update(DocStage, Transition(Doc.DRAFT, Doc.REVIEWED)))
    revision = run.revision

    with pytest.raises(CommitRejected, match=cause) as rejected:
        await run.submit(StateCommand().update(DocStage, stale))

    assert isinstance(rejected.value.cause, IllegalTransition)
    assert rejected.value.key == DocStage.key
    assert run.snapshot.get(DocStage) is Doc.REVIEWED and run.revision == revision


async def test_skipping_a_stage_is_illegal_even_when_not_stale() -> None:
    run = await Kernel([workflow()]).start_run("doc")
    with pytest.raises(CommitRejected, match="from DRAFT the legal next stages are REVIEWED"):
        await run.submit(StateCommand().update(DocStage, Transition(Doc.DRAFT, Doc.PUBLISHED)))
    with pytest.raises(CommitRejected, match="must go between Doc members"):
        await run.submit(StateCommand().update(DocStage, Transition("draft", "reviewed")))  # type: ignore[type-var]
    assert run.snapshot.get(DocStage) is Doc.DRAFT


async def test_a_stale_patch_from_a_tool_is_a_tool_error_and_changes_nothing() -> None:
    def force_publish(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
        return ToolOutput(
            "forced", StateCommand().update(DocStage, Transition(Doc.DRAFT, Doc.PUBLISHED))
        )

    flow = workflow()
    tools = {**flow.tools({"review": lambda a, c: "ok"}), "force_publish": force_publish}
    model = ScriptedModel([calls("review"), calls("force_publish")])
    result = await Agent([flow], model, tools).run("doc", ["go"])
    (reviewed, forced) = tool_messages(result.messages)
    assert reviewed == ("ok", False)
    assert forced[1] and "stale transition DRAFT → PUBLISHED" in forced[0]
    assert result.snapshot.get(DocStage) is Doc.REVIEWED


async def test_the_stage_carries_over_to_the_threads_next_run() -> None:
    flow = workflow()
    tools = flow.tools({"review": lambda a, c: "ok", "publish": lambda a, c: "published"})
    agent = Agent(
        [flow],
        ScriptedModel([calls("review"), InferenceResponse("later"), calls("publish")]),
        tools,
    )
    await agent.run("doc", ["review"])
    second = await agent.run("doc", ["publish"])
    assert tool_messages(second.messages)[-1] == ("published", False)
    assert second.snapshot.get(DocStage) is Doc.PUBLISHED


async def test_the_stage_round_trips_through_a_thread_store() -> None:
    store = MemoryThreadStore()
    flow = workflow()
    tools = flow.tools({"review": lambda a, c: "ok"})
    await Agent([flow], ScriptedModel([calls("review")]), tools, thread_store=store).run("d", ["x"])
    fresh = Agent([workflow()], ScriptedModel(), thread_store=store)
    assert (await fresh.run("d", ["again"])).snapshot.get(DocStage) is Doc.REVIEWED


async def test_a_wrapped_tool_keeps_its_own_command_and_async_tools_work() -> None:
    class Notes(StageKey[Doc]):  # a second, run-scoped workflow on the same Enum
        key = "test.notes_stage"
        scope = KeyScope.RUN
        transitions = {Doc.DRAFT: {Doc.REVIEWED}}

    notes = StageWorkflow(Notes, advances={"review_notes": Doc.REVIEWED})
    flow = workflow()

    async def review(arguments: dict[str, Any], ctx: PhaseContext) -> ToolOutput:
        return ToolOutput("both", Notes.advance(ctx.snapshot, Doc.REVIEWED))

    model = ScriptedModel([calls("review")])
    result = await Agent([flow, notes], model, flow.tools({"review": review})).run("d", ["x"])
    assert tool_messages(result.messages) == [("both", False)]
    assert result.snapshot.get(DocStage) is Doc.REVIEWED
    assert result.snapshot.get(Notes) is Doc.REVIEWED


async def test_a_tool_that_raises_moves_nothing() -> None:
    def review(arguments: dict[str, Any], ctx: PhaseContext) -> str:
        raise RuntimeError("reviewer unavailable")

    flow = workflow()
    model = ScriptedModel([calls("review")])
    result = await Agent([flow], model, flow.tools({"review": review})).run("doc", ["go"])
    assert tool_messages(result.messages) == [("RuntimeError: reviewer unavailable", True)]
    assert result.snapshot.get(DocStage) is Doc.DRAFT


def test_bad_declarations_fail_when_the_class_is_created() -> None:
    class Other(enum.Enum):
        X = 1

    with pytest.raises(InvalidDeclaration, match="not a Doc member"):

        class Bad(StageKey[Doc]):
            key = "test.bad_stage"
            transitions = {Doc.DRAFT: {Other.X}}

    with pytest.raises(InvalidDeclaration, match="must be a set of stages"):

        class Single(StageKey[Doc]):
            key = "test.single_stage"
            transitions = {Doc.DRAFT: Doc.REVIEWED}

    with pytest.raises(InvalidDeclaration, match="`default` must be a Doc member"):

        class BadStart(StageKey[Doc]):
            key = "test.bad_start_stage"
            default = "draft"
            transitions = {Doc.DRAFT: {Doc.REVIEWED}}

    with pytest.raises(InvalidDeclaration, match="needs an Enum"):

        class NotEnum(StageKey[int]):  # type: ignore[type-var]
            key = "test.int_stage"
            transitions: dict[Any, Any] = {}


def test_bad_workflows_fail_when_built() -> None:
    with pytest.raises(ValueError, match="no stage of DocStage may move to DRAFT"):
        StageWorkflow(DocStage, advances={"restart": Doc.DRAFT})
    with pytest.raises(TypeError, match="must be a Doc member"):
        StageWorkflow(DocStage, requires={"publish": "REVIEWED"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="concrete StageKey"):
        StageWorkflow(StageKey)  # type: ignore[arg-type]


async def test_wrapped_tools_keep_their_schema_and_still_validate_arguments() -> None:
    @tool(idempotent=True)
    def review(notes: str) -> str:
        """Review the draft.

        Args:
            notes: What the reviewer found.
        """
        return f"reviewed: {notes}"

    flow = workflow()
    wrapped = flow.tools({"review": review})["review"]
    assert wrapped.spec == review.spec and wrapped.idempotent is True  # type: ignore[attr-defined]
    model = ScriptedModel(
        [
            InferenceResponse("", (ToolCall("r1", "review", {}),)),  # missing notes
            InferenceResponse("", (ToolCall("r2", "review", {"notes": "fine"}),)),
        ]
    )
    agent = Agent([flow], model, flow.tools({"review": review}))
    result = await agent.run("doc", ["go"])
    assert model.requests[0].tools == (review.spec,)
    (bad, good) = tool_messages(result.messages)
    assert bad[1] and "'notes': Field required" in bad[0]
    assert good == ("reviewed: fine", False)
    assert result.snapshot.get(DocStage) is Doc.REVIEWED  # only the valid call moved the stage


# -- the shortest route in a branching graph -----------------------------------------------


class Manuscript(enum.Enum):
    DRAFT = "draft"
    OUTLINED = "outlined"
    EDITED = "edited"
    POLISHED = "polished"
    REVIEWED = "reviewed"
    PUBLISHED = "published"


class BranchingStage(StageKey[Manuscript]):
    """Two routes from DRAFT to REVIEWED: the short one through OUTLINED, the long one through
    EDITED and POLISHED (declared later); from EDITED only the long route remains."""

    key = "promise.doc_stage"
    transitions = {
        Manuscript.DRAFT: {Manuscript.EDITED, Manuscript.OUTLINED},
        Manuscript.OUTLINED: {Manuscript.REVIEWED},
        Manuscript.EDITED: {Manuscript.POLISHED},
        Manuscript.POLISHED: {Manuscript.REVIEWED},
        Manuscript.REVIEWED: {Manuscript.PUBLISHED},
    }


class LateShortStage(StageKey[Manuscript]):
    """The mirror image: the short route goes through the stage declared later."""

    key = "promise.late_short_stage"
    transitions = {
        Manuscript.DRAFT: {Manuscript.OUTLINED, Manuscript.EDITED},
        Manuscript.OUTLINED: {Manuscript.POLISHED},
        Manuscript.POLISHED: {Manuscript.REVIEWED},
        Manuscript.EDITED: {Manuscript.REVIEWED},
        Manuscript.REVIEWED: {Manuscript.PUBLISHED},
    }


_ADVANCES = {
    "outline": Manuscript.OUTLINED,
    "edit": Manuscript.EDITED,
    "polish": Manuscript.POLISHED,
    "review": Manuscript.REVIEWED,
}


async def _block_reason(key: type[StageKey[Manuscript]], *moves: str) -> str:
    flow = StageWorkflow(key, requires={"publish": Manuscript.REVIEWED}, advances=_ADVANCES)
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
        (BranchingStage, (), "(now DRAFT): call `outline` first, then `review`"),
        (BranchingStage, ("edit",), "(now EDITED): call `polish` first, then `review`"),
        (LateShortStage, (), "(now DRAFT): call `edit` first, then `review`"),
        (LateShortStage, ("outline",), "(now OUTLINED): call `polish` first, then `review`"),
    ],
)
async def test_the_block_names_the_shortest_route_in_a_branching_graph(
    key: type[StageKey[Manuscript]], moves: tuple[str, ...], hint: str
) -> None:
    reason = await _block_reason(key, *moves)
    assert reason == f"publish needs stage REVIEWED {hint}"
