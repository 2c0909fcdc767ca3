"""What real OpenAI- and Anthropic-compatible servers send, against the loopback model server.

Some servers ignore `stream: true` and answer with one whole JSON document (LiteLLM's Anthropic
mock, some self-hosted servers), some label it with the wrong content type or none, and some put
usage in other events than the reference APIs do (LiteLLM sends Anthropic's `input_tokens` only
in `message_delta`; llama.cpp sends OpenAI usage in the chunk that has `finish_reason`). Each case
runs in process over real HTTP, and once as `osprey agent` in a subprocess. Nothing is patched.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from osprey.config import RetrySettings
from osprey.errors import ProviderError
from osprey.messages import ModelRequest, ToolResultMessage, Usage, UserMessage
from osprey.providers.anthropic import AnthropicProvider
from osprey.providers.openai import OpenAIProvider
from osprey.session.loop import run_turn
from osprey.testing.model_server import ModelServer, Reply
from osprey.testing.model_server import ToolCall as Call
from osprey.tools.builtin import sandboxed_tools

OSPREY = str(Path(sys.executable).with_name("osprey"))
RUN_TIMEOUT = 120  # seconds; a generous ceiling for one run on a loaded machine
TOOL_SPECS = [t.spec() for t in sandboxed_tools()]
STOP = {"openai": ("stop", "tool_calls"), "anthropic": ("end_turn", "tool_use")}
# Retries as the spec has them (three), with short delays so that a wrong retry shows as a count.
RETRY = RetrySettings(max_retries=3, delays=[0.01], turn_timeout=60)


@pytest.fixture(params=["openai", "anthropic"])
def dialect(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=10.0)) as client:
        yield client


def provider(dialect: str, http: httpx.AsyncClient, server: ModelServer) -> Any:
    if dialect == "openai":
        return OpenAIProvider(http, "gpt-4.1", server.base_url, "test-key")
    return AnthropicProvider(http, "claude-sonnet-4-5", server.base_url, "test-key")


def request(prompt: str = "Say hello.") -> ModelRequest:
    return ModelRequest(system="You are a test.", messages=[UserMessage(content=prompt)], tools=TOOL_SPECS)


# ------------------------------------------------------------------ whole JSON answers to a streamed request


@pytest.mark.parametrize("content_type", [None, "text/event-stream", "text/plain", ""],
                         ids=["application-json", "labelled-event-stream", "text-plain", "no-content-type"])
async def test_a_whole_text_answer_is_the_turn(dialect: str, content_type: str | None, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.text("Hello, all at once.", stream=False, usage=(31, 7), content_type=content_type))
    shown: list[str] = []
    turn = await provider(dialect, http, model_server).complete(request(), shown.append)
    assert turn.message.text == "Hello, all at once." and turn.message.tool_calls == []
    assert shown == ["Hello, all at once."]  # the sink gets the text once
    assert turn.stop_reason == STOP[dialect][0]
    assert turn.usage == Usage(input_tokens=31, output_tokens=7)
    [sent] = model_server.requests
    assert sent.body["stream"] is True  # it was asked for a stream, and answered whole


async def test_a_whole_answer_with_two_tool_calls_is_the_turn(dialect: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    calls = [Call("read_file", {"path": "a.txt"}, id="first_1"), Call("grep", {"pattern": "def add", "glob": "*.py"})]
    model_server.add(Reply.tool_calls(calls, text="Reading both.", stream=False, usage=(120, 40)))
    shown: list[str] = []
    turn = await provider(dialect, http, model_server).complete(request(), shown.append)
    assert turn.message.text == "Reading both." and shown == ["Reading both."]
    got = turn.message.tool_calls
    assert [(c.name, c.arguments, c.arguments_error) for c in got] == [
        ("read_file", {"path": "a.txt"}, None), ("grep", {"pattern": "def add", "glob": "*.py"}, None)]
    assert got[0].id == "first_1" and got[1].id and got[1].id != "first_1"
    assert turn.stop_reason == STOP[dialect][1]
    assert turn.usage == Usage(input_tokens=120, output_tokens=40)


async def test_a_server_that_never_streams_carries_a_conversation_on_one_connection(dialect: str, http: httpx.AsyncClient) -> None:
    with ModelServer([Reply.tool_call("tree", {}), Reply.text("Done.")], stream=False) as server:
        p = provider(dialect, http, server)
        first = await p.complete(request())
        [call] = first.message.tool_calls
        second = await p.complete(ModelRequest(system="You are a test.", tools=TOOL_SPECS, messages=[
            UserMessage(content="Say hello."), first.message,
            ToolResultMessage(tool_call_id=call.id, name=call.name, content=".\n└── a.txt")]))
        assert second.message.text == "Done."
        assert server.request_count == 2 and server.accepted_connections == 1
        server.assert_clean()  # the follow-up request answered the tool call correctly


ERRORS = {
    "openai": ({"error": {"message": "model 'nope' not found", "type": "invalid_request_error", "code": "model_not_found"}},
               {"error": {"message": "the engine is busy", "type": "server_error", "code": None}}),
    "anthropic": ({"type": "error", "error": {"type": "invalid_request_error", "message": "model 'nope' not found"}},
                  {"type": "error", "error": {"type": "overloaded_error", "message": "the engine is busy"}}),
}


async def test_a_whole_error_object_that_will_not_change_is_not_retried(dialect: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    final, _ = ERRORS[dialect]
    model_server.add(Reply.error(200, final), Reply.text("never asked for"))
    with pytest.raises(ProviderError) as info:
        await run_turn(provider(dialect, http, model_server), request(), RETRY)
    assert "invalid_request_error" in str(info.value) and "model 'nope' not found" in str(info.value)
    assert not info.value.retryable
    assert model_server.request_count == 1 and model_server.remaining == 1


async def test_a_whole_error_object_that_passes_is_retried(dialect: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    _, passing = ERRORS[dialect]
    model_server.add(Reply.error(200, passing), Reply.text("Back again.", stream=False))
    notices: list[str] = []
    turn = await run_turn(provider(dialect, http, model_server), request(), RETRY, notify=notices.append)
    assert turn.message.text == "Back again."
    assert model_server.request_count == 2
    [notice] = notices
    assert ("server_error" if dialect == "openai" else "overloaded_error") in notice and "the engine is busy" in notice


async def test_an_error_object_under_a_wrong_or_no_content_type_maps_the_same_way(dialect: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    """The same error objects, labelled as an event stream or not labelled (a JSON body whatever its label)."""
    final, passing = ERRORS[dialect]
    model_server.add(Reply.error(200, final, content_type="text/event-stream"), Reply.error(200, passing, content_type=""))
    p = provider(dialect, http, model_server)
    with pytest.raises(ProviderError) as first:
        await p.complete(request())
    with pytest.raises(ProviderError) as second:
        await p.complete(request())
    assert not first.value.retryable and second.value.retryable


# ------------------------------------------------------------------ usage where other servers put it


async def test_usage_only_in_the_last_event_is_counted(dialect: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    """Anthropic: input tokens only in message_delta (LiteLLM); OpenAI: usage in the finish_reason chunk (llama.cpp)."""
    model_server.add(Reply.text("Counted late.", usage=(77, 9), usage_at="end"),
                     Reply.tool_call("tree", {}, usage=(78, 10), usage_at="end"))
    p = provider(dialect, http, model_server)
    assert (await p.complete(request())).usage == Usage(input_tokens=77, output_tokens=9)
    assert (await p.complete(request())).usage == Usage(input_tokens=78, output_tokens=10)


async def test_a_server_wide_usage_placement_applies_to_every_reply(dialect: str, http: httpx.AsyncClient) -> None:
    with ModelServer([Reply.text("one", usage=(5, 2)), Reply.text("two", usage=(6, 3), usage_at="standard")], usage_at="end") as server:
        p = provider(dialect, http, server)
        assert (await p.complete(request())).usage == Usage(input_tokens=5, output_tokens=2)
        assert (await p.complete(request())).usage == Usage(input_tokens=6, output_tokens=3)
        server.assert_clean()


# ------------------------------------------------------------------ the whole session: `osprey agent`


def agent(env: dict[str, str], workspace: Path, server: ModelServer, dialect: str, prompt: str) -> tuple[int, list[dict[str, Any]], str]:
    proc = subprocess.run([OSPREY, "agent", "-C", str(workspace), "--provider", dialect, "--base-url", server.base_url, "--yolo", prompt],
                          env=env, input="", capture_output=True, text=True, timeout=RUN_TIMEOUT)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc.returncode, events, proc.stderr


def test_osprey_agent_completes_a_task_against_a_server_that_never_streams(dialect: str, workspace: Path, osprey_env: dict[str, str]) -> None:
    script = [
        Reply.tool_call("write_file", {"path": "hello.txt", "content": "hi there\n"}, text="Writing it.", usage=(100, 20)),
        Reply.text("Wrote hello.txt.", usage=(150, 5)),
    ]
    with ModelServer(script, stream=False) as server:
        rc, events, stderr = agent(osprey_env, workspace, server, dialect, "Write hi there to hello.txt.")
        server.assert_clean()
        assert server.request_count == 2 and all(r.body["stream"] is True for r in server.requests)
    assert rc == 0, stderr
    assert (workspace / "hello.txt").read_text() == "hi there\n"
    [result] = [e for e in events if e["type"] == "tool_result"]
    assert result["name"] == "write_file" and result["ok"]
    assert [e["text"] for e in events if e["type"] == "assistant_text"] == ["Writing it.", "Wrote hello.txt."]
    end = events[-1]
    assert (end["type"], end["outcome"], end["exit_status"]) == ("session_end", "Completed", 0)
    assert end["usage"]["input_tokens"] == 250 and end["usage"]["output_tokens"] == 25


def test_osprey_agent_counts_input_tokens_sent_only_at_the_end(dialect: str, workspace: Path, osprey_env: dict[str, str]) -> None:
    with ModelServer([Reply.tool_call("tree", {}, usage=(300, 4)), Reply.text("Looked.", usage=(320, 6))], usage_at="end") as server:
        rc, events, stderr = agent(osprey_env, workspace, server, dialect, "Look around.")
    assert rc == 0, stderr
    assert events[-1]["usage"]["input_tokens"] == 620 and events[-1]["usage"]["output_tokens"] == 10


def test_osprey_agent_stops_at_once_on_a_whole_error_that_will_not_change(dialect: str, workspace: Path, osprey_env: dict[str, str]) -> None:
    final, _ = ERRORS[dialect]
    with ModelServer([Reply.error(200, final), Reply.text("never asked for")]) as server:
        rc, events, _ = agent(osprey_env, workspace, server, dialect, "Say hi.")
        assert server.request_count == 1
    end = events[-1]
    assert rc == 1 and (end["outcome"], end["exit_status"]) == ("Error", 1)
    assert "model 'nope' not found" in (end["error"] or "")
    assert not [e for e in events if e["type"] == "notice" and "retrying" in e["message"]]
