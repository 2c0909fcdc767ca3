"""`retrieve` in a child session: the child keeps its own cut results, under its own session id,
and retrieves from them; the parent's directory holds none of them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from session_harness import FAST_RETRY, Harness

from osprey.config import load_settings
from osprey.retrieve.store import results_dir
from osprey.session.core import Session, SessionOptions
from osprey.testing.model_server import ModelServer, Reply
from osprey.tools.base import ChildAgent, ChildRequest, Invocation, StaticTools, Tool, ToolContext

NEEDLE = "ERROR shard_7781: replica lag exceeded 9000 ms"
GEN = f"for i in range(3000):\n    print({NEEDLE!r} if i == 1400 else 'INFO shard_%d: replica healthy' % i)\n"


async def test_a_child_keeps_and_retrieves_its_own_outputs(tmp_path: Path) -> None:
    harness = Harness.under(tmp_path, {"gen.py": GEN}, git=True)
    agents: list[ChildAgent] = []

    async def run(call: Invocation, ctx: ToolContext) -> str:
        assert ctx.spawn is not None
        agents.append(await ctx.spawn(ChildRequest(task="Find the lagging shard.", name="child", tools=["bash", "retrieve"])))
        end = await agents[0].wait()
        return f"{end.outcome}: {end.final_text}"

    spawn = Tool("spawn_child", "Start a child.", {"type": "object", "properties": {}}, run=run)
    script = [Reply.tool_call("spawn_child", {}), Reply.tool_call("bash", {"command": f"{sys.executable} gen.py"}),
              Reply.tool_call("retrieve", {"handle": "r1", "query": "replica lag exceeded"}), Reply.text("shard 7781"), Reply.text("all done")]
    with ModelServer(script) as server:
        settings = load_settings(harness.workspace, {"provider": "openai", "model": "m", "base_url": server.base_url, "approval_policy": "never",
                                                     "tool_results": {"max_chars": 5000}},
                                 {"OSPREY_HOME": str(harness.home), "OPENAI_API_KEY": "unused"})
        session = Session(SessionOptions(settings=settings.model_copy(update={"retry": FAST_RETRY})), emit=lambda e: None,
                          tool_sources=[StaticTools("spawner", [spawn])])
        async with session:
            end = await session.submit("Delegate.")
            assert "retrieve" in session.tool_names()
        requests = list(server.requests)
    assert end.outcome == "Completed" and end.final_text == "all done"
    child_id = agents[0].agent_id
    assert child_id != session.session_id
    assert (results_dir(harness.home, child_id) / "r1").is_file()
    assert not results_dir(harness.home, session.session_id).exists()
    # The child's third request carries its bash result (cut, with the handle) and its retrieve result.
    tool_texts = [m["content"] for m in requests[3].body["messages"] if m.get("role") == "tool"]
    assert tool_texts[0].rstrip().endswith("retrieve handle: r1") and NEEDLE not in tool_texts[0]
    assert NEEDLE in tool_texts[1].split("\n[2]")[0], json.dumps(tool_texts[1])[:500]
