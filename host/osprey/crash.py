"""Crash reports: restore the terminal, write `$OSPREY_HOME/crash/osprey-crash-<UTC time>-<nonce>.txt`
(in the system temporary directory when that directory cannot be made), and say where it is."""

from __future__ import annotations

import os
import platform
import secrets
import sys
import tempfile
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

# Show the cursor, wrap lines again; stop mouse reporting (every mode), bracketed paste, focus events and
# in-band resize reports: what a full-screen app (textual) turns on, each a no-op when it is off already.
RESTORE_SEQUENCE = (
    "\x1b[?25h\x1b[?7h"
    "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1015l\x1b[?1016l"
    "\x1b[?2004l\x1b[?1004l\x1b[?2048l"
)
# Pop the kitty keyboard protocol (before leaving the alternate screen, as it must), then leave it.
# Terminals also move the cursor back to where it was when the alternate screen was entered, so this
# is only sent while an app is still in application mode: after the app's own teardown it would put
# the cursor above what the app printed, and the crash message over it.
LEAVE_ALTERNATE_SCREEN = "\x1b[<u\x1b[?1049l"
MAX_TRACEBACK_CHARS = 200_000


def crash_dir(home: Path) -> Path:
    return home / "crash"


def unwrap(exc: BaseException) -> BaseException:
    """The exception to report: a wrapper that was made but never raised (textual's WorkerFailed, which
    holds a worker's exception as `error`) has no traceback of its own, so the one it holds is reported."""
    seen = {id(exc)}
    while exc.__traceback__ is None and isinstance(inner := getattr(exc, "error", None), BaseException) and id(inner) not in seen:
        seen.add(id(inner))
        exc = inner
    return exc


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


def _create(directory: Path, name: str) -> TextIO:
    fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    return open(fd, "w", encoding="utf-8", errors="replace")


def write_report(exc: BaseException, home: Path, *, now: datetime | None = None) -> Path:
    """Write a report of `exc` (see `unwrap`) and return its path; a report that could not be finished is removed.

    When `$OSPREY_HOME/crash` cannot be made, or no file can be made in it, the report goes to the
    system temporary directory."""
    exc = unwrap(exc)
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    name = f"osprey-crash-{stamp}-{secrets.token_hex(4)}.txt"
    directory = crash_dir(home)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        out = _create(directory, name)
    except OSError:
        directory = Path(tempfile.gettempdir())
        out = _create(directory, name)
    path = directory / name
    try:
        with out:
            out.write(_header(exc))
            out.write(f"report: {path}\n")
            out.write(_details(exc))
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def restore_terminal(stream: TextIO | None = None) -> None:
    """Put a terminal a full-screen app left in a raw, alternate-screen state back to normal: its
    modes as they were at `install`, no alternate screen, cursor shown, no mouse reporting or
    bracketed paste. Safe to call after the app's own teardown (then only the harmless parts are sent)."""
    stream = stream or sys.__stderr__
    alternate = _in_application_mode()
    try:
        if stream is not None and stream.isatty():
            stream.write((LEAVE_ALTERNATE_SCREEN if alternate else "") + RESTORE_SEQUENCE)
            stream.flush()
    except (OSError, ValueError):
        pass
    _restore_modes()


# The terminal's modes when `install` ran, made cooked if an app had already made them raw.
_saved_modes: list[list[Any]] = []


def _stdin_fd() -> int | None:
    try:
        if sys.__stdin__ is not None and sys.__stdin__.isatty():
            return sys.__stdin__.fileno()
    except (OSError, ValueError):
        pass
    return None


def _cooked(modes: list[Any]) -> list[Any]:
    """`modes` with what a full-screen app's raw mode turns off turned back on (line editing, echo,
    signals, CR to NL on input, output processing)."""
    import termios

    iflag, oflag, cflag, lflag, *rest = modes
    if lflag & termios.ICANON:
        return modes
    iflag = (iflag | termios.ICRNL | termios.IXON) & ~(termios.INLCR | termios.IGNCR)
    oflag |= termios.OPOST | termios.ONLCR
    lflag |= termios.ICANON | termios.ECHO | termios.ECHOE | termios.ECHOK | termios.ISIG | termios.IEXTEN
    return [iflag, oflag, cflag, lflag, *rest]


def _save_modes() -> None:
    try:
        import termios
    except ImportError:
        return
    fd = _stdin_fd()
    try:
        if fd is not None:
            _saved_modes[:] = [_cooked(termios.tcgetattr(fd))]
    except (OSError, termios.error):
        pass


def _in_application_mode() -> bool:
    """Whether an app still holds the terminal (its modes are raw); True when that cannot be told."""
    try:
        import termios
    except ImportError:
        return True
    fd = _stdin_fd()
    if fd is None:
        return True
    try:
        return not termios.tcgetattr(fd)[3] & termios.ICANON
    except (OSError, termios.error):
        return True


def _restore_modes() -> None:
    """Cooked modes back, when an app left them raw: those saved at `install`, else the current ones cooked."""
    try:
        import termios
    except ImportError:
        return
    fd = _stdin_fd()
    try:
        if fd is not None and _in_application_mode():
            termios.tcsetattr(fd, termios.TCSANOW, _saved_modes[0] if _saved_modes else _cooked(termios.tcgetattr(fd)))
    except (OSError, termios.error):
        pass


def report(exc: BaseException, home: Path, *, stream: TextIO | None = None) -> Path | None:
    """Restore the terminal, write the report of a crash and say on `stream` (stderr) where it is; when it
    could not be written, show the message and traceback there instead and return None."""
    restore_terminal()
    stream = stream or sys.stderr
    exc = unwrap(exc)
    try:
        path = write_report(exc, home)
    except Exception as error:
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
        if exc.__traceback__ is None:
            exc = exc.with_traceback(tb)
        report(exc, home)

    sys.excepthook = hook
    return previous
