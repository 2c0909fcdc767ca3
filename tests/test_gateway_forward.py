"""The lanes' gateway (`osprey_sidecar.forward`): it reads each connection's TLS server name and
passes the connection, ClientHello first, to the socket in the directory that name's first label
names. Here the "lane" is the real TLS sidecar on `SOCKETS/lane-1/tools.sock`, reached as
`lane-1.SUFFIX`."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tls_sidecar import Pki, TlsSidecar, make_pki, start_tls_sidecar

from osprey.errors import DispatcherError
from osprey.toolservice.client import ToolClient
from osprey_sidecar.forward import serve, server_name

SUFFIX = ".gw.osprey.invalid"
LANE = "lane-1"


def client_hello(name: str | None) -> bytes:
    """The first record a TLS client sends, with `name` as its server name (none when None)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_the_server_name_is_read_from_a_real_client_hello() -> None:
    assert server_name(client_hello("osprey-lane-abc.lane.osprey.invalid")) == "osprey-lane-abc.lane.osprey.invalid"
    assert server_name(client_hello(None)) is None
    hello = client_hello("x.example")
    for cut in (0, 5, 9, 44, hello.index(b"x.example") + 4):
        assert server_name(hello[:cut]) is None, cut
    assert server_name(b"GET / HTTP/1.1\r\n\r\n") is None
    assert server_name(b"\x16\x03\x01\xff\xff" + b"\x01" + b"\xff" * 200) is None


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki", names=(LANE + SUFFIX,))


@pytest.fixture
def sidecar(workspace: Path, pki: Pki, tmp_path: Path) -> Iterator[TlsSidecar]:
    (workspace / "a.txt").write_text("alpha\n")
    (tmp_path / "sockets" / LANE).mkdir(parents=True)
    with start_tls_sidecar([str(workspace)], pki, tmp_path / "sidecar", socket=tmp_path / "sockets" / LANE / "tools.sock") as served:
        yield served


@pytest.fixture
async def gateway(sidecar: TlsSidecar, tmp_path: Path) -> AsyncIterator[int]:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    ready = asyncio.Event()
    task = asyncio.ensure_future(serve(("127.0.0.1", port), SUFFIX, str(tmp_path / "sockets"), ready))
    await asyncio.wait_for(ready.wait(), 10)
    try:
        yield port
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_call_goes_through_the_gateway_by_its_server_name(pki: Pki, sidecar: TlsSidecar, gateway: int) -> None:
    client = ToolClient.for_target(sidecar.target(pki, port=gateway, server_name=LANE + SUFFIX), token=sidecar.token)
    try:
        await client.wait_ready(10)
        assert (await client.read_file("a.txt")).content.endswith("alpha")
    finally:
        await client.close()


async def test_the_sidecars_socket_is_open_to_the_gateways_user(sidecar: TlsSidecar, tmp_path: Path) -> None:
    """The gateway runs as another user than the lane: the socket is 0666, and TLS with the
    client's certificate and the token guard the calls."""
    assert (tmp_path / "sockets" / LANE / "tools.sock").stat().st_mode & 0o777 == 0o666


@pytest.mark.parametrize("name", ["elsewhere.example", "a.b" + SUFFIX, "UPPER" + SUFFIX, SUFFIX.lstrip("."), "lane-2" + SUFFIX])
async def test_a_name_that_names_no_lane_is_closed(name: str, pki: Pki, sidecar: TlsSidecar, gateway: int) -> None:
    client = ToolClient.for_target(sidecar.target(pki, port=gateway, server_name=name), token=sidecar.token)
    try:
        with pytest.raises(DispatcherError):
            await client.read_file("a.txt")
    finally:
        await client.close()


async def test_what_is_not_tls_is_closed_at_once(gateway: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
