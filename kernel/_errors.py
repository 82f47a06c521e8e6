"""Every error the kernel raises, in one place.

All of them derive from `StateError`, so `except StateError` catches anything the kernel
means to tell you. Each carries the facts it names as attributes (`key`, `plugin`, `phase`,
`cause`, ...) so code can react without parsing text, and its message says what went wrong,
where, and -- when there is something to do -- how to fix it.
"""

from __future__ import annotations

import reprlib
import shlex
from collections.abc import Iterable

_PREVIEW = reprlib.Repr()
_PREVIEW.maxlevel, _PREVIEW.maxstring, _PREVIEW.maxother = 3, 60, 60


def _preview(value: object) -> str:
    """A short repr for a message: bounded in depth and length, so a huge or deeply nested
    value (or one whose repr raises) cannot turn an error message into a new error."""
    try:
        return _PREVIEW.repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _where(**parts: object) -> str:
    shown = [f"{name} {value!r}" for name, value in parts.items() if value is not None]
    return f" ({', '.join(shown)})" if shown else ""


def cause_text(cause: BaseException) -> str:
    """An exception as one line, the way Python shows it (`KeyError: 'text'`): its type
    tells a missing key from a bad value, so messages (and a model reading a tool's error)
    always carry both."""
    text = str(cause)
    return f"{type(cause).__name__}: {text}" if text else type(cause).__name__


def cause_clause(cause: BaseException) -> str:
    """`cause_text` without a closing period, to be followed by one and the next sentence
    (a message that already ends a sentence must not end with two periods)."""
    return cause_text(cause).rstrip(".")


class StateError(Exception):
    """Base class of every error the kernel raises on purpose.

    `except StateError` catches anything the kernel means to tell you; each subclass carries
    its facts as attributes. It is also raised directly for misuse: a finished run, a second
    live run on a thread, a read-only `ctx.profile`, `agent.run` on a suspended thread. See
    [concepts: errors](concepts.md#errors).

    Also an `Exception`. Attributes: none of its own.
    """


class InvalidDeclaration(StateError, TypeError):
    """A key, spec, plugin or schema class that cannot work, caught when it is created.

    Raised when the class is created (or, for a schema, compiled), not in the middle of a
    run. The message says what is wrong and how to fix it.

    Also a `TypeError`.

    Attributes:

    - `owner`: the class (or declaration) at fault.
    - `problem`: what is wrong with it.
    """

    def __init__(self, owner: str, problem: str, fix: str) -> None:
        self.owner = owner
        self.problem = problem
        super().__init__(f"{owner}: {problem}. {fix}")


class DuplicateRegistration(StateError):
    """Two registrations claim the same key string, handler slot or plugin id.

    Raised at `Kernel(...)` when a key string, a profile key, an action or effect handler,
    or a plugin id is registered twice.

    Attributes:

    - `kind`: what was registered twice: `"state key"`, `"profile key"`,
      `"action handler"`, `"effect handler"` or `"plugin"`.
    - `name`: the key string, handler name or plugin id.
    - `first`: the id of the plugin that registered it first.
    - `second`: the id of the plugin that registered it again.
    """

    def __init__(self, kind: str, name: str, first: str | None, second: str | None) -> None:
        self.kind = kind
        self.name = name
        self.first = first
        self.second = second
        if kind == "plugin":
            fix = "Two plugins of a kernel need two ids: give one of them another `id`."
        elif kind.endswith("handler"):
            fix = (
                "Each spec has one handler: register it in one of the two plugins; any plugin "
                "may still schedule or emit it."
            )
        else:
            fix = (
                f"If both mean the same {kind}, register it in one of the two plugins only: "
                f"every plugin of the kernel may read and write a registered key, whoever "
                f"registered it. If they are two different keys that share the string, give "
                f"one of them another `key`."
            )
        super().__init__(
            f"{kind} {name!r} is registered twice: first by plugin {first!r}, again by plugin "
            f"{second!r}. {fix}"
        )


class UnknownStateKey(StateError, KeyError):
    """A command or read names a StateKey that no plugin registered with this kernel.

    The message lists the keys that are registered.

    Also a `KeyError`.

    Attributes:

    - `key`: the key string.
    - `plugin`: the plugin whose command named it, or None.
    """

    def __init__(self, key: str, plugin: str | None = None, known: tuple[str, ...] = ()) -> None:
        self.key = key
        self.plugin = plugin
        hint = f" Registered keys: {', '.join(sorted(known))}." if known else ""
        super().__init__(
            f"state key {key!r} is not registered{_where(plugin=plugin)}. Register it with "
            f"`registrar.register_key(...)` in a plugin of this kernel.{hint}"
        )

    def __str__(self) -> str:  # KeyError would otherwise show the message quoted
        return str(self.args[0])


class StateValidationError(StateError, TypeError):
    """An update, payload or profile value does not have the type its key or spec declares.

    Also a `TypeError`.

    Attributes:

    - `key`: the key (or spec) whose declared type was not met.
    - `expected`: the declared type, as text.
    - `given`: the type name of the value that was given.
    """

    def __init__(
        self, key: str, expected: str, given: object, *, what: str = "update", detail: str = ""
    ) -> None:
        self.key = key
        self.expected = expected
        self.given = type(given).__name__
        extra = f": {detail.rstrip('.')}" if detail else ""  # a detail may end a sentence
        super().__init__(
            f"{what} for {key!r} must be {expected}, got {self.given} {_preview(given)}{extra}. "
            f"Pass a value of the declared type, or change the declaration."
        )


class CommitRejected(StateError):
    """An `apply` or `validate` refused a value, so the whole commit was rejected.

    Raised when an `apply` or `validate` raised: nothing of the commit changed, the state and
    the revision are as they were before it. Also raised when `validate` refused a value a
    checkpoint was about to save (`stage="persist"`): nothing was saved and the run stays
    open.

    Attributes:

    - `key`: the key whose value was refused.
    - `plugin`: the plugin whose command carried the op, or None.
    - `cause`: what `apply` or `validate` raised (also the `__cause__`).
    - `stage`: `"apply"`, `"validate"` or `"persist"`.
    """

    def __init__(
        self, key: str, cause: BaseException, *, plugin: str | None = None, stage: str = "apply"
    ) -> None:
        self.key = key
        self.plugin = plugin
        self.cause = cause
        self.stage = stage
        super().__init__(
            f"commit rejected: {stage} of key {key!r}{_where(plugin=plugin)} raised "
            f"{cause_clause(cause)}. Nothing was committed; the state and revision are unchanged."
        )
        self.__cause__ = cause


class RevisionConflict(StateError):
    """A command was built against a revision that is no longer current, or a thread save
    against a write position the store has moved past.

    Raised when a command's `base_revision` is stale, or when a thread save found the store
    at another write position than the one its run loaded (`position` is True) and could not
    rebase: an op on an exclusive key, a clear or a value set whole, a suspension, or nothing
    to merge; or a save that only commutes whose every rebase was overtaken again, until the
    rebasing gave up (`rebases` and `rebasing_for` say how many tries, over how long). From
    `agent.run`, it is the `error` of a `RunResult`, whose message says how to retry with
    `result.unsaved`.

    Attributes:

    - `expected`: the revision (or write position) the command or save was built against.
    - `actual`: the live revision (or the store's write position).
    - `position`: True when the conflict is on a thread save's write position.
    - `rebases`: how many times the save rebased onto a newer head and was overtaken again
      (0: it did not rebase).
    - `rebasing_for`: the seconds those rebases took, pauses between them included.
    """

    def __init__(
        self,
        expected: int,
        actual: int,
        *,
        what: str = "command",
        position: bool = False,
        retry: str = "start a new run to load it again",
        rebases: int = 0,
        rebasing_for: float = 0.0,
    ) -> None:
        self.expected = expected
        self.actual = actual
        self.position = position
        self.rebases = rebases
        self.rebasing_for = rebasing_for
        if position:  # a thread save: compared on the store's write position
            again = (
                f", and again each of the {rebases} times its commutative ops were rebased "
                f"onto the newer head, over {rebasing_for:.1f} s"
                if rebases
                else ""
            )
            message = (
                f"{what} expected the thread's write position {expected} but the store is at "
                f"{actual}: another kernel saved the thread in between (a commit, a suspension "
                f"or a run ending){again}. Nothing was saved; {retry}."
            )
        else:
            message = (
                f"{what} expected revision {expected} but the live revision is {actual}: "
                f"someone committed in between. Re-read the snapshot and build the {what} again."
            )
        super().__init__(message)


class HookFailed(StateError):
    """A hook raised; nothing of its gather round was committed.

    Raised when a hook, gate, action handler, request transform, schema node or phase
    listener raised something other than a `StateError` (a `StateError` propagates as
    itself), or returned the wrong type. Nothing of the gather round commits. (A failing
    effect handler is logged instead, and a failing tool becomes a failed `ToolResult`.)

    Attributes:

    - `plugin`: the id of the plugin whose hook failed.
    - `phase`: the phase it failed in.
    - `cause`: what it raised (also the `__cause__`).
    """

    def __init__(self, plugin: str, phase: str, cause: BaseException) -> None:
        self.plugin = plugin
        self.phase = phase
        self.cause = cause
        super().__init__(
            f"hook of plugin {plugin!r} failed in phase {phase}: {cause_clause(cause)}. "
            f"Nothing of this gather round was committed."
        )
        self.__cause__ = cause


class PhaseRunLoopExceeded(StateError):
    """Scheduled actions kept scheduling more actions past the round limit.

    Raised when scheduled actions still kept coming after `max_phase_rounds` rounds: an
    action probably schedules itself forever.

    Attributes:

    - `phase`: the phase that did not converge.
    - `rounds`: how many action rounds ran.
    - `pending`: the names of the actions still pending.
    """

    def __init__(self, phase: str, rounds: int, pending: tuple[str, ...]) -> None:
        self.phase = phase
        self.rounds = rounds
        self.pending = pending
        super().__init__(
            f"phase {phase} did not converge after {rounds} action rounds; still pending: "
            f"{', '.join(pending) or 'nothing'}. An action probably schedules itself forever; "
            f"make it stop, or raise max_phase_rounds if the work is really that deep."
        )


class UnknownEffectHandler(StateError):
    """A command emits an effect that no plugin handles. Effects are never dropped silently.

    Attributes:

    - `effect`: the effect's name.
    - `plugin`: the plugin whose command emitted it, or None.
    """

    def __init__(self, effect: str, plugin: str | None = None) -> None:
        self.effect = effect
        self.plugin = plugin
        super().__init__(
            f"effect {effect!r} has no registered handler{_where(plugin=plugin)}. Register one "
            f"with `registrar.register_effect(...)`; effects are never dropped silently."
        )


class UnknownActionHandler(StateError):
    """A command schedules an action that no plugin handles. Actions are never dropped.

    Attributes:

    - `action`: the action's name.
    - `plugin`: the plugin whose command scheduled it, or None.
    """

    def __init__(self, action: str, plugin: str | None = None) -> None:
        self.action = action
        self.plugin = plugin
        super().__init__(
            f"scheduled action {action!r} has no registered handler{_where(plugin=plugin)}. "
            f"Register one with `registrar.register_action(...)`; actions are never dropped."
        )


class VersionConflict(StateError):
    """A compare-and-set write found another version than the one it expected.

    Attributes:

    - `namespace`: the entry's namespace.
    - `key`: the entry's key.
    - `expected`: the version the write expected (`0`: that the entry does not exist).
    - `actual`: the version found, or None when there is no entry.
    """

    def __init__(self, namespace: str, key: str, expected: int, actual: int | None) -> None:
        self.namespace = namespace
        self.key = key
        self.expected = expected
        self.actual = actual
        found = "no record" if actual is None else f"version {actual}"
        super().__init__(
            f"record ({namespace!r}, {key!r}) expected version {expected} but found {found}. "
            f"Read it again and retry the write."
        )


class DecodeFailed(StateError):
    """A stored record or thread value no longer decodes into its declared type.

    A thread store's whole saved document that no longer decodes has `key="thread state"`
    and the thread id as `record`.

    Attributes:

    - `key`: the key (or what was stored) that does not decode.
    - `record`: which stored record it is (for a thread, its id).
    - `cause`: the decoding error (also the `__cause__`).
    - `revision`: set when the bytes are a thread's journal record of that revision,
      else None.
    """

    def __init__(
        self, key: str, record: str, cause: BaseException, *, revision: int | None = None
    ) -> None:
        self.key = key
        self.record = record
        self.cause = cause
        self.revision = revision
        super().__init__(
            f"stored value of key {key!r} (record {record!r}) does not decode into the "
            f"declared type: {cause_clause(cause)}. Migrate or delete the record, or restore "
            f"the old declaration."
        )
        self.__cause__ = cause


class JournalCorrupted(StateError):
    """A thread's stored journal was changed outside statekernel: a record lost, reordered,
    altered, inserted or forged, a head moved, or a snapshot altered.

    Loads and history reads raise it; `verify` reports it (`ok=False`, `first_divergence`
    the same revision). The message says to restore the store from a backup or to `fork`
    the thread from `revision - 1`. See [durability: a journal that cannot lose a
    record](durability.md#a-journal-that-cannot-lose-a-record).

    Attributes:

    - `thread_id`: the thread.
    - `revision`: the first revision that cannot be trusted; everything before it can (a
      `fork` from `revision - 1` copies only what is whole).
    - `problem`: what was found wrong.
    """

    def __init__(self, thread_id: str, revision: int, problem: str) -> None:
        self.thread_id = thread_id
        self.revision = revision
        self.problem = problem
        last_good = (
            f"fork the thread from its last good revision: "
            f"`await kernel.fork({thread_id!r}, {revision - 1}, <new thread id>)`"
            if revision > 1
            else "start the thread afresh (nothing of it before this revision is whole)"
        )
        verify = f"statekernel verify DB --thread {shlex.quote(thread_id)}"
        super().__init__(
            f"thread {thread_id!r} is damaged: its stored journal cannot be trusted from "
            f"revision {revision}: {problem}. It was changed outside statekernel (a bad "
            f"restore, a disk fault, a hand edit); nothing was loaded. Restore the store from "
            f"a backup, or {last_good}; `{verify}` checks every record."
        )


_GIVE_THE_KEY = (
    "`Kernel(..., chain_key=key)` (or `Agent`, `AgentTeam`), or on the command line "
    "`--chain-key-file PATH` or the STATEKERNEL_CHAIN_KEY environment variable (the key in hex), "
    "or `--app` naming an application built with it"
)


class ChainKeyMissing(StateError):
    """A thread's journal is chained with a key (a kernel given `chain_key=` started it),
    and the kernel reading it has none: nothing of it can be checked, so nothing is read.

    See [durability: a chain only the key holder can
    forge](durability.md#a-chain-only-the-key-holder-can-forge).

    Attributes:

    - `thread_id`: the thread.
    - `key_id`: the id (hex) of the key the thread was written with, which its head names.
    """

    def __init__(self, thread_id: str, key_id: str) -> None:
        self.thread_id = thread_id
        self.key_id = key_id
        super().__init__(
            f"thread {thread_id!r} is chained with a key (key id {key_id}) and this kernel "
            f"was given none, so it cannot check the thread: nothing was read. Give it the "
            f"key the thread was written with: {_GIVE_THE_KEY}."
        )


class ChainKeyMismatch(JournalCorrupted):
    """A thread's journal is chained with another key than the reading kernel's: the key
    id its head names is not this key's.

    Either the kernel was given the wrong key, or (when the key is right) the head was
    changed outside statekernel; either way nothing of the thread can be trusted, so it is
    a `JournalCorrupted` (`verify` reports it with `ok=False`), whose message names the key
    rather than a record. See [durability: a chain only the key holder can
    forge](durability.md#a-chain-only-the-key-holder-can-forge).

    Attributes (besides `JournalCorrupted`'s):

    - `stored_key_id`: the key id (hex) the thread's head names.
    - `key_id`: the id (hex) of this kernel's key.
    """

    def __init__(self, thread_id: str, revision: int, stored_key_id: str, key_id: str) -> None:
        self.thread_id = thread_id
        self.revision = revision
        self.stored_key_id = stored_key_id
        self.key_id = key_id
        self.problem = (
            f"its head names chain key id {stored_key_id}, and this kernel's key has id {key_id}"
        )
        StateError.__init__(
            self,
            f"thread {thread_id!r} is chained with another key than this kernel's: "
            f"{self.problem}; nothing was read. Give the kernel the key the thread was "
            f"written with: {_GIVE_THE_KEY}. If it is that key, the thread's head was changed "
            f"outside statekernel and the thread cannot be trusted: restore the store from a "
            f"backup.",
        )


class StoreError(StateError):
    """A store operation failed, or a value is over the size limit.

    Attributes:

    - `operation`: what the store was doing, in words (for example `"thread save"`).
    - `key`: the thread id, namespace or key concerned, or None.
    - `cause`: what the backend raised (also the `__cause__`).
    """

    def __init__(self, operation: str, cause: BaseException, *, key: str | None = None) -> None:
        self.operation = operation
        self.key = key
        self.cause = cause
        super().__init__(f"store {operation} failed{_where(key=key)}: {cause_text(cause)}")
        self.__cause__ = cause


class OutcomeUnknown(StoreError):
    """A write was sent and its answer lost: it may or may not have landed, and the store
    could not tell (yet). Read what the store holds before writing it again.

    A thread save that ends this way marks its thread: the run saves nothing more (its
    commits may be in the store already, and sending them again could apply them twice),
    and the thread's next run reads what the store holds. The PostgreSQL stores raise it
    when a call runs out of `call_timeout` after its write left, or when a broken
    connection's write cannot be traced by its id.

    Also a `StoreError`, with its attributes: `operation`, `key`, `cause`.
    """


class StoreNotOpened(StoreError):
    """A store could not be opened as asked. Nothing was read or written.

    Raised for no such file (opened read-only, none was made), a file or database that is
    not a statekernel store, tables of a schema version this one does not read as it is, a
    file on read-only media (or not writable by this user) opened for writing, a DSN that
    cannot be read, or a server that cannot be reached.

    Also a `StoreError`, with its attributes: `operation`, `key`, `cause`.
    """


class UnknownProfileKey(UnknownStateKey):
    """A profile read or write names a ProfileKey that no plugin of this kernel registered.

    Raised when `ctx.profile` is used with a `ProfileKey` that no plugin registered.

    Also an `UnknownStateKey`, so one `except` serves both kinds of key; its own message
    because the fix differs (`register_profile_key`, not `register_key`).

    Attributes:

    - `key`: the profile key string.
    """

    def __init__(self, key: str, known: tuple[str, ...] = ()) -> None:
        self.key = key
        self.plugin = None
        hint = f" Registered profile keys: {', '.join(sorted(known))}." if known else ""
        KeyError.__init__(
            self,
            f"profile key {key!r} is not registered with this kernel (or another class holds "
            f"that key string). Register it with `registrar.register_profile_key(...)` in a "
            f"plugin of this kernel.{hint}",
        )


class UnknownSchemaField(StateError, KeyError):
    """An update names a field the schema does not declare.

    Raised when `schema.command` names a field the schema does not declare.

    Also a `KeyError`.

    Attributes:

    - `schema`: the schema's name.
    - `field`: the field named.
    - `known`: the fields the schema declares.
    """

    def __init__(self, schema: str, field: str, known: Iterable[str]) -> None:
        self.schema = schema
        self.field = field
        self.known = tuple(known)
        super().__init__(
            f"{schema} has no field {field!r}; its fields are: {', '.join(self.known)}. "
            f"Fix the name, or declare the field on the schema class."
        )

    def __str__(self) -> str:  # KeyError would otherwise show the message quoted
        return str(self.args[0])


class UnknownUpdater(StateError, KeyError):
    """`StateUpdater.get(name)` was asked for a name nobody registered.

    Also a `KeyError`.

    Attributes:

    - `name`: the name asked for.
    - `known`: the names that are registered.
    """

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = tuple(known)
        super().__init__(
            f"no updater named {name!r}; known updaters: {', '.join(self.known)}. Fix the "
            f"name, or register it first with @StateUpdater.register({name!r})."
        )

    def __str__(self) -> str:  # KeyError would otherwise show the message quoted
        return str(self.args[0])


class UnknownRevision(StateError, LookupError):
    """A revision of a thread that its journal does not hold: never reached, or pruned.

    Raised when `state_at`, `fork` or `verify` asks for such a revision.

    Also a `LookupError`.

    Attributes:

    - `thread_id`: the thread.
    - `revision`: the revision asked for.
    - `held`: `(oldest, head)`, the revisions the journal holds, or None.
    """

    def __init__(self, thread_id: str, revision: int, *, held: tuple[int, int] | None) -> None:
        self.thread_id = thread_id
        self.revision = revision
        self.held = held
        if held is None:
            reach = "the thread has no saved history"
        else:
            reach = f"it holds revisions {held[0]} to {held[1]}"
        super().__init__(
            f"thread {thread_id!r} has no revision {revision}: {reach}. Older revisions are "
            f"gone once pruned; ask for one in that range (see kernel.history)."
        )


class ReplayFailed(StateError):
    """A journaled op could not be applied again: its key's `apply` raised.

    Raised when replaying a journaled op (a load, `state_at`) fails.

    Attributes:

    - `thread_id`: the thread.
    - `revision`: the revision of the op.
    - `key`: the key whose `apply` raised.
    - `cause`: what it raised.
    """

    def __init__(
        self, thread_id: str, revision: int, key: str, cause: BaseException, *, fix: str = ""
    ) -> None:
        self.thread_id = thread_id
        self.revision = revision
        self.key = key
        self.cause = cause
        fix = fix or (
            "The key's apply no longer accepts what it once did; restore its old behaviour, "
            "or migrate the thread."
        )
        super().__init__(
            f"thread {thread_id!r}, revision {revision}: replaying the update of key {key!r} "
            f"failed ({type(cause).__name__}: {cause}). {fix}"
        )


class InvalidToolArguments(StateError, ValueError):
    """A model called a `@tool` function with arguments its schema does not admit.

    It never reaches you from a run: the call fails, the model sees the message (every
    argument and what is wrong with it), so it can call again, and the run goes on.

    Also a `ValueError`.

    Attributes:

    - `tool`: the tool's name.
    - `problems`: tuples of argument and problem.
    """

    def __init__(self, tool: str, problems: tuple[tuple[str, str], ...]) -> None:
        self.tool = tool
        self.problems = problems
        listed = "; ".join(f"{where!r}: {problem}" for where, problem in problems)
        super().__init__(f"invalid arguments for tool {tool!r}: {listed}")


class ValueTooDeep(StateError, ValueError):
    """Data of any shape handed to the kernel nests dicts and lists deeper than it takes
    (`limit` levels: 100).

    Every hand such data passes copies, freezes, encodes, stores or sends it by recursion, so
    data that deep could not get through without running out of stack. It is measured where
    it is handed in and refused there, whole: nothing of it is kept, and nothing is cut
    short. Raised as itself for an outside `Decision`, a model request's `params`, a model's
    answer the API client cannot parse for its depth, and (as the cause of a gate's
    `HookFailed`) a `Suspend` ticket; its kinds `ToolArgumentsTooDeep` and
    `ToolResultTooDeep` name the tool call. See
    [tools: how deep data may nest](tools.md#how-deep-data-may-nest).

    Also a `ValueError`.

    Attributes:

    - `what`: the data refused, and where it was given.
    - `limit`: how many levels of nesting are allowed.
    """

    def __init__(self, what: str, limit: int, fix: str = "", *, plural: bool = False) -> None:
        self.what = what
        self.limit = limit
        fix = fix or "Nothing was kept. Pass flatter data."
        super().__init__(
            f"{what} {'are' if plural else 'is'} nested more than {limit} levels deep (dicts "
            f"and lists inside one another), deeper than the kernel copies, stores or sends. "
            f"{fix}"
        )


class ToolArgumentsTooDeep(ValueTooDeep):
    """A tool call's arguments, or a tool's parameter schema, nest dicts and lists deeper
    than the kernel takes (`limit` levels: 100).

    Raised when the `ToolCall` (or `ToolSpec`) is made, before anything holds it: by a
    model adapter reading the model's answer (so the run fails with it as its `error`, and
    the thread keeps everything committed before), by `agent.run` given such a message, or
    by your own code. Nothing of the call is kept, so nothing is stored half-way, and
    nothing of it is cut short either: the call is refused whole, never shortened.
    Arguments that deep could not be copied, encoded, stored or sent without running out
    of stack.

    A `ValueTooDeep` (so also a `ValueError`).

    Attributes:

    - `tool`: the tool's name.
    - `call_id`: the call's id (None for a tool's parameter schema).
    - `limit`: how many levels of nesting are allowed.
    - `what`: as for `ValueTooDeep`.
    """

    def __init__(self, tool: str, call_id: str | None, limit: int) -> None:
        self.tool = tool
        self.call_id = call_id
        if call_id is None:
            what = f"tool {tool!r}: its parameter schema"
            fix = "Flatten the schema (a shared part can be one `$defs` entry named by `$ref`)."
        else:
            what = f"tool call {call_id!r} of tool {tool!r}: its arguments"
            fix = (
                "Nothing of the call was kept. Pass flatter arguments (a deeply nested "
                "document can travel as one JSON string argument)."
            )
        super().__init__(what, limit, fix, plural=call_id is not None)


class ToolResultTooDeep(ValueTooDeep):
    """A tool's result nests dicts and lists deeper than the kernel takes (`limit` levels:
    100), as arguments may not.

    Raised when the `ToolResult` is made (and, as the cause of the gate's `HookFailed`, for
    a gate's `SetResult`). A tool that returns such a result fails its call as a tool that
    raised does: the model sees this error (`ToolResultTooDeep: ...`), the
    `ToolResult` in `RunResult.tool_results` carries it in `exception`, the command of its
    `ToolOutput` is not committed and its profile writes are dropped, and the run goes on.
    Nothing of the result is kept, and the thread keeps everything it held. A result that
    deep could not be frozen, encoded for the model or stored without running out of stack.
    See [tools: how deep data may nest](tools.md#how-deep-data-may-nest).

    A `ValueTooDeep` (so also a `ValueError`).

    Attributes:

    - `tool`: the tool's name.
    - `call_id`: the call's id.
    - `limit`: how many levels of nesting are allowed.
    - `what`: as for `ValueTooDeep`.
    """

    def __init__(self, tool: str, call_id: str, limit: int) -> None:
        self.tool = tool
        self.call_id = call_id
        super().__init__(
            f"tool call {call_id!r} of tool {tool!r}: its result",
            limit,
            "Nothing of the result was kept. Return flatter data (a deeply nested document "
            "can travel as one JSON string).",
        )


class InvalidName(StateError, ValueError):
    """An id or name no store can keep, refused where it is given.

    Every id and name ends up as text in a database (thread ids, run and agent names, team
    ids, topics, commit sources, key and plugin names, profile namespaces and keys), and
    two kinds of text cannot get there: a lone surrogate (UTF-8 cannot encode it) and a NUL
    character (PostgreSQL's text refuses it). The kernel and the bundled stores check every
    name their public calls take (`statekernel.lowlevel.check_name`), before anything is
    stored, so that no save fails later on a name given long before; a team also refuses
    an empty agent id or topic, and an agent id holding `/`. The message names the name,
    where in it the fault is, and what to give instead.

    Also a `ValueError`.

    Attributes:

    - `label`: what the name is (`"thread_id"`, `"agent name"`, ...).
    - `name`: the name given.
    - `index`: where in it the character no store can keep is, or None.
    """

    def __init__(
        self, label: str, name: str, problem: str, fix: str, *, index: int | None = None
    ) -> None:
        self.label = label
        self.name = name
        self.index = index
        shown = f"{_preview(name)} " if name else ""
        super().__init__(f"{label} {shown}{problem}. {fix}")


class NameNotAString(StateError, TypeError):
    """An id or name given as something other than a string.

    Raised where it is given, by the same checks as `InvalidName`
    (`statekernel.lowlevel.check_name`), before anything is stored.

    Also a `TypeError`.

    Attributes:

    - `label`: what the name is (`"thread_id"`, `"agent name"`, ...).
    - `name`: the object given.
    """

    def __init__(self, label: str, name: object) -> None:
        self.label = label
        self.name = name
        super().__init__(
            f"{label} must be a string, got {type(name).__name__} {_preview(name)}. Pass "
            f"the {label} as a str."
        )


class ModelCallFailed(StateError):
    """A model API refused a request, or kept failing after every retry.

    Raised for a 4xx other than 429, or a transient error (429, 5xx, timeout, connection)
    that outlasted every retry. The run fails with it; the message says what the server
    answered and what to check.

    Attributes:

    - `model`: the model name.
    - `status`: the HTTP status, or None when there was no response (a connection error
      or a timeout).
    - `detail`: what the server said.
    """

    def __init__(self, model: str, status: int | None, detail: str, fix: str) -> None:
        self.model = model
        self.status = status
        self.detail = detail
        where = f"HTTP {status}" if status is not None else "no response"
        super().__init__(f"model {model!r} call failed ({where}): {detail}. {fix}")


class UnknownThread(UnknownRevision):
    """A thread the kernel's ThreadStore (or, without one, its memory) does not hold.

    Raised when `history`, `state_at`, `verify`, `fork` (its source) or `get_state` asks
    for a thread that no save made. A thread whose run has not saved yet is not held either.

    Also an `UnknownRevision` (of revision 0, with nothing held), which is what `state_at`,
    `verify` and `fork` raised for such a thread before: code catching that still does.

    Attributes:

    - `thread_id`: the thread asked for.
    """

    def __init__(self, thread_id: str, *, fix: str = "") -> None:
        fix = fix or "Check the id, and that this kernel reads the store the thread was saved in."
        StateError.__init__(
            self, f"thread {thread_id!r} does not exist: no run has saved it. {fix}"
        )
        self.thread_id = thread_id
        self.revision = 0
        self.held = None


class UnknownAgent(StateError, LookupError):
    """An agent id the team's roster does not hold.

    Raised when a team is given an agent id its roster does not hold; the message lists the
    ones it does.

    Also a `LookupError`.

    Attributes:

    - `agent_id`: the id asked for.
    - `team_id`: the team.
    """

    def __init__(self, agent_id: str, team_id: str, known: Iterable[str]) -> None:
        self.agent_id = agent_id
        self.team_id = team_id
        names = sorted(known)
        shown = ", ".join(repr(n) for n in names[:10]) + (", ..." if len(names) > 10 else "")
        super().__init__(
            f"team {team_id!r} has no agent {agent_id!r}; its agents are [{shown}]. Agent ids "
            f"are what team.spawn returned (see team.list_agents())."
        )


class InvalidOption(StateError, ValueError):
    """A value a constructor's option (or a call's setting) cannot take, refused where it
    is given.

    Every numeric, choice and kind-of-object option the kernel's public constructors take
    (`Kernel`, `Agent`, `AgentTeam`, `Role`, `Retention`, `ProfileAccess`, the OpenAI
    model, ...) is checked by the same rules, so that one kind of value is refused
    everywhere or nowhere: a bool is never taken for an int, a number of seconds is
    finite. The message names the option, what was given and what it takes.

    Also a `ValueError`.

    Attributes:

    - `option`: the option's name (`"snapshot_every"`, ...).
    - `value`: the value given.
    - `expected`: what the option takes, in words.
    """

    def __init__(self, option: str, value: object, expected: str, fix: str = "") -> None:
        self.option, self.value, self.expected = option, value, expected
        message = f"{option} must be {expected}, got {_preview(value)}."
        super().__init__(f"{message} {fix}" if fix else message)


class OptionNotOfType(InvalidOption, TypeError):
    """An option given an object of a kind it does not take (a bool or a string where an
    int goes, a non-callable where a callable goes).

    An `InvalidOption`, so also a `ValueError` (what code written before the two were told
    apart catches), and a `TypeError`. Attributes: those of `InvalidOption`.
    """
