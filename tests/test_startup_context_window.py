"""The model's context window is looked up in the catalog's cache at its first need (the first
check for automatic compaction, at the second turn), not while the session starts: a session that
ends after one turn never reads the cache, and one that goes on compacts near the cached window as
before, and after a model switch near the new model's."""

from __future__ import annotations

from pathlib import Path

import pytest
from session_harness import Harness, calls, text

from osprey.catalog import Catalog, ModelInfo, save_cache
from osprey.events import Compaction
from osprey.messages import ModelTurn, ToolCall, Usage


@pytest.fixture
def h(workspace: Path, tmp_path: Path) -> Harness:
    return Harness(workspace, tmp_path / "osprey-home")


def big(turn: ModelTurn, input_tokens: int) -> ModelTurn:
    return turn.model_copy(update={"usage": Usage(input_tokens=input_tokens, output_tokens=5)})


def cache_window(home: Path, model: str, window: int) -> None:
    home.mkdir(parents=True, exist_ok=True)
    save_cache(home, Catalog(source="builtin", models=[ModelInfo(provider="openai", id=model, context_window=window)]))


async def test_the_cached_window_is_read_at_the_first_compaction_check_and_compaction_follows_it(h: Harness) -> None:
    session, provider = await h.start([
        big(calls(ToolCall(id="c1", name="tree", arguments={})), 400),
        big(calls(ToolCall(id="c2", name="list_directory", arguments={})), 850),  # past 80% of 1000
        text("SUMMARY: looked around"),
        text("done"),
    ])
    assert session.loop is not None and session.loop.context_window_of is not None  # not looked up at start
    # Written after the start: what counts is the cache as the first check finds it.
    cache_window(h.home, session.settings.model, 1000)
    end = await session.submit("Look around.")
    await session.close()
    assert end.outcome == "Completed" and end.final_text == "done"
    [event] = h.of(Compaction)
    assert (event.reason, event.input_tokens_before) == ("auto", 855)
    assert session.loop.context_window == 1000 and session.loop.context_window_of is None


async def test_a_session_of_one_turn_never_looks_the_window_up(h: Harness) -> None:
    session, _ = await h.start([text("done")])
    end = await session.submit("Say done.")
    await session.close()
    assert end.final_text == "done"
    assert session.loop is not None and session.loop.context_window_of is not None and session.loop.context_window is None


async def test_without_a_cached_window_nothing_is_compacted(h: Harness) -> None:
    session, provider = await h.start([
        big(calls(ToolCall(id="c1", name="tree", arguments={})), 400),
        big(calls(ToolCall(id="c2", name="list_directory", arguments={})), 850_000),
        text("done"),
    ])
    end = await session.submit("Look around.")
    await session.close()
    assert end.final_text == "done" and h.of(Compaction) == []
    assert session.loop is not None and session.loop.context_window is None and session.loop.context_window_of is None
    assert len(provider.requests) == 3


async def test_a_model_switch_looks_the_new_models_window_up_at_its_first_need(h: Harness) -> None:
    session, _ = await h.start([big(calls(ToolCall(id="c1", name="tree", arguments={})), 400), text("done")])
    cache_window(h.home, session.settings.model, 1_000_000)
    await session.submit("Look.")
    assert session.loop is not None and session.loop.context_window == 1_000_000
    cache_window(h.home, "other-model", 1000)
    await session.switch_model(session.settings.model_copy(update={"model": "other-model"}))
    assert session.loop.context_window is None and session.loop.context_window_of is not None
    assert session.loop.window() == 1000 and session.loop.context_window == 1000
    await session.close()
