"""Running a program on the host for the broker (hooks, custom tools): in a session and process
group of its own, with its standard input given as bytes, each output stream kept as a bounded
head and tail, and a timeout or a cancel that stops the whole group: SIGTERM, then SIGKILL after a
grace period, children it started included.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Between SIGTERM and SIGKILL of a timed-out or cancelled program's process group.
TERM_GRACE_S = 2.0
READ_CHUNK_BYTES = 64 * 1024
_POLL_S = 0.05
_MAX_POLL_S = 0.5


class StartFailed(Exception):
    """The program could not be started; `error` is the operating system's reason."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class Output:
    """One output stream as kept: its first bytes, how many bytes after them were dropped, and its
    last bytes."""

    head: bytes
    dropped: int
    tail: bytes


@dataclass(frozen=True)
class HostRun:
    """How a program ended. `returncode` is asyncio's (negative: killed by that signal);
    `timed_out` says its group was stopped at the timeout; `left_running` that, with a `linger`,
    processes it started were still running after it exited (and were killed)."""

    returncode: int
    stdout: Output
    stderr: Output
    timed_out: bool = False
    left_running: bool = False


class _Capture:
    """One output stream within its budget: the head, a count of dropped bytes, the tail."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_budget, self.tail_budget = head, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.seen = 0

    def feed(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        room = self.head_budget - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_budget:
            self.tail += chunk[-self.tail_budget:]
            if len(self.tail) > self.tail_budget:
                del self.tail[: len(self.tail) - self.tail_budget]

    def output(self) -> Output:
        return Output(bytes(self.head), self.seen - len(self.head) - len(self.tail), bytes(self.tail))


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


async def _exited(proc: asyncio.subprocess.Process) -> None:
    """Until the program has exited. (`Process.wait` also waits for its pipes to close, which a
    process it started may hold open for as long as it likes.)"""
    waiter = asyncio.ensure_future(proc.wait())
    pause = _POLL_S / 4
    try:
        while proc.returncode is None and not waiter.done():
            await asyncio.wait({waiter}, timeout=pause)
            pause = min(pause * 2, _MAX_POLL_S)
    finally:
        waiter.cancel()


async def _terminate(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM to the process group; SIGKILL to what is left of it once the grace has passed (or
    at once when the whole group is gone before)."""
    _kill_group(proc.pid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    until = loop.time() + grace
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_exited(proc), grace)
        while _group_alive(proc.pid) and loop.time() < until:
            await asyncio.sleep(_POLL_S)
    finally:
        _kill_group(proc.pid, signal.SIGKILL)


async def _read(stream: asyncio.StreamReader | None, capture: _Capture) -> None:
    if stream is None:
        return
    while chunk := await stream.read(READ_CHUNK_BYTES):
        capture.feed(chunk)


async def _feed(stream: asyncio.StreamWriter | None, data: bytes) -> None:
    if stream is None:
        return
    try:
        if data:
            stream.write(data)
            await stream.drain()
    except OSError:
        pass  # the program closed its standard input: the rest is not wanted
    finally:
        with contextlib.suppress(OSError):
            stream.close()


async def run_program(
    argv: Sequence[str],
    *,
    cwd: str | Path,
    env: Mapping[str, str],
    timeout: float,
    head: int,
    tail: int = 0,
    stdin: bytes = b"",
    executable: str | None = None,
    linger: float | None = None,
    grace: float = TERM_GRACE_S,
) -> HostRun:
    """Run `argv` (no shell; `executable` is the file to run when given) in `cwd` with exactly
    `env`, `stdin` written to its standard input, which is then closed. Of each output stream the
    first `head` and the last `tail` bytes are kept; the rest is read and dropped.

    The program has `timeout` seconds to exit. With `linger`, its output is still read that many
    seconds after it exits, then whatever it left running in its process group is killed. Without
    it, it must also close its output within the timeout (a process it started that holds the
    output counts), and processes it left running with their output closed are left alone.

    At the timeout, and when the run is cancelled, the whole process group gets SIGTERM and, after
    `grace` seconds, SIGKILL; a cancel then propagates. Raises StartFailed when the program cannot
    be started, OSError when waiting for it fails (its group is killed first)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, executable=executable, cwd=cwd, env=dict(env), start_new_session=True,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise StartFailed(exc) from None
    out, err = _Capture(head, tail), _Capture(head, tail)
    readers = [asyncio.ensure_future(_read(proc.stdout, out)), asyncio.ensure_future(_read(proc.stderr, err))]
    tasks = [*readers, asyncio.ensure_future(_feed(proc.stdin, stdin))]
    timed_out = left_running = False
    try:
        try:
            async with asyncio.timeout(timeout):
                await _exited(proc)
                if linger is None:
                    await asyncio.wait(tasks)
        except TimeoutError:
            timed_out = True
            await _terminate(proc, grace)
            await _exited(proc)
        else:
            if linger is not None:
                # Something the program started may still hold a pipe: read on briefly, then stop it.
                await asyncio.wait(readers, timeout=linger)
                left_running = _group_alive(proc.pid)
        if linger is not None or timed_out:
            _kill_group(proc.pid, signal.SIGKILL)
        # With the group gone, the pipes reach their end.
        await asyncio.wait(tasks, timeout=grace)
    except asyncio.CancelledError:
        try:
            await _terminate(proc, grace)
        finally:
            _kill_group(proc.pid, signal.SIGKILL)
        raise
    finally:
        if proc.returncode is None:
            _kill_group(proc.pid, signal.SIGKILL)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    return HostRun(returncode, out.output(), err.output(), timed_out, left_running and not timed_out)
