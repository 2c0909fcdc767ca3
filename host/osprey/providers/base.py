"""The provider interface, the bounded answer (a server-sent-event stream via httpx-sse, or one whole JSON document) and the httpx error boundary."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from httpx_sse import EventSource, ServerSentEvent, aconnect_sse

from ..errors import ProviderError
from ..messages import ModelRequest, ModelTurn, Usage, scrub
from .plain_http import PlainHTTPTransport

TextSink = Callable[[str], None]

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}

# Bounds on what a model server's answer may make the broker hold. A real event is a few hundred
# bytes (a whole tool call sent at once, a few hundred KiB); a whole answer, tens of MiB at most.
MAX_EVENT_BYTES = 8 * 1024 * 1024
MAX_STREAM_BYTES = 256 * 1024 * 1024
MAX_ERROR_BODY_BYTES = 64 * 1024
# A whole answer sent as one JSON document (by a server that does not stream) is held at once.
MAX_DOCUMENT_BYTES = 32 * 1024 * 1024
# What is read of an answer after the provider stopped reading it (the end of a stream, or what
# follows an error event) so that the connection can carry the next request; past either bound the
# connection is closed instead.
MAX_DRAIN_BYTES = 64 * 1024
DRAIN_SECONDS = 0.5

# HTTP/2 (one connection, streams multiplexed) where the server offers it, which takes the `h2` package.
HTTP2 = importlib.util.find_spec("h2") is not None


def plain_http(base_url: str | None) -> bool:
    """The server is spoken to without TLS (`http://`, e.g. a local model server)."""
    return base_url is not None and base_url.lower().startswith("http://")


def http_client(timeout: httpx.Timeout, base_url: str | None = None) -> httpx.AsyncClient:
    """The client a session's providers share across turns: one connection pool, kept alive, and
    HTTP/2 when the server offers it over TLS. For an `http://` base URL, a plain-http client
    (HTTP/1.1, no TLS set up at all)."""
    if plain_http(base_url):
        return httpx.AsyncClient(timeout=timeout, transport=PlainHTTPTransport())
    return httpx.AsyncClient(timeout=timeout, http2=HTTP2)


class Provider(Protocol):
    """Turns a conversation into the model's next turn. Knows nothing of tools' effects."""

    name: str
    model: str

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelTurn: ...


def merge_usage(old: Usage, new: Usage) -> Usage:
    """Usage reported again later in an answer: per field, a later non-zero count replaces the
    earlier one (counts are cumulative; servers differ in which event carries which field)."""
    return Usage(**{k: getattr(new, k) or getattr(old, k) for k in Usage.model_fields})


# What tool names look like to the APIs that will see them again in the conversation.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
UNNAMED_TOOL = "unnamed_tool"


# A lone surrogate in parsed JSON comes from a `\uD800`-`\uDFFF` escape, or was in the text already.
_MAY_HOLD_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")


def loads(data: str | bytes) -> Any:
    """json.loads for anything a model or its server wrote: lone surrogates scrubbed (the
    recursive scrub runs only when the text could hold one)."""
    text = data if isinstance(data, str) else data.decode(json.detect_encoding(data), "surrogatepass")
    value = json.loads(text)
    return scrub(value) if _MAY_HOLD_SURROGATE.search(text) else value


def name_problem(name: str) -> str | None:
    """Why a tool name from the model cannot be a tool's name, or None."""
    if not name:
        return "the call has no tool name"
    if not _TOOL_NAME.fullmatch(name):
        return f"the name {name[:60]!r} is not a tool name"
    return None


def wire_tool_name(name: str) -> str:
    """The name to send back for a call in the conversation: an invalid one is replaced, since
    APIs reject a conversation that holds it."""
    return name if name_problem(name) is None else UNNAMED_TOOL


def parse_json(data: str, what: str) -> Any:
    try:
        return loads(data)
    except json.JSONDecodeError:
        excerpt = data[:200].replace("\n", " ")
        raise ProviderError(
            f"the model server sent {what} that is not JSON: {excerpt!r}. "
            "Check that --base-url points at an API of the chosen --provider."
        ) from None


def _error_detail(body: bytes) -> str:
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return body[:300].decode("utf-8", "replace").strip()
    err = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err.get("type") or err)
    if isinstance(err, str):
        return err
    return json.dumps(payload)[:300]


async def _head(chunks: AsyncIterator[bytes], limit: int = MAX_ERROR_BODY_BYTES) -> bytes:
    """At most `limit` bytes of a response body; the rest is left unread (the connection is dropped)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(parts)[:limit]


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB"


class _BoundedBody(httpx.AsyncByteStream):
    """A response's decoded body that refuses, with a ProviderError, an event longer than
    `max_event` bytes or a stream longer than `max_total` bytes, so a server cannot make the
    event parser buffer without end."""

    # Two line terminators in a row end an event: "\n\n", "\r\r", or "\n\r" (which "\r\n\r\n" holds).
    _EVENT_ENDS = (b"\n\n", b"\n\r", b"\r\r")

    def __init__(self, response: httpx.Response, chunks: AsyncIterator[bytes], label: str, max_event: int, max_total: int) -> None:
        self.response = response
        self.chunks = chunks
        self.label = label
        self.max_event = max_event
        self.max_total = max_total
        self.refused = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = total = 0  # bytes since the last event ended; bytes in all
        tail = b""
        async for chunk in self.chunks:
            total += len(chunk)
            window = tail + chunk
            end = max(window.rfind(mark) for mark in self._EVENT_ENDS)
            pending = pending + len(chunk) if end < 0 else len(window) - end - 2
            tail = window[-1:]
            if pending > self.max_event:
                self.refused = True
                raise ProviderError(
                    f"{self.label} sent a stream event longer than {_mib(self.max_event)}; it was not read. "
                    "Check that --base-url points at an API of the chosen --provider."
                )
            if total > self.max_total:
                self.refused = True
                raise ProviderError(
                    f"{self.label} sent more than {_mib(self.max_total)} in one answer; the rest was not read."
                )
            yield chunk

    async def aclose(self) -> None:
        await self.response.aclose()


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what is left of an answer (within MAX_DRAIN_BYTES and DRAIN_SECONDS) so that its
    connection goes back to the pool; a server that keeps talking past the bounds loses it."""
    size = 0
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            async for chunk in chunks:
                size += len(chunk)
                if size > MAX_DRAIN_BYTES:
                    return
    except (TimeoutError, httpx.HTTPError, httpx.StreamError):
        pass


# What an error object's `type` or `code` says when the condition passes with time (overload, rate
# limits, a server fault): the request is worth sending again. Any other error is not.
RETRYABLE_ERROR_TYPES = frozenset({
    "overloaded_error", "api_error", "rate_limit_error", "server_error", "rate_limit_exceeded",
    "internal_server_error", "internalservererror", "service_unavailable", "serviceunavailableerror",
    "ratelimiterror", "timeout", "timeout_error",
})


def error_of(payload: Any) -> Any:
    """The error a JSON document from a server reports, or None: `{"error": ...}` (OpenAI, and
    Anthropic's `{"type": "error", "error": {...}}`) or vLLM's `{"object": "error", ...}`."""
    if not isinstance(payload, dict):
        return None
    if payload.get("error") is not None:
        return payload["error"]
    if payload.get("object") == "error" or payload.get("type") == "error":
        return payload
    return None


def _status_in(value: Any) -> int | None:
    """An HTTP status given as an error's `code` (LiteLLM sends "429", vLLM 400), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and 100 <= value <= 599 else None


def reported_error(label: str, err: Any, where: str) -> ProviderError:
    """The ProviderError for an error object a server sent (mid-stream, or as its whole answer):
    retryable when its status-like code is (429, 5xx...) or, without one, when its type or code
    names a condition that passes (overload, rate limit, server fault); otherwise the same request
    would get the same answer."""
    if isinstance(err, dict):
        kind, code, message = err.get("type"), err.get("code"), err.get("message")
        status = _status_in(code) or _status_in(err.get("status"))
    else:
        kind = code = status = None
        message = err
    names = {str(v).lower() for v in (kind, code) if isinstance(v, str)}
    retryable = status in RETRYABLE_STATUS if status is not None else bool(names & RETRYABLE_ERROR_TYPES)
    what = kind if isinstance(kind, str) and kind and kind != "None" else "an error"
    detail = f": {message}" if message else ""
    return ProviderError(f"{label} reported {what}{where}{detail}", retryable=retryable, status=status)


@dataclass
class Answer:
    """What a model server sent for one request: its events (a stream), or, from a server that
    ignored `stream: true`, the whole answer as one JSON document (`events` is then None)."""

    events: AsyncIterator[ServerSentEvent] | None
    document: Any = None


# How an event stream's first line begins (a field name, or ":" for a comment).
_STREAM_OPENINGS = b"deir:"


async def _peek(chunks: AsyncIterator[bytes]) -> tuple[bytes, AsyncIterator[bytes]]:
    """The first non-blank byte of a body (b"" when there is none), and the body again, whole.
    Whitespace before it is read up to MAX_DRAIN_BYTES."""
    seen: list[bytes] = []
    size = 0
    first = b""
    async for chunk in chunks:
        seen.append(chunk)
        size += len(chunk)
        first = chunk.lstrip()[:1]
        if first or size > MAX_DRAIN_BYTES:
            break

    async def again() -> AsyncIterator[bytes]:
        for chunk in seen:
            yield chunk
        async for chunk in chunks:
            yield chunk

    return first, again()


async def _document(response: httpx.Response, chunks: AsyncIterator[bytes], label: str, limit: int) -> Any:
    """A whole JSON answer, read within `limit` bytes; an error object in it becomes its ProviderError."""
    declared = response.headers.get("content-length", "")
    too_long = ProviderError(f"{label} sent a JSON answer longer than {_mib(limit)}; it was not read.")
    if declared.isdigit() and int(declared) > limit:
        raise too_long
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_long
        parts.append(chunk)
    raw = b"".join(parts)
    try:
        document = loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        excerpt = raw[:200].decode("utf-8", "replace")
        raise ProviderError(
            f"{label} sent an answer that is not JSON: {excerpt!r}. "
            "Check that --base-url points at an API of the chosen --provider."
        ) from None
    err = error_of(document)
    if err is not None:
        raise reported_error(label, err, " instead of an answer")
    return document


@asynccontextmanager
async def model_answer(
    client: httpx.AsyncClient, label: str, url: str, headers: dict[str, str], body: dict[str, Any],
    *, max_event: int = MAX_EVENT_BYTES, max_total: int = MAX_STREAM_BYTES, max_document: int = MAX_DOCUMENT_BYTES,
) -> AsyncIterator[Answer]:
    """POST `body` (which asks for a stream) and yield the answer: its server-sent events that carry
    data, or the whole JSON document of a server that does not stream.

    Which of the two it is, the body says, not its content type (servers label both loosely): a
    body that opens with `{` is a JSON document (an event stream cannot open so), one that opens
    as an event stream is read as events; anything else is refused. A JSON error object becomes
    the ProviderError its type says (see `reported_error`).

    httpx failures and HTTP errors become ProviderError; so does an event, a whole stream or a
    document past the size bounds. When the caller stops reading a stream (at the end of the turn,
    or on an error in what the server sent), the rest of it is drained within bounds so the
    connection carries the next request; a cancelled turn, a refused stream or a broken connection
    closes it instead.
    """
    try:
        # No compression: it only delays a stream, and a small compressed chunk can inflate a lot.
        async with aconnect_sse(client, "POST", url, headers={**headers, "Accept-Encoding": "identity"}, json=body) as source:
            response = source.response
            if response.status_code >= 400:
                raw = await _head(response.aiter_bytes())
                status = response.status_code
                hint = ""
                if status in (401, 403):
                    hint = " Check the API key."
                elif status == 404:
                    hint = " Check --base-url and --model."
                raise ProviderError(
                    f"{label} answered HTTP {status}: {_error_detail(raw)}.{hint}",
                    retryable=status in RETRYABLE_STATUS,
                    status=status,
                    retry_after=retry_after(response.headers.get("retry-after")),
                )
            first, chunks = await _peek(response.aiter_bytes())
            if first == b"{":
                yield Answer(None, await _document(response, chunks, label, max_document))
                return
            if first and first not in _STREAM_OPENINGS:
                head = (await _head(chunks, 200)).strip()
                raise ProviderError(
                    f"{label} answered with neither an event stream nor JSON: {head.decode('utf-8', 'replace')!r}. "
                    "Check that --base-url points at an API of the chosen --provider."
                )
            stream_headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in ("content-encoding", "content-type")]
            stream = _BoundedBody(response, chunks, label, max_event, max_total)
            bounded = httpx.Response(
                response.status_code,
                headers=[*stream_headers, ("content-type", "text/event-stream; charset=utf-8")],
                stream=stream,
                request=response.request,
            )
            events = _with_data(EventSource(bounded).aiter_sse())
            drain = False
            try:
                yield Answer(events)
                drain = True
            except ProviderError:
                drain = not stream.refused  # what the server said was refused, not how much: the stream is sound
                raise
            finally:
                await events.aclose()
                if drain:
                    await _drain(chunks)
    except httpx.TimeoutException as exc:
        raise ProviderError(f"{label} did not answer in time ({type(exc).__name__} at {url})", retryable=True) from None
    except httpx.ConnectError as exc:
        raise await connect_error(label, url, exc) from None
    except httpx.HTTPError as exc:
        raise ProviderError(f"{label} could not be reached at {url}: {exc or type(exc).__name__}", retryable=True) from None


async def connect_error(label: str, url: str, exc: httpx.ConnectError) -> ProviderError:
    """The ProviderError for a connection that could not be made. A local server (this machine or
    a private network) that refuses it is not running: that fails at once, saying so, since
    retrying cannot help. Anything else (a public host refusing, no route, a name that does not
    resolve) may pass, and is retried."""
    from .addresses import refused, resolves_locally

    target = httpx.URL(url)
    if refused(exc) and await resolves_locally(target.host):
        where = f"{target.scheme}://{target.netloc.decode('ascii', 'replace')}"
        return ProviderError(
            f"{label} refused the connection at {url}: is the server running? Nothing listens at {where}, "
            "a local address, so this is not retried; start the server, or point --base-url (base_url) at the one that runs."
        )
    return ProviderError(f"{label} could not be reached at {url}: {exc or type(exc).__name__}", retryable=True)


MAX_RETRY_AFTER_S = 3600.0


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP date), or None when absent
    or unreadable; never negative, at most an hour."""
    if not value:
        return None
    value = value.strip()[:100]
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        import time

        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


async def _with_data(events: AsyncGenerator[ServerSentEvent, None]) -> AsyncGenerator[ServerSentEvent, None]:
    """The events that carry data (a block of only `id:`, `retry:` or `event:` lines dispatches nothing)."""
    try:
        async for event in events:
            if event.data:
                yield event
    finally:
        await events.aclose()
