"""The web tools: `web_fetch` (model-supplied URLs, behind the destination guard) and `web_search`
(the search service the person configured)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

    from ..config import Settings
    from ..tools.base import Tool


def web_tools(settings: Settings, *, http: httpx.AsyncClient | None = None) -> list[Tool]:
    """`web_fetch` always; `web_search` only when a search service is configured. `http` is the
    host client the search requests go through (the fetcher never uses a shared client: each of its
    connections is pinned to the address the guard checked)."""
    from .fetch_tool import web_fetch_tool

    tools = [web_fetch_tool()]
    if settings.web_search is not None:
        from .search import web_search_tool

        tools.append(web_search_tool(settings.web_search, http=http))
    return tools
