"""Allowed roots: every path argument is resolved (symlinks too) and must stay inside them.

Paths travel as UTF-8 strings. A file name that is not valid UTF-8 is shown with
`\\xNN` escapes for its undecodable bytes, and such an escaped name is accepted
back as an argument, so a model can name every file it was shown.

Checking a resolved path and then using it by name would race with anyone swapping
a directory for a symlink in between. So a path is resolved once (to find its root
and its symlink-free place below it) and then opened from a descriptor of that root
without following any symlink: with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
where the kernel has it, else one component at a time with `O_NOFOLLOW`. A symlink
that appears on the way fails the open with ELOOP, and the whole resolution is tried
again, so a swap can make a call fail but never lead it out of the roots.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from .errors import INVALID_ARGUMENT, IO_ERROR, NOT_A_DIRECTORY, NOT_FOUND, OUTSIDE_ROOT, ToolFailure, from_os_error

PATH_MAX = 4096
# How much of an argument a message may echo.
SHOWN_CHARS = 200
# Resolutions tried when a symlink appears between resolving a path and opening it.
_ATTEMPTS = 3

_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")
_CLOEXEC = os.O_CLOEXEC

T = TypeVar("T")


def cut(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` for a message: at most `limit` characters and a note of how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}[... {len(text) - limit} more characters]"


def to_wire(fs_path: str) -> str:
    """A filesystem path (surrogate-escaped str) as a valid UTF-8 string."""
    if fs_path.isascii():  # (most names: no escaped byte can be in them)
        return fs_path
    return os.fsencode(fs_path).decode("utf-8", "backslashreplace")


def from_wire(path: str, base: str = "") -> str:
    """The filesystem path a wire string names (relative to `base`), undoing `\\xNN` escapes when needed."""
    if "\\x" not in path or os.path.lexists(os.path.join(base, path)):
        return path
    raw = _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), path.encode("utf-8"))
    return os.fsdecode(raw)


# --- opening below a directory descriptor without following symlinks ------------------------

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}

# The openat2 caller once probed: a function, False when the kernel (or a seccomp
# filter) does not offer it, None before the probe.
_openat2: Callable[[int, str, int, int], int] | bool | None = None


def _load_openat2() -> Callable[[int, str, int, int], int] | bool:
    try:
        import ctypes
        import platform

        number = _SYS_OPENAT2.get(platform.machine())
        if number is None:
            return False
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
        syscall.restype = ctypes.c_long

        class OpenHow(ctypes.Structure):
            _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

        resolve = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS

        def call(dir_fd: int, rel: str, flags: int, mode: int) -> int:
            how = OpenHow(flags | _CLOEXEC, mode if flags & os.O_CREAT else 0, resolve)
            fd = syscall(ctypes.c_long(number), ctypes.c_int(dir_fd), os.fsencode(rel), ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
            if fd < 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err), rel)
            return int(fd)

        probe = os.open("/", os.O_PATH | os.O_DIRECTORY | _CLOEXEC)
        try:
            os.close(call(probe, ".", os.O_PATH | os.O_DIRECTORY, 0))
        finally:
            os.close(probe)
        return call
    except (OSError, AttributeError, ImportError):
        return False  # ENOSYS, EPERM from a seccomp filter, no ctypes: walk by hand


def _kernel_openat2() -> Callable[[int, str, int, int], int] | None:
    global _openat2
    if _openat2 is None:
        _openat2 = _load_openat2()
    return _openat2 if callable(_openat2) else None


def _parts(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p and p != "."]
    if ".." in parts:
        raise OSError(errno.EXDEV, "a path below a root cannot contain '..'", rel)
    return parts


def open_subdir(dir_fd: int, name: str) -> int:
    """An O_PATH descriptor of the directory `name` in `dir_fd`; ELOOP for a symlink."""
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if stat.S_ISDIR(mode):
        return fd
    os.close(fd)
    if stat.S_ISLNK(mode):
        raise OSError(errno.ELOOP, "a symbolic link is in the way", name)
    raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), name)


def open_beneath(dir_fd: int, rel: str, flags: int, mode: int = 0o666) -> int:
    """Open `rel` below the directory `dir_fd` following no symlink at all (ELOOP if one is met).

    `rel` is a relative path without `..`; "" opens the directory itself. The result is close-on-exec.
    """
    parts = _parts(rel)
    kernel = _kernel_openat2()
    if kernel is not None:
        return kernel(dir_fd, "/".join(parts) or ".", flags, mode)
    if not parts:
        return os.open(".", flags | _CLOEXEC, mode, dir_fd=dir_fd)
    fd = dir_fd
    try:
        for name in parts[:-1]:
            step = open_subdir(fd, name)
            if fd != dir_fd:
                os.close(fd)
            fd = step
        last = parts[-1]
        try:
            if stat.S_ISLNK(os.stat(last, dir_fd=fd, follow_symlinks=False).st_mode):
                raise OSError(errno.ELOOP, "a symbolic link is in the way", last)
        except FileNotFoundError:
            if not flags & os.O_CREAT:
                raise
        return os.open(last, flags | os.O_NOFOLLOW | _CLOEXEC, mode, dir_fd=fd)
    finally:
        if fd != dir_fd:
            os.close(fd)


def make_dirs_beneath(dir_fd: int, rel: str) -> int:
    """An O_PATH descriptor of the directory `rel` below `dir_fd`, creating what is missing; no symlink is followed."""
    fd = dir_fd
    try:
        for name in _parts(rel):
            try:
                step = open_subdir(fd, name)
            except FileNotFoundError:
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                step = open_subdir(fd, name)
            if fd != dir_fd:
                os.close(fd)
            fd = step
        return fd if fd != dir_fd else os.open(".", os.O_PATH | os.O_DIRECTORY | _CLOEXEC, dir_fd=dir_fd)
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise


def open_root(root: str) -> int:
    """An O_PATH descriptor of an allowed root (a trusted, already resolved path)."""
    return os.open(root, os.O_PATH | os.O_DIRECTORY | _CLOEXEC)


def open_under(root: str, real: str, flags: int) -> int:
    """Open the resolved path `real` below `root` following no symlink (ELOOP if one is met)."""
    prefix = root.rstrip(os.sep) + os.sep
    if real != root and not real.startswith(prefix):
        raise OSError(errno.EXDEV, "not below the root", real)
    rel = "" if real == root else real[len(prefix) :]
    root_fd = open_root(root)
    try:
        return open_beneath(root_fd, rel, flags)
    finally:
        os.close(root_fd)


class NotARegularFile(OSError):
    """A FIFO, socket or device where a regular file was wanted; it was not opened."""


def open_regular(dir_fd: int, name: str) -> tuple[int, os.stat_result]:
    """Open the regular file `name` in `dir_fd` for reading, with its status.

    A symlink raises ELOOP, a directory IsADirectoryError, anything else that is not a
    regular file NotARegularFile, all without opening it (a FIFO would block, a device
    may act on open)."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, "a symbolic link is in the way", name)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), name)
    if not stat.S_ISREG(st.st_mode):
        raise NotARegularFile(errno.EINVAL, "not a regular file", name)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=dir_fd)
    opened = os.fstat(fd)
    if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise OSError(errno.EAGAIN, "the file changed while it was opened", name)
    return fd, opened


# --- the roots ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Located:
    """Where a path argument resolved to: its root, its symlink-free path below it, the whole."""

    root: str
    rel: str  # "" for the root itself
    real: str


class Opened:
    """An open descriptor below the roots and the resolved path it stands for; closes on exit."""

    def __init__(self, fd: int, real: str) -> None:
        self.fd = fd
        self.real = real

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Parent:
    """The directory holding a resolved path (an O_PATH descriptor) and the path's name in it.

    For a root itself the descriptor is the root's and the name is ".".
    """

    fd: int
    name: str
    real: str


def _retryable(exc: OSError) -> bool:
    # ELOOP: a symlink appeared where the resolution saw none; EAGAIN: a file was swapped.
    return exc.errno in (errno.ELOOP, errno.EAGAIN)


class Roots:
    """The allowed roots; the first is the working directory."""

    def __init__(self, roots: Sequence[str]) -> None:
        if not roots:
            raise ValueError("at least one allowed root is required")
        self.roots = [os.path.realpath(r) for r in roots]
        self.cwd = self.roots[0]

    def root_of(self, real: str) -> str | None:
        """The allowed root containing the resolved path `real`, if any."""
        for root in self.roots:
            if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
                return root
        return None

    def locate(self, path: str, *, default_cwd: bool = True) -> Located:
        """Resolve `path` (relative to the working directory) and refuse it outside the roots."""
        if not path:
            if default_cwd:
                return Located(self.cwd, "", self.cwd)
            raise ToolFailure(INVALID_ARGUMENT, "a path is required")
        if "\x00" in path:
            raise ToolFailure(INVALID_ARGUMENT, "a path cannot contain a NUL character")
        if len(path) >= 4 * PATH_MAX:  # even all `\xNN` escapes would be too many bytes
            raise _too_long(len(path.encode("utf-8", "surrogatepass")))
        fs = from_wire(path, self.cwd)
        raw = os.fsencode(fs)
        if b"\x00" in raw:
            raise ToolFailure(INVALID_ARGUMENT, "a path cannot contain a NUL character (\\x00 names one)")
        if len(raw) >= PATH_MAX:
            raise _too_long(len(raw))
        joined = fs if os.path.isabs(fs) else os.path.join(self.cwd, fs)
        real = _realpath(joined, path)
        root = self.root_of(real)
        if root is None:
            allowed = ", ".join(to_wire(r) for r in self.roots)
            lexical = os.path.normpath(joined)
            how = "" if lexical == real else f" (it resolves to {cut(to_wire(real))})"
            raise ToolFailure(
                OUTSIDE_ROOT,
                f"{cut(path)} is outside the allowed roots{how}; allowed: {allowed}. Use a path inside them.",
            )
        rel = "" if real == root else real[len(root.rstrip(os.sep)) + 1 :]
        return Located(root, rel, real)

    def resolve(self, path: str, *, default_cwd: bool = True) -> str:
        """The resolved path of `path`, refused outside the roots (to show it; open with the methods below)."""
        return self.locate(path, default_cwd=default_cwd).real

    def _attempt(self, path: str, default_cwd: bool, action: Callable[[Located], T]) -> T:
        for _ in range(_ATTEMPTS):
            located = self.locate(path, default_cwd=default_cwd)
            try:
                return action(located)
            except OSError as exc:
                if not _retryable(exc):
                    raise
        raise ToolFailure(
            IO_ERROR,
            f"{cut(path)}: symbolic links on the way loop, or keep changing while it is opened; check them with bash (ls -l) or try again",
        )

    def open(self, path: str, flags: int, *, default_cwd: bool = False) -> Opened:
        """Open `path` below its root with `flags`, following no symlink on the way."""

        def action(located: Located) -> Opened:
            return Opened(open_under(located.root, located.real, flags), located.real)

        return self._attempt(path, default_cwd, action)

    def open_dir(self, path: str = "", *, default_cwd: bool = True) -> Opened:
        """A descriptor to list the directory `path` (the working directory when empty)."""
        return self.open(path, os.O_RDONLY | os.O_DIRECTORY, default_cwd=default_cwd)

    def open_existing_dir(self, path: str, shown: str, not_a_directory: str) -> Opened:
        """`open_dir`, with a missing path or a file refused as a tool failure: `not_a_directory`
        is the message for a file; `shown` names the path in the others."""
        try:
            return self.open_dir(path)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                raise from_os_error(exc, shown) from None
            if exc.errno == errno.ENOTDIR and os.path.lexists(self.resolve(path)):
                raise ToolFailure(NOT_A_DIRECTORY, not_a_directory) from None
            raise ToolFailure(NOT_FOUND, f"{shown}: no such directory") from None

    def open_file(self, path: str, *, default_cwd: bool = False) -> Opened:
        """The regular file `path`, open for reading (see `open_regular` for what is refused)."""

        def action(parent: Parent) -> Opened:
            fd, _ = open_regular(parent.fd, parent.name)
            return Opened(fd, parent.real)

        return self.in_parent(path, action, default_cwd=default_cwd)

    def in_parent(self, path: str, action: Callable[[Parent], T], *, create: bool = False, default_cwd: bool = False) -> T:
        """Run `action` with the directory holding `path` open (creating missing directories
        when `create`). Tried again from the start when a symlink appears on the way, so
        `action` must be safe to repeat up to its failure; it should refuse a symlink where
        the resolution saw none with ELOOP (as `open_regular` does)."""

        def attempt(located: Located) -> T:
            root_fd = open_root(located.root)
            try:
                if not located.rel:
                    return action(Parent(root_fd, ".", located.real))
                head, _, name = located.rel.rpartition("/")
                if not head:  # directly in the root: the root's descriptor is its directory's
                    return action(Parent(root_fd, name, located.real))
                try:
                    fd = open_beneath(root_fd, head, os.O_PATH | os.O_DIRECTORY)
                except FileNotFoundError:
                    if not create:
                        raise
                    fd = make_dirs_beneath(root_fd, head)
                try:
                    return action(Parent(fd, name, located.real))
                finally:
                    os.close(fd)
            finally:
                os.close(root_fd)

        return self._attempt(path, default_cwd, attempt)

    def show(self, real: str) -> str:
        """How a resolved path is shown: relative to the working directory when inside it."""
        if real == self.cwd:
            return "."
        prefix = self.cwd.rstrip(os.sep) + os.sep
        if real.startswith(prefix):
            return to_wire(real[len(prefix):])
        return to_wire(real)


def _realpath(joined: str, path: str) -> str:
    # realpath fails (EINVAL from readlink) when a symlink it saw is replaced meanwhile.
    for attempt in range(_ATTEMPTS):
        try:
            return os.path.realpath(joined)
        except OSError:
            if attempt == _ATTEMPTS - 1:
                raise ToolFailure(IO_ERROR, f"{cut(path)} kept changing while it was resolved; try again") from None
    raise AssertionError("unreachable")


def _too_long(size: int) -> ToolFailure:
    return ToolFailure(INVALID_ARGUMENT, f"the path is {size} bytes long; a path is at most {PATH_MAX - 1} bytes (PATH_MAX)")
