"""In a --sandbox session the programs of project hooks and tools are read-only in the lane, and a
rewrite from the host side is refused when the hook would run: the model cannot get code it wrote
run on the host through a trusted hook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from helpers import require_docker

from osprey.config import SandboxSettings
from osprey.testing.model_server import ModelServer, Reply
from osprey.toolservice.lanes import protected_paths

GUARD = "#!/bin/sh\ncat >/dev/null\necho original >> {log}\nexit 0\n"


def workspace_with_hooks(tmp_path: Path) -> tuple[Path, Path, Path]:
    workspace = tmp_path.resolve() / "ws"
    (workspace / ".git").mkdir(parents=True)
    (workspace / ".claude" / "hooks").mkdir(parents=True)
    (workspace / ".osprey").mkdir()
    log = tmp_path.resolve() / "guard.log"
    (workspace / ".claude" / "hooks" / "guard.sh").write_text(GUARD.format(log=log))
    (workspace / ".osprey" / "hooks.toml").write_text(
        "[[hooks.PreToolUse]]\nmatcher = 'bash'\n[[hooks.PreToolUse.hooks]]\ncommand = 'sh .claude/hooks/guard.sh'\n")
    return workspace, log, tmp_path.resolve() / "rewritten-code-ran"


def test_a_lane_sees_the_files_hooks_and_tools_name_read_only(tmp_path: Path) -> None:
    workspace = tmp_path.resolve() / "ws"
    home = tmp_path.resolve() / "home"
    for directory in (workspace / ".git", workspace / ".claude" / "hooks", workspace / "scripts", workspace / "tools", home / "tools"):
        directory.mkdir(parents=True)
    for name in ("scripts/guard.sh", "scripts/lint.py", "tools/run.sh", "scripts/mine.sh", "scripts/unrelated.sh"):
        (workspace / name).write_text("echo\n")
    (workspace / ".osprey").mkdir()
    (workspace / ".osprey" / "hooks.toml").write_text(
        "[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ncommand = 'sh \"$OSPREY_PROJECT_DIR\"/scripts/guard.sh && python3 --flag=scripts/lint.py'\n")
    (workspace / ".osprey" / "tools").mkdir()
    (workspace / ".osprey" / "tools" / "t.toml").write_text('name = "t"\ndescription = "d"\ncommand = ["sh", "../../tools/run.sh"]\n')
    (home / "hooks.toml").write_text("[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ncommand = 'bash scripts/mine.sh'\n")
    paths = protected_paths(str(workspace), SandboxSettings(enabled=True), home)
    for name in (".claude/hooks", "scripts/guard.sh", "scripts/lint.py", "tools/run.sh", "scripts/mine.sh", ".osprey", ".git"):
        assert str(workspace / name) in paths, name
    assert str(workspace / "scripts" / "unrelated.sh") not in paths
    assert protected_paths(str(workspace), SandboxSettings(enabled=True, protect_git=False), home) == []


def test_the_model_cannot_get_a_rewritten_hook_script_run_on_the_host(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    require_docker()
    workspace, log, mark = workspace_with_hooks(tmp_path)
    env = dict(osprey_env, TESTCONTAINERS_RYUK_DISABLED="true")
    trusted = subprocess.run([sys.executable, "-m", "osprey", "extensions", "-C", str(workspace), "trust", "hooks", "--yes"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert trusted.returncode == 0, trusted.stderr
    evil = f"#!/bin/sh\ntouch {mark}\n"
    script = [
        Reply.tool_call("write_file", {"path": ".claude/hooks/guard.sh", "content": evil}),
        Reply.tool_call("bash", {"command": f"printf '%s' '{evil}' > .claude/hooks/guard.sh; echo status=$?"}),
        Reply.tool_call("bash", {"command": "mv .claude/hooks .claude/old; mkdir -p .claude/hooks; cp /dev/null .claude/hooks/guard.sh; echo moved=$?"}),
        # While the model "thinks", the script is rewritten from the host side.
        Reply.hold(1, then=Reply.tool_call("bash", {"command": "echo after"})),
        Reply.text("done"),
    ]
    with ModelServer(script) as server:
        proc = subprocess.Popen([sys.executable, "-m", "osprey", "agent", "--sandbox", "-C", str(workspace), "--provider", "openai",
                                 "--model", "m", "--base-url", server.base_url, "--yolo", "Rewrite the guard."],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(proc.communicate(timeout=300)[0]), daemon=True)
        reader.start()
        assert server.wait_held(1, timeout=240), "the session never reached its fourth model turn"
        (workspace / ".claude" / "hooks" / "guard.sh").write_text(evil)  # a rewrite the lane could not make
        server.release()
        reader.join(300)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in out[0].splitlines() if line.startswith("{")]
    results = [e for e in events if e["type"] == "tool_result"]
    assert len(results) == 4, results
    wrote, printed, moved, after = results
    assert not wrote["ok"] and "read-only" in wrote["output"].lower(), wrote
    assert "status=0" not in printed["output"] and "read-only" in printed["output"].lower(), printed
    assert "moved=0" not in moved["output"], moved
    assert not after["ok"] and "was not run" in after["output"] and ".claude/hooks/guard.sh" in after["output"], after
    assert ".claude/hooks/guard.sh, which changed since it was trusted" in after["output"]
    assert not mark.exists(), "code the model wrote ran on the host"
    # The original guard ran before each of the two earlier bash calls, and never after the rewrite.
    assert log.read_text().split() == ["original", "original"]
    assert os.path.isdir(workspace / ".claude" / "hooks")
