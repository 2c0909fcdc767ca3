"""A call stopped while it runs keeps what it printed: in its result, the journal, the TUI's tool row
and /export, and in a headless run (whose terminal shows a command's output as it comes)."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from session_harness import FAST_RETRY, FakeProvider, Harness, calls, text
from test_tui import SIZE, TuiRig, started, type_prompt, until

from osprey.events import SessionEnd, ToolResultEvent
from osprey.messages import ToolCall, ToolResultMessage
from osprey.session.core import Session
from osprey.sessions.journal import Journal, journal_path, read_events
from osprey.testing.model_server import ModelServer, Reply
from osprey.tui.widgets import ToolRow

OSPREY = str(Path(sys.executable).with_name("osprey"))
RUN_TIMEOUT = 120


def _command(started: Path) -> str:
    """Prints a line, says (through a file) that it did, then runs until it is stopped."""
    return f"echo first-part; touch {started}; sleep 30; echo never-printed"


def _assert_stopped(result: ToolResultEvent, ran_for: float) -> None:
    assert not result.ok and result.error_category == "cancelled"
    assert "first-part" in result.output and "never-printed" not in result.output
    last = result.output.rstrip().splitlines()[-1]
    assert last.startswith("[stopped after ") and "interrupted" in last
    assert result.duration_ms >= ran_for * 1000


# ------------------------------------------------------------------ the session


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path)


async def _until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_cancelled_bash_call_keeps_its_output_and_duration_in_the_result_and_the_journal(h: Harness) -> None:
    marker = h.workspace / "started"
    provider = FakeProvider([calls(ToolCall(id="c1", name="bash", arguments={"command": _command(marker)})), text("never")])
    journal = Journal(journal_path(h.home))
    session = Session(h.options("never", None, FAST_RETRY, ()), emit=h.events.append,
                      provider=provider, journal=journal, warn=lambda _: None)
    await session.start()
    task = asyncio.create_task(session.submit("run it"))
    await _until(marker.exists)
    began = time.monotonic()
    await asyncio.sleep(0.5)
    ran_for = time.monotonic() - began
    session.cancel()
    assert (await asyncio.wait_for(task, 30)).outcome == "Stopped"
    await session.close()

    result = h.result("c1")
    _assert_stopped(result, ran_for)
    # What the model sees next time is the same text.
    [message] = [m for m in session.messages if isinstance(m, ToolResultMessage)]
    assert message.is_error and message.content == result.output
    # The journal holds the same result.
    [recorded] = [e for e in read_events(journal_path(h.home), session.session_id) if isinstance(e, ToolResultEvent)]
    assert recorded.output == result.output and recorded.duration_ms == result.duration_ms
    assert recorded.error_category == "cancelled"


# ------------------------------------------------------------------ the TUI


@pytest.fixture
def rig(tmp_path: Path) -> TuiRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return TuiRig(workspace, home, [])


async def test_esc_keeps_the_output_of_a_running_command_on_its_row_and_in_the_export(rig: TuiRig) -> None:
    rig.policy = "never"
    marker = rig.workspace / "started"
    rig.scripts.append([calls(("bash", {"command": _command(marker)})), text("never")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "run it")
        await until(pilot, lambda: marker.exists() and bool(app.query(ToolRow)) and "first-part" in str(app.query_one(ToolRow).output.render()))
        began = time.monotonic()
        await pilot.pause(0.3)
        ran_for = time.monotonic() - began
        await pilot.press("escape")
        await until(pilot, lambda: bool(rig.ends()))
        assert rig.ends()[0].outcome == "Stopped"
        await app.workers.wait_for_complete()
        await pilot.pause()
        [result] = [e for e in rig.events if isinstance(e, ToolResultEvent)]
        _assert_stopped(result, ran_for)

        row = app.query_one(ToolRow)
        shown = str(row.output.render())
        assert "first-part" in shown and "[stopped after " in shown
        assert str(row.title).startswith("■ bash") and row.has_class("stopped") and not row.collapsed
        assert str(row.category.render()).startswith("stopped after ")

        await type_prompt(pilot, app, "/export out.md")
        await app.workers.wait_for_complete()
        await pilot.pause()
        exported = (rig.workspace / "out.md").read_text()
        assert "bash -> stopped after " in exported
        assert "first-part" in exported and "[stopped after " in exported


# ------------------------------------------------------------------ headless


class Terminal:
    """`osprey agent` with stdout on a pseudo-terminal; what it showed so far is `shown`."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        try:
            self.proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE)
        finally:
            os.close(slave)
        self.master = master
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO once the child has closed the terminal
                return
            if not data:
                return
            self._chunks.append(data)

    @property
    def shown(self) -> str:
        return b"".join(self._chunks).decode("utf-8", "replace").replace("\r\n", "\n")

    def wait_for(self, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not condition():
            assert self.proc.poll() is None, f"osprey ended early:\n{self.shown}"
            assert time.monotonic() < deadline, f"timed out; the terminal shows:\n{self.shown}"
            time.sleep(0.05)

    def finish(self) -> tuple[int, str, str]:
        try:
            stderr = self.proc.communicate(timeout=RUN_TIMEOUT)[1]
            self._reader.join(timeout=RUN_TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            os.close(self.master)
        return self.proc.returncode, self.shown, stderr.decode()


def _agent_args(workspace: Path, server: ModelServer, *extra: str) -> list[str]:
    return [OSPREY, "agent", "-C", str(workspace), "--base-url", server.base_url, "--yolo", *extra, "Run it."]


def test_a_terminal_shows_bash_output_as_it_comes_and_ctrl_c_keeps_it(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    marker = workspace / "started"
    model_server.add(Reply.tool_call("bash", {"command": _command(marker)}), Reply.text("never"))
    terminal = Terminal(_agent_args(workspace, model_server), osprey_env)
    # The command printed its first line and is still running: the terminal shows the line already.
    terminal.wait_for(lambda: "\n  first-part\n" in terminal.shown)
    assert terminal.proc.poll() is None and "[exit code" not in terminal.shown and marker.exists()
    terminal.proc.send_signal(signal.SIGINT)
    rc, shown, stderr = terminal.finish()
    assert rc == 130, shown + stderr
    assert shown.count("\n  first-part\n") == 1  # streamed once, not repeated by the result
    assert "[stopped after " in shown and "never-printed" not in shown, shown
    assert "Cancelled" in shown


def test_ctrl_c_keeps_the_partial_output_in_the_tool_result_event(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    marker = workspace / "started"
    model_server.add(Reply.tool_call("bash", {"command": _command(marker)}), Reply.text("never"))
    proc = subprocess.Popen(_agent_args(workspace, model_server), env=osprey_env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=5)
            time.sleep(0.05)
        began = time.monotonic()
        time.sleep(0.5)
        ran_for = time.monotonic() - began
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout + stderr
    events = [json.loads(line) for line in stdout.splitlines()]
    assert {e["type"] for e in events} <= {"session_start", "user_message", "usage", "assistant_text", "tool_call", "tool_result", "notice",
                                          "task_end", "session_end"}  # JSON Lines as documented: no live-output events
    [raw] = [e for e in events if e["type"] == "tool_result"]
    _assert_stopped(ToolResultEvent.model_validate(raw), ran_for)
    assert events[-1]["type"] == "session_end" and events[-1]["outcome"] == "Cancelled"
    assert SessionEnd.model_validate(events[-1]).exit_status == 130
