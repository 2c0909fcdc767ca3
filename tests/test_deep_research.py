"""The bundled deep-research workflow against a loopback SearXNG-speaking search server, loopback
pages and the scripted model server: the researchers search and read the pages, what they found
(with the URLs) reaches the writer, and the report cites those URLs; the fan-out is bounded; and
without a search service `/deep-research` says how to configure one before any model request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from session_harness import Harness
from test_session_parts import server_settings
from test_tui import SIZE, TuiRig, notices, started, type_prompt, until
from test_web_fetch import LoopbackServer, Seen
from test_web_fetch import Reply as Page

import osprey.web
from osprey.agents.workflows.discovery import discover_workflows
from osprey.config import ResolvedWebSearch
from osprey.events import Event
from osprey.session.core import Session
from osprey.testing.model_server import ModelServer, RecordedRequest, Reply
from osprey.web.fetch import WebFetcher
from osprey.web.fetch_tool import web_fetch_tool

QUESTION = "Where do ospreys nest and what do they eat?"
HTML = {"Content-Type": "text/html; charset=utf-8"}


def page(title: str, fact: str) -> Page:
    return Page(200, HTML, f"<html><head><title>{title}</title></head><body><h1>{title}</h1><p>{fact}</p></body></html>".encode())


def searxng(urls: list[str]) -> Any:
    def answer(seen: Seen) -> Page:
        query = parse_qs(urlsplit(seen.target).query)
        assert query["format"] == ["json"]
        results = [{"url": url, "title": f"Result {i}", "content": f"about {query['q'][0]}", "engine": "duckduckgo"} for i, url in enumerate(urls)]
        return Page(200, {"Content-Type": "application/json"}, json.dumps({"query": query["q"][0], "results": results}).encode())

    return answer


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, {"notes.txt": "alpha\n"}, git=True)


@pytest.fixture
def loopback_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sessions' web_fetch may reach loopback pages (the fetcher's test switch; nothing else reaches it)."""
    made = osprey.web.web_tools

    def web_tools(settings: Any, **kwargs: Any) -> list[Any]:
        tools = [tool for tool in made(settings, **kwargs) if tool.name != "web_fetch"]
        return [web_fetch_tool(WebFetcher(allow_loopback_for_tests=True)), *tools]

    monkeypatch.setattr(osprey.web, "web_tools", web_tools)


def research_session(harness: Harness, server: ModelServer, search: LoopbackServer, events: list[Event], **workflows: Any) -> Session:
    options = server_settings(harness, server)
    settings = options.settings
    update: dict[str, Any] = {"web_search": ResolvedWebSearch(provider="searxng", url=search.url("").rstrip("/"))}
    if workflows:
        update["workflows"] = settings.workflows.model_copy(update=workflows)
    return Session(options.model_copy(update={"settings": settings.model_copy(update=update)}), emit=events.append)


def bundled(harness: Harness) -> Any:
    [found] = [w for w in discover_workflows(harness.workspace, harness.home) if w.name == "deep-research"]
    assert found.scope == "bundled" and found.runnable
    return found


def tool_names(request: RecordedRequest) -> set[str]:
    return {tool["function"]["name"] for tool in request.body.get("tools") or []}


def dumped(request: RecordedRequest) -> str:
    return json.dumps(request.body["messages"])


async def test_the_report_cites_the_pages_the_researchers_read(harness: Harness, loopback_fetch: None) -> None:
    async with LoopbackServer({}) as pages:
        urls = {"nests": pages.url("/nests"), "food": pages.url("/food")}
        pages.routes.update({"/nests": page("Nests", "NEST-FACT: ospreys build stick nests on tall platforms."),
                             "/food": page("Food", "FOOD-FACT: ospreys eat live fish almost only.")})
        async with LoopbackServer({}) as search:
            search.routes["/search"] = searxng(list(urls.values()))
            # One agent at a time (the researchers still fan out with Promise.all), so the script's order is theirs.
            researcher = [
                lambda url: Reply.tool_call("web_search", {"query": "osprey"}),
                lambda url: Reply.tool_call("web_fetch", {"urls": [url]}),
                lambda url: Reply.text(f"- A fact from the page ({url})\n\nSources:\n{url}"),
            ]
            script = [Reply.text("Where do ospreys nest?\nWhat do ospreys eat?")]
            script += [step(url) for url in urls.values() for step in researcher]
            script.append(Reply.text("# Ospreys\n\nThey nest on platforms and eat fish."))  # the writer keeps no URL
            events: list[Event] = []
            with ModelServer(script) as server:
                session = research_session(harness, server, search, events, max_concurrent_agents=1)
                async with session:
                    assert session.workflows is not None
                    run = session.workflows.start(bundled(harness), QUESTION)
                    result = await run.result()
                requests = server.requests
    assert result.status == "done", result.error
    assert sorted(seen.target for seen in pages.seen) == ["/food", "/nests"]
    assert len(search.seen) == 2
    assert len(requests) == 8
    planner, writer = requests[0], requests[-1]
    assert QUESTION in dumped(planner) and not tool_names(planner) & {"web_search", "web_fetch"}
    researchers = requests[1:-1]
    assert all(tool_names(r) == {"web_search", "web_fetch"} for r in researchers)
    read = "".join(dumped(r) for r in researchers)
    assert "NEST-FACT" in read and "FOOD-FACT" in read  # the fetched pages reached the researchers' models
    assert not tool_names(writer) & {"web_search", "web_fetch"}
    merged = dumped(writer)
    assert "Where do ospreys nest?" in merged and "What do ospreys eat?" in merged
    for url in urls.values():
        assert url in merged  # the researchers' findings, with their URLs, reached the writer
        assert url in result.value  # and the report cites them
    assert result.value.startswith("# Ospreys")
    assert "Sources the researchers cited" in result.value


async def test_the_fan_out_is_bounded_to_five_researchers(harness: Harness, loopback_fetch: None) -> None:
    subs = [f"Sub-question {n}?" for n in range(1, 8)]
    async with LoopbackServer({}) as search:
        script = [Reply.text("\n".join(f"{n}. {s}" for n, s in enumerate(subs, 1)))]
        script += [Reply.text(f"Finding {n} (https://example.org/{n})") for n in range(1, 6)]
        script.append(Reply.text("The report, citing https://example.org/1 and the others."))
        events: list[Event] = []
        with ModelServer(script) as server:
            session = research_session(harness, server, search, events)
            async with session:
                assert session.workflows is not None
                run = session.workflows.start(bundled(harness), "Seven things at once?")
                result = await run.result()
                agents = list(run.agents)
            requests = server.requests
    assert result.status == "done", result.error
    assert len(requests) == 7 and len(agents) == 7  # a planner, five researchers, a writer
    merged = dumped(requests[-1])
    assert all(s in merged for s in subs[:5]) and not any(s in merged for s in subs[5:])
    assert all(f"https://example.org/{n}" in result.value for n in range(1, 6))


async def test_without_a_search_service_it_says_how_to_configure_one(tmp_path: Path) -> None:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".git").mkdir(parents=True)
    home.mkdir()
    rig = TuiRig(workspace, home, [[]])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert app.session is not None and app.session.settings.web_search is None
        await type_prompt(pilot, app, f"/deep-research {QUESTION}")
        await until(pilot, lambda: "no search service is configured" in notices(app))
        shown = notices(app)
        assert "searxng_url" in shown and "EXA_API_KEY" in shown and "BRAVE_API_KEY" in shown
        assert app.session.workflows is not None and not app.session.workflows.active()
    assert rig.providers[0].requests == []
    assert not [e for e in rig.events if "workflow" in e.type]


async def test_run_by_the_model_without_a_search_service_it_fails_at_once_saying_how_to_configure_one(harness: Harness) -> None:
    """`run_workflow` reaches the script without the TUI's check: the script sees `osprey.tools`
    lacks web_search and ends before any agent (no model request is spent)."""
    events: list[Event] = []
    with ModelServer([]) as server:
        session = Session(server_settings(harness, server), emit=events.append)
        async with session:
            assert session.settings.web_search is None and session.workflows is not None
            run = session.workflows.start(bundled(harness), QUESTION)
            result = await run.result()
        assert server.requests == []
    assert result.status == "failed" and run.agents == []
    assert result.error is not None and "deep-research.js" in result.error
    assert "no web search service" not in result.error and "none is configured" in result.error and "searxng_url" in result.error
