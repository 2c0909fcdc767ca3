"""A lane's start as a fresh process pays it: the engine spoken to on its unix socket without the
docker SDK, the create document the SDK would have sent, the lane image an earlier process
checked taken from its record, and a sidecar that no workspace module can shadow.

Real Docker and real lanes where a lane starts; how fast is measured by bench/lane_ready.py and
bench/tool_service_overlap.py, not here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import require_docker

from osprey.config import SandboxSettings
from osprey.errors import SandboxError
from osprey.toolservice import images, lanes
from osprey.toolservice.backend import LaneRequest
from osprey.toolservice.homes import open_tool_service


def session(name: str) -> str:
    return f"startup-{os.getpid()}-{name}"


@pytest.mark.parametrize("network", [False, True])
def test_the_create_document_is_what_the_docker_sdk_sends(workspace: Path, tmp_path: Path, network: bool) -> None:
    """Every hardening option reaches the engine as the SDK would send it, protected binds included."""
    import docker
    from docker.models.containers import _create_container_args

    (workspace / ".git").mkdir()
    (workspace / ".osprey").mkdir()
    socket_dir = tmp_path / "osprey-0" / "lane-1-abcdefgh"
    socket_dir.mkdir(parents=True)
    ws = os.path.realpath(workspace)
    options = SandboxSettings(enabled=True, network=network, pids_limit=77, memory_limit="1g", cpus=1.5, tmp_size="64m")
    run_options = lanes.lane_run_options("osprey-lane:0123456789abcdef", ws, "s", options, socket_dir)
    assert any(bind["mode"] == "ro" for bind in run_options["volumes"].values())
    api = docker.APIClient(base_url="unix:///nonexistent.sock", version="1.41")
    args = _create_container_args({"image": "osprey-lane:0123456789abcdef", "version": "1.41", **run_options})
    name = args.pop("name")
    sent = api.create_container_config(**args)
    ours = lanes.create_config("osprey-lane:0123456789abcdef", run_options)
    assert name == run_options["name"]
    assert ours == {key: value for key, value in sent.items() if value is not None}


def test_which_engines_are_spoken_to_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    assert lanes.local_engine_socket() == lanes.DOCKER_SOCKET
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/user/1000/docker.sock")
    assert lanes.local_engine_socket() == "/run/user/1000/docker.sock"
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    assert lanes.local_engine_socket() is None, "TLS is the SDK's to do"
    monkeypatch.delenv("DOCKER_TLS_VERIFY")
    for remote in ("tcp://10.0.0.2:2376", "ssh://me@host", "unix://"):
        monkeypatch.setenv("DOCKER_HOST", remote)
        assert lanes.local_engine_socket() is None


def test_an_engine_socket_nobody_listens_on_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="no Docker engine answers on .*DOCKER_HOST"):
        lanes.EngineAPI(str(tmp_path / "docker.sock")).lanes()


def test_the_log_stream_is_read_frame_by_frame() -> None:
    frames = b"\x01\0\0\0\0\0\0\x06hello\n" + b"\x02\0\0\0\0\0\0\x04bad\n"
    assert lanes._demultiplexed(frames) == b"hello\nbad\n"
    assert lanes._demultiplexed(b"plain text") == b"plain text"


def test_the_recipe_fingerprint_follows_the_sidecars_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sidecar = tmp_path / "osprey_sidecar"
    sidecar.mkdir()
    (sidecar / "server.py").write_text("one\n")
    monkeypatch.setattr(images, "sidecar_dir", lambda: sidecar)
    engine = ("", "", "", "")
    first = images.recipe_fingerprint(None, engine)
    assert images.recipe_fingerprint(None, engine) == first
    assert images.recipe_fingerprint("debian:bookworm-slim", engine) != first
    assert images.recipe_fingerprint(None, ("tcp://elsewhere:2376", "", "", "")) != first
    (sidecar / "server.py").write_text("two\n")
    os.utime(sidecar / "server.py", ns=(time.time_ns(), time.time_ns() + 10**9))
    assert images.recipe_fingerprint(None, engine) != first, "a changed sidecar file must be checked again"


def test_the_image_record_keeps_only_lane_tags(tmp_path: Path) -> None:
    images.remember_lane_image(tmp_path, "f1", "osprey-lane:0123456789abcdef")
    assert images.known_lane_image(tmp_path, "f1") == "osprey-lane:0123456789abcdef"
    assert images.known_lane_image(tmp_path, "f2") is None
    images.remember_lane_image(tmp_path, "f1", None)
    assert images.known_lane_image(tmp_path, "f1") is None
    (tmp_path / "cache" / images.LANE_IMAGE_CACHE).write_text('{"f1": "alpine:latest"}')
    assert images.known_lane_image(tmp_path, "f1") is None, "only an image of the lane repository is taken"
    (tmp_path / "cache" / images.LANE_IMAGE_CACHE).write_text("not json")
    assert images.known_lane_image(tmp_path, "f1") is None


START_AND_CALL = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from osprey.config import SandboxSettings
    from osprey.toolservice.homes import open_tool_service

    async def main():
        async with open_tool_service([sys.argv[1]], sandbox=SandboxSettings(enabled=True), session_id=sys.argv[2], home=Path(sys.argv[3])) as home:
            print((await home.client.bash("echo up")).output.strip(), home.lane.image)
        print("docker" in sys.modules)

    asyncio.run(main())
""")


def run_start(workspace: Path, name: str, home: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")}
    proc = subprocess.run([sys.executable, "-c", START_AND_CALL, os.path.realpath(workspace), session(name), str(home)],
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()


def test_a_later_process_starts_its_lane_without_the_docker_sdk(workspace: Path, tmp_path: Path) -> None:
    require_docker()
    home = tmp_path / "home"
    first = run_start(workspace, "first", home)  # checks the image (with the SDK) and records it
    assert first[0] == "up" and first[1].startswith("osprey-lane:")
    second = run_start(workspace, "second", home)
    assert second == ["up", first[1], "False"], "a later process loaded the docker SDK, or used another image"


async def test_a_recorded_image_that_is_gone_is_checked_again(workspace: Path, tmp_path: Path) -> None:
    require_docker()
    home = tmp_path / "home"
    base = SandboxSettings(enabled=True).base_image
    fingerprint = images.recipe_fingerprint(base, lanes._engine_key())
    images.remember_lane_image(home, fingerprint, "osprey-lane:00000000deadbeef")  # no such image
    lanes._remember_image(base, None)
    try:
        async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=session("gone"), home=home) as service:
            assert (await service.client.bash("echo up")).output == "up\n"
            used = service.lane.image  # type: ignore[attr-defined]
        assert used != "osprey-lane:00000000deadbeef"
        assert images.known_lane_image(home, fingerprint) == used
    finally:
        lanes._remember_image(base, None)


async def test_a_workspace_module_cannot_shadow_the_sidecars(workspace: Path) -> None:
    """The sidecar runs with the workspace as its working directory; a module there named like
    one it imports must not run inside it (it would read the lane's token)."""
    require_docker()
    for module in ("argparse", "secrets", "ctypes", "signal"):
        (workspace / f"{module}.py").write_text(f"open('imported-{module}', 'w').close()\n")
    async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=session("shadow")) as service:
        assert (await service.client.bash("echo up")).output == "up\n"
    assert sorted(p.name for p in workspace.iterdir() if p.name.startswith("imported-")) == []


def lane_containers(name: str) -> list[str]:
    import docker

    client = docker.from_env()
    try:
        # sparse: no inspection, so a container removed meanwhile is not an error
        return [c.id for c in client.containers.list(all=True, sparse=True, filters={"label": f"osprey.session={session(name)}"})]
    finally:
        client.close()


async def wait_for_container(name: str) -> list[str]:
    import asyncio

    deadline = time.monotonic() + 60
    while not (found := lane_containers(name)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return found


def lane_request(workspace: Path, name: str, **options: object) -> LaneRequest:
    return LaneRequest(workspace=os.path.realpath(workspace), session_id=session(name), options=SandboxSettings(enabled=True, **options))


async def test_a_prepared_lane_is_taken_over_by_its_session(workspace: Path) -> None:
    require_docker()
    await open_and_close_a_lane(workspace)  # the image is known, so the prepared start goes all the way
    request = lane_request(workspace, "prepared")
    lanes.prepare_lane(request)
    made = await wait_for_container("prepared")
    assert len(made) == 1, "the prepared start made no container"
    backend = lanes.LocalDockerBackend()
    lane = await backend.provision(request)
    try:
        assert lane.id == made[0], f"the session started another container ({lane.id[:12]}) instead of taking the prepared one ({made[0][:12]}) over"
        assert await lane.connection.healthy(timeout=5)
        assert not (lane.socket_dir / lanes.TOKEN_NAME).exists()  # locked down as any lane
    finally:
        await backend.destroy(lane)
    assert lane_containers("prepared") == []


async def test_a_prepared_lane_with_other_settings_is_replaced(workspace: Path) -> None:
    require_docker()
    await open_and_close_a_lane(workspace)
    lanes.prepare_lane(lane_request(workspace, "other", pids_limit=64))
    made = await wait_for_container("other")
    assert len(made) == 1
    backend = lanes.LocalDockerBackend()
    lane = await backend.provision(lane_request(workspace, "other", pids_limit=128))
    try:
        assert lane.id != made[0]
        import docker

        client = docker.from_env()
        assert client.api.inspect_container(lane.id)["HostConfig"]["PidsLimit"] == 128
        client.close()
    finally:
        await backend.destroy(lane)
    assert lane_containers("other") == []


async def test_a_prepared_lane_no_session_took_is_removed(workspace: Path) -> None:
    require_docker()
    await open_and_close_a_lane(workspace)
    lanes.prepare_lane(lane_request(workspace, "unused"))
    assert len(await wait_for_container("unused")) == 1
    runtime = lanes.runtime_dir()
    lanes.discard_prepared_lanes()
    assert lane_containers("unused") == []
    assert [d for d in os.listdir(runtime) if d.startswith(f"lane-{os.getpid()}-")] == []


async def open_and_close_a_lane(workspace: Path) -> None:
    async with open_tool_service([str(workspace)], sandbox=SandboxSettings(enabled=True), session_id=session(f"warm-{time.monotonic_ns()}")):
        pass


async def test_a_home_prepared_from_its_configuration_is_the_sessions_lane(workspace: Path) -> None:
    """The front ends' way: `prepare_home` with the configuration the session will build its
    home from; the session's lane supervisor takes the started container over."""
    require_docker()
    from osprey.toolservice.home_config import home_config, prepare_home

    await open_and_close_a_lane(workspace)
    sandbox = SandboxSettings(enabled=True)
    prepare_home(home_config([str(workspace)], sandbox=sandbox, session_id=session("fe")))
    made = await wait_for_container("fe")
    assert len(made) == 1
    async with open_tool_service([str(workspace)], sandbox=sandbox, session_id=session("fe")) as service:
        assert service.lane.id == made[0]  # type: ignore[attr-defined]
        assert (await service.client.bash("echo up")).output == "up\n"
    assert lane_containers("fe") == []
    prepare_home(home_config([str(workspace)], sandbox=None, session_id=session("local")))  # nothing to begin for the local dispatcher
    assert lane_containers("local") == []
