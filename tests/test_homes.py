"""The three ToolService homes behind one interface, and recovery through the home's own client.

A home is killed or stopped for real (the dispatcher's process, a lane's container, an attached
sidecar's server); the failed call raises its own error with `recovery` saying what the home did,
and the same client object then works (or, for an attached lane, says why it cannot).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from helpers import dispatcher_pids, require_docker
from pydantic import TypeAdapter, ValidationError

from osprey.config import SandboxSettings
from osprey.errors import DispatcherError, SandboxError, ToolError, ToolTimeout
from osprey.toolservice.home_config import AttachedHomeConfig, HomeConfig, LaneHomeConfig, LocalHomeConfig, home_config
from osprey.toolservice.homes import AttachedLane, LaneSupervisor, LocalDispatcher, ToolServiceHome, build_home, make_home, open_tool_service
from osprey.toolservice.targets import UnixTarget


@pytest.fixture
async def local(workspace: Path) -> AsyncIterator[ToolServiceHome]:
    (workspace / "a.txt").write_text("alpha\n")
    async with open_tool_service([str(workspace)]) as home:
        yield home


def test_make_home_picks_the_home_from_the_settings(workspace: Path, tmp_path: Path) -> None:
    roots = [str(workspace)]
    assert isinstance(make_home(roots), LocalDispatcher)
    assert isinstance(make_home(roots, sandbox=SandboxSettings(enabled=False)), LocalDispatcher)
    assert isinstance(make_home(roots, sandbox=SandboxSettings(enabled=True)), LaneSupervisor)
    attached = make_home(roots, sandbox=SandboxSettings(enabled=True, socket=str(tmp_path / "s.sock")))
    assert isinstance(attached, AttachedLane)
    assert [h.kind for h in (make_home(roots), make_home(roots, sandbox=SandboxSettings(enabled=True)), attached)] == ["local", "lane", "attached"]
    assert all(isinstance(h, ToolServiceHome) for h in (make_home(roots), attached))
    assert make_home(roots).roots == [os.path.realpath(workspace)]


def test_the_home_is_typed_configuration_built_from_the_settings(workspace: Path, tmp_path: Path) -> None:
    roots = [str(workspace)]
    socket, token_file = str(tmp_path / "s.sock"), str(tmp_path / "token")
    local = home_config(roots, env={"PATH": "/usr/bin"})
    assert local == LocalHomeConfig(roots=roots, env={"PATH": "/usr/bin"})
    assert home_config(roots, sandbox=SandboxSettings(enabled=False, socket=socket)) == LocalHomeConfig(roots=roots)
    lane = home_config([str(workspace / ".")], sandbox=SandboxSettings(enabled=True, cpus=1), session_id="s1", home=tmp_path / "home")
    assert lane == LaneHomeConfig(workspace=os.path.realpath(workspace), session_id="s1", sandbox=SandboxSettings(enabled=True, cpus=1), home=tmp_path / "home")
    attached = home_config(roots, sandbox=SandboxSettings(enabled=True, socket=socket, token_file=token_file, ready_timeout=5))
    assert attached == AttachedHomeConfig(roots=roots, target=UnixTarget(path=socket), token_file=token_file, ready_timeout=5)

    # One union, told apart by `kind`; anything else is refused.
    union: TypeAdapter[HomeConfig] = TypeAdapter(HomeConfig)
    for config in (local, lane, attached):
        assert union.validate_python(config.model_dump()) == config
    with pytest.raises(ValidationError):
        union.validate_python({"kind": "remote", "roots": roots})
    with pytest.raises(ValidationError):
        union.validate_python({"kind": "local", "roots": roots, "sandbox": True})
    with pytest.raises(ValidationError):
        union.validate_python({"kind": "local", "roots": []})

    # build_home opens (without starting) the home each one describes.
    opened = build_home(local)
    assert isinstance(opened, LocalDispatcher) and opened.env == {"PATH": "/usr/bin"}
    supervisor = build_home(lane)
    assert isinstance(supervisor, LaneSupervisor) and supervisor.workspace == os.path.realpath(workspace) and supervisor.session_id == "s1"
    assert supervisor.options.cpus == 1 and supervisor.home == tmp_path / "home"
    attached_home = build_home(attached)
    assert isinstance(attached_home, AttachedLane) and attached_home.target == UnixTarget(path=socket)
    assert (attached_home.token_file, attached_home.ready_timeout) == (token_file, 5)


# --- the local dispatcher -------------------------------------------------------------------------


async def test_the_client_is_one_object_for_the_homes_life(local: ToolServiceHome) -> None:
    client = local.client
    assert local.kind == "local" and client is local.client
    [pid] = dispatcher_pids()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(DispatcherError) as info:
        await client.read_file("a.txt")
    assert "exited" in info.value.recovery and "a new one started" in info.value.recovery, info.value.recovery
    assert "can be retried" in info.value.recovery
    [new_pid] = dispatcher_pids()
    assert new_pid != pid
    # Not retried by the client: the model decides. The same client reaches the new dispatcher.
    assert local.client is client
    assert (await client.read_file("a.txt")).content.endswith("alpha")
    assert (await client.exec(["cat", "a.txt"])).stdout.head == b"alpha\n"


async def test_a_stuck_call_is_a_timeout_and_the_dispatcher_is_replaced(local: ToolServiceHome) -> None:
    client = local.client
    client.call_deadline_s = 1.0
    [pid] = dispatcher_pids()
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(ToolTimeout) as info:
            await client.list_directory()
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert info.value.category == "timeout"
    assert "stopped answering" in info.value.recovery and "a new one started" in info.value.recovery, info.value.recovery
    assert pid not in dispatcher_pids()
    assert [e.name for e in (await client.list_directory()).entries] == ["a.txt"]


async def test_a_healthy_home_is_left_alone(local: ToolServiceHome) -> None:
    [pid] = dispatcher_pids()
    assert await local.recover() is None
    # A tool's own failure is not a reason to recover.
    with pytest.raises(ToolError) as info:
        await local.client.read_file("missing.txt")
    assert (info.value.category, info.value.recovery) == ("not_found", "")
    # A call that runs past its deadline on a home that still answers: nothing is replaced. (A
    # lookaround makes grep use Python's `re`, which backtracks over this line for ever.)
    (Path(local.roots[0]) / "slow.txt").write_text("a" * 40 + "\n")
    local.client.call_deadline_s = 0.5
    with pytest.raises(ToolTimeout) as timeout:
        await local.client.grep("(?=(a+)+b)", "slow.txt")
    assert timeout.value.recovery == ""
    assert dispatcher_pids() == [pid]
    assert (await local.client.read_file("a.txt")).total_lines == 1


async def test_failed_calls_at_once_replace_the_dispatcher_once(local: ToolServiceHome) -> None:
    [pid] = dispatcher_pids()
    os.kill(pid, signal.SIGKILL)
    results = await asyncio.gather(*(local.client.read_file("a.txt") for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, DispatcherError) for r in results), results
    notes = [r.recovery for r in results if isinstance(r, DispatcherError)]
    assert sum("a new one started" in n for n in notes) == 1, notes
    assert all(n for n in notes), "every failed call says the service was replaced"
    assert len(dispatcher_pids()) == 1
    assert (await local.client.read_file("a.txt")).total_lines == 1


async def test_a_replacement_that_fails_says_so_and_the_next_call_tries_again(local: ToolServiceHome, monkeypatch: pytest.MonkeyPatch) -> None:
    client = local.client
    [pid] = dispatcher_pids()
    os.kill(pid, signal.SIGKILL)
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    with pytest.raises(DispatcherError) as info:
        await client.read_file("a.txt")
    assert info.value.recovery.startswith("starting a new ToolService failed too: "), info.value.recovery
    assert "could not be started" in info.value.recovery
    monkeypatch.undo()
    with pytest.raises(DispatcherError) as again:
        await client.read_file("a.txt")
    assert "not running" in str(again.value)
    assert "there was no local dispatcher" in again.value.recovery and "a new one started" in again.value.recovery
    assert (await client.read_file("a.txt")).total_lines == 1


async def test_a_closed_home_is_not_brought_back(workspace: Path) -> None:
    async with open_tool_service([str(workspace)]) as home:
        client = home.client
    assert dispatcher_pids() == []
    with pytest.raises(DispatcherError) as info:
        await client.list_directory()
    assert info.value.recovery == ""
    assert dispatcher_pids() == []


# --- an attached lane ---------------------------------------------------------------------------


@pytest.fixture
def sidecar(workspace: Path, tmp_path: Path) -> Iterator[tuple[SandboxSettings, object]]:
    """A ToolService someone else runs (here: a server in this process), and settings to attach to it."""
    from osprey_sidecar.server import build_server

    (workspace / "a.txt").write_text("alpha\n")
    socket_path = str(tmp_path / "lane.sock")
    token = secrets.token_hex(16)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    server = build_server([str(workspace)], socket_path, token)
    try:
        yield SandboxSettings(enabled=True, socket=socket_path, token_file=str(token_file), ready_timeout=10), server
    finally:
        server.stop(grace=None)


async def test_an_attached_lane_is_used_but_never_restarted(workspace: Path, sidecar: tuple[SandboxSettings, object]) -> None:
    options, server = sidecar
    async with open_tool_service([str(workspace)], sandbox=options) as home:
        assert home.kind == "attached"
        client = home.client
        assert (await client.read_file("a.txt")).total_lines == 1
        assert await home.recover() is None
        server.stop(grace=None).wait()  # type: ignore[attr-defined]
        with pytest.raises(DispatcherError) as info:
            await client.read_file("a.txt")
        assert "cannot restart a lane it did not start" in info.value.recovery, info.value.recovery
        assert options.socket is not None and options.socket in info.value.recovery
        assert home.client is client


async def test_attaching_needs_a_lane_that_answers(workspace: Path, tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="no lane socket"):
        async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True, socket=str(tmp_path / "none.sock"))):
            pass


async def test_an_attached_lane_refuses_a_wrong_token(workspace: Path, tmp_path: Path, sidecar: tuple[SandboxSettings, object]) -> None:
    options, _ = sidecar
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token\n")
    with pytest.raises(SandboxError, match="is the token right"):
        async with open_tool_service([str(workspace)], sandbox=options.model_copy(update={"token_file": str(wrong), "ready_timeout": 1})):
            pass


# --- a lane ---------------------------------------------------------------------------------------


@pytest.fixture
async def lane(workspace: Path) -> AsyncIterator[ToolServiceHome]:
    require_docker()
    (workspace / "a.txt").write_text("alpha\n")
    async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=f"homes-{os.getpid()}-{id(workspace):x}") as home:
        yield home


async def test_a_killed_lane_is_replaced_behind_the_same_client(lane: ToolServiceHome) -> None:
    from osprey.toolservice.images import docker_client

    assert isinstance(lane, LaneSupervisor) and lane.lane is not None and lane.kind == "lane"
    client = lane.client
    await client.write_file("written.txt", "kept\n")
    await client.bash("echo lost > /tmp/lost.txt")
    old_id = lane.lane.id
    container = docker_client().containers.get(old_id)
    container.kill()
    await asyncio.to_thread(container.wait)
    with pytest.raises(DispatcherError) as info:
        await client.read_file("a.txt")
    assert "the sandbox lane stopped" in info.value.recovery and "a new lane started" in info.value.recovery, info.value.recovery
    assert lane.lane is not None and lane.lane.id != old_id
    assert lane.client is client
    assert (await client.read_file("written.txt")).content.endswith("kept")  # the workspace is the same
    assert (await client.exec(["cat", "/tmp/lost.txt"])).exit_code != 0  # the lane's /tmp is not


async def test_a_call_whose_channel_is_closed_under_it_fails_as_the_service_not_as_a_cancellation(local: ToolServiceHome) -> None:
    """Another call's failure replaces the connection and closes the old channel: the calls still
    running on it get a DispatcherError, never a CancelledError their caller did not ask for."""
    client = local.client
    running = asyncio.ensure_future(client.bash("sleep 5; echo done"))
    await asyncio.sleep(0.5)
    await client._current().close()  # what a recovery does to the connection it replaces
    with pytest.raises(DispatcherError, match="was closed while the call ran"):
        await asyncio.wait_for(running, 10)
    assert not running.cancelled()
    assert (await client.read_file("a.txt")).total_lines == 1  # the home brings a connection back
