"""ToolClient: the broker's one way to call the ToolService, wherever it is served.

This module and the servicer are the only places that import the generated
protobuf code; everything else sees the pydantic results below.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

# gRPC's C core logs connection teardown at INFO on stderr, which would mix into
# a user's terminal; keep its errors only unless the user asked for more.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from osprey_sidecar._proto import tools_pb2 as pb  # noqa: E402
from osprey_sidecar._proto import tools_pb2_grpc as pb_grpc  # noqa: E402

from .errors import DispatcherError, ToolError, ToolTimeout  # noqa: E402

TOKEN_KEY = "x-osprey-token"
CATEGORY_KEY = "osprey-error-category"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
SERVICE_NAME = "osprey.sandbox.v1.ToolService"
# Every call has a deadline, so a stuck home can never hang the session. A bash call's is its
# own timeout plus a grace for the service to report it; the others' is fixed.
CALL_DEADLINE_S = 90.0
BASH_DEFAULT_TIMEOUT_MS = 120_000
BASH_DEADLINE_GRACE_S = 15.0


class ReadFileResult(BaseModel):
    content: str
    start_line: int
    end_line: int
    total_lines: int
    more: bool
    long_lines_cut: int
    resolved_path: str


class WriteFileResult(BaseModel):
    resolved_path: str
    bytes_written: int
    created: bool


class EditFileResult(BaseModel):
    resolved_path: str
    replacements: int
    first_line: int


class BashResult(BaseModel):
    output: str
    exit_code: int
    signal: int
    timed_out: bool
    dropped_bytes: int
    duration_ms: int
    killed_background: bool


class FindFilesResult(BaseModel):
    paths: list[str]
    truncated: bool
    total: int


class GrepMatch(BaseModel):
    path: str
    line: int
    text: str


class GrepResult(BaseModel):
    matches: list[GrepMatch]
    truncated: bool
    total: int
    engine: str


class DirEntry(BaseModel):
    name: str
    kind: str
    size: int


class ListDirectoryResult(BaseModel):
    resolved_path: str
    entries: list[DirEntry]


class TreeResult(BaseModel):
    rendered: str
    directories: int
    files: int
    truncated: bool


_KIND_NAMES = {pb.DirEntry.FILE: "file", pb.DirEntry.DIRECTORY: "directory", pb.DirEntry.SYMLINK: "symlink", pb.DirEntry.OTHER: "other"}

T = TypeVar("T")


def dropped_marker(count: int) -> str:
    return f"\n[... {count} bytes of output dropped ...]\n"


def _map_rpc_error(exc: grpc.aio.AioRpcError, where: str, deadline_s: float | None = None) -> Exception:
    category = ""
    for key, value in exc.trailing_metadata() or ():
        if key == CATEGORY_KEY:
            category = value
    code = exc.code()
    if category and category not in ("internal", "unauthenticated"):
        return ToolError(category, exc.details() or category)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return DispatcherError(f"the ToolService at {where} refused the call: {exc.details()}; the lane token does not match")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and deadline_s is not None:
        return ToolTimeout(f"the ToolService did not answer within {deadline_s:g} s, so the call was cancelled")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return DispatcherError(f"the ToolService at {where} is unreachable ({code.name}: {exc.details()}); the sandbox lane or dispatcher may have stopped")
    if code == grpc.StatusCode.CANCELLED:
        # Our own cancellation surfaces as asyncio.CancelledError, never as a status.
        return DispatcherError(f"the ToolService at {where} cancelled the call (it may be shutting down)")
    return ToolError("internal", f"the ToolService failed ({code.name}): {exc.details()}")


class ToolClient:
    """Typed async calls to a ToolService over a gRPC channel."""

    def __init__(self, channel: grpc.aio.Channel, *, token: str | None = None, where: str = "?", call_deadline_s: float = CALL_DEADLINE_S) -> None:
        self.channel = channel
        self.call_deadline_s = call_deadline_s
        self.where = where
        self._stub = pb_grpc.ToolServiceStub(channel)
        self._health = health_pb2_grpc.HealthStub(channel)
        self.token = token
        self._metadata = ((TOKEN_KEY, token),) if token else None

    @classmethod
    def for_socket(cls, socket_path: str, *, token: str | None = None) -> "ToolClient":
        channel = grpc.aio.insecure_channel(
            f"unix:{socket_path}",
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        return cls(channel, token=token, where=socket_path)

    async def close(self) -> None:
        await self.channel.close()

    async def _unary(self, method: Callable[..., Any], request: Any) -> Any:
        try:
            return await method(request, metadata=self._metadata, timeout=self.call_deadline_s)
        except grpc.aio.AioRpcError as exc:
            raise _map_rpc_error(exc, self.where, self.call_deadline_s) from None
        except grpc.aio.UsageError as exc:
            raise DispatcherError(f"the connection to the ToolService at {self.where} is closed ({exc})") from None

    async def healthy(self, timeout: float = 1.0) -> bool:
        try:
            reply = await self._health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), metadata=self._metadata, timeout=timeout)
        except grpc.aio.AioRpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    async def wait_ready(self, deadline_s: float) -> None:
        """Poll gRPC health until SERVING, or raise DispatcherError at the deadline."""
        end = time.monotonic() + deadline_s
        delay = 0.005
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise DispatcherError(f"the ToolService at {self.where} did not become ready within {deadline_s:.1f} s")
            if await self.healthy(timeout=min(1.0, max(remaining, 0.05))):
                return
            await asyncio.sleep(min(delay, max(end - time.monotonic(), 0)))
            delay = min(delay * 2, 0.1)

    async def read_file(self, path: str, offset: int = 0, limit: int = 0) -> ReadFileResult:
        r = await self._unary(self._stub.ReadFile, pb.ReadFileRequest(path=path, offset=offset, limit=limit))
        return ReadFileResult(content=r.content, start_line=r.start_line, end_line=r.end_line, total_lines=r.total_lines, more=r.more, long_lines_cut=r.long_lines_cut, resolved_path=r.resolved_path)

    async def write_file(self, path: str, content: str) -> WriteFileResult:
        r = await self._unary(self._stub.WriteFile, pb.WriteFileRequest(path=path, content=content))
        return WriteFileResult(resolved_path=r.resolved_path, bytes_written=r.bytes_written, created=r.created)

    async def edit_file(self, path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditFileResult:
        r = await self._unary(self._stub.EditFile, pb.EditFileRequest(path=path, old_string=old_string, new_string=new_string, replace_all=replace_all))
        return EditFileResult(resolved_path=r.resolved_path, replacements=r.replacements, first_line=r.first_line)

    async def bash(self, command: str, *, timeout_ms: int = 0, workdir: str = "", max_output_bytes: int = 0, on_output: Callable[[bytes], None] | None = None) -> BashResult:
        """Run a command; output chunks reach `on_output` as they arrive. Cancelling kills it."""
        deadline_s = (timeout_ms or BASH_DEFAULT_TIMEOUT_MS) / 1000 + BASH_DEADLINE_GRACE_S
        try:
            call = self._stub.Bash(pb.BashRequest(command=command, timeout_ms=timeout_ms, workdir=workdir, max_output_bytes=max_output_bytes), metadata=self._metadata, timeout=deadline_s)
        except grpc.aio.UsageError as exc:
            raise DispatcherError(f"the connection to the ToolService at {self.where} is closed ({exc})") from None
        head = bytearray()
        finished = False
        try:
            async for event in call:
                if event.HasField("output"):
                    head += event.output.data
                    if on_output:
                        on_output(event.output.data)
                else:
                    finished = True
                    e = event.exit
                    out = bytes(head)
                    if e.dropped_bytes:
                        out += dropped_marker(e.dropped_bytes).encode()
                    out += e.tail
                    return BashResult(
                        output=out.decode("utf-8", "replace"), exit_code=e.exit_code, signal=e.signal,
                        timed_out=e.timed_out, dropped_bytes=e.dropped_bytes, duration_ms=e.duration_ms,
                        killed_background=e.killed_background,
                    )
        except grpc.aio.AioRpcError as exc:
            finished = True
            raise _map_rpc_error(exc, self.where, deadline_s) from None
        except grpc.aio.UsageError as exc:
            finished = True
            raise DispatcherError(f"the connection to the ToolService at {self.where} is closed ({exc})") from None
        finally:
            if not finished:
                call.cancel()  # cancelling the call kills the command's process group
        raise DispatcherError(f"the ToolService at {self.where} ended a bash call without an exit status")

    async def find_files(self, pattern: str, path: str = "", limit: int = 0) -> FindFilesResult:
        r = await self._unary(self._stub.FindFiles, pb.FindFilesRequest(pattern=pattern, path=path, limit=limit))
        return FindFilesResult(paths=list(r.paths), truncated=r.truncated, total=r.total)

    async def grep(self, pattern: str, path: str = "", glob: str = "", ignore_case: bool = False, max_matches: int = 0) -> GrepResult:
        r = await self._unary(self._stub.Grep, pb.GrepRequest(pattern=pattern, path=path, glob=glob, ignore_case=ignore_case, max_matches=max_matches))
        return GrepResult(matches=[GrepMatch(path=m.path, line=m.line, text=m.text) for m in r.matches], truncated=r.truncated, total=r.total, engine=r.engine)

    async def list_directory(self, path: str = "") -> ListDirectoryResult:
        r = await self._unary(self._stub.ListDirectory, pb.ListDirectoryRequest(path=path))
        return ListDirectoryResult(resolved_path=r.resolved_path, entries=[DirEntry(name=e.name, kind=_KIND_NAMES.get(e.kind, "other"), size=e.size) for e in r.entries])

    async def tree(self, path: str = "", max_depth: int = 0, max_entries: int = 0) -> TreeResult:
        r = await self._unary(self._stub.Tree, pb.TreeRequest(path=path, max_depth=max_depth, max_entries=max_entries))
        return TreeResult(rendered=r.rendered, directories=r.directories, files=r.files, truncated=r.truncated)
