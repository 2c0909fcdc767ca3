"""A closed terminal ends the TUI at any point of its start: `tmux kill-session` (SIGHUP, then the
terminal is gone) right after launch, while it imports, while the session starts and after the
first screen; each time the process and every process it started are gone within a few seconds,
and `sessions.db` is not left locked. Below it, the terminal driver: writes to a closed terminal
do not block, and the SIGCONT a hang-up sends does not restart the terminal."""

from __future__ import annotations

import asyncio
import os
import pty
import shutil
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.app import App
from textual.drivers._writer_thread import MAX_QUEUED_WRITES, WriterThread
from tmux_pane import Tmux, serve

from osprey.testing.model_server import ModelServer
from osprey.tui.launch import STOP_BOUND
from osprey.tui.terminal import CLOSE_BOUND, WRITE_BOUND, TerminalDriver

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

OSPREY = str(Path(sys.executable).with_name("osprey"))
# Seconds from kill-session until the process and its children are gone: under the launcher's
# STOP_BOUND, so that what is checked is the orderly exit, not the bound that ends a stuck one.
GONE_WITHIN = 8.0
# Seconds after launch at which the terminal is closed: at once, during the imports, while the
# session starts, about when the first screen is drawn, and later; then once after `· ready`.
DELAYS = (0.0, 0.05, 0.15, 0.3, 0.45, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.4, 1.7, 2.2)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    server = serve(tmp_path, "set -g remain-on-exit off\n")
    tmux = next(server)
    tmux.run("new-session", "-d", "-s", "keep", "sleep", "100000")  # keeps the server up between launches
    yield tmux
    next(server, None)


def _descendants(pid: int) -> set[int]:
    """The processes below `pid` (its children, theirs, ...)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = {int(c) for c in (task / "children").read_text().split()}
            except OSError:
                continue
            todo.extend(children - found)
            found |= children
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait_gone(pids: set[int]) -> set[int]:
    """The processes of `pids` still alive after GONE_WITHIN seconds."""
    deadline = time.monotonic() + GONE_WITHIN
    while (alive := {pid for pid in pids if _alive(pid)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def _assert_not_locked(db: Path) -> None:
    if not db.exists():
        return
    connection = sqlite3.connect(db, timeout=0)
    try:
        connection.execute("BEGIN EXCLUSIVE")  # fails at once ("database is locked") while a writer holds it
        connection.execute("ROLLBACK")
    finally:
        connection.close()


def _launch(tmux: Tmux, name: str, workspace: Path, model_server: ModelServer, env: dict[str, str]) -> int:
    wrapped = ["env", "-i", *(f"{k}={v}" for k, v in {**env, "TERM": "xterm-256color"}.items()),
               OSPREY, "-C", str(workspace), "--base-url", model_server.base_url]
    tmux.run("new-session", "-d", "-s", name, "-x", "100", "-y", "30", *wrapped)
    return int(tmux.show(name, "#{pane_pid}"))  # `env` runs osprey in its own process


def _kill_after(tmux: Tmux, name: str, pid: int, delay: float | None) -> set[int]:
    """Close the terminal `delay` seconds after the launch (None: once the session is ready); the
    processes to be gone."""
    if delay is None:
        tmux.wait(name, lambda s: "· ready" in s, "the session to be ready")
    else:
        time.sleep(delay)
    processes = {pid} | _descendants(pid)
    tmux.run("kill-session", "-t", name)
    return processes


@pytest.mark.e2e
@needs_tmux
def test_closing_the_terminal_at_any_point_of_the_start_ends_the_tui(tmux: Tmux, model_server: ModelServer,
                                                                     osprey_env: dict[str, str], tmp_path: Path) -> None:
    assert GONE_WITHIN < STOP_BOUND
    workspace = tmp_path / "ws"
    workspace.mkdir()
    db = Path(osprey_env["OSPREY_HOME"]) / "sessions.db"
    for round_, delay in enumerate([*DELAYS, None]):
        pid = _launch(tmux, f"ui-{round_}", workspace, model_server, osprey_env)
        processes = _kill_after(tmux, f"ui-{round_}", pid, delay)
        alive = _wait_gone(processes)
        assert not alive, f"closed {delay} s after the launch: still running {GONE_WITHIN:.0f} s later: " + ", ".join(
            Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ")[:200] for p in alive if _alive(p))
        _assert_not_locked(db)



@pytest.fixture
def driver() -> Iterator[TerminalDriver]:
    """The TUI's terminal driver, not started; the signal handlers it installs are put back after."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTSTP, signal.SIGCONT)}

    async def made() -> TerminalDriver:  # a driver is made where its app's event loop runs
        return TerminalDriver(App(), debug=False, mouse=False, size=(80, 24))

    try:
        yield asyncio.run(made())
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def _writing_to_a_closed_terminal() -> WriterThread:
    """textual's output thread writing to a terminal that was closed: its first write fails, and it ends."""
    master, slave = pty.openpty()
    terminal = os.fdopen(slave, "w")
    os.close(master)
    writer = WriterThread(terminal)
    writer.start()
    return writer


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the output thread's failed write
def test_writes_to_a_closed_terminal_do_not_block(driver: TerminalDriver) -> None:
    driver._writer_thread = _writing_to_a_closed_terminal()
    done = threading.Event()

    def write_and_close() -> None:
        for _ in range(3 * MAX_QUEUED_WRITES):  # more than textual's output queue holds
            driver.write("\x1b[2J a screen nobody sees")
        driver.close()
        done.set()

    threading.Thread(target=write_and_close, daemon=True).start()
    assert done.wait(2 * WRITE_BOUND + CLOSE_BOUND + 5), "a write to the closed terminal blocked"
    assert driver.gone


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_sigcont_without_a_suspension_does_not_restart_the_terminal(driver: TerminalDriver) -> None:
    # A closed terminal sends SIGHUP then SIGCONT; only a SIGTSTP's suspension is resumed.
    writer = driver._writer_thread = _writing_to_a_closed_terminal()
    driver._sigcont_application(signal.SIGCONT, None)
    assert driver._writer_thread is writer
