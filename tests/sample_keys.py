"""State keys the tests share: one of each shape the kernel treats differently."""

from __future__ import annotations

from typing import Any

import msgspec

from statekernel import KeyScope, MergeStrategy, StateKey, Vector


class Counter(StateKey[int, int]):
    key = "test.counter"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Title(StateKey[str, str]):
    key = "test.title"


class Items(StateKey[list[int], int]):
    """A mutable value type whose apply mutates its input: the kernel must copy."""

    key = "test.items"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: list[int], update: int) -> list[int]:
        value.append(update)
        return value


class Settings(StateKey[dict[str, list[int]], dict[str, list[int]]]):
    key = "test.settings"

    @staticmethod
    def apply(value: dict[str, list[int]], update: dict[str, list[int]]) -> dict[str, list[int]]:
        value.update(update)
        return value


class Msg(msgspec.Struct, frozen=True):
    role: str
    text: str


class Log(StateKey[Vector[Msg], Msg]):
    key = "test.log"
    merge = MergeStrategy.COMMUTATIVE

    @staticmethod
    def apply(value: Vector[Msg], update: Msg) -> Vector[Msg]:
        return value.append(update)


class Positive(StateKey[int, int]):
    """Refuses negative values through validate."""

    key = "test.positive"

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update

    @staticmethod
    def validate(value: int) -> None:
        if value < 0:
            raise ValueError(f"must stay >= 0, would be {value}")


class Handle:
    """A live object: fine in memory, impossible to persist."""


class LiveHandle(StateKey[Any, Any]):
    """Holds a Handle (not one of ALL_KEYS: a kernel that must persist it refuses it)."""

    key = "t.handle"
    default = None


ALL_KEYS = (Counter, Title, Items, Settings, Log, Positive)


def _total(strategy: MergeStrategy) -> type[StateKey[int, int]]:
    class Total(StateKey[int, int]):
        """A thread count that adds: any order of its updates gives one sum, so only its
        strategy decides whether two writers both land."""

        key = f"test.total.{strategy.value}"
        scope = KeyScope.THREAD
        merge = strategy

        @staticmethod
        def apply(value: int, update: int) -> int:
            return value + update

    Total.__qualname__ = f"Total_{strategy.name}"
    return Total


TOTALS = {strategy: _total(strategy) for strategy in MergeStrategy}
"""One adding thread key per `MergeStrategy` (a new strategy gets one too)."""
