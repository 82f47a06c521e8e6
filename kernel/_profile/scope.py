"""`StateScope`: the key strings every agent agrees on for shared entries."""

from __future__ import annotations

__all__ = ["StateScope"]


class StateScope(str):
    """A key string for shared state, built by the conventions every agent agrees on.

    `StateScope(s)` names one entry of a `ProfileKey`. It *is* the string (a `str`
    subclass): `StateScope.parent_thread("p1") == "parent_thread::p1"`, it hashes alike, and
    any plain string works wherever a scope does. The constructors only spare agents from
    spelling the convention by hand, which is how two agents that mean the same entry end up
    with different strings.

    The constructors raise `ValueError` for `None` or an empty string, so a run without a
    parent never silently shares `"parent_thread::None"`. See
    [state layers: scopes are strings](state-layers.md#scopes-are-strings).
    """

    __slots__ = ()

    @classmethod
    def global_(cls) -> StateScope:
        """One entry shared by every agent and thread: the string `"global"`."""
        return cls("global")

    @classmethod
    def parent_thread(cls, thread_id: str) -> StateScope:
        """Shared by a parent thread and every sub-agent it delegates to.

        The string `"parent_thread::{thread_id}"`. `ValueError` for `None` or `""`.
        """
        return cls("parent_thread::" + _part("parent_thread", thread_id))

    @classmethod
    def agent_type(cls, name: str) -> StateScope:
        """Shared by every instance of one kind of agent.

        The string `"agent_type::{name}"`. `ValueError` for `None` or `""`.
        """
        return cls("agent_type::" + _part("agent_type", name))

    @classmethod
    def thread(cls, thread_id: str) -> StateScope:
        """Private to one thread, but kept in the ProfileStore (dynamic, async, persistent).

        The string `"thread::{thread_id}"`. `ValueError` for `None` or `""`.
        """
        return cls("thread::" + _part("thread", thread_id))

    def __repr__(self) -> str:
        return f"StateScope({str.__repr__(self)})"


def _part(kind: str, value: object) -> str:
    # A None parent id (a top-level run has no parent) would silently become the string
    # "parent_thread::None", shared by every top-level run: refuse it instead.
    if not isinstance(value, str) or not value:
        raise ValueError(
            f"StateScope.{kind}() needs a non-empty string, got {value!r}. A run without a "
            f"parent has RunIdentity.parent_thread_id None: decide what such a run shares "
            f"(e.g. StateScope.thread(run.thread_id)) instead of passing None."
        )
    return value
