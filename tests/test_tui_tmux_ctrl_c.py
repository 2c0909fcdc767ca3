"""Ctrl+C in `osprey` in a real terminal (tmux). The first Ctrl+C stops the running task (a `bash`
call that sleeps: it ends `Stopped`, the TUI goes on and takes text) or, with no task, clears the
prompt, and says that a second one quits; a second Ctrl+C within 2 s quits (exit status 0, the
terminal restored, `osprey --resume ID` printed for a session that had a prompt), one after the
window does not. A prompt sent while the model answers is queued above the prompt and sent when the
answer ends; Esc stops the task and drops the queue."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmux_pane import Tmux, serve

from osprey.testing.model_server import ModelServer, Reply

pytestmark = pytest.mark.e2e

OSPREY = str(Path(sys.executable).with_name("osprey"))
AGAIN = "Ctrl+C again within 2 s quits (or /quit)"
# Well past the 2 s in which a second Ctrl+C quits (and the 3 s its notification shows), with room
# for a loaded machine that handles one key late and the next on time.
PAST_THE_WINDOW = 3.5
# What it prints (sleeper-42) is not in the command's text, which the call's row also shows.
SLEEPER = "echo sleeper-$((40 + 2)); sleep 30; echo never-printed"


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    """Skip without tmux, except under CI, where its absence is a failure."""
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs tmux for the real-terminal Ctrl+C tests")
        pytest.skip("tmux is not installed")
    yield from serve(tmp_path)


def flat(text: str) -> str:
    """The text without its whitespace and the notifications' left edge (▌): a long line wraps
    anywhere on screen."""
    return "".join(text.replace("▌", " ").split())


def _start(tmux: Tmux, model_server: ModelServer, env: dict[str, str], workspace: Path, *extra: str) -> int:
    """Start osprey in a pane that outlives it and wait until it takes prompts; its pid."""
    workspace.mkdir(exist_ok=True)
    tmux.start("ui", [OSPREY, "-C", str(workspace), "--base-url", model_server.base_url, *extra], env, hold=True)
    tmux.wait("ui", lambda s: "· ready" in s, "the session to start")
    return tmux.child_pid("ui")


def _send(tmux: Tmux, prompt: str) -> None:
    tmux.text("ui", prompt)
    tmux.keys("ui", "Enter")


def _alive(tmux: Tmux, pid: int) -> bool:
    """osprey runs: its process exists and the shell holding the pane has not printed its status."""
    return Path(f"/proc/{pid}").exists() and "exit-status=" not in tmux.screen("ui")


def _notice_gone(tmux: Tmux) -> None:
    tmux.wait("ui", lambda s: flat(AGAIN) not in flat(s), "the Ctrl+C notification to go")


def _quit_with_two(tmux: Tmux) -> str:
    """Two Ctrl+C at once: osprey exits 0 and leaves the terminal as it was; the last screen."""
    tmux.keys("ui", "C-c", "C-c")
    screen = tmux.wait("ui", lambda s: "exit-status=" in s, "osprey to exit")
    assert "exit-status=0" in screen
    assert tmux.show("ui", "#{alternate_on} #{cursor_flag}") == "0 1"
    return screen


def _session_id(env: dict[str, str], workspace: Path) -> str:
    listed = subprocess.run([OSPREY, "sessions", "list", "--json", "-C", str(workspace)], env=env, capture_output=True,
                            text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    return str(row["id"])


def test_the_first_ctrl_c_stops_a_running_call_and_two_quit(tmux: Tmux, model_server: ModelServer,
                                                            osprey_env: dict[str, str], tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    model_server.add(Reply.tool_call("bash", {"command": SLEEPER}))
    pid = _start(tmux, model_server, osprey_env, workspace, "--yolo")
    _send(tmux, "sleep for a while")
    tmux.wait("ui", lambda s: "sleeper-42" in s, "the call to run")
    tmux.keys("ui", "C-c")
    tmux.wait("ui", lambda s: flat(f"stopping the task; {AGAIN}") in flat(s), "the Ctrl+C notification")
    screen = tmux.wait("ui", lambda s: "Stopped" in s and "· ready" in s, "the task to stop")
    # The call is marked stopped and keeps what it printed.
    assert "■ bash" in screen and "stopped after" in screen and "sleeper-42" in screen
    time.sleep(PAST_THE_WINDOW)
    assert _alive(tmux, pid)
    _notice_gone(tmux)
    tmux.text("ui", "still-taking-text")
    tmux.wait("ui", lambda s: "still-taking-text" in s, "the prompt to take text")
    assert model_server.request_count == 1  # nothing was sent: the task stopped, no new turn began
    screen = _quit_with_two(tmux)
    assert flat(f"osprey --resume {_session_id(osprey_env, workspace)}") in flat(screen)


def test_without_a_task_only_two_ctrl_c_within_the_window_quit(tmux: Tmux, model_server: ModelServer,
                                                               osprey_env: dict[str, str], tmp_path: Path) -> None:
    pid = _start(tmux, model_server, osprey_env, tmp_path / "ws")
    tmux.text("ui", "a-draft-to-clear")
    tmux.wait("ui", lambda s: "a-draft-to-clear" in s, "the draft in the prompt")
    tmux.keys("ui", "C-c")
    tmux.wait("ui", lambda s: "a-draft-to-clear" not in s and flat(AGAIN) in flat(s), "the prompt to be cleared")
    time.sleep(PAST_THE_WINDOW)
    assert _alive(tmux, pid)
    _notice_gone(tmux)
    # Nothing to stop, nothing to clear: a Ctrl+C, and another after the window, leave osprey running.
    tmux.keys("ui", "C-c")
    tmux.wait("ui", lambda s: flat(f"nothing to stop; {AGAIN}") in flat(s), "the first Ctrl+C's notification")
    time.sleep(PAST_THE_WINDOW)
    assert _alive(tmux, pid)
    _notice_gone(tmux)
    tmux.keys("ui", "C-c")
    tmux.wait("ui", lambda s: flat(f"nothing to stop; {AGAIN}") in flat(s), "the second Ctrl+C's notification")
    time.sleep(PAST_THE_WINDOW)
    assert _alive(tmux, pid)
    screen = _quit_with_two(tmux)
    assert "--resume" not in screen  # a session with no prompt is not kept
    assert model_server.request_count == 0


def test_a_prompt_sent_while_the_model_answers_is_queued_and_sent_after_it(tmux: Tmux, model_server: ModelServer,
                                                                          osprey_env: dict[str, str], tmp_path: Path) -> None:
    model_server.add(Reply.hold(1, Reply.text("First answer, held a while.")), Reply.text("Second answer, from the queue."),
                     Reply.hold(1, Reply.text("Third answer, never shown.")))
    _start(tmux, model_server, osprey_env, tmp_path / "ws")
    _send(tmux, "the first prompt")
    assert model_server.wait_held(1, timeout=60)
    _send(tmux, "the queued prompt")
    screen = tmux.wait("ui", lambda s: "queued (1)" in s, "the queue above the prompt")
    assert "› the queued prompt" in screen
    assert model_server.request_count == 1
    model_server.release()
    screen = tmux.wait("ui", lambda s: "Second answer, from the queue." in s and "· ready" in s, "the queued prompt's answer")
    assert "First answer, held a while." in screen and "queued (" not in screen
    assert model_server.request_count == 2
    sent = json.dumps(model_server.requests[1].body)
    assert "the queued prompt" in sent and "First answer, held a while." in sent
    # Esc stops the answer being held and drops what was queued behind it: it is never sent.
    _send(tmux, "a third prompt")
    assert model_server.wait_held(1, timeout=60)
    _send(tmux, "a prompt to drop")
    tmux.wait("ui", lambda s: "queued (1)" in s, "the second queue")
    tmux.keys("ui", "Escape")
    screen = tmux.wait("ui", lambda s: "Stopped" in s and "· ready" in s, "the task to stop")
    assert "queued (" not in screen and flat("dropped 1 queued prompt") in flat(screen)
    model_server.release()
    time.sleep(PAST_THE_WINDOW)
    assert model_server.request_count == 3 and "Third answer" not in tmux.screen("ui")
    tmux.text("ui", "/quit")
    tmux.keys("ui", "Enter")
    assert "exit-status=0" in tmux.wait("ui", lambda s: "exit-status=" in s, "osprey to exit")
