"""Every ToolService call has a deadline; a home that stops answering is replaced, and the model
is told which; a lane kills what a command left running outside its process group.

A stuck home is made for real: the local dispatcher's process is stopped with SIGSTOP, a lane's
container is paused, a fork bomb fills a lane's process table.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from helpers import dispatcher_pids, require_docker

from osprey.config import SandboxSettings
from osprey.errors import ToolTimeout
from osprey.tools import ToolContext, ToolRegistry, base_tools
from osprey.toolservice.homes import LaneSupervisor, ToolServiceHome, open_tool_service


def context_for(home: ToolServiceHome) -> ToolContext:
    return ToolContext(client=home.client, cwd=home.roots[0], roots=home.roots, bash_max_output_bytes=1 << 20)


def registry() -> ToolRegistry:
    reg = ToolRegistry()
    for tool in base_tools(host_processes=False):
        reg.add(tool)
    return reg


@pytest.fixture
async def local(workspace: Path) -> AsyncIterator[ToolServiceHome]:
    (workspace / "a.txt").write_text("alpha\n")
    async with open_tool_service([str(workspace)]) as home:
        yield home


async def test_the_local_dispatcher_is_a_child_process(local: ToolServiceHome) -> None:
    [pid] = dispatcher_pids()
    assert pid != os.getpid()
    out = (await local.client.bash("echo $PPID")).output.strip()
    assert int(out) == pid, "bash runs under the dispatcher process, not the broker"


async def test_a_stuck_dispatcher_times_out_without_stalling_the_broker_and_is_replaced(local: ToolServiceHome) -> None:
    [pid] = dispatcher_pids()
    client = local.client
    client.call_deadline_s = 1.0
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    ticker = asyncio.ensure_future(tick())
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(ToolTimeout, match="did not answer within 1 s") as info:
            await client.read_file("a.txt")
        assert time.monotonic() - started < 15  # the deadline, a health probe, and a new dispatcher
        assert ticks >= 10, "the broker's event loop stalled while the call hung"
    finally:
        ticker.cancel()
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert "stopped answering" in info.value.recovery and "a new one started" in info.value.recovery, info.value.recovery
    [new_pid] = dispatcher_pids()
    assert new_pid != pid
    assert local.client is client and "alpha" in (await client.read_file("a.txt")).content
    # A healthy dispatcher is left alone: recovery says nothing and replaces nothing.
    assert await local.recover() is None
    assert dispatcher_pids() == [new_pid]


async def test_a_dead_dispatcher_is_replaced_and_the_model_is_told(local: ToolServiceHome) -> None:
    [pid] = dispatcher_pids()
    os.kill(pid, signal.SIGKILL)
    outcome = await registry().call("list_directory", {}, context_for(local))
    assert (outcome.is_error, outcome.category) == (True, "tool_service_unavailable"), outcome
    assert "a new one started" in outcome.text, outcome.text
    assert (await local.client.list_directory()).entries


async def test_bash_gets_its_own_timeout_plus_a_grace(local: ToolServiceHome) -> None:
    # The service reports a bash timeout itself, long before the call's deadline.
    local.client.call_deadline_s = 0.5  # unary calls only; bash's deadline follows its timeout
    result = await local.client.bash("sleep 5", timeout_ms=1000)
    assert result.timed_out


def lane_container(home: ToolServiceHome) -> object:
    from osprey.toolservice.images import docker_client

    assert isinstance(home, LaneSupervisor) and home.lane is not None
    return docker_client().containers.get(home.lane.container_id)


@pytest.fixture
async def lane(workspace: Path) -> AsyncIterator[ToolServiceHome]:
    require_docker()
    (workspace / "a.txt").write_text("alpha\n")
    async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=f"deadline-{os.getpid()}-{id(workspace):x}") as home:
        yield home


async def test_a_paused_lane_times_out_and_is_replaced(lane: ToolServiceHome) -> None:
    container = lane_container(lane)
    container.pause()  # type: ignore[attr-defined]
    client = lane.client
    client.call_deadline_s = 2.0
    started = time.monotonic()
    with pytest.raises(ToolTimeout) as info:
        await client.read_file("a.txt")
    assert "stopped answering" in info.value.recovery and "new lane started" in info.value.recovery, info.value.recovery
    assert time.monotonic() - started < 60
    assert lane_container(lane).id != container.id  # type: ignore[attr-defined]
    assert lane.client is client and "alpha" in (await client.read_file("a.txt")).content


async def test_a_lane_kills_what_a_command_left_outside_its_process_group(lane: ToolServiceHome) -> None:
    result = await lane.client.bash("setsid sleep 300 > /dev/null 2>&1 < /dev/null & echo started")
    assert result.killed_background, result
    ps = await lane.client.bash("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")
    assert "sleep 300" not in ps.output, ps.output


async def test_a_fork_bomb_does_not_starve_the_lane(lane: ToolServiceHome) -> None:
    lane.client.call_deadline_s = 20.0
    result = await lane.client.bash("setsid bash -c 'f(){ f|f & }; f' ; sleep 1; echo done", timeout_ms=10_000)
    assert result.killed_background, result
    started = time.monotonic()
    assert "alpha" in (await lane.client.read_file("a.txt")).content
    after = await lane.client.bash("echo still here")
    assert "still here" in after.output
    assert time.monotonic() - started < 20


async def test_a_catastrophic_pattern_gets_a_timeout_answer_through_the_service(workspace: Path, tmp_path: Path) -> None:
    """A lookaround pattern (ripgrep refuses it, so Python's `re` takes over) over a line of
    a's backtracks for ever: the search is stopped at its budget and the service answers."""
    import secrets

    from osprey.toolservice.client import ToolClient
    from osprey_sidecar.server import build_server

    (workspace / "a.txt").write_text("a" * 40 + "\n")
    socket_path = str(tmp_path / "tools.sock")
    token = secrets.token_hex(8)
    server = build_server([str(workspace)], socket_path, token, search_budget_s=2.0)
    client = ToolClient.for_socket(socket_path, token=token)
    try:
        await client.wait_ready(10)
        started = time.monotonic()
        with pytest.raises(Exception) as failure:
            await client.grep("(?=(a+)+b)")
        elapsed = time.monotonic() - started
        assert getattr(failure.value, "category", None) == "timeout", failure.value
        assert elapsed < 10, elapsed
        print(f"ReDoS grep answered timeout after {elapsed:.2f} s (budget 2 s)")
        assert (await client.read_file("a.txt")).total_lines == 1  # the service is still usable
    finally:
        await client.close()
        server.stop(grace=None)
