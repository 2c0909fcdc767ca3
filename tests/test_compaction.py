"""Compaction: the conversation replaced by a summary the model writes, on request (`/compact`) or
near the context limit; the record keeps it, so a resumed session goes on from the summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from session_harness import Harness, calls, check_stream, text

from osprey.errors import ProviderError
from osprey.events import Compaction, UserMessageEvent
from osprey.messages import COMPACTED_ACK, COMPACTED_PREFIX, AssistantMessage, ModelTurn, ToolCall, Usage, UserMessage, compacted
from osprey.session.loop import COMPACT_SYSTEM, CONTINUE_AFTER_COMPACTION
from osprey.sessions.resume import rebuild_conversation


@pytest.fixture
def h(workspace: Path, tmp_path: Path) -> Harness:
    (workspace / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    return Harness(workspace, tmp_path / "osprey-home")


def big(turn: ModelTurn, input_tokens: int) -> ModelTurn:
    return turn.model_copy(update={"usage": Usage(input_tokens=input_tokens, output_tokens=5)})


async def test_compact_replaces_the_conversation_with_the_models_summary(h: Harness) -> None:
    session, provider = await h.start([
        calls(ToolCall(id="c1", name="read_file", arguments={"path": "notes.txt"})),
        text("The notes hold three words."),
        text("- read notes.txt: alpha, beta, gamma\n- nothing left to do"),  # the summary
        text("Still three words."),
    ])
    await session.submit("What is in notes.txt?")
    event = await session.compact("keep the file names")
    summary_request = provider.requests[2]
    assert summary_request.system == COMPACT_SYSTEM and summary_request.tools == []
    assert summary_request.messages[:-1] == provider.requests[1].messages + [AssistantMessage(text="The notes hold three words.")]
    assert isinstance(summary_request.messages[-1], UserMessage) and "keep the file names" in summary_request.messages[-1].content
    assert (event.reason, event.messages_before, event.summary) == ("manual", 4, "- read notes.txt: alpha, beta, gamma\n- nothing left to do")
    assert session.messages == compacted(event.summary)
    await session.submit("And now?")
    await session.close()
    after = provider.requests[3].messages
    assert after[0] == UserMessage(content=COMPACTED_PREFIX + event.summary)
    assert after[1] == AssistantMessage(text=COMPACTED_ACK) and after[2] == UserMessage(content="And now?")
    assert len(after) == 3
    assert h.of(Compaction) == [event]
    check_stream(h.events)  # the summary's usage is a turn of its own in the record


async def test_a_resumed_session_goes_on_from_the_summary(h: Harness) -> None:
    session, _ = await h.start([text("one"), text("SUMMARY"), text("two")])
    await session.submit("first")
    await session.compact()
    await session.submit("second")
    await session.close()
    assert rebuild_conversation(h.events) == session.messages


async def test_near_the_context_limit_the_loop_compacts_by_itself_and_carries_on(h: Harness) -> None:
    h.context_window = 1000
    session, provider = await h.start([
        big(calls(ToolCall(id="c1", name="tree", arguments={})), 400),
        big(calls(ToolCall(id="c2", name="list_directory", arguments={})), 850),  # past 80% of 1000
        text("SUMMARY: listed the tree and the directory"),
        text("done"),
    ])
    end = await session.submit("Look around.")
    await session.close()
    assert end.outcome == "Completed" and end.final_text == "done"
    [event] = h.of(Compaction)
    assert (event.reason, event.input_tokens_before) == ("auto", 855)
    assert provider.requests[2].system == COMPACT_SYSTEM
    assert provider.requests[3].messages == [*compacted("SUMMARY: listed the tree and the directory"), UserMessage(content=CONTINUE_AFTER_COMPACTION)]
    assert [e.origin for e in h.of(UserMessageEvent)] == ["user", "loop"]
    check_stream(h.events)


async def test_without_a_known_context_window_nothing_is_compacted(h: Harness) -> None:
    session, provider = await h.start([big(calls(ToolCall(id="c1", name="tree", arguments={})), 10_000_000), text("done")])
    await session.submit("go")
    await session.close()
    assert not h.of(Compaction) and len(provider.requests) == 2


async def test_an_empty_summary_leaves_the_conversation_as_it_was(h: Harness) -> None:
    session, _ = await h.start([text("one"), text("   ")])
    await session.submit("first")
    before = list(session.messages)
    with pytest.raises(ProviderError, match="empty summary"):
        await session.compact()
    assert session.messages == before and not h.of(Compaction)
    await session.close()


async def test_compact_is_refused_while_a_prompt_is_worked_on(h: Harness) -> None:
    session, gate, task = await h.working()
    with pytest.raises(RuntimeError, match="still being worked on"):
        await session.compact()
    gate.set()
    await task
    await session.close()


# ------------------------------------------------------------------ switching the model


async def test_switching_the_model_carries_the_conversation_to_the_new_one(workspace: Path, tmp_path: Path, model_server: Any) -> None:
    from osprey.config import load_settings
    from osprey.events import Event, ModelSwitch
    from osprey.session.core import Session, SessionOptions
    from osprey.testing.model_server import Reply

    model_server.add(Reply.text("first answer"), Reply.text("second answer"))
    env = {"OSPREY_HOME": str(tmp_path / "home"), "OPENAI_API_KEY": "k"}
    flags = {"provider": "openai", "base_url": model_server.base_url, "model": "model-one"}
    events: list[Event] = []
    session = Session(SessionOptions(settings=load_settings(workspace, flags, env)), emit=events.append)
    async with session:
        await session.submit("hello")
        switched = await session.switch_model(load_settings(workspace, {**flags, "model": "model-two", "effort": "low"}, env))
        second = await session.submit("and again")
    assert (switched.provider, switched.model, switched.effort) == ("openai", "model-two", "low")
    assert second.final_text == "second answer"
    first_body, second_body = (r.body for r in model_server.requests)
    assert (first_body["model"], second_body["model"]) == ("model-one", "model-two")
    assert [m["content"] for m in second_body["messages"][1:]] == ["hello", "first answer", "and again"]
    assert [e for e in events if isinstance(e, ModelSwitch)] == [switched]
