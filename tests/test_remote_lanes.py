"""Lanes on another machine's Docker engine (`RemoteDockerBackend`), against a second real engine
the tests start on loopback with mutual TLS and a data root of its own (tests/remote_engine.py):
the image copied once, the workspace sent and brought back, conflicts kept beside the file, a
killed broker's volume recovered, owners on other machines left alone, the sidecar over TLS."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import docker
import pytest
from remote_engine import RemoteEngine

from osprey.config import SandboxSettings
from osprey.errors import DispatcherError, SandboxError
from osprey.toolservice import remote_lanes
from osprey.toolservice.backend import LaneRequest
from osprey.toolservice.client import ToolClient
from osprey.toolservice.engines import EngineTarget, connect, identify, resolve_engine
from osprey.toolservice.homes import LaneSupervisor, docker_backend
from osprey.toolservice.remote_lanes import RemoteDockerBackend, RemoteLane
from osprey.toolservice.targets import TlsTarget
from osprey.toolservice.workspace_sync import CONFLICT_SUFFIX

pytestmark = pytest.mark.slow


def target_of(engine: RemoteEngine) -> EngineTarget:
    return EngineTarget(host=engine.host, tls_verify=True, cert_path=str(engine.cert_dir), source="the test engine")


@pytest.fixture
def backend(remote_engine: RemoteEngine) -> Iterator[RemoteDockerBackend]:
    messages: list[str] = []
    made = RemoteDockerBackend(target_of(remote_engine), progress=messages.append)
    made.messages = messages  # type: ignore[attr-defined]
    yield made


@pytest.fixture
def home(tmp_path: Path) -> Path:
    made = tmp_path / "broker-home"
    made.mkdir()
    return made


def request_for(workspace: Path, home: Path, session: str, **options: object) -> LaneRequest:
    return LaneRequest(workspace=str(workspace), session_id=f"{session}-{os.getpid()}", options=SandboxSettings(**options), home=home)


@pytest.fixture
async def lane(backend: RemoteDockerBackend, workspace: Path, home: Path) -> AsyncIterator[RemoteLane]:
    (workspace / "a.txt").write_text("alpha\n")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    made = await backend.provision(request_for(workspace, home, "t"), progress=backend.messages.append)  # type: ignore[attr-defined]
    try:
        yield made
    finally:
        await backend.destroy(made)


def engine_client(engine: RemoteEngine) -> docker.DockerClient:
    return engine.client()


async def test_a_remote_lane_gets_the_workspace_and_its_edits_come_back(backend: RemoteDockerBackend, lane: RemoteLane,
                                                                        workspace: Path, home: Path, remote_engine: RemoteEngine) -> None:
    client = ToolClient(lane.connection)
    assert (await client.read_file("a.txt")).content.endswith("alpha")
    await client.write_file("b.txt", "beta\n")
    result = await client.bash("echo gamma > c.txt && rm a.txt && mkdir -p d/e && echo deep > d/e/f.txt && echo x > .git/y; echo $?")
    assert "Read-only file system" in result.output, "the lane's .git is read-only"
    assert not (workspace / "b.txt").exists(), "nothing comes back before the lane goes (or /sync)"
    assert any("remote engine" in m for m in backend.messages)  # type: ignore[attr-defined]
    record = lane.record_path
    assert record.is_file() and record.parent == home / "lanes"

    await backend.destroy(lane)

    assert (workspace / "b.txt").read_text() == "beta\n" and (workspace / "c.txt").read_text() == "gamma\n"
    assert (workspace / "d" / "e" / "f.txt").read_text() == "deep\n"
    assert not (workspace / "a.txt").exists() and not (workspace / ".git" / "y").exists()
    assert not record.exists(), "the record goes once everything came back"
    volumes = {v.name for v in engine_client(remote_engine).volumes.list()}
    assert not set(lane.volumes) & volumes, "the lane's volumes are removed once its changes came back"
    session = lane.name.removeprefix("osprey-lane-").rpartition("-")[0]  # the session id, then a nonce of this start
    assert session == f"t-{os.getpid()}"
    containers = engine_client(remote_engine).containers.list(all=True, filters={"label": "osprey.session=" + session})
    assert not containers


async def test_the_image_is_copied_once(backend: RemoteDockerBackend, workspace: Path, home: Path) -> None:
    first = await backend.provision(request_for(workspace, home, "img1"))
    second = await backend.provision(request_for(workspace, home, "img2"))
    try:
        copies = [m for m in backend.messages if m.startswith("copying the lane image ") and "once" in m]  # type: ignore[attr-defined]
        assert len(copies) <= 1, copies  # an earlier test may have copied it already
        assert first.image == second.image and first.image.startswith("osprey-lane:")
    finally:
        await backend.destroy(second)
        await backend.destroy(first)
    again = RemoteDockerBackend(backend.target, progress=(messages := []).append)
    third = await again.provision(request_for(workspace, home, "img3"))
    await again.destroy(third)
    assert not [m for m in messages if m.startswith("copying the lane image ")]


async def test_a_file_changed_on_both_sides_keeps_yours_and_writes_the_lanes_beside(backend: RemoteDockerBackend, lane: RemoteLane,
                                                                                   workspace: Path) -> None:
    client = ToolClient(lane.connection)
    await client.write_file("a.txt", "the lane's\n")
    (workspace / "a.txt").write_text("mine\n")
    await backend.destroy(lane)
    assert (workspace / "a.txt").read_text() == "mine\n"
    assert (workspace / f"a.txt{CONFLICT_SUFFIX}").read_text() == "the lane's\n"
    assert any("1 conflicts" in m and "a.txt" in m for m in backend.messages)  # type: ignore[attr-defined]


async def test_sync_brings_the_lanes_changes_and_sends_yours(backend: RemoteDockerBackend, lane: RemoteLane, workspace: Path) -> None:
    client = ToolClient(lane.connection)
    await client.write_file("from-lane.txt", "lane\n")
    (workspace / "from-me.txt").write_text("me\n")
    (workspace / "a.txt").unlink()
    report = await backend.sync(lane)
    assert report is not None and report.complete
    assert report.written == ["from-lane.txt"] and report.sent == ["from-me.txt"] and report.removed_in_lane == ["a.txt"]
    assert (workspace / "from-lane.txt").read_text() == "lane\n"
    assert (await client.read_file("from-me.txt")).content.endswith("me")
    with pytest.raises(Exception, match="(?i)not found|no such"):
        await client.read_file("a.txt")
    again = await backend.sync(lane)
    assert again is not None and not again.changed


async def test_the_lane_has_no_network_and_its_secrets_are_gone(backend: RemoteDockerBackend, lane: RemoteLane,
                                                                remote_engine: RemoteEngine) -> None:
    api = engine_client(remote_engine).api
    attrs = api.inspect_container(lane.id)
    assert attrs["HostConfig"]["NetworkMode"] == "none" and not attrs["HostConfig"]["PortBindings"], "only the gateway publishes a port"
    client = ToolClient(lane.connection)
    assert (await client.bash("grep -c ':' /proc/net/dev")).output.startswith("1\n"), "only `lo`"
    listing = (await client.bash("ls /run/osprey-lane; ls -a /run/osprey-sock")).output.split()
    assert "token" not in listing and "server.key" not in listing, listing
    assert sorted(set(listing) - {"client-ca.pem", "server.pem", "ready", "[exit", "code", "0]"}) == [".", "..", "tools.sock"], listing


@pytest.mark.parametrize("uid", [0, 1000])
async def test_a_lane_sees_only_its_own_socket_directory(backend: RemoteDockerBackend, workspace: Path, home: Path,
                                                         remote_engine: RemoteEngine, uid: int) -> None:
    """Lanes share their gateway's sockets volume, each mounting only its own directory; what a
    lane leaves there goes with it, whoever owns the workspace (no one has capabilities in the
    gateway)."""
    (workspace / "a.txt").write_text("alpha\n")
    os.chown(workspace, uid, uid)
    os.chown(workspace / "a.txt", uid, uid)
    first = await backend.provision(request_for(workspace, home, "sock1"))
    second = await backend.provision(request_for(workspace, home, "sock2"))
    try:
        seen = (await ToolClient(first.connection).bash("ls -a /run/osprey-sock; ls / | grep -c lanes")).output.split()
        assert seen[:3] == [".", "..", "tools.sock"] and seen[3] == "0", seen
    finally:
        await backend.destroy(first)
    api = engine_client(remote_engine).api

    def listing() -> list[str]:
        run = api.exec_create(second.gateway, ["ls", "/lanes"])
        return api.exec_start(run["Id"]).decode().split()

    # The lane may leave more in its directory than its socket, even a directory it shut.
    await ToolClient(second.connection).bash("mkdir -p /run/osprey-sock/d/e && touch /run/osprey-sock/d/e/f && chmod 000 /run/osprey-sock/d")
    left = listing()
    await backend.destroy(second)
    assert second.name in left and first.name not in left, left
    assert second.name not in listing()
    assert not [m for m in backend.messages if "socket directory" in m], backend.messages  # type: ignore[attr-defined]


async def test_the_published_port_refuses_all_but_the_broker(lane: RemoteLane) -> None:
    target = lane.connection.target
    assert isinstance(target, TlsTarget)
    cases = {
        "no client certificate": (target.model_copy(update={"client_cert_pem": None, "client_key_pem": None}), lane.connection.token),
        "no token": (target, None),
    }
    for why, (bad, token) in cases.items():
        client = ToolClient.for_target(bad, token=token)
        try:
            with pytest.raises(DispatcherError):
                await client.read_file("a.txt")
        finally:
            await client.close()
        assert why


async def test_a_broker_on_another_machine_is_never_reaped(backend: RemoteDockerBackend, workspace: Path, home: Path,
                                                           monkeypatch: pytest.MonkeyPatch, remote_engine: RemoteEngine) -> None:
    dead = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await dead.wait()
    labels = remote_lanes._owner_labels

    def elsewhere() -> dict[str, str]:
        return {**labels(), "osprey.owner_host": "another-machine", "osprey.owner_pid": str(dead.pid)}

    def here_but_dead() -> dict[str, str]:
        return {**labels(), "osprey.owner_pid": str(dead.pid)}

    made = []
    try:
        for owner, session in ((elsewhere, "other"), (here_but_dead, "orphan")):
            monkeypatch.setattr(remote_lanes, "_owner_labels", owner)
            made.append(await backend.provision(request_for(workspace, home, session)))
        monkeypatch.setattr(remote_lanes, "_owner_labels", labels)
        removed = await backend.reap()
        assert made[1].name in removed and made[0].name not in removed
        assert (await backend.state(made[0])).running and (await backend.state(made[1])).gone
    finally:
        for lane in made:
            await backend.destroy(lane)


def test_a_killed_broker_leaves_the_volume_and_recover_brings_it_back(remote_engine: RemoteEngine, workspace: Path, home: Path,
                                                                     osprey_env: dict[str, str]) -> None:
    (workspace / "kept.txt").write_text("kept\n")
    script = textwrap.dedent(f"""
        import asyncio, os, signal
        from osprey.config import SandboxSettings
        from osprey.toolservice.backend import LaneRequest
        from osprey.toolservice.client import ToolClient
        from osprey.toolservice.engines import EngineTarget
        from osprey.toolservice.remote_lanes import RemoteDockerBackend

        async def main():
            backend = RemoteDockerBackend(EngineTarget(host={remote_engine.host!r}, tls_verify=True, cert_path={str(remote_engine.cert_dir)!r}, source="t"))
            lane = await backend.provision(LaneRequest(workspace={str(workspace)!r}, session_id="killed-{os.getpid()}", options=SandboxSettings(), home=__import__("pathlib").Path({str(home)!r})))
            await ToolClient(lane.connection).write_file("made-in-lane.txt", "survived\\n")
            print("written", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        asyncio.run(main())
    """)
    broker = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert broker.returncode == -9 and "written" in broker.stdout, broker.stderr[-2000:]
    assert not (workspace / "made-in-lane.txt").exists()
    assert list((home / "lanes").glob("osprey-ws-*.json"))

    env = {**osprey_env, "OSPREY_HOME": str(home)}
    recovered = subprocess.run([sys.executable, "-m", "osprey", "sandbox", "recover"], capture_output=True, text=True, env=env, timeout=300)
    assert recovered.returncode == 0, recovered.stderr
    assert "1 written" in recovered.stdout, recovered.stdout
    assert (workspace / "made-in-lane.txt").read_text() == "survived\n"
    assert not list((home / "lanes").glob("osprey-ws-*.json"))
    again = subprocess.run([sys.executable, "-m", "osprey", "sandbox", "recover"], capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0 and "no lane left anything to bring back" in again.stdout


def test_the_engine_is_told_local_or_remote_by_asking_it(remote_engine: RemoteEngine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A CA bundle of another authority in the environment must not replace the engine's CA.
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes((remote_engine.cert_dir / "cert.pem").read_bytes())
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(other_ca))
    monkeypatch.setenv("CURL_CA_BUNDLE", str(other_ca))
    target = resolve_engine(None, remote_engine.env)
    assert target.host == remote_engine.host and target.tls_verify
    remote = identify(connect(target), target)
    assert not remote.local and remote.id and "remote engine" in remote.described
    local_target = resolve_engine(None, {})
    assert identify(connect(local_target), local_target).local


def test_engine_settings_that_cannot_work_say_what_to_fix(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="without TLS.*DOCKER_TLS_VERIFY"):
        resolve_engine(None, {"DOCKER_HOST": "tcp://build-1.example:2375"})
    with pytest.raises(SandboxError, match=r"needs ca\.pem, cert\.pem, key\.pem in"):
        resolve_engine(None, {"DOCKER_HOST": "tcp://build-1.example:2376", "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(tmp_path)})
    with pytest.raises(SandboxError, match="not unix://, tcp:// or ssh://"):
        resolve_engine(None, {"DOCKER_HOST": "ftp://x:1"})
    with pytest.raises(SandboxError, match="no Docker context named 'nope'"):
        resolve_engine("nope", {"DOCKER_CONFIG": str(tmp_path)})
    assert resolve_engine(None, {"DOCKER_HOST": "tcp://127.0.0.1:2375"}).host == "tcp://127.0.0.1:2375", "plain TCP on loopback is allowed"


async def test_a_session_home_picks_the_remote_backend_from_the_environment(remote_engine: RemoteEngine, workspace: Path, home: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in remote_engine.env.items():
        monkeypatch.setenv(key, value)
    chosen = await docker_backend(SandboxSettings(enabled=True))
    assert isinstance(chosen, RemoteDockerBackend) and chosen.engine is not None and not chosen.engine.local
    (workspace / "a.txt").write_text("alpha\n")
    supervisor = LaneSupervisor(str(workspace), f"home-{os.getpid()}", SandboxSettings(enabled=True), home=home)
    await supervisor.start()
    try:
        assert isinstance(supervisor.backend, RemoteDockerBackend)
        await supervisor.client.write_file("via-home.txt", "home\n")
        report = await supervisor.sync()
        assert report is not None and report.written == ["via-home.txt"]
    finally:
        await supervisor.close()
    assert (workspace / "via-home.txt").read_text() == "home\n"


def test_no_loader_or_reader_container_is_left(remote_engine: RemoteEngine) -> None:
    """The containers that fill and read a lane's volume are removed as soon as they served."""
    api = engine_client(remote_engine).api
    assert not api.containers(all=True, filters={"label": "osprey.reader"})
    created = api.containers(all=True, filters={"label": "osprey.lane", "status": "created"})
    assert not [c for c in created if (c.get("Labels") or {}).get("osprey.session", "").endswith(f"-{os.getpid()}")], created


async def test_a_lane_through_an_ssh_engine_address(remote_engine: RemoteEngine, workspace: Path, home: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """DOCKER_HOST=ssh://: a local sshd whose sessions reach the second engine stands in for the
    engine's machine; the lane's port is reached at the ssh host, as it would be there."""
    from remote_engine import SshGateway

    with SshGateway(remote_engine.env) as gateway:
        for key, value in gateway.env.items():
            monkeypatch.setenv(key, value)
        for key in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT"):
            monkeypatch.delenv(key, raising=False)
        chosen = await docker_backend(SandboxSettings(enabled=True))
        assert isinstance(chosen, RemoteDockerBackend) and chosen.target.scheme == "ssh"
        (workspace / "a.txt").write_text("alpha\n")
        lane = await chosen.provision(request_for(workspace, home, "ssh"))
        try:
            client = ToolClient(lane.connection)
            assert (await client.read_file("a.txt")).content.endswith("alpha")
            await client.write_file("over-ssh.txt", "ssh\n")
        finally:
            await chosen.destroy(lane)
    assert (workspace / "over-ssh.txt").read_text() == "ssh\n"


async def test_a_lane_that_died_is_replaced_and_keeps_what_it_wrote(remote_engine: RemoteEngine, workspace: Path, home: Path) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    supervisor = LaneSupervisor(str(workspace), f"replace-{os.getpid()}", SandboxSettings(enabled=True), home=home,
                                backend=RemoteDockerBackend(target_of(remote_engine)))
    await supervisor.start()
    try:
        await supervisor.client.write_file("before.txt", "written before the lane died\n")
        first = supervisor.lane
        assert first is not None
        engine_client(remote_engine).api.kill(first.id)  # as the engine's OOM killer would
        with pytest.raises(DispatcherError) as failed:
            await supervisor.client.read_file("a.txt")
        assert "new lane started" in failed.value.recovery, failed.value.recovery
        assert supervisor.lane is not None and supervisor.lane.id != first.id
        # What the dead lane wrote came back before the new one started, so the new one has it.
        assert (workspace / "before.txt").read_text() == "written before the lane died\n"
        assert (await supervisor.client.read_file("before.txt")).content.endswith("written before the lane died")
    finally:
        await supervisor.close()


def test_sigterm_brings_the_changes_back_and_removes_the_remote_lane(remote_engine: RemoteEngine, workspace: Path,
                                                                     osprey_env: dict[str, str]) -> None:
    """`osprey agent --sandbox` with DOCKER_HOST naming the remote engine, ended by SIGTERM while the
    model thinks: the lane's write comes back, and nothing of the lane is left on the engine."""
    import json
    import signal

    from osprey.testing.model_server import ModelServer, Reply

    (workspace / "a.txt").write_text("alpha\n")
    env = {**osprey_env, **remote_engine.env}
    with ModelServer([Reply.tool_call("write_file", {"path": "made.txt", "content": "from the lane\n"}), Reply.hold(1, Reply.text("never"))]) as server:
        proc = subprocess.Popen([sys.executable, "-m", "osprey", "agent", "-C", str(workspace), "--base-url", server.base_url, "--yolo",
                                 "--sandbox", "Write the file."], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while len(server.requests) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the write never reached the model"
            time.sleep(0.05)
        assert not (workspace / "made.txt").exists(), "nothing comes back before the lane goes"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert json.loads(stdout.splitlines()[-1])["exit_status"] == 143
    assert (workspace / "made.txt").read_text() == "from the lane\n"
    api = engine_client(remote_engine).api
    owned = {"label": f"osprey.owner_pid={proc.pid}"}
    assert api.containers(all=True, filters=owned) == [] and api.volumes(filters=owned)["Volumes"] in (None, [])


async def test_no_git_made_in_the_lane_comes_back_and_a_lost_volume_deletes_nothing(backend: RemoteDockerBackend, workspace: Path,
                                                                                   home: Path, remote_engine: RemoteEngine) -> None:
    (workspace / "a.txt").write_text("alpha\n")  # no .git here: the lane must not be able to make one with hooks
    lane = await backend.provision(request_for(workspace, home, "nogit"))
    try:
        client = ToolClient(lane.connection)
        await client.bash("mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit && echo '[core]' > .git/config && echo ok > b.txt")
        report = await backend.sync(lane)
        assert report is not None and report.written == ["b.txt"]
        assert not (workspace / ".git").exists()
        # The workspace volume removed behind Osprey's back: reading it back must not see an empty
        # workspace (which would remove everything here).
        api = engine_client(remote_engine).api
        api.remove_container(lane.id, force=True)
        api.remove_volume(lane.volumes[0], force=True)
        with pytest.raises(SandboxError, match="no longer on the engine"):
            await backend.sync(lane)
        assert (workspace / "a.txt").read_text() == "alpha\n" and (workspace / "b.txt").exists()
    finally:
        await backend.destroy(lane)
    assert (workspace / "a.txt").exists()


async def test_without_an_engine_here_the_remote_engine_builds_the_image(remote_engine: RemoteEngine, workspace: Path, home: Path,
                                                                        osprey_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`osprey sandbox build` builds on the engine DOCKER_HOST names, and a lane start with no
    engine on this machine to copy from builds there too. (The Debian base is copied in first:
    making it with debootstrap is the slow part, and the same either way.)"""
    from osprey.toolservice import engines
    from osprey.toolservice.images import BASE_TAG, copy_image

    api = engine_client(remote_engine)
    copy_image(engines.local_client(), api, BASE_TAG)
    built = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "osprey", "sandbox", "build", "-q"], capture_output=True,
                                    text=True, env={**osprey_env, **remote_engine.env}, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    tag = built.stdout.strip()
    assert tag.startswith("osprey-lane:") and api.images.get(tag)

    def no_engine_here() -> object:
        raise SandboxError("no engine here")

    monkeypatch.setattr(engines, "local_client", no_engine_here)
    messages: list[str] = []
    backend = RemoteDockerBackend(target_of(remote_engine), progress=messages.append)
    (workspace / "a.txt").write_text("alpha\n")
    lane = await backend.provision(request_for(workspace, home, "built-there"), progress=messages.append)
    try:
        assert lane.image == tag
        assert any("built on the remote engine" in m for m in messages) and not any(m.startswith("copying the lane image") for m in messages)
        assert (await ToolClient(lane.connection).read_file("a.txt")).content.endswith("alpha")
    finally:
        await backend.destroy(lane)


async def test_a_remote_lane_begun_before_the_session_is_taken_over(remote_engine: RemoteEngine, workspace: Path, home: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`prepare_home` (what a front end calls as soon as its settings are known) starts a lane on
    the remote engine in a thread; the session's LaneSupervisor for the same request takes it over,
    with the messages the start said meanwhile, and makes no second lane."""
    from osprey.toolservice.home_config import LaneHomeConfig, prepare_home

    for key, value in remote_engine.env.items():
        monkeypatch.setenv(key, value)
    (workspace / "a.txt").write_text("alpha\n")
    session = f"begun-{os.getpid()}"
    settings = SandboxSettings(enabled=True)
    prepare_home(LaneHomeConfig(workspace=str(workspace), session_id=session, sandbox=settings, home=home))
    client = engine_client(remote_engine)
    deadline = time.monotonic() + 60
    while not client.containers.list(filters={"label": f"osprey.session={session}"}):
        assert time.monotonic() < deadline, "the lane was not begun before the session asked"
        await asyncio.sleep(0.05)

    messages: list[str] = []
    supervisor = LaneSupervisor(str(workspace), session, settings, progress=messages.append, home=home)
    await supervisor.start()
    try:
        assert isinstance(supervisor.backend, RemoteDockerBackend)
        assert any("remote engine" in m for m in messages) and any(m.startswith("sent ") for m in messages), messages
        assert (await supervisor.client.read_file("a.txt")).content.endswith("alpha")
        assert len(client.containers.list(filters={"label": f"osprey.session={session}"})) == 1
    finally:
        await supervisor.close()
    assert not client.containers.list(all=True, filters={"label": f"osprey.session={session}"})


async def test_a_remote_lane_begun_with_other_settings_is_replaced(remote_engine: RemoteEngine, workspace: Path, home: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A session whose settings differ from those its lane was begun with removes that lane and
    starts its own: one lane, with the session's settings."""
    from osprey.toolservice.home_config import LaneHomeConfig, prepare_home

    for key, value in remote_engine.env.items():
        monkeypatch.setenv(key, value)
    (workspace / "a.txt").write_text("alpha\n")
    session = f"other-{os.getpid()}"
    prepare_home(LaneHomeConfig(workspace=str(workspace), session_id=session, sandbox=SandboxSettings(enabled=True, pids_limit=100), home=home))
    supervisor = LaneSupervisor(str(workspace), session, SandboxSettings(enabled=True), home=home)
    await supervisor.start()
    client = engine_client(remote_engine)
    try:
        lanes = client.containers.list(all=True, filters={"label": f"osprey.session={session}"})
        assert len(lanes) == 1 and lanes[0].attrs["HostConfig"]["PidsLimit"] == 512, [c.name for c in lanes]
        assert (await supervisor.client.read_file("a.txt")).content.endswith("alpha")
    finally:
        await supervisor.close()
    assert not client.containers.list(all=True, filters={"label": f"osprey.session={session}"})
    assert not [v for v in client.volumes.list() if session in v.name]


def test_a_remote_lane_begun_for_no_session_is_removed(remote_engine: RemoteEngine, workspace: Path, home: Path) -> None:
    """A lane begun for a session that never asked for it (the front end failed before) is removed
    at exit, with its volumes and record."""
    from osprey.toolservice.backend import take_backend

    backend = RemoteDockerBackend(target_of(remote_engine))
    request = request_for(workspace, home, "unclaimed")
    backend.begin(request)()
    assert take_backend(request) is None  # begun directly: no backend on offer
    client = engine_client(remote_engine)
    session = request.session_id
    assert client.containers.list(filters={"label": f"osprey.session={session}"})
    remote_lanes._discard_begun()
    assert not client.containers.list(all=True, filters={"label": f"osprey.session={session}"})
    assert not [v for v in client.volumes.list() if v.name.endswith(session)]
    assert not list((home / "lanes").glob("*.json"))


def test_a_lane_record_keeps_names_that_are_not_utf8(tmp_path: Path) -> None:
    """The record on disk is the baseline of every later sync (and of `recover`): a name that is
    not UTF-8 must come back as it was sent, not as replacement characters."""
    from osprey.toolservice.workspace_sync import Manifest

    name = os.fsdecode(b"caf\xe9.txt")
    record = remote_lanes.LaneRecord(lane="l", volumes=["v"], engine_id="e", engine=EngineTarget(host="tcp://127.0.0.1:1", source="test"),
                                     workspace=os.fsdecode(b"/w\xff"), image="i", manifest=Manifest(made_at=1.0, entries={name: "d"}))
    path = RemoteDockerBackend._write_record(tmp_path / "osprey-ws-x.json", record)
    assert remote_lanes.read_record(path) == record


async def test_with_a_registry_the_lane_image_is_pulled_by_digest(tmp_path: Path, workspace: Path, home: Path, osprey_env: dict[str, str]) -> None:
    """`[sandbox] registry`: a remote engine without the lane image pulls it by digest once
    `osprey sandbox build --push` put it there, and only the image built here; before that, or
    when the registry holds another image under its tag, it is copied as without a registry."""
    from local_registry import LocalRegistry

    from osprey.toolservice.engines import local_client
    from osprey.toolservice.images import BASE_TAG, registry_ref

    (workspace / "a.txt").write_text("alpha\n")
    here = local_client()
    with LocalRegistry(tmp_path / "registry") as registry, RemoteEngine() as fresh:  # an engine of its own: no lane image on it
        where = f"{registry.address}/osprey"
        client = fresh.client()

        async def start(name: str, lane_home: Path) -> list[str]:
            backend = RemoteDockerBackend(target_of(fresh), progress=(messages := []).append)
            lane = await backend.provision(request_for(workspace, lane_home, name, registry=where), progress=messages.append)
            try:
                assert (await ToolClient(lane.connection).read_file("a.txt")).content.endswith("alpha")
            finally:
                await backend.destroy(lane)
            backend.prune_gateway()
            messages.append(f"image {lane.image}")
            return messages

        empty = await start("noreg", home)
        tag = empty[-1].removeprefix("image ")
        assert any(m.startswith(f"the registry {where} has no {tag}") for m in empty), empty
        assert any(m.startswith("copying the lane image") for m in empty), empty
        client.images.remove(tag, force=True)

        # Another image under the lane image's name in the registry is not taken.
        repository, _, version = registry_ref(where, tag).rpartition(":")
        here.api.tag(BASE_TAG, repository, version)
        try:
            for _ in here.api.push(repository, tag=version, stream=True, decode=True):
                pass
        finally:
            here.api.remove_image(f"{repository}:{version}")
        impostor = await start("impostor", home)
        assert any("failed: it is not the image built here" in m for m in impostor), impostor
        assert any(m.startswith("copying the lane image") for m in impostor), impostor
        client.images.remove(tag, force=True)

        (Path(osprey_env["OSPREY_HOME"]) / "config.toml").write_text(f'[sandbox]\nregistry = "{where}"\n')
        pushed = await asyncio.to_thread(subprocess.run, [str(Path(sys.executable).with_name("osprey")), "sandbox", "build", "--push"],
                                         capture_output=True, text=True, env=osprey_env, timeout=900)
        assert pushed.returncode == 0, pushed.stderr
        assert f"pushed {repository}@sha256:" in pushed.stderr, pushed.stderr
        assert not here.images.list(name=repository), "the name it was pushed by is not left on this machine's engine"

        for lane_home in (home, Path(osprey_env["OSPREY_HOME"])):  # checked against the image built here; the digest pushed from here
            pulled = await start("reg", lane_home)
            assert any(m.startswith(f"pulling the lane image {repository}@sha256:") for m in pulled), pulled
            assert not any(m.startswith("copying the lane image") for m in pulled), pulled
            assert any(d.startswith(f"{repository}@sha256:") for d in client.images.get(tag).attrs["RepoDigests"])
            client.images.remove(tag, force=True)


def test_push_without_a_registry_says_what_to_set(osprey_env: dict[str, str]) -> None:
    run = subprocess.run([str(Path(sys.executable).with_name("osprey")), "sandbox", "build", "--push"], capture_output=True, text=True,
                         env=osprey_env, timeout=120)
    assert run.returncode != 0 and "[sandbox] registry" in run.stderr, run.stderr


async def test_sandbox_status_lists_the_remote_lanes_and_their_gateway(lane: RemoteLane, remote_engine: RemoteEngine,
                                                                       osprey_env: dict[str, str]) -> None:
    run = await asyncio.to_thread(subprocess.run, [str(Path(sys.executable).with_name("osprey")), "sandbox", "status"], capture_output=True,
                                  text=True, env={**osprey_env, **remote_engine.env}, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "a remote engine" in run.stdout
    rows = {line.split()[0]: line for line in run.stdout.splitlines()[3:]}
    assert f"{os.getpid()} (alive)" in rows[lane.name] and lane.workspace in rows[lane.name], run.stdout
    assert "(gateway)" in rows[lane.gateway] and "this machine's lanes" in rows[lane.gateway], run.stdout
