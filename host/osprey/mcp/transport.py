"""The SDK transport of a stdio MCP server run through the ToolService's Program stream.

A stdio server is a program where the tools run (the local dispatcher, or the lane under
`--sandbox`), so it gets their isolation: this module frames its stdin and stdout as MCP's stdio
transport does (one JSON-RPC message a line) and hands the SDK a pair of memory streams. It
imports the SDK at its top: `connection.py` imports it only after loading the SDK off the event
loop's thread. It also bounds the bodies of an HTTP server's answers as stdio lines are bounded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager

import anyio
import httpx2
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from ..errors import OspreyError
from ..toolservice.client import ToolClient
from ..toolservice.program import ProgramHandle

MAX_LINE_BYTES = 16 << 20
STDERR_LINES = 40
STDERR_BYTES = 8 << 10


class StderrTail:
    """The last lines a program wrote to stderr: at most `STDERR_LINES` lines and `STDERR_BYTES`."""

    def __init__(self) -> None:
        self._lines: deque[str] = deque(maxlen=STDERR_LINES)
        self._partial = bytearray()

    def feed(self, data: bytes) -> None:
        self._partial += data
        *lines, rest = bytes(self._partial).split(b"\n")
        for line in lines[-STDERR_LINES:]:
            self._lines.append(line[-STDERR_BYTES:].decode("utf-8", "replace").rstrip("\r"))
        self._partial = bytearray(rest[-STDERR_BYTES:])

    def text(self) -> str:
        lines = [*self._lines, *([self._partial.decode("utf-8", "replace")] if self._partial.strip() else [])]
        out: list[str] = []
        size = 0
        for line in reversed(lines):
            size += len(line) + 1
            if size > STDERR_BYTES:
                break
            out.append(line)
        return "\n".join(reversed(out)).strip()


class ProgramTransport:
    """One connection to a stdio server: `async with` starts the program and yields the SDK's
    (read stream, write stream); leaving it ends the program (its group is killed). `on_started`
    is called once the program runs (its start may first wait for the ToolService's home).

    `ended` is why the connection ended (the program exited, its stream closed, a line was too
    long), or None while it lives; `on_end` is called once with that reason. `stderr` keeps the
    program's last stderr lines for error messages."""

    def __init__(self, client: ToolClient, argv: Sequence[str], *, workdir: str, env: Mapping[str, str],
                 on_end: Callable[[str], None] = lambda reason: None, on_started: Callable[[], None] = lambda: None) -> None:
        self._client = client
        self._argv = list(argv)
        self._workdir = workdir
        self._env = dict(env)
        self._on_end = on_end
        self._on_started = on_started
        self.ended: str | None = None
        self.stderr = StderrTail()
        self.pid: int | None = None
        self._handle: ProgramHandle | None = None

    def _end(self, reason: str) -> None:
        if self.ended is None:
            self.ended = reason
            self._on_end(reason)

    async def __aenter__(self) -> tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]:
        self._cm = self._connect()
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: object) -> bool | None:
        return await self._cm.__aexit__(*exc)  # type: ignore[arg-type]

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]]:
        try:
            handle = await self._client.program(self._argv, workdir=self._workdir, env=self._env)
        except OspreyError as exc:
            self._end(str(exc))
            raise
        self._handle = handle
        self.pid = handle.pid
        self._on_started()
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

        async def reader() -> None:
            pending = bytearray()
            async with read_writer:
                try:
                    async for item in handle:
                        if item.kind == "stderr":
                            self.stderr.feed(item.data)
                        elif item.kind == "stdout":
                            pending += item.data
                            while (cut := pending.find(b"\n")) >= 0:
                                line = bytes(pending[:cut])
                                del pending[: cut + 1]
                                if line.strip():
                                    await read_writer.send(_parse(line))
                            if len(pending) > MAX_LINE_BYTES:
                                self._end(f"it wrote a line longer than {MAX_LINE_BYTES >> 20} MiB (one message a line is the most Osprey reads); "
                                          "the connection was ended")
                                return
                        else:
                            how = f"exited with code {item.exit_code}" if item.exit_code is not None else f"was ended by signal {item.signal}"
                            self._end(f"its program {how}")
                            return
                    self._end("its program's stream was closed")
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    self._end("the connection was closed")
                except OspreyError as exc:
                    self._end(f"its program's stream failed: {exc}")

        async def writer() -> None:
            async with write_reader:
                try:
                    async for message in write_reader:
                        data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await handle.send(data.encode() + b"\n")
                except OspreyError as exc:
                    self._end(f"writing to it failed: {exc}")
                    await read_writer.aclose()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                tg.start_soon(writer)
                try:
                    yield read_stream, write_stream
                finally:
                    tg.cancel_scope.cancel()
        finally:
            self.ended = self.ended or "the connection was closed"
            with anyio.CancelScope(shield=True):
                await handle.aclose()
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()


def _parse(line: bytes) -> SessionMessage | Exception:
    """One line of stdout as a message, or the error the SDK surfaces for a malformed one."""
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


# ------------------------------------------------------------------------------- HTTP bodies

MAX_BODY_BYTES = MAX_LINE_BYTES


class BodyTooLarge(httpx2.StreamError):
    """An HTTP server's answer was over `MAX_BODY_BYTES`, or compressed although it was asked not to be."""


class _BoundedStream(httpx2.AsyncByteStream):
    """A response body that raises `BodyTooLarge` once it passes `limit` bytes."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, encoding: str) -> None:
        self._inner = inner
        self._limit = limit
        self._encoding = encoding

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._encoding not in ("", "identity"):
            # The body is inflated after this stream: a compressed one could be far larger than it.
            raise BodyTooLarge(f"its answer was compressed ({self._encoding[:40]}) although Osprey asks for it uncompressed; "
                               "an HTTP MCP server must honour Accept-Encoding: identity")
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > self._limit:
                raise BodyTooLarge(f"its answer was longer than {self._limit >> 20} MiB (the most Osprey reads of one message)")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def bounded_bodies(limit: int = MAX_BODY_BYTES) -> Callable[[httpx2.Response], Awaitable[None]]:
    """An httpx2 response hook bounding every body but an event stream's (the SDK bounds each of
    its events) at `limit` bytes, for whichever transport the client routes a request through."""

    async def hook(response: httpx2.Response) -> None:
        if response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            return
        if not isinstance(response.stream, httpx2.AsyncByteStream):
            return
        encoding = response.headers.get("content-encoding", "").strip().lower()
        response.stream = _BoundedStream(response.stream, limit, encoding)

    return hook
