"""A ToolService reached over TCP with TLS: the real sidecar (`python -m osprey_sidecar --listen`)
on a loopback port, certificates made by trustme, calls through ToolClient and an attached home.

TLS must verify the service against the CA it was given (a wrong one is refused at once, with
an error that says what to do), check the certificate's name (or the name it is told to expect),
and, with mutual TLS, present the client's certificate; the token goes with every call.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretBytes, ValidationError
from tls_sidecar import LANE_NAME, Pki, TlsSidecar, make_pki, start_tls_sidecar

from osprey.errors import ConfigError, DispatcherError, SandboxError
from osprey.toolservice.client import Connection, ToolClient
from osprey.toolservice.home_config import AttachedHomeConfig
from osprey.toolservice.homes import AttachedLane, build_home
from osprey.toolservice.targets import TlsTarget, UnixTarget

# A refusal must come at once, not after the wait for a service that is still starting.
REFUSED_WITHIN_S = 5.0


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest.fixture
def sidecar(workspace: Path, pki: Pki, tmp_path: Path) -> Iterator[TlsSidecar]:
    (workspace / "a.txt").write_text("alpha\n")
    with start_tls_sidecar([str(workspace)], pki, tmp_path / "sidecar") as served:
        yield served


@pytest.fixture
def mutual_sidecar(workspace: Path, pki: Pki, tmp_path: Path) -> Iterator[TlsSidecar]:
    with start_tls_sidecar([str(workspace)], pki, tmp_path / "mutual", client_ca=True) as served:
        yield served


async def test_tool_calls_go_through_tls_with_the_token(workspace: Path, pki: Pki, sidecar: TlsSidecar) -> None:
    client = ToolClient.for_target(sidecar.target(pki), token=sidecar.token)
    try:
        await client.wait_ready(10)
        assert client.where == f"127.0.0.1:{sidecar.port}"
        assert (await client.read_file("a.txt")).content.endswith("alpha")
        written = await client.write_file("sub/b.txt", "beta\n")
        assert written.created and written.resolved_path == str(workspace / "sub" / "b.txt")
        assert (workspace / "sub" / "b.txt").read_text() == "beta\n"
        # A write large enough to stream in chunks.
        big = "x" * (600 * 1024)
        await client.write_file("big.txt", big)
        assert (workspace / "big.txt").read_text() == big
        chunks: list[bytes] = []
        result = await client.bash("cat sub/b.txt; echo err >&2; exit 3", on_output=chunks.append)
        assert result.exit_code == 3 and "beta" in result.output and "err" in result.output
        assert b"beta" in b"".join(chunks)
        assert (await client.exec(["cat", "a.txt"])).stdout.head == b"alpha\n"
        assert [m.path for m in (await client.grep("alpha")).matches] == ["a.txt"]
    finally:
        await client.close()


async def test_every_call_needs_the_token_over_tls(pki: Pki, sidecar: TlsSidecar) -> None:
    for token in (None, "not-the-token"):
        client = ToolClient.for_target(sidecar.target(pki), token=token)
        try:
            assert not await client.healthy(timeout=5)
            with pytest.raises(DispatcherError, match="token does not match"):
                await client.read_file("a.txt")
        finally:
            await client.close()


async def test_a_wrong_ca_is_refused_at_once_saying_what_to_do(pki: Pki, sidecar: TlsSidecar, tmp_path: Path) -> None:
    other = make_pki(tmp_path / "other")
    connection = Connection(sidecar.target(pki, ca_pem=other.ca_pem), token=sidecar.token)
    try:
        started = time.monotonic()
        with pytest.raises(DispatcherError) as ready:
            await connection.wait_ready(30)
        assert time.monotonic() - started < REFUSED_WITHIN_S
        message = str(ready.value)
        assert f"127.0.0.1:{sidecar.port}" in message
        assert "not signed by the CA" in message and "give Osprey the CA certificate that issued the service's certificate" in message, message
        # A call says the same, and it is not an "unreachable, maybe it stopped" error.
        with pytest.raises(DispatcherError) as call:
            await ToolClient(connection).read_file("a.txt")
        assert "not signed by the CA" in str(call.value) and "may have stopped" not in str(call.value)
    finally:
        await connection.close()


async def test_the_certificate_name_is_checked_unless_another_is_named(tmp_path: Path, workspace: Path) -> None:
    # A certificate for the lane's name only, reached by address.
    pki = make_pki(tmp_path / "named", names=(LANE_NAME,))
    served = start_tls_sidecar([str(workspace)], pki, tmp_path / "named-sidecar")
    try:
        plain = Connection(served.target(pki), token=served.token)
        try:
            with pytest.raises(DispatcherError, match="does not carry the name.*as the server name"):
                await plain.wait_ready(30)
        finally:
            await plain.close()
        named = ToolClient.for_target(served.target(pki, server_name=LANE_NAME), token=served.token)
        try:
            await named.wait_ready(10)
            assert (await named.list_directory()).entries == []
        finally:
            await named.close()
    finally:
        served.stop()


async def test_mutual_tls_needs_the_clients_certificate(pki: Pki, mutual_sidecar: TlsSidecar, tmp_path: Path, workspace: Path) -> None:
    (workspace / "m.txt").write_text("mutual\n")
    with_cert = ToolClient.for_target(mutual_sidecar.target(pki, mutual=True), token=mutual_sidecar.token)
    try:
        await with_cert.wait_ready(10)
        assert (await with_cert.read_file("m.txt")).content.endswith("mutual")
        assert (await with_cert.bash("echo over mutual tls")).output.strip() == "over mutual tls"
    finally:
        await with_cert.close()
    stranger = make_pki(tmp_path / "stranger")
    for target in (mutual_sidecar.target(pki), mutual_sidecar.target(pki, client_cert_pem=stranger.client_cert_pem, client_key_pem=SecretBytes(stranger.client_key_pem))):
        refused = ToolClient.for_target(target, token=mutual_sidecar.token)
        try:
            assert not await refused.healthy(timeout=5)
            with pytest.raises(DispatcherError):
                await refused.read_file("m.txt")
        finally:
            await refused.close()


async def test_attaching_without_the_client_certificate_mutual_tls_needs(workspace: Path, pki: Pki, mutual_sidecar: TlsSidecar) -> None:
    config = AttachedHomeConfig(roots=[str(workspace)], target=mutual_sidecar.target(pki), token_file=str(mutual_sidecar.token_file), ready_timeout=1)
    with pytest.raises(SandboxError, match="does it need a client certificate"):
        async with build_home(config):
            pass
    mutual = config.model_copy(update={"target": mutual_sidecar.target(pki, mutual=True)})
    async with build_home(mutual) as home:
        assert (await home.client.list_directory()).entries == []


async def test_an_attached_lane_over_tls_is_used_but_never_restarted(workspace: Path, pki: Pki, sidecar: TlsSidecar) -> None:
    config = AttachedHomeConfig(roots=[str(workspace)], target=sidecar.target(pki), token_file=str(sidecar.token_file), ready_timeout=10)
    home = build_home(config)
    assert isinstance(home, AttachedLane) and home.kind == "attached"
    async with home:
        client = home.client
        assert (await client.read_file("a.txt")).total_lines == 1
        assert await home.recover() is None
        sidecar.stop()
        with pytest.raises(DispatcherError) as info:
            await client.read_file("a.txt")
        assert "cannot restart a lane it did not start" in info.value.recovery
        assert f"127.0.0.1:{sidecar.port}" in info.value.recovery


async def test_attaching_over_tls_with_a_wrong_ca_says_what_to_do(workspace: Path, pki: Pki, sidecar: TlsSidecar, tmp_path: Path) -> None:
    other = make_pki(tmp_path / "other")
    config = AttachedHomeConfig(roots=[str(workspace)], target=sidecar.target(pki, ca_pem=other.ca_pem), token_file=str(sidecar.token_file), ready_timeout=30)
    started = time.monotonic()
    with pytest.raises(SandboxError, match="not signed by the CA.*give Osprey the CA certificate"):
        async with build_home(config):
            pass
    assert time.monotonic() - started < REFUSED_WITHIN_S


async def test_a_tls_target_is_checked_when_it_is_made(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="both a client certificate and its key"):
        TlsTarget(host="127.0.0.1", port=1, ca_pem=pki.ca_pem, client_cert_pem=pki.client_cert_pem)
    with pytest.raises(ValidationError, match="not PEM"):
        TlsTarget(host="127.0.0.1", port=1, ca_pem=b"not a certificate")
    with pytest.raises(ValidationError):
        TlsTarget(host="127.0.0.1", port=0, ca_pem=pki.ca_pem)
    with pytest.raises(ValidationError, match="not a host name"):
        TlsTarget(host="evil host/", port=1, ca_pem=pki.ca_pem)
    target = TlsTarget(host="::1", port=7443, ca_pem=pki.ca_pem, client_cert_pem=pki.client_cert_pem, client_key_pem=SecretBytes(pki.client_key_pem))
    assert target.where == "[::1]:7443" and target.mutual
    assert b"PRIVATE KEY" not in repr(target).encode()  # the key is never shown
    unix = Connection("/run/x.sock")  # a path is a unix socket's
    assert unix.target == UnixTarget(path="/run/x.sock") and unix.where == "/run/x.sock"
    await unix.close()


def test_a_tls_target_from_files_says_which_file_is_wrong(pki: Pki, tmp_path: Path) -> None:
    target = TlsTarget.from_files("127.0.0.1", 7443, ca_file=pki.ca_file)
    assert target.ca_pem == pki.ca_pem and not target.mutual
    with pytest.raises(ConfigError, match=r"CA file .*missing\.pem cannot be read.*check the path"):
        TlsTarget.from_files("127.0.0.1", 7443, ca_file=tmp_path / "missing.pem")
    junk = tmp_path / "junk.pem"
    junk.write_text("hello\n")
    with pytest.raises(ConfigError, match="not usable: the CA certificate is not PEM"):
        TlsTarget.from_files("127.0.0.1", 7443, ca_file=junk)
    with pytest.raises(ConfigError, match="both a client certificate and its key"):
        TlsTarget.from_files("127.0.0.1", 7443, ca_file=pki.ca_file, client_cert_file=pki.server_cert_file)


@pytest.mark.parametrize(("args", "message"), [
    ([], "--listen needs --tls-cert and --tls-key"),
    (["--tls-cert", "{cert}", "--tls-key", "{key}"], "--listen needs --token-file"),
    (["--tls-cert", "{ca}", "--tls-key", "{junk}", "--token-file", "{token}"], "is not a PEM file"),
], ids=["no-tls", "no-token", "not-pem"])
def test_the_sidecar_serves_tcp_only_with_tls_and_a_token(args: list[str], message: str, pki: Pki, workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "junk").write_text("junk\n")
    (tmp_path / "token").write_text("t0ken\n")
    files = {"cert": pki.server_cert_file, "key": pki.server_key_file, "ca": pki.ca_file, "junk": tmp_path / "junk", "token": tmp_path / "token"}
    argv = [sys.executable, "-I", "-m", "osprey_sidecar", "--listen", "127.0.0.1:0", "--root", str(workspace), *[a.format(**files) for a in args]]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result
    assert message in result.stderr, result.stderr


def test_the_sidecar_says_when_it_cannot_listen(pki: Pki, workspace: Path, sidecar: TlsSidecar, tmp_path: Path) -> None:
    argv = [sys.executable, "-I", "-m", "osprey_sidecar", "--listen", f"127.0.0.1:{sidecar.port}", "--root", str(workspace),
            "--tls-cert", str(pki.server_cert_file), "--tls-key", str(pki.server_key_file), "--token-file", str(sidecar.token_file)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 1 and f"cannot listen on 127.0.0.1:{sidecar.port}" in result.stderr, result
