"""HTTP/1.1 over plain TCP for `http://` model servers (a local server, a test's): asyncio streams
and h11, kept-alive connections, httpx's timeouts and errors. It refuses TLS, so it never loads
the CA bundle, and it needs none of httpcore's machinery (httpcore brings anyio and its asyncio
backend, and h2, tens of ms at every start, for a client that speaks HTTP/1.1 to one server)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx

READ_SIZE = 64 * 1024
# An idle connection older than this is closed rather than used again (httpx's default expiry).
KEEPALIVE_EXPIRY_S = 5.0
# Bound on a response's status line and headers (h11's default is 16 KiB).
MAX_HEAD_BYTES = 64 * 1024


class _Connection:
    """One TCP connection to the server and its HTTP/1.1 state."""

    def __init__(self, origin: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.origin = origin
        self.reader, self.writer = reader, writer
        self.state = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.idle_since = 0.0
        self.closed = False

    def reusable(self) -> bool:
        """Idle, not expired, and not closed by the server meanwhile."""
        return (not self.closed and self.state.our_state is h11.IDLE and self.state.their_state is h11.IDLE
                and not self.reader.at_eof() and not self.writer.is_closing()
                and time.monotonic() - self.idle_since < KEEPALIVE_EXPIRY_S)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()

    async def send(self, request: httpx.Request, timeout: float | None) -> None:
        state = self.state
        await self._write(state.send(h11.Request(method=request.method, target=request.url.raw_path, headers=request.headers.raw)),
                          request, timeout)
        async for chunk in request.stream:  # type: ignore[union-attr]
            if chunk:
                await self._write(state.send(h11.Data(data=chunk)), request, timeout)
        await self._write(state.send(h11.EndOfMessage()), request, timeout)

    async def _write(self, data: bytes | None, request: httpx.Request, timeout: float | None) -> None:
        if not data:
            return
        try:
            self.writer.write(data)
            async with asyncio.timeout(timeout):
                await self.writer.drain()
        except TimeoutError:
            raise httpx.WriteTimeout("timed out sending the request", request=request) from None
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__, request=request) from exc

    async def next_event(self, request: httpx.Request, timeout: float | None) -> Any:
        """The next event of the response (reading as needed), as h11 parses it."""
        state = self.state
        while True:
            try:
                event = state.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc), request=request) from exc
            if event is not h11.NEED_DATA:
                if isinstance(event, h11.ConnectionClosed):
                    raise httpx.RemoteProtocolError("the server closed the connection before the response ended", request=request)
                return event
            try:
                async with asyncio.timeout(timeout):
                    data = await self.reader.read(READ_SIZE)
            except TimeoutError:
                raise httpx.ReadTimeout("timed out reading the response", request=request) from None
            except OSError as exc:
                raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
            state.receive_data(data)  # b"": the server closed its side


class _Body(httpx.AsyncByteStream):
    """A response's body, read from its connection as the caller iterates; the connection goes back
    to the transport once the body has ended, and is closed if the body is left unfinished."""

    def __init__(self, transport: PlainHTTPTransport, connection: _Connection, request: httpx.Request, timeout: float | None) -> None:
        self.transport, self.connection, self.request, self.timeout = transport, connection, request, timeout
        self.done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self.connection
        if self.done or connection.closed:
            return
        try:
            while True:
                event = await connection.next_event(self.request, self.timeout)
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    break
        except BaseException:
            connection.close()  # cancelled or broken in the middle: its state is unknown
            raise
        self.done = True
        self.transport._release(connection)

    async def aclose(self) -> None:
        if not self.done:
            self.done = True
            self.connection.close()
            self.transport._forget(self.connection)


class PlainHTTPTransport(httpx.AsyncBaseTransport):
    """A transport for `http://` only (HTTP/1.1, kept-alive connections, no TLS at all)."""

    def __init__(self) -> None:
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"this client speaks plain http only, not {request.url.scheme}")
        timeouts = request.extensions.get("timeout", {})
        origin = (request.url.host, request.url.port or 80)
        connection = self._take(origin) or await self._connect(origin, request, timeouts.get("connect"))
        try:
            await connection.send(request, timeouts.get("write"))
            while True:
                head = await connection.next_event(request, timeouts.get("read"))
                if isinstance(head, h11.Response):
                    break  # (an informational 1xx answer comes before it)
        except BaseException:
            connection.close()
            self._forget(connection)
            raise
        return httpx.Response(
            head.status_code, headers=head.headers.raw_items(),
            stream=_Body(self, connection, request, timeouts.get("read")),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": head.reason},
        )

    def _take(self, origin: tuple[str, int]) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.origin == origin and connection.reusable():
                return connection
            connection.close()
            self._forget(connection)
        return None

    async def _connect(self, origin: tuple[str, int], request: httpx.Request, timeout: float | None) -> _Connection:
        host, port = origin
        errors: list[OSError] = []
        try:
            async with asyncio.timeout(timeout):
                try:
                    addresses = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
                except OSError as exc:
                    raise httpx.ConnectError(f"{host}: {exc}", request=request) from exc
                for family, _, _, _, address in addresses:
                    try:
                        reader, writer = await asyncio.open_connection(str(address[0]), int(address[1]), family=family)
                    except OSError as exc:
                        errors.append(exc)
                        continue
                    connection = _Connection(origin, reader, writer)
                    self._open.add(connection)
                    return connection
        except TimeoutError:
            raise httpx.ConnectTimeout(f"timed out connecting to {host}:{port}", request=request) from None
        # Every error stays in the chain: a refused connection is told apart from others by it.
        raise httpx.ConnectError(f"could not connect to {host}:{port}: {'; '.join(str(e) for e in errors) or 'no address'}",
                                 request=request) from ExceptionGroup("connection attempts", errors) if errors else None

    def _release(self, connection: _Connection) -> None:
        state = connection.state
        if not connection.closed and state.our_state is h11.DONE and state.their_state is h11.DONE:
            state.start_next_cycle()
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            connection.close()
            self._forget(connection)

    def _forget(self, connection: _Connection) -> None:
        self._open.discard(connection)

    async def aclose(self) -> None:
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()
