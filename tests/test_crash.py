"""Crash reports: what they hold, where they go, and that a half-written one is removed."""

from __future__ import annotations

import io
import os
import platform
import subprocess
import sys
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


def test_report_says_where_it_is_or_why_there_is_none(tmp_path: Path) -> None:
    out = io.StringIO()
    path = crash.report(_raised(), tmp_path, stream=out)
    assert path is not None and path.is_file() and str(path) in out.getvalue()
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the home should be")
    out = io.StringIO()
    assert crash.report(_raised(), blocked, stream=out) is None
    assert "could not be written" in out.getvalue() and "the widget fell over" in out.getvalue()


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
