"""A lane's own certificates (`lane_tls`): the real sidecar serves mutual TLS with them, the
broker's target reaches it, and nothing else does: not a client without the broker's
certificate, not one that trusts another lane's CA, not one without the token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tls_sidecar import Pki, TlsSidecar, start_tls_sidecar

from osprey.errors import DispatcherError
from osprey.toolservice.client import ToolClient
from osprey.toolservice.lane_tls import SERVER_NAME_SUFFIX, LanePki, make_lane_pki
from osprey.toolservice.targets import TlsTarget


def as_files(pki: LanePki, directory: Path) -> Pki:
    """The lane's side of `pki` written out as the sidecar's flags take it."""
    directory.mkdir(parents=True)
    (directory / "ca.pem").write_bytes(pki.ca_pem)
    (directory / "server.pem").write_bytes(pki.server_cert_pem)
    (directory / "server.key").write_bytes(pki.server_key_pem)
    return Pki(None, pki.ca_pem, directory / "ca.pem", directory / "server.pem", directory / "server.key",
               pki.client_cert_pem, pki.client_key_pem)


@pytest.fixture
def lane_pki() -> LanePki:
    return make_lane_pki("osprey-lane-test1")


@pytest.fixture
def lane(workspace: Path, lane_pki: LanePki, tmp_path: Path) -> Iterator[TlsSidecar]:
    (workspace / "a.txt").write_text("alpha\n")
    with start_tls_sidecar([str(workspace)], as_files(lane_pki, tmp_path / "pki"), tmp_path / "lane", client_ca=True) as served:
        yield served


async def test_the_broker_reaches_its_lane_with_the_lanes_own_certificates(lane_pki: LanePki, lane: TlsSidecar) -> None:
    target = lane_pki.target("127.0.0.1", lane.port)
    assert target.server_name == "osprey-lane-test1" + SERVER_NAME_SUFFIX and target.mutual
    client = ToolClient.for_target(target, token=lane.token)
    try:
        await client.wait_ready(10)
        assert (await client.read_file("a.txt")).content.endswith("alpha")
    finally:
        await client.close()


@pytest.mark.parametrize("case", ["no client certificate", "another lane's CA", "another lane's client certificate", "no token"])
async def test_nothing_else_reaches_the_lane(case: str, lane_pki: LanePki, lane: TlsSidecar) -> None:
    other = make_lane_pki("osprey-lane-test2")
    target = lane_pki.target("127.0.0.1", lane.port)
    token: str | None = lane.token
    if case == "no client certificate":
        target = TlsTarget(host="127.0.0.1", port=lane.port, ca_pem=lane_pki.ca_pem, server_name=lane_pki.server_name)
    elif case == "another lane's CA":
        target = target.model_copy(update={"ca_pem": other.ca_pem})
    elif case == "another lane's client certificate":
        target = other.target("127.0.0.1", lane.port).model_copy(update={"ca_pem": lane_pki.ca_pem, "server_name": lane_pki.server_name})
    else:
        token = None
    client = ToolClient.for_target(target, token=token)
    try:
        with pytest.raises(DispatcherError):
            await client.read_file("a.txt")
        assert not (await client.healthy(timeout=5))
    finally:
        await client.close()


def test_each_lane_gets_its_own_ca_and_a_name_not_an_address() -> None:
    first, second = make_lane_pki("osprey-lane-a"), make_lane_pki("osprey-lane-a")
    assert first.ca_pem != second.ca_pem and first.server_key_pem != second.server_key_pem
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(first.server_cert_pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert names == ["osprey-lane-a" + SERVER_NAME_SUFFIX]
    for bad in ("", "a b", "x" * 64, "../etc", "lane.name"):
        with pytest.raises(ValueError, match="is not a lane name"):
            make_lane_pki(bad)
