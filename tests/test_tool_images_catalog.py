"""Whether a model takes images comes from the model catalog: a session whose cached catalog says
its model takes none sends notes in place of tool results' images (asked at the first request that
holds one, from the cache alone); a model the catalog knows to take them, or does not know, gets
them. `osprey sessions show` and the headless terminal print a line for each image a result
returned, never its data."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from session_harness import FAST_RETRY, Harness
from test_e2e_agent import osprey
from test_tool_images import BIG_PNG, PNG, anthropic_results, image_tool, screenshot, tool_messages

from osprey.catalog import Catalog, ModelInfo, catalog_scope, save_cache
from osprey.config import load_settings
from osprey.events import ToolCallEvent, ToolResultEvent
from osprey.messages import AssistantMessage, ImageBlock, ModelRequest, ToolCall, ToolResultMessage, UserMessage
from osprey.providers import ImagesAsked, make_provider
from osprey.render import TerminalRenderer
from osprey.session.core import Session, SessionOptions
from osprey.sessions.journal import Journal, journal_path
from osprey.testing.model_server import ModelServer, Reply
from osprey.tools.base import StaticTools

DIALECTS = ("openai", "anthropic")
NOTE = "[image: image/png, 12 KB, not shown: the model takes no images]"


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, {"notes.txt": "alpha\n"}, git=True)


def settings_for(harness: Harness, server: ModelServer, dialect: str) -> Any:
    settings = load_settings(harness.workspace, {"provider": dialect, "model": "m", "base_url": server.base_url, "approval_policy": "never"},
                             {"OSPREY_HOME": str(harness.home), "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
    return settings.model_copy(update={"retry": FAST_RETRY})


def cache_model(harness: Harness, server: ModelServer, dialect: str, images: bool | None) -> None:
    """The cached catalog of this endpoint, listing the model `m` with what it knows of images."""
    save_cache(harness.home, Catalog(models=[ModelInfo(provider=dialect, id="m", images=images)], source="endpoint",
                                     scope=catalog_scope(dialect, server.base_url)))


async def look_at_the_screen(harness: Harness, server: ModelServer, dialect: str, *, cache: bool | None | str = "none",
                             journal: Journal | None = None) -> Session:
    """A session (the provider its settings name) whose tool returns an image; `cache` is what the
    catalog says of the model, written after the session started ("none": no cache at all)."""
    tools = [image_tool("shot", screenshot("the screen", ImageBlock(media_type="image/png", data=BIG_PNG)))]
    session = Session(SessionOptions(settings=settings_for(harness, server, dialect)), emit=harness.events.append,
                      tool_sources=[StaticTools("pictures", tools)], journal=journal)
    async with session:
        if cache != "none":
            assert isinstance(cache, bool) or cache is None
            cache_model(harness, server, dialect, cache)  # what counts is the cache at the first request with an image
        end = await session.submit("Look at the screen.")
    assert end.outcome == "Completed", end
    server.assert_clean()
    return session


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_model_the_cached_catalog_says_takes_no_images_gets_a_note(harness: Harness, dialect: str) -> None:
    with ModelServer([Reply.tool_call("shot", {}, id="c1"), Reply.text("ok")]) as server:
        await look_at_the_screen(harness, server, dialect, cache=False)
        body = server.requests[1].body
    expected = f"the screen\n{NOTE}"
    if dialect == "openai":
        assert [m["content"] for m in tool_messages(body)] == [expected]
        assert body["messages"][-1]["role"] == "tool"  # no user message of images follows
    else:
        assert [r["content"] for r in anthropic_results(body)] == [expected]
    assert BIG_PNG[:40] not in json.dumps(body)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("cache", [True, None, "none"])
async def test_a_model_the_catalog_knows_to_take_images_or_does_not_know_gets_them(harness: Harness, dialect: str, cache: Any) -> None:
    with ModelServer([Reply.tool_call("shot", {}, id="c1"), Reply.text("ok")]) as server:
        await look_at_the_screen(harness, server, dialect, cache=cache)
        body = server.requests[1].body
    assert BIG_PNG in json.dumps(body) and "not shown" not in json.dumps(body)


async def test_the_catalog_is_asked_once_at_the_first_request_that_holds_an_image(harness: Harness) -> None:
    asked: list[str] = []

    def takes_images() -> bool:
        asked.append("asked")
        return False

    image = ImageBlock(media_type="image/png", data=BIG_PNG)
    plain = [UserMessage(content="go"), AssistantMessage(tool_calls=[ToolCall(id="c1", name="ls")]),
             ToolResultMessage(tool_call_id="c1", name="ls", content="a.txt")]
    pictured = [*plain, AssistantMessage(tool_calls=[ToolCall(id="c2", name="shot")]),
                ToolResultMessage(tool_call_id="c2", name="shot", content="the screen", images=[image])]
    with ModelServer([Reply.text("one"), Reply.text("two"), Reply.text("three")]) as server:
        async with httpx.AsyncClient() as http:
            provider = make_provider(settings_for(harness, server, "openai"), http, images=takes_images)
            assert isinstance(provider, ImagesAsked) and (provider.name, provider.model) == ("openai", "m")
            await provider.complete(ModelRequest(system="s", messages=plain, tools=[]))
            assert asked == []  # no image yet: the catalog is not read
            await provider.complete(ModelRequest(system="s", messages=pictured, tools=[]))
            await provider.complete(ModelRequest(system="s", messages=[*pictured, AssistantMessage(text="two"), UserMessage(content="again")],
                                                 tools=[]))
            assert asked == ["asked"]
            # Without the question, images are sent as before.
            assert not isinstance(make_provider(settings_for(harness, server, "openai"), http), ImagesAsked)
        bodies = [json.dumps(r.body) for r in server.requests]
    assert NOTE in bodies[1] and NOTE in bodies[2] and BIG_PNG[:40] not in bodies[1] + bodies[2]


# ------------------------------------------------------------------ what a person reads


async def test_sessions_show_prints_a_line_for_each_image(harness: Harness, osprey_env: dict[str, str]) -> None:
    with ModelServer([Reply.tool_call("shot", {}, id="c1"), Reply.text("I see it.")]) as server:
        session = await look_at_the_screen(harness, server, "openai", journal=Journal(journal_path(harness.home)))
    env = {**osprey_env, "OSPREY_HOME": str(harness.home)}
    for extra in ((), ("--full",)):
        shown = osprey(env, "sessions", "show", session.session_id, *extra)
        assert shown.rc == 0, shown
        assert "  <- shot: ok\n    the screen\n    [image: image/png, 12 KB]\n" in shown.stdout, shown.stdout
        assert BIG_PNG[:40] not in shown.stdout


def rendered(*events: ToolCallEvent | ToolResultEvent) -> list[str]:
    out = io.StringIO()
    renderer = TerminalRenderer(out, io.StringIO(), color=False)
    for event in events:
        renderer(event)
    return out.getvalue().splitlines()


def test_the_terminal_prints_a_line_for_each_image_after_the_results_text() -> None:
    images = [{"media_type": "image/png", "data": BIG_PNG}, {"media_type": "image/webp", "data": PNG}]
    call = ToolCallEvent(turn=1, id="c1", name="shot", arguments={})
    assert rendered(call, ToolResultEvent(turn=1, id="c1", name="shot", ok=True, output="the screen", images=images)) == [
        "▸ shot()", "  the screen", "  [image: image/png, 12 KB]", "  [image: image/webp, 1 KB]"]
    # A result of images alone shows their lines alone; one without images, its text alone.
    assert rendered(call, ToolResultEvent(turn=1, id="c1", name="shot", ok=True, output="", images=images[:1])) == [
        "▸ shot()", "  [image: image/png, 12 KB]"]
    assert rendered(call, ToolResultEvent(turn=1, id="c1", name="shot", ok=True, output="")) == ["▸ shot()", "  "]
    # What is not an image is passed over; a media type never brings control characters.
    odd = [{"media_type": "image/png\x1b[2J", "data": PNG}, {"media_type": "image/png"}, {"data": 5}]
    lines = rendered(call, ToolResultEvent(turn=1, id="c1", name="shot", ok=True, output="x", images=odd))
    assert lines == ["▸ shot()", "  x", "  [image: image/png[2J, 1 KB]"]
