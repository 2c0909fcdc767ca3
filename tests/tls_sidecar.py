"""The real sidecar (`python -m osprey_sidecar --listen`) on a loopback TCP port with TLS, and
certificates for it made by trustme: the way a lane on another machine is reached."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import trustme
from pydantic import SecretBytes

from osprey.toolservice.targets import TlsTarget

LANE_NAME = "lane.osprey.test"
SERVING = re.compile(rb"serving on \S+:(\d+) \(TLS")
START_BOUND_S = 30.0


@dataclass
class Pki:
    """A CA, the service's certificate (for 127.0.0.1 and LANE_NAME unless told), and a client's."""

    ca: trustme.CA
    ca_pem: bytes
    ca_file: Path
    server_cert_file: Path
    server_key_file: Path
    client_cert_pem: bytes
    client_key_pem: bytes


def make_pki(directory: Path, names: Sequence[str] = ("127.0.0.1", LANE_NAME)) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert(*names)
    client = ca.issue_cert("broker.osprey.test")
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert_file, key_file = directory / "server.pem", directory / "server.key"
    cert_file.write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    server.private_key_pem.write_to_path(str(key_file))
    os.chmod(key_file, 0o600)
    return Pki(ca, ca.cert_pem.bytes(), ca_file, cert_file, key_file,
               b"".join(blob.bytes() for blob in client.cert_chain_pems), client.private_key_pem.bytes())


def sidecar_argv(roots: Sequence[str], pki: Pki, token_file: Path, *, client_ca: bool = False, parent_pid: int | None = None,
                 listen: str = "127.0.0.1:0") -> list[str]:
    argv = [sys.executable, "-I", "-m", "osprey_sidecar", "--listen", listen, "--tls-cert", str(pki.server_cert_file),
            "--tls-key", str(pki.server_key_file), "--token-file", str(token_file), *[a for r in roots for a in ("--root", r)]]
    if client_ca:
        argv += ["--tls-client-ca", str(pki.ca_file)]
    if parent_pid is not None:
        argv += ["--parent-pid", str(parent_pid)]
    return argv


def write_token(path: Path) -> str:
    token = secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    return token


def serving_port(log: Path) -> int | None:
    """The port a sidecar logging to `log` said it serves on (None until it did)."""
    try:
        with open(log, "rb") as fh:
            head = fh.read(64 * 1024)
    except FileNotFoundError:
        return None
    match = SERVING.search(head)
    return int(match.group(1)) if match else None


@dataclass
class TlsSidecar:
    proc: subprocess.Popen[bytes]
    port: int
    token: str
    token_file: Path
    log: Path

    def target(self, pki: Pki, *, mutual: bool = False, **fields: object) -> TlsTarget:
        """A target for this sidecar that trusts `pki`'s CA (and presents its client certificate
        when `mutual`); `fields` override any field."""
        values: dict[str, object] = {"host": "127.0.0.1", "port": self.port, "ca_pem": pki.ca_pem}
        if mutual:
            values.update(client_cert_pem=pki.client_cert_pem, client_key_pem=SecretBytes(pki.client_key_pem))
        values.update(fields)
        return TlsTarget.model_validate(values)

    def __enter__(self) -> TlsSidecar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_tls_sidecar(roots: Sequence[str], pki: Pki, directory: Path, *, client_ca: bool = False, socket: Path | None = None) -> TlsSidecar:
    """The sidecar serving `roots` on a free loopback port with TLS (on the unix `socket` when
    given: its port is then 0), once it says it serves."""
    directory.mkdir(parents=True, exist_ok=True)
    token_file = directory / "token"
    token = write_token(token_file)
    log = directory / "sidecar.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(sidecar_argv(roots, pki, token_file, client_ca=client_ca, parent_pid=os.getpid(),
                                             listen=f"unix:{socket}" if socket is not None else "127.0.0.1:0"),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=directory)
    deadline = time.monotonic() + START_BOUND_S
    while (port := serving_port(log) if socket is None else (0 if b"serving on unix:" in log.read_bytes() else None)) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(f"the TLS sidecar did not start serving (exit {proc.returncode}):\n{log.read_text(errors='replace')}")
        time.sleep(0.01)
    return TlsSidecar(proc, port, token, token_file, log)
