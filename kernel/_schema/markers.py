"""The field markers a schema class carries in `Annotated` (`Ephemeral`, `Commutative`), and
`Overwrite`, the marker an update carries."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from .._errors import InvalidDeclaration

EphemeralScope = Literal["run", "step", "call"]
EPHEMERAL_SCOPES: tuple[EphemeralScope, ...] = ("run", "step", "call")


@attrs.frozen
class Ephemeral:
    """Field marker: reset the field to its default at every run, step or inference call.

    `Annotated[bool, Ephemeral("run")] = False`. "run" resets when a run starts, "step" at
    each STEP_START, "call" at each BEFORE_INFERENCE. Hooks of the reset phase itself still
    read the value from before the reset; their writes to the field land after it, provided
    `schema.plugin` is registered before their plugin (see docs/schema.md).
    """

    scope: EphemeralScope = "run"

    def __attrs_post_init__(self) -> None:
        if self.scope not in EPHEMERAL_SCOPES:
            raise InvalidDeclaration(
                f"Ephemeral({self.scope!r})",
                f"scope must be one of {', '.join(map(repr, EPHEMERAL_SCOPES))}",
                'Use Ephemeral("run"), Ephemeral("step") or Ephemeral("call").',
            )


@attrs.frozen
class Commutative:
    """Field marker: this field's reducer gives the same result in any order of updates.

    `Annotated[int, operator.add, Commutative()]`. Several hooks of one phase writing the
    field then have their updates concatenated instead of being re-run one by one. Declare it
    only when it is true (`statekernel.testing.assert_commutative(schema.keys[name], ...)` checks);
    a field without a reducer (overwrite) can never be commutative.
    """


class Overwrite:
    """Update marker: replace a reducer field's value instead of merging into it.

    `schema.command(messages=Overwrite([summary]))`, or inside a node's partial dict, as in
    LangGraph. The value is checked against the field's type like any update; the commit
    journals the value it leaves (not the marker), so replay and history see a replace.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Overwrite({self.value!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is Overwrite and other.value == self.value

    __hash__ = None  # type: ignore[assignment]
