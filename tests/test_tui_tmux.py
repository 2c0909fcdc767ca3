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
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import require_docker

from osprey.testing.model_server import ModelServer, Reply

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

OSPREY = str(Path(sys.executable).with_name("osprey"))
TIMEOUT = 120.0


class Tmux:
    """A private tmux server (its own socket, in the test's directory) running commands in detached
    sessions of 100x30."""

    def __init__(self, directory: Path) -> None:
        self.socket = str(directory / "tmux.sock")
        self.config = directory / "tmux.conf"
        self.config.write_text("set -g remain-on-exit on\nset -g status off\n")

    def run(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-S", self.socket, "-f", str(self.config), *args], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def start(self, name: str, command: list[str], env: dict[str, str], *, hold: bool = False) -> None:
        """Run `command` in session `name`. With `hold` a shell runs it, prints its exit status and waits
        for Enter before exiting with it: the pane stays alive, so its terminal state can be read (a
        dead pane always reports a hidden cursor, and tmux 3.3 does not always record a dead pane's
        exit status, so the shell's line is the status that is checked)."""
        wrapped = ["env", "-i", *(f"{k}={v}" for k, v in {**env, "TERM": "xterm-256color"}.items()), *command]
        if hold:
            wrapped = ["sh", "-c", '"$@"; s=$?; echo "exit-status=$s"; read _; exit $s', "sh", *wrapped]
        self.run("new-session", "-d", "-s", name, "-x", "100", "-y", "30", *wrapped)

    def child_pid(self, name: str) -> int:
        """The pid of the command a `hold` shell runs."""
        shell = int(self.show(name, "#{pane_pid}"))
        children = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
        assert len(children) == 1, children
        return int(children[0])

    def screen(self, name: str) -> str:
        return self.run("capture-pane", "-p", "-t", name)

    def show(self, name: str, fmt: str) -> str:
        return self.run("display", "-p", "-t", name, fmt).strip()

    def keys(self, name: str, *keys: str) -> None:
        self.run("send-keys", "-t", name, *keys)

    def text(self, name: str, text: str) -> None:
        self.run("send-keys", "-t", name, "-l", text)

    def wait(self, name: str, condition: Callable[[str], bool], what: str) -> str:
        deadline = time.monotonic() + TIMEOUT
        while True:
            screen = self.screen(name)
            if condition(screen):
                return screen
            if self.show(name, "#{pane_dead}") == "1" or time.monotonic() > deadline:
                raise AssertionError(f"waiting for {what}: screen {screen!r}")
            time.sleep(0.1)

    def kill_server(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    server = Tmux(tmp_path)
    try:
        yield server
    finally:
        server.kill_server()


def _lanes_of(pid: int) -> list[Any]:
    import docker

    api = docker.from_env(timeout=120)
    try:
        return api.containers.list(all=True, filters={"label": f"osprey.owner_pid={pid}"})
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
