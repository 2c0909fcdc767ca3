"""A private tmux server for terminal end-to-end tests: its own socket and config in the test's
directory, sessions of 100x30, and waits on the screen's text."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

TIMEOUT = 120.0


class Tmux:
    """A private tmux server (its own socket, in the test's directory) running commands in detached
    sessions of 100x30."""

    def __init__(self, directory: Path, config: str = "") -> None:
        self.socket = str(directory / "tmux.sock")
        self.config = directory / "tmux.conf"
        self.config.write_text("set -g remain-on-exit on\nset -g status off\n" + config)

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

    def buffers(self) -> str:
        """tmux's paste buffers, one line each (empty when there are none)."""
        return self.run("list-buffers", "-F", "#{buffer_name}: #{buffer_sample}")

    def kill_server(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=30)




def serve(directory: Path, config: str = "") -> Iterator[Tmux]:
    """A fixture's body: a server, killed afterwards."""
    server = Tmux(directory, config)
    try:
        yield server
    finally:
        server.kill_server()
