"""The OpenAI and Anthropic providers, in process, over real HTTP to the loopback model server.

Nothing here patches httpx or the providers: every request is a real `httpx.AsyncClient` POST to a
server on 127.0.0.1, and the model server checks each request against the protocol's invariants
(the `model_server` fixture fails the test when any check fails).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from osprey.config import RetrySettings
from osprey.errors import ConfigError, ProviderError
from osprey.messages import AssistantMessage, ModelRequest, ModelTurn, ToolCall, ToolResultMessage, Usage, UserMessage
from osprey.providers.anthropic import AnthropicProvider
from osprey.providers.base import MAX_EVENT_BYTES, model_answer
from osprey.providers.openai import OpenAIProvider, _usage
from osprey.providers.replay import RecordingProvider, ReplayProvider
from osprey.session.loop import TurnTimeout, run_turn
from osprey.testing.model_server import ModelServer, Reply, check_anthropic_request, check_openai_request
from osprey.testing.model_server import ToolCall as ScriptedCall
from osprey.tools.builtin import sandboxed_tools

DIALECTS = ["openai", "anthropic"]
SYSTEM = "You are a test system prompt."
TOOL_SPECS = [t.spec() for t in sandboxed_tools()]


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=10.0)) as client:
        yield client


def make_provider(dialect: str, http: httpx.AsyncClient, base_url: str, *, model: str | None = None,
                  effort: str | None = None, api_key: str | None = "test-key", **kw: Any) -> Any:
    if dialect == "openai":
        return OpenAIProvider(http, model or "gpt-4.1", base_url, api_key, effort)
    return AnthropicProvider(http, model or "claude-sonnet-4-5", base_url, api_key, effort, **kw)


def simple_request(prompt: str = "Say hello.") -> ModelRequest:
    return ModelRequest(system=SYSTEM, messages=[UserMessage(content=prompt)], tools=TOOL_SPECS)


def conversation() -> list[Any]:
    """A multi-turn conversation: parallel tool calls, an error result, an empty result, a second user turn."""
    return [
        UserMessage(content="Fix the failing test in calc.py."),
        AssistantMessage(text="Let me look.", tool_calls=[
            ToolCall(id="c1", name="read_file", arguments={"path": "calc.py"}),
            ToolCall(id="c2", name="grep", arguments={"pattern": "def add", "glob": "*.py"}),
        ]),
        ToolResultMessage(tool_call_id="c1", name="read_file", content="     1\tdef add(a, b):\n     2\t    return a - b"),
        ToolResultMessage(tool_call_id="c2", name="grep", content="Error (not_found): no such file", is_error=True),
        AssistantMessage(tool_calls=[
            ToolCall(id="c3", name="edit_file", arguments={"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}),
        ]),
        ToolResultMessage(tool_call_id="c3", name="edit_file", content=""),
        AssistantMessage(text="Fixed: add now adds."),
        UserMessage(content="Now add a test for it."),
    ]


# ------------------------------------------------------------------ a server for what the model server cannot script


class CannedServer:
    """Answers POSTs on 127.0.0.1 with canned (status, content type, body) responses, in order, and records bodies."""

    def __init__(self, responses: list[tuple[int, str, bytes]]) -> None:
        self.responses = list(responses)
        self.bodies: list[Any] = []
        self.headers: list[dict[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.bodies.append(json.loads(raw))
                owner.headers.append({k.lower(): v for k, v in self.headers.items()})
                status, ctype, body = owner.responses.pop(0)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> CannedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def sse(events: list[dict[str, Any]]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def anthropic_stream(blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]], *, stop_reason: str = "end_turn",
                     usage: dict[str, int] | None = None, finish: bool = True) -> bytes:
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
        "stop_reason": None, "usage": usage or {"input_tokens": 10, "output_tokens": 1}}}]
    for index, (start, deltas) in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    if finish:
        events.append({"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 42}})
        events.append({"type": "message_stop"})
    return sse(events)


# ------------------------------------------------------------------ message mapping


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_multi_turn_conversation_maps_cleanly(dialect: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.tool_calls(
        [ScriptedCall("write_file", {"path": "test_calc.py", "content": "from calc import add\n"}),
         ScriptedCall("bash", {"command": "python -m pytest -q"}, id="mine_7")],
        text="Adding the test.", usage=(321, 54)))
    provider = make_provider(dialect, http, model_server.base_url)
    request = ModelRequest(system=SYSTEM, messages=conversation(), tools=TOOL_SPECS)

    turn = await provider.complete(request)

    # What came back: text, both calls with their ids and arguments, the stop reason and usage.
    assert turn.message.text == "Adding the test."
    assert [(c.name, c.arguments, c.arguments_error) for c in turn.message.tool_calls] == [
        ("write_file", {"path": "test_calc.py", "content": "from calc import add\n"}, None),
        ("bash", {"command": "python -m pytest -q"}, None),
    ]
    assert turn.message.tool_calls[1].id == "mine_7"
    assert turn.message.tool_calls[0].id and turn.message.tool_calls[0].id != "mine_7"
    assert turn.usage.input_tokens == 321 and turn.usage.output_tokens == 54
    assert turn.stop_reason == ("tool_calls" if dialect == "openai" else "tool_use")

    # What was sent (the fixture also asserts the server's protocol checks stayed clean).
    [sent] = model_server.requests
    body = sent.body
    assert body["stream"] is True
    assert [t["name"] if dialect == "anthropic" else t["function"]["name"] for t in body["tools"]] == [t.name for t in TOOL_SPECS]
    if dialect == "openai":
        assert sent.headers["authorization"] == "Bearer test-key"
        assert body["stream_options"] == {"include_usage": True}
        msgs = body["messages"]
        assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "user"]
        assert msgs[0]["content"] == SYSTEM
        assert msgs[2]["content"] == "Let me look."
        assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msgs[2]["tool_calls"]] == [
            ("c1", "read_file", {"path": "calc.py"}), ("c2", "grep", {"pattern": "def add", "glob": "*.py"})]
        assert [(m["tool_call_id"], m["content"]) for m in (msgs[3], msgs[4])] == [
            ("c1", "     1\tdef add(a, b):\n     2\t    return a - b"), ("c2", "Error (not_found): no such file")]
        assert msgs[5]["content"] is None and msgs[5]["tool_calls"][0]["id"] == "c3"
        assert msgs[7] == {"role": "assistant", "content": "Fixed: add now adds."}
        assert msgs[8] == {"role": "user", "content": "Now add a test for it."}
    else:
        assert sent.headers["x-api-key"] == "test-key"
        assert sent.headers["anthropic-version"]
        assert body["system"] == SYSTEM
        assert "thinking" not in body
        msgs = body["messages"]
        # Tool results fold into user turns; the last results and the new user text share one turn.
        assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
        assert msgs[1]["content"] == [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "calc.py"}},
            {"type": "tool_use", "id": "c2", "name": "grep", "input": {"pattern": "def add", "glob": "*.py"}},
        ]
        results = msgs[2]["content"]
        assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in results] == [
            ("tool_result", "c1", False), ("tool_result", "c2", True)]
        assert [b["type"] for b in msgs[3]["content"]] == ["tool_use"]
        assert msgs[4]["content"][0]["tool_use_id"] == "c3"
        assert msgs[4]["content"][0]["content"], "an empty tool result must still carry content"
        assert msgs[5]["content"] == [{"type": "text", "text": "Fixed: add now adds."}]
        assert msgs[6]["content"] == [{"type": "text", "text": "Now add a test for it."}]
        assert body["max_tokens"] >= 1


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_the_next_request_carries_the_turn_back_cleanly(dialect: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    """A turn parsed from the stream and appended to the history makes a protocol-clean next request."""
    model_server.add(Reply.tool_calls([ScriptedCall("read_file", {"path": "a"}), ScriptedCall("tree", {})], text="Looking."),
                     Reply.text("All done."))
    provider = make_provider(dialect, http, model_server.base_url)
    messages: list[Any] = [UserMessage(content="Go.")]
    first = await provider.complete(ModelRequest(system=SYSTEM, messages=messages, tools=TOOL_SPECS))
    messages.append(first.message)
    messages += [ToolResultMessage(tool_call_id=c.id, name=c.name, content=f"result of {c.name}") for c in first.message.tool_calls]
    second = await provider.complete(ModelRequest(system=SYSTEM, messages=messages, tools=TOOL_SPECS))
    assert second.message.text == "All done." and not second.message.tool_calls
    assert second.stop_reason in ("stop", "end_turn")
    sent_ids = json.dumps(model_server.requests[1].body["messages"])
    for call in first.message.tool_calls:
        assert call.id in sent_ids


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_no_api_key_sends_no_auth_header(dialect: str, http: httpx.AsyncClient) -> None:
    """Local servers (llama.cpp, Ollama) need no key: none is invented."""
    with ModelServer([Reply.text("ok")]) as server:
        provider = make_provider(dialect, http, server.base_url, api_key=None)
        turn = await provider.complete(simple_request())
        assert turn.message.text == "ok"
        headers = server.requests[0].headers
        assert "authorization" not in headers and "x-api-key" not in headers
        assert any("header" in v for v in server.violations)  # the checker notices; nothing else is wrong
        assert all("header" in v for v in server.violations)


# ------------------------------------------------------------------ streaming and usage


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_streamed_text_reaches_on_text_in_pieces(dialect: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    model_server.add(Reply.text(text, usage=(1234, 56)))
    pieces: list[str] = []
    turn = await make_provider(dialect, http, model_server.base_url).complete(simple_request(), pieces.append)
    assert len(pieces) >= 2, "text should stream in several pieces, not arrive at the end"
    assert "".join(pieces) == text == turn.message.text
    assert turn.usage == Usage(input_tokens=1234, output_tokens=56)


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_tool_call_turn_with_no_text_sends_nothing_to_on_text(dialect: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.tool_call("list_directory", {"path": "src"}))
    pieces: list[str] = []
    turn = await make_provider(dialect, http, model_server.base_url).complete(simple_request(), pieces.append)
    assert "".join(pieces) == "" and turn.message.text == ""
    assert turn.message.tool_calls[0].arguments == {"path": "src"}


def test_openai_usage_details_map_to_cache_and_reasoning_tokens() -> None:
    usage = _usage({"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140,
                    "prompt_tokens_details": {"cached_tokens": 64}, "completion_tokens_details": {"reasoning_tokens": 30}})
    assert usage == Usage(input_tokens=100, output_tokens=40, cache_read_tokens=64, reasoning_tokens=30)
    assert _usage({"prompt_tokens": None, "completion_tokens_details": None}) == Usage()


async def test_anthropic_cache_usage_and_final_output_tokens(http: httpx.AsyncClient) -> None:
    body = anthropic_stream([({"type": "text", "text": ""}, [{"type": "text_delta", "text": "hi"}])],
                            usage={"input_tokens": 7, "output_tokens": 1, "cache_read_input_tokens": 900, "cache_creation_input_tokens": 50})
    with CannedServer([(200, "text/event-stream", body)]) as server:
        turn = await make_provider("anthropic", http, server.base_url).complete(simple_request())
    # output_tokens comes from message_delta (the running total), not message_start's placeholder.
    assert turn.usage == Usage(input_tokens=7, output_tokens=42, cache_read_tokens=900, cache_write_tokens=50)


async def test_anthropic_usage_in_both_events_later_non_zero_counts_win(http: httpx.AsyncClient) -> None:
    """Input tokens sent again (or only) in message_delta, cache counts only in message_start."""
    events = [
        {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "stop_reason": None,
                                              "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 900}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"input_tokens": 12, "output_tokens": 3}},
        {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 5, "cache_read_input_tokens": 0}},
        {"type": "message_stop"},
    ]
    with CannedServer([(200, "text/event-stream", sse(events))]) as server:
        turn = await make_provider("anthropic", http, server.base_url).complete(simple_request())
    assert turn.usage == Usage(input_tokens=12, output_tokens=5, cache_read_tokens=900)
    assert turn.stop_reason == "end_turn"


async def test_openai_usage_in_the_chunk_with_choices_and_its_details(http: httpx.AsyncClient) -> None:
    """llama.cpp style: usage in the finish_reason chunk; other chunks carry `"usage": null`."""
    usage = {"prompt_tokens": 100, "completion_tokens": 40, "prompt_tokens_details": {"cached_tokens": 64},
             "completion_tokens_details": {"reasoning_tokens": 30}}
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}], "usage": None},
        {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}], "usage": usage},
    ]
    body = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"
    with CannedServer([(200, "text/event-stream", body)]) as server:
        turn = await make_provider("openai", http, server.base_url).complete(simple_request())
    assert turn.message.text == "Hello"
    assert turn.usage == Usage(input_tokens=100, output_tokens=40, cache_read_tokens=64, reasoning_tokens=30)


async def test_anthropic_whole_message_keeps_thinking_and_cache_counts(http: httpx.AsyncClient) -> None:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
               "content": [{"type": "thinking", "thinking": "They want a file listing.", "signature": "sig=="},
                           {"type": "text", "text": "Listing."},
                           {"type": "tool_use", "id": "toolu_1", "name": "tree", "input": {"path": "."}}],
               "stop_reason": "tool_use",
               "usage": {"input_tokens": 50, "output_tokens": 20, "cache_read_input_tokens": 400, "cache_creation_input_tokens": 8}}
    with CannedServer([(200, "application/json", json.dumps(message).encode())]) as server:
        shown: list[str] = []
        turn = await make_provider("anthropic", http, server.base_url).complete(simple_request(), shown.append)
    assert shown == ["Listing."] and turn.message.text == "Listing."
    assert turn.message.reasoning == [{"type": "thinking", "thinking": "They want a file listing.", "signature": "sig=="}]
    assert [(c.id, c.name, c.arguments) for c in turn.message.tool_calls] == [("toolu_1", "tree", {"path": "."})]
    assert turn.usage == Usage(input_tokens=50, output_tokens=20, cache_read_tokens=400, cache_write_tokens=8)


async def test_openai_whole_completion_with_object_arguments_and_no_call_ids(http: httpx.AsyncClient) -> None:
    """Some servers send a call's arguments as an object, and no id."""
    completion = {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.txt"}}},
            {"type": "function", "function": {"name": "tree", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 4}}
    with CannedServer([(200, "application/json", json.dumps(completion).encode())]) as server:
        shown: list[str] = []
        turn = await make_provider("openai", http, server.base_url).complete(simple_request(), shown.append)
    assert shown == [] and turn.message.text == ""
    calls = turn.message.tool_calls
    assert [(c.name, c.arguments, c.arguments_error) for c in calls] == [("read_file", {"path": "a.txt"}, None), ("tree", {}, None)]
    assert calls[0].id != calls[1].id and turn.stop_reason == "tool_calls"
    assert turn.usage == Usage(input_tokens=9, output_tokens=4)


# ------------------------------------------------------------------ reasoning effort


@pytest.mark.parametrize(("model", "expected"), [("o3", "high"), ("gpt-5", "high"), ("openai/gpt-5-mini", "high"), ("gpt-4.1", None), ("gpt-4o", None)])
async def test_openai_reasoning_effort_only_for_reasoning_models(model: str, expected: str | None, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.text("ok"))
    await make_provider("openai", http, model_server.base_url, model=model, effort="high").complete(simple_request())
    body = model_server.requests[0].body
    assert body["model"] == model
    assert body.get("reasoning_effort") == expected
    if expected is None:
        assert "reasoning_effort" not in body


async def test_openai_no_effort_means_no_reasoning_effort(model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.text("ok"))
    await make_provider("openai", http, model_server.base_url, model="o3").complete(simple_request())
    assert "reasoning_effort" not in model_server.requests[0].body


@pytest.mark.parametrize("effort", ["minimal", "low", "medium", "high"])
async def test_anthropic_thinking_budget_stays_below_max_tokens(effort: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.text("ok"))
    # A small configured max_tokens must be raised so the budget still fits below it.
    provider = make_provider("anthropic", http, model_server.base_url, model="claude-sonnet-4-5", effort=effort, max_tokens=1000)
    await provider.complete(simple_request())
    body = model_server.requests[0].body
    thinking = body["thinking"]
    assert thinking["type"] == "enabled"
    assert 1024 <= thinking["budget_tokens"] < body["max_tokens"]


async def test_anthropic_thinking_budget_grows_with_effort(http: httpx.AsyncClient) -> None:
    budgets = [make_provider("anthropic", http, "http://unused", effort=e).body(simple_request())["thinking"]["budget_tokens"]
               for e in ("minimal", "low", "medium", "high")]
    assert budgets == sorted(budgets) and len(set(budgets)) == 4


@pytest.mark.parametrize("model", ["claude-3-5-haiku-latest", "claude-3-haiku-20240307"])
async def test_anthropic_no_thinking_for_models_without_it(model: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.text("ok"))
    await make_provider("anthropic", http, model_server.base_url, model=model, effort="high").complete(simple_request())
    body = model_server.requests[0].body
    assert "thinking" not in body
    assert body["max_tokens"] == 16_384


async def test_anthropic_thinking_blocks_go_back_verbatim(http: httpx.AsyncClient) -> None:
    thinking = {"type": "thinking", "thinking": "The user wants a.txt. I will read it first.", "signature": "c2lnbmF0dXJlLTEyMw=="}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"}
    first = anthropic_stream([
        ({"type": "thinking", "thinking": ""}, [
            {"type": "thinking_delta", "thinking": "The user wants a.txt. "},
            {"type": "thinking_delta", "thinking": "I will read it first."},
            {"type": "signature_delta", "signature": "c2lnbmF0dXJlLTEyMw=="}]),
        (redacted, []),
        ({"type": "text", "text": ""}, [{"type": "text_delta", "text": "Reading."}]),
        ({"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}},
         [{"type": "input_json_delta", "partial_json": '{"path": '}, {"type": "input_json_delta", "partial_json": '"a.txt"}'}]),
    ], stop_reason="tool_use")
    second = anthropic_stream([({"type": "text", "text": ""}, [{"type": "text_delta", "text": "It says hello."}])])
    with CannedServer([(200, "text/event-stream", first), (200, "text/event-stream", second)]) as server:
        provider = make_provider("anthropic", http, server.base_url, effort="medium")
        messages: list[Any] = [UserMessage(content="What is in a.txt?")]
        pieces: list[str] = []
        turn = await provider.complete(ModelRequest(system=SYSTEM, messages=messages, tools=TOOL_SPECS), pieces.append)
        assert "".join(pieces) == "Reading."  # thinking is not shown as answer text
        assert turn.message.reasoning == [thinking, redacted]
        assert [(c.id, c.name, c.arguments) for c in turn.message.tool_calls] == [("toolu_1", "read_file", {"path": "a.txt"})]
        messages += [turn.message, ToolResultMessage(tool_call_id="toolu_1", name="read_file", content="hello")]
        final = await provider.complete(ModelRequest(system=SYSTEM, messages=messages, tools=TOOL_SPECS))
        assert final.message.text == "It says hello."

    assistant = server.bodies[1]["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][:2] == [thinking, redacted], "thinking blocks must lead the assistant turn, unchanged"
    assert [b["type"] for b in assistant["content"][2:]] == ["text", "tool_use"]
    for body, headers in zip(server.bodies, server.headers, strict=True):
        assert body["thinking"]["budget_tokens"] < body["max_tokens"]
        assert check_anthropic_request(body, headers) == []


# ------------------------------------------------------------------ tool-call argument problems


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(("raw", "why"), [('{"path": "a.txt"', "not valid JSON"), ('["a.txt"]', "JSON object")])
async def test_unusable_tool_arguments_are_flagged_not_raised(dialect: str, raw: str, why: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.tool_call("read_file", raw))
    turn = await make_provider(dialect, http, model_server.base_url).complete(simple_request())
    [call] = turn.message.tool_calls
    assert call.name == "read_file" and call.arguments == {}
    assert call.arguments_error and why in call.arguments_error


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(("status", "retryable", "hint"), [
    (429, True, ""), (500, True, ""), (503, True, ""), (529, True, ""),
    (400, False, ""), (401, False, "API key"), (403, False, "API key"), (404, False, "--base-url"),
])
async def test_http_errors_map_to_provider_error(dialect: str, status: int, retryable: bool, hint: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.error(status, "scripted trouble XYZ"))
    with pytest.raises(ProviderError) as info:
        await make_provider(dialect, http, model_server.base_url).complete(simple_request())
    err = info.value
    assert err.status == status
    assert err.retryable is retryable
    message = str(err)
    assert f"HTTP {status}" in message and "scripted trouble XYZ" in message
    assert hint in message


async def test_non_json_error_body_is_quoted(http: httpx.AsyncClient) -> None:
    with CannedServer([(502, "text/html", b"<html><body>Bad Gateway from nginx</body></html>")]) as server:
        with pytest.raises(ProviderError) as info:
            await make_provider("openai", http, server.base_url).complete(simple_request())
    assert info.value.retryable and info.value.status == 502
    assert "Bad Gateway from nginx" in str(info.value)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("framing", ["chunked", "close"])
async def test_stream_cut_mid_response_is_retryable(dialect: str, framing: str, http: httpx.AsyncClient) -> None:
    with ModelServer([Reply.disconnect(2, then=Reply.text("this answer never arrives whole"))], framing=framing) as server:
        pieces: list[str] = []
        with pytest.raises(ProviderError) as info:
            await make_provider(dialect, http, server.base_url).complete(simple_request(), pieces.append)
        assert info.value.retryable
        assert "".join(pieces) != "this answer never arrives whole"
        server.assert_clean()


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_garbage_stream_is_a_clear_non_retryable_error(dialect: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.garbage())
    with pytest.raises(ProviderError) as info:
        await make_provider(dialect, http, model_server.base_url).complete(simple_request())
    assert not info.value.retryable
    assert "not JSON" in str(info.value) and "--base-url" in str(info.value)


async def test_connection_refused_by_a_local_server_is_not_retried(http: httpx.AsyncClient) -> None:
    server = ModelServer().start()
    url = server.base_url
    server.close()  # nothing listens on that port any more
    with pytest.raises(ProviderError) as info:
        await make_provider("openai", http, url).complete(simple_request())
    # A loopback server that refuses is not running: waiting will not change that.
    assert not info.value.retryable and "is the server running?" in str(info.value)


@pytest.mark.parametrize(("error_type", "retryable"), [("overloaded_error", True), ("invalid_request_error", False)])
async def test_anthropic_error_event_mid_stream(error_type: str, retryable: bool, http: httpx.AsyncClient) -> None:
    body = anthropic_stream([({"type": "text", "text": ""}, [{"type": "text_delta", "text": "par"}])], finish=False)
    body += sse([{"type": "error", "error": {"type": error_type, "message": "Overloaded right now"}}])
    with CannedServer([(200, "text/event-stream", body)]) as server:
        with pytest.raises(ProviderError) as info:
            await make_provider("anthropic", http, server.base_url).complete(simple_request())
    assert info.value.retryable is retryable
    assert error_type in str(info.value) and "Overloaded right now" in str(info.value)


async def test_openai_error_object_mid_stream(http: httpx.AsyncClient) -> None:
    body = b'data: {"choices":[{"index":0,"delta":{"content":"par"}}]}\n\n' \
           b'data: {"error":{"message":"upstream model crashed","type":"server_error"}}\n\n'
    with CannedServer([(200, "text/event-stream", body)]) as server:
        with pytest.raises(ProviderError) as info:
            await make_provider("openai", http, server.base_url).complete(simple_request())
    assert info.value.retryable and "upstream model crashed" in str(info.value)


# ------------------------------------------------------------------ run_turn: retries and the turn deadline


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_run_turn_retries_with_the_configured_delays_then_succeeds(dialect: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.error(500), Reply.error(429), Reply.disconnect(1), Reply.text("third time lucky"))
    notices: list[str] = []
    retry = RetrySettings(max_retries=3, delays=[0.05, 0.1, 0.2], turn_timeout=60)
    started = time.monotonic()
    turn = await run_turn(make_provider(dialect, http, model_server.base_url), simple_request(), retry, notify=notices.append)
    elapsed = time.monotonic() - started
    assert turn.message.text == "third time lucky"
    assert model_server.request_count == 4
    assert elapsed >= 0.35 - 0.01  # the three delays were waited
    assert len(notices) == 3
    for n, (notice, delay) in enumerate(zip(notices, ("0.05", "0.1", "0.2"), strict=True), 1):
        assert f"in {delay} s" in notice and f"retry {n} of 3" in notice
    assert "HTTP 500" in notices[0] and "HTTP 429" in notices[1]


async def test_run_turn_gives_up_after_max_retries(model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(*[Reply.error(503)] * 3, Reply.text("never reached"))
    retry = RetrySettings(max_retries=2, delays=[0.01], turn_timeout=60)
    notices: list[str] = []
    with pytest.raises(ProviderError) as info:
        await run_turn(make_provider("openai", http, model_server.base_url), simple_request(), retry, notify=notices.append)
    assert info.value.status == 503
    assert model_server.request_count == 3 and len(notices) == 2
    assert all("in 0.01 s" in n for n in notices)  # the last delay repeats when the list is short


@pytest.mark.parametrize("status", [400, 401])
async def test_run_turn_does_not_retry_permanent_errors(status: int, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.error(status), Reply.text("never reached"))
    notices: list[str] = []
    with pytest.raises(ProviderError):
        await run_turn(make_provider("anthropic", http, model_server.base_url), simple_request(),
                       RetrySettings(delays=[0.01], turn_timeout=60), notify=notices.append)
    assert model_server.request_count == 1 and notices == []


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("hang", ["delay", "hold"])
async def test_run_turn_respects_the_turn_deadline(dialect: str, hang: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    model_server.add(Reply.delay(120) if hang == "delay" else Reply.hold(1))
    started = time.monotonic()
    with pytest.raises(TurnTimeout) as info:
        await run_turn(make_provider(dialect, http, model_server.base_url), simple_request(), RetrySettings(turn_timeout=0.5))
    assert time.monotonic() - started < 20
    assert "0.5 s" in str(info.value)


async def test_the_deadline_covers_retries_and_cuts_the_sequence_short(model_server: ModelServer, http: httpx.AsyncClient) -> None:
    """One deadline across the first request and all retries: a long delay that would pass it is not waited."""
    model_server.add(Reply.error(500), Reply.text("too late"))
    started = time.monotonic()
    with pytest.raises(TurnTimeout) as info:
        await run_turn(make_provider("openai", http, model_server.base_url), simple_request(),
                       RetrySettings(delays=[30.0], turn_timeout=5.0))
    assert time.monotonic() - started < 20
    assert "HTTP 500" in str(info.value)  # the cause is kept
    assert model_server.request_count == 1


async def test_the_deadline_covers_the_time_spent_in_failed_attempts(model_server: ModelServer, http: httpx.AsyncClient) -> None:
    # A slow failed attempt uses up part of the deadline: the retry gets only what is left (about 2 s
    # here), not a fresh 4 s, so the whole turn ends near 4 s rather than after 6 s or more.
    model_server.add(Reply.delay(2.0, then=Reply.error(500)), Reply.delay(120), Reply.text("never"))
    started = time.monotonic()
    with pytest.raises(TurnTimeout):
        await run_turn(make_provider("openai", http, model_server.base_url), simple_request(),
                       RetrySettings(delays=[0.05], turn_timeout=4.0))
    elapsed = time.monotonic() - started
    assert model_server.request_count == 2
    assert 4.0 - 0.05 <= elapsed < 5.5


# ------------------------------------------------------------------ odd but real-world streams


@pytest.mark.parametrize("data", [
    '{"choices": "not a list"}',
    '{"choices": [{"index": 0, "delta": {"content": 5}}]}',
    '{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "first", "function": {"name": "x"}}]}}]}',
    '{"choices": [{"index": 0, "delta": "nope"}]}',
])
async def test_openai_events_of_the_wrong_shape_are_a_provider_error(data: str, http: httpx.AsyncClient) -> None:
    body = f"data: {data}\n\ndata: [DONE]\n\n".encode()
    with CannedServer([(200, "text/event-stream", body)]) as server:
        with pytest.raises(ProviderError) as info:
            await make_provider("openai", http, server.base_url).complete(simple_request())
    assert not info.value.retryable
    assert "unexpected" in str(info.value)


@pytest.mark.parametrize("event", [
    {"type": "message_start", "message": "not an object"},
    {"type": "content_block_start", "index": "zero", "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": ["not", "an", "object"]},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": "lots"}},
])
async def test_anthropic_events_of_the_wrong_shape_are_a_provider_error(event: dict[str, Any], http: httpx.AsyncClient) -> None:
    body = sse([event, {"type": "message_stop"}])
    with CannedServer([(200, "text/event-stream", body)]) as server:
        with pytest.raises(ProviderError) as info:
            await make_provider("anthropic", http, server.base_url).complete(simple_request())
    assert not info.value.retryable
    assert "unexpected" in str(info.value)


async def test_openai_tool_calls_without_ids_get_ids_unique_across_turns(http: httpx.AsyncClient) -> None:
    """Some OpenAI-compatible servers send no tool-call id; the ids made up for them must not repeat."""
    def turn(name: str) -> bytes:
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0, "type": "function", "function": {"name": name, "arguments": "{}"}}]}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        ]
        return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"

    with CannedServer([(200, "text/event-stream", turn("tree")), (200, "text/event-stream", turn("list_directory"))]) as server:
        provider = make_provider("openai", http, server.base_url)
        messages: list[Any] = [UserMessage(content="go")]
        for _ in range(2):
            result = await provider.complete(ModelRequest(system=SYSTEM, messages=messages, tools=TOOL_SPECS))
            [call] = result.message.tool_calls
            assert call.id
            messages += [result.message, ToolResultMessage(tool_call_id=call.id, name=call.name, content="ok")]
    ids = [m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)]
    assert len(set(ids)) == 2, ids
    assert check_openai_request(OpenAIProvider(http, "gpt-4.1", "http://x", "k").body(
        ModelRequest(system=SYSTEM, messages=messages + [UserMessage(content="again")], tools=TOOL_SPECS)),
        {"authorization": "Bearer k"}) == []


async def test_sse_comments_and_a_missing_final_blank_line_are_handled(http: httpx.AsyncClient) -> None:
    chunks = [{"choices": [{"index": 0, "delta": {"content": "Hel"}}]}, {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}]
    body = b": keep-alive\n\n" + b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b": still here\n" + b"data: [DONE]"
    with CannedServer([(200, "text/event-stream", body)]) as server:
        turn = await make_provider("openai", http, server.base_url).complete(simple_request())
    assert turn.message.text == "Hello" and turn.stop_reason == "stop"


async def test_openai_tool_call_with_no_arguments_and_a_non_object_event(http: httpx.AsyncClient) -> None:
    call = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "tree", "arguments": ""}}]}, "finish_reason": "tool_calls"}]}
    with CannedServer([(200, "text/event-stream", f"data: {json.dumps(call)}\n\ndata: [DONE]\n\n".encode()),
                       (200, "text/event-stream", b"data: [1, 2]\n\n")]) as server:
        provider = make_provider("openai", http, server.base_url)
        turn = await provider.complete(simple_request())
        assert [(c.name, c.arguments, c.arguments_error) for c in turn.message.tool_calls] == [("tree", {}, None)]
        with pytest.raises(ProviderError, match="unexpected stream event"):
            await provider.complete(simple_request())


@pytest.mark.parametrize(("body", "shown"), [
    (b'{"error": "plain string error"}', "plain string error"),
    (b'{"detail": "FastAPI style"}', "FastAPI style"),
    (b"", "HTTP 503"),
])
async def test_error_bodies_of_other_shapes_are_reported(body: bytes, shown: str, http: httpx.AsyncClient) -> None:
    with CannedServer([(503, "application/json", body)]) as server:
        with pytest.raises(ProviderError) as info:
            await make_provider("openai", http, server.base_url).complete(simple_request())
    assert shown in str(info.value) and info.value.retryable


async def test_an_http_read_timeout_is_a_retryable_provider_error(model_server: ModelServer) -> None:
    model_server.add(Reply.delay(60))
    async with httpx.AsyncClient(timeout=httpx.Timeout(0.3, connect=5.0)) as client:
        with pytest.raises(ProviderError) as info:
            await make_provider("anthropic", client, model_server.base_url).complete(simple_request())
    assert info.value.retryable and "did not answer in time" in str(info.value)


# ------------------------------------------------------------------ bounds, content types and connection reuse


class EndlessServer:
    """Answers each POST with `status` and `content_type`, then `prefix` and `filler` over and over
    until the client hangs up (or `cap` bytes went out); records how much it sent."""

    def __init__(self, status: int, content_type: str, prefix: bytes, filler: bytes, cap: int = 96 * 1024 * 1024) -> None:
        self.sent = 0
        self.hung_up = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    self.wfile.write(prefix)
                    while owner.sent < cap:
                        self.wfile.write(filler)
                        owner.sent += len(filler)
                except OSError:
                    owner.hung_up.set()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> EndlessServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_an_endless_event_is_refused_at_the_event_bound(dialect: str, http: httpx.AsyncClient) -> None:
    with EndlessServer(200, "text/event-stream", b"data: ", b"a" * 65536) as server:
        with pytest.raises(ProviderError) as info:
            await make_provider(dialect, http, server.base_url).complete(simple_request())
        assert server.hung_up.wait(10)
    assert "longer than 8 MiB" in str(info.value) and not info.value.retryable
    assert server.sent < MAX_EVENT_BYTES + 8 * 1024 * 1024  # the bound plus what socket buffers hold


async def test_an_endless_error_body_is_cut_short(http: httpx.AsyncClient) -> None:
    with EndlessServer(500, "text/html", b"<html>upstream exploded", b"x" * 65536) as server:
        with pytest.raises(ProviderError) as info:
            await make_provider("openai", http, server.base_url).complete(simple_request())
        assert server.hung_up.wait(10)
    assert info.value.status == 500 and info.value.retryable and "upstream exploded" in str(info.value)
    assert server.sent < 16 * 1024 * 1024


async def test_a_whole_answer_is_refused_past_the_stream_bound(http: httpx.AsyncClient) -> None:
    with EndlessServer(200, "text/event-stream", b"", b": keep-alive\n\n" + b'data: {"choices": []}\n\n' * 1000) as server:
        with pytest.raises(ProviderError, match="more than 1 MiB in one answer"):
            async with model_answer(http, "the server", f"{server.base_url}/chat/completions", {}, {}, max_total=1024 * 1024) as answer:
                count = 0
                assert answer.events is not None
                async for event in answer.events:
                    assert event.data == '{"choices": []}'
                    count += 1
        assert server.hung_up.wait(10)
    assert 30_000 < count < 50_000


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
async def test_the_event_bound_counts_from_where_the_last_event_ended(newline: str, http: httpx.AsyncClient) -> None:
    """What the bound limits is what the parser must hold: the stream since the last complete event."""
    small = "".join(f"id: {n}{newline}event: e{newline}data: {n:04d}{newline}{newline}" for n in range(5000)).encode()
    big = f"data: {'b' * 100}{newline}data: more".encode()
    with CannedServer([(200, "text/event-stream", small), (200, "text/event-stream", small + big)]) as server:
        url = f"{server.base_url}/chat/completions"
        async with model_answer(http, "the server", url, {}, {}, max_event=64) as answer:
            assert answer.events is not None
            got = [(e.event, e.data) async for e in answer.events]
        assert got == [("e", f"{n:04d}") for n in range(5000)]
        with pytest.raises(ProviderError, match="longer than"):
            async with model_answer(http, "the server", url, {}, {}, max_event=64) as answer:
                assert answer.events is not None
                async for _ in answer.events:
                    pass


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(("error", "retryable", "status"), [
    ({"message": "quota used up", "type": "insufficient_quota", "code": "insufficient_quota"}, False, None),
    ({"message": "quota used up", "type": "requests", "code": "rate_limit_exceeded"}, True, None),
    ({"message": "quota used up", "type": "None", "code": "429"}, True, 429),  # LiteLLM
    ({"message": "quota used up", "type": "BadRequestError", "code": 400}, False, 400),  # vLLM
    ("quota used up", False, None),
])
async def test_a_json_error_with_status_200_is_retried_only_when_it_can_change(
        dialect: str, error: Any, retryable: bool, status: int | None, http: httpx.AsyncClient) -> None:
    body = json.dumps({"error": error}).encode()
    with CannedServer([(200, "application/json; charset=utf-8", body)]) as server:
        with pytest.raises(ProviderError) as info:
            await make_provider(dialect, http, server.base_url).complete(simple_request())
    assert "quota used up" in str(info.value)
    assert info.value.retryable is retryable and info.value.status == status


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(("ctype", "body"), [
    ("text/html", b"<html><body>Welcome to the proxy admin page</body></html>"),
    ("text/event-stream", b"Welcome to the proxy admin page"),
])
async def test_an_answer_that_is_neither_a_stream_nor_json_is_refused_at_once(dialect: str, ctype: str, body: bytes, http: httpx.AsyncClient) -> None:
    with CannedServer([(200, ctype, body)]) as server:
        with pytest.raises(ProviderError) as info:
            await make_provider(dialect, http, server.base_url).complete(simple_request())
    assert "neither an event stream nor JSON" in str(info.value) and "proxy admin page" in str(info.value)
    assert not info.value.retryable


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("body", [b'{"choices": [', b"{}", b'{"content": "not blocks", "choices": "none"}'])
async def test_a_whole_answer_that_is_malformed_is_not_retried(dialect: str, body: bytes, http: httpx.AsyncClient) -> None:
    with CannedServer([(200, "application/json", body)]) as server:
        with pytest.raises(ProviderError) as info:
            await make_provider(dialect, http, server.base_url).complete(simple_request())
    assert not info.value.retryable
    assert "not JSON" in str(info.value) or "unexpected shape" in str(info.value)


async def test_a_whole_answer_past_its_bound_is_refused(http: httpx.AsyncClient) -> None:
    with EndlessServer(200, "application/json", b'{"choices": [{"message": {"content": "', b"a" * 65536) as server:
        with pytest.raises(ProviderError, match="JSON answer longer than 1 MiB") as info:
            async with model_answer(http, "the server", f"{server.base_url}/chat/completions", {}, {}, max_document=1024 * 1024):
                pass
        assert server.hung_up.wait(10)
    assert not info.value.retryable


async def test_a_stream_with_a_loose_content_type_is_still_read(http: httpx.AsyncClient) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "plain"}, "finish_reason": "stop"}]}
    with CannedServer([(200, "text/plain", f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())]) as server:
        turn = await make_provider("openai", http, server.base_url).complete(simple_request())
    assert turn.message.text == "plain"


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_turns_reuse_one_connection(dialect: str, model_server: ModelServer, http: httpx.AsyncClient) -> None:
    """The stream is read to its end (past OpenAI's `[DONE]`), so the connection goes back to the pool."""
    model_server.add(Reply.text("one"), Reply.tool_call("tree", {}), Reply.text("three"))
    provider = make_provider(dialect, http, model_server.base_url)
    for _ in range(3):
        await provider.complete(simple_request())
    assert model_server.request_count == 3
    assert model_server.accepted_connections == 1


# ------------------------------------------------------------------ replay recordings

HEADER = '{"type": "header", "format": "osprey-recording", "version": 1, "provider": "openai", "model": "gpt-4.1"}'
TURN = '{"type": "turn", "index": 0, "turn": {"message": {"text": "hi"}}}'


@pytest.mark.parametrize(("lines", "problem"), [
    ([HEADER, "{not json"], ":2: not JSON"),
    (['{"type": "header", "format": "something-else", "version": 1}', TURN], "not an osprey-recording v1 file"),
    ([HEADER, '{"type": "turn", "turn": {"message": {"text": 5}}}'], ":2: invalid turn"),
    ([HEADER, '{"type": "comment"}'], "unknown record type 'comment'"),
    ([TURN], "no header line"),
    ([HEADER, ""], "holds no turns"),
])
def test_a_malformed_recording_is_a_clear_config_error(lines: list[str], problem: str, tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as info:
        ReplayProvider(path)
    assert problem in str(info.value) and str(path) in str(info.value)


def test_an_unreadable_recording_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        ReplayProvider(tmp_path / "missing.jsonl")


async def test_recording_round_trips_turns_exactly(model_server: ModelServer, http: httpx.AsyncClient, tmp_path: Path) -> None:
    model_server.add(Reply.tool_call("grep", {"pattern": "x"}, text="Searching.", usage=(11, 3)), Reply.text("Found.", usage=(12, 4)))
    path = tmp_path / "rec.jsonl"
    with path.open("w") as sink:
        recorder = RecordingProvider(make_provider("openai", http, model_server.base_url), sink)
        live = [await recorder.complete(simple_request()) for _ in range(2)]
    replay = ReplayProvider(path)
    assert replay.model == "replay:gpt-4.1"
    pieces: list[str] = []
    played = [await replay.complete(simple_request(), pieces.append) for _ in range(2)]
    assert [t.model_dump() for t in played] == [t.model_dump() for t in live]
    assert pieces == ["Searching.", "Found."]
    with pytest.raises(ProviderError, match="only 2 turns"):
        await replay.complete(simple_request())
    assert isinstance(played[0], ModelTurn)


def test_openai_body_reuses_the_wire_form_of_earlier_messages_and_keeps_only_current_ones() -> None:
    import httpx

    from osprey.messages import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage, UserMessage
    from osprey.providers.openai import OpenAIProvider, to_wire_messages

    provider = OpenAIProvider(httpx.AsyncClient(), "m", "http://127.0.0.1:9/v1", None)
    messages: list[Any] = [UserMessage(content="go")]
    for n in range(5):
        call = ToolCall(id=f"c{n}", name="read_file", arguments={"path": f"f{n}.txt", "nested": {"n": n, "s": "é\ud83d"[:1]}})
        messages += [AssistantMessage(text="", tool_calls=[call]), ToolResultMessage(tool_call_id=f"c{n}", name="read_file", content="ok")]
        request = ModelRequest(system="s", messages=list(messages), tools=[])
        assert provider.body(request)["messages"] == to_wire_messages(request)
        assert provider._sent == messages and provider._sent_wire[-1] is not None
    # After compaction the conversation is new: nothing of the old one is kept.
    request = ModelRequest(system="s", messages=[UserMessage(content="summary")], tools=[])
    assert provider.body(request)["messages"] == to_wire_messages(request) and len(provider._sent_wire) == 1
    # The same request again gives the same body.
    first = provider.body(request)["messages"]
    assert provider.body(request)["messages"] == first
