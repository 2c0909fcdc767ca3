"""`Exec`: a program run from an argv, with no shell, in both homes (the `tools` fixture).

Like the conformance suite, the tests look at the home's side only through the ToolService
(processes through `tools.bash`), so they run unchanged against a lane.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from helpers import CALL_BOUND_S, fails, process_state, read_pid, wait_for_file, wait_gone, write

from osprey.errors import ToolError
from osprey.toolservice.client import ToolClient, dropped_marker
from osprey_sidecar import wire


async def run(tools: ToolClient, argv: list[str], **kw: object):  # type: ignore[no-untyped-def]
    return await asyncio.wait_for(tools.exec(argv, **kw), CALL_BOUND_S)  # type: ignore[arg-type]


# --- no shell -----------------------------------------------------------------------------------


async def test_argv_reaches_the_program_as_it_is(tools: ToolClient, workspace: Path) -> None:
    r = await run(tools, ["printf", "%s|", "a; touch pwned", "$HOME", "`id`", "two words", "*"])
    assert (r.exit_code, r.stdout.head) == (0, b"a; touch pwned|$HOME|`id`|two words|*|")
    assert not (workspace / "pwned").exists()


async def test_argv0_is_never_a_command_line(tools: ToolClient, workspace: Path) -> None:
    err = await fails(tools.exec(["echo hi; touch pwned"]), "not_found")
    assert "echo hi; touch pwned" in str(err)
    await fails(tools.exec(["touch pwned", "x"]), "not_found")
    assert not (workspace / "pwned").exists()


async def test_a_shell_runs_only_when_asked_for(tools: ToolClient) -> None:
    r = await run(tools, ["sh", "-c", 'echo $((6 * 7)) "$0" "$1"', "zero", "one"])
    assert r.stdout.head == b"42 zero one\n"


async def test_a_program_given_by_path(tools: ToolClient, workspace: Path) -> None:
    script = write(workspace / "bin" / "hello.sh", "#!/bin/sh\necho hello from \"$(pwd -P)\" \"$@\"\n")
    script.chmod(0o755)
    r = await run(tools, ["./hello.sh", "x"], workdir="bin")
    assert r.stdout.head.decode() == f"hello from {os.path.realpath(workspace / 'bin')} x\n"
    r = await run(tools, [str(script)])
    assert r.stdout.head.startswith(b"hello from ")
    assert (await run(tools, ["/bin/sh", "-c", "exit 4"])).exit_code == 4


# --- failures -----------------------------------------------------------------------------------


async def test_a_missing_program_is_not_found(tools: ToolClient, workspace: Path) -> None:
    err = await fails(tools.exec(["no-such-program-osprey"]), "not_found")
    assert "PATH" in str(err)
    await fails(tools.exec(["./missing.sh"]), "not_found")
    await fails(tools.exec([str(workspace / "nowhere" / "x")]), "not_found")


async def test_a_file_that_cannot_run_is_refused(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "data.txt", "not a program\n").chmod(0o644)  # no x bit: refused even to root
    await fails(tools.exec(["./data.txt"]), "permission_denied")


async def test_bad_arguments(tools: ToolClient) -> None:
    await fails(tools.exec([]), "invalid_argument")
    await fails(tools.exec([""]), "invalid_argument")
    await fails(tools.exec(["echo", "a\x00b"]), "invalid_argument")
    await fails(tools.exec(["true"], timeout_ms=-1), "invalid_argument")
    await fails(tools.exec(["true"], max_output_bytes=-1), "invalid_argument")
    err = await fails(tools.exec(["true"], timeout_ms=wire.EXEC_MAX_TIMEOUT_MS + 1), "invalid_argument")
    assert str(wire.EXEC_MAX_TIMEOUT_MS) in str(err)
    await fails(tools.exec(["true"], max_output_bytes=wire.EXEC_MAX_OUTPUT_BYTES + 1), "invalid_argument")
    err = await fails(tools.exec(["cat"], stdin=b"x" * (wire.EXEC_MAX_STDIN_BYTES + 1)), "invalid_argument")
    assert "stdin" in str(err)


async def test_workdir_must_be_inside_the_roots(tools: ToolClient, workspace: Path) -> None:
    outside = workspace.parent / "outside"
    outside.mkdir()
    (workspace / "dir-out").symlink_to(outside, target_is_directory=True)
    (workspace / "sub").mkdir()
    write(workspace / "file.txt", "x\n")
    for workdir in ("/", "..", "dir-out", str(outside), "sub/../.."):
        await fails(tools.exec(["pwd"], workdir=workdir), "outside_root")
    await fails(tools.exec(["pwd"], workdir="missing"), "not_found")
    await fails(tools.exec(["pwd"], workdir="file.txt"), "not_a_directory")
    assert (await run(tools, ["pwd", "-P"])).stdout.head.decode() == os.path.realpath(workspace) + "\n"
    assert (await run(tools, ["pwd", "-P"], workdir="sub")).stdout.head.decode() == os.path.realpath(workspace / "sub") + "\n"


# --- input and output ---------------------------------------------------------------------------


async def test_stdin_is_fed_then_closed(tools: ToolClient) -> None:
    data = b"first line\n\x00\xff binary\nlast line without newline"
    r = await run(tools, ["cat"], stdin=data)
    assert (r.stdout.head, r.stdout.dropped_bytes, r.stderr.head) == (data, 0, b"")
    # Without stdin the program reads end of file at once, never a terminal or the service's input.
    r = await run(tools, ["sh", "-c", "cat; echo done"], timeout_ms=20_000)
    assert (r.stdout.head, r.timed_out) == (b"done\n", False)


async def test_large_stdin_and_output_at_once_do_not_deadlock(tools: ToolClient) -> None:
    data = os.urandom(3 * 1024 * 1024)
    r = await run(tools, ["cat"], stdin=data, max_output_bytes=1000)
    assert (r.exit_code, len(r.stdout.head), len(r.stdout.tail)) == (0, 500, 500)
    assert r.stdout.head == data[:500] and r.stdout.tail == data[-500:]
    assert r.stdout.dropped_bytes == len(data) - 1000
    # A program that never reads its stdin is not held up by it.
    r = await run(tools, ["true"], stdin=data)
    assert (r.exit_code, r.timed_out) == (0, False)


async def test_stdout_and_stderr_have_budgets_of_their_own(tools: ToolClient) -> None:
    script = "seq 1 20000; seq 1 200 >&2"
    r = await run(tools, ["sh", "-c", script], max_output_bytes=1000)
    out = b"".join(b"%d\n" % i for i in range(1, 20001))
    err = b"".join(b"%d\n" % i for i in range(1, 201))  # 692 bytes: within its budget
    assert r.stdout.head == out[:500] and r.stdout.tail == out[-500:]
    assert r.stdout.dropped_bytes == len(out) - 1000
    assert r.stderr.head == err[:500] and r.stderr.tail == err[500:] and r.stderr.dropped_bytes == 0
    text = r.stdout.text()
    assert text.startswith("1\n2\n") and text.endswith("19999\n20000\n")
    assert dropped_marker(len(out) - 1000) in text
    assert r.stderr.text() == err.decode()


async def test_output_within_budget_is_whole_and_bytes_are_kept(tools: ToolClient) -> None:
    r = await run(tools, ["printf", "caf\\351\\n"])
    assert (r.stdout.head + r.stdout.tail, r.stdout.dropped_bytes) == (b"caf\xe9\n", 0)
    assert r.stdout.text() == "caf\ufffd\n"
    r = await run(tools, ["head", "-c", "3000000", "/dev/zero"])  # the default budget: 1 MiB per stream
    assert len(r.stdout.head) + len(r.stdout.tail) == wire.DEFAULT_MAX_OUTPUT_BYTES
    assert r.stdout.dropped_bytes == 3_000_000 - wire.DEFAULT_MAX_OUTPUT_BYTES


# --- how it ends --------------------------------------------------------------------------------


async def test_exit_codes_and_signals(tools: ToolClient) -> None:
    assert (await run(tools, ["true"])).exit_code == 0
    assert (await run(tools, ["false"])).exit_code == 1
    assert (await run(tools, ["sh", "-c", "exit 255"])).exit_code == 255
    r = await run(tools, ["sh", "-c", "echo before; kill -TERM $$"])
    assert (r.exit_code, r.signal, r.timed_out, r.stdout.head) == (-1, signal.SIGTERM, False, b"before\n")
    r = await run(tools, ["sh", "-c", "kill -KILL $$"])
    assert (r.exit_code, r.signal) == (-1, signal.SIGKILL)
    r = await run(tools, ["sleep", "0.3"])
    assert 250 <= r.duration_ms < CALL_BOUND_S * 1000


async def test_timeout_kills_the_process_group(tools: ToolClient, workspace: Path) -> None:
    started = time.monotonic()
    r = await run(tools, ["sh", "-c", "sleep 60 & echo $! > child.pid; echo $$ > leader.pid; echo waiting; wait"], timeout_ms=1_000)
    assert time.monotonic() - started < CALL_BOUND_S
    assert (r.timed_out, r.exit_code, r.signal, r.stdout.head) == (True, -1, signal.SIGTERM, b"waiting\n"), r
    await wait_gone(tools, read_pid(workspace / "child.pid"))
    await wait_gone(tools, read_pid(workspace / "leader.pid"))


async def test_timeout_kills_what_ignores_sigterm(tools: ToolClient, workspace: Path) -> None:
    r = await run(tools, ["sh", "-c", "trap '' TERM; echo $$ > leader.pid; while :; do sleep 1; done"], timeout_ms=500)
    assert (r.timed_out, r.exit_code, r.signal) == (True, -1, signal.SIGKILL), r
    await wait_gone(tools, read_pid(workspace / "leader.pid"))


async def test_cancelling_the_call_kills_the_process_group(tools: ToolClient, workspace: Path) -> None:
    task = asyncio.create_task(tools.exec(["sh", "-c", "sleep 60 & echo $! > child.pid; echo $$ > leader.pid; wait"], timeout_ms=120_000))
    await wait_for_file(workspace / "leader.pid")
    child, leader = read_pid(workspace / "child.pid"), read_pid(workspace / "leader.pid")
    assert await process_state(tools, child) not in ("", "Z", "X"), "the child must be running before the cancel"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_gone(tools, child)
    await wait_gone(tools, leader)
    assert (await run(tools, ["echo", "alive"])).stdout.head == b"alive\n"


async def test_what_the_program_leaves_behind_is_killed(tools: ToolClient, workspace: Path) -> None:
    r = await run(tools, ["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $! > bg.pid; echo started"])
    assert (r.exit_code, r.stdout.head, r.killed_background) == (0, b"started\n", True)
    await wait_gone(tools, read_pid(workspace / "bg.pid"))
    assert not (await run(tools, ["sh", "-c", "(echo sub); echo main"])).killed_background


async def test_calls_run_side_by_side(tools: ToolClient) -> None:
    started = time.monotonic()
    results = await asyncio.wait_for(asyncio.gather(*(tools.exec(["sh", "-c", f"sleep 1; echo {i}"]) for i in range(6))), CALL_BOUND_S)
    assert [r.stdout.head for r in results] == [f"{i}\n".encode() for i in range(6)]
    assert time.monotonic() - started < 5, "one after the other would take 6 s"


# --- the local home's PATH ----------------------------------------------------------------------


async def test_argv0_is_found_on_the_services_path(workspace: Path, tmp_path: Path) -> None:
    from osprey.toolservice.homes import open_tool_service

    bin_dir = tmp_path / "bin"
    write(bin_dir / "osprey-hello", "#!/bin/sh\necho hello from PATH\n").chmod(0o755)
    write(workspace / "osprey-local", "#!/bin/sh\necho relative PATH entry\n").chmod(0o755)
    env = {"PATH": f".:{bin_dir}:/usr/bin:/bin", "LANG": "C.UTF-8"}
    async with open_tool_service([str(workspace)], env=env) as home:
        r = await home.client.exec(["osprey-hello"])
        assert r.stdout.head == b"hello from PATH\n"
        # "." on PATH would mean a different directory in every workdir: it is not searched.
        await fails(home.client.exec(["osprey-local"]), "not_found")
    async with open_tool_service([str(workspace)]) as home:
        with pytest.raises(ToolError) as info:
            await home.client.exec(["osprey-hello"])
        assert info.value.category == "not_found"


def test_the_sidecar_refuses_oversized_stdin_itself(workspace: Path) -> None:
    from osprey_sidecar.errors import ToolFailure
    from osprey_sidecar.paths import Roots
    from osprey_sidecar.shell import ExecRun

    with pytest.raises(ToolFailure) as info:
        ExecRun(Roots([str(workspace)]), ["cat"], stdin=b"x" * (wire.EXEC_MAX_STDIN_BYTES + 1))
    assert info.value.category == "invalid_argument"


def test_a_budget_keeps_head_and_tail_across_chunks() -> None:
    from osprey_sidecar.shell import Budget

    data = bytes(range(256)) * 10
    kept, streamed = Budget(101), Budget(101, keep_head=False)
    shown = []
    for start in range(0, len(data), 37):
        kept.feed(data[start:start + 37])
        shown.append(streamed.feed(data[start:start + 37]))
    assert bytes(kept.head) == data[:50] and bytes(kept.tail) == data[-51:]
    assert kept.dropped == len(data) - 101
    assert b"".join(shown) == data[:50] and streamed.head == b"" and streamed.dropped == kept.dropped
    small = Budget(1000)
    small.feed(b"abc")
    assert (bytes(small.head), bytes(small.tail), small.dropped) == (b"abc", b"", 0)
