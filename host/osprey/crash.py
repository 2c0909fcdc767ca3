"""Crash reports: restore the terminal, write `$OSPREY_HOME/crash/osprey-crash-<UTC time>-<nonce>.txt`,
and say where it is."""

from __future__ import annotations

import platform
import secrets
import sys
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TextIO

# Leave the alternate screen, show the cursor, stop mouse reporting and bracketed paste.
RESTORE_SEQUENCE = "\x1b[?1049l\x1b[?25h\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l"
MAX_TRACEBACK_CHARS = 200_000


def crash_dir(home: Path) -> Path:
    return home / "crash"


def _header(exc: BaseException) -> str:
    from . import __version__

    return (
        f"Osprey {__version__} crashed\n"
        f"time: {datetime.now(UTC).isoformat(timespec='seconds')}\n"
        f"os: {platform.platform()}\n"
        f"python: {platform.python_version()}\n"
        f"message: {type(exc).__name__}: {exc}\n"
    )


def _details(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "\ntraceback:\n" + text[-MAX_TRACEBACK_CHARS:]


def write_report(exc: BaseException, home: Path, *, now: datetime | None = None) -> Path:
    """Write a report of `exc` and return its path; a report that could not be finished is removed."""
    directory = crash_dir(home)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"osprey-crash-{stamp}-{secrets.token_hex(4)}.txt"
    try:
        with path.open("x", encoding="utf-8", errors="replace") as out:
            out.write(_header(exc))
            out.write(f"report: {path}\n")
            out.write(_details(exc))
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def restore_terminal(stream: TextIO | None = None) -> None:
    """Put a terminal a full-screen app left in a raw, alternate-screen state back to normal."""
    stream = stream or sys.__stderr__
    try:
        if stream is not None and stream.isatty():
            stream.write(RESTORE_SEQUENCE)
            stream.flush()
    except (OSError, ValueError):
        pass
    _restore_modes()


_saved_modes: list[object] = []


def _save_modes() -> None:
    try:
        import termios

        if sys.stdin is not None and sys.stdin.isatty():
            _saved_modes[:] = [termios.tcgetattr(sys.stdin.fileno())]
    except (ImportError, OSError, ValueError):
        pass


def _restore_modes() -> None:
    try:
        import termios

        if _saved_modes and sys.stdin is not None and sys.stdin.isatty():
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSANOW, _saved_modes[0])  # type: ignore[arg-type]
    except (ImportError, OSError, ValueError):
        pass


def report(exc: BaseException, home: Path, *, stream: TextIO | None = None) -> Path | None:
    """Write the report of a crash and say on `stream` (stderr) where it is; None when it could not be written."""
    stream = stream or sys.stderr
    try:
        path = write_report(exc, home)
    except OSError as error:
        stream.write(f"osprey: error: Osprey crashed ({type(exc).__name__}: {exc}); the crash report could not be written: {error}\n")
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=stream)
        return None
    stream.write(f"osprey: error: Osprey crashed ({type(exc).__name__}: {exc}). The report is in {path}\n")
    return path


Hook = Callable[[type[BaseException], BaseException, TracebackType | None], None]


def install(home: Path) -> Hook:
    """Make `sys.excepthook` restore the terminal and write a crash report; returns the hook it replaced."""
    previous = sys.excepthook
    _save_modes()

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt):
            restore_terminal()
            previous(kind, exc, tb)
            return
        restore_terminal()
        if exc.__traceback__ is None:
            exc = exc.with_traceback(tb)
        report(exc, home)

    sys.excepthook = hook
    return previous
