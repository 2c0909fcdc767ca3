"""Connections to MCP servers through the official SDK: started in the background, listed, kept
alive (restarted with backoff after a crash), called, and closed.

Each server has one runner task that owns its SDK `Client` (entered and left in that task). The
SDK is imported once per process in a worker thread, so starting servers never holds the event
loop. Results are converted from the SDK's types at this boundary (`McpContent`), and the SDK's,
httpx2's and anyio's errors become `McpError`, with the server's header values redacted.

What a server may cost is bounded: a message (16 MiB), what a listing keeps (`MAX_TOOLS`,
`MAX_TOOL_BYTES`, `MAX_PROMPTS`, `MAX_RESOURCES`; names and texts by length), and how often a list
change relists (paced; a flood of them ends the connection).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..config.mcp import McpServerSpec
from ..errors import OspreyError

if TYPE_CHECKING:
    import httpx2

    from ..toolservice.client import ToolClient

log = logging.getLogger(__name__)

State = Literal["starting", "ready", "failed", "restarting", "stopped"]

# Waits before each restart attempt in a row; after the last the server is `failed`.
RESTART_DELAYS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)
# A connection that lived this long resets the count of attempts in a row.
STABLE_AFTER_S = 60.0
MAX_PAGES = 20
MAX_ITEMS = 1000
MAX_DESCRIPTION = 8000
MAX_SCHEMA_BYTES = 64 << 10
# What one server may offer: tools past these are left out (and its `error` says how many).
MAX_TOOLS = 256
MAX_TOOL_BYTES = 1 << 20  # input schemas and descriptions, in all
MAX_PROMPTS = 256
MAX_RESOURCES = 256
# Names a caller sends back (tools, prompts and their arguments) must be 1-128 printable characters.
MAX_NAME = 128
MAX_TITLE = 200
MAX_URI = 2048
MAX_RESOURCE_DESCRIPTION = 2000
MAX_ARGUMENTS = 64
# An SSE event may be as long as a stdio line (16 MiB).
MAX_SSE_EVENT_BYTES = 16 << 20
# List changes: at least RELIST_GAP_S between relists, doubled (up to RELIST_GAP_MAX_S) while they
# keep coming; over FLOOD_RATE notifications a second for FLOOD_SECONDS seconds in a row ends the
# connection as a protocol error.
RELIST_GAP_S = 1.0
RELIST_GAP_MAX_S = 30.0
FLOOD_RATE = 1000
FLOOD_SECONDS = 3
PERMISSIVE_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": True}
CLOSE_TIMEOUT_S = 5.0
# The most a stdio server's start waits for the home its program runs in (a lane may be starting).
HOME_START_LIMIT_S = 300.0
CONNECT_MODE = "auto"


class McpError(OspreyError):
    """An MCP server could not be reached, started or called; the message says which and what to do."""


@dataclass(frozen=True)
class McpToolInfo:
    """One tool of a server. `read_only_hint` is the server's readOnlyHint, honoured only when
    the server is trusted (an untrusted server's tools are never read-only)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only_hint: bool
    title: str | None = None


@dataclass(frozen=True)
class McpPromptInfo:
    """One prompt of a server; `arguments` are (name, description, required)."""

    name: str
    description: str
    arguments: tuple[tuple[str, str, bool], ...]


@dataclass(frozen=True)
class McpResourceInfo:
    """One resource of a server."""

    uri: str
    name: str
    description: str
    mime_type: str | None


@dataclass(frozen=True)
class McpContent:
    """A tool result or a resource read: its text (text blocks joined; embedded text resources;
    resource links as `resource: URI (name)`; audio and other blobs as a one-line note), its images
    as (mime type, bytes), the structured content, and whether the server marked it an error."""

    text: str
    images: tuple[tuple[str, bytes], ...] = ()
    structured: dict[str, Any] | None = None
    is_error: bool = False


# ------------------------------------------------------------------------------------ the SDK

_sdk_lock = threading.Lock()
_sdk_loaded = False


def _import_sdk() -> None:
    global _sdk_loaded
    with _sdk_lock:
        if not _sdk_loaded:
            import httpx2  # noqa: F401
            import mcp  # noqa: F401
            import mcp.client.streamable_http  # noqa: F401

            from . import transport  # noqa: F401

            _sdk_loaded = True


async def load_sdk() -> None:
    """Import the SDK in a worker thread, once per process, when the broker is quiet (waiting for
    the model or a person, at most 1 s after it is first asked for): the import takes over a
    second, and holds the interpreter lock in stretches of up to ~0.1 s, which would otherwise
    delay the session's own start-up and its first model request."""
    if not _sdk_loaded:
        from ..toolservice.homes import until_quiet

        await until_quiet()
        await asyncio.to_thread(_import_sdk)


# ------------------------------------------------------------------------ converting results


def _cut(text: str | None, limit: int = MAX_DESCRIPTION) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit] + " […]"


def _name_ok(name: Any) -> bool:
    return isinstance(name, str) and 1 <= len(name) <= MAX_NAME and name.isprintable()


def _schema(raw: Any) -> tuple[dict[str, Any], str]:
    """The input schema to offer, and a note when the server's was replaced."""
    if not isinstance(raw, dict) or raw.get("type", "object") != "object":
        return dict(PERMISSIVE_SCHEMA), "(its input schema was not a JSON object schema, so any arguments are accepted)"
    try:
        size = len(json.dumps(raw))
    except (TypeError, ValueError):
        return dict(PERMISSIVE_SCHEMA), "(its input schema could not be read, so any arguments are accepted)"
    if size > MAX_SCHEMA_BYTES:
        return dict(PERMISSIVE_SCHEMA), f"(its input schema was over {MAX_SCHEMA_BYTES >> 10} KiB, so any arguments are accepted)"
    return raw, ""


def _decode(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _blob(mime: str | None, data: str, uri: str | None, images: list[tuple[str, bytes]], texts: list[str]) -> None:
    what = f"resource {uri}" if uri else "data"
    raw = _decode(data)
    if raw is None:
        texts.append(f"[{what}: {mime or 'unknown type'}, not valid base64]")
    elif mime and mime.startswith("image/"):
        images.append((mime, raw))
    else:
        texts.append(f"[{what}: {mime or 'unknown type'}, {len(raw)} bytes]")


def _block(block: Any, images: list[tuple[str, bytes]], texts: list[str]) -> None:
    kind = getattr(block, "type", None)
    if kind == "text":
        texts.append(block.text)
    elif kind == "image":
        _blob(block.mime_type, block.data, None, images, texts)
    elif kind == "audio":
        size = len(_decode(block.data) or b"")
        texts.append(f"[audio: {block.mime_type}, {size} bytes]")
    elif kind == "resource":
        _contents(block.resource, images, texts)
    elif kind == "resource_link":
        texts.append(f"resource: {block.uri} ({block.name})")
    else:
        texts.append(f"[a {kind or 'unknown'} block]")


def _contents(item: Any, images: list[tuple[str, bytes]], texts: list[str]) -> None:
    if getattr(item, "text", None) is not None:
        texts.append(item.text)
    elif getattr(item, "blob", None) is not None:
        _blob(item.mime_type, item.blob, str(item.uri), images, texts)


def tool_content(result: Any) -> McpContent:
    """A `CallToolResult` as `McpContent`."""
    images: list[tuple[str, bytes]] = []
    texts: list[str] = []
    for block in result.content or ():
        _block(block, images, texts)
    structured = result.structured_content if isinstance(result.structured_content, dict) else None
    return McpContent("\n".join(texts), tuple(images), structured, bool(result.is_error))


def resource_content(result: Any) -> McpContent:
    """A `ReadResourceResult` as `McpContent`."""
    images: list[tuple[str, bytes]] = []
    texts: list[str] = []
    for item in result.contents or ():
        _contents(item, images, texts)
    return McpContent("\n".join(texts), tuple(images))


def prompt_messages(result: Any) -> list[tuple[str, str]]:
    """A `GetPromptResult`'s messages as (role, text); images and blobs as one-line notes."""
    out: list[tuple[str, str]] = []
    for message in result.messages or ():
        images: list[tuple[str, bytes]] = []
        texts: list[str] = []
        _block(message.content, images, texts)
        texts += [f"[image: {mime}, {len(data)} bytes]" for mime, data in images]
        out.append((str(message.role), "\n".join(texts)))
    return out


# ----------------------------------------------------------------------------------- a server


def _errors_text(exc: BaseException) -> str:
    """One line for an exception (the leaves of a group, joined)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_errors_text(e) for e in exc.exceptions))
    text = str(exc).strip() or type(exc).__name__
    return text if isinstance(exc, OspreyError) else f"{type(exc).__name__}: {text}"


def _secret_forms(spec: McpServerSpec) -> tuple[str, ...]:
    """The texts of `spec`'s header values that error messages must not show: each value, stripped,
    as Python escapes it, and the part after its scheme (the token of `Bearer TOKEN`)."""
    forms: set[str] = set()
    for value in spec.headers.values():
        raw = value.get_secret_value()
        for form in (raw, raw.strip(), repr(raw)[1:-1], *raw.strip().split(None, 1)[1:]):
            if form.strip():
                forms.add(form)
    return tuple(sorted(forms, key=len, reverse=True))


# How the SDK words a JSON body it could not read, and how Osprey's bound on a body begins.
_UNREADABLE = "Failed to parse JSON response: "
_BOUND = "its answer was "


class _Lost(Exception):
    """The connection of a ready server ended."""


class McpServer:
    """One configured server and its connection: `state`, why it failed (`error`), what it offers
    (`tools`, `prompts`, `resources`, `instructions`), and the calls made to it."""

    def __init__(self, spec: McpServerSpec, *, client: ToolClient | None, workdir: str, on_change: Callable[[McpServer, bool], None],
                 http_client_factory: Callable[[dict[str, str]], httpx2.AsyncClient] | None = None,
                 restart_delays: Sequence[float] = RESTART_DELAYS) -> None:
        self.spec = spec
        self.state: State = "starting"
        self.error: str | None = None
        self.tools: tuple[McpToolInfo, ...] = ()
        self.prompts: tuple[McpPromptInfo, ...] = ()
        self.resources: tuple[McpResourceInfo, ...] = ()
        self.instructions: str | None = None
        self.generation = 0
        self.pid: int | None = None  # the stdio server's pid where it runs, while it runs
        self._client = client
        self._workdir = workdir
        self._on_change = on_change
        self._http_client_factory = http_client_factory
        self._delays = tuple(restart_delays)
        self._sdk: Any = None  # the connected SDK Client while ready
        self._lost = asyncio.Event()
        self._lost_reason = ""
        self._relist: set[str] = set()
        self._relist_event = asyncio.Event()
        self._transport: Any = None
        self._retry_at = 0.0
        self._attempt = 0
        self._stopping = False
        self._stable = False
        self._secrets = _secret_forms(spec)
        self._notes: dict[str, str] = {}  # kind -> what its last listing left out
        self._told_names = False
        self._flood_window = 0.0
        self._flood_count = 0
        self._flood_seconds = 0
        self._flooded = False
        self._start_scope: Any = None
        self.settled = False  # it has been ready or failed once

    def __repr__(self) -> str:
        return f"<McpServer {self.spec.name} {self.state}>"

    @property
    def _key(self) -> str:
        return f"[mcp_servers.{self.spec.name}]"

    def _redact(self, text: str) -> str:
        """`text` with every header value of the server replaced by `***`."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _note(self) -> str | None:
        """What a ready server's listings left out, or None."""
        return "; ".join(self._notes[kind] for kind in sorted(self._notes)) or None

    def _set(self, state: State, error: str | None = None) -> None:
        changed = state != self.state
        self.state = state
        self.error = self._redact(error) if error else error
        if state in ("ready", "failed", "stopped"):
            self.settled = True
        if state != "ready":
            self.tools, self.prompts, self.resources = (), (), ()
        self.generation += 1
        self._on_change(self, changed)

    # --- calls

    def _ready(self) -> Any:
        if self.state == "ready" and self._sdk is not None and not self._lost.is_set():
            return self._sdk
        name = f"the MCP server {self.spec.name!r}"
        if self.state == "restarting" or (self.state == "ready" and self._lost.is_set()):
            wait = max(0.0, self._retry_at - time.monotonic())
            when = f"in {math.ceil(wait)} s" if wait > 0 else "now"
            why = self.error or f"{name} crashed: {self._lost_reason}"
            raise McpError(f"{why}\nIt is being restarted (attempt {max(1, self._attempt)} of {len(self._delays)}, {when}); "
                           "try the call again after that")
        if self.state == "starting":
            raise McpError(f"{name} is still starting; try again in a moment")
        if self.state == "failed":
            raise McpError(f"{name} is not available: {self.error}")
        raise McpError(f"{name} was stopped")

    async def _request(self, what: str, timeout: float, key: str, send: Callable[[Any], Any]) -> Any:
        """One request to the server, its errors mapped into McpError (header values redacted)."""
        try:
            return await self._send(what, timeout, key, send)
        except McpError as exc:
            raise McpError(self._redact(str(exc))) from None

    async def _send(self, what: str, timeout: float, key: str, send: Callable[[Any], Any]) -> Any:
        import mcp_types
        from mcp.shared.exceptions import MCPError
        from pydantic import ValidationError

        sdk = self._ready()
        name = f"the MCP server {self.spec.name!r}"
        try:
            # The SDK's own timeout cancels the request on the server (notifications/cancelled);
            # the outer one only bounds a transport that never gives up.
            return await asyncio.wait_for(send(sdk), timeout + 1.0)
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise McpError(f"{what} on {name} did not finish within {timeout:g} s and was cancelled; "
                               f"raise {key} under {self._key} if it needs longer") from None
            if exc.code == mcp_types.CONNECTION_CLOSED or (self.spec.transport == "http" and "Session terminated" in exc.message):
                self._mark_lost(f"the connection closed during {what}")
                raise McpError(f"{what} on {name} failed: {self._describe()}; it is being restarted") from None
            if exc.code == mcp_types.PARSE_ERROR and exc.message.startswith(_UNREADABLE + _BOUND):
                raise McpError(f"{what} on {name} failed: {_cut(exc.message.removeprefix(_UNREADABLE), 500)}") from None
            raise McpError(f"{what} on {name} failed with a protocol error {exc.code}: {_cut(exc.message, 2000)}") from None
        except TimeoutError:
            raise McpError(f"{what} on {name} did not finish within {timeout:g} s and was cancelled; "
                           f"raise {key} under {self._key} if it needs longer") from None
        except ValidationError as exc:
            raise McpError(f"{what} on {name} returned a result that does not follow the MCP schema: {_cut(str(exc), 1000)}") from None
        except (OSError, RuntimeError) as exc:
            self._mark_lost(_errors_text(exc))
            raise McpError(f"{what} on {name} failed: {_errors_text(exc)}; it is being restarted") from None
        except Exception as exc:
            if _is_transport_error(exc):
                self._mark_lost(_errors_text(exc))
                raise McpError(f"{what} on {name} failed: {_errors_text(exc)}; it is being restarted") from None
            raise McpError(f"{what} on {name} failed: {_errors_text(exc)}") from None

    async def call_tool(self, name: str, arguments: dict[str, Any], *, timeout: float | None = None) -> McpContent:
        """Call one tool; the result's errors (isError) are in the content, everything else raises McpError."""
        limit = timeout if timeout is not None else self.spec.tool_timeout_sec
        result = await self._request(f"the tool {name!r}", limit, "tool_timeout_sec",
                                     lambda sdk: sdk.call_tool(name, arguments, read_timeout_seconds=limit))
        return tool_content(result)

    async def read_resource(self, uri: str) -> McpContent:
        """Read one resource."""
        limit = self.spec.tool_timeout_sec
        result = await self._request(f"reading {uri!r}", limit, "tool_timeout_sec",
                                     lambda sdk: sdk.read_resource(uri))
        return resource_content(result)

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> list[tuple[str, str]]:
        """Get one prompt's messages as (role, text)."""
        limit = self.spec.tool_timeout_sec
        result = await self._request(f"the prompt {name!r}", limit, "tool_timeout_sec",
                                     lambda sdk: sdk.get_prompt(name, arguments))
        return prompt_messages(result)

    # --- the connection

    def _describe(self) -> str:
        reason = self._lost_reason or "it ended"
        tail = self._transport.stderr.text() if self._transport is not None and hasattr(self._transport, "stderr") else ""
        return f"{reason}; its last stderr lines:\n{tail}" if tail else reason

    def _mark_lost(self, reason: str) -> None:
        if not self._lost.is_set():
            self._lost_reason = self._redact(reason)
            self._lost.set()
            if self.state == "ready" and not self._stopping and self._delays:
                # Said at once, so callers and watchers never see a dead connection as ready
                # (with no restarts at all, the runner says `failed` itself).
                stable = self._stable
                self._retry_at = time.monotonic() + (self._delays[0] if stable or not self._attempt else
                                                     self._delays[min(self._attempt, len(self._delays) - 1)])
                self._set("restarting", f"the MCP server {self.spec.name!r} crashed: {self._describe()}")

    def _connector(self, on_started: Callable[[], None]) -> Any:
        """The SDK transport of one connection."""
        spec = self.spec
        if spec.transport == "stdio":
            from .transport import ProgramTransport

            if self._client is None:
                raise McpError(f"the MCP server {spec.name!r} runs a program, and this run has no ToolService to run it")
            assert spec.command is not None
            workdir = self._workdir
            if spec.cwd:
                workdir = spec.cwd if os.path.isabs(spec.cwd) else os.path.join(self._workdir, spec.cwd)
            transport = ProgramTransport(self._client, [spec.command, *spec.args], workdir=workdir, env=spec.env, on_end=self._mark_lost,
                                         on_started=on_started)
            self._transport = transport
            return transport
        from mcp.client.streamable_http import streamable_http_client

        headers = {name: value.get_secret_value() for name, value in spec.headers.items()}
        http = (self._http_client_factory or default_http_client)(headers)
        self._transport = None
        assert spec.url is not None
        return _HttpTransport(streamable_http_client(spec.url, http_client=http, max_sse_event_size=MAX_SSE_EVENT_BYTES), http)

    async def _on_message(self, message: Any) -> None:
        import mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._want("tools")
        elif isinstance(message, mcp_types.PromptListChangedNotification):
            self._want("prompts")
        elif isinstance(message, mcp_types.ResourceListChangedNotification):
            self._want("resources")
        elif isinstance(message, Exception):
            if _is_transport_error(message):
                self._mark_lost(_errors_text(message))
            else:
                log.info("MCP server %s sent something unreadable: %s", self.spec.name, self._redact(_cut(str(message), 500)))

    def _want(self, kind: str) -> None:
        """A list changed: relisted by `_serve` (paced); a flood of these ends the connection."""
        now = time.monotonic()
        if now - self._flood_window >= 1.0:
            busy = self._flood_count >= FLOOD_RATE and now - self._flood_window < 2.0
            self._flood_seconds = self._flood_seconds + 1 if busy else 0
            self._flood_window, self._flood_count = now, 0
        self._flood_count += 1
        if self._flood_seconds >= FLOOD_SECONDS:
            self._mark_lost(f"it sent over {FLOOD_RATE} list-change notifications a second for {FLOOD_SECONDS} s, a protocol error; "
                            "the connection was ended")
            if self._start_scope is not None:  # still starting: its listing waits behind the flood
                self._flooded = True
                self._start_scope.cancel()
            return
        self._relist.add(kind)
        self._relist_event.set()

    async def _list(self, sdk: Any, kind: str) -> None:
        """List one kind, converting each page as it arrives and keeping what fits the budget."""
        cursor: str | None = None
        method = {"tools": sdk.list_tools, "prompts": sdk.list_prompts, "resources": sdk.list_resources}[kind]
        limit = {"tools": MAX_TOOLS, "prompts": MAX_PROMPTS, "resources": MAX_RESOURCES}[kind]
        kept: list[Any] = []
        used = 0  # tools: bytes of input schemas and descriptions kept
        seen = over = bad = 0
        for _ in range(MAX_PAGES):
            page = await method(cursor=cursor, cache_mode="bypass")
            items, cursor = getattr(page, kind), page.next_cursor
            del page
            for item in items[: max(0, MAX_ITEMS - seen)]:
                seen += 1
                info = self._convert(kind, item)
                if info is None:
                    bad += 1
                    continue
                if info is False:
                    continue
                size = len(json.dumps(info.input_schema)) + len(info.description) if kind == "tools" else 0
                if over or len(kept) >= limit or used + size > MAX_TOOL_BYTES:
                    over += 1  # the first that does not fit ends what is kept
                    continue
                used += size
                kept.append(info)
            del items
            if not cursor or seen >= MAX_ITEMS:
                break
        if kind == "tools":
            self.tools = tuple(kept)
        elif kind == "prompts":
            self.prompts = tuple(kept)
        else:
            self.resources = tuple(kept)
        parts = []
        if over:
            budget = f"{MAX_TOOLS} tools and {MAX_TOOL_BYTES >> 20} MiB of input schemas and descriptions" if kind == "tools" else f"{limit} {kind}"
            fix = f" (choose its tools with enabled_tools or disabled_tools under {self._key})" if kind == "tools" else ""
            parts.append(f"{over} of its {kind} were left out: Osprey takes at most {budget} from one server{fix}")
        if bad:
            what = {"tools": "names were not", "prompts": "names or argument names were not", "resources": "URIs were not"}[kind]
            rule = f"up to {MAX_URI} printable characters" if kind == "resources" else f"1-{MAX_NAME} printable characters"
            parts.append(f"{bad} of its {kind} were left out: their {what} {rule}")
            if not self._told_names:
                self._told_names = True
                log.info("MCP server %s: %s", self.spec.name, parts[-1])
        self._notes.pop(kind, None)
        if parts:
            self._notes[kind] = "; ".join(parts)

    def _convert(self, kind: str, item: Any) -> Any:
        """One listed item as Osprey keeps it; None when its name or URI is unusable, False when
        the server's settings leave it out."""
        if kind == "tools":
            if not _name_ok(item.name):
                return None
            if not self.spec.keeps(item.name):
                return False
            schema, note = _schema(item.input_schema)
            hint = bool(item.annotations is not None and item.annotations.read_only_hint)
            description = _cut(item.description or item.title or "")
            title = item.title or (item.annotations.title if item.annotations else None)
            return McpToolInfo(item.name, f"{description}\n{note}".strip(), schema, hint and self.spec.trusted,
                               _cut(title, MAX_TITLE) if title else None)
        if kind == "prompts":
            arguments = tuple(item.arguments or ())[:MAX_ARGUMENTS]
            if not _name_ok(item.name) or not all(_name_ok(a.name) for a in arguments):
                return None
            return McpPromptInfo(item.name, _cut(item.description),
                                 tuple((a.name, _cut(a.description, 2000), bool(a.required)) for a in arguments))
        uri = str(item.uri)
        if not 1 <= len(uri) <= MAX_URI or not uri.isprintable():
            return None
        return McpResourceInfo(uri, _cut(item.name, MAX_TITLE), _cut(item.description, MAX_RESOURCE_DESCRIPTION),
                               item.mime_type[:200] if item.mime_type else None)

    async def _list_offered(self, sdk: Any) -> None:
        caps = sdk.server_capabilities
        for kind in ("tools", "prompts", "resources"):
            if getattr(caps, kind, None) is not None:
                await self._list(sdk, kind)
        self.instructions = _cut(sdk.instructions) or None

    async def _listen(self, sdk: Any) -> None:
        """On a 2026-era connection, list changes arrive on a subscription (the handler sees them)."""
        caps = sdk.server_capabilities
        wants = {f"{kind}_list_changed": True for kind in ("tools", "prompts", "resources")
                 if getattr(getattr(caps, kind, None), "list_changed", False)}
        if not wants:
            return
        try:
            async with sdk.listen(**wants) as subscription:
                async for event in subscription:
                    kind = type(event).__name__.removesuffix("ListChanged").lower()
                    if kind in ("tools", "prompts", "resources"):
                        self._want(kind)
        except Exception as exc:  # the subscription is a convenience: its loss costs only list updates
            log.info("MCP server %s: list-change subscription ended: %s", self.spec.name, self._redact(_errors_text(exc)))

    async def _connect(self) -> None:
        """One connection: start, list, then serve until it is lost or the server is stopped.
        Raises McpError when it could not start; returns when a ready connection ended."""
        import mcp
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        spec = self.spec
        self._lost = asyncio.Event()
        self._lost_reason = ""
        self._relist.clear()
        self._notes.clear()
        self._flood_window, self._flood_count, self._flood_seconds = 0.0, 0, 0
        self._flooded = False
        loop = asyncio.get_running_loop()
        ready = False
        started_at = time.monotonic()
        try:
            import anyio

            # The deadline covers the start, initialize and the first listings, then is lifted. A
            # stdio server's starts when its program runs: the home it runs in may start first.
            scope = anyio.CancelScope(deadline=anyio.current_time() + (HOME_START_LIMIT_S if spec.transport == "stdio" else spec.startup_timeout_sec))

            def program_started() -> None:
                scope.deadline = anyio.current_time() + spec.startup_timeout_sec

            transport = self._connector(program_started)
            self._start_scope = scope
            with scope:
                client = mcp.Client(transport, mode=CONNECT_MODE, message_handler=self._on_message,
                                    client_info=_client_info())
                async with client:
                    await self._list_offered(client)
                    scope.deadline = math.inf
                    self._start_scope = None
                    listener = None
                    if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                        listener = loop.create_task(self._listen(client))
                    self._sdk = client
                    self.pid = getattr(transport, "pid", None)
                    ready = True
                    self._set("ready", self._note())
                    started_at = time.monotonic()
                    try:
                        await self._serve(client)
                    finally:
                        self._sdk = None
                        if listener is not None:
                            listener.cancel()
                            with contextlib.suppress(BaseException):
                                await listener
            if self._flooded and not ready:
                raise McpError(self._start_failure(self._lost_reason))
            if scope.cancelled_caught and not ready and spec.transport == "stdio" and getattr(transport, "pid", None) is None:
                raise McpError(self._start_failure(f"its program did not start within {HOME_START_LIMIT_S:g} s (the ToolService's home was not ready)"))
            if scope.cancelled_caught and not ready:
                raise McpError(self._start_failure(f"it did not finish starting (initialize and listing) within {spec.startup_timeout_sec:g} s; "
                                                   f"raise startup_timeout_sec under {self._key} if it is slow to start"))
        except McpError:
            raise
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if not ready:
                raise McpError(self._start_failure(_errors_text(exc))) from None
            self._mark_lost(self._lost_reason or _errors_text(exc))
        finally:
            self.pid = None
            self._sdk = None
            self._start_scope = None
        self._stable = ready and time.monotonic() - started_at >= STABLE_AFTER_S

    def _start_failure(self, why: str) -> str:
        if self._lost.is_set() and self._lost_reason:
            why = self._lost_reason if "within" not in why else f"{why} ({self._lost_reason})"
        tail = self._transport.stderr.text() if self._transport is not None else ""
        text = f"the MCP server {self.spec.name!r} could not be started: {why}"
        return f"{text}\nits last stderr lines:\n{tail}" if tail else text

    async def _until_lost(self, awaitable: Any) -> tuple[bool, Any]:
        """Await `awaitable` unless the connection is lost first: (lost, its result)."""
        work = asyncio.ensure_future(awaitable)
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            await asyncio.wait({work, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            if not work.done():
                work.cancel()
                with contextlib.suppress(BaseException):
                    await work
        if self._lost.is_set():
            return True, None
        return False, work.result()

    async def _serve(self, client: Any) -> None:
        """Relist what changed until the connection is lost: one listing at a time, at least `gap`
        apart; the gap doubles while changes keep arriving before it ends."""
        gap = RELIST_GAP_S
        last = -math.inf
        while not self._lost.is_set():
            lost, _ = await self._until_lost(self._relist_event.wait())
            if lost:
                return
            wait = last + gap - time.monotonic()
            if wait > 0:
                lost, _ = await self._until_lost(asyncio.sleep(wait))
                if lost:
                    return
                gap = min(gap * 2, RELIST_GAP_MAX_S)
            elif time.monotonic() - last > 2 * gap:
                gap = RELIST_GAP_S
            self._relist_event.clear()
            kinds, self._relist = self._relist, set()
            try:
                for kind in sorted(kinds):
                    lost, _ = await self._until_lost(asyncio.wait_for(self._list(client, kind), self.spec.startup_timeout_sec))
                    if lost:
                        return
            except Exception as exc:
                log.info("MCP server %s: listing %s after a change failed: %s", self.spec.name, sorted(kinds), self._redact(_errors_text(exc)))
                if _is_transport_error(exc):
                    self._mark_lost(_errors_text(exc))
                continue
            finally:
                last = time.monotonic()
            if self.state == "ready":
                self.error = self._note()
            self.generation += 1
            self._on_change(self, False)

    async def run(self) -> None:
        """The runner: start; after a crash, restart with backoff; at most `len(delays)` attempts in a row."""
        try:
            await load_sdk()
            try:
                await self._connect()
            except McpError as exc:
                self._set("failed", str(exc))
                return
            while not self._stopping:
                if self._stable:
                    self._attempt = 0
                if self._attempt >= len(self._delays):
                    self._set("failed", f"the MCP server {self.spec.name!r} crashed ({self._describe()}) and did not start again after "
                                        f"{len(self._delays)} attempts; fix it and start a new session")
                    return
                delay = self._delays[self._attempt]
                self._attempt += 1
                self._retry_at = time.monotonic() + delay
                self._set("restarting", f"the MCP server {self.spec.name!r} crashed: {self._describe()}")
                await asyncio.sleep(delay)
                try:
                    await self._connect()
                except McpError as exc:
                    self._lost_reason = self._redact(str(exc)).removeprefix(f"the MCP server {self.spec.name!r} could not be started: ")
                    self._stable = False
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not kill the session; the server is reported failed
            log.error("MCP server %s runner failed: %s", self.spec.name, self._redact(_errors_text(exc)))
            self._set("failed", f"the MCP server {self.spec.name!r} failed: {_errors_text(exc)}")

    def _stopped(self) -> None:
        self._stopping = True
        self._mark_lost("the session is closing")
        if self.state != "stopped":
            self._set("stopped")


class _HttpTransport:
    """The SDK's streamable HTTP transport, closing its httpx2 client after it."""

    def __init__(self, inner: Any, http: Any) -> None:
        self._inner = inner
        self._http = http

    async def __aenter__(self) -> Any:
        await self._http.__aenter__()
        try:
            return await self._inner.__aenter__()
        except BaseException:
            await self._http.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._inner.__aexit__(*exc)
        finally:
            await self._http.__aexit__(None, None, None)


def default_http_client(headers: dict[str, str]) -> httpx2.AsyncClient:
    """An httpx2 client for one server: its headers, 10 s to connect, 5 min to read a stream; its
    answers asked uncompressed and bounded at 16 MiB a body (an event stream's: an event)."""
    import httpx2

    from .transport import bounded_bodies

    headers = {**{k: v for k, v in headers.items() if k.lower() != "accept-encoding"}, "Accept-Encoding": "identity"}
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, connect=10.0, read=300.0),
                              event_hooks={"response": [bounded_bodies()]})


def _is_transport_error(exc: BaseException) -> bool:
    """Whether an error means the connection itself is gone (not a bad answer)."""
    import httpx2

    if isinstance(exc, BaseExceptionGroup):
        return any(_is_transport_error(e) for e in exc.exceptions)
    import anyio

    return isinstance(exc, httpx2.TransportError | anyio.BrokenResourceError | anyio.ClosedResourceError | ConnectionError | EOFError)


def _client_info() -> Any:
    import mcp_types

    from .. import __version__

    return mcp_types.Implementation(name="osprey", version=__version__)


# ---------------------------------------------------------------------------------- servers


class McpServers:
    """The servers of one session: `start` schedules each one's runner and returns at once;
    `close` ends them all. `on_state(server)` is called on each change of a server's state."""

    def __init__(self, specs: Sequence[McpServerSpec], *, client: ToolClient | None, workdir: str,
                 on_state: Callable[[McpServer], None] = lambda server: None,
                 http_client_factory: Callable[[dict[str, str]], httpx2.AsyncClient] | None = None,
                 restart_delays: Sequence[float] = RESTART_DELAYS) -> None:
        self._on_state = on_state
        self.servers: dict[str, McpServer] = {
            spec.name: McpServer(spec, client=client, workdir=workdir, on_change=self._changed,
                                 http_client_factory=http_client_factory, restart_delays=restart_delays)
            for spec in specs}
        self._tasks: list[asyncio.Task[None]] = []
        self._settled = asyncio.Event()
        self._closed = False

    def _changed(self, server: McpServer, state_changed: bool) -> None:
        if all(s.settled for s in self.servers.values()):
            self._settled.set()
        if state_changed:
            try:
                self._on_state(server)
            except Exception:
                log.exception("on_state for MCP server %s raised", server.spec.name)

    def start(self) -> None:
        """Schedule every server's runner task (the SDK is imported in a worker thread)."""
        if self._tasks or self._closed:
            return
        for server in self.servers.values():
            self._tasks.append(asyncio.get_running_loop().create_task(server.run(), name=f"mcp server {server.spec.name}"))
        if not self.servers:
            self._settled.set()

    @property
    def generation(self) -> int:
        return sum(server.generation for server in self.servers.values())

    async def wait_started(self, timeout: float) -> None:
        """Wait until every server has been ready or failed (at most `timeout` seconds)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._settled.wait(), timeout)

    async def close(self) -> None:
        """End every server and its runner; idempotent."""
        if self._closed:
            return
        self._closed = True
        gentle: list[asyncio.Task[None]] = []
        for server, task in zip(self.servers.values(), self._tasks, strict=False):
            server._stopping = True
            if server.state == "ready":
                gentle.append(task)  # it leaves its connection once `lost` is set
            else:
                task.cancel()  # starting, or waiting to restart
            server._mark_lost("the session is closing")
        if self._tasks:
            _done, pending = await asyncio.wait(self._tasks, timeout=CLOSE_TIMEOUT_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=CLOSE_TIMEOUT_S)
        for server in self.servers.values():
            server._stopped()
