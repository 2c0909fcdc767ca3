"""osprey.testing: the testcontainers-managed lane that a project's own CI can use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from homes import require_docker

from osprey.testing.model_server import ModelServer, Reply

pytest_plugins: list[str] = []  # the `osprey_lane` fixture comes from the installed pytest11 entry point


def osprey_bin() -> str:
    return str(Path(sys.executable).with_name("osprey"))


def test_plugin_is_registered(pytestconfig) -> None:  # type: ignore[no-untyped-def]
    assert pytestconfig.pluginmanager.has_plugin("osprey")


def test_agent_edits_a_file_in_the_testcontainers_lane(request, osprey_lane_workspace: Path, osprey_env: dict[str, str], model_server: ModelServer) -> None:  # type: ignore[no-untyped-def]
    require_docker()
    lane = request.getfixturevalue("osprey_lane")
    (osprey_lane_workspace / "greeting.txt").write_text("hello world\n")
    model_server.add(
        Reply.tool_call("edit_file", {"path": "greeting.txt", "old_string": "world", "new_string": "lane"}),
        Reply.tool_call("bash", {"command": "cat /proc/net/dev | grep -c ':'; cat greeting.txt"}),
        Reply.text("done"),
    )
    run = subprocess.run(
        [osprey_bin(), "agent", *lane.agent_args(), "--yolo", "--provider", "openai", "--base-url", model_server.base_url,
         "-C", str(osprey_lane_workspace), "change the greeting"],
        capture_output=True, text=True, env=osprey_env, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert events[0]["tool_service"] == "lane"
    assert "process" not in events[0]["tools"]
    bash = next(e for e in events if e["type"] == "tool_result" and e["name"] == "bash")
    assert bash["output"].startswith("1\nhello lane"), bash["output"]  # only `lo`: no network in the lane
    assert (osprey_lane_workspace / "greeting.txt").read_text() == "hello lane\n"


def test_the_lane_is_gone_after_the_fixture(osprey_lane_workspace: Path) -> None:
    require_docker()
    import docker

    from osprey.testing.lane import TestLane

    with TestLane(osprey_lane_workspace) as lane:
        name = lane.session_id
        socket_dir = Path(lane.socket_path).parent
    client = docker.from_env()
    assert not client.containers.list(all=True, filters={"label": f"osprey.session={name}"})
    assert not socket_dir.exists()
