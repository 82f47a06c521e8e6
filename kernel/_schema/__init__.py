"""Schema-style state: a whole state declared as one pydantic model or TypedDict.

Jianmu and EvoFabric users declare their state as one class whose fields carry `Annotated`
metadata -- a reducer (`operator.add`, `"append_messages"`), an `Ephemeral` reset scope -- and
write partial updates as dicts. `StateSchema` compiles such a class into ordinary `StateKey`
classes, one per field, plus a plugin that registers them. Compiling rather than wrapping is
the point: after compilation nothing is special, so merge, atomic commit, conflicts, replay and
thread persistence treat schema fields exactly like hand-written keys, and the two styles mix
freely in one kernel.

What the compilation decides, per field, once (so mistakes fail at import time, naming the
field):
- how an update merges: the reducer, or overwrite when there is none;
- how concurrent writers merge: EXCLUSIVE, unless the field says `Commutative()` (a reducer
  alone is no promise that order does not matter: `operator.add` on lists is not commutative);
- how the value is held: a list under an appending reducer becomes a `Vector`, so an append
  costs O(appended) instead of a copy of the whole list, while `view()` still hands back the
  declared list;
- when the value resets: `Ephemeral("run")` fields are run-scoped keys (the kernel resets those
  at every run start), `"step"` and `"call"` fields are cleared by the plugin's STEP_START and
  BEFORE_INFERENCE hooks, through the normal commit path.
"""
