"""Reading small files that anyone may have written: bounded by size, never blocking, and never
through a symbolic link unless asked.

`read_file` is the one way: a FIFO, device or socket is refused without being opened, a file is
never read past its bound, and a symbolic link is refused (or, with `follow_symlinks`, followed).
`read_bounded` and `read_no_follow` are its two common uses: files of settings, whose problems are
`ConfigError`s, and files whose problems only mean "nothing usable there".
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from .errors import ConfigError

MAX_FILE_BYTES = 1024 * 1024  # files of settings: config files, .env files, trust.toml, approvals.toml
READ_CHUNK_BYTES = 1 << 16

Refusal = Literal["symlink", "not_regular", "too_large", "unreadable"]


class FileRefused(Exception):
    """Why `read_file` did not read a file.

    `reason`: "symlink" (a symbolic link, not followed), "not_regular" (a FIFO, device, socket, or
    a directory swapped in while opening), "too_large" (over the bound; `size` is the size the file
    gave before it was read, None when it grew while read) or "unreadable" (an OS error). `error`
    is the OS error of "unreadable" and "symlink" (ELOOP, as opening without following says)."""

    def __init__(self, reason: Refusal, *, size: int | None = None, error: OSError | None = None) -> None:
        super().__init__(reason if error is None else f"{reason}: {error.strerror or error}")
        self.reason: Refusal = reason
        self.size = size
        self.error = error

    @property
    def strerror(self) -> str:
        return (self.error.strerror or str(self.error)) if self.error is not None else self.reason


def _symlink() -> FileRefused:
    return FileRefused("symlink", error=OSError(errno.ELOOP, os.strerror(errno.ELOOP)))


def open_regular(path: Path | str, *, follow_symlinks: bool = False, limit: int | None = None) -> int | None:
    """A read-only descriptor of the regular file at `path` (the caller closes it), or None when
    nothing (or a directory) is there. Raises FileRefused for a symbolic link (unless
    `follow_symlinks`), a FIFO, device or socket (never opened, so never blocking), a file over
    `limit` bytes, and an OS error."""
    try:
        st = os.stat(path) if follow_symlinks else os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise FileRefused("unreadable", error=exc) from None
    if stat.S_ISDIR(st.st_mode):
        return None
    if stat.S_ISLNK(st.st_mode):
        raise _symlink()
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused("not_regular")
    if limit is not None and st.st_size > limit:
        raise FileRefused("too_large", size=st.st_size)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:  # a link swapped in after the lstat
            raise _symlink() from None
        raise FileRefused("unreadable", error=exc) from None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError as exc:
        os.close(fd)
        raise FileRefused("unreadable", error=exc) from None
    if not regular:  # swapped after the stat above
        os.close(fd)
        raise FileRefused("not_regular")
    return fd


def read_file(path: Path | str, limit: int, *, follow_symlinks: bool = False, cut: bool = False) -> bytes | None:
    """The bytes of the regular file at `path`, or None when nothing is there (missing, or a
    directory). Raises FileRefused for a symbolic link (unless `follow_symlinks`), a FIFO, device
    or socket (never opened, so never blocking), a file over `limit` bytes (never read further than
    one byte past it; with `cut`, its first `limit` bytes are returned instead) and an OS error."""
    fd = open_regular(path, follow_symlinks=follow_symlinks, limit=None if cut else limit)
    if fd is None:
        return None
    data = bytearray()
    want = limit if cut else limit + 1
    try:
        while len(data) < want:
            chunk = os.read(fd, min(READ_CHUNK_BYTES, want - len(data)))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise FileRefused("unreadable", error=exc) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileRefused("too_large")
    return bytes(data)


class LockBusy(Exception):
    """Another process held the lock for the whole wait."""


@contextmanager
def exclusive_lock(path: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive `flock` on the file at `path` (made 0600, never through a symbolic link),
    waiting at most `timeout` seconds: LockBusy after that, OSError when it cannot be opened.
    Closing the descriptor releases it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    try:
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LockBusy(str(path)) from None
                time.sleep(min(delay, left))
                delay = min(delay * 2, 0.05)
        yield
    finally:
        os.close(fd)


def read_no_follow(path: Path | str, limit: int) -> bytes | None:
    """At most `limit` bytes of the regular file at `path`, or None for anything else (nothing
    there, a symbolic link, a FIFO, an error). For small files that anyone may have written."""
    try:
        return read_file(path, limit, cut=True)
    except FileRefused:
        return None


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n % (1024 * 1024) == 0 else f"{n} bytes"


def read_bounded(path: Path, what: str, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """The bytes of a file of settings at `path` (symlinks followed: a user's config may be a link
    into their dotfiles), or None when nothing or a directory is there. A FIFO, device or socket,
    or a file over `limit`, is a ConfigError that names the file and says what to do."""
    try:
        return read_file(path, limit, follow_symlinks=True)
    except FileRefused as exc:
        if exc.reason == "not_regular":
            raise ConfigError(f"{path}: not a regular file, so it is not read as {what}; "
                              "replace it with a regular file or remove it") from None
        if exc.reason == "too_large":
            raise ConfigError(f"{path}: larger than {_size(limit)}, the most Osprey reads as {what}; "
                              "shorten it or remove it") from None
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
