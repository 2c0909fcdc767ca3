"""Custom tools learn where the workspace is: `OSPREY_PROJECT_DIR` and `OSPREY_CWD`, as paths valid
where the tool runs (on the host, or in the sandbox lane), so a tool can read a relative path the
model gives it. End to end through `osprey agent` with the loopback model server, and the tool
itself with a real program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import require_docker
from test_custom_tools import call, manifest, script

from osprey.extensions.custom_tools import custom_tool
from osprey.testing.model_server import ModelServer, Reply
from osprey.testing.model_server import ToolCall as Call
from osprey.tools.base import ToolContext

OSPREY = str(Path(sys.executable).with_name("osprey"))

# Prints where it runs and what the two variables say, then reads the model's relative path.
WHERE = """#!/usr/bin/env python3
import json, os, sys
arguments = json.load(sys.stdin)
print("project=" + os.environ.get("OSPREY_PROJECT_DIR", "unset"))
print("cwd=" + os.environ.get("OSPREY_CWD", "unset"))
print("pwd=" + os.getcwd())
with open(os.path.join(os.environ["OSPREY_CWD"], arguments["path"])) as f:
    print("read=" + f.read().strip())
"""


def manifest_toml(name: str, *, sandbox: bool) -> str:
    return (f'name = "{name}"\ndescription = "Says where it runs and reads a file."\ncommand = ["./where.py"]\n'
            f"sandbox = {'true' if sandbox else 'false'}\n"
            '[parameters.path]\ntype = "string"\ndescription = "A path relative to the working directory."\nrequired = true\n')


def in_repository(path: Path) -> bool:
    return subprocess.run(["git", "rev-parse"], cwd=path, capture_output=True, check=False).returncode == 0


def lines(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def repository_with_subdirectory(root: Path) -> Path:
    """`root` as a git repository; its `sub` directory (the session's working directory) holds notes.txt."""
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    sub = root / "sub"
    sub.mkdir()
    (sub / "notes.txt").write_text("the notes in sub\n")
    return sub


def add_tool(tools: Path, name: str, *, sandbox: bool) -> None:
    tools.mkdir(parents=True, exist_ok=True)
    (tools / f"{name}.toml").write_text(manifest_toml(name, sandbox=sandbox))
    if not (tools / "where.py").exists():
        script(tools / "where.py", WHERE, shell="")


def trust(env: dict[str, str], cwd: Path, name: str) -> None:
    done = subprocess.run([OSPREY, "extensions", "-C", str(cwd), "trust", name, "--yes"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def agent(env: dict[str, str], cwd: Path, server: ModelServer, *extra: str) -> list[dict[str, object]]:
    done = subprocess.run([OSPREY, "agent", "-C", str(cwd), "--provider", "openai", "--base-url", server.base_url, "--yolo", *extra,
                           "where are you?"], env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def results(events: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(e["name"]): e for e in events if e["type"] == "tool_result"}


@pytest.fixture
def runtime() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="osprt-"))  # short: unix socket paths are limited to 107 bytes
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=False)


@pytest.mark.e2e
def test_a_host_tool_gets_the_project_and_the_working_directory(tmp_path: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    root = tmp_path / "project"
    sub = repository_with_subdirectory(root)
    add_tool(root / ".osprey" / "tools", "where", sandbox=False)
    trust(osprey_env, sub, "where")
    model_server.add(Reply.tool_calls([Call("where", {"path": "notes.txt"})]), Reply.text("done"))
    # A credential-looking OSPREY_ variable of the person's own is withheld; the two are Osprey's.
    events = agent({**osprey_env, "OSPREY_CWD": "/nowhere", "OSPREY_PROJECT_DIR": "/nowhere"}, sub, model_server)
    result = results(events)["where"]
    assert result["ok"], result
    said = lines(str(result["output"]))
    assert said == {"project": str(root), "cwd": str(sub), "pwd": os.path.realpath(root / ".osprey" / "tools"),
                    "read": "the notes in sub"}, said


@pytest.mark.e2e
def test_in_a_sandboxed_session_each_tool_gets_paths_valid_where_it_runs(tmp_path: Path, model_server: ModelServer,
                                                                          osprey_env: dict[str, str], runtime: Path) -> None:
    require_docker()
    root = tmp_path / "project"
    sub = repository_with_subdirectory(root)
    add_tool(sub / ".osprey" / "tools", "in_lane", sandbox=True)
    add_tool(sub / ".osprey" / "tools", "on_host", sandbox=False)
    trust(osprey_env, sub, "in_lane")
    trust(osprey_env, sub, "on_host")
    model_server.add(Reply.tool_calls([Call("in_lane", {"path": "notes.txt"})]), Reply.tool_calls([Call("on_host", {"path": "notes.txt"})]),
                     Reply.text("done"))
    events = agent({**osprey_env, "XDG_RUNTIME_DIR": str(runtime)}, sub, model_server, "--sandbox")
    assert events[0]["tool_service"] == "lane"
    found = results(events)
    lane, host = lines(str(found["in_lane"]["output"])), lines(str(found["on_host"]["output"]))
    real_sub = os.path.realpath(sub)
    # The lane sees only `sub` (where the session started): the repository's root is not there.
    assert found["in_lane"]["ok"] and lane == {"project": real_sub, "cwd": real_sub, "pwd": os.path.join(real_sub, ".osprey", "tools"),
                                               "read": "the notes in sub"}, found["in_lane"]
    assert found["on_host"]["ok"] and host == {"project": str(root), "cwd": str(sub), "pwd": os.path.join(real_sub, ".osprey", "tools"),
                                               "read": "the notes in sub"}, found["on_host"]


async def test_the_variables_are_set_over_the_environment_given(tmp_path: Path) -> None:
    sub = repository_with_subdirectory(tmp_path / "project")
    script(tmp_path / "tools" / "where.py", WHERE, shell="")
    tool = custom_tool(manifest(command=["./where.py"], parameters={"path": {"type": "string"}}), tmp_path / "tools",
                       env={"PATH": os.environ["PATH"], "OSPREY_CWD": "/given", "OSPREY_PROJECT_DIR": "/given"})
    ctx = ToolContext(client=None, cwd=str(sub), roots=[str(sub)], bash_max_output_bytes=1 << 20)  # type: ignore[arg-type]
    outcome = await call(tool, {"path": "notes.txt"}, ctx)
    assert not outcome.is_error, outcome
    said = lines(outcome.text)
    assert (said["project"], said["cwd"], said["read"]) == (str(tmp_path / "project"), str(sub), "the notes in sub")
    # Outside any repository the workspace root is the working directory itself.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("plain notes\n")
    if not in_repository(plain):
        ctx = ToolContext(client=None, cwd=str(plain), roots=[str(plain)], bash_max_output_bytes=1 << 20)  # type: ignore[arg-type]
        said = lines((await call(tool, {"path": "notes.txt"}, ctx)).text)
        assert (said["project"], said["cwd"], said["read"]) == (str(plain), str(plain), "plain notes")
