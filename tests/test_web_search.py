"""web_search against loopback servers that check each service's real request shape (method, path,
headers, query or JSON body) and answer with its real response shape; limits and errors; and which
service the settings select."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from pydantic import SecretStr
from test_web_fetch import LoopbackServer, Reply, Route, Seen

from osprey.config import ResolvedWebSearch, load_settings
from osprey.tools.base import ToolContext, ToolRegistry
from osprey.web import web_tools
from osprey.web.search import MAX_RESULTS, web_search_tool

KEY = "test-key-123"
JSON = {"Content-Type": "application/json"}


def exa_answer(seen: Seen) -> Reply:
    assert seen.method == "POST"
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["content-type"] == "application/json"
    body = json.loads(seen.body)
    n = body["numResults"]
    assert isinstance(body["query"], str) and isinstance(n, int)
    assert "highlights" in body["contents"]
    results = [
        {
            "id": f"https://exa.example/{i}",
            "title": f"Exa result {i}",
            "url": f"https://exa.example/{i}",
            "publishedDate": "2024-01-01T00:00:00.000Z",
            "author": None,
            "score": 0.5,
            "highlights": [f"highlight {i} about {body['query']}"],
            "highlightScores": [0.4],
        }
        for i in range(1, n + 1)
    ]
    return Reply(200, JSON, json.dumps({"requestId": "r1", "resolvedSearchType": "neural", "results": results, "costDollars": {"total": 0.005}}).encode())


def brave_answer(seen: Seen) -> Reply:
    assert seen.method == "GET"
    assert seen.headers["x-subscription-token"] == KEY
    assert seen.headers["accept"] == "application/json"
    query = parse_qs(urlsplit(seen.target).query)
    n = int(query["count"][0])
    results = [
        {"type": "search_result", "title": f"Brave <strong>result</strong> {i}", "url": f"https://brave.example/{i}", "description": f"about <strong>{query['q'][0]}</strong> &amp; more", "language": "en", "family_friendly": True}
        for i in range(1, n + 1)
    ]
    payload = {"type": "search", "query": {"original": query["q"][0], "more_results_available": True}, "mixed": {"type": "mixed", "main": []}, "web": {"type": "search", "results": results, "family_friendly": True}}
    return Reply(200, JSON, json.dumps(payload).encode())


def searxng_answer(seen: Seen) -> Reply:
    assert seen.method == "GET"
    query = parse_qs(urlsplit(seen.target).query)
    assert query["format"] == ["json"]
    results = [{"url": f"https://searx.example/{i}", "title": f"SearXNG result {i}", "content": f"content {i}", "engine": "duckduckgo", "engines": ["duckduckgo"], "score": 1.0, "category": "general"} for i in range(1, 31)]
    payload = {"query": query["q"][0], "number_of_results": 0, "results": results, "answers": [], "corrections": [], "infoboxes": [], "suggestions": [], "unresponsive_engines": []}
    return Reply(200, JSON, json.dumps(payload).encode())


ROUTES: dict[str, dict[str, Route]] = {
    "exa": {"/search": exa_answer},
    "brave": {"/res/v1/web/search": brave_answer},
    "searxng": {"/search": searxng_answer},
}


def service(provider: str, server: LoopbackServer) -> ResolvedWebSearch:
    key = SecretStr(KEY) if provider != "searxng" else None
    return ResolvedWebSearch(provider=provider, url=server.url("").rstrip("/"), api_key=key)


async def run_search(svc: ResolvedWebSearch, arguments: dict[str, Any], **kwargs: Any) -> Any:
    registry = ToolRegistry(max_result_chars=10_000_000)
    registry.add(web_search_tool(svc, **kwargs))
    ctx = ToolContext(client=None, cwd="/", roots=["/"], bash_max_output_bytes=0)  # type: ignore[arg-type]
    return await registry.call("web_search", arguments, ctx)


def numbered(text: str) -> list[str]:
    return [line.split(". ", 1)[1] for line in text.splitlines() if line[:1].isdigit() and ". " in line]


@pytest.mark.parametrize("provider", ["exa", "brave", "searxng"])
async def test_each_service_speaks_its_real_shape(provider: str) -> None:
    async with LoopbackServer(ROUTES[provider]) as server:
        outcome = await run_search(service(provider, server), {"query": "osprey harness"})
        seen = server.seen
    assert not outcome.is_error, outcome.text
    titles = numbered(outcome.text)
    assert len(titles) == 5  # the default count
    assert len(seen) == 1
    target = urlsplit(seen[0].target)
    if provider == "exa":
        assert target.path == "/search" and json.loads(seen[0].body)["numResults"] == 5
        assert "https://exa.example/1" in outcome.text and "highlight 1 about osprey harness" in outcome.text
    elif provider == "brave":
        query = parse_qs(target.query)
        assert target.path == "/res/v1/web/search" and query["q"] == ["osprey harness"] and query["count"] == ["5"]
        # Markup in titles and snippets is removed.
        assert titles[0] == "Brave result 1" and "about osprey harness & more" in outcome.text
    else:
        query = parse_qs(target.query)
        assert target.path == "/search" and query["q"] == ["osprey harness"] and query["format"] == ["json"]
        assert titles == [f"SearXNG result {i}" for i in range(1, 6)] and "content 1" in outcome.text


@pytest.mark.parametrize("provider", ["exa", "brave", "searxng"])
async def test_counts_are_clamped_to_one_and_twenty(provider: str) -> None:
    async with LoopbackServer(ROUTES[provider]) as server:
        many = await run_search(service(provider, server), {"query": "q", "count": 50})
        one = await run_search(service(provider, server), {"query": "q", "count": 0})
        three = await run_search(service(provider, server), {"query": "q", "count": 3})
        seen = server.seen
    assert [len(numbered(o.text)) for o in (many, one, three)] == [MAX_RESULTS, 1, 3]
    if provider == "exa":
        assert [json.loads(s.body)["numResults"] for s in seen] == [20, 1, 3]
    if provider == "brave":
        assert [parse_qs(urlsplit(s.target).query)["count"] for s in seen] == [["20"], ["1"], ["3"]]


async def test_a_slow_service_times_out() -> None:
    slow = {"/search": Reply(200, JSON, pieces=[b'{"results": [', b"]}"], pause=60.0)}
    async with LoopbackServer(slow) as server:
        outcome = await run_search(service("searxng", server), {"query": "q"}, timeout=0.5)
    assert outcome.is_error and outcome.category == "timeout"
    assert "SearXNG did not answer within 0.5 s" in outcome.text


async def test_an_oversized_answer_is_not_read() -> None:
    huge = b'{"results": [], "padding": "' + b"x" * (6 * 1024 * 1024) + b'"}'
    async with LoopbackServer({"/search": Reply(200, JSON, huge)}) as server:
        outcome = await run_search(service("searxng", server), {"query": "q"})
    assert outcome.is_error and outcome.category == "search_failed"
    assert "larger than 5 MiB" in outcome.text


async def test_errors_say_what_to_do() -> None:
    routes: dict[str, Route] = {
        "/search": Reply(401, JSON, b'{"error": "Invalid API key"}'),
        "/res/v1/web/search": Reply(429, {**JSON, "Retry-After": "7"}, b'{"type": "ErrorResponse", "error": {"code": "RATE_LIMITED", "detail": "Request rate limit exceeded"}}'),
    }
    async with LoopbackServer(routes) as server:
        unauthorised = await run_search(service("exa", server), {"query": "q"})
        limited = await run_search(service("brave", server), {"query": "q"})
    assert unauthorised.is_error and unauthorised.category == "search_auth"
    assert "HTTP 401" in unauthorised.text and "Invalid API key" in unauthorised.text and "EXA_API_KEY" in unauthorised.text
    assert limited.is_error and limited.category == "search_rate_limited"
    assert "HTTP 429" in limited.text and "Request rate limit exceeded" in limited.text and "try again after 7 seconds" in limited.text
    async with LoopbackServer({"/search": Reply(403, {"Content-Type": "text/html"}, b"<h1>403 Forbidden</h1>")}) as server:
        forbidden = await run_search(service("searxng", server), {"query": "q"})
    assert forbidden.category == "search_auth" and "settings.yml" in forbidden.text
    async with LoopbackServer({"/search": Reply(500, JSON, b"{}")}) as server:
        failed = await run_search(service("exa", server), {"query": "q"})
    assert failed.category == "search_failed" and "HTTP 500" in failed.text and "try again" in failed.text
    async with LoopbackServer({"/search": Reply(200, {"Content-Type": "text/html"}, b"<html>a login page</html>")}) as server:
        garbled = await run_search(service("searxng", server), {"query": "q"})
    assert garbled.category == "search_failed" and "not JSON" in garbled.text


async def test_a_shared_client_is_used_when_given() -> None:
    async with LoopbackServer(ROUTES["brave"]) as server, httpx.AsyncClient() as client:
        outcome = await run_search(service("brave", server), {"query": "shared"}, http=client)
        assert not client.is_closed
    assert len(numbered(outcome.text)) == 5


def _settings(tmp_path: Path, env: dict[str, str], config: str = "") -> Any:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(config)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return load_settings(work, {}, {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "x", **env})


async def test_the_tool_exists_only_when_a_service_is_configured(tmp_path: Path) -> None:
    assert [t.name for t in web_tools(_settings(tmp_path, {}))] == ["web_fetch"]
    async with LoopbackServer(ROUTES["exa"]) as exa, LoopbackServer(ROUTES["brave"]) as brave, LoopbackServer(ROUTES["searxng"]) as searx:
        config = f'[web_search]\nexa_url = "{exa.url("").rstrip("/")}"\nbrave_url = "{brave.url("").rstrip("/")}"\nsearxng_url = "{searx.url("").rstrip("/")}"\n'
        chosen = []
        for env in ({}, {"BRAVE_API_KEY": KEY}, {"BRAVE_API_KEY": KEY, "EXA_API_KEY": KEY}):
            tools = {t.name: t for t in web_tools(_settings(tmp_path, env, config))}
            assert set(tools) == {"web_fetch", "web_search"}
            assert tools["web_search"].read_only and not tools["web_search"].trusted
            assert tools["web_fetch"].read_only and not tools["web_fetch"].trusted
            registry = ToolRegistry()
            registry.add(tools["web_search"])
            ctx = ToolContext(client=None, cwd="/", roots=["/"], bash_max_output_bytes=0)  # type: ignore[arg-type]
            outcome = await registry.call("web_search", {"query": "which"}, ctx)
            assert not outcome.is_error, outcome.text
            chosen.append(outcome.text.split("(", 1)[1].split(")", 1)[0])
        # Automatic preference: Exa, then Brave, then SearXNG.
        assert chosen == ["SearXNG", "Brave Search", "Exa"]
        assert [len(s.seen) for s in (exa, brave, searx)] == [1, 1, 1]
