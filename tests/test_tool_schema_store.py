"""The built-in tools' stored JSON schemas are what their input models generate, so a session
sends the same schemas while building none of those models at start: a one-turn session (the
real CLI, in a subprocess) has built no tool input model, and a tool's model is built, and
validates, at the tool's first call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from osprey.testing.model_server import ModelServer, Reply
from osprey.tools import schema_store
from osprey.tools.base import ToolInput, generate_schema, model_schema
from osprey.tools.stored_schemas import SCHEMAS

RUNNER = """
import json, sys
from osprey.cli import main
try:
    main(sys.argv[1:], prog_name="osprey")
except SystemExit as exc:
    status = exc.code
from osprey.tools.base import ToolInput
models, pending = {}, list(ToolInput.__subclasses__())
while pending:
    model = pending.pop()
    models[f"{model.__module__}.{model.__qualname__}"] = bool(model.__pydantic_complete__)
    pending.extend(model.__subclasses__())
sys.stderr.write("TOOL_MODELS " + json.dumps(models) + "\\n")
sys.exit(status)
"""


def test_the_stored_schemas_are_what_the_models_generate_now() -> None:
    # A mismatch: run `python -m osprey.tools.schema_store` and review the change.
    assert SCHEMAS == schema_store.generated()
    assert len(SCHEMAS) >= 15 and "osprey.tools.builtin.ReadFileInput" in SCHEMAS


def test_a_model_outside_the_store_gets_its_schema_generated() -> None:
    class _Elsewhere(ToolInput):
        path: str

    assert f"{_Elsewhere.__module__}.{_Elsewhere.__qualname__}" not in SCHEMAS
    assert model_schema(_Elsewhere) == json.loads(generate_schema(_Elsewhere))


def run_cli(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, bool]]:
    proc = subprocess.run([sys.executable, "-c", RUNNER, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("TOOL_MODELS ")]
    return proc, json.loads(line[len("TOOL_MODELS "):])


def test_a_session_builds_a_tools_input_model_at_its_first_call_only(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    workspace.mkdir()
    (workspace / "notes.txt").write_text("one\ntwo\n")
    env = dict(os.environ, OSPREY_HOME=str(home), OPENAI_API_KEY="test-key")
    agent = ["agent", "-C", str(workspace), "--provider", "openai", "--model", "test-model"]
    with ModelServer([Reply.text("done")]) as server:
        proc, built = run_cli(env, *agent, "--base-url", server.base_url, "Say done.")
    assert proc.returncode == 0, proc.stderr
    assert "read_file" in json.loads(proc.stdout.splitlines()[0])["tools"]
    assert "osprey.tools.builtin.ReadFileInput" in built and [name for name, done in built.items() if done] == []
    # An invalid call is refused by the model built at that call; a valid one runs.
    with ModelServer([Reply.tool_call("read_file", {"path": "notes.txt", "bogus": 1}), Reply.tool_call("read_file", {"path": "notes.txt"}),
                      Reply.text("read it")]) as server:
        proc, built = run_cli(env, *agent, "--base-url", server.base_url, "Read notes.txt.")
        server.assert_clean()
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines() if '"tool_result"' in line]
    assert [r["ok"] for r in results] == [False, True] and "bogus" in results[0]["output"] and "two" in results[1]["output"]
    assert [name for name, done in built.items() if done] == ["osprey.tools.builtin.ReadFileInput"]
