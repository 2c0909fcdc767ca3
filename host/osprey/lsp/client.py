"""One language server: JSON-RPC 2.0 over its stdin and stdout (Content-Length framing), and its
lifecycle (initialize, requests under a deadline, the notifications it sends, shutdown).

The server is any `Transport`: in a session, a `ProgramHandle` of the ToolService (the server runs
where the tools run); its stderr is kept as a bounded tail for error messages. A server that exits
or does not answer in time ends the request with an `LspServerError` naming it and its last stderr
lines, and is marked dead so the registry starts it again at the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import OspreyError, ToolError
from ..toolservice.program import ProgramOutput

MAX_HEADER_BYTES = 8 * 1024
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a workspace/symbol answer of a big project stays well below
STDERR_TAIL_BYTES = 4 * 1024
SHUTDOWN_TIMEOUT_S = 3.0
MAX_DIAGNOSTIC_URIS = 2_000


class Transport(Protocol):
    """A running program's stdin and output (what `ToolClient.program` returns)."""

    pid: int

    async def send(self, data: bytes) -> None: ...
    async def close_stdin(self) -> None: ...
    def __aiter__(self) -> AsyncIterator[ProgramOutput]: ...
    async def aclose(self) -> None: ...


class LspServerError(ToolError):
    """A language server failed: it exited, did not answer in time, or spoke no JSON-RPC."""

    def __init__(self, message: str) -> None:
        super().__init__("lsp_error", message)


class LspResponseError(ToolError):
    """The server answered a request with an error (the server itself still runs)."""

    def __init__(self, message: str) -> None:
        super().__init__("lsp_error", message)


class _Framing(Exception):
    pass


class _Frames:
    """Splits a byte stream into JSON-RPC messages by their Content-Length headers."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.length: int | None = None

    def feed(self, data: bytes) -> list[bytes]:
        self.buffer += data
        out: list[bytes] = []
        while True:
            if self.length is None:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.buffer) > MAX_HEADER_BYTES:
                        raise _Framing(f"a message header longer than {MAX_HEADER_BYTES} bytes")
                    return out
                length = None
                for line in bytes(self.buffer[:end]).split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        try:
                            length = int(value.strip())
                        except ValueError:
                            raise _Framing(f"a Content-Length that is not a number: {value[:40]!r}") from None
                if length is None or length < 0:
                    raise _Framing(f"a message header without Content-Length: {bytes(self.buffer[:min(end, 80)])!r}")
                if length > MAX_MESSAGE_BYTES:
                    raise _Framing(f"a message of {length} bytes (at most {MAX_MESSAGE_BYTES} are read)")
                del self.buffer[: end + 4]
                self.length = length
            if len(self.buffer) < self.length:
                return out
            out.append(bytes(self.buffer[: self.length]))
            del self.buffer[: self.length]
            self.length = None


def frame(message: Mapping[str, Any]) -> bytes:
    """`message` as one framed JSON-RPC message."""
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body


@dataclass
class Published:
    """The diagnostics a server last published for one document."""

    diagnostics: list[Any]
    version: int | None
    serial: int  # counts publications over all documents, so "newer than" is well defined


@dataclass
class LspClient:
    """A started language server named `name` on `transport`."""

    name: str
    transport: Transport
    request_timeout: float = 30.0
    # Answers to the server's workspace/configuration requests (a section name → its value).
    settings: Mapping[str, Any] = field(default_factory=dict)
    workspace_folders: list[dict[str, str]] = field(default_factory=list)
    capabilities: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, Published] = field(default_factory=dict)
    _stderr: deque[bytes] = field(default_factory=deque)
    _stderr_bytes: int = 0
    _pending: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    _next_id: int = 0
    _serial: int = 0
    _reader: asyncio.Task[None] | None = None
    _published: asyncio.Event = field(default_factory=asyncio.Event)
    _dead: str | None = None  # why the server cannot be used any more
    _writing: asyncio.Lock = field(default_factory=asyncio.Lock)
    _answering: set[asyncio.Task[None]] = field(default_factory=set)
    on_notification: Callable[[str, Any], None] | None = None

    def start(self) -> None:
        """Begin reading the server's output."""
        self._reader = asyncio.create_task(self._read(), name=f"lsp {self.name}")

    @property
    def alive(self) -> bool:
        return self._dead is None

    @property
    def dead_reason(self) -> str | None:
        return self._dead

    def stderr_tail(self, lines: int = 12) -> str:
        text = b"".join(self._stderr).decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    def _with_stderr(self, message: str) -> str:
        tail = self.stderr_tail()
        return f"{message}; its last stderr lines:\n{tail}" if tail.strip() else f"{message} (it wrote nothing to stderr)"

    def _keep_stderr(self, data: bytes) -> None:
        self._stderr.append(data)
        self._stderr_bytes += len(data)
        while self._stderr_bytes > STDERR_TAIL_BYTES and len(self._stderr) > 1:
            self._stderr_bytes -= len(self._stderr.popleft())
        if self._stderr_bytes > STDERR_TAIL_BYTES:
            only = self._stderr[0][-STDERR_TAIL_BYTES:]
            self._stderr[0], self._stderr_bytes = only, len(only)

    def _fail(self, reason: str) -> None:
        """The server cannot be used any more: every waiting request ends with `reason`."""
        if self._dead is None:
            self._dead = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(LspServerError(self._with_stderr(self._dead)))
        self._pending.clear()
        self._published.set()

    async def _read(self) -> None:
        frames = _Frames()
        try:
            async for out in self.transport:
                if out.kind == "stderr":
                    self._keep_stderr(out.data)
                elif out.kind == "stdout":
                    for body in frames.feed(out.data):
                        await self._dispatch(body)
                elif out.kind == "exit":
                    how = f"exited with code {out.exit_code}" if out.exit_code is not None else f"was killed by signal {out.signal}"
                    self._fail(f"the language server {self.name!r} {how}")
                    return
            self._fail(f"the language server {self.name!r} ended (its stream closed)")
        except _Framing as exc:
            self._fail(f"the language server {self.name!r} wrote something that is not JSON-RPC ({exc})")
        except OspreyError as exc:
            self._fail(f"the language server {self.name!r} could not be read: {exc}")
        except Exception as exc:  # noqa: BLE001 - a reader's bug must still end the waiting requests
            self._fail(f"reading the language server {self.name!r} failed: {type(exc).__name__}: {exc}")

    async def _dispatch(self, body: bytes) -> None:
        try:
            message = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise _Framing(f"a message that is not JSON: {body[:80]!r}") from None
        if not isinstance(message, dict):
            raise _Framing(f"a message that is not a JSON object: {body[:80]!r}")
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                # Answered beside the reading, so a server that writes before it reads never waits on us.
                task = asyncio.create_task(self._answer(message["id"], method, message.get("params")))
                self._answering.add(task)
                task.add_done_callback(self._answered)
            else:
                self._notified(method, message.get("params"))
            return
        id_ = message.get("id")
        future = self._pending.pop(id_, None) if isinstance(id_, int) else None
        if future is None or future.done():
            return  # an answer to a request that timed out or was cancelled
        error = message.get("error")
        if isinstance(error, dict):
            future.set_exception(LspResponseError(f"the language server {self.name!r} answered with an error: "
                                                  f"{str(error.get('message', ''))[:500]} (code {error.get('code')})"))
        else:
            future.set_result(message.get("result"))

    def _notified(self, method: str, params: Any) -> None:
        if method == "textDocument/publishDiagnostics" and isinstance(params, dict) and isinstance(params.get("uri"), str):
            self._serial += 1
            if len(self.diagnostics) >= MAX_DIAGNOSTIC_URIS and params["uri"] not in self.diagnostics:
                self.diagnostics.pop(next(iter(self.diagnostics)))
            found = params.get("diagnostics")
            version = params.get("version")
            self.diagnostics[params["uri"]] = Published(found if isinstance(found, list) else [], version if isinstance(version, int) else None, self._serial)
            self._published.set()
        if self.on_notification is not None:
            self.on_notification(method, params)

    def _answered(self, task: asyncio.Task[None]) -> None:
        self._answering.discard(task)
        if not task.cancelled():
            task.exception()  # written or not, nothing more to do: a failed write marked the server dead

    async def _answer(self, id_: Any, method: str, params: Any) -> None:
        """Answer the requests a server makes of its client."""
        if method == "workspace/configuration":
            items = params.get("items", []) if isinstance(params, dict) else []
            result: Any = [self._section(item.get("section") if isinstance(item, dict) else None) for item in items]
        elif method == "workspace/workspaceFolders":
            result = self.workspace_folders
        elif method in ("client/registerCapability", "client/unregisterCapability", "window/workDoneProgress/create",
                        "workspace/diagnostic/refresh", "workspace/semanticTokens/refresh", "workspace/inlayHint/refresh",
                        "workspace/codeLens/refresh", "window/showMessageRequest"):
            result = None
        else:
            await self._write({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": f"{method} is not supported by this client"}})
            return
        await self._write({"jsonrpc": "2.0", "id": id_, "result": result})

    def _section(self, section: Any) -> Any:
        if not isinstance(section, str) or not section:
            return dict(self.settings)
        value: Any = self.settings
        for part in section.split("."):
            if not isinstance(value, Mapping) or part not in value:
                return None
            value = value[part]
        return value

    async def _write(self, message: Mapping[str, Any]) -> None:
        data = frame(message)
        async with self._writing:
            try:
                await self.transport.send(data)
            except OspreyError as exc:
                self._fail(f"the language server {self.name!r} could not be written to ({exc})")
                raise LspServerError(self._with_stderr(self._dead or "")) from None

    def _check_alive(self) -> None:
        if self._dead is not None:
            raise LspServerError(self._with_stderr(self._dead))

    async def notify(self, method: str, params: Any) -> None:
        self._check_alive()
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: Any, timeout: float | None = None) -> Any:
        """The result of `method`; a server that does not answer within `timeout` (default: the
        request timeout) is marked dead (it hangs) and the request ends with an LspServerError."""
        self._check_alive()
        self._next_id += 1
        id_ = self._next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[id_] = future
        limit = self.request_timeout if timeout is None else timeout
        try:
            await self._write({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})
            return await asyncio.wait_for(asyncio.shield(future), limit)
        except TimeoutError:
            self._fail(f"the language server {self.name!r} did not answer {method} within {limit:g} s (it hangs; "
                       "it is started again at the next call)")
            raise LspServerError(self._with_stderr(self._dead or "")) from None
        except asyncio.CancelledError:
            if self._pending.pop(id_, None) is not None and self._dead is None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._write({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id_}}))
            raise
        finally:
            self._pending.pop(id_, None)

    async def wait_diagnostics(self, uri: str, after: int, timeout: float) -> Published | None:
        """The diagnostics of `uri` published after the publication serial `after`, waiting at
        most `timeout`; then a short settle for a newer set (servers may publish twice)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = self.diagnostics.get(uri)
            if found is not None and found.serial > after:
                break
            self._check_alive()
            left = deadline - loop.time()
            if left <= 0:
                return None
            self._published.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._published.wait(), left)
        settle = min(0.3, max(0.0, deadline - loop.time()))
        if settle:
            await asyncio.sleep(settle)
        return self.diagnostics.get(uri)

    @property
    def serial(self) -> int:
        return self._serial

    async def close(self) -> None:
        """shutdown and exit (bounded), then end the program; idempotent."""
        try:
            if self._dead is None:
                with contextlib.suppress(OspreyError, TimeoutError):
                    await self.request("shutdown", None, timeout=SHUTDOWN_TIMEOUT_S)
                    await self.notify("exit", None)
                    if self._reader is not None:
                        await asyncio.wait_for(asyncio.shield(self._reader), SHUTDOWN_TIMEOUT_S)
        finally:
            if self._dead is None:
                self._dead = f"the language server {self.name!r} was shut down"
            if self._reader is not None and not self._reader.done():
                self._reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._reader
            await self.transport.aclose()
