"""osprey.testing: the testcontainers-managed lane that a project's own CI can use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import require_docker

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


def test_the_token_is_out_of_the_lanes_reach(osprey_lane_workspace: Path) -> None:
    """Commands in the lane can neither read the token file nor the sidecar's memory."""
    require_docker()
    from osprey.testing.lane import TestLane

    with TestLane(osprey_lane_workspace) as lane:
        token = Path(lane.token_file).read_text().strip()
        assert token and not (Path(lane.socket_path).parent / "token").exists()
        probe = (
            "import os\n"
            "pid = next(p for p in os.listdir('/proc') if p.isdigit() and p != '1' and b'osprey_sidecar' in open(f'/proc/{p}/cmdline', 'rb').read())\n"
            "for name in ('mem', 'environ'):\n"
            "    try:\n"
            "        open(f'/proc/{pid}/{name}', 'rb').close()\n"
            "        print(name, 'readable')\n"
            "    except OSError as exc:\n"
            "        print(name, 'refused', exc.errno)\n"
            "print('token file', os.path.exists('/run/osprey/token'))\n"
        )
        out = lane.container.exec(["python3", "-c", probe])
    text = out.output.decode()
    assert "readable" not in text and "refused" in text, text
    assert "token file False" in text, text
