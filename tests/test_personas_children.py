"""Child agents and personas: a child runs as a spawnable persona, with its `tools` as an allowlist
inside the parent's (its toolset ignored); a persona that is not spawnable, or lists a tool the
parent does not have, is refused when the child is asked for."""

from __future__ import annotations

from pathlib import Path

import pytest
from session_harness import Harness
from test_session_parts import Source, server_settings, spawner

from osprey.events import Event, SessionStart, ToolResultEvent
from osprey.session.core import Session
from osprey.testing.model_server import ModelServer, Reply
from osprey.tools.base import ChildAgent


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    h = Harness.under(tmp_path, {"notes.txt": "alpha\n"}, git=True)
    personas = h.workspace / ".osprey" / "personas"
    personas.mkdir(parents=True)
    (personas / "reader.md").write_text("---\nname: reader\nspawnable: true\ntools: [read_file, grep]\ntoolset: nothing-like-this\n---\n\n"
                                        "Read what you are asked to read and report it.\n")
    (personas / "grabby.md").write_text("---\nname: grabby\nspawnable: true\ntools: [read_file, teleport]\n---\n\nTake everything.\n")
    return h


async def test_a_child_runs_as_a_spawnable_persona_with_its_tools(harness: Harness) -> None:
    agents: list[ChildAgent] = []
    events: list[Event] = []
    source = Source("spawner", [spawner(1, "Read the notes.", agents, persona="reader")])
    script = [Reply.tool_call("spawn_children", {}), Reply.tool_call("read_file", {"path": "notes.txt"}),
              Reply.text("child done"), Reply.text("all done")]
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server), emit=events.append, tool_sources=[source])
        async with session:
            end = await session.submit("Delegate.")
        requests = server.requests
    assert end.outcome == "Completed"
    [child_start] = [e for e in events if isinstance(e, SessionStart) and e.agent_id is not None]
    assert child_start.persona == "reader"
    assert "read_file" in child_start.tools and "grep" in child_start.tools
    assert not {"write_file", "edit_file", "bash", "spawn_children"} & set(child_start.tools), child_start.tools
    child_request = requests[1].body
    assert "Read what you are asked to read and report it." in str(child_request["messages"][0]["content"])


@pytest.mark.parametrize(("persona", "why"), [("architect", "not spawnable"), ("grabby", "teleport"), ("nobody", "nobody")])
async def test_a_persona_a_child_cannot_run_as_is_refused(harness: Harness, persona: str, why: str) -> None:
    agents: list[ChildAgent] = []
    events: list[Event] = []
    source = Source("spawner", [spawner(1, "Plan it.", agents, persona=persona)])
    with ModelServer([Reply.tool_call("spawn_children", {}), Reply.text("could not delegate")]) as server:
        session = Session(server_settings(harness, server), emit=events.append, tool_sources=[source])
        async with session:
            end = await session.submit("Delegate.")
    assert end.outcome == "Completed" and not agents
    [result] = [e for e in events if isinstance(e, ToolResultEvent)]
    assert not result.ok and why in result.output, result.output
