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


def change_the_greeting(lane, workspace: Path, model_server: ModelServer, env: dict[str, str], bash: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    """`osprey agent` attached with `lane.agent_args()`, the model editing greeting.txt, then running `bash`."""
    (workspace / "greeting.txt").write_text("hello world\n")
    model_server.add(
        Reply.tool_call("edit_file", {"path": "greeting.txt", "old_string": "world", "new_string": "lane"}),
        Reply.tool_call("bash", {"command": bash}),
        Reply.text("done"),
    )
    return subprocess.run(
        [osprey_bin(), "agent", *lane.agent_args(), "--yolo", "--provider", "openai", "--base-url", model_server.base_url,
         "-C", str(workspace), "change the greeting"],
        capture_output=True, text=True, env=env, timeout=120,
    )


def test_agent_edits_a_file_in_the_testcontainers_lane(request, osprey_lane_workspace: Path, osprey_env: dict[str, str], model_server: ModelServer) -> None:  # type: ignore[no-untyped-def]
    require_docker()
    lane = request.getfixturevalue("osprey_lane")
    run = change_the_greeting(lane, osprey_lane_workspace, model_server, osprey_env, "cat /proc/net/dev | grep -c ':'; cat greeting.txt")
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


def test_the_fixture_works_unchanged_against_a_remote_engine(request, monkeypatch, osprey_lane_workspace: Path,  # type: ignore[no-untyped-def]
                                                             osprey_env: dict[str, str], model_server: ModelServer, remote_engine) -> None:
    """With DOCKER_HOST naming another machine's engine, `osprey_lane` and `agent_args()` are used
    as locally: the lane holds a copy of the workspace, `osprey agent` syncs it at its start and
    end, and the fixture brings back the rest when it ends."""
    for key, value in remote_engine.env.items():
        monkeypatch.setenv(key, value)
    lane = request.getfixturevalue("osprey_lane")
    # greeting.txt is written after the lane started: the agent sends it.
    run = change_the_greeting(lane, osprey_lane_workspace, model_server, {**osprey_env, **remote_engine.env},
                              "cat greeting.txt; echo later > later.txt")
    assert run.returncode == 0, run.stderr
    assert lane.agent_args()[0] == "--sandbox-lane"
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert events[0]["tool_service"] == "lane"
    bash = next(e for e in events if e["type"] == "tool_result" and e["name"] == "bash")
    assert bash["output"].startswith("hello lane"), bash["output"]
    assert remote_engine.client().api.inspect_container(lane.remote[1].id)["HostConfig"]["NetworkMode"] == "none", "no network in the lane"
    assert (osprey_lane_workspace / "greeting.txt").read_text() == "hello lane\n", "the agent brings the lane's edits back when it ends"
    assert (osprey_lane_workspace / "later.txt").read_text() == "later\n"
    assert "to the lane: 1 sent" in run.stderr and "from the lane: 2 written" in run.stderr, run.stderr  # it says what it synced

    # Another agent run picks up where the workspace is now; the fixture's own sync sees nothing new.
    (osprey_lane_workspace / "later.txt").unlink()
    report = lane.sync()
    assert report is not None and report.removed_in_lane == ["later.txt"] and not report.written


def test_a_remote_lane_file_that_cannot_be_used_says_why(monkeypatch, osprey_lane_workspace: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        osprey_env: dict[str, str], remote_engine) -> None:
    from osprey.testing.lane import TestLane

    for key, value in remote_engine.env.items():
        monkeypatch.setenv(key, value)
    other = tmp_path / "other"
    other.mkdir()
    env = {**osprey_env, **remote_engine.env}

    def agent(*args: str) -> subprocess.CompletedProcess[str]:
        # No model answers (port 1 on loopback): the lane is refused before a model is asked.
        return subprocess.run([osprey_bin(), "agent", *args, "--provider", "openai", "--base-url", "http://127.0.0.1:1/v1", "hi"],
                              capture_output=True, text=True, env=env, timeout=120)

    with TestLane(osprey_lane_workspace) as lane:
        assert oct(Path(lane.lane_file).stat().st_mode & 0o777) == "0o600"
        wrong_dir = agent(*lane.agent_args(), "-C", str(other))
        assert wrong_dir.returncode != 0 and f"run with -C {lane.workspace}" in wrong_dir.stderr, wrong_dir.stderr
        both = agent(*lane.agent_args(), "--sandbox-socket", "/nonexistent.sock", "-C", lane.workspace)
        assert both.returncode != 0 and "give one of them" in both.stderr, both.stderr
        garbage = tmp_path / "garbage.json"
        garbage.write_text('{"host": "x"}')
        bad = agent("--sandbox-lane", str(garbage), "-C", lane.workspace)
        assert bad.returncode != 0 and "does not describe a lane" in bad.stderr, bad.stderr
        lane_file = lane.lane_file
    gone = agent("--sandbox-lane", lane_file, "-C", str(osprey_lane_workspace))
    assert gone.returncode != 0 and "no such file" in gone.stderr, gone.stderr
    assert not Path(lane_file).parent.exists()
