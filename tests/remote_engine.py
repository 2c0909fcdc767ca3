"""A second Docker engine for the tests: its own `dockerd` with `--tlsverify` on a loopback TCP port,
its own data root (none of the first engine's images), its own bridge, and certificates made by
trustme in the layout `DOCKER_CERT_PATH` expects. The way a remote engine is reached, on this machine.

It leaves the first engine alone: a second dockerd with `--bridge=none` would delete the first's
`docker0`, so it gets a bridge of its own, and it never touches iptables, forwarding or the first's
socket. Starting it needs root and dockerd; `EngineUnavailable` says which is missing.

    with RemoteEngine() as engine:
        client = engine.client()                   # the Docker SDK, pinned to the engine's CA
        subprocess.run([...], env={**os.environ, **engine.env})

or, in a test module, `from remote_engine import remote_engine  # noqa: F401` (a session fixture).
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import trustme
from docker.tls import TLSConfig

START_BOUND_S = 60.0
STOP_BOUND_S = 30.0
LABEL = "osprey.test-engine"
PROBE_LABEL = "osprey.test-engine-probe"
# The bridge's /24 is taken from here, the engine's own networks from POOLS (both outside Docker's
# default pools, 172.17-31.x and 192.168.x, so the first engine never picks them).
BRIDGES = ipaddress.IPv4Network("10.213.0.0/16")
POOLS = "10.214.{}.0/24"


class EngineUnavailable(Exception):
    """This machine cannot run a second engine (not root, no dockerd, no `ip`)."""


class PinnedTLS(TLSConfig):
    """TLS that verifies against the engine's CA only. requests lets `REQUESTS_CA_BUNDLE` or
    `CURL_CA_BUNDLE` replace a session's `verify` on every request (`merge_environment_settings`,
    when `trust_env`); the Docker SDK sets only the session's, so such a variable makes an engine with
    its own CA fail verification. Turning `trust_env` off here, before the client's first request
    (the API version), keeps the CA; it also ignores proxy variables and `.netrc` for this client."""

    def configure_client(self, client: Any) -> None:
        super().configure_client(client)
        client.trust_env = False


def pinned_client(env: dict[str, str], **kwargs: Any) -> docker.DockerClient:
    """A Docker SDK client for `DOCKER_HOST`/`DOCKER_TLS_VERIFY`/`DOCKER_CERT_PATH` in `env`, as
    `docker.from_env(environment=env)` makes it but with `PinnedTLS`."""
    params = docker.utils.kwargs_from_env(environment=env)
    tls = params.get("tls")
    if isinstance(tls, TLSConfig):
        params["tls"] = PinnedTLS(client_cert=tls.cert, ca_cert=tls.ca_cert, verify=tls.verify)
    return docker.DockerClient(**params, **kwargs)


def unavailable() -> str:
    """Why this machine cannot run a second engine; "" when it can."""
    if shutil.which("dockerd") is None:
        return "dockerd is not installed (apt-get install docker.io)"
    if shutil.which("ip") is None:
        return "`ip` is not installed (apt-get install iproute2); the engine needs a bridge of its own"
    if os.geteuid() != 0:
        return "a second dockerd needs root (it mounts file systems and makes a bridge); run these tests as root"
    return ""


def require_remote_engine() -> None:
    """Skip where a second engine cannot start, except under CI, where that is a failure."""
    reason = unavailable()
    if reason and os.environ.get("CI"):
        pytest.fail(f"CI needs a second Docker engine for the remote-engine tests: {reason}")
    if reason:
        pytest.skip(f"no second Docker engine: {reason}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _routed() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(["ip", "-j", "-4", "route", "show", "table", "all"], check=True, capture_output=True, text=True).stdout
    nets = []
    for route in json.loads(out or "[]"):
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.ip_network(route.get("dst", ""), strict=False))
    return [n for n in nets if isinstance(n, ipaddress.IPv4Network)]


def _free_subnet(seed: int) -> tuple[int, ipaddress.IPv4Network]:
    """A /24 of BRIDGES that no route of this machine overlaps, and its index."""
    routed = _routed()
    subnets = list(BRIDGES.subnets(new_prefix=24))
    for i in range(len(subnets)):
        index = (seed + i) % len(subnets)
        if not any(subnets[index].overlaps(n) for n in routed):
            return index, subnets[index]
    raise EngineUnavailable(f"every /24 of {BRIDGES} is routed here already")


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or below `root`, deepest first (from this process's mountinfo)."""
    prefix = str(root)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


class RemoteEngine:
    """A second dockerd reached at `host` (tcp://127.0.0.1:PORT) with mutual TLS. `start` waits
    for `/_ping`; `stop` is idempotent and safe after a start that failed half-way."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.port = 0
        self.bridge = ""
        self.subnet: ipaddress.IPv4Network | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._bridge_made = False
        self._rule_made = False
        self._forward_rule: list[str] = []
        self.pool = ""

    # --- what a test uses ------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """The `DOCKER_HOST` value."""
        return f"tcp://127.0.0.1:{self.port}"

    @property
    def cert_dir(self) -> Path:
        """The client's ca.pem, cert.pem and key.pem (`DOCKER_CERT_PATH`)."""
        assert self.root is not None, "the engine was never started"
        return self.root / "client"

    @property
    def env(self) -> dict[str, str]:
        """The variables that point the Docker CLI or SDK at this engine."""
        return {"DOCKER_HOST": self.host, "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(self.cert_dir)}

    @property
    def log(self) -> Path:
        assert self.root is not None, "the engine was never started"
        return self.root / "dockerd.log"

    def tls_config(self) -> PinnedTLS:
        d = self.cert_dir
        return PinnedTLS(client_cert=(str(d / "cert.pem"), str(d / "key.pem")), ca_cert=str(d / "ca.pem"), verify=True)

    def client(self, **kwargs: Any) -> docker.DockerClient:
        """A Docker SDK client for this engine (whatever `REQUESTS_CA_BUNDLE` says)."""
        return docker.DockerClient(base_url=self.host, tls=self.tls_config(), **kwargs)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AssertionError):
            return "(no log)"

    # --- start and stop --------------------------------------------------------------------------

    def __enter__(self) -> RemoteEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, bound_s: float = START_BOUND_S) -> RemoteEngine:
        reason = unavailable()
        if reason:
            raise EngineUnavailable(reason)
        try:
            self._start(str(shutil.which("dockerd")), bound_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, dockerd: str, bound_s: float) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="osprey-engine-"))
        self.port = _free_port()
        self._write_certs()
        index, self.subnet = _free_subnet(self.port)
        self.bridge = f"osprtest{self.port}"  # at most 15 characters
        subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True, capture_output=True)
        self._bridge_made = True
        subprocess.run(["ip", "addr", "add", f"{self.subnet[1]}/{self.subnet.prefixlen}", "dev", self.bridge], check=True, capture_output=True)
        subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True, capture_output=True)
        # The first engine sets FORWARD's policy to DROP, and bridged traffic passes FORWARD here
        # (br_netfilter): without iptables of its own, this engine's containers could not reach
        # one another on a network of its own. Accept traffic that stays inside its address pool.
        self.pool = POOLS.format(index % 256)
        self._forward_rule = ["FORWARD", "-s", self.pool, "-d", self.pool, "-m", "comment", "--comment", f"osprey-test-engine-{self.port}", "-j", "ACCEPT"]
        if shutil.which("iptables"):
            subprocess.run(["iptables", "-I", *self._forward_rule], check=True, capture_output=True)
            self._rule_made = True
        config = self.root / "daemon.json"
        # Never /etc/docker/daemon.json; and its own identity (the engine ID), not /etc/docker/key.json's.
        config.write_text(json.dumps({"deprecated-key-path": str(self.root / "key.json")}) + "\n")
        server = self.root / "server"
        argv = [
            dockerd, "--config-file", str(config), "-H", self.host,
            "--tlsverify", "--tlscacert", str(server / "ca.pem"), "--tlscert", str(server / "cert.pem"), "--tlskey", str(server / "key.pem"),
            "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "dockerd.pid"),
            "--bridge", self.bridge, "--default-address-pool", f"base={self.pool},size=28",
            "--iptables=false", "--ip6tables=false", "--ip-masq=false", "--ip-forward=false", "--ip", "127.0.0.1",
            "--label", f"{LABEL}=1",
        ]
        with self.log.open("wb") as log:
            # A session of its own: a Ctrl-C on the tests reaches it only through stop().
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_for_ping(bound_s)

    def _write_certs(self) -> None:
        assert self.root is not None
        ca = trustme.CA()
        for name, cert in (("server", ca.issue_cert("127.0.0.1", "localhost")), ("client", ca.issue_cert("client.osprey.test"))):
            d = self.root / name
            d.mkdir(mode=0o700)
            ca.cert_pem.write_to_path(str(d / "ca.pem"))
            (d / "cert.pem").write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
            cert.private_key_pem.write_to_path(str(d / "key.pem"))
            os.chmod(d / "key.pem", 0o600)

    def ssl_context(self, client_cert: bool = True) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.cert_dir / "ca.pem"))
        if client_cert:
            context.load_cert_chain(str(self.cert_dir / "cert.pem"), str(self.cert_dir / "key.pem"))
        return context

    def ping(self, client_cert: bool = True) -> bytes:
        """`GET /_ping` over TLS with the standard library (no requests, no CA-bundle variables)."""
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ssl_context(client_cert), timeout=5)
        try:
            connection.request("GET", "/_ping")
            response = connection.getresponse()
            return response.read() if response.status == 200 else b""
        finally:
            connection.close()

    def _wait_for_ping(self, bound_s: float) -> None:
        deadline = time.monotonic() + bound_s
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"the test engine's dockerd exited with {self.process.returncode}; the end of {self.log}:\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                if self.ping() == b"OK":
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test engine did not answer /_ping on {self.host} in {bound_s:.0f} s; the end of {self.log}:\n{self.log_tail()}")
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL past the bound), then unmount and remove its directories and
        the bridge. A mount that will not go keeps the directories (removing through it could reach
        what it shows); the error names it."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_BOUND_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.root is not None:
            self._kill_leftover_containerd()
        if self._bridge_made:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
            self._bridge_made = False
        if self._rule_made:
            subprocess.run(["iptables", "-D", *self._forward_rule], capture_output=True)
            self._rule_made = False
        root, self.root = self.root, None
        if root is None or not root.exists():
            return
        for point in _mounts_under(root):
            subprocess.run(["umount", "-l", point], capture_output=True)
        left = _mounts_under(root)
        if left:
            raise RuntimeError(f"the test engine's mounts {left} would not unmount; {root} is left in place")
        shutil.rmtree(root)

    def _kill_leftover_containerd(self) -> None:
        """dockerd stops the containerd it started, but not when it was killed."""
        assert self.root is not None
        with contextlib.suppress(OSError, ValueError):
            pid = int((self.root / "exec" / "containerd" / "containerd.pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if str(self.root).encode() in cmdline:  # still ours, not a reused pid
                os.kill(pid, signal.SIGKILL)


class SshGateway:
    """sshd on a loopback port in a configuration of its own (host key, client key and
    authorized_keys in a temp dir; key login as root only) whose sessions get `engine_env` (sshd's
    `SetEnv`): `docker system dial-stdio`, which the Docker SDK and CLI run over ssh, then reaches
    that engine, as it would on another machine. `env` points a client at it: `DOCKER_HOST`,
    `HOME` (paramiko reads ~/.ssh/config and known_hosts there) and `PATH` with an `ssh` that uses
    the gateway's client configuration (OpenSSH reads the passwd entry's home, not `HOME`)."""

    def __init__(self, engine_env: dict[str, str]) -> None:
        self.engine_env = engine_env
        self.root: Path | None = None
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        assert self.root is not None, "the gateway was never started"
        return {"DOCKER_HOST": self.host, "HOME": str(self.root / "home"), "PATH": f"{self.root / 'bin'}:{os.environ.get('PATH', '')}"}

    def __enter__(self) -> SshGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, bound_s: float = 10.0) -> SshGateway:
        sshd, ssh, keygen = Path("/usr/sbin/sshd"), shutil.which("ssh"), shutil.which("ssh-keygen")
        if not sshd.exists() or ssh is None or keygen is None:
            raise EngineUnavailable("sshd, ssh or ssh-keygen is missing (apt-get install openssh-server openssh-client)")
        try:
            self._start(str(sshd), ssh, keygen, bound_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, sshd: str, ssh: str, keygen: str, bound_s: float) -> None:
        d = self.root = Path(tempfile.mkdtemp(prefix="osprey-sshd-"))
        self.port = _free_port()
        for key in ("host_key", "client_key"):
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", key, "-f", str(d / key)], check=True)
        shutil.copy(d / "client_key.pub", d / "authorized_keys")
        # One SetEnv line: sshd keeps the first line of a keyword and ignores the rest.
        set_env = ("SetEnv " + " ".join(f"{k}={v}" for k, v in self.engine_env.items()) + "\n") if self.engine_env else ""
        (d / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n"
            f"AuthorizedKeysFile {d}/authorized_keys\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
            f"KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\n{set_env}")
        kind, key = (d / "host_key.pub").read_text().split()[:2]
        ssh_dir = d / "home" / ".ssh"
        ssh_dir.mkdir(parents=True)
        (ssh_dir / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {kind} {key}\n")
        (ssh_dir / "config").write_text(f"Host 127.0.0.1\n  IdentityFile {d}/client_key\n")
        (d / "ssh_config").write_text(f"Host 127.0.0.1\n  IdentityFile {d}/client_key\n  UserKnownHostsFile {ssh_dir}/known_hosts\n"
                                      "  StrictHostKeyChecking yes\n  BatchMode yes\n")
        (d / "bin").mkdir()
        wrapper = d / "bin" / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec {ssh} -F {d}/ssh_config "$@"\n')
        wrapper.chmod(0o755)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's compiled-in privilege-separation directory
        with (d / "sshd.log").open("wb") as log:
            self.process = subprocess.Popen([sshd, "-D", "-e", "-f", str(d / "sshd_config")], stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + bound_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.process.returncode}: {(d / 'sshd.log').read_text(errors='replace')[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                if conn.recv(4).startswith(b"SSH-"):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not answer on 127.0.0.1:{self.port} in {bound_s:.0f} s")
            time.sleep(0.05)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_BOUND_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        root, self.root = self.root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


def check_first_engine(socket_url: str = "unix:///var/run/docker.sock") -> None:
    """Fail unless the first engine still has its docker0 and can start a container on its default
    bridge network (an `osprey-lane` image it has, a container of our own, removed after)."""
    assert Path("/sys/class/net/docker0").exists(), "the first engine's docker0 is gone"
    client = docker.DockerClient(base_url=socket_url)
    try:
        tags = sorted(t for image in client.images.list(name="osprey-lane") for t in image.tags)
        if not tags:
            if os.environ.get("CI"):
                pytest.fail("the first engine has no osprey-lane image to start a container from")
            pytest.skip("the first engine has no osprey-lane image to start a container from")
        container = client.containers.create(tags[-1], entrypoint=["/bin/sh", "-c", "test -e /sys/class/net/eth0"],
                                             network_mode="bridge", labels={PROBE_LABEL: "1"})
        try:
            container.start()
            assert container.wait(timeout=60)["StatusCode"] == 0, "a container on the first engine's bridge had no eth0"
        finally:
            container.remove(force=True)
    finally:
        client.close()


@pytest.fixture(scope="session")
def remote_engine() -> Iterator[RemoteEngine]:
    """A second engine for the whole session; skipped where it cannot start, except under CI."""
    require_remote_engine()
    with RemoteEngine() as engine:
        yield engine


def main() -> None:
    """`python tests/remote_engine.py`: start an engine, print its variables, stop it on Ctrl-C or SIGTERM."""
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    with RemoteEngine() as engine:
        print("".join(f"export {k}={v}\n" for k, v in engine.env.items()), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


if __name__ == "__main__":
    main()
