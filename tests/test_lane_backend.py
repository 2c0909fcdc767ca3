"""The `LaneBackend` interface: `LaneSupervisor` drives any backend through it alone, and the local
Docker engine's backend keeps its promises.

`TlsProcessBackend` is a second, real backend: each lane is the sidecar in a process of its own
on a loopback TCP port with mutual TLS (certificates from trustme), reached the way a lane on
another machine would be. The supervisor starts, replaces and removes those lanes with no
knowledge of what they are.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import require_docker
from pydantic import SecretBytes
from tls_sidecar import LANE_NAME, START_BOUND_S, make_pki, serving_port, sidecar_argv, write_token

from osprey.config import SandboxSettings
from osprey.errors import DispatcherError, SandboxError, ToolTimeout
from osprey.toolservice.backend import Lane, LaneBackend, LaneRequest, LaneState, Progress, quiet
from osprey.toolservice.client import Connection
from osprey.toolservice.home_config import LaneHomeConfig
from osprey.toolservice.homes import LaneSupervisor, build_home
from osprey.toolservice.lanes import changed_paths, protected_state
from osprey.toolservice.targets import TlsTarget

STOP_GRACE_S = 5.0


@dataclass(kw_only=True)
class ProcessLane(Lane):
    proc: asyncio.subprocess.Process
    dir: Path

    @property
    def log(self) -> Path:
        return self.dir / "sidecar.log"


class TlsProcessBackend(LaneBackend):
    """Lanes as sidecar processes on loopback TCP with mutual TLS; they die with this process
    (`--parent-pid`), so all `reap` has left to do is remove the files of lanes that exited."""

    def __init__(self, base: Path, *, trust: bytes | None = None) -> None:
        self.base = base
        self.pki = make_pki(base / "pki")
        self.trust = trust or self.pki.ca_pem  # the CA the broker checks lanes against
        self.made: list[ProcessLane] = []
        self.calls: list[str] = []

    async def provision(self, request: LaneRequest, *, progress: Progress = quiet) -> ProcessLane:
        self.calls.append("provision")
        reaped = await self.reap()
        directory = Path(tempfile.mkdtemp(prefix="lane-", dir=self.base))
        token = write_token(directory / "token")
        progress(f"starting a process lane for {request.session_id}")
        log = open(directory / "sidecar.log", "wb")
        try:
            proc = await asyncio.create_subprocess_exec(*sidecar_argv([request.workspace], self.pki, directory / "token", client_ca=True, parent_pid=os.getpid()),
                                                        stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, cwd=directory)
        finally:
            log.close()
        lane = None
        try:
            deadline = time.monotonic() + START_BOUND_S
            while (port := serving_port(directory / "sidecar.log")) is None:
                if proc.returncode is not None or time.monotonic() > deadline:
                    raise SandboxError(f"the process lane did not start: {(directory / 'sidecar.log').read_text(errors='replace')}")
                await asyncio.sleep(0.01)
            # The certificate names the lane; it is reached by address.
            target = TlsTarget(host="127.0.0.1", port=port, ca_pem=self.trust, server_name=LANE_NAME,
                               client_cert_pem=self.pki.client_cert_pem, client_key_pem=SecretBytes(self.pki.client_key_pem))
            lane = ProcessLane(id=str(proc.pid), name=f"process-lane-{request.session_id}", workspace=request.workspace, image="(this Python)",
                               connection=Connection(target, token=token), protected=protected_state(request.workspace), proc=proc, dir=directory)
            await lane.connection.wait_ready(request.options.ready_timeout)
        except BaseException:
            if lane is not None:
                await lane.connection.close()
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            shutil.rmtree(directory, ignore_errors=True)
            raise
        assert reaped == [] or all(name.startswith("process-lane-") for name in reaped)
        self.made.append(lane)
        return lane

    async def state(self, lane: Lane) -> LaneState:
        self.calls.append("state")
        assert isinstance(lane, ProcessLane)
        if not lane.dir.exists():
            return LaneState(running=False, gone=True)
        code = lane.proc.returncode
        if code is None:
            try:
                code = await asyncio.wait_for(lane.proc.wait(), 0.1)
            except TimeoutError:
                stopped = _process_state(lane.proc.pid) == "T"
                return LaneState(running=True, paused=stopped)
        return LaneState(running=False, exit_code=code)

    async def logs(self, lane: Lane, lines: int = 20) -> str:
        self.calls.append("logs")
        assert isinstance(lane, ProcessLane)
        try:
            text = lane.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    async def destroy(self, lane: Lane) -> None:
        self.calls.append("destroy")
        assert isinstance(lane, ProcessLane)
        await lane.connection.close()
        if lane.proc.returncode is None:
            lane.proc.kill()  # also ends a stopped process
        await lane.proc.wait()
        shutil.rmtree(lane.dir, ignore_errors=True)

    async def reap(self) -> list[str]:
        self.calls.append("reap")
        removed = []
        for lane in self.made:
            if lane.proc.returncode is not None and lane.dir.exists():
                shutil.rmtree(lane.dir, ignore_errors=True)
                removed.append(lane.name)
        return removed

    def protected_changes(self, request: LaneRequest, before: Mapping[str, str | None]) -> list[str]:
        self.calls.append("protected_changes")
        return changed_paths(request.workspace, request.options, before)


def _process_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return ""


@pytest.fixture
async def process_home(workspace: Path, tmp_path: Path) -> AsyncIterator[tuple[LaneSupervisor, TlsProcessBackend, list[str]]]:
    (workspace / "a.txt").write_text("alpha\n")
    backend = TlsProcessBackend(tmp_path / "lanes")
    shown: list[str] = []
    config = LaneHomeConfig(workspace=os.path.realpath(workspace), session_id="proc", sandbox=SandboxSettings(enabled=True, ready_timeout=20))
    home = build_home(config, progress=shown.append, backend=backend)
    assert isinstance(home, LaneSupervisor) and home.backend is backend
    async with home:
        yield home, backend, shown


async def test_the_supervisor_runs_a_lane_of_any_backend(process_home: tuple[LaneSupervisor, TlsProcessBackend, list[str]], workspace: Path) -> None:
    home, backend, shown = process_home
    assert home.lane is not None and home.lane.name == "process-lane-proc"
    assert "starting a process lane for proc" in shown
    client = home.client
    assert client.where.startswith("127.0.0.1:")  # a TLS connection, not a socket
    assert (await client.read_file("a.txt")).content.endswith("alpha")
    await client.write_file("b.txt", "beta\n")
    assert (workspace / "b.txt").read_text() == "beta\n"
    assert (await client.bash("echo $PPID > /dev/null; echo hi")).output.strip() == "hi"
    assert await home.recover() is None  # a healthy lane is left alone
    assert backend.calls[-1] == "state"


async def test_a_lane_that_died_is_replaced_through_the_backend(process_home: tuple[LaneSupervisor, TlsProcessBackend, list[str]]) -> None:
    home, backend, shown = process_home
    client = home.client
    first = home.lane
    assert isinstance(first, ProcessLane)
    first.proc.send_signal(signal.SIGKILL)
    await first.proc.wait()
    with pytest.raises(DispatcherError) as info:
        await client.read_file("a.txt")
    assert f"the sandbox lane stopped (exit code {-signal.SIGKILL})" in info.value.recovery and "a new lane started" in info.value.recovery, info.value.recovery
    # The backend was asked for the state, the logs (shown to the person), to destroy and to provision.
    assert backend.calls[-5:] == ["state", "logs", "destroy", "provision", "reap"], backend.calls
    assert any("its last log lines" in line and "serving on" in line for line in shown), shown
    assert not first.dir.exists()
    assert home.lane is not None and home.lane is not first and home.lane.name == "process-lane-proc-1"
    assert home.client is client
    assert (await client.read_file("a.txt")).total_lines == 1


async def test_a_stuck_lane_is_replaced_through_the_backend(process_home: tuple[LaneSupervisor, TlsProcessBackend, list[str]]) -> None:
    home, backend, _ = process_home
    client = home.client
    client.call_deadline_s = 1.0
    first = home.lane
    assert isinstance(first, ProcessLane)
    os.kill(first.proc.pid, signal.SIGSTOP)
    with pytest.raises(ToolTimeout) as info:
        await client.list_directory()
    assert "stopped answering" in info.value.recovery and "a new lane started" in info.value.recovery, info.value.recovery
    assert first.proc.returncode is not None  # destroyed, stopped or not
    assert (await client.list_directory()).entries


async def test_closing_destroys_the_lane_and_reports_protected_changes(workspace: Path, tmp_path: Path) -> None:
    backend = TlsProcessBackend(tmp_path / "lanes")
    shown: list[str] = []
    home = build_home(LaneHomeConfig(workspace=os.path.realpath(workspace), session_id="closing", sandbox=SandboxSettings(enabled=True)), progress=shown.append, backend=backend)
    async with home:
        assert isinstance(home, LaneSupervisor)
        lane = home.lane
        assert isinstance(lane, ProcessLane)
        await home.client.bash("mkdir .osprey && echo x > .osprey/config.toml")
    assert lane.proc.returncode is not None and not lane.dir.exists()
    assert backend.calls[-2:] == ["destroy", "protected_changes"]
    assert any(f"created or replaced {workspace / '.osprey'}" in line for line in shown), shown


async def test_a_failed_provision_leaves_the_home_without_a_lane(workspace: Path, tmp_path: Path) -> None:
    # The broker checks lanes against a CA that did not issue their certificates.
    backend = TlsProcessBackend(tmp_path / "lanes", trust=make_pki(tmp_path / "other").ca_pem)
    home = build_home(LaneHomeConfig(workspace=os.path.realpath(workspace), session_id="untrusted", sandbox=SandboxSettings(enabled=True)), backend=backend)
    with pytest.raises(DispatcherError, match="not signed by the CA"):
        async with home:
            pass
    assert isinstance(home, LaneSupervisor) and home.lane is None
    assert backend.made == [] and [p.name for p in (tmp_path / "lanes").iterdir() if p.name.startswith("lane-")] == []


# --- the local Docker engine's backend ------------------------------------------------------------


async def test_the_local_docker_backend_provisions_watches_and_destroys(workspace: Path) -> None:
    require_docker()
    from osprey.toolservice.lanes import LocalDockerBackend, LocalDockerLane

    backend = LocalDockerBackend()
    (workspace / "a.txt").write_text("alpha\n")
    request = LaneRequest(workspace=os.path.realpath(workspace), session_id=f"backend-{uuid.uuid4().hex[:8]}", options=SandboxSettings(enabled=True))
    lane = await backend.provision(request)
    try:
        assert isinstance(lane, LocalDockerLane) and lane.container_id == lane.id
        assert lane.name == f"osprey-lane-{request.session_id}" and lane.workspace == request.workspace
        assert await lane.connection.healthy(timeout=5)
        assert (await backend.state(lane)) == LaneState(running=True, exit_code=0)
        assert "serving on" in await backend.logs(lane)
        from osprey.toolservice.images import docker_client

        docker_client().containers.get(lane.id).kill()
        deadline = time.monotonic() + 30
        while (state := await backend.state(lane)).running and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not state.running and not state.gone and state.exit_code == 137
    finally:
        await backend.destroy(lane)
    assert await backend.state(lane) == LaneState(running=False, gone=True)
    assert await backend.logs(lane) == ""
    assert not lane.socket_dir.exists()
    await backend.destroy(lane)  # twice is fine


async def test_the_local_docker_backend_reaps_only_lanes_whose_owner_is_gone(workspace: Path) -> None:
    require_docker()
    from osprey.toolservice.images import docker_client, ensure_image
    from osprey.toolservice.lanes import LABEL, LocalDockerBackend

    client = docker_client()
    tag = await asyncio.to_thread(ensure_image, client)
    suffix = secrets.token_hex(4)

    def orphan(n: int) -> str:
        """A lane whose owner is gone (a pid that cannot exist), never started; its name."""
        made = client.containers.create(tag, command=["--version"], name=f"osprey-lane-reap-{suffix}-{n}",
                                        labels={LABEL: "1", "osprey.owner_pid": "999999999", "osprey.boot_id": "x", "osprey.session": f"reap-{suffix}"})
        return str(made.name)

    def left() -> list[str]:
        return [c.name for c in client.containers.list(all=True, filters={"label": f"osprey.session=reap-{suffix}"})]

    backend = LocalDockerBackend(client)
    request = LaneRequest(workspace=os.path.realpath(workspace), session_id=f"alive-{suffix}", options=SandboxSettings(enabled=True))
    live = None
    try:
        first = orphan(1)
        assert first in await backend.reap() and left() == []
        second = orphan(2)
        live = await backend.provision(request)  # a start reaps too
        assert left() == [], f"provisioning left {second}"
        assert live.name not in await backend.reap()
        assert (await backend.state(live)).running
    finally:
        if live is not None:
            await backend.destroy(live)
        for c in client.containers.list(all=True, filters={"label": f"osprey.session=reap-{suffix}"}):
            c.remove(force=True)
