"""`osprey` in a real terminal (tmux) whose model answers with escape sequences, and whose bash call
fails printing them: the pane title (OSC 0, OSC 2) and the paste buffer (OSC 52, which tmux takes
with `set-clipboard on`) stay as they were, and the screen is not cleared (CSI 2J)."""

from __future__ import annotations

import base64
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmux_pane import Tmux, serve

from osprey.testing.model_server import ModelServer, Reply

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

OSPREY = str(Path(sys.executable).with_name("osprey"))
CLIPBOARD = base64.b64encode(b"pwned-clipboard").decode()
ANSWER = ("Answer begins \x1b]0;pwned-title-0\x07 and \x1b]2;pwned-title-2\x1b\\ then "
          f"\x1b]52;c;{CLIPBOARD}\x07 and \x1b[2J\x1b[H last \x9d0;pwned-title-c1\x9c words. Answer ends.")
# The call prints the same kinds of sequences (as bytes, from the shell) and fails.
COMMAND = (r"printf 'tool says \033]0;pwned-title-tool\007 \033]52;c;" + CLIPBOARD + r"\007 \033[2J still\n'; "
           r"echo failing-tool-output; exit 3")


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    """With `set-clipboard on`, so an OSC 52 sequence a program prints reaches tmux's paste buffers."""
    yield from serve(tmp_path, "set -g set-clipboard on\n")


def test_the_rig_sees_a_title_and_a_clipboard_set_by_a_program(tmux: Tmux, tmp_path: Path) -> None:
    """The probes below can fail: a program that prints the sequences does change both."""
    script = tmp_path / "emit.sh"
    script.write_text(f"printf '\\033]2;probe-title\\033\\\\\\033]52;c;{CLIPBOARD}\\007'; echo probe-done; read _\n")
    tmux.start("probe", ["sh", str(script)], {"PATH": "/usr/bin:/bin"}, hold=True)
    tmux.wait("probe", lambda s: "probe-done" in s, "the probe to print")
    deadline = time.monotonic() + 10
    while "pwned-clipboard" not in tmux.buffers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tmux.show("probe", "#{pane_title}") == "probe-title"
    assert "pwned-clipboard" in tmux.buffers()


def test_escape_sequences_from_the_model_and_a_failed_tool_reach_neither_the_title_nor_the_clipboard(
        tmux: Tmux, model_server: ModelServer, osprey_env: dict[str, str], tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    model_server.add(Reply.tool_call("bash", {"command": COMMAND}), Reply.text(ANSWER))
    tmux.start("ui", [OSPREY, "-C", str(workspace), "--base-url", model_server.base_url], osprey_env, hold=True)
    tmux.wait("ui", lambda s: "· ready" in s, "the session to start")
    title = tmux.show("ui", "#{pane_title}")
    assert "pwned" not in title and tmux.buffers() == ""
    tmux.text("ui", "first prompt line")
    tmux.keys("ui", "Enter")
    tmux.wait("ui", lambda s: "needs approval" in s, "the approval prompt")
    tmux.keys("ui", "y")
    screen = tmux.wait("ui", lambda s: "Answer ends." in s, "the answer")
    time.sleep(1.0)  # anything the terminal was sent has been taken by tmux by now
    screen = tmux.screen("ui")
    assert tmux.show("ui", "#{pane_title}") == title
    assert "pwned" not in tmux.buffers(), tmux.buffers()
    assert tmux.buffers() == ""
    # Not cleared: the prompt and the failed call are still on the screen with the answer.
    assert "first prompt line" in screen and "✗ bash" in screen and "Answer begins" in screen, screen
    # The answer's sequences are gone whole (the command's own text is shown, escaped, as it runs).
    assert "pwned-title-0" not in screen and "pwned-title-2" not in screen and "pwned-title-c1" not in screen, screen
    assert "tool says" in screen and "still" in screen and "pwned-title-tool\x07" not in screen, screen
    assert model_server.request_count == 2
    tmux.text("ui", "/quit")
    tmux.keys("ui", "Enter")
    tmux.wait("ui", lambda s: "exit-status=0" in s, "osprey to exit")
    assert tmux.show("ui", "#{pane_title}") == title and tmux.buffers() == ""
