"""The field markers a schema class carries in `Annotated`: `Ephemeral` and `Commutative`.

(`Overwrite`, the marker an update carries, is a command value: `_values.commands`.)"""

from __future__ import annotations

from typing import Literal

import attrs

from .._errors import InvalidDeclaration

EphemeralScope = Literal["run", "step", "call"]
EPHEMERAL_SCOPES: tuple[EphemeralScope, ...] = ("run", "step", "call")


@attrs.frozen
class Ephemeral:
    """Field marker: reset the field to its default at every run, step or inference call.

    `Ephemeral(scope="run")` goes inside `Annotated[...]`:
    `Annotated[bool, Ephemeral("run")] = False`. It resets the field to its default at every
    run start (`"run"`), at every `STEP_START` (`"step"`) or at every `BEFORE_INFERENCE`
    (`"call"`). Any other scope raises `InvalidDeclaration`. Hooks of the reset phase itself
    still read the value from before the reset; their writes to the field land after it,
    provided `schema.plugin` is registered before their plugin.
    See [schema: ephemeral fields](schema.md#ephemeral-fields).
    """

    scope: EphemeralScope = "run"
    """When the field resets: `"run"` (the default), `"step"` or `"call"`."""

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

    `Commutative()`, as in `Annotated[int, operator.add, Commutative()]`. Several hooks of
    one phase writing the field then have their updates concatenated instead of being re-run
    one by one: the generated key is COMMUTATIVE. Declare it only when it is true
    (`statekernel.testing.assert_commutative(schema.keys[name], ...)` checks). It is allowed
    only together with a reducer: a field without one (overwrite) can never be commutative.
    See [schema: the rules](schema.md#the-rules-field-by-field).
    """
