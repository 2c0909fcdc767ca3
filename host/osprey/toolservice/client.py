"""ToolClient: the broker's one way to call the ToolService, wherever it is served.

A client talks through a `Connection` (one gRPC channel to one service, with its token), which
belongs to the home serving it (`homes.py`). A connection reaches its service at a target
(`targets.py`): a unix socket on this machine, or a TCP port with TLS for a lane elsewhere; the
token goes with every call either way. Recovery works like a transport's retry policy,
in one place: when a call finds the service unreachable (`DispatcherError`) or stuck (its
deadline passed: `ToolTimeout`), the client asks its home to `recover` once (a home may replace
itself and point the client at a new connection) and re-raises the same error with `recovery`
saying what happened. The call is never repeated on its own: the model decides what to do.

This module and `wire.py` are the host's only importers of the generated protobuf code;
callers see the pydantic results of `wire.py`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from osprey_sidecar import wire

from .. import lazy
from ..errors import DispatcherError, OspreyError, ToolError, ToolTimeout
from .program import SIGNALS, ProgramHandle, ProgramOutput
from .targets import ServiceTarget, TlsTarget, UnixTarget

# gRPC's C core logs connection teardown at INFO on stderr, which would mix into
# a user's terminal; keep its errors only unless the user asked for more.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

if TYPE_CHECKING:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from osprey_sidecar._proto import tools_pb2 as pb
    from osprey_sidecar._proto import tools_pb2_grpc as pb_grpc

    from . import wire as toolwire
    from .wire import (
        BashResult,
        EditFileResult,
        ExecResult,
        FindFilesResult,
        GrepResult,
        ListDirectoryResult,
        ReadFileResult,
        TreeResult,
        WriteFileResult,
    )
else:
    # gRPC, protobuf and the result models take tens of milliseconds to import, and a session
    # needs them only once its first tool call is made: they load when first used.
    grpc = lazy.module("grpc")
    health_pb2 = lazy.module("grpc_health.v1.health_pb2")
    health_pb2_grpc = lazy.module("grpc_health.v1.health_pb2_grpc")
    pb = lazy.module("osprey_sidecar._proto.tools_pb2")
    pb_grpc = lazy.module("osprey_sidecar._proto.tools_pb2_grpc")
    toolwire = lazy.module("osprey.toolservice.wire")

# The results are part of this module's API (`from osprey.toolservice.client import BashResult`).
_RESULTS = ("BashResult", "CapturedOutput", "DirEntry", "EditFileResult", "ExecResult", "FindFilesResult", "GrepMatch",
            "GrepResult", "ListDirectoryResult", "ReadFileResult", "TreeResult", "WriteFileResult", "dropped_marker")


def __getattr__(name: str) -> Any:
    if name in _RESULTS:
        return getattr(toolwire, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Every call has a deadline, so a stuck home can never hang the session. A bash or exec call's
# is its own timeout plus a grace for the service to report it; the others' is fixed.
CALL_DEADLINE_S = 90.0
BASH_DEFAULT_TIMEOUT_MS = wire.BASH_DEFAULT_TIMEOUT_MS
BASH_DEADLINE_GRACE_S = 15.0
# A program's stream is given its lifetime plus this, so its exit (after the kill) still arrives.
PROGRAM_DEADLINE_GRACE_S = wire.PROGRAM_KILL_GRACE_S + 5.0
REPLACED_MEANWHILE = "the ToolService had just been replaced after another call failed, so this call can be retried"

Recover = Callable[[], Awaitable["str | None"]]


# What gRPC's TLS says when a handshake fails: what it means, and what to do about it.
_TLS_REFUSALS = (
    ("CERTIFICATE_VERIFY_FAILED", "its certificate is not signed by the CA Osprey was given",
     "give Osprey the CA certificate that issued the service's certificate"),
    ("Hostname Verification", "its certificate does not carry the name Osprey checked it against",
     "give the name the certificate was issued for as the server name (or reach the service by that name)"),
    ("WRONG_VERSION_NUMBER", "it does not speak TLS there",
     "check that the address is the ToolService's TLS port"),
    ("handshake failed", "the TLS handshake failed",
     "check the CA, the client certificate and key, and that the address is the ToolService's TLS port"),
)


def tls_refusal(details: str, where: str) -> DispatcherError | None:
    """The project error for a TLS connection that could not be made secure (retrying cannot
    help), from a failed call's details; None for any other failure."""
    for marker, why, what_to_do in _TLS_REFUSALS:
        if marker.lower() in details.lower():
            return DispatcherError(f"the ToolService at {where} could not be reached securely: {why}; {what_to_do} ({details[:300]})")
    return None


T = TypeVar("T")


def _being_cancelled() -> bool:
    """Inside `except CancelledError`: whether this task is being cancelled. When it is not, the
    call was cancelled under it, by its channel closing (another call's failure replaced the
    connection), which is the service's failure, not the caller's cancellation."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def _closed_under(connection: Connection) -> DispatcherError:
    return DispatcherError(f"the connection to the ToolService at {connection.where} was closed while the call ran "
                           "(the service stopped, and was replaced)")


def _not_unicode(field: str, exc: UnicodeEncodeError) -> ToolError:
    return ToolError("invalid_argument", f"the {field.replace('_', ' ')} is not valid Unicode text: it holds a lone surrogate "
                                         f"({exc.object[exc.start:exc.end]!r} at character {exc.start}); send it as UTF-8 text")


def _request(message: Callable[..., T], **fields: Any) -> T:
    """A request message; a field that cannot be sent as UTF-8 (a lone surrogate, as from an
    undecodable file name) is the caller's `invalid_argument`, naming the field."""
    try:
        return message(**fields)
    except UnicodeEncodeError as exc:
        field = next((name for name, value in fields.items()
                      if value is exc.object or (isinstance(value, list) and any(item is exc.object for item in value))), "argument")
        raise _not_unicode(field, exc) from None


def _map_rpc_error(exc: grpc.aio.AioRpcError, where: str, deadline_s: float | None = None) -> Exception:
    category = ""
    for key, value in exc.trailing_metadata() or ():
        if key == wire.CATEGORY_KEY:
            category = value
    return _map_status(exc.code(), exc.details(), category, where, deadline_s)


def _map_status(code: grpc.StatusCode, details: str | None, category: str, where: str, deadline_s: float | None = None) -> Exception:
    """The project error for a call that ended with status `code`, its `details` and the error
    category its trailing metadata carried ("" when none)."""
    if category and category not in ("internal", "unauthenticated"):
        return ToolError(category, details or category)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return DispatcherError(f"the ToolService at {where} refused the call: {details}; the lane token does not match")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and deadline_s is not None:
        return ToolTimeout(f"the ToolService did not answer within {deadline_s:g} s, so the call was cancelled")
    if code == grpc.StatusCode.UNAVAILABLE and (refused := tls_refusal(details or "", where)) is not None:
        return refused
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return DispatcherError(f"the ToolService at {where} is unreachable ({code.name}: {details}); the sandbox lane or dispatcher may have stopped")
    if code == grpc.StatusCode.CANCELLED:
        # Our own cancellation surfaces as asyncio.CancelledError, never as a status.
        return DispatcherError(f"the ToolService at {where} cancelled the call (it may be shutting down)")
    return ToolError("internal", f"the ToolService failed ({code.name}): {details}")


def _status_code(number: int) -> grpc.StatusCode:
    """The status code numbered `number` (UNKNOWN for a number gRPC does not define)."""
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code
    return grpc.StatusCode.UNKNOWN


# Batched calls (ReadFiles, ListDirectories, Trees: the calls of one kind made in one event-loop
# iteration, sent together): the request bytes after which the rest go in another call.
BATCH_MAX_REQUEST_BYTES = wire.MAX_MESSAGE_BYTES // 2

# A call waiting for its batch: the request and the future its caller awaits. The future's
# result is the response, or None when the caller must send the plain call itself (it was
# alone, or the service has no batched call).
_Pending = tuple[Any, "asyncio.Future[Any]"]


def _settle(future: asyncio.Future[Any], result: Any = None, error: BaseException | None = None) -> None:
    if future.done():
        return  # its caller was cancelled
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _cancel_when_abandoned(batch: asyncio.Task[None], futures: list[asyncio.Future[Any]]) -> None:
    """Cancel `batch` once every caller waiting on it is cancelled, as their own calls would be."""
    def abandoned(future: asyncio.Future[Any]) -> None:
        if future.cancelled() and not batch.done() and all(f.done() for f in futures):
            batch.cancel()

    for future in futures:
        future.add_done_callback(abandoned)


def _batch_chunks(calls: list[_Pending]) -> Iterator[list[_Pending]]:
    """`calls` in requests of at most `wire.READ_FILES_MAX_ITEMS` calls and about
    BATCH_MAX_REQUEST_BYTES bytes."""
    chunk: list[_Pending] = []
    size = 0
    for call in calls:
        call_size = call[0].ByteSize() + 8
        if chunk and (len(chunk) == wire.READ_FILES_MAX_ITEMS or size + call_size > BATCH_MAX_REQUEST_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(call)
        size += call_size
    if chunk:
        yield chunk


class _Batcher:
    """The calls of one kind (read_file, list_directory, tree) made in the same event-loop
    iteration (a turn's calls gathered together), sent to the service as one batched call: one
    round trip and one worker there instead of one each. Each caller gets its own result, or
    the error the call alone would have ended with."""

    def __init__(self, client: ToolClient, method: str, make_request: Callable[[list[Any]], Any], field: str) -> None:
        self.client = client
        self.method = method  # the batched RPC
        self.make_request = make_request  # its request, from the single calls' requests
        self.field = field  # where an item holds its result
        # The calls of this loop iteration, sent together once it ends.
        self.pending: list[_Pending] | None = None
        self.sending: set[asyncio.Task[None]] = set()
        # The connection whose service answered the batched call as UNIMPLEMENTED (an older one).
        self.unsupported: Connection | None = None

    def join(self, request: Any) -> asyncio.Future[Any]:
        """Add `request` to the calls of this loop iteration (the first schedules their flush)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self.pending is None:
            self.pending = []
            loop.call_soon(self._flush)
        self.pending.append((request, future))
        return future

    def _flush(self) -> None:
        calls = [call for call in self.pending or () if not call[1].done()]
        self.pending = None
        if len(calls) == 1:
            calls[0][1].set_result(None)  # alone: its caller sends the plain call
            return
        for chunk in _batch_chunks(calls):
            batch = asyncio.get_running_loop().create_task(self._send(chunk))
            self.sending.add(batch)
            batch.add_done_callback(self.sending.discard)
            _cancel_when_abandoned(batch, [future for _, future in chunk])

    async def _send(self, calls: list[_Pending]) -> None:
        """One batched call for `calls` (again for the rest, if the answer held only the first
        ones), settling each caller's future with its result or its error."""
        connection = self.client._connection
        try:
            while calls:
                calls = [call for call in calls if not call[1].done()]
                if len(calls) <= 1 or connection is None:
                    for _, future in calls:
                        _settle(future, None)  # its caller sends the plain call
                    return
                reply = await self._call(connection, calls)
                if reply is None:
                    return
                deadline_s = self.client.call_deadline_s
                for (_, future), item in zip(calls, reply.items, strict=False):
                    if item.HasField(self.field):
                        _settle(future, getattr(item, self.field))
                    else:
                        error = item.error
                        _settle(future, error=_map_status(_status_code(error.code), error.message, error.category, connection.where, deadline_s))
                calls = calls[len(reply.items):]
        except asyncio.CancelledError:
            if _being_cancelled():
                for _, future in calls:
                    future.cancel()  # (every caller was cancelled already, unless the loop is closing)
                raise
            for _, future in calls:
                _settle(future, error=_closed_under(connection) if connection is not None else DispatcherError("the ToolService is not running"))
        except BaseException as exc:
            for _, future in calls:
                _settle(future, error=ToolError("internal", f"sending calls together to the ToolService failed: {type(exc).__name__}: {exc}"))
            raise

    async def _call(self, connection: Connection, calls: list[_Pending]) -> Any:
        """The batched call for `calls`; None when it failed (every future then settled: with
        the error the call alone would have got, or None to send it alone when the batched call
        is unknown)."""
        failure: Callable[[], Exception]
        deadline_s = self.client.call_deadline_s
        try:
            reply = await getattr(connection.stub, self.method)(self.make_request([request for request, _ in calls]),
                                                                metadata=connection.metadata, timeout=deadline_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                self.unsupported = connection
                for _, future in calls:
                    _settle(future, None)
                return None
            failure = functools.partial(_map_rpc_error, exc, connection.where, deadline_s)
        except grpc.aio.UsageError as exc:
            failure = functools.partial(DispatcherError, f"the connection to the ToolService at {connection.where} is closed ({exc})")
        else:
            if reply.items and len(reply.items) <= len(calls):
                return reply
            failure = functools.partial(ToolError, "internal", f"the ToolService at {connection.where} answered {len(calls)} calls with {len(reply.items)} results")
        for _, future in calls:
            _settle(future, error=failure())  # each caller its own (its recovery note is written on it)
        return None


def accepts_connections(socket_path: str) -> bool:
    """Whether a unix socket at `socket_path` accepts connections now (one non-blocking connect).
    Services are probed with this before gRPC is used: a gRPC connection refused between a
    server's bind and its listen puts the channel into its reconnect backoff, a second or so."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        try:
            probe.connect(socket_path)
        except BlockingIOError:
            return True  # listening, its backlog momentarily full
        except OSError:
            return False  # not there yet, or bound but not listening
    return True


def _channel(target: UnixTarget | TlsTarget) -> grpc.aio.Channel:
    options: list[tuple[str, Any]] = list(wire.CHANNEL_OPTIONS)
    if isinstance(target, UnixTarget):
        return grpc.aio.insecure_channel(target.grpc_target, options=options)
    key = target.client_key_pem.get_secret_value() if target.client_key_pem is not None else None
    credentials = grpc.ssl_channel_credentials(root_certificates=target.ca_pem, private_key=key, certificate_chain=target.client_cert_pem)
    if target.server_name:
        options.append(("grpc.ssl_target_name_override", target.server_name))
    return grpc.aio.secure_channel(target.grpc_target, credentials, options=options)


class Connection:
    """One gRPC channel to one ToolService, with the token its calls present. `target` is a
    `UnixTarget` or a `TlsTarget`; a plain string is a unix socket's path.

    The channel is made at its first use: gRPC and protobuf load then (tens of milliseconds), so
    a session without tool calls never loads them. Closed before that, it never makes one, and a
    call made through it after fails as a closed connection does."""

    def __init__(self, target: ServiceTarget | str, *, token: str | None = None) -> None:
        self.target: UnixTarget | TlsTarget = UnixTarget(path=target) if isinstance(target, str) else target
        self.where = self.target.where
        self.token = token
        self.metadata = ((wire.TOKEN_KEY, token),) if token else None
        # Why TLS cannot be made to work, once a health check found that (see `tls_refusal`).
        self.refused: str | None = None
        self._closed = False

    @functools.cached_property
    def channel(self) -> grpc.aio.Channel:
        if self._closed:
            raise DispatcherError(f"the connection to the ToolService at {self.where} is closed")
        return _channel(self.target)

    @functools.cached_property
    def stub(self) -> pb_grpc.ToolServiceStub:
        return pb_grpc.ToolServiceStub(self.channel)

    @functools.cached_property
    def _health(self) -> health_pb2_grpc.HealthStub:
        return health_pb2_grpc.HealthStub(self.channel)

    @property
    def channel_made(self) -> bool:
        """Whether the gRPC channel (and so gRPC itself) was needed yet."""
        return "channel" in self.__dict__

    async def close(self) -> None:
        self._closed = True
        if self.channel_made:
            await self.channel.close()

    async def healthy(self, timeout: float = 1.0) -> bool:
        """Whether the service answers its health check within `timeout` seconds."""
        if self._closed and not self.channel_made:
            return False
        try:
            reply = await self._health.Check(health_pb2.HealthCheckRequest(service=wire.SERVICE_NAME), metadata=self.metadata, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            if isinstance(self.target, TlsTarget) and exc.code() == grpc.StatusCode.UNAVAILABLE:
                refused = tls_refusal(exc.details() or "", self.where)
                self.refused = str(refused) if refused is not None else None
            return False
        except grpc.aio.UsageError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    async def wait_ready(self, deadline_s: float) -> None:
        """Poll gRPC health until SERVING, or raise DispatcherError at the deadline (at once
        when TLS refuses the connection: waiting cannot mend a certificate)."""
        end = time.monotonic() + deadline_s
        delay = 0.005
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise DispatcherError(f"the ToolService at {self.where} did not become ready within {deadline_s:.1f} s")
            if await self.healthy(timeout=min(1.0, max(remaining, 0.05))):
                return
            if self.refused is not None:
                raise DispatcherError(self.refused)
            await asyncio.sleep(min(delay, max(end - time.monotonic(), 0)))
            delay = min(delay * 2, 0.1)


class ToolClient:
    """Typed async calls to a ToolService, through whatever connection its home gives it.

    `recover` (the home's) is asked once after a call fails as unreachable or stuck; a client
    without one (`for_socket`) just raises."""

    def __init__(self, connection: Connection | None = None, *, recover: Recover | None = None, call_deadline_s: float = CALL_DEADLINE_S) -> None:
        self._connection = connection
        self._recover = recover
        self._starting: asyncio.Future[None] | None = None
        self.call_deadline_s = call_deadline_s
        # read_file, list_directory and tree calls made together, sent as one call of each kind.
        self._batchers = {
            "ReadFile": _Batcher(self, "ReadFiles", lambda reads: pb.ReadFilesRequest(reads=reads), "file"),
            "ListDirectory": _Batcher(self, "ListDirectories", lambda calls: pb.ListDirectoriesRequest(calls=calls), "listing"),
            "Tree": _Batcher(self, "Trees", lambda calls: pb.TreesRequest(calls=calls), "tree"),
        }
        # Whether those calls made together go as one batched call (False: each alone).
        self.batch_calls = True
        # The programs started through this client and not yet ended (`close_programs`).
        self._programs: set[ProgramHandle] = set()

    @classmethod
    def for_socket(cls, socket_path: str, *, token: str | None = None) -> ToolClient:
        """A client of its own connection to the service on `socket_path`, with no home to recover."""
        return cls(Connection(socket_path, token=token))

    @classmethod
    def for_target(cls, target: ServiceTarget, *, token: str | None = None) -> ToolClient:
        """A client of its own connection to the service at `target`, with no home to recover."""
        return cls(Connection(target, token=token))

    @property
    def connection(self) -> Connection | None:
        return self._connection

    def wait_for(self, starting: asyncio.Future[None]) -> None:
        """Make calls wait for `starting` (the home's background start) before they go out; when
        it fails, they fail with its error (no recovery is tried: the session ends on it)."""
        self._starting = starting

    async def _started(self) -> None:
        starting = self._starting
        if starting is None:
            return
        if not starting.done():
            try:
                await asyncio.shield(starting)  # a cancelled call must not cancel the start
            except asyncio.CancelledError:
                if not starting.cancelled():
                    raise  # this call was cancelled
        if starting.cancelled():
            raise DispatcherError("the ToolService is not running: it was stopped while it was starting")
        failure = starting.exception()
        if failure is not None:
            raise failure
        self._starting = None

    def use(self, connection: Connection | None) -> None:
        """Talk through `connection` from now on (a home does this when it starts or is replaced)."""
        self._connection = connection

    @property
    def where(self) -> str:
        return self._connection.where if self._connection is not None else "(not running)"

    @property
    def token(self) -> str | None:
        return self._connection.token if self._connection is not None else None

    async def close(self) -> None:
        """End the programs it started, and close the current connection (a home closes its own
        connections itself)."""
        await self.close_programs()
        if self._connection is not None:
            await self._connection.close()

    async def healthy(self, timeout: float = 1.0) -> bool:
        return self._connection is not None and await self._connection.healthy(timeout)

    async def wait_ready(self, deadline_s: float) -> None:
        if self._connection is None:
            raise DispatcherError("the ToolService is not running")
        await self._connection.wait_ready(deadline_s)

    def _current(self) -> Connection:
        if self._connection is None:
            raise DispatcherError("the ToolService is not running (it was stopped, or starting it failed)")
        return self._connection

    async def _after_failure(self, exc: OspreyError, used: Connection | None) -> None:
        """Ask the home to recover (once, for this failure) and note on `exc` what it did."""
        if self._recover is None:
            return
        try:
            note = await self._recover()
        except Exception as failure:  # noqa: BLE001 - told to the model with the call's own error
            exc.recovery = f"starting a new ToolService failed too: {failure}"
            return
        if note is None and self._connection is not used and self._connection is not None:
            note = REPLACED_MEANWHILE  # another failed call's recovery replaced it first
        if note:
            exc.recovery = note

    async def _unary(self, method: str, request: Any, deadline_s: float | None = None) -> Any:
        await self._started()
        used = self._connection
        deadline_s = deadline_s or self.call_deadline_s
        try:
            connection = self._current()
            try:
                return await getattr(connection.stub, method)(request, metadata=connection.metadata, timeout=deadline_s)
            except grpc.aio.AioRpcError as exc:
                raise _map_rpc_error(exc, connection.where, deadline_s) from None
            except asyncio.CancelledError:
                if _being_cancelled():
                    raise
                raise _closed_under(connection) from None
            except grpc.aio.UsageError as exc:
                raise DispatcherError(f"the connection to the ToolService at {connection.where} is closed ({exc})") from None
        except (DispatcherError, ToolTimeout) as exc:
            await self._after_failure(exc, used)
            raise

    async def read_file(self, path: str, offset: int = 0, limit: int = 0) -> ReadFileResult:
        """Calls made in the same event-loop iteration (a turn's calls gathered together) go to
        the service in one ReadFiles call; each gets its own result or error, as from ReadFile."""
        r = await self._batchable("ReadFile", _request(pb.ReadFileRequest, path=path, offset=offset, limit=limit))
        return toolwire.ReadFileResult.from_wire(r)

    async def _batchable(self, method: str, request: Any) -> Any:
        """The `method` call for `request`, sent together with the others of its kind made in this
        event-loop iteration when there are any (see `_Batcher`)."""
        if self._starting is not None:
            await self._started()
        used = self._connection
        batcher = self._batchers[method]
        if self.batch_calls and used is not None and used is not batcher.unsupported:
            try:
                batched = await batcher.join(request)
            except (DispatcherError, ToolTimeout) as exc:
                await self._after_failure(exc, used)
                raise
            if batched is not None:
                return batched
        return await self._unary(method, request)

    async def write_file(self, path: str, content: str) -> WriteFileResult:
        """Small content goes in one message; larger content streams in chunks, each encoded as
        it is sent, so neither end holds a second whole copy of it."""
        if len(content) > wire.WRITE_MAX_BYTES:
            raise ToolError("invalid_argument", f"the content is over the {wire.WRITE_MAX_BYTES}-byte limit of write_file; write it in parts (bash can append)")
        if len(content) > wire.WRITE_CHUNK_BYTES:
            r = await self._write_stream(path, content)
            if r is not None:
                return toolwire.WriteFileResult.from_wire(r)
        r = await self._unary("WriteFile", _request(pb.WriteFileRequest, path=path, content=content))
        return toolwire.WriteFileResult.from_wire(r)

    async def _write_stream(self, path: str, content: str) -> pb.WriteFileResponse | None:
        """WriteFileStream; None when the service predates it (the caller sends one message)."""
        step = wire.WRITE_CHUNK_BYTES

        unencodable: list[UnicodeEncodeError] = []

        def chunks() -> Iterator[pb.WriteFileChunk]:
            try:
                yield pb.WriteFileChunk(path=path, data=content[:step].encode("utf-8"), last=len(content) <= step)
                for at in range(step, len(content), step):
                    yield pb.WriteFileChunk(data=content[at : at + step].encode("utf-8"), last=at + step >= len(content))
            except UnicodeEncodeError as exc:
                # (a lone surrogate) The stream ends without its last chunk, so nothing is written;
                # the caller gets this error, as from a WriteFile message that could not be built.
                unencodable.append(exc)

        await self._started()
        used = self._connection
        try:
            connection = self._current()
            try:
                return await connection.stub.WriteFileStream(chunks(), metadata=connection.metadata, timeout=self.call_deadline_s)
            except asyncio.CancelledError:
                if _being_cancelled():
                    raise
                raise _closed_under(connection) from None
            except grpc.aio.AioRpcError as exc:
                if unencodable:
                    raise _not_unicode("content", unencodable[0]) from None
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return None
                raise _map_rpc_error(exc, connection.where, self.call_deadline_s) from None
            except grpc.aio.UsageError as exc:
                raise DispatcherError(f"the connection to the ToolService at {connection.where} is closed ({exc})") from None
        except (DispatcherError, ToolTimeout) as exc:
            await self._after_failure(exc, used)
            raise

    async def edit_file(self, path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditFileResult:
        r = await self._unary("EditFile", _request(pb.EditFileRequest, path=path, old_string=old_string, new_string=new_string, replace_all=replace_all))
        return toolwire.EditFileResult.from_wire(r)

    async def bash(self, command: str, *, timeout_ms: int = 0, workdir: str = "", max_output_bytes: int = 0, on_output: Callable[[bytes], None] | None = None) -> BashResult:
        """Run a command; output chunks reach `on_output` as they arrive (all of the output when
        none was dropped, else the head). Cancelling kills it."""
        await self._started()
        used = self._connection
        try:
            return await self._bash(self._current(), _request(pb.BashRequest, command=command, timeout_ms=timeout_ms, workdir=workdir, max_output_bytes=max_output_bytes), on_output)
        except (DispatcherError, ToolTimeout) as exc:
            await self._after_failure(exc, used)
            raise

    async def _bash(self, connection: Connection, request: pb.BashRequest, on_output: Callable[[bytes], None] | None) -> BashResult:
        deadline_s = (request.timeout_ms or wire.BASH_DEFAULT_TIMEOUT_MS) / 1000 + BASH_DEADLINE_GRACE_S
        try:
            call = connection.stub.Bash(request, metadata=connection.metadata, timeout=deadline_s)
        except grpc.aio.UsageError as exc:
            raise DispatcherError(f"the connection to the ToolService at {connection.where} is closed ({exc})") from None
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
                        out += toolwire.dropped_marker(e.dropped_bytes).encode()
                    elif e.tail and on_output:
                        # Nothing dropped: the tail is output not streamed yet (a command that
                        # ended as it printed sends it with its exit), and it follows the head.
                        on_output(e.tail)
                    out += e.tail
                    return toolwire.BashResult.from_wire(e, output=out.decode("utf-8", "replace"))
        except grpc.aio.AioRpcError as exc:
            finished = True
            raise _map_rpc_error(exc, connection.where, deadline_s) from None
        except asyncio.CancelledError:
            if _being_cancelled():
                raise
            finished = True
            raise _closed_under(connection) from None
        except grpc.aio.UsageError as exc:
            finished = True
            raise DispatcherError(f"the connection to the ToolService at {connection.where} is closed ({exc})") from None
        finally:
            if not finished:
                call.cancel()  # cancelling the call kills the command's process group
        raise DispatcherError(f"the ToolService at {connection.where} ended a bash call without an exit status")

    async def exec(self, argv: Sequence[str], *, stdin: bytes = b"", workdir: str = "", timeout_ms: int = 0, max_output_bytes: int = 0) -> ExecResult:
        """Run a program from `argv` with no shell: argv[0] is found on the service's PATH (or is
        a path), `stdin` is fed to it and closed, stdout and stderr come back apart, each kept
        within `max_output_bytes` (head and tail). Cancelling the call kills its process group."""
        if len(stdin) > wire.EXEC_MAX_STDIN_BYTES:
            raise ToolError("invalid_argument", f"stdin is {len(stdin)} bytes; at most {wire.EXEC_MAX_STDIN_BYTES} can be sent (write larger input to a file and pass its path)")
        deadline_s = (timeout_ms or wire.EXEC_DEFAULT_TIMEOUT_MS) / 1000 + BASH_DEADLINE_GRACE_S
        request = _request(pb.ExecRequest, argv=list(argv), stdin=stdin, workdir=workdir, timeout_ms=timeout_ms, max_output_bytes=max_output_bytes)
        return toolwire.ExecResult.from_wire(await self._unary("Exec", request, deadline_s))

    async def find_files(self, pattern: str, path: str = "", limit: int = 0) -> FindFilesResult:
        r = await self._unary("FindFiles", _request(pb.FindFilesRequest, pattern=pattern, path=path, limit=limit))
        return toolwire.FindFilesResult.from_wire(r)

    async def grep(self, pattern: str, path: str = "", glob: str = "", ignore_case: bool = False, max_matches: int = 0) -> GrepResult:
        r = await self._unary("Grep", _request(pb.GrepRequest, pattern=pattern, path=path, glob=glob, ignore_case=ignore_case, max_matches=max_matches))
        return toolwire.GrepResult.from_wire(r)

    async def list_directory(self, path: str = "") -> ListDirectoryResult:
        """Calls made together go in one ListDirectories call, as read_file's do."""
        r = await self._batchable("ListDirectory", _request(pb.ListDirectoryRequest, path=path))
        return toolwire.ListDirectoryResult.from_wire(r)

    async def tree(self, path: str = "", max_depth: int = 0, max_entries: int = 0) -> TreeResult:
        """Calls made together go in one Trees call, as read_file's do."""
        r = await self._batchable("Tree", _request(pb.TreeRequest, path=path, max_depth=max_depth, max_entries=max_entries))
        return toolwire.TreeResult.from_wire(r)

    @property
    def programs(self) -> frozenset[ProgramHandle]:
        """The programs started through this client that have not ended yet."""
        return frozenset(self._programs)

    async def close_programs(self) -> None:
        """End every program started through this client (the service kills their groups)."""
        for handle in list(self._programs):
            await handle.aclose()

    async def program(self, argv: Sequence[str], *, workdir: str = "", env: Mapping[str, str] | None = None, deadline_s: float | None = None) -> ProgramHandle:
        """Start a long-lived program from `argv` where the tools run (found on the service's
        PATH, no shell, in `workdir` beneath the roots, with bash's environment plus `env`);
        the handle writes its stdin and reads its output. With `deadline_s` it is killed once
        that many seconds have passed. Ending the handle, or closing this client, kills its
        whole process group. A failure to start raises ToolError."""
        if isinstance(argv, str) or not argv or not all(isinstance(arg, str) for arg in argv):
            raise ToolError("invalid_argument", "argv must be a non-empty list of strings: the program, then its arguments")
        if deadline_s is not None and deadline_s <= 0:
            raise ToolError("invalid_argument", f"deadline_s must be positive, not {deadline_s}; leave it out for no deadline")
        start = _request(pb.ProgramStart, argv=list(argv), workdir=workdir, env=dict(env or {}),
                         lifetime_ms=max(1, int(deadline_s * 1000)) if deadline_s else 0)
        await self._started()
        used = self._connection
        try:
            connection = self._current()
            timeout = deadline_s + PROGRAM_DEADLINE_GRACE_S if deadline_s else None
            try:
                call = connection.stub.Program(metadata=connection.metadata, timeout=timeout)
            except grpc.aio.UsageError as exc:
                raise DispatcherError(f"the connection to the ToolService at {connection.where} is closed ({exc})") from None
            stream = _ProgramCall(call, connection, timeout)
            try:
                await stream.write(pb.ProgramInput(start=start))
                first = await stream.read()
            except BaseException:
                call.cancel()
                raise
            started = toolwire.ProgramEvent.read(first) if first is not None else None
            if started is None or started.kind != "started":
                call.cancel()
                raise ToolError("internal", f"the ToolService at {connection.where} did not report the start of {argv[0]!r}")
        except (DispatcherError, ToolTimeout) as exc:
            await self._after_failure(exc, used)
            raise
        handle = ProgramHandle(started.started.pid, stream, argv0=argv[0], registry=self._programs)
        self._programs.add(handle)
        return handle


_SIGNAL_NUMBERS = dict(zip(SIGNALS, ("PROGRAM_SIGNAL_TERM", "PROGRAM_SIGNAL_KILL", "PROGRAM_SIGNAL_INT"), strict=True))


_WRITE_FAILED = "Internal error from Core"


class _ProgramCall:
    """A Program stream call as a `ProgramStream`: its gRPC errors mapped to the project's."""

    def __init__(self, call: Any, connection: Connection, timeout: float | None) -> None:
        self._call = call
        self._connection = connection
        self._timeout = timeout
        self._cancelled = False

    def _mapped(self, exc: grpc.aio.AioRpcError) -> Exception:
        if exc.code() == grpc.StatusCode.OK:
            return ToolError("program_ended", "the program has ended; start it again")
        return _map_rpc_error(exc, self._connection.where, self._timeout)

    async def write(self, message: pb.ProgramInput) -> None:
        try:
            await self._call.write(message)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.INTERNAL and _WRITE_FAILED in (exc.details() or ""):
                # (gRPC's own status for a write to a call that has just ended)
                raise ToolError("program_ended", "the program's stream has ended (it exited, or was ended); read its output for how, "
                                                 "and start it again if it is still needed") from None
            raise self._mapped(exc) from None
        except asyncio.InvalidStateError:
            raise ToolError("program_ended", "the program's stream has ended; start it again") from None
        except asyncio.CancelledError:
            if _being_cancelled():
                raise
            raise _closed_under(self._connection) from None
        except grpc.aio.UsageError as exc:
            raise DispatcherError(f"the connection to the ToolService at {self._connection.where} is closed ({exc})") from None

    async def read(self) -> pb.ProgramEvent | None:
        try:
            event = await self._call.read()
        except grpc.aio.AioRpcError as exc:
            if self._cancelled:
                return None
            raise self._mapped(exc) from None
        except asyncio.CancelledError:
            if _being_cancelled():
                raise
            if self._cancelled:
                return None
            raise _closed_under(self._connection) from None
        except grpc.aio.UsageError as exc:
            raise DispatcherError(f"the connection to the ToolService at {self._connection.where} is closed ({exc})") from None
        return None if event is grpc.aio.EOF else event

    async def send_stdin(self, data: bytes) -> None:
        step = wire.PROGRAM_STDIN_CHUNK_BYTES
        for at in range(0, len(data), step):
            await self.write(pb.ProgramInput(stdin=bytes(data[at : at + step])))

    async def close_stdin(self) -> None:
        await self.write(pb.ProgramInput(close_stdin=True))

    async def signal(self, name: str) -> None:
        await self.write(pb.ProgramInput(signal=getattr(pb, _SIGNAL_NUMBERS[name])))

    async def receive(self) -> ProgramOutput | None:
        while True:
            message = await self.read()
            if message is None:
                return None
            event = toolwire.ProgramEvent.read(message)
            if event.kind == "stdout":
                return ProgramOutput("stdout", event.stdout)
            if event.kind == "stderr":
                return ProgramOutput("stderr", event.stderr)
            if event.kind == "exit":
                e = event.exit
                return ProgramOutput("exit", exit_code=e.exit_code if not e.signal else None, signal=e.signal or None, timed_out=e.timed_out)

    async def finish(self) -> None:
        try:
            await self._call.done_writing()
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
            pass  # it has ended already

    def cancel(self) -> None:
        self._cancelled = True
        self._call.cancel()
