"""Serve the ToolService (and gRPC health) on a unix socket, optionally behind a token, or on a TCP
port with TLS (optionally mutual) behind a token."""

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
from .wire import CATEGORY_KEY, CHANNEL_OPTIONS, PROGRAM_MAX_RUNNING, SERVICE_NAME, TOKEN_KEY

# Each Program stream holds a worker for its life: with PROGRAM_MAX_RUNNING of them running,
# the other calls still have 32.
MAX_WORKERS = 32 + PROGRAM_MAX_RUNNING


class _TokenInterceptor(grpc.ServerInterceptor):
    """Refuse every call that does not present the server's token."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

        def deny(request: object, context: grpc.ServicerContext) -> None:
            context.set_trailing_metadata(((CATEGORY_KEY, "unauthenticated"),))
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong ToolService token")

        self._deny_unary = grpc.unary_unary_rpc_method_handler(deny)
        self._deny_stream = grpc.unary_stream_rpc_method_handler(deny)
        self._deny_both = grpc.stream_stream_rpc_method_handler(deny)

    def intercept_service(self, continuation, handler_call_details):
        for key, value in handler_call_details.invocation_metadata or ():
            if key == TOKEN_KEY and hmac.compare_digest(value.encode(), self._token):
                return continuation(handler_call_details)
        if handler_call_details.method.endswith("/Program"):
            return self._deny_both
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


class ServerTls:
    """The TLS a TCP listener serves with: its certificate chain and key (PEM), and, for mutual
    TLS, the CA that must have signed each client's certificate. (A plain class: the sidecar
    starts in every lane, and dataclasses would be one more import.)"""

    __slots__ = ("cert_chain_pem", "key_pem", "client_ca_pem")

    def __init__(self, cert_chain_pem: bytes, key_pem: bytes, client_ca_pem: bytes | None = None) -> None:
        self.cert_chain_pem = cert_chain_pem
        self.key_pem = key_pem
        self.client_ca_pem = client_ca_pem

    def __repr__(self) -> str:  # never the key
        return f"ServerTls(mutual={self.client_ca_pem is not None})"


def _serving(roots: Sequence[str], token: str | None, env: dict[str, str] | None, reap_strays: bool, search_budget_s: float,
             executor: futures.ThreadPoolExecutor | None, options: Sequence[tuple[str, int]] = ()) -> tuple[grpc.Server, health.HealthServicer]:
    """A server with the ToolService and gRPC health, not yet listening nor started."""
    interceptors: list[grpc.ServerInterceptor] = [_TokenInterceptor(token)] if token else []
    interceptors.append(_ParseWriteChunks())
    server = grpc.server(
        executor or futures.ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="osprey-tool"),
        interceptors=interceptors,
        options=[*CHANNEL_OPTIONS, *options],
    )
    pb_grpc.add_ToolServiceServicer_to_server(ToolServicer(Roots(roots), env, reap_strays=reap_strays, search_budget_s=search_budget_s), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    return server, health_servicer


def _report_serving(health_servicer: health.HealthServicer) -> None:
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)


def build_server(roots: Sequence[str], socket_path: str, token: str | None = None, env: dict[str, str] | None = None, *, reap_strays: bool = False, search_budget_s: float = SEARCH_BUDGET_S,
                 executor: futures.ThreadPoolExecutor | None = None) -> grpc.Server:
    """A started server for `roots` listening on `socket_path` (made 0600).

    `env` is the environment `bash` commands get (default: this process's); `reap_strays`
    (lanes only) kills what a command left running outside its process group; `search_budget_s`
    bounds each grep and find_files call; `executor` runs the calls (default: a pool of its own)."""
    server, health_servicer = _serving(roots, token, env, reap_strays, search_budget_s, executor)
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    # No umask games: it is process-wide, and the local dispatcher shares its process with
    # the broker's threads. The socket's directory is private, so chmod after bind is enough.
    server.add_insecure_port(socket_target(socket_path))
    server.start()
    os.chmod(socket_path, 0o600)
    _report_serving(health_servicer)
    return server


def build_tls_server(roots: Sequence[str], address: str, tls: ServerTls, token: str, env: dict[str, str] | None = None, *, reap_strays: bool = False,
                     search_budget_s: float = SEARCH_BUDGET_S, executor: futures.ThreadPoolExecutor | None = None) -> tuple[grpc.Server, int]:
    """A started server for `roots` listening on TCP `address` (`HOST:PORT`; port 0 picks a free
    one) with TLS, and the port it listens on. A token is required: on TCP, anyone who can reach
    the port could otherwise call. Raises OSError when the address cannot be bound."""
    if not token:
        raise ValueError("a ToolService on TCP needs a token")
    # By default gRPC lets a later listener of the same user share the TCP port (SO_REUSEPORT),
    # which would let another process take some of the calls, token and all: the port must be ours.
    server, health_servicer = _serving(roots, token, env, reap_strays, search_budget_s, executor, options=(("grpc.so_reuseport", 0),))
    credentials = grpc.ssl_server_credentials([(tls.key_pem, tls.cert_chain_pem)], root_certificates=tls.client_ca_pem, require_client_auth=tls.client_ca_pem is not None)
    try:
        port = server.add_secure_port(address, credentials)
    except RuntimeError as exc:  # grpcio raises this where older versions returned 0
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if port == 0:
        raise OSError(f"cannot listen on {address} (in use, or not an address of this host)")
    server.start()
    _report_serving(health_servicer)
    return server, port
