"""`osprey sandbox build|status|prune` as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import docker
from helpers import require_docker

from osprey.testing.model_server import ModelServer, Reply
from osprey.toolservice.lanes import LABEL


def osprey(*args: str, **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run([str(Path(sys.executable).with_name("osprey")), *args], capture_output=True, text=True, timeout=900, **kw)


def test_build_reuses_the_image_for_an_unchanged_recipe() -> None:
    require_docker()
    first = osprey("sandbox", "build", "-q")
    assert first.returncode == 0, first.stderr
    tag = first.stdout.strip()
    assert tag.startswith("osprey-lane:")
    second = osprey("sandbox", "build")
    assert second.returncode == 0 and second.stdout.strip() == tag
    assert "building" not in second.stderr  # nothing was rebuilt
    assert docker.from_env().images.get(tag).labels["osprey.lane-image"] == "1"


def test_status_and_prune_handle_an_orphaned_lane(tmp_path: Path) -> None:
    require_docker()
    client = docker.from_env()
    tag = osprey("sandbox", "build", "-q").stdout.strip()
    # A lane whose owner is gone: a pid that cannot exist.
    orphan = client.containers.create(tag, command=["--version"], labels={LABEL: "1", "osprey.owner_pid": "999999999", "osprey.boot_id": "x", "osprey.session": "orphan-test"}, name="osprey-lane-orphan-test")
    try:
        status = osprey("sandbox", "status")
        assert status.returncode == 0 and "osprey-lane-orphan-test" in status.stdout and "(gone)" in status.stdout
        pruned = osprey("sandbox", "prune")
        assert pruned.returncode == 0 and "osprey-lane-orphan-test" in pruned.stdout
        assert not client.containers.list(all=True, filters={"label": "osprey.session=orphan-test"})
    finally:
        try:
            orphan.remove(force=True)
        except docker.errors.NotFound:
            pass


def test_commands_say_what_to_do_without_an_engine(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "DOCKER_HOST": f"unix://{tmp_path}/no-such.sock", "HOME": str(tmp_path)}
    for args in (["sandbox", "status"], ["sandbox", "build"], ["sandbox", "prune"]):
        result = osprey(*args, env=env)
        assert result.returncode == 1, args
        assert "no Docker engine answers" in result.stderr and "without --sandbox" in result.stderr


def test_agent_sandbox_without_an_engine_fails_clearly(tmp_path: Path, osprey_env: dict[str, str], model_server: ModelServer) -> None:
    # The lane starts while the model is asked: the model's answer is held so the lane's failure
    # is what ends the run (a refused local model server would fail at once, first).
    model_server.add(Reply.hold(1, then=Reply.text("never shown")))
    env = dict(osprey_env, DOCKER_HOST=f"unix://{tmp_path}/no-such.sock")
    try:
        result = osprey("agent", "--sandbox", "--provider", "openai", "--base-url", model_server.base_url, "-C", str(tmp_path), "hi", env=env)
    finally:
        model_server.release()
    assert result.returncode == 1
    assert "no Docker engine answers" in result.stderr


def test_attaching_to_a_missing_lane_fails_at_once(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    result = osprey("agent", "--sandbox-socket", str(tmp_path / "none.sock"), "--provider", "openai", "--base-url", "http://127.0.0.1:9/v1", "-C", str(tmp_path), "hi", env=osprey_env, )
    assert result.returncode == 1 and "there is no lane socket at" in result.stderr


def test_attaching_with_an_unreadable_token_file(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    sock = tmp_path / "lane.sock"
    sock.touch()
    result = osprey("agent", "--sandbox-socket", str(sock), "--sandbox-token-file", str(tmp_path / "missing-token"), "--provider", "openai", "--base-url", "http://127.0.0.1:9/v1", "-C", str(tmp_path), "hi", env=osprey_env)
    assert result.returncode == 1 and "token file" in result.stderr and "cannot be read" in result.stderr


def test_sandbox_network_needs_sandbox(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    result = osprey("agent", "--sandbox-network", "--provider", "openai", "--base-url", "http://127.0.0.1:9/v1", "-C", str(tmp_path), "hi", env=osprey_env)
    assert result.returncode == 2 and "--sandbox-network needs --sandbox" in result.stderr
