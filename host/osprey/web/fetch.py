"""`web_fetch`: one to five URLs fetched concurrently, each through the destination guard, each
redirect checked again, each connection pinned to the address the guard checked. Results come back
in the order asked, a failed URL as its own error section beside the others."""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urljoin

import httpcore
import httpx

from ..errors import ToolError
from ..tools.base import ToolOutcome
from .fetch_tool import (  # noqa: F401 - part of this module's API
    DEFAULT_CHARS,
    DEFAULT_TIMEOUT_SECONDS,
    DESCRIPTION,
    MAX_BODY_BYTES,
    MAX_CHARS,
    MAX_TIMEOUT_SECONDS,
    MAX_URLS,
    MIN_CHARS,
    MIN_TIMEOUT_SECONDS,
    WebFetchInput,
    clamp_chars,
    clamp_timeout,
    web_fetch_tool,
)
from .guard import BlockedURL, DestinationGuard, Resolver
from .pinned import PinnedTransport
from .render import Rendered, RenderError, render_bounded

MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "osprey-web-fetch/0.1"
ACCEPT = "text/html,application/xhtml+xml,application/json;q=0.9,text/plain;q=0.9,application/pdf;q=0.8,*/*;q=0.5"


class FetchError(ToolError):
    """One URL failed; the category says how (timeout, http_status, too_many_redirects, ...)."""


@dataclass
class Page:
    """One fetched URL."""

    url: str                       # the URL asked for
    final_url: str                 # where the last redirect led
    status: int
    content_type: str
    rendered: Rendered
    truncated: bool                # the body was longer than the limit and was cut
    redirects: list[str] = field(default_factory=list)


@dataclass
class FetchResult:
    url: str
    page: Page | None = None
    error: ToolError | None = None


_ssl_context: ssl.SSLContext | None = None


def default_ssl_context() -> ssl.SSLContext:
    """Certificate verification against the system's (or certifi's) CA bundle; loaded once."""
    global _ssl_context
    if _ssl_context is None:
        _ssl_context = httpx.create_ssl_context()
    return _ssl_context


def _decoder(encoding: str) -> Callable[[bytes, int], bytes] | None:
    """A bounded decompressor for the Content-Encoding, or None for identity. It never produces
    more than the room it is given, so a small compressed body cannot expand past the limit."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        wbits = zlib.MAX_WBITS | 32 if encoding != "deflate" else zlib.MAX_WBITS
        state: dict[str, Any] = {"d": zlib.decompressobj(wbits), "started": False}

        def decompress(chunk: bytes, room: int) -> bytes:
            try:
                out = state["d"].decompress(chunk, room)
            except zlib.error:
                if encoding == "deflate" and not state["started"]:
                    state["d"] = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, as some servers send
                    out = state["d"].decompress(chunk, room)
                else:
                    raise
            state["started"] = True
            return bytes(out)

        return decompress
    raise FetchError("unsupported_content", f"the server sent the body with Content-Encoding {encoding[:40]!r}, which web_fetch does not decode")


class WebFetcher:
    """Fetches URLs for `web_fetch`. `allow_loopback_for_tests` lets loopback and private
    destinations through; the session never passes it, and no flag, config key or environment
    variable can. `resolver`, `network_backend` and `ssl_context` exist for tests too."""

    def __init__(self, *, resolver: Resolver | None = None, network_backend: httpcore.AsyncNetworkBackend | None = None, ssl_context: ssl.SSLContext | None = None, allow_loopback_for_tests: bool = False) -> None:
        self.guard = DestinationGuard(resolver, allow_loopback_for_tests=allow_loopback_for_tests)
        self._network_backend = network_backend
        self._ssl_context = ssl_context

    async def fetch_many(self, urls: list[str], *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> list[FetchResult]:
        """Every URL at once; results in input order, failures as results."""
        return list(await asyncio.gather(*(self._guarded(url, clamp_timeout(timeout)) for url in urls[:MAX_URLS])))

    async def _guarded(self, url: str, timeout: float) -> FetchResult:
        try:
            async with asyncio.timeout(timeout):
                return FetchResult(url, page=await self.fetch(url, timeout))
        except TimeoutError:
            return FetchResult(url, error=FetchError("timeout", f"no complete answer within {timeout:g} s"))
        except ToolError as exc:
            return FetchResult(url, error=exc)
        except httpx.TimeoutException as exc:
            return FetchResult(url, error=FetchError("timeout", f"the server did not answer in time ({type(exc).__name__})"))
        except httpx.ConnectError as exc:
            return FetchResult(url, error=FetchError("connection_failed", f"could not connect: {exc}"))
        except httpx.HTTPError as exc:
            return FetchResult(url, error=FetchError("http_error", f"{type(exc).__name__}: {exc}"))
        except (zlib.error, OSError) as exc:
            return FetchResult(url, error=FetchError("http_error", f"the body could not be read: {exc}"))
        except Exception as exc:  # noqa: BLE001 - one URL's failure never takes its siblings down
            return FetchResult(url, error=FetchError("internal", f"{type(exc).__name__}: {str(exc)[:300]}"))

    async def fetch(self, url: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> Page:
        """One URL, following at most MAX_REDIRECTS redirects, each one checked again."""
        current = url
        redirects: list[str] = []
        for _hop in range(MAX_REDIRECTS + 1):
            destination = await self.guard.check(current)
            ssl_context = (self._ssl_context or default_ssl_context()) if destination.url.scheme == "https" else None
            transport = PinnedTransport(destination, ssl_context=ssl_context, network_backend=self._network_backend)
            headers = {"User-Agent": USER_AGENT, "Accept": ACCEPT, "Accept-Encoding": "gzip, deflate"}
            locations: list[str] = []
            async with httpx.AsyncClient(transport=transport, trust_env=False, follow_redirects=False, timeout=httpx.Timeout(timeout),
                                         event_hooks={"response": [partial(_take_location, locations)]}) as client:
                async with client.stream("GET", destination.url.url, headers=headers) as response:
                    if response.status_code in REDIRECT_STATUSES:
                        location = locations[0] if locations else None
                        if not location:
                            raise FetchError("http_status", f"HTTP {response.status_code} redirect without a Location header")
                        redirects.append(destination.url.url)
                        try:
                            current = urljoin(destination.url.url, location.strip())
                        except ValueError as exc:
                            raise FetchError("invalid_url", f"the redirect from {destination.url.url} leads to {location[:200]!r}, which is not a valid URL: {exc}") from None
                        continue
                    if response.status_code >= 400 or response.status_code < 200:
                        raise FetchError("http_status", f"HTTP {response.status_code} {response.reason_phrase}".rstrip() + f" from {destination.url.url}")
                    body, truncated = await self._read(response)
                    content_type = response.headers.get("content-type", "")
                    mime, charset = _parse_content_type(content_type)
            try:
                rendered = await render_bounded(body, mime, charset, truncated=truncated)
            except RenderError as exc:
                raise FetchError(exc.category, exc.message) from None
            return Page(url, destination.url.url, response.status_code, mime or "(none)", rendered, truncated, redirects)
        raise FetchError("too_many_redirects", f"more than {MAX_REDIRECTS} redirects (last: {current[:200]})")

    async def _read(self, response: httpx.Response) -> tuple[bytes, bool]:
        """At most MAX_BODY_BYTES of the decoded body; reading stops past the limit."""
        decoder = _decoder(response.headers.get("content-encoding", ""))
        body = bytearray()
        raw_size = 0
        async for chunk in response.aiter_raw():
            raw_size += len(chunk)
            room = MAX_BODY_BYTES + 1 - len(body)
            body += decoder(chunk, room) if decoder is not None else chunk[:room]
            if len(body) > MAX_BODY_BYTES or raw_size > MAX_BODY_BYTES:
                return bytes(body[:MAX_BODY_BYTES]), True
        return bytes(body), False


def _parse_content_type(value: str) -> tuple[str, str | None]:
    mime, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        name, _, val = param.partition("=")
        if name.strip().lower() == "charset":
            charset = val.strip().strip("\"'") or None
    return mime.strip().lower(), charset


# ---------------------------------------------------------------------------------------------
# The tool


def _window(text: str, start: int, size: int) -> tuple[str, str | None]:
    total = len(text)
    if start >= total and total:
        return "", f"[start_char={start:,} is past the end: the page has {total:,} characters]"
    end = min(total, start + size)
    piece = text[start:end]
    if start == 0 and end == total:
        return piece, None
    more = f"; call again with start_char={end} for more" if end < total else ""
    return piece, f"[characters {start:,}-{end:,} of {total:,}{more}]"


def format_results(results: list[FetchResult], *, max_chars: int, start_char: int) -> ToolOutcome:
    window = clamp_chars(max_chars)
    sections: list[str] = []
    for number, result in enumerate(results, 1):
        if result.error is not None or result.page is None:
            err = result.error or FetchError("internal", "no result")
            sections.append(f"## [{number}] {result.url}\nError ({err.category}): {err.message}")
            continue
        page = result.page
        r = page.rendered
        facts = [f"HTTP {page.status}", page.content_type]
        if r.encoding and r.kind != "pdf":
            facts.append(f"charset {r.encoding}")
        head = f"## [{number}] {page.final_url}"
        lines = [head, " · ".join(facts)]
        if page.redirects:
            lines.append(f"(redirected from {page.url})")
        if r.title:
            lines.append(f"Title: {r.title}")
        if page.truncated:
            lines.append(f"[the body was longer than {MAX_BODY_BYTES // (1024 * 1024)} MiB; only its start was read]")
        lines.extend(f"[{note}]" for note in r.notes)
        piece, note = _window(r.text, start_char, window)
        lines.append("")
        lines.append(piece if piece else "(no text)")
        if note:
            lines.append(note)
        sections.append("\n".join(lines))
    errors = [r.error for r in results if r.error is not None]
    failed = len(errors) == len(results)
    category = None
    if failed:
        categories = {e.category for e in errors}
        category = categories.pop() if len(categories) == 1 else "web_fetch_failed"
    return ToolOutcome("\n\n".join(sections), failed, category)


__all__ = ["BlockedURL", "FetchError", "FetchResult", "Page", "WebFetcher", "web_fetch_tool", "format_results", "clamp_chars", "clamp_timeout"]


async def _take_location(taken: list[str], response: httpx.Response) -> None:
    """Move a redirect's Location out of the response before httpx parses it: the next hop is
    joined and checked here like any URL (a Location httpx cannot parse is then `invalid_url`, not
    an exception from inside httpx)."""
    if response.status_code in REDIRECT_STATUSES and "location" in response.headers:
        taken.append(response.headers["location"])
        del response.headers["location"]
