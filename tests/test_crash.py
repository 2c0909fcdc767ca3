"""Crash reports: what they hold, where they go, and that a half-written one is removed."""

from __future__ import annotations

import io
import os
import platform
import subprocess
import sys
import tempfile
import termios
from datetime import UTC, datetime
from pathlib import Path

import pytest

from osprey import __version__, crash


def _raised() -> ValueError:
    try:
        raise ValueError("the widget fell over")
    except ValueError as exc:
        return exc


def test_a_report_holds_version_os_message_and_traceback(tmp_path: Path) -> None:
    path = crash.write_report(_raised(), tmp_path, now=datetime(2026, 12, 2, 21, 5, 9, tzinfo=UTC))
    assert path.parent == tmp_path / "crash"
    assert path.name.startswith("osprey-crash-20261202T210509Z-") and path.suffix == ".txt"
    text = path.read_text()
    assert f"Osprey {__version__}" in text and platform.platform() in text
    assert "message: ValueError: the widget fell over" in text
    assert f"report: {path}" in text
    assert "Traceback (most recent call last)" in text and "_raised" in text


def test_two_reports_in_the_same_second_do_not_collide(tmp_path: Path) -> None:
    now = datetime(2026, 12, 2, 21, 5, 9, tzinfo=UTC)
    assert crash.write_report(_raised(), tmp_path, now=now) != crash.write_report(_raised(), tmp_path, now=now)


def test_a_partial_report_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(exc: BaseException) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(crash, "_details", fails)
    with pytest.raises(OSError):
        crash.write_report(_raised(), tmp_path)
    assert list((tmp_path / "crash").iterdir()) == []


def test_report_says_where_it_is_or_why_there_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    path = crash.report(_raised(), tmp_path, stream=out)
    assert path is not None and path.is_file() and str(path) in out.getvalue()
    # No crash directory can be made under the home: the report goes to the system temporary directory.
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the home should be")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    out = io.StringIO()
    path = crash.report(_raised(), blocked, stream=out)
    assert path is not None and path.parent == temporary and f"The report is in {path}" in out.getvalue()
    assert path.stat().st_mode & 0o077 == 0
    # Nowhere to write it: the message and the traceback are all there is.
    monkeypatch.setattr(tempfile, "tempdir", str(blocked))
    out = io.StringIO()
    assert crash.report(_raised(), blocked, stream=out) is None
    assert "could not be written" in out.getvalue() and "the widget fell over" in out.getvalue()
    assert "Traceback (most recent call last)" in out.getvalue() and "in _raised" in out.getvalue()
    assert [p.name for p in temporary.iterdir()] == [path.name]


class WorkerFailed(Exception):
    """Like textual's: made (never raised) to hold a worker's exception as `error`."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"Worker raised exception: {error!r}")
        self.error = error


def test_a_wrapper_that_was_never_raised_is_reported_as_what_it_holds(tmp_path: Path) -> None:
    out = io.StringIO()
    path = crash.report(WorkerFailed(_raised()), tmp_path, stream=out)
    assert path is not None and "Osprey crashed (ValueError: the widget fell over)" in out.getvalue()
    text = path.read_text()
    assert "message: ValueError: the widget fell over" in text and ", in _raised\n" in text


def _in_a_terminal(code: str) -> tuple[int, str, list[int]]:
    """Run `code` with a pseudo-terminal as stdin, stdout and stderr: its exit status, what it wrote and
    the terminal's flags (iflag, oflag, cflag, lflag) afterwards."""
    master, slave = os.openpty()
    try:
        run = subprocess.run([sys.executable, "-c", code], stdin=slave, stdout=slave, stderr=slave, timeout=60)
        os.set_blocking(master, False)
        chunks = []
        while True:
            try:
                chunks.append(os.read(master, 65536))
            except BlockingIOError:
                break
        return run.returncode, b"".join(chunks).decode(errors="replace"), termios.tcgetattr(slave)[:4]
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.parametrize("order", ["install, then raw", "raw, then install"])
def test_the_hook_restores_a_terminal_left_raw_on_the_alternate_screen(tmp_path: Path, order: str) -> None:
    """However the hook was installed (before the app took the terminal, or once it had), it leaves cooked modes."""
    steps = ["crash.install(pathlib.Path(HOME))", "sys.stderr.write(ENTER); sys.stderr.flush(); tty.setraw(0)"]
    if order == "raw, then install":
        steps.reverse()
    code = (
        "import pathlib, sys, tty\nfrom osprey import crash\n"
        f"HOME = {str(tmp_path)!r}\nENTER = '\\x1b[?1049h\\x1b[?25l\\x1b[?1000h'\n"
        + "\n".join(steps) + "\nraise RuntimeError('boom in raw mode')\n"
    )
    status, shown, (iflag, _oflag, _cflag, lflag) = _in_a_terminal(code)
    assert status == 1
    assert lflag & termios.ICANON and lflag & termios.ECHO and lflag & termios.ISIG and iflag & termios.ICRNL
    restored = shown.index(crash.LEAVE_ALTERNATE_SCREEN + crash.RESTORE_SEQUENCE)
    [report] = (tmp_path / "crash").iterdir()
    assert shown.index("Osprey crashed (RuntimeError: boom in raw mode)") > restored and str(report) in shown


def test_after_the_apps_own_teardown_the_alternate_screen_is_not_left_again(tmp_path: Path) -> None:
    """Leaving it again would put the cursor back above what the app printed on its way out."""
    code = (
        "import pathlib, sys, termios, tty\nfrom osprey import crash\n"
        f"crash.install(pathlib.Path({str(tmp_path)!r}))\n"
        "cooked = termios.tcgetattr(0)\ntty.setraw(0)\ntermios.tcsetattr(0, termios.TCSANOW, cooked)\n"
        "raise RuntimeError('boom after teardown')\n"
    )
    status, shown, _ = _in_a_terminal(code)
    assert status == 1 and "Osprey crashed (RuntimeError: boom after teardown)" in shown
    assert crash.RESTORE_SEQUENCE in shown and crash.LEAVE_ALTERNATE_SCREEN not in shown


def test_the_hook_writes_a_report_for_an_uncaught_exception(tmp_path: Path) -> None:
    code = (
        "import sys, pathlib\nfrom osprey import crash\n"
        f"crash.install(pathlib.Path({str(tmp_path)!r}))\n"
        "raise RuntimeError('boom in the ui')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ})
    assert run.returncode == 1
    [report] = (tmp_path / "crash").iterdir()
    assert "boom in the ui" in report.read_text()
    assert str(report) in run.stderr and "Osprey crashed (RuntimeError: boom in the ui)" in run.stderr
