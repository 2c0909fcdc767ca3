"""Program streams: a long-lived program (a language server, a stdio MCP server) driven through
one bidirectional call.

The first input starts the program from an argv, as `exec` does (found on PATH, no shell, its
own process group and session, so no controlling terminal), in a workdir checked beneath the
roots, with the environment bash commands get plus the caller's bounded extra variables. Later
inputs write its stdin, close it, or signal its group. Its stdout and stderr are read by a
thread each into a small bounded queue that the call's worker drains into the stream: a slow
reader fills the queue, the readers then stop reading, the pipes fill, and the program blocks
on its writes, so the service never holds more than a few chunks of its output.

Whatever ends the stream (the client closing or cancelling it, its deadline, the connection
dropping, the server stopping) kills the whole process group: SIGTERM, then SIGKILL after
PROGRAM_KILL_GRACE_S. `ProgramTable` bounds how many run at once and knows their groups, so
the stray reaper spares them and a stopping servicer ends them.
"""

from __future__ import annotations

import os
import queue
import select
import signal
import subprocess
import threading
import time
from collections.abc import Generator, Iterator, Mapping
from typing import Any

from . import errors as E
from . import wire
from ._proto import tools_pb2 as pb
from .errors import ToolFailure
from .paths import Roots, cut
from .shell import DRAIN_AFTER_EXIT_S, ExecRun, _group_alive, _kill_group

RESOURCE_EXHAUSTED = "resource_exhausted"
# Output chunks held per program between its pipes and the stream (each up to 64 KiB).
QUEUE_CHUNKS = 16
# How often idle threads look at whether the stream or the program has ended.
TICK_S = 0.05
# After the exit is sent, the call stays open until the client ends its side (it does once it
# has read the exit), for at most this long: a client still writing to a call that has ended
# would lose the rest of it, its exit included.
EXIT_LINGER_S = 60.0
_SIGNALS = {
    pb.PROGRAM_SIGNAL_TERM: signal.SIGTERM,
    pb.PROGRAM_SIGNAL_KILL: signal.SIGKILL,
    pb.PROGRAM_SIGNAL_INT: signal.SIGINT,
}
_STDOUT, _STDERR = 0, 1


def _extra_env(env: Mapping[str, str]) -> dict[str, str]:
    """The caller's extra variables, checked and bounded."""
    if len(env) > wire.PROGRAM_MAX_ENV_VARS:
        raise ToolFailure(E.INVALID_ARGUMENT, f"{len(env)} environment variables were given; at most {wire.PROGRAM_MAX_ENV_VARS} can be added")
    size = 0
    for name, value in env.items():
        if not name or "=" in name or "\x00" in name or "\x00" in value:
            raise ToolFailure(E.INVALID_ARGUMENT, f"environment variable {cut(name)!r} is not valid: a name is non-empty, without '=' or NUL, and a value has no NUL")
        size += len(name) + len(value)
    if size > wire.PROGRAM_MAX_ENV_BYTES:
        raise ToolFailure(E.INVALID_ARGUMENT, f"the extra environment is {size} characters; at most {wire.PROGRAM_MAX_ENV_BYTES} are accepted")
    return dict(env)


class ProgramTable:
    """The programs running in one servicer: at most `limit` at once (a slot is taken before a
    program starts and given back when its stream has ended), their process groups known. Each
    is ended by its stream's end, which the server's stop brings about too (it cancels every
    call)."""

    def __init__(self, limit: int = wire.PROGRAM_MAX_RUNNING) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._slots = 0
        self._runs: set[ProgramRun] = set()

    def take_slot(self) -> None:
        with self._lock:
            if self._slots >= self.limit:
                raise ToolFailure(RESOURCE_EXHAUSTED, f"{self._slots} programs are running here already, the most this ToolService runs at once; "
                                                      "close one you no longer need (or wait for one to end), then start this one again")
            self._slots += 1

    def give_slot(self) -> None:
        with self._lock:
            self._slots -= 1

    def add(self, run: ProgramRun) -> None:
        with self._lock:
            self._runs.add(run)

    def discard(self, run: ProgramRun) -> None:
        with self._lock:
            self._runs.discard(run)

    def groups(self) -> set[int]:
        """The process groups of the running programs (the stray reaper spares them)."""
        with self._lock:
            return {run.pid for run in self._runs if run.pid}

class ProgramRun(ExecRun):
    """One program of a Program stream: `events(inputs)` starts it and yields its events;
    `end()` (from any thread, idempotent) kills its process group."""

    def __init__(self, roots: Roots, start: pb.ProgramStart, env: Mapping[str, str] | None) -> None:
        if start.lifetime_ms < 0:
            raise ToolFailure(E.INVALID_ARGUMENT, "lifetime_ms must not be negative")
        extra = _extra_env(start.env)
        base = dict(os.environ if env is None else env)
        super().__init__(roots, list(start.argv), b"", start.workdir, env={**base, **extra})
        self.env.update(extra)  # the caller's variables win over the command defaults
        self.lifetime_s = start.lifetime_ms / 1000 if start.lifetime_ms else None
        self.pid = 0
        self._stopping = threading.Event()  # the stream has ended: stop reading and writing
        self._end_lock = threading.Lock()
        self._ended = False
        self._queue: queue.Queue[tuple[int, bytes | None]] = queue.Queue(QUEUE_CHUNKS)
        self._failure: ToolFailure | None = None

    def events(self, inputs: Iterator[pb.ProgramInput]) -> Generator[pb.ProgramEvent, None, None]:
        """Start the program; yield `started`, its output as it comes, and its exit. Returns
        without an exit when the stream ended first (the program is then being killed)."""
        proc = self._spawn(self.argv, executable=self.executable, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        if proc is None:
            raise ToolFailure(E.IO_ERROR, "the stream ended before the program started")
        self.pid = proc.pid
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        threads = [
            threading.Thread(target=self._read, args=(proc.stdout.fileno(), _STDOUT), name="osprey-program-out", daemon=True),
            threading.Thread(target=self._read, args=(proc.stderr.fileno(), _STDERR), name="osprey-program-err", daemon=True),
            threading.Thread(target=self._take_input, args=(inputs, proc), name="osprey-program-in", daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            yield pb.ProgramEvent(started=pb.ProgramStarted(pid=proc.pid))
            timed_out = False
            deadline = self._started + self.lifetime_s if self.lifetime_s else None
            exited_at: float | None = None
            open_pipes = 2
            while not self._stopping.is_set():
                if self._failure is not None:
                    raise self._failure
                now = time.monotonic()
                if deadline is not None and not timed_out and now >= deadline:
                    timed_out = True
                    self._terminate(proc)
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None:
                    if open_pipes == 0 and self._queue.empty():
                        break
                    if now - exited_at > DRAIN_AFTER_EXIT_S:
                        # What it left in its group may hold the pipes open: it goes with it.
                        _kill_group(proc.pid, signal.SIGKILL)
                        if now - exited_at > 10 * DRAIN_AFTER_EXIT_S and self._queue.empty():
                            break  # (held open from outside the group)
                try:
                    kind, data = self._queue.get(timeout=TICK_S)
                except queue.Empty:
                    continue
                if data is None:
                    open_pipes -= 1
                elif kind == _STDOUT:
                    yield pb.ProgramEvent(stdout=data)
                else:
                    yield pb.ProgramEvent(stderr=data)
            else:
                return
            _kill_group(proc.pid, signal.SIGKILL)
            rc = proc.wait()
            yield pb.ProgramEvent(exit=pb.ProgramExit(exit_code=rc if rc >= 0 else -1, signal=-rc if rc < 0 else 0, timed_out=timed_out))
            taking_input = threads[2]
            linger_end = time.monotonic() + EXIT_LINGER_S
            while taking_input.is_alive() and not self._stopping.is_set() and time.monotonic() < linger_end:
                taking_input.join(TICK_S)
        finally:
            self.end()
            for thread in threads:
                thread.join(1.0)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    pipe.close()
                except OSError:
                    pass

    def _read(self, fd: int, kind: int) -> None:
        """Read one pipe into the queue until it closes or the stream ends; waits (so the
        program's writes block) while the queue is full."""
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        item: tuple[int, bytes | None] | None = None
        try:
            while not self._stopping.is_set():
                if item is None:
                    if not poller.poll(TICK_S * 1000):
                        continue
                    try:
                        chunk = os.read(fd, wire.PROGRAM_OUTPUT_CHUNK_BYTES)
                    except OSError:
                        chunk = b""
                    item = (kind, chunk or None)
                try:
                    self._queue.put(item, timeout=TICK_S)
                except queue.Full:
                    continue
                if item[1] is None:
                    return
                item = None
        except Exception:  # noqa: BLE001 - the stream is ending; nothing to report to
            return

    def _take_input(self, inputs: Iterator[pb.ProgramInput], proc: subprocess.Popen[bytes]) -> None:
        """Carry out the inputs after the start: stdin bytes, its close, signals. The client
        finishing its side closes stdin; the stream's end (an error here) stops this."""
        assert proc.stdin is not None
        stdin = proc.stdin.fileno()
        os.set_blocking(stdin, False)
        stdin_open = True
        try:
            for message in inputs:
                if self._stopping.is_set():
                    return
                kind = message.WhichOneof("kind")
                if kind == "stdin":
                    if len(message.stdin) > wire.PROGRAM_STDIN_CHUNK_BYTES:
                        self._failure = ToolFailure(E.INVALID_ARGUMENT, f"a stdin input holds {len(message.stdin)} bytes; send at most {wire.PROGRAM_STDIN_CHUNK_BYTES} in one")
                        return
                    if stdin_open:
                        stdin_open = self._write(stdin, message.stdin)
                elif kind == "close_stdin":
                    if stdin_open:
                        stdin_open = False
                        _close(proc.stdin)
                elif kind == "signal":
                    sig = _SIGNALS.get(message.signal)
                    if sig is None:
                        self._failure = ToolFailure(E.INVALID_ARGUMENT, "an unknown signal was asked for; send TERM, KILL or INT")
                        return
                    if proc.returncode is None:  # (once it is reaped its pid may be another's)
                        _kill_group(proc.pid, sig)
                else:
                    self._failure = ToolFailure(E.INVALID_ARGUMENT, "a Program stream was sent a second start; start another program in another stream")
                    return
            if stdin_open:
                _close(proc.stdin)
        except Exception:  # noqa: BLE001 - the call ended (cancelled, deadline, server stopping)
            return

    def _write(self, fd: int, data: bytes) -> bool:
        """Write all of `data` to stdin, waiting while the pipe is full; False when the program
        closed its stdin (the rest is dropped) or the stream ended."""
        view = memoryview(data)
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        while view:
            if self._stopping.is_set():
                return False
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                poller.poll(TICK_S * 1000)
                continue
            except OSError:
                return False
            view = view[written:]
        return True

    def _terminate(self, proc: subprocess.Popen[Any]) -> None:
        """SIGTERM to the group, SIGKILL once the grace is over (or at once when the group has
        gone before: nothing is waited for then)."""
        _kill_group(proc.pid, signal.SIGTERM)
        end = time.monotonic() + wire.PROGRAM_KILL_GRACE_S
        try:
            proc.wait(timeout=wire.PROGRAM_KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        while time.monotonic() < end and _group_alive(proc.pid):
            time.sleep(0.02)
        _kill_group(proc.pid, signal.SIGKILL)

    def end(self) -> None:
        """Stop reading and writing and kill the program's process group (SIGTERM, SIGKILL after
        the grace). Idempotent; a second caller waits for the first to finish."""
        self._stopping.set()
        self._cancelled.set()  # a start under way (it holds `_lock`) is then refused or seen below
        with self._end_lock:
            if self._ended:
                return
            self._ended = True
            self._release_workdir()
            with self._lock:
                proc = self._proc
            if proc is None:
                return
            if proc.poll() is None or _group_alive(proc.pid):
                self._terminate(proc)
            proc.wait()
            with self._lock:
                self._proc = None  # the pid may be reused from here on


def _close(pipe: Any) -> None:
    try:
        pipe.close()
    except OSError:
        pass
