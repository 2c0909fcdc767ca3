"""Sandbox-lane isolation, checked against real containers.

Every test opens a real lane with `open_tool_service(..., sandbox=SandboxSettings(enabled=True))`
and probes it from the inside with `bash` (and from the host with the docker SDK). Each test runs
for two workspace owners: a non-root uid (the lane then runs as that uid) and root (the lane runs
as a root with no capabilities, as in CI).

Network checks never aim a connection anywhere but 127.0.0.1: the lane's loopback is its own, so a
server the test starts on the host's loopback must be unreachable from inside.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import require_docker

from osprey.config import SandboxSettings
from osprey.errors import DispatcherError, ToolError
from osprey.toolservice.client import BashResult, ToolClient
from osprey.toolservice.homes import ToolServiceHome, open_tool_service

CALL_TIMEOUT_MS = 60_000  # one bash call, bounded generously for a loaded 2-core machine
NON_ROOT = 1000
_sessions = itertools.count()


# --- workspaces and lanes ------------------------------------------------------------------------


@dataclass
class Workspace:
    path: str
    uid: int
    gid: int

    @property
    def is_root(self) -> bool:
        return self.uid == 0


@pytest.fixture(params=["non-root-owner", "root-owner"])
def ws(request: pytest.FixtureRequest, tmp_path: Path) -> Workspace:
    """A workspace owned by a non-root uid, or by root."""
    path = tmp_path / "workspace"
    path.mkdir()
    if request.param == "non-root-owner":
        if os.geteuid() == 0:
            os.chown(path, NON_ROOT, NON_ROOT)
            uid, gid = NON_ROOT, NON_ROOT
        else:
            uid, gid = os.geteuid(), os.getegid()
    else:
        if os.geteuid() != 0:
            pytest.skip("a root-owned workspace needs the tests to run as root")
        uid, gid = 0, 0
    return Workspace(os.path.realpath(path), uid, gid)


def docker_api() -> Any:
    import docker

    return docker.from_env(timeout=120)


def remove_containers(label: str) -> list[str]:
    """Force-remove every container carrying `label` (key=value); return their names."""
    import docker

    api = docker_api()
    try:
        removed = []
        for c in api.containers.list(all=True, filters={"label": label}, ignore_removed=True):
            try:
                c.remove(force=True)
            except docker.errors.NotFound:
                pass
            removed.append(c.name)
        return removed
    finally:
        api.close()


@dataclass
class OpenLane:
    service: ToolServiceHome
    session: str

    @property
    def client(self) -> ToolClient:
        return self.service.client

    @property
    def socket_path(self) -> str:
        return self.service.client.where

    def container(self) -> Any:
        api = docker_api()
        try:
            [container] = api.containers.list(all=True, filters={"label": f"osprey.session={self.session}"})
            return container
        finally:
            api.close()

    async def sh(self, command: str) -> BashResult:
        return await self.client.bash(command, timeout_ms=CALL_TIMEOUT_MS)


@asynccontextmanager
async def open_lane(workspace: str, **options: Any) -> AsyncIterator[OpenLane]:
    """A fresh lane for `workspace`; its container is removed even when the test fails."""
    require_docker()
    session = f"isol-{os.getpid()}-{next(_sessions)}"
    socket_dir = None
    try:
        async with open_tool_service([workspace], sandbox=SandboxSettings(enabled=True, **options), session_id=session) as service:
            assert service.kind == "lane"
            socket_dir = os.path.dirname(service.client.where)
            assert os.path.isdir(socket_dir)
            yield OpenLane(service, session)
    finally:
        leftovers = remove_containers(f"osprey.session={session}")
    assert not leftovers, f"closing the lane left its container behind: {leftovers}"
    assert socket_dir is not None and not os.path.exists(socket_dir), f"closing the lane left its socket dir {socket_dir}"


async def sh_ok(lane: OpenLane, command: str) -> str:
    r = await lane.sh(command)
    assert (r.exit_code, r.signal, r.timed_out) == (0, 0, False), f"{command!r} failed: {r}"
    return r.output


# --- privileges ----------------------------------------------------------------------------------


async def test_the_lane_runs_as_the_owner_with_no_capabilities(ws: Workspace) -> None:
    async with open_lane(ws.path) as lane:
        ids = (await sh_ok(lane, "id -u; id -g")).split()
        assert ids == [str(ws.uid), str(ws.gid)]
        status = dict(
            line.split(":", 1) for line in (await sh_ok(lane, "cat /proc/self/status")).splitlines() if ":" in line
        )
        for key in ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"):
            assert int(status[key].strip(), 16) == 0, f"{key} = {status[key].strip()}"
        assert status["NoNewPrivs"].strip() == "1"
        # The sidecar itself (pid 1's child) holds nothing either.
        sidecar = await sh_ok(lane, "for p in /proc/[0-9]*; do grep -H '^CapEff' $p/status 2>/dev/null; done")
        assert sidecar.strip() and all(line.endswith("0000000000000000") for line in sidecar.strip().splitlines()), sidecar


async def test_chown_to_another_uid_fails(ws: Workspace) -> None:
    async with open_lane(ws.path) as lane:
        r = await lane.sh("echo x > owned.txt && chown 1234:1234 owned.txt")
        assert r.exit_code != 0 and "Operation not permitted" in r.output, r
        r = await lane.sh("chgrp 1234 owned.txt")
        assert r.exit_code != 0, r
    st = os.stat(Path(ws.path) / "owned.txt")
    assert (st.st_uid, st.st_gid) == (ws.uid, ws.gid)


async def test_mounting_fails(ws: Workspace) -> None:
    async with open_lane(ws.path) as lane:
        r = await lane.sh("mkdir -p mnt && mount -t tmpfs none mnt")
        assert r.exit_code != 0, r
        mounts = await sh_ok(lane, "cat /proc/mounts")
        assert f"{ws.path}/mnt" not in mounts


async def test_a_raw_socket_cannot_be_opened(ws: Workspace) -> None:
    async with open_lane(ws.path) as lane:
        r = await lane.sh('python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"')
        assert r.exit_code != 0 and "PermissionError" in r.output, r


# --- the filesystem ------------------------------------------------------------------------------

PROBE = "osprey-isolation-probe"


def writable_report(dirs: list[str]) -> str:
    """A bash script printing `W dir` or `R dir` for whether a new file can be made in each dir."""
    quoted = " ".join(f"'{d}'" for d in dirs)
    return (
        f'for d in {quoted}; do if ( : > "$d/{PROBE}" ) 2>/dev/null; then echo "W $d"; rm -f "$d/{PROBE}"; '
        'else echo "R $d"; fi; done'
    )


async def test_system_places_are_not_writable(ws: Workspace) -> None:
    places = ["/", "/etc", "/usr", "/usr/bin", "/opt", "/var", "/var/tmp", "/root", "/home", "/run", "/run/osprey", "/dev"]
    async with open_lane(ws.path) as lane:
        report = await sh_ok(lane, writable_report(places))
        writable = [line[2:] for line in report.splitlines() if line.startswith("W ")]
        assert writable == [], f"writable system places: {writable}"
        assert len(report.splitlines()) == len(places)
        # Existing files, including the bind-mounted ones and the socket dir's, cannot be replaced.
        for target in ("/etc/passwd", "/etc/hosts", "/etc/resolv.conf", "/usr/bin/bash"):
            r = await lane.sh(f"echo x >> {target}")
            assert r.exit_code != 0, f"{target} is writable: {r}"
        r = await lane.sh("rm -f /run/osprey/tools.sock; test -S /run/osprey/tools.sock")
        assert r.exit_code == 0, f"the lane's own commands removed its socket: {r}"
        r = await lane.sh("mkdir /run/osprey/x")
        assert r.exit_code != 0, r


async def test_the_writable_places_are_exactly_the_workspace_tmp_and_dev_shm(ws: Workspace) -> None:
    async with open_lane(ws.path) as lane:
        dirs = (await sh_ok(lane, "for d in /*/; do echo \"${d%/}\"; done")).split()
        assert "/etc" in dirs and "/tmp" in dirs
        candidates = sorted({"/", *dirs, "/dev", "/dev/shm", "/dev/mqueue", "/dev/pts", "/run/osprey", "/proc", "/sys", ws.path})
        report = await sh_ok(lane, writable_report(candidates))
        writable = {line[2:] for line in report.splitlines() if line.startswith("W ")}
        assert writable == {ws.path, "/tmp", "/dev/shm"}
        # /dev/shm is a private 64 MiB tmpfs kept for Python multiprocessing.
        shm = await sh_ok(lane, "df -k --output=size /dev/shm | tail -1; stat -f -c %T /dev/shm")
        size_kib, fstype = shm.split()
        assert int(size_kib) == 64 * 1024 and fstype == "tmpfs"
        await sh_ok(lane, "python3 -c 'import multiprocessing as m; l = m.Lock(); l.acquire(); l.release()'")


async def test_the_socket_dir_cannot_be_unsealed(ws: Workspace) -> None:
    """The lane's user owns its socket dir, a host directory: a chmod must not reopen it."""
    async with open_lane(ws.path) as lane:
        r = await lane.sh(f"chmod u+w /run/osprey; : > /run/osprey/{PROBE}")
        assert not os.path.exists(os.path.join(os.path.dirname(lane.socket_path), PROBE)), \
            f"a lane command reopened the socket dir and wrote into the host directory behind it: {r}"
        assert r.exit_code != 0, r


async def test_dev_cannot_be_unsealed(ws: Workspace) -> None:
    """A root lane owns its /dev tmpfs: a chmod must not reopen it."""
    async with open_lane(ws.path) as lane:
        r = await lane.sh(f"chmod u+w /dev; : > /dev/{PROBE}")
        assert r.exit_code != 0, f"a lane command reopened /dev: {r}"


# --- the network ---------------------------------------------------------------------------------


def interfaces(proc_net_dev: str) -> list[str]:
    return [line.split(":", 1)[0].strip() for line in proc_net_dev.splitlines()[2:] if ":" in line]


async def test_no_egress(ws: Workspace) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        # The host's loopback server is really there.
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        server.settimeout(5)
        server.accept()[0].close()
        async with open_lane(ws.path) as lane:
            assert interfaces(await sh_ok(lane, "cat /proc/net/dev")) == ["lo"]
            routes = (await sh_ok(lane, "cat /proc/net/route")).splitlines()
            assert routes[0].startswith("Iface") and routes[1:] == [], routes
            probe = (
                "import socket\n"
                "try:\n"
                f"    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
                "    print('CONNECTED')\n"
                "except OSError as exc:\n"
                "    print(type(exc).__name__)\n"
            )
            out = await sh_ok(lane, f"python3 -c \"{probe}\"")
            assert out.strip() == "ConnectionRefusedError", out
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing from the lane ever arrived
    finally:
        server.close()


async def test_network_true_gives_the_lane_an_interface(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with open_lane(str(workspace), network=True) as lane:
        names = interfaces(await sh_ok(lane, "cat /proc/net/dev"))
        assert "lo" in names and set(names) - {"lo"}, names


# --- limits --------------------------------------------------------------------------------------

FORK_BOMB = """
import os, signal, time
children, errno = [], None
try:
    for _ in range(1000):
        pid = os.fork()
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        children.append(pid)
except OSError as exc:
    errno = exc.errno
print(len(children), errno, flush=True)
for pid in children:
    os.kill(pid, signal.SIGKILL)
for pid in children:
    os.waitpid(pid, 0)
"""

MEMORY_HOG = """
chunks = []
for _ in range(32):
    chunks.append(bytearray(16 << 20))  # 512 MiB in all, each page touched
print('survived', flush=True)
"""


async def test_a_fork_bomb_is_stopped_by_the_pids_limit(ws: Workspace) -> None:
    import errno as errnos

    async with open_lane(ws.path, pids_limit=64) as lane:
        (Path(ws.path) / "bomb.py").write_text(FORK_BOMB)
        r = await lane.sh("python3 bomb.py")
        assert (r.exit_code, r.timed_out) == (0, False), r
        forks, errno = r.output.split()
        assert errno == str(errnos.EAGAIN), r.output
        assert 1 <= int(forks) < 64, r.output
        # The lane keeps answering, and can fork again once the children are gone.
        assert (await sh_ok(lane, "echo still here")).strip() == "still here"
        assert (await lane.client.read_file("bomb.py")).total_lines > 5


async def test_a_memory_hog_is_killed_and_the_lane_survives(ws: Workspace) -> None:
    async with open_lane(ws.path, memory_limit="128m") as lane:
        (Path(ws.path) / "hog.py").write_text(MEMORY_HOG)
        container_id = lane.container().id
        r = await lane.sh("python3 hog.py")
        assert r.signal == 9 or r.exit_code == 137, r
        assert "survived" not in r.output
        # The sidecar (and so the lane) outlived its command; same container, still running.
        assert (await lane.client.read_file("hog.py")).total_lines > 2
        assert (await sh_ok(lane, "echo alive")).strip() == "alive"
        container = lane.container()
        assert container.id == container_id and container.status == "running"
    # ... and this test process was never at risk: it is still here, well below the hog's size.
    rss_kib = int(next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmRSS")).split()[1])
    assert rss_kib < 512 * 1024


# --- the token -----------------------------------------------------------------------------------


async def test_calls_without_the_token_or_with_a_wrong_one_are_refused(ws: Workspace) -> None:
    async with open_lane(ws.path) as lane:
        (Path(ws.path) / "secret.txt").write_text("s\n")
        for token in (None, "0" * 64, lane_token(lane)[:-1]):
            intruder = ToolClient.for_socket(lane.socket_path, token=token)
            try:
                with pytest.raises(DispatcherError, match="token"):
                    await intruder.read_file("secret.txt")
                with pytest.raises(DispatcherError, match="token"):
                    await intruder.bash(f"touch {PROBE}")
                with pytest.raises(DispatcherError, match="token"):
                    await intruder.write_file("planted.txt", "x")
            finally:
                await intruder.close()
        assert not (Path(ws.path) / PROBE).exists() and not (Path(ws.path) / "planted.txt").exists()
        assert (await lane.client.read_file("secret.txt")).content.endswith("s")  # the right token still works


def lane_token(lane: OpenLane) -> str:
    # The token file is deleted once the lane answers; the broker keeps the token in memory.
    assert not (Path(lane.socket_path).parent / "token").exists()
    token = lane.client.token
    assert token is not None and len(token) >= 32
    return token


async def test_the_token_is_not_in_docker_inspect_or_command_lines(ws: Workspace) -> None:
    async with open_lane(ws.path) as lane:
        token = lane_token(lane)
        attrs = lane.container().attrs
        for where, value in (("Config.Cmd", attrs["Config"]["Cmd"]), ("Config.Env", attrs["Config"]["Env"]),
                             ("Config.Entrypoint", attrs["Config"]["Entrypoint"]), ("Args", attrs["Args"]),
                             ("Config.Labels", attrs["Config"]["Labels"]), ("inspect", attrs)):
            assert token not in json.dumps(value), f"the lane token shows in docker inspect's {where}"
        cmdlines = await sh_ok(lane, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done")
        assert "osprey_sidecar" in cmdlines  # the sidecar's own command line was read
        assert token not in cmdlines
        # The sidecar is not dumpable, so its own environment (like its memory) is out of reach.
        environ = await sh_ok(lane, "for p in /proc/[0-9]*; do { tr '\\0' '\\n' < $p/environ; } 2>/dev/null; done; true")
        assert "HOME=/tmp" in environ and token not in environ
        refused = await sh_ok(lane, "for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in python3*osprey_sidecar*) cat $p/environ >/dev/null 2>&1 && echo readable || echo refused;; esac; done; true")
        assert refused.split() == ["refused"], refused


# --- the workspace -------------------------------------------------------------------------------


async def test_a_symlink_pointing_outside_the_workspace_is_refused(ws: Workspace) -> None:
    root = Path(ws.path)
    os.symlink("/etc/passwd", root / "passwd")
    os.symlink("/etc", root / "etc")
    os.symlink("../..", root / "up")
    async with open_lane(ws.path) as lane:
        calls = [
            lane.client.read_file("passwd"),
            lane.client.read_file("etc/hostname"),
            lane.client.write_file("etc/planted", "x"),
            lane.client.edit_file("passwd", "root", "toor"),
            lane.client.list_directory("etc"),
            lane.client.list_directory("up"),
            lane.client.tree("up"),
            lane.client.find_files("*", path="etc"),
            lane.client.grep("root", path="etc"),
        ]
        for call in calls:
            with pytest.raises(ToolError) as info:
                await call
            assert info.value.category == "outside_root", info.value


async def test_the_workspace_is_mounted_at_its_own_path_with_its_owner(ws: Workspace) -> None:
    root = Path(ws.path)
    (root / "from-host.txt").write_text("written on the host\n")
    async with open_lane(ws.path) as lane:
        assert (await sh_ok(lane, "pwd")).strip() == ws.path
        assert (await sh_ok(lane, f"cat {ws.path}/from-host.txt")).strip() == "written on the host"
        written = await lane.client.write_file("sub/from-lane.txt", "written in the lane\n")
        assert written.resolved_path == str(root / "sub" / "from-lane.txt")
        await sh_ok(lane, "echo by bash > by-bash.txt && mkdir -p made/by/bash")
        for name in ("sub", "sub/from-lane.txt", "by-bash.txt", "made", "made/by/bash"):
            st = os.stat(root / name)
            assert (st.st_uid, st.st_gid) == (ws.uid, ws.gid), f"{name} belongs to {st.st_uid}:{st.st_gid}"
        assert (root / "sub" / "from-lane.txt").read_text() == "written in the lane\n"
        mount = [line.split() for line in (await sh_ok(lane, "cat /proc/mounts")).splitlines()]
        assert [m[3].split(",")[0] for m in mount if m[1] == ws.path] == ["rw"]
