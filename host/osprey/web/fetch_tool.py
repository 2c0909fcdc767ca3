"""`web_fetch` as the catalogue sees it: its input, limits and description. The fetching itself is
in `fetch.py`, loaded at the first call (it brings httpcore's connection pool, the guard and the
renderers), so a session that never fetches a page does not pay for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from ..tools.base import Invocation, Tool, ToolContext, ToolInput, ToolOutcome

if TYPE_CHECKING:
    from .fetch import WebFetcher

MAX_URLS = 5
MAX_BODY_BYTES = 5 * 1024 * 1024
MIN_CHARS = 2_000
MAX_CHARS = 100_000
DEFAULT_CHARS = 20_000
MIN_TIMEOUT_SECONDS = 1.0
MAX_TIMEOUT_SECONDS = 120.0
DEFAULT_TIMEOUT_SECONDS = 30.0


def clamp_chars(value: int) -> int:
    return max(MIN_CHARS, min(MAX_CHARS, value))


def clamp_timeout(value: float) -> float:
    return max(MIN_TIMEOUT_SECONDS, min(MAX_TIMEOUT_SECONDS, value))


class WebFetchInput(ToolInput):
    urls: list[str] = Field(min_length=1, max_length=MAX_URLS, description="One to five http:// or https:// URLs, fetched at once; results come back in this order.")
    max_chars: int = Field(DEFAULT_CHARS, description=f"Characters of each page to return (default {DEFAULT_CHARS:,}; clamped to {MIN_CHARS:,}-{MAX_CHARS:,}).")
    start_char: int = Field(0, ge=0, description="Where each page's window starts, to read a long page in parts (default 0).")
    timeout_seconds: float = Field(DEFAULT_TIMEOUT_SECONDS, description=f"Time allowed for each URL, redirects included (default {DEFAULT_TIMEOUT_SECONDS:g}; at most {MAX_TIMEOUT_SECONDS:g}).")

    @field_validator("urls", mode="before")
    @classmethod
    def _one_url(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


DESCRIPTION = (
    "Fetch one to five web pages (http/https) at once and return their readable text: HTML as Markdown-like text, "
    "plain text, JavaScript, JSON (pretty-printed), XML, and PDF text. Private, loopback and local-network addresses, "
    "and URLs carrying credentials, are refused. Use start_char to read further into a long page."
)


def web_fetch_tool(fetcher: WebFetcher | None = None) -> Tool:
    """The `web_fetch` tool; tests pass a fetcher of their own (loopback servers, stub resolvers).
    The fetcher (and all it imports) is made at the first call."""
    made: list[WebFetcher] = [fetcher] if fetcher is not None else []

    async def run(call: Invocation, ctx: ToolContext) -> ToolOutcome:
        from .fetch import WebFetcher, format_results

        if not made:
            made.append(WebFetcher())
        a: WebFetchInput = call.input
        results = await made[0].fetch_many(a.urls, timeout=a.timeout_seconds)
        return format_results(results, max_chars=a.max_chars, start_char=a.start_char)

    # Read-only (it changes nothing in the workspace) but not trusted: what it sends leaves the
    # machine, so the approval policies decide about it like any other untrusted tool.
    return Tool.from_model("web_fetch", DESCRIPTION, WebFetchInput, run, read_only=True)
