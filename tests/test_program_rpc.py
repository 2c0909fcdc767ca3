"""`Program`: a long-lived program driven through one stream, in both homes (the `tools` fixture).

Processes are looked at the way the home sees them (through `tools.bash` and /proc there), so
the tests run unchanged against a lane.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from helpers import CALL_BOUND_S, GONE_WITHIN_S, dispatcher_pids, fails, host_process_state, process_state, wait_gone, wait_host_gone
from homes import HOMES

from osprey.errors import ToolError
from osprey.toolservice.client import ToolClient
from osprey.toolservice.program import ProgramHandle, ProgramOutput
from osprey_sidecar import wire


async def next_item(items: AsyncIterator[ProgramOutput]) -> ProgramOutput:
    return await asyncio.wait_for(anext(items), CALL_BOUND_S)


async def read_until(items: AsyncIterator[ProgramOutput], wanted: bytes, kind: str = "stdout") -> bytes:
    """The program's output of `kind` until it holds `wanted`."""
    seen = b""
    while wanted not in seen:
        item = await next_item(items)
        assert item.kind != "exit", f"the program exited first: {item}, after {seen!r}"
        if item.kind == kind:
            seen += item.data
    return seen


async def rest(handle: ProgramHandle | AsyncIterator[ProgramOutput]) -> list[ProgramOutput]:
    async def collect() -> list[ProgramOutput]:
        return [item async for item in handle]

    return await asyncio.wait_for(collect(), CALL_BOUND_S)


# --- both ways ----------------------------------------------------------------------------------


async def test_cat_echoes_stdin_over_several_round_trips(tools: ToolClient) -> None:
    async with await tools.program(["cat"]) as cat:
        assert cat.pid > 0
        items = aiter(cat)
        for n in range(5):
            line = f"round {n}: {'x' * n * 1000}\n".encode()
            await cat.send(line)
            assert await read_until(items, line) == line
        # More than one stdin chunk at once arrives whole and in order.
        big = bytes(range(256)) * (3 * wire.PROGRAM_STDIN_CHUNK_BYTES // 256 + 7)
        await cat.send(big)
        await cat.close_stdin()
        tail = await rest(items)
        assert b"".join(item.data for item in tail if item.kind == "stdout") == big
        assert tail[-1] == ProgramOutput("exit", exit_code=0)
        with pytest.raises(ToolError) as info:
            await cat.send(b"late")
        assert info.value.category == "program_ended" and "exited with code 0" in str(info.value)


async def test_stdout_stderr_and_the_exit_code(tools: ToolClient) -> None:
    handle = await tools.program(["sh", "-c", "echo out; echo err >&2; echo \"$EXTRA|$PAGER|$GIT_TERMINAL_PROMPT\"; exit 3"], env={"EXTRA": "given"})
    items = await rest(handle)
    assert b"".join(i.data for i in items if i.kind == "stdout") == b"out\ngiven|cat|0\n"
    assert b"".join(i.data for i in items if i.kind == "stderr") == b"err\n"
    assert items[-1] == ProgramOutput("exit", exit_code=3)
    assert [i.kind for i in items].count("exit") == 1


async def test_signals_reach_the_group_and_the_exit_names_the_signal(tools: ToolClient) -> None:
    handle = await tools.program(["sh", "-c", "sleep 1000 & echo $!; wait"])
    items = aiter(handle)
    child = int((await read_until(items, b"\n")).strip())
    await handle.signal("INT")
    # INT reaches the sleeping child too (it is in the group): the shell then exits.
    done = await rest(items)
    assert done[-1].kind == "exit"
    await wait_gone(tools, child)
    handle = await tools.program(["sleep", "1000"])
    await handle.signal("KILL")
    assert (await rest(handle))[-1] == ProgramOutput("exit", signal=9)
    await fails(handle.signal("TERM"), "program_ended")
    await fails(_bad_signal(tools), "invalid_argument")


async def _bad_signal(tools: ToolClient) -> None:
    async with await tools.program(["sleep", "1000"]) as handle:
        await handle.signal("HUP")


async def test_a_deadline_ends_the_program(tools: ToolClient) -> None:
    started = time.monotonic()
    handle = await tools.program(["sleep", "1000"], deadline_s=1.0)
    items = await rest(handle)
    assert items[-1] == ProgramOutput("exit", signal=15, timed_out=True)
    assert 0.9 < time.monotonic() - started < CALL_BOUND_S
    await wait_gone(tools, handle.pid)


# --- floods and slow readers --------------------------------------------------------------------

FLOOD = """
import os, sys
out = sys.stdout.buffer
block = b"y" * 65536
written = 0
while written < 200 * 1024 * 1024:
    out.write(block)
    out.flush()
    written += len(block)
    if written % (1024 * 1024) == 0:
        with open("written.tmp", "w") as fh:
            fh.write(str(written))
        os.replace("written.tmp", "written")
"""


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def test_a_flood_read_slowly_is_throttled_and_cancelled_midway(tools: ToolClient, workspace: Path, tool_home: str) -> None:
    dispatcher = dispatcher_pids()[0] if tool_home == "local" else None
    rss_before = _rss_kib(dispatcher) if dispatcher else 0
    handle = await tools.program(["python3", "-c", FLOOD])
    items = aiter(handle)
    got = 0
    for _ in range(20):  # a slow reader: a chunk now and then
        item = await next_item(items)
        assert item.kind == "stdout"
        got += len(item.data)
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)
    written = int((workspace / "written").read_text() or 0)
    # What the program could write is what was read, plus the bounded buffers on the way: the
    # pipe, the service's queue, and the transport's flow-control windows.
    assert written < got + 48 * 1024 * 1024, f"{written} bytes written while {got} were read: the flood is not throttled"
    if dispatcher:
        grown = _rss_kib(dispatcher) - rss_before
        assert grown < 48 * 1024, f"the dispatcher grew by {grown} KiB while a flood was read slowly"
    await handle.aclose()
    await handle.aclose()  # idempotent
    await wait_gone(tools, handle.pid)
    assert int((workspace / "written").read_text() or 0) < 200 * 1024 * 1024


# --- ending -------------------------------------------------------------------------------------

IGNORES_TERM = "trap '' TERM; echo ready; while :; do sleep 0.1; done"


async def test_a_program_ignoring_sigterm_is_killed_after_the_grace(tools: ToolClient) -> None:
    handle = await tools.program(["sh", "-c", IGNORES_TERM])
    items = aiter(handle)
    await read_until(items, b"ready")
    await handle.signal("TERM")
    await asyncio.sleep(0.3)
    assert await process_state(tools, handle.pid) not in ("", "Z", "X"), "it ignores SIGTERM"
    closed = time.monotonic()
    await handle.aclose()
    await asyncio.sleep(0.3)
    state = await process_state(tools, handle.pid)
    if time.monotonic() - closed < wire.PROGRAM_KILL_GRACE_S * 0.75:  # (a loaded machine may take longer to look)
        assert state not in ("", "Z", "X"), "SIGKILL must wait for the grace"
    await wait_gone(tools, handle.pid, within=wire.PROGRAM_KILL_GRACE_S + GONE_WITHIN_S)
    assert time.monotonic() - closed >= wire.PROGRAM_KILL_GRACE_S * 0.9


async def test_a_cancelled_task_leaves_no_process(tools: ToolClient) -> None:
    pids: list[int] = []

    async def drive() -> None:
        async with await tools.program(["sh", "-c", "sleep 1000 & echo $!; sh -c 'sleep 1000' & echo $!; wait"]) as handle:
            pids.append(handle.pid)
            async for item in handle:
                pids.extend(int(line) for line in item.data.split())

    task = asyncio.create_task(drive())
    deadline = time.monotonic() + CALL_BOUND_S
    while len(pids) < 3 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert len(pids) == 3
    for pid in pids:
        assert await process_state(tools, pid) not in ("", "Z", "X")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for pid in pids:
        await wait_gone(tools, pid)
    assert not tools.programs


async def test_closing_the_client_programs_ends_them(tools: ToolClient) -> None:
    handles = [await tools.program(["sleep", "1000"]) for _ in range(3)]
    assert tools.programs == frozenset(handles)
    await tools.close_programs()
    assert not tools.programs
    for handle in handles:
        await wait_gone(tools, handle.pid)
        await fails(handle.send(b"x"), "program_ended")


@pytest.mark.parametrize("home_name", sorted(HOMES))
async def test_closing_the_session_ends_its_programs(home_name: str, workspace: Path) -> None:
    async with HOMES[home_name]([str(workspace)]) as home:
        handle = await home.client.program(["sh", "-c", IGNORES_TERM])
        await read_until(aiter(handle), b"ready")
        pid = handle.pid
        await home.client.bash(f"echo {pid} > pid")
        if home_name == "local":
            assert host_process_state(pid) not in ("", "Z", "X")
    assert handle.closed and not home.client.programs
    if home_name == "local":
        await wait_host_gone(pid, within=wire.PROGRAM_KILL_GRACE_S + GONE_WITHIN_S)
    # (a lane's processes go with its container, which closing removed)


# --- limits and failures ------------------------------------------------------------------------


async def test_at_most_sixteen_run_at_once_and_other_calls_still_go(tools: ToolClient, workspace: Path) -> None:
    handles = [await tools.program(["cat"]) for _ in range(wire.PROGRAM_MAX_RUNNING)]
    try:
        err = await fails(tools.program(["cat"]), "resource_exhausted")
        assert f"{wire.PROGRAM_MAX_RUNNING} programs are running" in str(err) and "close one" in str(err)
        # The server's workers are not all held by the programs: ordinary calls are served.
        calls = [tools.bash("echo ok"), tools.write_file("f.txt", "hi"), *(tools.list_directory() for _ in range(8))]
        results = await asyncio.wait_for(asyncio.gather(*calls), CALL_BOUND_S)
        assert results[0].output == "ok\n"
        await handles[0].aclose()
        deadline = time.monotonic() + CALL_BOUND_S
        while True:  # the slot is given back once the service has ended the program
            try:
                again = await tools.program(["cat"])
                break
            except ToolError as exc:
                assert exc.category == "resource_exhausted"
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        handles[0] = again
        await again.send(b"still here\n")
        assert await read_until(aiter(again), b"still here\n") == b"still here\n"
    finally:
        await tools.close_programs()


async def test_a_missing_program(tools: ToolClient) -> None:
    err = await fails(tools.program(["no-such-program-here"]), "not_found")
    assert "no-such-program-here" in str(err) and "PATH" in str(err)
    await fails(tools.program(["./not-there"]), "not_found")
    await fails(tools.program([]), "invalid_argument")


async def test_a_workdir_outside_the_roots(tools: ToolClient, workspace: Path) -> None:
    err = await fails(tools.program(["cat"], workdir="../.."), "outside_root")
    assert "outside the allowed roots" in str(err)
    (workspace / "sub").mkdir()
    handle = await tools.program(["pwd", "-P"], workdir="sub")
    items = await rest(handle)
    assert items[0].data.strip().endswith(b"/sub")


async def test_the_extra_environment_is_bounded(tools: ToolClient) -> None:
    too_many = {f"V{n}": "x" for n in range(wire.PROGRAM_MAX_ENV_VARS + 1)}
    await fails(tools.program(["true"], env=too_many), "invalid_argument")
    await fails(tools.program(["true"], env={"A": "x" * (wire.PROGRAM_MAX_ENV_BYTES + 1)}), "invalid_argument")
    await fails(tools.program(["true"], env={"A=B": "x"}), "invalid_argument")


async def test_running_programs_are_no_strays(tools: ToolClient, tool_home: str) -> None:
    async with await tools.program(["cat"]) as cat:
        # In a lane, a command's end kills whatever else is left running; a program is spared.
        r = await tools.bash("setsid sleep 1000 > /dev/null 2>&1 < /dev/null & echo $!")
        stray = int(r.output)
        if tool_home == "lane":
            assert r.killed_background
            await wait_gone(tools, stray)
        else:
            await tools.exec(["kill", str(stray)])
        await cat.send(b"still alive\n")
        assert await read_until(aiter(cat), b"still alive\n") == b"still alive\n"
        assert await process_state(tools, cat.pid) not in ("", "Z", "X")


async def test_writing_to_a_program_that_has_ended(tools: ToolClient) -> None:
    handle = await tools.program(["true"])
    await wait_gone(tools, handle.pid)
    for _ in range(20):  # its exit is on the way, not read yet: what is sent is dropped
        await handle.send(b"x\n")
    await handle.signal("TERM")
    assert (await rest(handle))[-1] == ProgramOutput("exit", exit_code=0)
    await fails(handle.send(b"x\n"), "program_ended")


async def test_a_stopping_server_ends_its_programs(tmp_path: Path, workspace: Path) -> None:
    from osprey_sidecar.server import build_server

    socket_path = str(tmp_path / "tools.sock")
    server = build_server([str(workspace)], socket_path)
    client = ToolClient.for_socket(socket_path)
    try:
        handle = await client.program(["sh", "-c", IGNORES_TERM])
        await read_until(aiter(handle), b"ready")
        assert host_process_state(handle.pid) not in ("", "Z", "X")
        stopped = await asyncio.to_thread(server.stop, 0)
        await asyncio.to_thread(stopped.wait, CALL_BOUND_S)
        await wait_host_gone(handle.pid, within=wire.PROGRAM_KILL_GRACE_S + GONE_WITHIN_S)
    finally:
        await client.close()
        server.stop(None)


async def test_a_wrong_token_is_refused(tmp_path: Path, workspace: Path) -> None:
    from osprey.errors import DispatcherError
    from osprey_sidecar.server import build_server

    socket_path = str(tmp_path / "tools.sock")
    server = build_server([str(workspace)], socket_path, token="right")
    client = ToolClient.for_socket(socket_path, token="wrong")
    try:
        with pytest.raises(DispatcherError, match="refused the call"):
            await asyncio.wait_for(client.program(["cat"]), CALL_BOUND_S)
        assert not client.programs
    finally:
        await client.close()
        server.stop(None)
