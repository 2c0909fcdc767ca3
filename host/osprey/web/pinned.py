"""An httpx transport whose every connection goes to one address the guard checked. The URL keeps
its host name, so the Host header, TLS SNI and certificate verification are all for the name; only
the TCP connect is redirected to the pinned address. DNS is never consulted again."""

from __future__ import annotations

import ipaddress
import ssl
import typing
from collections.abc import AsyncIterator, Iterable

import httpcore
import httpx

from .guard import Destination


def _same_host(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return ipaddress.ip_address(a.strip("[]")) == ipaddress.ip_address(b.strip("[]"))
    except ValueError:
        return False


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to the pinned address whatever name httpcore asks for, and refuses any other
    host or port (a connection to anything but the checked destination is a bug, never a fallback)."""

    def __init__(self, host: str, port: int, address: str, inner: httpcore.AsyncNetworkBackend) -> None:
        self._host = host
        self._port = port
        self._address = address
        self._inner = inner

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> httpcore.AsyncNetworkStream:
        if not _same_host(host, self._host) or port != self._port:
            raise httpcore.ConnectError(f"refusing to connect to {host}:{port}: this connection is pinned to {self._host}:{self._port}")
        return await self._inner.connect_tcp(self._address, port, timeout=timeout, local_address=local_address, socket_options=socket_options)

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("a pinned connection never uses a unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


# httpcore's exceptions as httpx's, most specific first.
_EXCEPTIONS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


def _mapped(exc: Exception) -> Exception:
    for source, target in _EXCEPTIONS:
        if isinstance(exc, source):
            return target(str(exc))
    return exc


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: typing.AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._stream:
                yield part
        except httpcore.TimeoutException as exc:
            raise _mapped(exc) from exc
        except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise _mapped(exc) from exc

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


class PinnedTransport(httpx.AsyncBaseTransport):
    """One destination's transport: HTTP/1.1, no proxy, connections to `destination.address` only."""

    def __init__(self, destination: Destination, *, ssl_context: ssl.SSLContext | None, network_backend: httpcore.AsyncNetworkBackend | None = None) -> None:
        checked = destination.url
        self._host = checked.host
        self._port = checked.port
        backend = PinnedBackend(checked.host, checked.port, destination.address, network_backend or httpcore.AnyIOBackend())
        self._pool = httpcore.AsyncConnectionPool(ssl_context=ssl_context, max_connections=1, http1=True, http2=False, retries=0, network_backend=backend)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        if not _same_host(url.host, self._host) or port != self._port:
            raise httpx.ConnectError(f"this transport is pinned to {self._host}:{self._port}, not {url.host}:{port}", request=request)
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core_request)
        except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
            raise _mapped(exc) from exc
        assert isinstance(response.stream, typing.AsyncIterable)
        return httpx.Response(status_code=response.status, headers=response.headers, stream=_ResponseStream(response.stream), extensions=response.extensions)

    async def aclose(self) -> None:
        await self._pool.aclose()
