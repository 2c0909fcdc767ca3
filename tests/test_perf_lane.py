"""The lane start path: one engine client and one image check per process, the container made in
one call, orphans reaped while the lane starts, readiness probed without tripping gRPC's backoff.

Real Docker, real lanes; behaviour only (what is called, what exists afterwards). How fast a lane
starts is measured by bench/lane_ready.py, not here.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import require_docker

from osprey.config import SandboxSettings
from osprey.toolservice import lanes
from osprey.toolservice.client import accepts_connections
from osprey.toolservice.homes import open_tool_service
from osprey.toolservice.images import docker_client


@pytest.fixture
def client() -> Iterator[Any]:
    require_docker()
    c = docker_client()
    yield c
    c.close()


def session(name: str) -> str:
    return f"perf-{os.getpid()}-{name}"


async def test_starts_reuse_the_client_and_the_checked_image(workspace: Path, monkeypatch: pytest.MonkeyPatch, client: Any) -> None:
    async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=session("first")):
        pass
    checks: list[object] = []
    clients: list[object] = []
    real_ensure, real_client = lanes.ensure_image, lanes.docker_client
    monkeypatch.setattr(lanes, "ensure_image", lambda *a, **k: checks.append(a) or real_ensure(*a, **k))
    monkeypatch.setattr(lanes, "docker_client", lambda: clients.append(1) or real_client())
    for name in ("second", "third"):
        async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=session(name)) as home:
            assert (await home.client.bash("echo up")).output == "up\n"
            container = client.containers.get(home.lane.container_id)  # type: ignore[attr-defined]
            assert container.status == "running" and container.name == f"osprey-lane-{session(name)}"
        assert not client.containers.list(all=True, filters={"name": f"osprey-lane-{session(name)}"})
    assert (checks, clients) == ([], []), "a later start checked the image or made a client again"


async def test_a_cached_image_that_was_removed_is_checked_again(workspace: Path, client: Any) -> None:
    # A tag of our own on the lane image stands for a cached image that was pruned meanwhile.
    image = lanes.ensure_image(client)
    ours = f"osprey-perf-test:{os.getpid()}"
    client.images.get(image).tag(ours)
    base = SandboxSettings(enabled=True).base_image
    lanes._remember_image(base, ours)
    client.images.remove(ours, noprune=True)
    try:
        async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=session("regone")) as home:
            assert (await home.client.bash("echo up")).output == "up\n"
            used = home.lane.image  # type: ignore[attr-defined]
        # The image checked again (the same one, unless the sidecar's sources changed meanwhile).
        assert used != ours and used.startswith("osprey-lane:")
        assert lanes._cached_image(base) == used
    finally:
        lanes._remember_image(base, None)


async def test_an_orphan_holding_the_lanes_name_is_reaped_and_the_lane_starts(workspace: Path, client: Any) -> None:
    image = lanes.ensure_image(client)
    name = session("taken")
    # Labelled as a lane from another boot: an orphan that any start may reap.
    orphan = client.containers.create(image, name=f"osprey-lane-{name}", labels={lanes.LABEL: "1", "osprey.boot_id": "a-boot-long-gone"}, entrypoint=["true"])
    try:
        async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=name) as home:
            assert (await home.client.bash("echo up")).output == "up\n"
            assert home.lane.container_id != orphan.id  # type: ignore[attr-defined]
        assert not client.containers.list(all=True, filters={"id": orphan.id})
    finally:
        for leftover in client.containers.list(all=True, filters={"id": orphan.id}):
            leftover.remove(force=True)


async def test_a_name_held_by_a_container_that_is_no_lane_fails_the_start_cleanly(workspace: Path, client: Any) -> None:
    image = lanes.ensure_image(client)
    name = session("other")
    # Not a lane at all: nothing may remove it, so the start must fail and leave it be.
    other = client.containers.create(image, name=f"osprey-lane-{name}", entrypoint=["true"])
    runtime = lanes.runtime_dir()
    dirs_before = set(os.listdir(runtime))
    try:
        with pytest.raises(lanes.SandboxError, match="is taken by another container"):
            async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=name):
                pass
        other.reload()
        assert other.name == f"osprey-lane-{name}"
        assert set(os.listdir(runtime)) - dirs_before == set(), "the failed start left its socket dir"
    finally:
        other.remove(force=True)


def test_readiness_probe_tells_bound_from_listening(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    assert not accepts_connections(path)
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        assert os.path.exists(path)
        assert not accepts_connections(path), "a bound socket that does not listen yet is not ready"
        assert lanes._listener_pid(path) is None
        server.listen(1)
        assert accepts_connections(path)
        assert lanes._listener_pid(path) == os.getpid()


def test_the_probe_does_not_disturb_a_grpc_server(tmp_path: Path) -> None:
    """Probing a real sidecar many times leaves it serving."""
    import grpc

    from osprey_sidecar.server import build_server
    from osprey_sidecar.wire import CHANNEL_OPTIONS

    path = str(tmp_path / "tools.sock")
    server = build_server([str(tmp_path)], path)
    try:
        for _ in range(50):
            assert accepts_connections(path)
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        with grpc.insecure_channel(f"unix:{path}", options=list(CHANNEL_OPTIONS)) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.stop(0)


async def test_the_one_call_create_keeps_every_lane_option(workspace: Path, client: Any) -> None:
    async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=session("opts")) as home:
        attrs = client.api.inspect_container(home.lane.container_id)  # type: ignore[attr-defined]
    host = attrs["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges:true"]
    assert host["NetworkMode"] == "none"
    assert host["PidsLimit"] == SandboxSettings().pids_limit
    assert "/tmp" in host["Tmpfs"]
    assert attrs["Config"]["Labels"][lanes.LABEL] == "1"
    assert attrs["Config"]["Labels"]["osprey.owner_pid"] == str(os.getpid())
    binds = {b.split(":")[1]: b for b in host["Binds"]}
    assert binds[os.path.realpath(workspace)].endswith(":rw")
    assert lanes.SOCKET_IN_LANE in binds


async def test_a_root_host_locks_the_lanes_dev_through_the_sidecars_pid(workspace: Path, client: Any) -> None:
    """The pid read from the sidecar's socket names a process of the lane: its /dev is the one
    handed to nobody (as root), and the socket dir is sealed either way."""
    async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=session("dev")) as home:
        lane = home.lane  # type: ignore[attr-defined]
        pid = lanes._listener_pid(lane.socket_path)
        assert pid is not None
        top = client.api.top(lane.container_id, ps_args="-o pid")
        assert str(pid) in [row[0].strip() for row in top["Processes"]], "the socket's listener is not a process of the lane"
        assert stat.S_IMODE(os.stat(lane.socket_dir).st_mode) == 0o555
        assert not (lane.socket_dir / lanes.TOKEN_NAME).exists()
        if os.geteuid() == 0:
            dev = os.stat(f"/proc/{pid}/root/dev")
            assert (dev.st_uid, dev.st_gid) == (lanes.NOBODY, lanes.NOBODY)
