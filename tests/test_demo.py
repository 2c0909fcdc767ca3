"""The README's demo: the recorded session fixes the example workspace through the ToolService."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import REPO, require_docker

DEMO = REPO / "examples" / "demo"


def osprey_bin() -> str:
    return str(Path(sys.executable).with_name("osprey"))


def test_replayed_demo_fixes_the_bug(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    workspace = tmp_path / "workspace"
    shutil.copytree(DEMO / "workspace", workspace)
    before = subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd=workspace, capture_output=True)
    assert before.returncode != 0

    run = subprocess.run(
        [osprey_bin(), "agent", "--replay", str(DEMO / "session.jsonl"), "--yolo", "-C", str(workspace), "The test suite fails. Find the bug and fix it."],
        capture_output=True, text=True, env=osprey_env, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert events[0]["type"] == "session_start" and events[0]["tool_service"] == "local"
    assert events[-1]["outcome"] == "Completed" and events[-1]["exit_status"] == 0
    used = {e["name"] for e in events if e["type"] == "tool_call"}
    assert {"bash", "grep", "read_file", "edit_file"} <= used
    assert all(e["ok"] for e in events if e["type"] == "tool_result" and e["name"] != "bash")
    bash_results = [e for e in events if e["type"] == "tool_result" and e["name"] == "bash"]
    assert [e["ok"] for e in bash_results] == [True, True]  # `| tail` hides the first run's failure status

    after = subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd=workspace, capture_output=True)
    assert after.returncode == 0, after.stderr
    assert "price * quantity" in (workspace / "inventory.py").read_text()


def test_demo_script_runs_end_to_end_in_a_lane() -> None:
    """scripts/demo as a user runs it (the install step is quick when already installed)."""
    require_docker()
    run = subprocess.run([str(REPO / "scripts" / "demo")], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "the tools run in a sandbox lane" in run.stdout
    assert '"tool_service":"lane"' in run.stdout
    assert "+        total += price * quantity" in run.stdout


def test_demo_script_says_when_it_falls_back_to_the_host(tmp_path: Path) -> None:
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")
    run = subprocess.run([str(REPO / "scripts" / "demo")], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "falling back to the local dispatcher" in run.stdout
    assert '"tool_service":"local"' in run.stdout
    assert "+        total += price * quantity" in run.stdout
