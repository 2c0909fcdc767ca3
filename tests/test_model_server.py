"""Tests for the scripted real-HTTP model server used by end-to-end tests."""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Any

import httpx
import pytest

from osprey.testing.model_server import ModelServer, Reply, ToolCall

OPENAI_HEADERS = {"Authorization": "Bearer test-key"}
ANTHROPIC_HEADERS = {"x-api-key": "test-key", "anthropic-version": "2023-06-01"}
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}

# One shared client: building an httpx.Client (SSL context) per request would dominate the run time.
http: httpx.Client


@pytest.fixture(autouse=True, scope="module")
def _shared_client() -> Any:
    global http
    with httpx.Client(timeout=5) as http:
        yield


def openai_body(messages: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-test", "messages": messages or [{"role": "user", "content": "hi"}], **extra}


def anthropic_body(messages: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"model": "claude-test", "max_tokens": 1024,
            "messages": messages or [{"role": "user", "content": "hi"}], **extra}


def post_openai(server: ModelServer, body: dict[str, Any], **kw: Any) -> httpx.Response:
    kw.setdefault("headers", OPENAI_HEADERS)
    return http.post(server.base_url + "/chat/completions", json=body, **kw)


def post_anthropic(server: ModelServer, body: dict[str, Any], **kw: Any) -> httpx.Response:
    kw.setdefault("headers", ANTHROPIC_HEADERS)
    return http.post(server.base_url + "/messages", json=body, **kw)


def openai_chunks(text: str) -> list[dict[str, Any]]:
    data = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def anthropic_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for raw in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in raw.splitlines())
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        events.append((lines["event"], data))
    return events


def assemble_openai(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"content": "", "calls": {}, "finish": None, "usage": None, "content_pieces": 0}
    for chunk in chunks:
        assert chunk["object"] == "chat.completion.chunk"
        if not chunk["choices"]:
            out["usage"] = chunk["usage"]
            continue
        choice = chunk["choices"][0]
        delta = choice["delta"]
        if delta.get("content"):
            out["content"] += delta["content"]
            out["content_pieces"] += 1
        for piece in delta.get("tool_calls", []):
            call = out["calls"].setdefault(piece["index"], {"arguments": "", "pieces": 0})
            if "id" in piece:
                assert "id" not in call, "id sent twice"
                assert piece["type"] == "function"
                call.update(id=piece["id"], name=piece["function"]["name"])
            if piece["function"].get("arguments"):
                call["arguments"] += piece["function"]["arguments"]
                call["pieces"] += 1
        if choice["finish_reason"]:
            assert out["finish"] is None
            out["finish"] = choice["finish_reason"]
    return out


def assemble_anthropic(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert "ping" in names
    blocks: dict[int, dict[str, Any]] = {}
    open_blocks: set[int] = set()
    for name, data in events:
        if name == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"], _json="", _pieces=0)
            open_blocks.add(data["index"])
        elif name == "content_block_delta":
            assert data["index"] in open_blocks
            block, delta = blocks[data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                assert delta["type"] == "input_json_delta"
                block["_json"] += delta["partial_json"]
            block["_pieces"] += 1
        elif name == "content_block_stop":
            open_blocks.remove(data["index"])
    assert not open_blocks
    for block in blocks.values():
        if block["type"] == "tool_use":
            assert block["input"] == {}
            block["input"] = json.loads(block["_json"])
    start, delta = events[0][1]["message"], events[-2][1]
    return {"blocks": [blocks[i] for i in sorted(blocks)], "stop_reason": delta["delta"]["stop_reason"],
            "input_tokens": start["usage"]["input_tokens"], "output_tokens": delta["usage"]["output_tokens"]}


# ------------------------------------------------------------------ OpenAI dialect


def test_openai_streamed_text_with_usage() -> None:
    with ModelServer([Reply.text("Hello there, world!", usage=(42, 7))]) as server:
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        r = post_openai(server, openai_body(stream=True, stream_options={"include_usage": True}))
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        chunks = openai_chunks(r.text)
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        result = assemble_openai(chunks)
        assert result["content"] == "Hello there, world!"
        assert result["content_pieces"] >= 2
        assert result["finish"] == "stop"
        assert chunks[-1]["choices"] == []
        assert result["usage"] == {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}
        server.assert_clean()


def test_openai_streamed_tool_calls() -> None:
    calls = [ToolCall("read_file", {"path": "a.txt"}), ToolCall("grep", {"pattern": "x", "n": 3}, id="mine")]
    with ModelServer([Reply.tool_calls(calls, text="Checking."), Reply.tool_call("ls", {})]) as server:
        r = post_openai(server, openai_body(stream=True))
        result = assemble_openai(openai_chunks(r.text))
        assert result["content"] == "Checking."
        assert result["finish"] == "tool_calls"
        assert result["usage"] is None  # not requested
        first, second = result["calls"][0], result["calls"][1]
        assert (first["id"], first["name"]) == ("call_1", "read_file")
        assert json.loads(first["arguments"]) == {"path": "a.txt"}
        assert (second["id"], second["name"]) == ("mine", "grep")
        assert json.loads(second["arguments"]) == {"pattern": "x", "n": 3}
        assert first["pieces"] >= 2 and second["pieces"] >= 2
        r = post_openai(server, openai_body(stream=True))
        assert assemble_openai(openai_chunks(r.text))["calls"][0]["id"] == "call_2"


def test_openai_non_streaming() -> None:
    with ModelServer([Reply.text("plain"), Reply.tool_call("read_file", {"path": "b"}, id="c9")]) as server:
        body = post_openai(server, openai_body()).json()
        assert body["object"] == "chat.completion"
        choice = body["choices"][0]
        assert choice["message"] == {"role": "assistant", "content": "plain"}
        assert choice["finish_reason"] == "stop"
        assert body["usage"]["total_tokens"] == sum(body["usage"][k] for k in ("prompt_tokens", "completion_tokens"))
        choice = post_openai(server, openai_body()).json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] is None
        assert choice["message"]["tool_calls"] == [
            {"id": "c9", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"b"}'}}]


def test_path_without_v1_prefix_is_accepted() -> None:
    with ModelServer([Reply.text("ok")]) as server:
        r = http.post(server.url + "/chat/completions", json=openai_body(), headers=OPENAI_HEADERS)
        assert r.json()["choices"][0]["message"]["content"] == "ok"
        server.assert_clean()


# ------------------------------------------------------------------ Anthropic dialect


def test_anthropic_streamed_text() -> None:
    with ModelServer([Reply.text("Hello from Claude", usage=(30, 4))]) as server:
        r = post_anthropic(server, anthropic_body(stream=True))
        assert r.headers["content-type"].startswith("text/event-stream")
        result = assemble_anthropic(anthropic_events(r.text))
        assert [b["type"] for b in result["blocks"]] == ["text"]
        assert result["blocks"][0]["text"] == "Hello from Claude"
        assert result["blocks"][0]["_pieces"] >= 2
        assert (result["stop_reason"], result["input_tokens"], result["output_tokens"]) == ("end_turn", 30, 4)
        server.assert_clean()


def test_anthropic_streamed_tool_use() -> None:
    calls = [ToolCall("read_file", {"path": "a.txt"}), ToolCall("grep", {"pattern": "p"}, id="toolu_x")]
    with ModelServer([Reply.tool_calls(calls, text="Looking.")]) as server:
        result = assemble_anthropic(anthropic_events(post_anthropic(server, anthropic_body(stream=True)).text))
        text, first, second = result["blocks"]
        assert text["text"] == "Looking."
        assert (first["id"], first["name"], first["input"]) == ("toolu_1", "read_file", {"path": "a.txt"})
        assert (second["id"], second["name"], second["input"]) == ("toolu_x", "grep", {"pattern": "p"})
        assert first["_pieces"] >= 2
        assert result["stop_reason"] == "tool_use"


def test_anthropic_non_streaming() -> None:
    with ModelServer([Reply.tool_call("ls", {"dir": "."}, text="hm", usage=(3, 2))]) as server:
        body = post_anthropic(server, anthropic_body()).json()
        assert body["type"] == "message" and body["role"] == "assistant"
        assert body["content"] == [{"type": "text", "text": "hm"},
                                   {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"dir": "."}}]
        assert body["stop_reason"] == "tool_use"
        assert body["usage"] == {"input_tokens": 3, "output_tokens": 2}


# ------------------------------------------------------------------ errors, garbage, exhaustion


def test_error_replies_use_the_dialect_format() -> None:
    script = [Reply.error(429, headers={"Retry-After": "1"}), Reply.error(529), Reply.error(400, "bad thing"),
              Reply.error(503, {"custom": True})]
    with ModelServer(script) as server:
        r = post_openai(server, openai_body(stream=True))
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["type"] == "rate_limit_error"
        assert set(r.json()["error"]) == {"message", "type", "code"}
        r = post_anthropic(server, anthropic_body(stream=True))
        assert r.status_code == 529
        assert r.json()["type"] == "error"
        assert set(r.json()["error"]) == {"type", "message"}
        assert r.json()["error"]["type"] == "overloaded_error"
        r = post_anthropic(server, anthropic_body())
        assert r.json()["error"] == {"type": "invalid_request_error", "message": "bad thing"}
        r = post_openai(server, openai_body())
        assert (r.status_code, r.json()) == (503, {"custom": True})
        server.assert_clean()


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_garbage_is_not_json(dialect: str) -> None:
    with ModelServer([Reply.garbage()]) as server:
        post = post_openai if dialect == "openai" else post_anthropic
        r = post(server, (openai_body if dialect == "openai" else anthropic_body)(stream=True))
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        data = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert data
        for d in data:
            with pytest.raises(ValueError):
                json.loads(d)


def test_script_exhaustion_add_and_remaining() -> None:
    with ModelServer([Reply.text("one")]) as server:
        assert server.remaining == 1
        assert post_openai(server, openai_body()).status_code == 200
        assert server.remaining == 0
        r = post_openai(server, openai_body())
        assert r.status_code == 500 and "script" in r.json()["error"]["message"]
        assert server.violations == ["request 2 arrived after the script was exhausted"]
        server.add(Reply.text("more"))
        assert post_anthropic(server, anthropic_body()).json()["content"][0]["text"] == "more"
        assert server.request_count == 3
        with pytest.raises(AssertionError, match="request 2 arrived after the script was exhausted"):
            server.assert_clean()


def test_unused_replies_are_not_a_violation() -> None:
    with ModelServer([Reply.text("a"), Reply.text("b")]) as server:
        post_openai(server, openai_body())
        assert server.remaining == 1
        server.assert_clean()


def test_request_count_and_recording_under_concurrency() -> None:
    n = 16
    with ModelServer([Reply.text(f"r{i}") for i in range(n)]) as server:
        answers: list[str] = []
        lock = threading.Lock()

        def worker() -> None:
            text = post_openai(server, openai_body()).json()["choices"][0]["message"]["content"]
            with lock:
                answers.append(text)

        threads = [threading.Thread(target=worker) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(5)
        assert sorted(answers) == sorted(f"r{i}" for i in range(n))
        assert server.request_count == n
        recorded = server.requests
        assert len(recorded) == n
        assert recorded[0].path == "/v1/chat/completions"
        assert recorded[0].headers["authorization"] == "Bearer test-key"
        assert recorded[0].body == openai_body()
        server.assert_clean()


def test_unknown_route_is_404_and_a_violation() -> None:
    with ModelServer([Reply.text("unused")]) as server:
        assert http.get(server.base_url + "/models").status_code == 404
        assert server.request_count == 0 and server.remaining == 1
        assert server.violations == ["unexpected request GET /v1/models"]


def test_invalid_json_body_is_rejected_without_consuming_the_script() -> None:
    with ModelServer([Reply.text("kept")]) as server:
        r = http.post(server.base_url + "/chat/completions", content=b"{nope", headers=OPENAI_HEADERS)
        assert r.status_code == 400
        assert server.remaining == 1 and server.request_count == 1
        assert server.requests[0].body is None
        assert "not valid JSON" in server.violations[0]


# ------------------------------------------------------------------ hold, delay, disconnect, framing


def _stream_lines_in_thread(url: str, body: dict[str, Any], headers: dict[str, str]) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def reader() -> None:
        try:
            with http.stream("POST", url, json=body, headers=headers) as r:
                for line in r.iter_lines():
                    if line:
                        lines.put(line)
        except httpx.HTTPError as exc:
            lines.put(exc)
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()
    return lines


def _drain(lines: queue.Queue) -> list[Any]:
    out = []
    while (item := lines.get(timeout=3)) is not None:
        out.append(item)
    return out


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_hold_blocks_until_release(framing: str) -> None:
    with ModelServer([Reply.hold(after_chunks=1, then=Reply.text("abcdef"))], framing=framing) as server:
        lines = _stream_lines_in_thread(server.base_url + "/chat/completions", openai_body(stream=True), OPENAI_HEADERS)
        first = lines.get(timeout=3)
        assert json.loads(first[6:])["choices"][0]["delta"]["role"] == "assistant"
        assert server.wait_held(1, timeout=3) and server.held == 1
        with pytest.raises(queue.Empty):
            lines.get(timeout=0.2)
        server.release()
        rest = _drain(lines)
        assert rest[-1] == "data: [DONE]"
        assert assemble_openai(openai_chunks("\n".join([first, *rest])))["content"] == "abcdef"
        assert server.held == 0
        server.assert_clean()


def test_hold_anthropic_after_several_events() -> None:
    with ModelServer([Reply.hold(3, then=Reply.tool_call("ls", {"d": 1}))]) as server:
        lines = _stream_lines_in_thread(server.base_url + "/messages", anthropic_body(stream=True), ANTHROPIC_HEADERS)
        got = [lines.get(timeout=3) for _ in range(6)]  # 3 events = 6 lines (event + data)
        assert got[0] == "event: message_start" and server.wait_held(1, timeout=3)
        with pytest.raises(queue.Empty):
            lines.get(timeout=0.2)
        server.release()
        text = "\n\n".join("\n".join(pair) for pair in zip(*[iter(got + _drain(lines))] * 2, strict=False))
        assert assemble_anthropic(anthropic_events(text))["blocks"][0]["input"] == {"d": 1}


def test_release_before_the_request_does_not_release_a_later_hold() -> None:
    with ModelServer([Reply.hold(1, then=Reply.text("x"))]) as server:
        server.release()
        lines = _stream_lines_in_thread(server.base_url + "/chat/completions", openai_body(stream=True), OPENAI_HEADERS)
        lines.get(timeout=3)
        assert server.wait_held(1, timeout=3)
        server.release()
        assert _drain(lines)[-1] == "data: [DONE]"


def test_client_disconnect_while_held_does_not_break_the_server() -> None:
    with ModelServer([Reply.hold(1, then=Reply.text("long " * 50)), Reply.text("after")]) as server:
        with httpx.Client(timeout=5) as client:
            with client.stream("POST", server.base_url + "/chat/completions",
                               json=openai_body(stream=True), headers=OPENAI_HEADERS) as r:
                next(r.iter_lines())  # leaving the block unread closes the connection
            assert server.wait_held(1, timeout=3)
            server.release()
            r = client.post(server.base_url + "/chat/completions", json=openai_body(), headers=OPENAI_HEADERS)
            assert r.json()["choices"][0]["message"]["content"] == "after"
        deadline = time.monotonic() + 3
        while server.open_connections and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.open_connections == 0
        assert server.errors == []
        server.assert_clean()


def test_close_wakes_held_streams() -> None:
    server = ModelServer([Reply.hold(1, then=Reply.text("x"))]).start()
    lines = _stream_lines_in_thread(server.base_url + "/chat/completions", openai_body(stream=True), OPENAI_HEADERS)
    lines.get(timeout=3)
    assert server.wait_held(1, timeout=3)
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 2
    _drain(lines)  # the reader finishes, one way or another
    assert server.errors == []


def test_delay_before_first_byte() -> None:
    script = [Reply.delay(2.0, then=Reply.text("late")), Reply.delay(0.2, then=Reply.text("ok"))]
    with ModelServer(script) as server:
        with pytest.raises(httpx.ReadTimeout):
            http.post(server.base_url + "/chat/completions", json=openai_body(), headers=OPENAI_HEADERS,
                      timeout=0.2)
        started = time.monotonic()
        r = post_openai(server, openai_body())
        assert time.monotonic() - started >= 0.2
        assert r.json()["choices"][0]["message"]["content"] == "ok"


def test_disconnect_mid_stream() -> None:
    with ModelServer([Reply.disconnect(2, then=Reply.text("cut short")), Reply.text("fine")]) as server:
        got = []
        with pytest.raises(httpx.RemoteProtocolError):
            with http.stream("POST", server.base_url + "/chat/completions",
                             json=openai_body(stream=True), headers=OPENAI_HEADERS) as r:
                got.extend(line for line in r.iter_lines() if line)
        assert len(got) == 2
        assert post_openai(server, openai_body()).json()["choices"][0]["message"]["content"] == "fine"
        assert server.errors == []


def test_close_framing_ends_the_stream_by_closing() -> None:
    with ModelServer([Reply.text("closing")], framing="close") as server:
        r = post_openai(server, openai_body(stream=True))
        assert "transfer-encoding" not in r.headers and r.headers["connection"] == "close"
        assert assemble_openai(openai_chunks(r.text))["content"] == "closing"


# ------------------------------------------------------------------ invariant checks

TOOLS_OPENAI = [{"type": "function", "function": {"name": "read_file", "parameters": SCHEMA}},
                {"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}]


def _call(cid: str, name: str = "read_file", args: str = '{"path": "a"}') -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def _openai_conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "be brief"},
        {"role": "developer", "content": "really"},
        {"role": "user", "content": "read a and grep"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1"), _call("c2", "grep", '{}')]},
        {"role": "tool", "tool_call_id": "c2", "content": "no match"},
        {"role": "tool", "tool_call_id": "c1", "content": "contents"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "tool_calls": [_call("c3")]},
        {"role": "tool", "tool_call_id": "c3", "content": "contents"},
    ]


def test_openai_good_multi_turn_conversation_is_clean() -> None:
    with ModelServer([Reply.text("ok")]) as server:
        post_openai(server, openai_body(_openai_conversation(), tools=TOOLS_OPENAI, stream=True))
        assert server.violations == []


def _without_model() -> dict[str, Any]:
    body = openai_body()
    del body["model"]
    return body


U = {"role": "user", "content": "hi"}

OPENAI_BAD = {
    "invalid role": (openai_body([U, {"role": "bot", "content": "x"}, U]), "invalid role 'bot'"),
    "system after user": (openai_body([U, {"role": "system", "content": "x"}, U]),
                          "system message after the first user message"),
    "developer after user": (openai_body([U, {"role": "developer", "content": "x"}, U]),
                             "developer message after the first user message"),
    "call not answered before user": (
        openai_body([U, {"role": "assistant", "tool_calls": [_call("c1")]}, U]), "before tool calls ['c1']"),
    "call not answered before assistant": (
        openai_body([U, {"role": "assistant", "tool_calls": [_call("c1")]}, {"role": "assistant", "content": "x"},
                      U]), "(assistant) arrives before tool calls"),
    "tool without call": (openai_body([U, {"role": "tool", "tool_call_id": "zz", "content": "x"}]),
                          "has no matching unanswered tool call"),
    "duplicate answer": (
        openai_body([U, {"role": "assistant", "tool_calls": [_call("c1")]},
                      {"role": "tool", "tool_call_id": "c1", "content": "a"},
                      {"role": "tool", "tool_call_id": "c1", "content": "b"}]), "duplicate answer"),
    "trailing unanswered": (
        openai_body([U, {"role": "assistant", "tool_calls": [_call("c1"), _call("c2")]},
                      {"role": "tool", "tool_call_id": "c1", "content": "a"}]), "unanswered tool calls ['c2']"),
    "arguments not an object": (
        openai_body([U, {"role": "assistant", "tool_calls": [_call("c1", args="[1]")]},
                      {"role": "tool", "tool_call_id": "c1", "content": "a"}]), "not a JSON-object string"),
    "call type": (
        openai_body([U, {"role": "assistant", "tool_calls": [dict(_call("c1"), type="fn")]},
                      {"role": "tool", "tool_call_id": "c1", "content": "a"}]), "type must be 'function'"),
    "call without id": (
        openai_body([U, {"role": "assistant", "tool_calls": [{"type": "function", "function": {
            "name": "f", "arguments": "{}"}}]}, U]), "id is missing"),
    "last message assistant": (openai_body([U, {"role": "assistant", "content": "x"}]),
                               "last message is an assistant message"),
    "model missing": (_without_model(), "'model' is missing"),
    "tool type": (openai_body(tools=[{"type": "fn", "function": {"name": "a", "parameters": SCHEMA}}]),
                  "type must be 'function'"),
    "tool parameters missing": (openai_body(tools=[{"type": "function", "function": {"name": "a"}}]),
                                "parameters is not a JSON object"),
    "tool parameters not object schema": (
        openai_body(tools=[{"type": "function", "function": {"name": "a", "parameters": {"type": "array"}}}]),
        "type 'object'"),
    "tool parameters invalid schema": (
        openai_body(tools=[{"type": "function", "function": {
            "name": "a", "parameters": {"type": "object", "properties": 3}}}]), "not a valid JSON schema"),
    "duplicate tool names": (openai_body(tools=[TOOLS_OPENAI[0], TOOLS_OPENAI[0]]), "duplicate tool name"),
}


@pytest.mark.parametrize("case", sorted(OPENAI_BAD))
def test_openai_invariant_violations_are_caught(case: str) -> None:
    body, expected = OPENAI_BAD[case]
    with ModelServer([Reply.text("ok")]) as server:
        assert post_openai(server, body).status_code == 200
        violations = server.violations
        assert any(expected in v for v in violations), violations
        assert all(v.startswith("request 1 (openai): ") for v in violations)
        with pytest.raises(AssertionError, match="model server saw problems"):
            server.assert_clean()


def test_openai_missing_authorization_header() -> None:
    with ModelServer([Reply.text("ok")]) as server:
        post_openai(server, openai_body(), headers={})
        assert server.violations == ["request 1 (openai): missing 'Authorization: Bearer ...' header"]


TOOLS_ANTHROPIC = [{"name": "read_file", "input_schema": SCHEMA},
                   {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]


def _use(uid: str, name: str = "read_file", inp: Any = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": uid, "name": name, "input": {"path": "a"} if inp is None else inp}


def _result(uid: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": uid, "content": "ok"}


def _anthropic_conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": [{"type": "text", "text": "sure"}, _use("t1"), _use("t2")]},
        {"role": "user", "content": [_result("t2"), _result("t1"), {"type": "text", "text": "and then?"}]},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
    ]


def test_anthropic_good_multi_turn_conversation_is_clean() -> None:
    with ModelServer([Reply.text("ok")]) as server:
        post_anthropic(server, anthropic_body(_anthropic_conversation(), system="be brief", tools=TOOLS_ANTHROPIC,
                                              stream=True))
        assert server.violations == []


AU = {"role": "user", "content": "hi"}
AA = {"role": "assistant", "content": "hello"}


def _anthropic_without(key: str) -> dict[str, Any]:
    body = anthropic_body()
    del body[key]
    return body


ANTHROPIC_BAD = {
    "system role": (anthropic_body([{"role": "system", "content": "x"}, AU]), "not a message role"),
    "invalid role": (anthropic_body([AU, {"role": "tool", "content": "x"}, AU]), "invalid role 'tool'"),
    "starts with assistant": (anthropic_body([AA, AU]), "first message must be a user message"),
    "not alternating": (anthropic_body([AU, AU]), "two consecutive user messages"),
    "ends with assistant": (anthropic_body([AU, AA]), "last message must be a user message"),
    "tool_use not answered": (
        anthropic_body([AU, {"role": "assistant", "content": [_use("t1"), _use("t2")]},
                        {"role": "user", "content": [_result("t1")]}]), "tool_use ids ['t2'] are not answered"),
    "tool_use answered late": (
        anthropic_body([AU, {"role": "assistant", "content": [_use("t1")]}, AU, AA,
                        {"role": "user", "content": [_result("t1")]}]),
        "does not match a tool_use in the preceding assistant message"),
    "foreign tool_result": (
        anthropic_body([AU, {"role": "assistant", "content": [_use("t1")]},
                        {"role": "user", "content": [_result("t1"), _result("t9")]}]), "tool_result for 't9'"),
    "tool_result after text": (
        anthropic_body([AU, {"role": "assistant", "content": [_use("t1")]},
                        {"role": "user", "content": [{"type": "text", "text": "x"}, _result("t1")]}]),
        "must come before other content"),
    "input not object": (
        anthropic_body([AU, {"role": "assistant", "content": [_use("t1", inp="{}")]},
                        {"role": "user", "content": [_result("t1")]}]), "input is not an object"),
    "empty string content": (anthropic_body([{"role": "user", "content": ""}]), "content is empty"),
    "empty list content": (anthropic_body([AU, {"role": "assistant", "content": []}, AU]), "content is empty"),
    "max_tokens missing": (_anthropic_without("max_tokens"), "'max_tokens' is missing"),
    "tool without schema": (anthropic_body(tools=[{"name": "a"}]), "input_schema is not a JSON object"),
    "duplicate tool names": (anthropic_body(tools=[TOOLS_ANTHROPIC[0], TOOLS_ANTHROPIC[0]]), "duplicate tool name"),
    "tool without name": (anthropic_body(tools=[{"input_schema": SCHEMA}]), "name is missing"),
}


@pytest.mark.parametrize("case", sorted(ANTHROPIC_BAD))
def test_anthropic_invariant_violations_are_caught(case: str) -> None:
    body, expected = ANTHROPIC_BAD[case]
    with ModelServer([Reply.text("ok")]) as server:
        assert post_anthropic(server, body).status_code == 200
        violations = server.violations
        assert any(expected in v for v in violations), violations
        assert all(v.startswith("request 1 (anthropic): ") for v in violations)


@pytest.mark.parametrize("missing", ["x-api-key", "anthropic-version"])
def test_anthropic_missing_headers(missing: str) -> None:
    headers = {k: v for k, v in ANTHROPIC_HEADERS.items() if k != missing}
    with ModelServer([Reply.text("ok")]) as server:
        post_anthropic(server, anthropic_body(), headers=headers)
        assert server.violations == [f"request 1 (anthropic): missing '{missing}' header"]


# ------------------------------------------------------------------ answering like servers that do not stream


def test_a_reply_can_be_a_whole_json_answer_to_a_streamed_request() -> None:
    script = [Reply.text("whole", stream=False, usage=(8, 2)),
              Reply.tool_call("ls", {"d": 1}, id="toolu_9", stream=False),
              Reply.text("streamed again")]
    with ModelServer(script) as server:
        r = post_openai(server, openai_body(stream=True))
        assert r.headers["content-type"] == "application/json"
        body = r.json()
        assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"] == "whole"
        assert body["usage"] == {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10}
        r = post_anthropic(server, anthropic_body(stream=True))
        assert r.json()["content"] == [{"type": "tool_use", "id": "toolu_9", "name": "ls", "input": {"d": 1}}]
        assert r.json()["stop_reason"] == "tool_use"
        r = post_openai(server, openai_body(stream=True))
        assert r.headers["content-type"].startswith("text/event-stream")
        assert assemble_openai(openai_chunks(r.text))["content"] == "streamed again"
        server.assert_clean()


def test_a_server_wide_stream_switch_and_a_reply_that_overrides_it() -> None:
    with ModelServer([Reply.text("a"), Reply.text("b", stream=True)], stream=False) as server:
        assert post_anthropic(server, anthropic_body(stream=True)).json()["content"] == [{"type": "text", "text": "a"}]
        r = post_anthropic(server, anthropic_body(stream=True))
        assert assemble_anthropic(anthropic_events(r.text))["blocks"][0]["text"] == "b"
        server.assert_clean()


@pytest.mark.parametrize(("content_type", "sent"), [("text/event-stream", "text/event-stream"), ("", None)])
def test_a_reply_can_carry_a_wrong_or_no_content_type(content_type: str, sent: str | None) -> None:
    with ModelServer([Reply.text("x", stream=False, content_type=content_type),
                      Reply.error(200, {"error": {"message": "m"}}, content_type=content_type)]) as server:
        for key in ("object", "error"):
            r = post_openai(server, openai_body(stream=True))
            assert r.headers.get("content-type") == sent
            assert r.json()[key]
        server.assert_clean()


def test_usage_at_end_moves_all_usage_into_the_last_event() -> None:
    with ModelServer([Reply.text("late", usage=(40, 6), usage_at="end")] * 2) as server:
        events = anthropic_events(post_anthropic(server, anthropic_body(stream=True)).text)
        assert events[0][1]["message"]["usage"] == {"input_tokens": 0, "output_tokens": 0}
        assert events[-2][1]["usage"] == {"input_tokens": 40, "output_tokens": 6}
        chunks = openai_chunks(post_openai(server, openai_body(stream=True, stream_options={"include_usage": True})).text)
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert chunks[-1]["usage"] == {"prompt_tokens": 40, "completion_tokens": 6, "total_tokens": 46}
        assert all("usage" not in c for c in chunks[:-1])
        server.assert_clean()
    with pytest.raises(ValueError, match="usage_at"):
        ModelServer(usage_at="middle")  # type: ignore[arg-type]
