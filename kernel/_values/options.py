"""Options: the one set of checks for the values the public constructors take.

A constructor's options (how many rounds, how many seconds, which of a few spellings, what
kind of object) are checked here and nowhere else, so that every option of one kind refuses
the same values the same way: a bool is not an int (`True` is not one round), a number of
seconds is finite, a choice is one of its spellings. Each check returns the value (as the
type it promises) or raises `OptionNotOfType` for the wrong kind of object and
`InvalidOption` for a value out of range; both name the option, the value given and what it
takes, and both are `ValueError`s (the type error also a `TypeError`).
"""

from __future__ import annotations

import math
from typing import TypeVar

from .._errors import InvalidOption, OptionNotOfType

__all__ = ["a_callable", "choice", "count", "instance", "positive_int", "seconds", "whole"]

T = TypeVar("T")
Choice = TypeVar("Choice", bound=str)


def _not_a_number(value: object, fix: str) -> str:
    """`fix`, after why a bool is refused: Python's bools are ints, so it would pass."""
    if isinstance(value, bool):
        return f"A bool is not taken for a number. {fix}".rstrip()
    return fix


def whole(option: str, value: object, *, at_least: int, expected: str = "", fix: str = "") -> int:
    """`value`, an int (never a bool) of at least `at_least`; `expected` says what it
    counts, in words, when the bare bound would not."""
    expected = expected or ("a positive int" if at_least == 1 else f"an int >= {at_least}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionNotOfType(option, value, expected, _not_a_number(value, fix))
    if value < at_least:
        raise InvalidOption(option, value, expected, fix)
    return value


def positive_int(option: str, value: object, *, expected: str = "", fix: str = "") -> int:
    """`value`, an int >= 1 (a count of rounds, steps, attempts)."""
    return whole(option, value, at_least=1, expected=expected, fix=fix)


def count(option: str, value: object, *, expected: str = "", fix: str = "") -> int:
    """`value`, an int >= 0 (a number of restarts, retries, revisions to keep)."""
    return whole(option, value, at_least=0, expected=expected, fix=fix)


def seconds(option: str, value: object, *, above_zero: bool = False, fix: str = "") -> float:
    """`value` as a float: a finite number of seconds (never a bool), > 0 if `above_zero`
    else >= 0. An infinite or NaN wait is a bug in the caller's arithmetic, not a choice."""
    expected = f"a finite number of seconds {'> 0' if above_zero else '>= 0'}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OptionNotOfType(option, value, expected, _not_a_number(value, fix))
    if not math.isfinite(value) or value < 0 or (above_zero and value == 0):
        raise InvalidOption(option, value, expected, fix)
    return float(value)


def choice(option: str, value: Choice, choices: tuple[Choice, ...], *, fix: str = "") -> Choice:
    """`value`, once it is one of `choices` (the spellings of a `Literal`)."""
    if value not in choices:
        expected = " or ".join(repr(c) for c in choices)
        if not isinstance(value, str):
            raise OptionNotOfType(option, value, expected, fix)
        raise InvalidOption(option, value, expected, fix)
    return value


def instance(option: str, value: object, kind: type[T], expected: str, *, fix: str = "") -> T:
    """`value`, once it is a `kind`; `expected` says what that is in words."""
    if not isinstance(value, kind):
        raise OptionNotOfType(option, value, expected, fix)
    return value


def a_callable(option: str, value: T, expected: str, *, fix: str = "") -> T:
    """`value`, once it can be called (a model, a listener, a tool)."""
    if not callable(value):
        raise OptionNotOfType(option, value, expected, fix)
    return value
