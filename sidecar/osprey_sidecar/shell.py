"""bash and exec: a program in its own process group, keeping the head and tail of its output.

Every output stream has a budget: its first half is kept from the head (bash streams it as it
arrives); after that only the last half is kept, with the count of bytes dropped between the
two. A timeout or a cancel kills the whole process group, and so does the end of the program,
so nothing it left in the background outlives the call (background work belongs to the host's
`process` tool).

`BashRun` runs `bash -c COMMAND` with stdout and stderr merged into one stream. `ExecRun` runs
an argv with no shell, feeds it stdin, and keeps stdout and stderr apart, each with its own
budget. Both produce the proto messages of their results directly.
"""

from __future__ import annotations

import errno
import os
import select
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any

from . import errors as E
from . import wire
from ._proto import tools_pb2 as pb
from .errors import ToolFailure
from .paths import Opened, Roots, cut

DEFAULT_TIMEOUT_MS = wire.BASH_DEFAULT_TIMEOUT_MS
MAX_TIMEOUT_MS = wire.BASH_MAX_TIMEOUT_MS
DEFAULT_MAX_OUTPUT = wire.DEFAULT_MAX_OUTPUT_BYTES
KILL_GRACE_S = 0.5
# How long output from leftover background processes is still read after the program exits.
DRAIN_AFTER_EXIT_S = 0.2
READ_CHUNK = 64 * 1024
WRITE_CHUNK = 64 * 1024
# bash output is held back until more of it or the program's exit comes, for at most this long
# and this much: a command that ends as it prints then sends its output with its exit, one
# message instead of two (each message is a round trip through the server's threads), and
# output is shown at most HOLD_S later than it was printed.
HOLD_S = 0.01
HOLD_BYTES = READ_CHUNK
# What the pump's poll keys carry besides an output stream's index.
_STDIN, _EXITED, _WAKE = -1, -2, -3
# Environment every command gets on top of the service's: no pager waits for a key, git never prompts.
COMMAND_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}


class Budget:
    """The kept part of one output stream: its first half from the head, its last from the tail.

    The head is held here only with `keep_head` (bash streams its head instead)."""

    def __init__(self, total: int, *, keep_head: bool = True) -> None:
        self.head_budget = total // 2
        self.tail_budget = total - self.head_budget
        self.keep_head = keep_head
        self.head = bytearray()
        self.head_size = 0
        self.tail = bytearray()
        self.seen = 0

    def feed(self, chunk: bytes) -> bytes:
        """Take the next chunk of the stream; return the part of it that joins the head."""
        self.seen += len(chunk)
        room = self.head_budget - self.head_size
        shown = b""
        if room > 0:
            shown, chunk = chunk[:room], chunk[room:]
            self.head_size += len(shown)
            if self.keep_head:
                self.head += shown
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_budget:
                del self.tail[: len(self.tail) - self.tail_budget]
        return shown

    @property
    def dropped(self) -> int:
        return self.seen - self.head_size - len(self.tail)

    def captured(self) -> pb.CapturedOutput:
        return pb.CapturedOutput(head=bytes(self.head), tail=bytes(self.tail), dropped_bytes=self.dropped)


class _GroupRun:
    """One program in a process group of its own; iterate in one thread, `cancel()` from any other."""

    max_timeout_ms = MAX_TIMEOUT_MS
    default_timeout_ms = DEFAULT_TIMEOUT_MS
    too_long = "use the process tool for long-running work"

    def __init__(self, roots: Roots, timeout_ms: int, workdir: str, max_output_bytes: int, env: Mapping[str, str] | None) -> None:
        if timeout_ms < 0 or max_output_bytes < 0:
            raise ToolFailure(E.INVALID_ARGUMENT, "timeout_ms and max_output_bytes must not be negative")
        if timeout_ms > self.max_timeout_ms:
            raise ToolFailure(E.INVALID_ARGUMENT, f"timeout_ms {timeout_ms} is over the maximum of {self.max_timeout_ms} ms; {self.too_long}")
        self.roots = roots
        self.workdir = workdir
        # Held open until the program starts in it (or the call ends first: `cancel`).
        self._directory: Opened | None = self._open_workdir()
        self.cwd = self._directory.real
        self.timeout_s = (timeout_ms or self.default_timeout_ms) / 1000
        self.max_output = max_output_bytes or DEFAULT_MAX_OUTPUT
        self.env = dict(os.environ if env is None else env)
        self.env.update(COMMAND_ENV)
        self._cancelled = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._started = 0.0
        self._status: dict[str, Any] = {}
        self._wake: int | None = None  # written to by cancel(): the pump's poll wakes at once
        # Output the pump held back (`hold`) and had not yielded when the program's run ended.
        self._held: list[tuple[int, bytes]] = []

    def _open_workdir(self) -> Opened:
        shown = f"workdir {cut(self.workdir)}"
        return self.roots.open_existing_dir(self.workdir, shown, f"{shown} is not a directory")

    def _release_workdir(self) -> None:
        """Close the working directory's descriptor, unless the program took it."""
        with self._lock:
            if self._directory is not None:
                self._directory.close()
                self._directory = None

    def cancel(self) -> None:
        self._cancelled.set()
        self._release_workdir()
        with self._lock:
            if self._proc is not None:
                _kill_group(self._proc.pid, signal.SIGKILL)
            if self._wake is not None:
                try:
                    os.write(self._wake, b"x")
                except OSError:
                    pass  # full: a wake-up is pending already

    def _spawn(self, argv: Sequence[str], *, executable: str | None, stdin: int, stderr: int) -> subprocess.Popen[bytes] | None:
        """Start the program (None when the call was cancelled first)."""
        self._started = time.monotonic()
        with self._lock:
            if self._cancelled.is_set():
                return None
            # Entered through the descriptor opened below the root when the run was made: the
            # child changes to /proc/self/fd/N before its descriptors are closed for exec (a
            # failure to do so fails the start), so no path is looked up again after that open.
            directory, self._directory = self._directory, None
            if directory is None:
                return None  # (spawned twice)
            cwd = _fd_path(directory)
            try:
                self._proc = subprocess.Popen(
                    list(argv), executable=executable, cwd=cwd, env=self.env,
                    stdin=stdin, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True,
                )
            except OSError as exc:
                raise self._start_failure(exc, exc.filename == cwd) from None
            finally:
                directory.close()
            return self._proc

    def _start_failure(self, exc: OSError, in_workdir: bool) -> ToolFailure:
        raise NotImplementedError

    def _pump(self, proc: subprocess.Popen[bytes], budgets: Sequence[Budget], stdin: bytes = b"", *, hold: bool = False) -> Iterator[tuple[int, bytes]]:
        """Feed stdin and read the program's pipes (stdout, then stderr) into `budgets` until it
        ends, times out or the call is cancelled; yield (stream index, bytes that joined its
        head) as they arrive. Afterwards the process group is gone and `_status` holds the
        fields both results share.

        One poll waits on everything at once: the pipes, the program's exit (a pidfd) and a
        cancel; no step sleeps for a fixed time, so the call ends as soon as the program has
        ended and its output has been read.

        With `hold`, output is held until the program ends, HOLD_S after its first byte, or
        once HOLD_BYTES are held, whichever comes first: what was still held when the run ended
        is left in `_held`, not yielded."""
        pipes: list[IO[bytes]] = [p for p in (proc.stdout, proc.stderr) if p is not None]
        sel = selectors.PollSelector()
        for index, pipe in enumerate(pipes):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe.fileno(), selectors.EVENT_READ, index)
        pending = memoryview(stdin)
        feeding = proc.stdin is not None and len(pending) > 0
        if proc.stdin is not None:
            if feeding:
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, _STDIN)
            else:
                proc.stdin.close()
        exit_watch = _ExitWatch(proc)
        sel.register(exit_watch.fd, selectors.EVENT_READ, _EXITED)
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        sel.register(wake_r, selectors.EVENT_READ, _WAKE)
        with self._lock:
            self._wake = wake_w
        reading = len(pipes)
        timed_out = False
        exited_at: float | None = None
        deadline = self._started + self.timeout_s
        held = self._held
        held_bytes = 0
        held_since = 0.0
        try:
            while not self._cancelled.is_set():
                now = time.monotonic()
                if exited_at is None:
                    if now >= deadline:
                        timed_out = True
                        _terminate(proc, exit_watch)
                        break
                    wait = deadline - now
                else:
                    # The program has ended; what is left in the background may still hold a
                    # pipe open: read on until the pipes close, for a bounded time.
                    wait = exited_at + DRAIN_AFTER_EXIT_S - now
                    if reading == 0 or wait <= 0:
                        break
                ready: list[tuple[selectors.SelectorKey, int]] = []
                if held:
                    # Wait a moment for more output, or the exit, to go with what is held; then
                    # (or once enough is held) send it and wait as usual.
                    age = time.monotonic() - held_since
                    if held_bytes < HOLD_BYTES and age < HOLD_S:
                        ready = sel.select(min(wait, HOLD_S - age))
                    if not ready or held_bytes >= HOLD_BYTES or time.monotonic() - held_since >= HOLD_S:
                        yield from held
                        held.clear()
                        held_bytes = 0
                if not ready:
                    ready = sel.select(wait)
                for key, _ in ready:
                    if key.data == _EXITED:
                        sel.unregister(key.fd)
                        proc.poll()
                        exited_at = time.monotonic()
                        continue
                    if key.data == _WAKE:
                        continue
                    if key.data == _STDIN:
                        assert proc.stdin is not None
                        try:
                            written = os.write(key.fd, pending[:WRITE_CHUNK])
                        except BlockingIOError:
                            continue
                        except OSError:
                            written = len(pending)  # the program closed its stdin: the rest is not wanted
                        pending = pending[written:]
                        if not pending:
                            sel.unregister(key.fd)
                            _close_quietly(proc.stdin)
                            feeding = False
                        continue
                    try:
                        chunk = os.read(key.fd, READ_CHUNK)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(key.fd)
                        reading -= 1
                        continue
                    shown = budgets[key.data].feed(chunk)
                    if shown and hold:
                        if not held:
                            held_since = time.monotonic()
                        held.append((key.data, shown))
                        held_bytes += len(shown)
                    elif shown:
                        yield key.data, shown
        finally:
            with self._lock:
                self._wake = None
            sel.close()
            os.close(wake_r)
            os.close(wake_w)
            leftovers = _group_alive(proc.pid)
            _kill_group(proc.pid, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait()
            exit_watch.close()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    _close_quietly(stream)
            with self._lock:
                # The pid may be reused from here on: cancel() must not signal it.
                self._proc = None
        rc = proc.returncode
        self._status = {
            "exit_code": rc if rc >= 0 else -1,
            "signal": -rc if rc < 0 else 0,
            "timed_out": timed_out,
            "duration_ms": int((time.monotonic() - self._started) * 1000),
            "killed_background": leftovers and not (timed_out or self._cancelled.is_set()) and exited_at is not None,
        }


class BashRun(_GroupRun):
    """One bash command; `events()` yields its output as it arrives, then its exit (which carries
    the output that arrived with it, when nothing was dropped)."""

    def __init__(self, roots: Roots, command: str, timeout_ms: int = 0, workdir: str = "", max_output_bytes: int = 0, env: Mapping[str, str] | None = None) -> None:
        if not command.strip():
            raise ToolFailure(E.INVALID_ARGUMENT, "command is empty")
        if "\x00" in command:
            raise ToolFailure(E.INVALID_ARGUMENT, "command contains a NUL character")
        super().__init__(roots, timeout_ms, workdir, max_output_bytes, env)
        self.command = command

    def _start_failure(self, exc: OSError, in_workdir: bool) -> ToolFailure:
        return ToolFailure(E.IO_ERROR, f"could not start bash: {exc}")

    def events(self) -> Iterator[pb.BashEvent]:
        """Output events (the head of the output), then one exit event carrying the tail."""
        proc = self._spawn(["bash", "-c", self.command], executable=None, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        if proc is None:
            return
        budget = Budget(self.max_output, keep_head=False)
        for _, shown in self._pump(proc, [budget], hold=True):
            yield pb.BashEvent(output=pb.BashOutput(data=shown))
        # The head output that arrived with the exit goes in the exit event, before the tail:
        # the head, then the tail, is the whole output when nothing was dropped between them.
        unsent = b"".join(data for _, data in self._held)
        self._held.clear()
        if unsent and budget.dropped:
            yield pb.BashEvent(output=pb.BashOutput(data=unsent))
            unsent = b""
        yield pb.BashEvent(exit=pb.BashExit(tail=unsent + bytes(budget.tail), dropped_bytes=budget.dropped, **self._status))


class ExecRun(_GroupRun):
    """One program from an argv, no shell: stdin fed and closed, stdout and stderr kept apart."""

    max_timeout_ms = wire.EXEC_MAX_TIMEOUT_MS
    default_timeout_ms = wire.EXEC_DEFAULT_TIMEOUT_MS
    too_long = "split the work, or run it in the background"

    def __init__(self, roots: Roots, argv: Sequence[str], stdin: bytes = b"", workdir: str = "", timeout_ms: int = 0, max_output_bytes: int = 0, env: Mapping[str, str] | None = None) -> None:
        if not argv or not argv[0]:
            raise ToolFailure(E.INVALID_ARGUMENT, "argv is empty; give the program to run and its arguments, as a list")
        if any("\x00" in arg for arg in argv):
            raise ToolFailure(E.INVALID_ARGUMENT, "an argument contains a NUL character")
        if len(stdin) > wire.EXEC_MAX_STDIN_BYTES:
            raise ToolFailure(E.INVALID_ARGUMENT, f"stdin is {len(stdin)} bytes; at most {wire.EXEC_MAX_STDIN_BYTES} are accepted (write larger input to a file and pass its path)")
        if max_output_bytes > wire.EXEC_MAX_OUTPUT_BYTES:
            raise ToolFailure(E.INVALID_ARGUMENT, f"max_output_bytes {max_output_bytes} is over the maximum of {wire.EXEC_MAX_OUTPUT_BYTES} per stream")
        super().__init__(roots, timeout_ms, workdir, max_output_bytes, env)
        self.argv = list(argv)
        self.stdin = bytes(stdin)
        try:
            self.executable = self._find(self.argv[0])
        except BaseException:
            self._release_workdir()
            raise

    def _find(self, name: str) -> str:
        """`name` itself when it is a path (relative ones to the workdir); else its place on PATH.

        Only absolute PATH entries count: a relative one would name a different directory in
        every workdir."""
        if "/" in name:
            return name
        search = self.env.get("PATH", os.defpath)
        for directory in search.split(os.pathsep):
            if not os.path.isabs(directory):
                continue
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
        raise ToolFailure(E.NOT_FOUND, f"no program named {cut(name)!r} on PATH ({cut(search)}); check the name or give its path")

    def _start_failure(self, exc: OSError, in_workdir: bool) -> ToolFailure:
        shown = cut(self.argv[0])
        if in_workdir:
            return ToolFailure(E.IO_ERROR, f"could not enter workdir {cut(self.workdir) or '.'}: {exc.strerror or exc}")
        if exc.errno == errno.ENOENT:
            return ToolFailure(E.NOT_FOUND, f"{shown}: no such program (a relative path is taken from the workdir)")
        if exc.errno in (errno.EACCES, errno.EPERM):
            return ToolFailure(E.PERMISSION_DENIED, f"{shown} cannot be run: {exc.strerror}; is it an executable file?")
        if exc.errno == errno.E2BIG:
            return ToolFailure(E.INVALID_ARGUMENT, "the arguments are too long for one program; pass them on stdin or in a file")
        return ToolFailure(E.IO_ERROR, f"could not start {shown}: {exc.strerror or exc}")

    def run(self) -> pb.ExecResponse:
        proc = self._spawn(self.argv, executable=self.executable, stdin=subprocess.PIPE if self.stdin else subprocess.DEVNULL, stderr=subprocess.PIPE)
        if proc is None:
            raise ToolFailure(E.IO_ERROR, "the call was cancelled before the program started")
        out, err = Budget(self.max_output), Budget(self.max_output)
        for _ in self._pump(proc, [out, err], self.stdin):
            pass
        return pb.ExecResponse(stdout=out.captured(), stderr=err.captured(), **self._status)


def _close_quietly(pipe: IO[bytes]) -> None:
    try:
        pipe.close()
    except OSError:
        pass


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


def _terminate(proc: subprocess.Popen[bytes], exit_watch: _ExitWatch) -> None:
    _kill_group(proc.pid, signal.SIGTERM)
    exit_watch.wait(KILL_GRACE_S)
    _kill_group(proc.pid, signal.SIGKILL)


class _ExitWatch:
    """A descriptor that turns readable once the program has exited: its pidfd; where pidfds
    are missing (an old kernel, a seccomp filter that refuses them), a pipe that a thread writes
    to when waitid() sees the exit. Neither reaps the program: Popen still collects its status."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            self.fd = _pidfd_open(proc.pid)
        except OSError:
            self.fd, write = os.pipe2(os.O_CLOEXEC)
            threading.Thread(target=_watch_exit, args=(proc.pid, write), name="osprey-exit-watch", daemon=True).start()

    def wait(self, timeout_s: float) -> bool:
        """Whether the program exited within `timeout_s`."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        return bool(poller.poll(timeout_s * 1000))

    def close(self) -> None:
        os.close(self.fd)


def _pidfd_open(pid: int) -> int:
    if not hasattr(os, "pidfd_open"):
        raise OSError(errno.ENOSYS, "pidfd_open is not available")
    return os.pidfd_open(pid)


def _watch_exit(pid: int, write: int) -> None:
    """Write one byte to `write` (then close it) when the process `pid` has exited."""
    try:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            pass  # reaped already
        os.write(write, b"x")
    except OSError:
        pass  # the reader is gone: the run has ended
    finally:
        os.close(write)
