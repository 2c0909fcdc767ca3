"""The second Docker engine the remote-lane tests use (tests/remote_engine.py): a real dockerd with
mutual TLS on a loopback port and a fresh data root, which leaves the first engine's network alone."""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import remote_engine as engines
import trustme
from docker.tls import TLSConfig
from remote_engine import EngineUnavailable, PinnedTLS, RemoteEngine, SshGateway, check_first_engine, pinned_client, require_remote_engine  # noqa: F401

pytestmark = pytest.mark.slow  # real engines: out of the fast subset


def test_answers_ping_and_info_over_tls_with_the_client_certificate(remote_engine: RemoteEngine) -> None:
    client = docker.DockerClient(base_url=remote_engine.host, tls=remote_engine.tls_config())
    try:
        assert client.ping()
        info = client.info()
        assert info["DockerRootDir"] == str(remote_engine.root / "data")
        assert f"{engines.LABEL}=1" in info["Labels"]
    finally:
        client.close()
    first = docker.DockerClient(base_url="unix:///var/run/docker.sock")
    try:
        assert first.info()["ID"] != info["ID"], "the second engine must have an identity of its own"
    finally:
        first.close()


def test_the_environment_mapping_drives_the_docker_cli(remote_engine: RemoteEngine) -> None:
    if shutil.which("docker") is None:
        pytest.skip("the docker CLI is not installed")
    env = {**os.environ, **remote_engine.env}
    out = subprocess.run(["docker", "info", "-f", "{{.DockerRootDir}}"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(remote_engine.root / "data")


def test_a_call_without_a_client_certificate_is_refused(remote_engine: RemoteEngine) -> None:
    with pytest.raises(OSError):  # ssl.SSLError or a reset, depending on when the server's alert lands
        remote_engine.ping(client_cert=False)
    no_cert = PinnedTLS(ca_cert=str(remote_engine.cert_dir / "ca.pem"), verify=True)
    with pytest.raises(docker.errors.DockerException):
        docker.DockerClient(base_url=remote_engine.host, tls=no_cert)


def test_a_client_that_trusts_another_ca_refuses_the_engine(remote_engine: RemoteEngine, tmp_path: Path) -> None:
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    d = remote_engine.cert_dir
    tls = PinnedTLS(client_cert=(str(d / "cert.pem"), str(d / "key.pem")), ca_cert=str(other), verify=True)
    with pytest.raises(docker.errors.DockerException, match="CERTIFICATE_VERIFY_FAILED"):
        docker.DockerClient(base_url=remote_engine.host, tls=tls)


def test_its_data_root_is_fresh(remote_engine: RemoteEngine) -> None:
    """A new engine starts with nothing (the shared one has what earlier tests gave it)."""
    require_remote_engine()
    with RemoteEngine() as fresh:
        client = fresh.client()
        try:
            assert client.images.list(all=True) == []
            assert client.containers.list(all=True, filters={"label": engines.PROBE_LABEL}) == []
            assert client.info()["DockerRootDir"] != remote_engine.client().info()["DockerRootDir"]
        finally:
            client.close()


def test_ca_bundle_variables_replace_the_engines_ca_unless_pinned(remote_engine: RemoteEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """requests lets REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE win over the session's `verify`, which is
    where the Docker SDK puts the engine's CA; PinnedTLS keeps it."""
    d = remote_engine.cert_dir
    paths = {"client_cert": (str(d / "cert.pem"), str(d / "key.pem")), "ca_cert": str(d / "ca.pem"), "verify": True}
    for variable in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv(variable, ssl.get_default_verify_paths().openssl_cafile)
        with pytest.raises(docker.errors.DockerException, match="CERTIFICATE_VERIFY_FAILED"):
            docker.DockerClient(base_url=remote_engine.host, tls=TLSConfig(**paths))
        with pytest.raises(docker.errors.DockerException, match="CERTIFICATE_VERIFY_FAILED"):
            docker.from_env(environment=remote_engine.env)
        for client in (docker.DockerClient(base_url=remote_engine.host, tls=PinnedTLS(**paths)), pinned_client(remote_engine.env)):
            try:
                assert client.ping()
            finally:
                client.close()


def test_the_first_engines_network_works_while_it_runs(remote_engine: RemoteEngine) -> None:
    assert remote_engine.ping() == b"OK"
    check_first_engine()


def test_stop_removes_everything_and_leaves_the_first_engine_working() -> None:
    require_remote_engine()
    engine = RemoteEngine().start()
    root, bridge = engine.root, engine.bridge
    assert root is not None and Path(f"/sys/class/net/{bridge}").exists()
    check_first_engine()
    engine.stop()
    engine.stop()  # idempotent
    assert not root.exists()
    assert not Path(f"/sys/class/net/{bridge}").exists()
    check_first_engine()


def test_a_start_that_fails_half_way_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    require_remote_engine()
    RemoteEngine().stop()  # never started: nothing to do
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(engines, "_free_port", lambda: port)
        engine = RemoteEngine()
        with pytest.raises(RuntimeError, match="dockerd exited") as info:
            engine.start()
    assert "address already in use" in str(info.value), "the error must carry the end of dockerd's log"
    assert engine.root is None and engine.process is None
    assert not Path(f"/sys/class/net/osprtest{port}").exists()
    log = re.search(r"the end of (\S+/dockerd\.log)", str(info.value))
    assert log is not None and not Path(log.group(1)).parent.exists()


@pytest.fixture
def gateway(remote_engine: RemoteEngine, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshGateway]:
    """An sshd on loopback whose sessions reach the second engine, and this process's HOME and
    PATH pointed at its client configuration."""
    try:
        with SshGateway(remote_engine.env) as gateway:
            for name, value in gateway.env.items():
                monkeypatch.setenv(name, value)
            yield gateway
    except EngineUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs sshd for the ssh transport tests: {exc}")
        pytest.skip(str(exc))


def test_the_docker_cli_reaches_the_engine_through_ssh(remote_engine: RemoteEngine, gateway: SshGateway) -> None:
    if shutil.which("docker") is None:
        pytest.skip("the docker CLI is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")}
    out = subprocess.run(["docker", "info", "-f", "{{.DockerRootDir}}"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(remote_engine.root / "data")


@pytest.mark.parametrize("use_ssh_client", [True, False], ids=["ssh-client", "paramiko"])
def test_the_sdk_reaches_the_engine_through_ssh(remote_engine: RemoteEngine, gateway: SshGateway, use_ssh_client: bool) -> None:
    """The SDK runs `docker system dial-stdio` on the far side (through `ssh`, or paramiko), which
    the gateway points at the second engine. Either way it needs paramiko importable."""
    client = docker.DockerClient(base_url=gateway.host, use_ssh_client=use_ssh_client)
    try:
        assert client.info()["DockerRootDir"] == str(remote_engine.root / "data")
    finally:
        client.close()


def test_it_says_why_it_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(EngineUnavailable, match="needs root"):
        RemoteEngine().start()
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(EngineUnavailable, match="dockerd is not installed"):
        RemoteEngine().start()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI needs a second Docker engine"):
        require_remote_engine()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="dockerd is not installed"):
        require_remote_engine()
