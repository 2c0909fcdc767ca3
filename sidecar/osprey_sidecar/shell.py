"""bash: run a command in its own process group, streaming its output.

The first half of the output budget streams as it arrives; after that only the
last half is kept, and the exit event carries it with the count of bytes
dropped between the two. A timeout or a cancel kills the whole process group,
and so does the end of the command, so nothing it left in the background
outlives the call (background work belongs to the host's `process` tool).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from . import errors as E
from .errors import ToolFailure
from .paths import Opened, Roots, cut

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
DEFAULT_MAX_OUTPUT = 1024 * 1024
KILL_GRACE_S = 0.5
# How long output from leftover background processes is still read after the shell exits.
DRAIN_AFTER_EXIT_S = 0.2
READ_CHUNK = 64 * 1024


@dataclass
class Output:
    data: bytes


@dataclass
class Exit:
    exit_code: int
    signal: int
    timed_out: bool
    tail: bytes
    dropped_bytes: int
    duration_ms: int
    killed_background: bool
    cancelled: bool = False


class BashRun:
    """One command; iterate `events()` in one thread, `cancel()` from any other."""

    def __init__(self, roots: Roots, command: str, timeout_ms: int = 0, workdir: str = "", max_output_bytes: int = 0, env: dict[str, str] | None = None) -> None:
        if not command.strip():
            raise ToolFailure(E.INVALID_ARGUMENT, "command is empty")
        if timeout_ms < 0 or max_output_bytes < 0:
            raise ToolFailure(E.INVALID_ARGUMENT, "timeout_ms and max_output_bytes must not be negative")
        if timeout_ms > MAX_TIMEOUT_MS:
            raise ToolFailure(E.INVALID_ARGUMENT, f"timeout_ms {timeout_ms} is over the maximum of {MAX_TIMEOUT_MS} ms; use the process tool for long-running work")
        if "\x00" in command:
            raise ToolFailure(E.INVALID_ARGUMENT, "command contains a NUL character")
        self.roots = roots
        self.workdir = workdir
        with self._open_workdir() as directory:
            self.cwd = directory.real
        self.command = command
        self.timeout_s = (timeout_ms or DEFAULT_TIMEOUT_MS) / 1000
        budget = max_output_bytes or DEFAULT_MAX_OUTPUT
        self.head_budget = budget // 2
        self.tail_budget = budget - self.head_budget
        self.env = dict(os.environ if env is None else env)
        self.env.update({"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"})
        self._cancelled = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def _open_workdir(self) -> Opened:
        shown = f"workdir {cut(self.workdir)}"
        return self.roots.open_existing_dir(self.workdir, shown, f"{shown} is not a directory")

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            if self._proc is not None:
                _kill_group(self._proc.pid, signal.SIGKILL)

    def events(self) -> Iterator[Output | Exit]:
        started = time.monotonic()
        with self._lock:
            if self._cancelled.is_set():
                return
            # Opened again now and entered through its descriptor: the child changes to
            # /proc/self/fd/N before its descriptors are closed for exec (a failure to do so
            # fails the start), so no path is looked up again after the open below the root.
            directory = self._open_workdir()
            try:
                self._proc = subprocess.Popen(
                    ["bash", "-c", self.command],
                    cwd=_fd_path(directory),
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ToolFailure(E.IO_ERROR, f"could not start bash: {exc}") from None
            finally:
                directory.close()
        proc = self._proc
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        head_left = self.head_budget
        tail = bytearray()
        total = 0
        timed_out = False
        exited_at: float | None = None
        deadline = started + self.timeout_s
        eof = False
        try:
            while True:
                now = time.monotonic()
                if self._cancelled.is_set():
                    break
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is None and now >= deadline:
                    timed_out = True
                    _terminate(proc)
                    break
                if exited_at is not None and (eof or now - exited_at > DRAIN_AFTER_EXIT_S):
                    break
                if eof:
                    # The command closed its output but is still running.
                    time.sleep(min(0.02, max(deadline - now, 0)))
                    continue
                wait = 0.02 if exited_at is not None else min(0.05, max(deadline - now, 0))
                if not sel.select(wait):
                    continue
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    eof = True
                    sel.unregister(fd)
                    continue
                total += len(chunk)
                if head_left > 0:
                    shown, chunk = chunk[:head_left], chunk[head_left:]
                    head_left -= len(shown)
                    yield Output(shown)
                if chunk:
                    tail += chunk
                    if len(tail) > self.tail_budget:
                        del tail[: len(tail) - self.tail_budget]
        finally:
            sel.close()
            leftovers = _group_alive(proc.pid)
            _kill_group(proc.pid, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait()
            proc.stdout.close()
            with self._lock:
                # The pid may be reused from here on: cancel() must not signal it.
                self._proc = None
        rc = proc.returncode
        cancelled = self._cancelled.is_set()
        sent = self.head_budget - head_left
        return_exit = Exit(
            exit_code=rc if rc >= 0 else -1,
            signal=-rc if rc < 0 else 0,
            timed_out=timed_out,
            tail=bytes(tail),
            dropped_bytes=total - sent - len(tail),
            duration_ms=int((time.monotonic() - started) * 1000),
            killed_background=leftovers and not (timed_out or cancelled) and exited_at is not None,
            cancelled=cancelled,
        )
        yield return_exit


def _fd_path(directory: Opened) -> str:
    """A path naming the open directory itself; its resolved path where /proc is missing."""
    proc = f"/proc/self/fd/{directory.fd}"
    return proc if os.path.isdir(proc) else directory.real


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    _kill_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _kill_group(proc.pid, signal.SIGKILL)
