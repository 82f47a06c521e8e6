"""The journal, as a user meets it: history, time travel, a fork, an outside fix, verify.

An agent keeps notes in a thread over two runs on a SQLite file. Then we read the thread's
history, look at the state as it was after an earlier revision, fork the thread from there,
correct the original from outside any run, and check that replaying the journal still gives
what was stored.

Run: .venv/bin/python docs/examples/history.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from statekernel import (
    Agent,
    InferenceResponse,
    KeyScope,
    Phase,
    PhaseContext,
    Plugin,
    PluginRegistrar,
    ScriptedModel,
    StateCommand,
    StateKey,
    ToolCall,
    ToolOutput,
)
from statekernel.stores import SqliteThreadStore


class Notes(StateKey[tuple[str, ...], str]):
    """What the agent wrote down, one note per tool call."""

    key = "example.notes"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: tuple[str, ...], update: str) -> tuple[str, ...]:
        return (*value, update)


class Visits(StateKey[int, int]):
    key = "example.visits"
    scope = KeyScope.THREAD

    @staticmethod
    def apply(value: int, update: int) -> int:
        return value + update


class Notebook(Plugin):
    id = "notebook"

    def register(self, registrar: PluginRegistrar) -> None:
        registrar.register_key(Notes)
        registrar.register_key(Visits)
        registrar.register_phase_hook(Phase.RUN_START, self.count_visit)

    def count_visit(self, ctx: PhaseContext) -> StateCommand:
        return StateCommand().update(Visits, 1)


def note(arguments: dict[str, str], ctx: PhaseContext) -> ToolOutput:
    return ToolOutput("noted", StateCommand().update(Notes, arguments["text"]))


def writes(text: str) -> list[InferenceResponse]:
    call = ToolCall(f"call-{text}", "note", {"text": text})
    return [InferenceResponse(tool_calls=(call,)), InferenceResponse(text=f"I noted {text!r}.")]


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        async with SqliteThreadStore(Path(folder) / "threads.db") as store:
            model = ScriptedModel([*writes("buy milk"), *writes("call mum")])
            agent = Agent([Notebook()], model, {"note": note}, thread_store=store)
            await agent.run("errands", ["remember to buy milk"])
            await agent.run("errands", ["and to call mum"])
            kernel = agent.kernel

            print("history of 'errands':")
            for record in await kernel.history("errands"):
                keys = sorted({op.key for op in record.ops})
                phase = record.phase or "outside a phase"
                print(f"  r{record.revision} {record.run_id} {phase}: {record.sources} {keys}")

            first_note = next(
                record.revision
                for record in await kernel.history("errands")
                if any(op.key == Notes.key for op in record.ops)
            )
            then = await kernel.state_at("errands", first_note)
            print(f"notes right after revision {first_note}: {then.get(Notes)}")

            await kernel.fork("errands", first_note, "errands-draft")
            draft = await kernel.state_at("errands-draft", first_note)
            print(f"the fork 'errands-draft' starts from: {draft.get(Notes)}")

            revision = await kernel.update_state(
                "errands", StateCommand().update(Notes, "buy bread too")
            )
            fixed = await kernel.state_at("errands", revision)
            print(f"after an outside update (revision {revision}): {fixed.get(Notes)}")

            report = await kernel.verify("errands")
            print(f"verify: ok={report.ok}, head revision {report.revision}")
            assert report.ok and fixed.get(Notes) == ("buy milk", "call mum", "buy bread too")
            assert draft.get(Notes) == ("buy milk",)


if __name__ == "__main__":
    asyncio.run(main())
