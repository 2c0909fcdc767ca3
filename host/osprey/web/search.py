"""`web_search`: one query to the search service the person configured (Exa, Brave or SearXNG),
answered as numbered results with title, URL and snippet. The endpoint comes from the person's
configuration, not from the model, so the fetch guard does not apply to it; the request is still
bounded in time (15 s) and size (5 MiB)."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import Field

from ..config import ResolvedWebSearch
from ..errors import ToolError
from ..tools.base import Invocation, Tool, ToolContext, ToolInput, ToolOutcome

SEARCH_TIMEOUT_SECONDS = 15.0
MAX_RESPONSE_BYTES = 5 * 1024 * 1024
MAX_ERROR_BYTES = 64 * 1024
DEFAULT_RESULTS = 5
MAX_RESULTS = 20
SNIPPET_CHARS = 500
USER_AGENT = "osprey-web-search/0.1"

PROVIDER_NAMES = {"exa": "Exa", "brave": "Brave Search", "searxng": "SearXNG"}
KEY_SETTINGS = {"exa": "web_search.exa_api_key_env (EXA_API_KEY by default)", "brave": "web_search.brave_api_key_env (BRAVE_API_KEY by default)"}


class SearchError(ToolError):
    """A search failed; the category is search_auth, search_rate_limited, search_failed or timeout."""


@dataclass(frozen=True)
class SearchHit:
    title: str
    url: str
    snippet: str


def clamp_count(value: int) -> int:
    return max(1, min(MAX_RESULTS, value))


def _plain(text: Any, limit: int = SNIPPET_CHARS) -> str:
    """A snippet as one line of plain text: markup some services leave in (Brave's <strong>) removed."""
    if not isinstance(text, str) or not text:
        return ""
    if "<" in text or "&" in text:
        from bs4 import BeautifulSoup

        text = BeautifulSoup(text, "html.parser").get_text()
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _hits(provider: str, payload: Any, count: int) -> list[SearchHit]:
    if not isinstance(payload, dict):
        raise SearchError("search_failed", f"{PROVIDER_NAMES[provider]} answered with JSON that is not an object")
    if provider == "brave":
        web = payload.get("web")
        rows = web.get("results") if isinstance(web, dict) else []
    else:
        rows = payload.get("results")
    if not isinstance(rows, list):
        rows = []
    hits: list[SearchHit] = []
    for row in rows:
        if not isinstance(row, dict):
            continue
        url = row.get("url")
        if not isinstance(url, str) or not url:
            continue
        if provider == "exa":
            highlights = row.get("highlights")
            snippet = " … ".join(h for h in highlights if isinstance(h, str)) if isinstance(highlights, list) else ""
            snippet = snippet or row.get("summary") or row.get("text") or ""
        elif provider == "brave":
            snippet = row.get("description") or ""
            extra = row.get("extra_snippets")
            if not snippet and isinstance(extra, list) and extra:
                snippet = extra[0]
        else:
            snippet = row.get("content") or ""
        hits.append(SearchHit(_plain(row.get("title"), 300) or url, url, _plain(snippet)))
        if len(hits) >= count:
            break
    return hits


def _error_detail(body: bytes) -> str:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return _plain(body.decode("utf-8", "replace"), 300)
    if isinstance(payload, dict):
        for key in ("error", "message", "detail"):
            value = payload.get(key)
            if isinstance(value, dict):
                value = value.get("detail") or value.get("message") or value.get("code")
            if isinstance(value, str) and value:
                return _plain(value, 300)
    return _plain(json.dumps(payload), 300)


class WebSearcher:
    """Sends one query to the configured service. `http` is a host client to reuse; without it each
    search opens (and closes) a client of its own."""

    def __init__(self, service: ResolvedWebSearch, *, http: httpx.AsyncClient | None = None, timeout: float = SEARCH_TIMEOUT_SECONDS) -> None:
        self.service = service
        self._http = http
        self._timeout = timeout

    @property
    def provider_name(self) -> str:
        return PROVIDER_NAMES[self.service.provider]

    def _request(self, client: httpx.AsyncClient, query: str, count: int) -> httpx.Request:
        s = self.service
        key = s.api_key.get_secret_value() if s.api_key is not None else ""
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        timeout = httpx.Timeout(self._timeout)
        if s.provider == "exa":
            body = {"query": query, "numResults": count, "type": "auto", "contents": {"highlights": {"maxCharacters": SNIPPET_CHARS}}}
            return client.build_request("POST", f"{s.url}/search", json=body, headers={**headers, "x-api-key": key}, timeout=timeout)
        if s.provider == "brave":
            params = {"q": query, "count": str(count), "text_decorations": "false"}
            return client.build_request("GET", f"{s.url}/res/v1/web/search", params=params, headers={**headers, "X-Subscription-Token": key}, timeout=timeout)
        return client.build_request("GET", f"{s.url}/search", params={"q": query, "format": "json"}, headers=headers, timeout=timeout)

    async def search(self, query: str, count: int = DEFAULT_RESULTS) -> list[SearchHit]:
        count = clamp_count(count)
        try:
            async with asyncio.timeout(self._timeout):
                if self._http is not None:
                    return await self._search(self._http, query, count)
                async with httpx.AsyncClient(timeout=httpx.Timeout(self._timeout)) as client:
                    return await self._search(client, query, count)
        except (TimeoutError, httpx.TimeoutException):
            raise SearchError("timeout", f"{self.provider_name} did not answer within {self._timeout:g} s; try again") from None
        except httpx.HTTPError as exc:
            raise SearchError("search_failed", f"could not reach {self.provider_name} at {self.service.url}: {type(exc).__name__}: {exc}") from None

    async def _search(self, client: httpx.AsyncClient, query: str, count: int) -> list[SearchHit]:
        name = self.provider_name
        request = self._request(client, query, count)
        response = await client.send(request, stream=True)
        try:
            if response.status_code != 200:
                detail = _error_detail(await self._read(response, MAX_ERROR_BYTES, cut=True))
                raise self._status_error(response, detail)
            body = await self._read(response, MAX_RESPONSE_BYTES, cut=False)
        finally:
            await response.aclose()
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise SearchError("search_failed", f"{name} answered with something that is not JSON ({len(body)} bytes); check web_search's URL") from None
        return _hits(self.service.provider, payload, count)

    async def _read(self, response: httpx.Response, limit: int, *, cut: bool) -> bytes:
        parts: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            parts.append(chunk)
            if size > limit:
                if cut:
                    return b"".join(parts)[:limit]
                raise SearchError("search_failed", f"{self.provider_name}'s answer is larger than {limit // (1024 * 1024)} MiB; it was not read")
        return b"".join(parts)

    def _status_error(self, response: httpx.Response, detail: str) -> SearchError:
        name = self.provider_name
        status = response.status_code
        said = f": {detail}" if detail else ""
        provider = self.service.provider
        if status in (401, 403):
            if provider == "searxng":
                return SearchError("search_auth", f"{name} refused the search (HTTP {status}){said}. Its JSON output may be disabled: add json to search.formats in the instance's settings.yml.")
            return SearchError("search_auth", f"{name} refused the API key (HTTP {status}){said}. Check the key in the variable named by {KEY_SETTINGS[provider]}.")
        if status == 429:
            retry = response.headers.get("retry-after", "").strip()
            when = f" after {retry[:20]} seconds" if retry.isdigit() else " in a while"
            return SearchError("search_rate_limited", f"{name} rate limited the search (HTTP 429){said}. This is temporary: try again{when}.")
        if status >= 500:
            return SearchError("search_failed", f"{name} failed with HTTP {status}{said}. This is usually temporary: try again.")
        return SearchError("search_failed", f"{name} refused the search with HTTP {status}{said}.")


def format_hits(query: str, provider_name: str, hits: list[SearchHit]) -> str:
    if not hits:
        return f"No results for {query!r} ({provider_name})."
    lines = [f"{len(hits)} results for {query!r} ({provider_name}):"]
    for number, hit in enumerate(hits, 1):
        lines.append("")
        lines.append(f"{number}. {hit.title}")
        lines.append(f"   {hit.url}")
        if hit.snippet:
            lines.append(f"   {hit.snippet}")
    return "\n".join(lines)


class WebSearchInput(ToolInput):
    query: str = Field(min_length=1, max_length=2000, description="What to search the web for.")
    count: int = Field(DEFAULT_RESULTS, description=f"How many results (default {DEFAULT_RESULTS}; clamped to 1-{MAX_RESULTS}).")


def web_search_tool(service: ResolvedWebSearch, *, http: httpx.AsyncClient | None = None, timeout: float = SEARCH_TIMEOUT_SECONDS) -> Tool:
    searcher = WebSearcher(service, http=http, timeout=timeout)

    async def run(call: Invocation, ctx: ToolContext) -> ToolOutcome:
        a: WebSearchInput = call.input
        query = a.query.strip()
        if not query:
            return ToolOutcome("Error (invalid_arguments): the query is empty.", True, "invalid_arguments")
        hits = await searcher.search(query, a.count)
        return ToolOutcome(format_hits(query, searcher.provider_name, hits))

    description = (
        f"Search the web ({searcher.provider_name}) and return the top results as title, URL and snippet. "
        "Use web_fetch to read a result in full."
    )
    # Read-only but not trusted: the query leaves the machine, so approval policies decide.
    return Tool.from_model("web_search", description, WebSearchInput, run, read_only=True)
