"""`checked_config` gives what `FileConfig.model_validate` gives, value for value and error for
error, while checking a run's flags and `OSPREY_*` values (top-level keys, whole sections) without
building the whole file schema: a one-turn `osprey agent` (the real CLI, in a subprocess) never
builds it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from osprey.config.schema import FileConfig, checked_config
from osprey.testing.model_server import ModelServer, Reply

VALID: list[dict[str, Any]] = [
    {},
    {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:8080/v1"},
    {"provider": "anthropic", "effort": "high", "max_turns": 3, "max_tokens": 100, "approval_policy": "never", "replay_file": "r.jsonl"},
    {"model": None, "max_turns": None},
    {"provider": "openai", "sandbox": {}},
    {"sandbox": {"enabled": True, "network": False}, "tool_results": {"max_chars": 1000}, "model": "m"},
    {"memory": {"provider": "none"}, "retry": {"delays": [1, 2]}},
    {"providers": {"openai": {"model": "x"}}},  # not a section: the whole schema checks it
    {"mcp_servers": {}},
]

INVALID: list[dict[str, Any]] = [
    {"provider": "nobody"},
    {"base_url": "127.0.0.1:8080"},
    {"max_turns": 0},
    {"unknown": 1},
    {"sandbox": {"enabled": "perhaps"}},
    {"sandbox": {"bogus": 1}, "model": "m"},
    {"sandbox": "on"},
    {"model": 3, "tool_results": {"max_chars": -1}},
]


@pytest.mark.parametrize("data", VALID)
def test_it_gives_what_the_whole_schema_gives(data: dict[str, Any]) -> None:
    checked, whole = checked_config(data), FileConfig.model_validate(data)
    assert type(checked) is FileConfig
    assert checked == whole and checked.model_fields_set == whole.model_fields_set
    assert checked.model_dump() == whole.model_dump()


@pytest.mark.parametrize("data", INVALID)
def test_a_problem_is_reported_by_the_whole_schema(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as whole:
        FileConfig.model_validate(data)
    with pytest.raises(ValidationError) as checked:
        checked_config(data)
    assert checked.value.title == "FileConfig"
    assert checked.value.errors() == whole.value.errors()


RUNNER = """
import json, sys
from osprey.cli import main
try:
    main(sys.argv[1:], prog_name="osprey")
except SystemExit as exc:
    status = exc.code
from osprey.config.schema import FileConfig
sys.stderr.write("BUILT " + json.dumps(bool(FileConfig.__pydantic_complete__)) + "\\n")
sys.exit(status)
"""


def test_a_one_turn_session_builds_no_file_schema(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    workspace.mkdir()
    env = dict(os.environ, OSPREY_HOME=str(home), OPENAI_API_KEY="test-key", OSPREY_MAX_TURNS="5")
    with ModelServer([Reply.text("done")]) as server:
        proc = subprocess.run([sys.executable, "-c", RUNNER, "agent", "-C", str(workspace), "--provider", "openai", "--model", "test-model",
                               "--base-url", server.base_url, "Say done."], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["final_text"] == "done"
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("BUILT ")]
    assert json.loads(line[len("BUILT "):]) is False
