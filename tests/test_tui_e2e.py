"""`osprey` and `osprey --sandbox` end to end: the real command on a pseudo-terminal, talking real HTTP
to the loopback model server; keys are typed into the terminal."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import require_docker

from osprey.testing.model_server import ModelServer, Reply

pytestmark = pytest.mark.e2e

OSPREY = str(Path(sys.executable).with_name("osprey"))
TIMEOUT = 120.0
ANSI = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


class Terminal:
    """`osprey` on a pseudo-terminal of 100x30, with what it has drawn (escape sequences removed)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        self.master = master
        # textual reads keys from stdin and draws on stderr
        self.proc = subprocess.Popen(args, env={**env, "TERM": "xterm-256color"}, stdin=slave, stdout=slave, stderr=slave,
                                     start_new_session=True)
        os.close(slave)
        self._raw: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self._raw.append(data)

    @property
    def screen(self) -> str:
        return ANSI.sub("", b"".join(self._raw).decode("utf-8", "replace"))

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def wait_for(self, condition: Callable[[], Any], what: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not condition():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"waiting for {what}: exit {self.proc.poll()}, screen tail {self.screen[-2000:]!r}")
            time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._reader.join(timeout=5)
        os.close(self.master)


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()


def _lanes_of(pid: int) -> list[Any]:
    import docker

    api = docker.from_env(timeout=120)
    try:
        return api.containers.list(all=True, filters={"label": f"osprey.owner_pid={pid}"}, ignore_removed=True)
    finally:
        api.close()


def _session(terminals: list[Terminal], model_server: ModelServer, osprey_env: dict[str, str], workspace: Path, *extra: str) -> Terminal:
    model_server.add(Reply.tool_call("bash", {"command": "echo written-by-bash > made.txt"}), Reply.text("All done: made.txt is there."))
    terminal = Terminal([OSPREY, "-C", str(workspace), "--base-url", model_server.base_url, "--yolo", *extra], osprey_env)
    terminals.append(terminal)
    terminal.wait_for(lambda: "· ready" in terminal.screen, "the session to start")
    terminal.type("make the file\r")
    terminal.wait_for(lambda: (workspace / "made.txt").exists() and "All done" in terminal.screen, "the answer")
    return terminal


def test_osprey_runs_a_prompt_and_quits(terminals: list[Terminal], model_server: ModelServer, osprey_env: dict[str, str], tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    terminal = _session(terminals, model_server, osprey_env, workspace)
    assert "· never · local" in terminal.screen
    assert (workspace / "made.txt").read_text() == "written-by-bash\n"
    terminal.type("\x11")  # ctrl+q
    assert terminal.proc.wait(timeout=TIMEOUT) == 0
    assert model_server.request_count == 2
    # The session was journaled, as `osprey agent` sessions are.
    listed = subprocess.run([OSPREY, "sessions", "list", "--json", "-C", str(workspace)], env=osprey_env, capture_output=True,
                            text=True, timeout=60)
    [row] = json.loads(listed.stdout)
    assert row["title"] == "make the file" and row["outcome"] == "Completed"


def test_osprey_sandbox_makes_a_lane_and_removes_it_on_quit(terminals: list[Terminal], model_server: ModelServer,
                                                           osprey_env: dict[str, str], tmp_path: Path) -> None:
    require_docker()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    terminal = _session(terminals, model_server, osprey_env, workspace, "--sandbox")
    assert "· never · lane" in terminal.screen
    assert _lanes_of(terminal.proc.pid), "the lane runs while the TUI is open"
    terminal.type("/quit\r")
    assert terminal.proc.wait(timeout=TIMEOUT) == 0
    assert _lanes_of(terminal.proc.pid) == []


def test_sigterm_leaves_in_order_and_removes_the_lane(terminals: list[Terminal], model_server: ModelServer,
                                                      osprey_env: dict[str, str], tmp_path: Path) -> None:
    require_docker()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    terminal = _session(terminals, model_server, osprey_env, workspace, "--sandbox")
    assert _lanes_of(terminal.proc.pid)
    terminal.proc.send_signal(signal.SIGTERM)
    assert terminal.proc.wait(timeout=TIMEOUT) == 128 + signal.SIGTERM
    assert _lanes_of(terminal.proc.pid) == []
