"""How a check of the store contract fails: the promise, what it expected, what came.

A store author meets the contract through its failures, so each must be readable without
opening the contract's source: which promise of the protocol was broken, what the contract
expected the store to do, and what the store did instead (an exception of another type,
one of the right type naming other things, a value, nothing at all), e.g.
`expected DecodeFailed(key='ns', record='k'), got KeyError('k')`. A plain `assert` cannot
say that outside the test modules pytest rewrites (a library's asserts fail as a bare
`AssertionError`), so every check goes through these.
"""

from __future__ import annotations

import functools
import inspect
import reprlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from .._errors import StateError

__all__ = [
    "CONTRACT_DOCS",
    "ContractBroken",
    "expect",
    "expect_error",
    "expect_that",
    "explained",
    "shown",
]

E = TypeVar("E", bound=BaseException)
C = TypeVar("C", bound=type)

CONTRACT_DOCS = "the docs' 'Writing a store' page (custom-stores.md), 'What the contract checks'"
"""Where every promise a failure names is written down, for the reader of the failure."""

_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 4, 160, 160
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 12


class ContractBroken(StateError, AssertionError):
    """A store broke a promise of the store contract: the failure of a contract test.

    Its message names the promise, what the contract expected and what the store did
    (`expected DecodeFailed(key='ns', record='k'), got KeyError('k')`); when the store
    raised something else than expected, that exception is the `__cause__`, so pytest shows
    where the store raised it. Also an `AssertionError` (a test failure, as pytest reports
    one).

    Attributes:

    - `promise`: the promise, in words, naming the protocol method it is about.
    - `expected`: what the contract expected, as text.
    - `got`: what the store did, as text.
    """

    def __init__(self, promise: str, expected: str, got: str) -> None:
        self.promise = promise
        self.expected = expected
        self.got = got
        super().__init__(f"{promise}: expected {expected}, got {got}. (See {CONTRACT_DOCS}.)")


def shown(value: object) -> str:
    """A value or exception as a failure shows it: a bounded repr (a 10 MB value must not
    become a 10 MB message), an exception as `Type(args)`."""
    if isinstance(value, BaseException):
        return f"{type(value).__name__}({', '.join(_SHOWN.repr(a) for a in value.args)})"
    try:
        return _SHOWN.repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


def expect(got: object, expected: object, promise: str) -> None:
    """Fail unless `got == expected`, showing both."""
    __tracebackhide__ = True
    if not got == expected:
        raise ContractBroken(promise, shown(expected), shown(got))


def expect_that(holds: bool, promise: str, *, expected: str, got: object) -> None:
    """Fail unless `holds`; `expected` says in words what should have held, `got` is what
    the store gave instead."""
    __tracebackhide__ = True
    if not holds:
        raise ContractBroken(promise, expected, shown(got))


async def expect_error(
    call: Awaitable[Any],
    error: type[E],
    promise: str,
    *,
    holding: str | None = None,
    **attributes: object,
) -> E:
    """The `error` that awaiting `call` raises, with the given `attributes` and (when
    `holding` is given) a message holding that text; anything else fails, naming what
    came."""
    __tracebackhide__ = True
    wanted = _described(error, attributes, holding)
    try:
        returned = await call
    except error as raised:
        found = {name: getattr(raised, name, _MISSING) for name in attributes}
        if found != attributes or (holding is not None and holding not in str(raised)):
            got = _described(type(raised), found, None) if attributes else shown(raised)
            raise ContractBroken(promise, wanted, got) from raised
        return raised
    except Exception as other:
        raise ContractBroken(promise, wanted, shown(other)) from other
    raise ContractBroken(promise, wanted, f"no exception: it returned {shown(returned)}")


def explained(contract: C) -> C:
    """The contract class, each of whose own tests fails as a `ContractBroken` also where
    a call raises what no check expected: the test's promise, that it expected no
    exception there, and what came (the exception itself is the cause, so pytest shows
    where it was raised). A subclass's own tests are left as they are."""
    for name, test in list(vars(contract).items()):
        if name.startswith("test_") and inspect.iscoroutinefunction(test):
            setattr(contract, name, _explaining(test, f"{contract.__name__}.{name}"))
    return contract


def _explaining(test: Callable[..., Awaitable[None]], where: str) -> Callable[..., Awaitable[None]]:
    promise = f"{where} ({_first_line(test.__doc__) or test.__name__[5:].replace('_', ' ')})"

    @functools.wraps(test)
    async def explaining(*args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        try:
            await test(*args, **kwargs)
        except ContractBroken:
            raise
        except Exception as error:
            raise ContractBroken(promise, "no exception here", shown(error)) from error

    return explaining


def _first_line(doc: str | None) -> str:
    """A docstring's first sentence, on one line."""
    text = " ".join((doc or "").split())
    return text.split(". ")[0].rstrip(".")


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def _described(
    error: type[BaseException], attributes: dict[str, object], holding: str | None
) -> str:
    """`DecodeFailed(key='ns', record='k')`: the type and the attributes that matter."""
    parts: Iterable[str] = (f"{name}={shown(value)}" for name, value in attributes.items())
    text = f"{error.__name__}({', '.join(parts)})" if attributes else error.__name__
    return text if holding is None else f"{text} whose message holds {holding!r}"
