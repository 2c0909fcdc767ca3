"""Crashes of `osprey` in a real terminal (tmux): however the TUI fails, it exits 1, the terminal is back to
normal (no alternate screen, cursor shown, cooked modes: what is typed is echoed) and a crash report says what
failed, or, when none can be written, the terminal shows the message and the traceback.

Each crash is made by a launcher script that patches one function of the real code to raise and then runs
the `osprey` entry point (`osprey.cli:main`); nothing in the product is switched on for the tests."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from osprey import __version__
from osprey.testing.model_server import ModelServer

pytestmark = pytest.mark.e2e

TIMEOUT = 20.0
# Typed into the pane once osprey has exited: shown only if the terminal echoes again.
TYPED = "typed-after-the-crash"


def _require_tmux() -> None:
    """Skip without tmux, except under CI, where its absence is a failure."""
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs tmux for the real-terminal crash tests")
        pytest.skip("tmux is not installed")


class Pane:
    """One shell in a private tmux server (its own socket) that runs a command, prints its exit status,
    writes `stty -a` of its terminal to a file and waits for a line: the pane stays alive, so the
    terminal state the command left can be read."""

    def __init__(self, directory: Path) -> None:
        self.socket = str(directory / "tmux.sock")
        self.config = directory / "tmux.conf"
        self.config.write_text("set -g remain-on-exit on\nset -g status off\nset -g history-limit 5000\n")
        self.stty = directory / "stty.txt"

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-S", self.socket, "-f", str(self.config), *args], capture_output=True, text=True, timeout=10)
        if done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def start(self, command: list[str], env: dict[str, str]) -> None:
        script = f'"$@"; s=$?; echo "exit-status=$s"; stty -a > {self.stty}; read line; echo "read:$line"; read _'
        wrapped = ["env", "-i", *(f"{k}={v}" for k, v in {**env, "TERM": "xterm-256color"}.items()), "sh", "-c", script, "sh", *command]
        self.tmux("new-session", "-d", "-s", "crash", "-x", "100", "-y", "30", *wrapped)

    def screen(self) -> str:
        """The visible screen."""
        return self.tmux("capture-pane", "-p", "-t", "crash")

    def output(self) -> str:
        """Everything the pane showed, history included, wrapped lines joined."""
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "crash")

    def show(self, fmt: str) -> str:
        return self.tmux("display", "-p", "-t", "crash", fmt).strip()

    def wait(self, what: str, text: str | Callable[[str], bool]) -> str:
        """Until the screen shows `text` (or `text(screen)` holds)."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            screen = self.screen()
            if text(screen) if callable(text) else text in screen:
                return screen
            if self.show("#{pane_dead}") == "1" or time.monotonic() > deadline:
                raise AssertionError(f"waiting for {what}: screen {screen!r}")
            time.sleep(0.05)

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=10)


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    _require_tmux()
    pane = Pane(tmp_path)
    try:
        yield pane
    finally:
        pane.close()


def _launcher(tmp_path: Path, patch: str) -> Path:
    """A script that runs `patch` (Python that makes one function raise), then the `osprey` entry point."""
    path = tmp_path / "launch_osprey.py"
    path.write_text(f"import sys\n\n{patch}\n\nfrom osprey.cli import main\n\nsys.argv[0] = 'osprey'\nmain()\n")
    return path


def _crash(pane: Pane, tmp_path: Path, model_server: ModelServer, env: dict[str, str], patch: str, *, command: str) -> None:
    """Run osprey through the launcher, type `command` once the session is ready, wait for osprey to exit
    and check it left the terminal as it found it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    pane.start([sys.executable, str(_launcher(tmp_path, patch)), "-C", str(workspace), "--base-url", model_server.base_url], env)
    pane.wait("the session to start", "· ready")
    assert pane.show("#{alternate_on}") == "1"
    pane.tmux("send-keys", "-t", "crash", "-l", command)
    # Enter takes the slash-command menu's highlighted entry: wait until the menu has caught up with
    # the typing (it lists the command alone), or Enter may run another command matching a prefix of it.
    pane.wait("the menu to list the command alone", lambda screen: _menu(screen) == [command])
    pane.tmux("send-keys", "-t", "crash", "Enter")
    pane.wait("osprey to exit", "exit-status=")
    assert "exit-status=1" in pane.screen()
    # osprey has exited; the shell holding the pane has not: the terminal is as osprey left it.
    assert pane.show("#{alternate_on} #{cursor_flag}") == "0 1"
    deadline = time.monotonic() + TIMEOUT
    while not pane.stty.is_file() or not pane.stty.read_text().endswith("\n"):
        assert time.monotonic() < deadline, "stty -a did not run after osprey exited"
        time.sleep(0.05)
    modes = pane.stty.read_text().split()
    assert "icanon" in modes and "echo" in modes and "icrnl" in modes, pane.stty.read_text()
    pane.tmux("send-keys", "-t", "crash", "-l", TYPED)
    pane.wait("the typed text to be echoed", TYPED)
    pane.tmux("send-keys", "-t", "crash", "Enter")
    pane.wait("the shell to read the line", f"read:{TYPED}")
    assert pane.show("#{wrap_flag} #{mouse_any_flag} #{mouse_button_flag} #{mouse_standard_flag} #{mouse_sgr_flag}") == "1 0 0 0 0"


def _menu(screen: str) -> list[str]:
    """The commands the slash-command menu lists."""
    return re.findall(r"^ (/[a-z-]+)\b", screen, re.MULTILINE)


def _last_lines(pane: Pane) -> list[str]:
    """The pane's non-blank lines up to the shell's `exit-status=` line (what osprey printed last comes last)."""
    lines = [line.rstrip() for line in pane.output().splitlines() if line.strip()]
    return lines[:next(i for i, line in enumerate(lines) if line.startswith("exit-status="))]


def _report_named_on_the_terminal(pane: Pane, message: str) -> Path:
    """The report the last line osprey printed names (printed below the rest, not over it)."""
    last = _last_lines(pane)[-1]
    found = re.fullmatch(rf"osprey: error: Osprey crashed \({re.escape(message)}\)\. The report is in (\S+\.txt)", last)
    assert found, pane.output()
    return Path(found[1])


def _check_report(path: Path, message: str, raiser: str) -> None:
    text = path.read_text()
    assert text.startswith(f"Osprey {__version__} crashed\n")
    assert re.search(r"^os: \S", text, re.MULTILINE)
    assert f"\nmessage: {message}\n" in text
    assert f"\nreport: {path}\n" in text
    assert "traceback:\nTraceback (most recent call last):" in text
    assert f", in {raiser}\n" in text
    assert text.rstrip().endswith(message)
    assert re.fullmatch(r"osprey-crash-\d{8}T\d{6}Z-[0-9a-f]{8}\.txt", path.name)
    assert path.stat().st_mode & 0o077 == 0, "a report may hold prompts and paths: only its owner reads it"


def test_an_exception_in_a_slash_command_is_reported(pane: Pane, tmp_path: Path, model_server: ModelServer,
                                                     osprey_env: dict[str, str]) -> None:
    patch = (
        "from osprey.tui.slash import SlashCommands\n\n"
        "async def debug_command_that_raises(self, argument):\n"
        "    raise RuntimeError('the debug command fell over')\n\n"
        "SlashCommands.cmd_debug = debug_command_that_raises\n"
    )
    _crash(pane, tmp_path, model_server, osprey_env, patch, command="/debug")
    path = _report_named_on_the_terminal(pane, "RuntimeError: the debug command fell over")
    assert path.parent == Path(osprey_env["OSPREY_HOME"]) / "crash"
    _check_report(path, "RuntimeError: the debug command fell over", "debug_command_that_raises")
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_an_exception_while_the_terminal_is_in_application_mode_is_reported(pane: Pane, tmp_path: Path, model_server: ModelServer,
                                                                            osprey_env: dict[str, str]) -> None:
    """textual's own restoration fails: the terminal is still raw, on the alternate screen, with the cursor
    hidden and mouse reporting on when osprey reports the crash, so restoring it is up to osprey."""
    patch = (
        "from textual.drivers.linux_driver import LinuxDriver\n\n"
        "def stop_application_mode_that_raises(self):\n"
        "    raise OSError('the terminal went away')\n\n"
        "LinuxDriver.stop_application_mode = stop_application_mode_that_raises\n"
    )
    _crash(pane, tmp_path, model_server, osprey_env, patch, command="/quit")
    path = _report_named_on_the_terminal(pane, "OSError: the terminal went away")
    _check_report(path, "OSError: the terminal went away", "stop_application_mode_that_raises")


def test_an_exception_that_escapes_the_app_reaches_the_crash_hook(pane: Pane, tmp_path: Path, model_server: ModelServer,
                                                                  osprey_env: dict[str, str]) -> None:
    """textual handles `Exception`s itself; a `BaseException` that is not one escapes its run and the CLI
    altogether, with the terminal still in application mode: `sys.excepthook` has to restore it and report."""
    patch = (
        "from textual.drivers.linux_driver import LinuxDriver\n\n"
        "class TerminalLost(BaseException):\n"
        "    pass\n\n"
        "def stop_application_mode_that_escapes(self):\n"
        "    raise TerminalLost('the terminal went away for good')\n\n"
        "LinuxDriver.stop_application_mode = stop_application_mode_that_escapes\n"
    )
    _crash(pane, tmp_path, model_server, osprey_env, patch, command="/quit")
    path = _report_named_on_the_terminal(pane, "TerminalLost: the terminal went away for good")
    _check_report(path, "TerminalLost: the terminal went away for good", "stop_application_mode_that_escapes")


RAISING_DEBUG_COMMAND = (
    "from osprey.tui.slash import SlashCommands\n\n"
    "async def debug_command_that_raises(self, argument):\n"
    "{before}"
    "    raise RuntimeError('the debug command fell over')\n\n"
    "SlashCommands.cmd_debug = debug_command_that_raises\n"
)


def test_a_report_that_cannot_go_in_osprey_home_goes_to_the_temporary_directory(pane: Pane, tmp_path: Path, model_server: ModelServer,
                                                                                osprey_env: dict[str, str]) -> None:
    blocked = Path(osprey_env["OSPREY_HOME"]) / "crash"
    blocked.write_text("a file where the crash directory should be\n")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    _crash(pane, tmp_path, model_server, {**osprey_env, "TMPDIR": str(temporary)}, RAISING_DEBUG_COMMAND.format(before=""), command="/debug")
    path = _report_named_on_the_terminal(pane, "RuntimeError: the debug command fell over")
    assert path.parent == temporary
    _check_report(path, "RuntimeError: the debug command fell over", "debug_command_that_raises")
    assert blocked.read_text() == "a file where the crash directory should be\n"


def test_a_report_that_cannot_be_written_leaves_no_partial_file_and_the_terminal_says_it_all(
        pane: Pane, tmp_path: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    """Files may not grow past 512 bytes once the command runs: the report is cut off while it is written."""
    before = (
        "    import resource\n"
        "    resource.setrlimit(resource.RLIMIT_FSIZE, (512, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
    )
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    _crash(pane, tmp_path, model_server, {**osprey_env, "TMPDIR": str(temporary)}, RAISING_DEBUG_COMMAND.format(before=before),
           command="/debug")
    assert list((Path(osprey_env["OSPREY_HOME"]) / "crash").iterdir()) == []
    assert list(temporary.iterdir()) == []
    lines = _last_lines(pane)
    said = next(i for i, line in enumerate(lines) if "the crash report could not be written" in line)
    assert re.fullmatch(r"osprey: error: Osprey crashed \(RuntimeError: the debug command fell over\); "
                        r"the crash report could not be written: \[Errno 27\] File too large", lines[said]), lines[said]
    assert lines[said + 1] == "Traceback (most recent call last):"
    assert any(line.endswith(", in debug_command_that_raises") for line in lines[said:])
    assert lines[-1] == "RuntimeError: the debug command fell over"
