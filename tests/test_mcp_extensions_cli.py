"""`osprey extensions` lists the declared MCP servers without starting them: where each was
declared, its transport, what it runs (an HTTP server's URL without credentials or query), whether
it is trusted, and the skipped ones with why; `--json` carries the same as `mcp_servers`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SERVER = Path(__file__).parent / "mcp_servers" / "sdk_server.py"


def run(workspace: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}, "OSPREY_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "osprey", "extensions", "-C", str(workspace), *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_osprey_extensions_lists_the_declared_mcp_servers_without_starting_them(tmp_path: Path) -> None:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".git").mkdir(parents=True)
    home.mkdir()
    started = tmp_path / "started"
    (home / "config.toml").write_text(
        "[mcp_servers.tester]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(SERVER))}, '--start-once', {json.dumps(str(started))}]\n"
        "[mcp_servers.remote]\n"
        "url = 'https://someone:secret@127.0.0.1:8443/mcp?token=hidden'\n"
        "[mcp_servers.off]\n"
        "command = 'never-run'\n"
        "enabled = false\n")
    (workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"theirs": {"command": "npx", "args": ["-y", "their-server"]}}}))

    shown = run(workspace, home)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "MCP servers (`osprey mcp list` starts them and lists their tools):" in out
    assert f"runs      mcp_server           tester  (user, stdio) · trusted\n          runs: {sys.executable} {SERVER} --start-once {started}" in out
    assert "runs      mcp_server           remote  (user, http) · trusted\n          url: https://127.0.0.1:8443/mcp?…" in out
    assert "secret" not in out and "hidden" not in out
    skipped = {line.split()[2]: out.split(line, 1)[1].splitlines()[1] for line in out.splitlines() if line.startswith("SKIPPED   mcp_server")}
    assert set(skipped) == {"off", "theirs"}
    assert all(why.startswith("          why: ") and len(why) > len("          why: ") for why in skipped.values())
    assert "SKIPPED   mcp_server           theirs  (mcp.json)" in out
    assert not started.exists()  # listing never starts a server

    report: dict[str, Any] = json.loads(run(workspace, home, "--json").stdout)
    servers = {s["name"]: s for s in report["mcp_servers"]}
    assert servers["tester"] == {"name": "tester", "origin": "user", "status": "runs", "transport": "stdio",
                                 "runs": f"{sys.executable} {SERVER} --start-once {started}", "trusted": True, "reason": None}
    assert servers["remote"]["runs"] == "https://127.0.0.1:8443/mcp?…"
    assert servers["theirs"]["status"] == "skipped" and servers["theirs"]["origin"] == "mcp.json" and servers["theirs"]["reason"]
    assert servers["off"]["status"] == "skipped" and servers["off"]["transport"] is None
    assert not started.exists()


def test_without_mcp_servers_there_is_no_mcp_section(tmp_path: Path) -> None:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".git").mkdir(parents=True)
    home.mkdir()
    shown = run(workspace, home)
    assert shown.returncode == 0, shown.stderr
    assert "MCP servers" not in shown.stdout
    assert json.loads(run(workspace, home, "--json").stdout)["mcp_servers"] == []
