"""The plain-http transport (`http://` model servers) against real loopback servers: it keeps a
connection alive across answers, never reuses one whose answer was cut, cancelled or left unread,
and maps timeouts and failures to httpx's errors (a refused connection recognisably so)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from osprey.providers.addresses import refused
from osprey.providers.base import http_client
from osprey.providers.plain_http import PlainHTTPTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """A loopback TCP server running `handler` for each connection, counting connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[tuple[Server, str]]:
    server = Server(handler)
    listener = await asyncio.start_server(server._serve, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        listener.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return await reader.readexactly(length) if length else b""


async def answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request on the connection with its body, kept alive."""
    while True:
        body = await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()


def client(timeout: float = 5.0) -> httpx.AsyncClient:
    return http_client(httpx.Timeout(timeout), "http://127.0.0.1")


async def test_answers_share_one_kept_alive_connection() -> None:
    async with serving(answering) as (server, url), client() as http:
        assert isinstance(http._transport, PlainHTTPTransport)
        for n in range(3):
            response = await http.post(url + "/v1/echo?x=1", content=f"hello {n}".encode())
            assert response.status_code == 200 and response.text == f"hello {n}"
            assert response.http_version == "HTTP/1.1" and response.headers["content-type"] == "text/plain"
        async with http.stream("POST", url, content=b"streamed") as response:
            assert [chunk async for chunk in response.aiter_bytes()] == [b"streamed"]
        assert server.connections == 1


async def test_an_answer_left_unread_or_cancelled_costs_its_connection() -> None:
    release = asyncio.Event()

    async def slow_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcde")
            await writer.drain()
            await release.wait()
            writer.write(b"fghij")
            await writer.drain()

    async with serving(slow_body) as (server, url), client() as http:
        async with http.stream("POST", url, content=b"x") as response:
            assert response.status_code == 200  # body left unread: the connection is closed, not reused
        reading = asyncio.ensure_future(http.post(url, content=b"y"))
        await asyncio.sleep(0.2)
        reading.cancel()  # cancelled in the middle of the body
        with pytest.raises(asyncio.CancelledError):
            await reading
        release.set()
        response = await http.post(url, content=b"z")
        assert response.content == b"abcdefghij"
        assert server.connections == 3


async def test_a_connection_the_server_closed_while_idle_is_not_used_again() -> None:
    async def one_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()  # then the connection closes

    async with serving(one_answer) as (server, url), client() as http:
        assert (await http.post(url, content=b"a")).text == "ok"
        await asyncio.sleep(0.1)
        assert (await http.post(url, content=b"b")).text == "ok"
        assert server.connections == 2


async def test_a_server_that_does_not_answer_times_out_and_one_that_hangs_up_is_a_protocol_error() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    async with serving(silent) as (_, url), client(timeout=0.3) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post(url, content=b"a")

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
        await writer.drain()

    async with serving(cut) as (_, url), client() as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post(url, content=b"a")


async def test_a_refused_connection_is_a_connect_error_that_says_so_and_tls_is_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens on it once closed
    async with client() as http:
        with pytest.raises(httpx.ConnectError) as caught:
            await http.post(f"http://127.0.0.1:{port}/v1", content=b"a")
        assert refused(caught.value)
        with pytest.raises(httpx.UnsupportedProtocol):
            await http.get(f"https://127.0.0.1:{port}/")
