"""`osprey` in a real terminal (tmux): a prompt, an approval answered with `y`, the answer, `/quit`;
then the terminal is left as it was (no alternate screen, cursor shown) and the exit status is 0.
With `--sandbox` a lane exists while the TUI runs and is gone after `/quit`. A SIGKILLed TUI's
session is resumed with `osprey --resume ID`: the conversation is shown and the model gets it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import require_docker
from tmux_pane import Tmux, serve

from osprey.testing.model_server import ModelServer, Reply

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

OSPREY = str(Path(sys.executable).with_name("osprey"))


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    yield from serve(tmp_path)


def _lanes_of(pid: int) -> list[Any]:
    import docker

    api = docker.from_env(timeout=120)
    try:
        return api.containers.list(all=True, filters={"label": f"osprey.owner_pid={pid}"}, ignore_removed=True)
    finally:
        api.close()


def _exchange(tmux: Tmux, model_server: ModelServer, env: dict[str, str], workspace: Path, *extra: str) -> int:
    """Start osprey, send a prompt, approve its bash call with `y`, wait for the answer; its pid."""
    model_server.add(Reply.tool_call("bash", {"command": "echo written-by-bash > made.txt"}), Reply.text("All done: made.txt is there."))
    tmux.start("ui", [OSPREY, "-C", str(workspace), "--base-url", model_server.base_url, *extra], env, hold=True)
    tmux.wait("ui", lambda s: "· ready" in s, "the session to start")
    tmux.text("ui", "make the file")
    tmux.keys("ui", "Enter")
    tmux.wait("ui", lambda s: "needs approval" in s, "the approval prompt")
    tmux.keys("ui", "y")
    tmux.wait("ui", lambda s: "All done" in s, "the answer")
    assert (workspace / "made.txt").read_text() == "written-by-bash\n"
    return tmux.child_pid("ui")


def _quit_and_check(tmux: Tmux) -> None:
    tmux.text("ui", "/quit")
    tmux.keys("ui", "Enter")
    tmux.wait("ui", lambda s: "exit-status=" in s, "osprey to exit")
    # osprey has exited; the shell holding the pane has not: the terminal is as osprey left it.
    assert tmux.show("ui", "#{alternate_on} #{cursor_flag}") == "0 1"
    assert "exit-status=0" in tmux.screen("ui")


def test_a_prompt_an_approval_and_quit_leave_the_terminal_clean(tmux: Tmux, model_server: ModelServer, osprey_env: dict[str, str],
                                                                 tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    _exchange(tmux, model_server, osprey_env, workspace)
    assert tmux.show("ui", "#{alternate_on}") == "1"
    _quit_and_check(tmux)
    assert model_server.request_count == 2


def test_sandbox_lane_lives_while_the_tui_runs(tmux: Tmux, model_server: ModelServer, osprey_env: dict[str, str], tmp_path: Path) -> None:
    require_docker()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    pid = _exchange(tmux, model_server, osprey_env, workspace, "--sandbox")
    assert _lanes_of(pid), "the lane runs while the TUI is open"
    _quit_and_check(tmux)
    assert _lanes_of(pid) == []


def test_a_killed_session_resumes_with_its_conversation(tmux: Tmux, model_server: ModelServer, osprey_env: dict[str, str],
                                                        tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    pid = _exchange(tmux, model_server, osprey_env, workspace)
    os.kill(pid, signal.SIGKILL)
    tmux.wait("ui", lambda s: f"exit-status={128 + signal.SIGKILL}" in s, "osprey to die")
    tmux.run("kill-session", "-t", "ui")
    listed = subprocess.run([OSPREY, "sessions", "list", "--json", "-C", str(workspace)], env=osprey_env, capture_output=True,
                            text=True, timeout=60)
    [row] = json.loads(listed.stdout)
    model_server.add(Reply.text("Resumed and still here."))
    tmux.start("ui", [OSPREY, "-C", str(workspace), "--base-url", model_server.base_url, "--resume", row["id"][:6]], osprey_env,
               hold=True)
    screen = tmux.wait("ui", lambda s: "· ready" in s, "the resumed session to start")
    assert "make the file" in screen and "All done: made.txt is there." in screen
    tmux.text("ui", "and now?")
    tmux.keys("ui", "Enter")
    tmux.wait("ui", lambda s: "Resumed and still here." in s, "the answer of the resumed session")
    sent = json.dumps(model_server.requests[-1].body)
    assert "make the file" in sent and "All done: made.txt is there." in sent and "and now?" in sent
    _quit_and_check(tmux)
    # --continue takes the newest session of this directory: the same one, now with both exchanges.
    tmux.run("kill-session", "-t", "ui")
    tmux.start("ui", [OSPREY, "-C", str(workspace), "--base-url", model_server.base_url, "--continue"], osprey_env, hold=True)
    screen = tmux.wait("ui", lambda s: "· ready" in s, "the continued session to start")
    assert "and now?" in screen and "Resumed and still here." in screen
    _quit_and_check(tmux)
