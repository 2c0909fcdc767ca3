"""Serve the ToolService (and gRPC health) on a unix socket, optionally behind a token."""

from __future__ import annotations

import hmac
import os
from collections.abc import Sequence
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ._proto import tools_pb2_grpc as pb_grpc
from .paths import Roots
from .search import SEARCH_BUDGET_S
from .servicer import ToolServicer, parse_write_chunk
from .wire import CATEGORY_KEY, CHANNEL_OPTIONS, SERVICE_NAME, TOKEN_KEY

MAX_WORKERS = 32


class _TokenInterceptor(grpc.ServerInterceptor):
    """Refuse every call that does not present the server's token."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

        def deny(request: object, context: grpc.ServicerContext) -> None:
            context.set_trailing_metadata(((CATEGORY_KEY, "unauthenticated"),))
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong ToolService token")

        self._deny_unary = grpc.unary_unary_rpc_method_handler(deny)
        self._deny_stream = grpc.unary_stream_rpc_method_handler(deny)

    def intercept_service(self, continuation, handler_call_details):
        for key, value in handler_call_details.invocation_metadata or ():
            if key == TOKEN_KEY and hmac.compare_digest(value.encode(), self._token):
                return continuation(handler_call_details)
        streaming = handler_call_details.method.endswith("/Bash") or handler_call_details.method.endswith("/Watch")
        return self._deny_stream if streaming else self._deny_unary


WRITE_FILE_STREAM = f"/{SERVICE_NAME}/WriteFileStream"


class _ParseWriteChunks(grpc.ServerInterceptor):
    """WriteFileStream's chunks parsed by `parse_write_chunk` (their data left in the received
    message) instead of the generated parser, which copies it twice."""

    def __init__(self) -> None:
        # (the servicer's handler, the same with our parser), replaced in one assignment.
        self._made: tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler] | None = None

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler_call_details.method != WRITE_FILE_STREAM or handler is None or handler.stream_unary is None:
            return handler
        made = self._made
        if made is None or made[0] is not handler:
            made = (handler, grpc.stream_unary_rpc_method_handler(handler.stream_unary, request_deserializer=parse_write_chunk, response_serializer=handler.response_serializer))
            self._made = made
        return made[1]


def socket_target(path: str) -> str:
    return f"unix:{path}"


def build_server(roots: Sequence[str], socket_path: str, token: str | None = None, env: dict[str, str] | None = None, *, reap_strays: bool = False, search_budget_s: float = SEARCH_BUDGET_S,
                 executor: futures.ThreadPoolExecutor | None = None) -> grpc.Server:
    """A started server for `roots` listening on `socket_path` (made 0600).

    `env` is the environment `bash` commands get (default: this process's); `reap_strays`
    (lanes only) kills what a command left running outside its process group; `search_budget_s`
    bounds each grep and find_files call; `executor` runs the calls (default: a pool of its own)."""
    interceptors: list[grpc.ServerInterceptor] = [_TokenInterceptor(token)] if token else []
    interceptors.append(_ParseWriteChunks())
    server = grpc.server(
        executor or futures.ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="osprey-tool"),
        interceptors=interceptors,
        options=list(CHANNEL_OPTIONS),
    )
    pb_grpc.add_ToolServiceServicer_to_server(ToolServicer(Roots(roots), env, reap_strays=reap_strays, search_budget_s=search_budget_s), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    # No umask games: it is process-wide, and the local dispatcher shares its process with
    # the broker's threads. The socket's directory is private, so chmod after bind is enough.
    server.add_insecure_port(socket_target(socket_path))
    server.start()
    os.chmod(socket_path, 0o600)
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server
