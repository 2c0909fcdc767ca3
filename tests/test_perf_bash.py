"""bash and exec wait on the program itself (its pipes, its exit, a cancel), with no fixed sleeps.

These run the sidecar's `BashRun`/`ExecRun` in-process on real subprocesses, once with the
program's pidfd and once with the thread that stands in where pidfds are refused, and check
behaviour only: every byte delivered, the right exit status, the process group gone, nothing
left open. How fast a call returns is measured by bench/bash_latency.py, not here.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from osprey_sidecar import shell
from osprey_sidecar._proto import tools_pb2 as pb
from osprey_sidecar.paths import Roots
from osprey_sidecar.shell import BashRun, ExecRun

# Generous bounds that only a hang would reach (the commands below would run for 60 s).
HANG_S = 30.0
GONE_WITHIN_S = 5.0


@pytest.fixture(params=["pidfd", "thread"])
def exit_watch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Which way the run learns of the program's exit."""
    if request.param == "thread":
        def refused(pid: int) -> int:
            raise OSError(38, "pidfd_open refused")

        monkeypatch.setattr(shell, "_pidfd_open", refused)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("this Python has no os.pidfd_open")
    yield request.param
    for thread in threading.enumerate():
        if thread.name == "osprey-exit-watch":
            thread.join(GONE_WITHIN_S)
            assert not thread.is_alive(), "an exit watch outlived its run"


def bash(workspace: Path, command: str, **kwargs: int) -> tuple[bytes, pb.BashExit, list[bytes]]:
    """Run `command`; (streamed head + tail, the exit event, the streamed chunks)."""
    run = BashRun(Roots([str(workspace)]), command, **kwargs)
    chunks: list[bytes] = []
    exits = []
    for event in run.events():
        if event.HasField("output"):
            chunks.append(event.output.data)
        else:
            exits.append(event.exit)
    assert len(exits) == 1, "exactly one exit event, last"
    return b"".join(chunks) + exits[0].tail, exits[0], chunks


def gone(pid: int) -> bool:
    """Whether `pid` has ended (a zombie has: it only waits to be reaped)."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


def read_pid(path: Path) -> int:
    text = path.read_text()
    assert text.endswith("\n"), f"{path.name} is incomplete"
    return int(text)


def test_output_and_exit_status(tmp_path: Path, exit_watch: str) -> None:
    out, done, _ = bash(tmp_path, "echo out; echo err >&2; printf tail; exit 3")
    assert (out, done.exit_code, done.signal, done.timed_out, done.killed_background) == (b"out\nerr\ntail", 3, 0, False, False)
    out, done, _ = bash(tmp_path, "echo before; kill -KILL $$")
    assert (out, done.exit_code, done.signal) == (b"before\n", -1, signal.SIGKILL)
    out, done, _ = bash(tmp_path, "true")
    assert (out, done.exit_code) == (b"", 0)


def test_large_output_keeps_head_and_tail(tmp_path: Path, exit_watch: str) -> None:
    expected = "".join(f"{i}\n" for i in range(1, 200_001)).encode()
    out, done, chunks = bash(tmp_path, "seq 1 200000", max_output_bytes=10_000)
    assert b"".join(chunks) == expected[:5_000]
    assert done.tail == expected[-5_000:]
    assert done.dropped_bytes == len(expected) - 10_000
    assert done.exit_code == 0
    out, done, _ = bash(tmp_path, "seq 1 200000", max_output_bytes=4 * 1024 * 1024)
    assert (out, done.dropped_bytes) == (expected, 0)


def test_a_background_child_holding_the_pipe_does_not_hold_the_call(tmp_path: Path, exit_watch: str) -> None:
    started = time.monotonic()
    out, done, _ = bash(tmp_path, "sleep 60 & echo $! > bg.pid; echo done", timeout_ms=120_000)
    assert time.monotonic() - started < HANG_S
    assert (out, done.exit_code, done.timed_out, done.killed_background) == (b"done\n", 0, False, True)
    assert gone(read_pid(tmp_path / "bg.pid")), "the background child must be killed with the group"


def test_a_child_that_left_the_group_is_waited_for_only_within_the_grace(tmp_path: Path, exit_watch: str) -> None:
    # setsid takes the child out of the process group: killing the group cannot close the
    # pipe it holds, so only the bounded wait after the exit ends the call.
    started = time.monotonic()
    out, done, _ = bash(tmp_path, "setsid sleep 60 & echo $! > escaped.pid; echo done; exit 2", timeout_ms=120_000)
    escaped = read_pid(tmp_path / "escaped.pid")
    try:
        assert time.monotonic() - started < HANG_S
        assert (out, done.exit_code, done.timed_out) == (b"done\n", 2, False)
    finally:
        os.kill(escaped, signal.SIGKILL)


def test_a_program_that_closed_its_output_is_waited_for(tmp_path: Path, exit_watch: str) -> None:
    out, done, _ = bash(tmp_path, "echo early; exec >&- 2>&-; sleep 0.3; exit 5")
    assert (out, done.exit_code, done.timed_out) == (b"early\n", 5, False)


def test_timeout_kills_the_process_group(tmp_path: Path, exit_watch: str) -> None:
    out, done, _ = bash(tmp_path, "sleep 60 & echo $! > child.pid; echo waiting; wait", timeout_ms=300)
    assert (out, done.timed_out, done.exit_code, done.signal) == (b"waiting\n", True, -1, signal.SIGTERM)
    assert done.duration_ms >= 300
    assert gone(read_pid(tmp_path / "child.pid"))
    out, done, _ = bash(tmp_path, "trap '' TERM; sleep 60 & echo $! > stubborn.pid; echo waiting; wait; wait", timeout_ms=300)
    assert (out, done.timed_out, done.exit_code, done.signal) == (b"waiting\n", True, -1, signal.SIGKILL)
    assert gone(read_pid(tmp_path / "stubborn.pid"))


def test_cancel_from_another_thread_ends_the_run(tmp_path: Path, exit_watch: str) -> None:
    run = BashRun(Roots([str(tmp_path)]), "sleep 60 & echo $! > child.pid; echo started; wait", timeout_ms=120_000)
    started = time.monotonic()
    events = []
    for event in run.events():
        events.append(event)
        if event.HasField("output") and b"started" in event.output.data:
            threading.Thread(target=run.cancel).start()
    assert time.monotonic() - started < HANG_S
    assert events[0].output.data == b"started\n"
    assert events[-1].HasField("exit") and events[-1].exit.signal == signal.SIGKILL
    assert gone(read_pid(tmp_path / "child.pid"))


def test_a_run_cancelled_before_it_starts_runs_nothing(tmp_path: Path, exit_watch: str) -> None:
    run = BashRun(Roots([str(tmp_path)]), "touch ran")
    run.cancel()
    assert list(run.events()) == []
    assert not (tmp_path / "ran").exists()


def test_exec_feeds_stdin_and_keeps_streams_apart(tmp_path: Path, exit_watch: str) -> None:
    data = os.urandom(300_000)
    response = ExecRun(Roots([str(tmp_path)]), ["sh", "-c", "cat; echo note >&2; exit 6"], stdin=data).run()
    assert (response.stdout.head, response.stdout.tail, response.stdout.dropped_bytes) == (data, b"", 0)
    assert (response.stderr.head, response.exit_code) == (b"note\n", 6)
    # A program that stops reading: the rest of stdin is dropped, not waited on.
    response = ExecRun(Roots([str(tmp_path)]), ["head", "-c", "10"], stdin=data).run()
    assert (response.stdout.head, response.exit_code, response.timed_out) == (data[:10], 0, False)


def test_no_descriptor_is_left_open(tmp_path: Path, exit_watch: str) -> None:
    def open_fds() -> set[str]:
        return set(os.listdir("/proc/self/fd"))

    bash(tmp_path, "true")
    before = open_fds()
    for _ in range(20):
        bash(tmp_path, "echo hi")
        bash(tmp_path, "sleep 60 & exit 1")
        bash(tmp_path, "sleep 60", timeout_ms=50)
    for thread in threading.enumerate():
        if thread.name == "osprey-exit-watch":
            thread.join(GONE_WITHIN_S)
    assert open_fds() - before == set()


def test_a_pidfd_is_used_where_the_kernel_offers_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(os, "pidfd_open"):
        pytest.skip("this Python has no os.pidfd_open")
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        pytest.skip("this kernel refuses pidfd_open")
    watched: list[int] = []
    real_watch = shell._watch_exit

    def counting_watch(pid: int, write: int) -> None:
        watched.append(pid)
        real_watch(pid, write)

    monkeypatch.setattr(shell, "_watch_exit", counting_watch)
    out, done, _ = bash(tmp_path, "echo hi")
    assert (out, done.exit_code) == (b"hi\n", 0)
    assert watched == [], "no thread is needed to learn of the exit"
    monkeypatch.setattr(shell, "_pidfd_open", lambda pid: (_ for _ in ()).throw(OSError(38, "refused")))
    out, done, _ = bash(tmp_path, "echo hi")
    assert (out, done.exit_code) == (b"hi\n", 0)
    assert len(watched) == 1
