"""Shared and profile state: typed entries kept in a ProfileStore, outside the snapshot.

Run and thread state live in the snapshot engine, where every change is merged and
committed by the loop. Some state cannot live there: a team's shared notes read by a parent
and its child agents in other threads, a user's locale read by every agent. Such an entry is
named by a `ProfileKey` (its namespace and value type) plus a key string (a `StateScope`
such as `"parent_thread::p1"`, or an owner such as `"alice"`), and it lives in an async
`ProfileStore`.

Stores deal in JSON-compatible builtins only, so any backend (memory, SQLite, later
PostgreSQL) stays simple and every process or language can read the rows. Typing happens
here, in `ProfileAccess`: a value is checked against its key's declared type *before*
anything is written (what was written can always be read back), and a stored entry that no
longer fits its declaration fails with `DecodeFailed` for that entry only.

Hooks are re-run when they lose an exclusive conflict, and tool gates are re-evaluated at
will, so hooks must not write to the store directly. The engine hands them a
`BufferedProfileAccess` (writes are recorded, applied once after the hook's command commits)
or a `ReadOnlyProfileAccess` (gates). Both are `ProfileAccess` subclasses, so a hook author
types `ctx.profile` as `ProfileAccess` whatever the engine gave.
"""
