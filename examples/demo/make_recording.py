"""Re-create `session.jsonl`, the demo's recorded session.

The turns are scripted and served by Osprey's loopback model server
(`osprey.testing.model_server`); `osprey agent --record` captures them exactly as
it would capture a real provider's turns. Run from the repository root:

    .venv/bin/python examples/demo/make_recording.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from osprey.testing.model_server import ModelServer, Reply, ToolCall

HERE = Path(__file__).resolve().parent
PROMPT = "The test suite fails. Find the bug and fix it."

SCRIPT = [
    Reply.tool_calls(
        [ToolCall("tree", {}), ToolCall("bash", {"command": "python3 -m unittest -q 2>&1 | tail -n 15"})],
        text="I'll look at the project and run its tests first.",
    ),
    Reply.tool_calls(
        [ToolCall("grep", {"pattern": "def total_value", "glob": "*.py"}), ToolCall("read_file", {"path": "inventory.py"})],
        text="test_total_value fails: 2*10 + 1*5 should be 25. Let me find total_value.",
    ),
    Reply.tool_call(
        "edit_file",
        {"path": "inventory.py", "old_string": "total += price + quantity", "new_string": "total += price * quantity"},
        text="total_value adds price and quantity instead of multiplying them.",
    ),
    Reply.tool_call("bash", {"command": "python3 -m unittest -q"}),
    Reply.text("Fixed `total_value` in inventory.py: it added price and quantity instead of multiplying them. All 3 tests pass now."),
]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp, ModelServer(SCRIPT) as server:
        workspace = Path(tmp) / "workspace"
        shutil.copytree(HERE / "workspace", workspace)
        env = dict(os.environ, OPENAI_API_KEY="scripted", OSPREY_HOME=str(Path(tmp) / "home"))
        osprey = Path(sys.executable).with_name("osprey")
        cmd = [str(osprey), "agent", "--provider", "openai", "--model", "scripted-demo", "--base-url", server.base_url,
               "--yolo", "-C", str(workspace), "--record", str(HERE / "session.jsonl"), PROMPT]
        result = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
        server.assert_clean()
        return result.returncode


if __name__ == "__main__":
    sys.exit(main())
