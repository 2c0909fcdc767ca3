"""The host program runner (osprey.hostrun) with real subprocesses: standard input, bounded output,
exit statuses, and a timeout or a cancel that leaves nothing of the process group running."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers import CALL_BOUND_S, GONE_WITHIN_S, host_process_state, read_pid, wait_for_file, wait_host_gone

from osprey.hostrun import HostRun, Output, StartFailed, run_program

ENV = {"PATH": os.environ.get("PATH", os.defpath)}


async def sh(script: str, cwd: Path, *, env: dict[str, str] = ENV, stdin: bytes = b"", timeout: float = CALL_BOUND_S,
             linger: float | None = None, grace: float = 2.0) -> HostRun:
    """`sh -c script`, keeping 1 KiB of each stream's head and tail."""
    run = run_program(["/bin/sh", "-c", script], cwd=cwd, env=env, stdin=stdin, timeout=timeout, head=1024, tail=1024,
                      linger=linger, grace=grace)
    return await asyncio.wait_for(run, CALL_BOUND_S * 2)


async def test_stdin_reaches_the_program_and_its_output_and_status_come_back(tmp_path: Path) -> None:
    run = await sh("cat; echo to-stderr >&2; exit 3", tmp_path, stdin=b"hello\n")
    assert run == HostRun(3, Output(b"hello\n", 0, b""), Output(b"to-stderr\n", 0, b""))


async def test_the_environment_and_the_working_directory_are_the_ones_given(tmp_path: Path) -> None:
    run = await sh('echo "$HOSTRUN_MARK $(pwd -P)"; env | grep -c . ', tmp_path, env={**ENV, "HOSTRUN_MARK": "given"})
    lines = run.stdout.head.decode().splitlines()
    assert lines[0] == f"given {os.path.realpath(tmp_path)}"
    assert "HOME" not in run.stdout.head.decode()


async def test_argv0_may_differ_from_the_executable(tmp_path: Path) -> None:
    run = await run_program(["shown-name", "-c", 'echo "$0"'], executable="/bin/sh", cwd=tmp_path, env=ENV, timeout=CALL_BOUND_S, head=100)
    assert run.stdout.head == b"shown-name\n"


async def test_a_signal_ends_with_a_negative_returncode(tmp_path: Path) -> None:
    run = await sh("kill -TERM $$", tmp_path)
    assert run.returncode == -signal.SIGTERM and not run.timed_out


async def test_output_is_kept_as_a_head_and_a_tail_and_the_rest_counted(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.write(''.join(chr(65 + i % 26) for i in range(300_000))); sys.stderr.write('e' * 10)"
    run = await run_program([sys.executable, "-c", code], cwd=tmp_path, env=ENV, timeout=CALL_BOUND_S, head=1000, tail=500)
    data = "".join(chr(65 + i % 26) for i in range(300_000)).encode()
    assert run.stdout == Output(data[:1000], 300_000 - 1500, data[-500:])
    assert run.stderr == Output(b"e" * 10, 0, b"")
    head_only = await run_program([sys.executable, "-c", code], cwd=tmp_path, env=ENV, timeout=CALL_BOUND_S, head=64)
    assert head_only.stdout == Output(data[:64], 300_000 - 64, b"")


async def test_a_large_input_reaches_a_program_that_never_reads_it(tmp_path: Path) -> None:
    run = await sh("exit 0", tmp_path, stdin=b"x" * 4_000_000)
    assert run.returncode == 0 and not run.timed_out
    run = await sh("head -c 5", tmp_path, stdin=b"y" * 4_000_000)
    assert (run.returncode, run.stdout.head) == (0, b"yyyyy")


async def test_a_program_that_cannot_start_raises_start_failed(tmp_path: Path) -> None:
    with pytest.raises(StartFailed) as info:
        await run_program(["true"], cwd=tmp_path / "missing", env=ENV, timeout=5, head=10)
    assert isinstance(info.value.error, FileNotFoundError)
    data = tmp_path / "data.txt"
    data.write_text("not a program\n")
    data.chmod(0o644)
    with pytest.raises(StartFailed) as info:
        await run_program([str(data)], cwd=tmp_path, env=ENV, timeout=5, head=10)
    assert isinstance(info.value.error, PermissionError)


async def test_a_timeout_kills_the_whole_group_even_what_ignores_sigterm(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"(trap '' TERM; exec sleep 300) & echo $! > {pids}; echo started; sleep 300"
    start = time.monotonic()
    run = await sh(script, tmp_path, timeout=1, grace=0.5)
    assert run.timed_out and run.stdout.head == b"started\n"
    assert time.monotonic() - start < 1 + 0.5 + GONE_WITHIN_S
    await wait_host_gone(read_pid(pids))


async def test_a_cancel_kills_the_whole_group_and_propagates(tmp_path: Path) -> None:
    script = f"sleep 300 & echo $! > {tmp_path}/grandchild; echo $$ > {tmp_path}/child; wait"
    task = asyncio.ensure_future(sh(script, tmp_path, grace=0.5))
    await wait_for_file(tmp_path / "child")
    await wait_for_file(tmp_path / "grandchild")
    grandchild, child = read_pid(tmp_path / "grandchild"), read_pid(tmp_path / "child")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, CALL_BOUND_S)
    await wait_host_gone(grandchild)
    await wait_host_gone(child)


async def test_with_a_linger_what_the_program_left_running_is_killed(tmp_path: Path) -> None:
    script = f"sleep 300 >/dev/null 2>&1 & echo $! > {tmp_path}/bg; echo done"
    run = await sh(script, tmp_path, linger=0.2)
    assert (run.returncode, run.stdout.head, run.timed_out, run.left_running) == (0, b"done\n", False, True)
    await wait_host_gone(read_pid(tmp_path / "bg"))
    # A child that keeps the output open does not hold the run up past the linger.
    start = time.monotonic()
    run = await sh(f"sleep 300 & echo $! > {tmp_path}/holder; echo out", tmp_path, linger=0.2)
    assert (run.returncode, run.stdout.head, run.left_running) == (0, b"out\n", True)
    assert time.monotonic() - start < CALL_BOUND_S / 2
    await wait_host_gone(read_pid(tmp_path / "holder"))


async def test_without_a_linger_output_must_close_within_the_timeout(tmp_path: Path) -> None:
    # The shell exits at once, but its child holds standard output: that is a timeout.
    run = await sh(f"sleep 300 & echo $! > {tmp_path}/holder; echo out", tmp_path, timeout=1, grace=0.5)
    assert run.timed_out and run.stdout.head == b"out\n"
    await wait_host_gone(read_pid(tmp_path / "holder"))


async def test_without_a_linger_a_detached_child_with_its_output_closed_is_left_alone(tmp_path: Path) -> None:
    run = await sh(f"sleep 300 >/dev/null 2>&1 </dev/null & echo $! > {tmp_path}/daemon", tmp_path)
    pid = read_pid(tmp_path / "daemon")
    try:
        assert (run.returncode, run.timed_out, run.left_running) == (0, False, False)
        assert host_process_state(pid) not in ("", "Z", "X")
    finally:
        os.kill(pid, signal.SIGKILL)
    await wait_host_gone(pid)


async def test_a_process_that_left_the_group_and_holds_the_output_does_not_hold_up_the_run(tmp_path: Path) -> None:
    # setsid puts it beyond the group kill; the run still ends, its output bounded by the grace.
    for linger in (0.2, None):
        start = time.monotonic()
        run = await sh(f"setsid sleep 300 & echo $! > {tmp_path}/escaped; echo out", tmp_path, timeout=1, grace=0.5, linger=linger)
        pid = read_pid(tmp_path / "escaped")
        try:
            assert run.stdout.head == b"out\n" and run.timed_out is (linger is None)
            assert time.monotonic() - start < 1 + 3 * 0.5 + 1
        finally:
            os.kill(pid, signal.SIGKILL)
        await wait_host_gone(pid)
