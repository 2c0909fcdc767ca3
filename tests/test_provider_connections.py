"""Providers keep one HTTP connection across turns, counted by the servers they talk to.

The client is the one a session builds (`Session._make_provider`); the HTTP/1.1 server is the
project's keep-alive ModelServer, the HTTP/2 one a TLS server with ALPN written here on `h2`.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import httpx
import pytest
import trustme

from osprey.config import load_settings
from osprey.errors import ProviderError
from osprey.messages import ModelRequest, ToolSpec, UserMessage
from osprey.providers.base import DRAIN_SECONDS, Provider
from osprey.session.core import Session, SessionOptions
from osprey.testing.model_server import ModelServer, Reply

DIALECTS = ["openai", "anthropic"]
TOOLS = [ToolSpec(name="read_file", description="Read a file.", parameters={"type": "object", "properties": {"path": {"type": "string"}}})]


def request() -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=[UserMessage(content="Say hello.")], tools=TOOLS)


@dataclass
class Built:
    """A provider and its client, built the way a session builds them."""

    session: Session
    provider: Provider
    http: httpx.AsyncClient
    versions: list[str] = field(default_factory=list)


async def session_provider(dialect: str, base_url: str, workspace: Path) -> Built:
    env = {"OSPREY_HOME": str(workspace / "home"), "OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test"}
    settings = load_settings(workspace, {"provider": dialect, "base_url": base_url, "model": "test-model"}, env)
    session = Session(SessionOptions(settings=settings), emit=lambda _: None)
    provider = await session._make_provider()
    http = session._http
    assert http is not None
    built = Built(session, provider, http)

    async def record(response: httpx.Response) -> None:
        built.versions.append(response.http_version)

    http.event_hooks["response"].append(record)
    return built


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path


async def settled(server: ModelServer, open_at_most: int) -> int:
    """The server's open connections once the client's closes have reached it."""
    deadline = time.monotonic() + 5
    while server.open_connections > open_at_most and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return server.open_connections


# ------------------------------------------------------------------ HTTP/1.1, kept alive


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_clean_turns_and_error_answers_share_one_connection(dialect: str, model_server: ModelServer, workspace: Path) -> None:
    """Streamed text, tool calls, HTTP errors and an answer the provider refuses mid-stream: one connection."""
    model_server.add(
        Reply.text("Hello there, one."),
        Reply.tool_call("read_file", {"path": "a.txt"}, text="Reading."),
        Reply.error(429),
        Reply.text("After the rate limit."),
        Reply.error(500),
        Reply.text("After the server error."),
        Reply.garbage(),
        Reply.text("After the garbage."),
        Reply.tool_call("read_file", {"path": "b.txt"}),
        Reply.error(503, headers={"retry-after": "0"}),
        Reply.text("Hello there, eleven."),
        Reply.text("Hello there, twelve."),
    )
    built = await session_provider(dialect, model_server.base_url, workspace)
    outcomes: list[str] = []
    try:
        for _ in range(12):
            try:
                turn = await built.provider.complete(request())
                outcomes.append("calls" if turn.message.tool_calls else turn.message.text)
            except ProviderError as exc:
                outcomes.append(f"error {exc.status}" if exc.status else "refused")
        assert model_server.accepted_connections == 1
        assert model_server.open_connections == 1
    finally:
        await built.session._stack.aclose()
    assert outcomes == [
        "Hello there, one.", "calls", "error 429", "After the rate limit.", "error 500", "After the server error.",
        "refused", "After the garbage.", "calls", "error 503", "Hello there, eleven.", "Hello there, twelve.",
    ]
    assert model_server.request_count == 12
    assert set(built.versions) == {"HTTP/1.1"}
    assert await settled(model_server, 0) == 0


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_cut_or_cancelled_stream_costs_one_connection_and_leaks_none(dialect: str, model_server: ModelServer, workspace: Path) -> None:
    model_server.add(
        Reply.text("Before."),
        Reply.disconnect(2),
        Reply.text("After the cut."),
        Reply.hold(2),
        Reply.text("After the cancel."),
        Reply.text("Again."),
    )
    built = await session_provider(dialect, model_server.base_url, workspace)
    try:
        await built.provider.complete(request())
        with pytest.raises(ProviderError) as info:
            await built.provider.complete(request())
        assert info.value.retryable
        assert (await built.provider.complete(request())).message.text == "After the cut."
        assert model_server.accepted_connections == 2
        assert await settled(model_server, 1) == 1

        turn = asyncio.create_task(built.provider.complete(request()))
        assert await asyncio.to_thread(model_server.wait_held)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        model_server.release()
        assert await settled(model_server, 0) == 0, "the cancelled turn's connection was closed"
        assert (await built.provider.complete(request())).message.text == "After the cancel."
        assert (await built.provider.complete(request())).message.text == "Again."
        assert model_server.accepted_connections == 3
        assert model_server.open_connections == 1
    finally:
        await built.session._stack.aclose()
    assert await settled(model_server, 0) == 0


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_stream_kept_open_after_its_end_ends_the_turn_and_its_connection(dialect: str, model_server: ModelServer, workspace: Path) -> None:
    """A server that sends the end marker but not the end of the body: the turn is over within the
    drain bound, and that connection (which cannot carry another request) is closed."""
    model_server.add(Reply.hold(1000, Reply.text("All said.")), Reply.text("Next."))
    built = await session_provider(dialect, model_server.base_url, workspace)
    try:
        started = time.monotonic()
        turn = await asyncio.wait_for(built.provider.complete(request()), 10)
        elapsed = time.monotonic() - started
        assert turn.message.text == "All said."
        assert model_server.held == 1
        assert DRAIN_SECONDS * 0.9 <= elapsed < DRAIN_SECONDS + 5
        model_server.release()
        assert await settled(model_server, 0) == 0
        assert (await built.provider.complete(request())).message.text == "Next."
        assert model_server.accepted_connections == 2
    finally:
        model_server.release()
        await built.session._stack.aclose()


# ------------------------------------------------------------------ HTTP/2 over TLS


def _openai_events(text: str) -> list[bytes]:
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": piece}, "finish_reason": None}]} for piece in (text[:5], text[5:])]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
    return [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


def _anthropic_events(text: str) -> list[bytes]:
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 10, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


class H2Server:
    """A TLS server on 127.0.0.1 that offers h2 (and http/1.1) by ALPN and answers HTTP/2 requests
    with a model's event stream; it counts connections and records the protocol each one chose."""

    def __init__(self, ca: trustme.CA) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert("127.0.0.1").configure_cert(self.context)
        self.context.set_alpn_protocols(["h2", "http/1.1"])
        self.accepted = 0
        self.protocols: list[str | None] = []
        self.paths: list[str] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> H2Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"https://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.protocols.append(writer.get_extra_info("ssl_object").selected_alpn_protocol())
        if self.protocols[-1] != "h2":
            writer.close()
            return
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        paths: dict[int, str] = {}
        try:
            while data := await reader.read(65536):
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        headers = {bytes(k).decode() if not isinstance(k, str) else k: bytes(v).decode() if not isinstance(v, str) else v
                                   for k, v in event.headers or []}
                        paths[event.stream_id or 0] = headers[":path"]
                    elif isinstance(event, h2.events.DataReceived):
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id or 0)
                    elif isinstance(event, h2.events.StreamEnded):
                        path = paths.pop(event.stream_id or 0)
                        self.paths.append(path)
                        events = _openai_events("Hello over h2.") if path.endswith("/chat/completions") else _anthropic_events("Hello over h2.")
                        sid = event.stream_id or 0
                        conn.send_headers(sid, [(":status", "200"), ("content-type", "text/event-stream")])
                        for piece in events:
                            conn.send_data(sid, piece)
                        conn.end_stream(sid)
                writer.write(conn.data_to_send())
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def h2_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[H2Server]:
    """The server, its self-signed CA trusted by clients made from here on (SSL_CERT_FILE)."""
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    async with H2Server(ca) as server:
        yield server


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_the_session_client_speaks_http2_when_the_server_offers_it(dialect: str, h2_server: H2Server, workspace: Path) -> None:
    built = await session_provider(dialect, h2_server.base_url, workspace)
    try:
        texts = [(await built.provider.complete(request())).message.text for _ in range(10)]
    finally:
        await built.session._stack.aclose()
    assert texts == ["Hello over h2."] * 10
    assert h2_server.protocols == ["h2"]
    assert h2_server.accepted == 1
    assert built.versions == ["HTTP/2"] * 10
    assert len(h2_server.paths) == 10


async def test_a_plain_http_client_never_speaks_tls_and_a_switch_to_https_takes_a_new_client(model_server: ModelServer,
                                                                                             workspace: Path) -> None:
    from osprey.providers.base import PlainHTTPTransport

    model_server.add(Reply.text("hello"))
    built = await session_provider("openai", model_server.base_url, workspace)
    try:
        assert isinstance(built.http._transport, PlainHTTPTransport)
        turn = await built.provider.complete(request())
        assert "hello" in str(turn.message)
        with pytest.raises(httpx.UnsupportedProtocol, match="plain http only"):
            await built.http.get("https://127.0.0.1:9/")
        # A switch to an https server gets a client that verifies certificates; back to http, a plain one.
        session = built.session
        session.settings = session.settings.model_copy(update={"base_url": "https://127.0.0.1:9/v1"})
        await session._make_provider()
        assert session._http is not built.http and not isinstance(session._http._transport, PlainHTTPTransport)
        assert session._http._transport._pool._ssl_context.verify_mode == ssl.CERT_REQUIRED
        session.settings = session.settings.model_copy(update={"base_url": model_server.base_url})
        await session._make_provider()
        assert isinstance(session._http._transport, PlainHTTPTransport)
    finally:
        await built.session.close()
