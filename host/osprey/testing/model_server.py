"""A scripted model server speaking real HTTP, for tests.

It answers OpenAI chat completions (``/v1/chat/completions``) and Anthropic
messages (``/v1/messages``) from a script of :class:`Reply` objects, one reply
per request, and checks every request against the protocol's invariants.

    with ModelServer([Reply.tool_call("read_file", {"path": "a.txt"}), Reply.text("done")]) as server:
        run_agent(base_url=server.base_url)
        server.assert_clean()
"""

from __future__ import annotations

import collections
import functools
import json
import math
import socket
import socketserver
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypeGuard
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_USAGE",
    "ModelServer",
    "RecordedRequest",
    "Reply",
    "ToolCall",
    "check_anthropic_request",
    "check_openai_request",
]

DEFAULT_USAGE: tuple[int, int] = (10, 5)
"""(input_tokens, output_tokens) reported when a reply gives no ``usage``."""

Dialect = Literal["openai", "anthropic"]
UsageAt = Literal["standard", "end"]
"""Where a streamed answer reports usage. ``"standard"``: where the reference APIs put it (OpenAI: a
last chunk with no choices, when ``stream_options.include_usage`` asks; Anthropic: input tokens in
``message_start``, output tokens in ``message_delta``). ``"end"``: all of it in the last event that
has content (OpenAI: the chunk with ``finish_reason``, as llama.cpp does; Anthropic:
``message_delta``, with zeros in ``message_start``, as LiteLLM does)."""

_PATHS: dict[str, Dialect] = {
    "/v1/chat/completions": "openai",
    "/chat/completions": "openai",
    "/v1/messages": "anthropic",
    "/messages": "anthropic",
}
_WRAPPERS = ("hold", "delay", "disconnect")


# --------------------------------------------------------------------------- script


@dataclass(frozen=True)
class ToolCall:
    """One tool call in an assistant turn. A ``str`` ``arguments`` is sent verbatim (e.g. broken JSON)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """One scripted answer; build it with the class-method constructors."""

    kind: str
    content: str | None = None
    calls: tuple[ToolCall, ...] = ()
    usage: tuple[int, int] | None = None
    status: int = 200
    error_body: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0
    after_chunks: int = 0
    then: Reply | None = None
    stream: bool | None = None
    usage_at: UsageAt | None = None
    content_type: str | None = None

    @classmethod
    def text(
        cls,
        text: str,
        *,
        usage: tuple[int, int] | None = None,
        stream: bool | None = None,
        usage_at: UsageAt | None = None,
        content_type: str | None = None,
    ) -> Reply:
        """A final answer (streamed in several pieces).

        ``stream``: None = as the request asks (and the server's default), False = one whole JSON
        answer even when the request asked for a stream (as some servers do), True = streamed.
        ``usage_at``: see :data:`UsageAt` (None = the server's default). ``content_type``: the
        Content-Type header sent instead of the right one ("" = none at all).
        """
        return cls("text", content=text, usage=usage, stream=stream, usage_at=usage_at, content_type=content_type)

    @classmethod
    def tool_call(
        cls,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        id: str | None = None,
        text: str | None = None,
        usage: tuple[int, int] | None = None,
        stream: bool | None = None,
        usage_at: UsageAt | None = None,
        content_type: str | None = None,
    ) -> Reply:
        """An assistant turn with a single tool call (optionally preceded by ``text``); the
        keyword options are those of :meth:`text`."""
        return cls.tool_calls([ToolCall(name, {} if arguments is None else arguments, id)], text=text, usage=usage,
                              stream=stream, usage_at=usage_at, content_type=content_type)

    @classmethod
    def tool_calls(
        cls,
        calls: Iterable[ToolCall],
        text: str | None = None,
        *,
        usage: tuple[int, int] | None = None,
        stream: bool | None = None,
        usage_at: UsageAt | None = None,
        content_type: str | None = None,
    ) -> Reply:
        """An assistant turn with several tool calls (optionally preceded by ``text``); the
        keyword options are those of :meth:`text`."""
        calls = tuple(calls)
        if not calls:
            raise ValueError("Reply.tool_calls needs at least one ToolCall")
        return cls("tool_calls", content=text, calls=calls, usage=usage, stream=stream, usage_at=usage_at,
                   content_type=content_type)

    @classmethod
    def error(
        cls,
        status: int = 500,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        usage: tuple[int, int] | None = None,
        content_type: str | None = None,
    ) -> Reply:
        """An HTTP error. ``body``: None = dialect default, str = its message, anything else = sent as JSON.
        ``status`` 200 sends an error object as a whole answer (as servers that do not stream do)."""
        return cls("error", status=status, error_body=body, headers=tuple((headers or {}).items()), usage=usage,
                   content_type=content_type)

    @classmethod
    def garbage(cls, *, usage: tuple[int, int] | None = None) -> Reply:
        """200 ``text/event-stream`` whose data lines are not JSON."""
        return cls("garbage", usage=usage)

    @classmethod
    def hold(
        cls, after_chunks: int = 1, then: Reply | None = None, *, usage: tuple[int, int] | None = None
    ) -> Reply:
        """Send ``after_chunks`` SSE events of ``then``, block until ``release()`` or close, then finish."""
        return cls("hold", after_chunks=after_chunks, then=_with_usage(then, usage))

    @classmethod
    def delay(cls, seconds: float, then: Reply | None = None, *, usage: tuple[int, int] | None = None) -> Reply:
        """Wait ``seconds`` (cut short by close) before sending any byte of ``then``."""
        return cls("delay", seconds=seconds, then=_with_usage(then, usage))

    @classmethod
    def disconnect(
        cls, after_chunks: int = 1, then: Reply | None = None, *, usage: tuple[int, int] | None = None
    ) -> Reply:
        """Send ``after_chunks`` SSE events of ``then``, then drop the connection mid-response."""
        return cls("disconnect", after_chunks=after_chunks, then=_with_usage(then, usage))


def _with_usage(reply: Reply | None, usage: tuple[int, int] | None) -> Reply:
    if reply is None:
        reply = Reply.text("This is a scripted reply.")
    if usage is None:
        return reply
    if reply.kind in _WRAPPERS:
        return replace(reply, then=_with_usage(reply.then, usage))
    return replace(reply, usage=usage)


@dataclass
class _Plan:
    base: Reply
    delay: float = 0.0
    hold_at: int | None = None
    cut_at: int | None = None


def _resolve(reply: Reply) -> _Plan:
    plan = _Plan(reply)
    while reply.kind in _WRAPPERS:
        if reply.kind == "delay":
            plan.delay += reply.seconds
        elif reply.kind == "hold" and plan.hold_at is None:
            plan.hold_at = max(0, reply.after_chunks)
        elif reply.kind == "disconnect" and plan.cut_at is None:
            plan.cut_at = max(0, reply.after_chunks)
        assert reply.then is not None
        reply = reply.then
    plan.base = reply
    return plan


@dataclass
class RecordedRequest:
    """A model request as received: ``headers`` keys are lower-case, ``body`` is parsed JSON (None if invalid)."""

    path: str
    headers: dict[str, str]
    body: Any
    method: str = "POST"
    dialect: Dialect | None = None


# --------------------------------------------------------------------------- responses


@dataclass
class _Response:
    status: int
    chunks: list[bytes]
    streaming: bool
    headers: list[tuple[str, str]] = field(default_factory=list)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _json_response(status: int, body: Any, headers: Iterable[tuple[str, str]] = ()) -> _Response:
    data = body.encode() if isinstance(body, str) else _dumps(body).encode()
    return _Response(status, [data], False, [("Content-Type", "application/json"), *headers])


def _sse_response(events: list[str]) -> _Response:
    return _Response(200, [e.encode() for e in events], True, [("Content-Type", "text/event-stream")])


def _split(text: str, pieces: int = 3) -> list[str]:
    if not text:
        return []
    size = max(1, math.ceil(len(text) / pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _arguments_json(arguments: Mapping[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else _dumps(dict(arguments))


def _arguments_object(arguments: Mapping[str, Any] | str) -> Any:
    if not isinstance(arguments, str):
        return dict(arguments)
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


_OPENAI_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("not_found_error", "model_not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _error_body(dialect: Dialect, status: int, message: str) -> dict[str, Any]:
    if dialect == "openai":
        kind, code = _OPENAI_ERROR_TYPES.get(status, ("server_error", None))
        return {"error": {"message": message, "type": kind, "code": code}}
    kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _error_response(dialect: Dialect, reply: Reply) -> _Response:
    body = reply.error_body
    if body is None or isinstance(body, str):
        body = _error_body(dialect, reply.status, body or f"scripted error (HTTP {reply.status})")
    return _json_response(reply.status, body, reply.headers)


def _garbage_response(dialect: Dialect) -> _Response:
    if dialect == "openai":
        return _sse_response(["data: {this is not json\n\n", "data: <garbage/>\n\n"])
    return _sse_response(["event: message_start\ndata: {this is not json\n\n",
                          "event: content_block_delta\ndata: <garbage/>\n\n"])


def _openai_response(
    reply: Reply, req: dict[str, Any], serial: int, new_id: Callable[[str], str], stream: bool, usage_at: UsageAt
) -> _Response:
    model = req.get("model") if isinstance(req.get("model"), str) else "scripted-model"
    inp, out = reply.usage or DEFAULT_USAGE
    usage = {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}
    calls = [(c.id or new_id("call"), c.name, _arguments_json(c.arguments)) for c in reply.calls]
    finish = "tool_calls" if calls else "stop"
    text = reply.content if reply.content else ("" if not calls else None)
    base = {"id": f"chatcmpl-{serial}", "created": int(time.time()), "model": model}

    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in calls
            ]
        body = {**base, "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}
        return _json_response(200, body)

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {**base, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    chunks = [chunk({"role": "assistant", "content": "" if text is not None else None})]
    chunks += [chunk({"content": piece}) for piece in _split(text or "")]
    for index, (cid, name, args) in enumerate(calls):
        chunks.append(chunk({"tool_calls": [
            {"index": index, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}]}))
        chunks += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                   for piece in _split(args)]
    chunks.append(chunk({}, finish))
    options = req.get("stream_options")
    if usage_at == "end":
        chunks[-1]["usage"] = usage
    elif isinstance(options, dict) and options.get("include_usage"):
        chunks.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
    return _sse_response([f"data: {_dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"])


def _anthropic_response(
    reply: Reply, req: dict[str, Any], serial: int, new_id: Callable[[str], str], stream: bool, usage_at: UsageAt
) -> _Response:
    model = req.get("model") if isinstance(req.get("model"), str) else "scripted-model"
    inp, out = reply.usage or DEFAULT_USAGE
    stop_reason = "tool_use" if reply.calls else "end_turn"
    blocks: list[tuple[dict[str, Any], str]] = []  # (final block, streamed text or JSON)
    if reply.content or not reply.calls:
        blocks.append(({"type": "text", "text": reply.content or ""}, reply.content or ""))
    for call in reply.calls:
        block = {"type": "tool_use", "id": call.id or new_id("toolu"), "name": call.name,
                 "input": _arguments_object(call.arguments)}
        blocks.append((block, _arguments_json(call.arguments)))
    message = {"id": f"msg_{serial}", "type": "message", "role": "assistant", "model": model,
               "content": [b for b, _ in blocks], "stop_reason": stop_reason, "stop_sequence": None,
               "usage": {"input_tokens": inp, "output_tokens": out}}

    if not stream:
        return _json_response(200, message)

    start_usage = {"input_tokens": 0, "output_tokens": 0} if usage_at == "end" else {"input_tokens": inp, "output_tokens": 1}
    end_usage = {"input_tokens": inp, "output_tokens": out} if usage_at == "end" else {"output_tokens": out}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": {
        **message, "content": [], "stop_reason": None, "usage": start_usage}})]
    for index, (block, streamed) in enumerate(blocks):
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            delta = "text_delta"
        else:
            start, delta = {**block, "input": {}}, "input_json_delta"
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        if index == 0:
            events.append(("ping", {"type": "ping"}))
        for piece in _split(streamed):
            payload = {"type": delta, ("text" if delta == "text_delta" else "partial_json"): piece}
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": payload}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                     "usage": end_usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return _sse_response([f"event: {name}\ndata: {_dumps(data)}\n\n" for name, data in events])


# --------------------------------------------------------------------------- invariant checks

_OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")


def _schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return "is not a JSON object"
    if schema.get("type") != "object":
        return "must be a JSON schema with type 'object'"
    try:
        text = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):
        return "is not JSON"
    return _checked_schema(text)


@functools.lru_cache(maxsize=1024)
def _checked_schema(text: str) -> str | None:
    """A schema's problem, by its canonical JSON: every request sends the same tool schemas, and
    checking them costs milliseconds each time."""
    try:
        from jsonschema import SchemaError, validators
    except ImportError:  # pragma: no cover - jsonschema is a project dependency
        return None
    schema = json.loads(text)
    try:
        validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        return f"is not a valid JSON schema: {exc.message}"
    return None


def _nonempty_str(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and bool(value)


def check_openai_request(body: Any, headers: Mapping[str, str]) -> list[str]:
    """Violations of the chat-completions protocol in one request (``headers`` keys lower-case)."""
    problems: list[str] = []
    auth = headers.get("authorization", "")
    if not auth.startswith("Bearer ") or not auth[len("Bearer "):].strip():
        problems.append("missing 'Authorization: Bearer ...' header")
    if not isinstance(body, dict):
        return problems + ["body is not a JSON object"]
    if not _nonempty_str(body.get("model")):
        problems.append("'model' is missing")

    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            problems.append("'tools' is not a list")
            tools = []
        names: set[str] = set()
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict) or tool.get("type") != "function":
                problems.append(f"tools[{i}]: type must be 'function'")
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict):
                problems.append(f"tools[{i}]: missing 'function' object")
                continue
            name = function.get("name")
            if not _nonempty_str(name):
                problems.append(f"tools[{i}]: function.name is missing")
            elif name in names:
                problems.append(f"tools[{i}]: duplicate tool name {name!r}")
            else:
                names.add(name)
            problem = _schema_problem(function.get("parameters"))
            if problem:
                problems.append(f"tools[{i}] ({name}): function.parameters {problem}")

    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return problems + ["'messages' must be a non-empty list"]
    pending: dict[str, int] = {}  # unanswered tool_call id -> index of the assistant message
    seen_calls: set[str] = set()
    answered: set[str] = set()
    seen_user = False
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            problems.append(f"{where} is not an object")
            continue
        role = msg.get("role")
        if role not in _OPENAI_ROLES:
            problems.append(f"{where} has invalid role {role!r}")
            continue
        if role in ("user", "assistant") and pending:
            problems.append(f"{where} ({role}) arrives before tool calls {sorted(pending)} were answered")
            pending.clear()
        if role in ("system", "developer"):
            if seen_user:
                problems.append(f"{where}: {role} message after the first user message")
        elif role == "user":
            seen_user = True
        elif role == "assistant":
            calls = msg.get("tool_calls")
            if calls is None:
                continue
            if not isinstance(calls, list) or not calls:
                problems.append(f"{where}: tool_calls must be a non-empty list")
                continue
            for j, call in enumerate(calls):
                at = f"{where}.tool_calls[{j}]"
                if not isinstance(call, dict):
                    problems.append(f"{at} is not an object")
                    continue
                cid = call.get("id")
                if call.get("type") != "function":
                    problems.append(f"{at}: type must be 'function'")
                function = call.get("function")
                if not isinstance(function, dict) or not _nonempty_str(function.get("name")):
                    problems.append(f"{at}: function.name is missing")
                else:
                    try:
                        args = json.loads(function.get("arguments"))  # type: ignore[arg-type]  # a non-string is a TypeError: reported below
                    except (TypeError, ValueError):
                        args = None
                    if not isinstance(args, dict):
                        problems.append(f"{at}: function.arguments is not a JSON-object string")
                if not _nonempty_str(cid):
                    problems.append(f"{at}: id is missing")
                elif cid in seen_calls:
                    problems.append(f"{at}: duplicate tool call id {cid!r}")
                else:
                    seen_calls.add(cid)
                    pending[cid] = i
        else:  # tool
            cid = msg.get("tool_call_id")
            if not _nonempty_str(cid):
                problems.append(f"{where}: tool message without tool_call_id")
            elif cid in pending:
                del pending[cid]
                answered.add(cid)
            elif cid in answered:
                problems.append(f"{where}: duplicate answer to tool call {cid!r}")
            else:
                problems.append(f"{where}: tool message for {cid!r} has no matching unanswered tool call")
    if pending:
        problems.append(f"request ends with unanswered tool calls {sorted(pending)}")
    last = messages[-1]
    if isinstance(last, dict) and last.get("role") == "assistant":
        problems.append("last message is an assistant message")
    return problems


def check_anthropic_request(body: Any, headers: Mapping[str, str]) -> list[str]:
    """Violations of the messages protocol in one request (``headers`` keys lower-case)."""
    problems: list[str] = []
    for header in ("x-api-key", "anthropic-version"):
        if not headers.get(header):
            problems.append(f"missing {header!r} header")
    if not isinstance(body, dict):
        return problems + ["body is not a JSON object"]
    if not _nonempty_str(body.get("model")):
        problems.append("'model' is missing")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        problems.append("'max_tokens' is missing or not a positive integer")

    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            problems.append("'tools' is not a list")
            tools = []
        names: set[str] = set()
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict):
                problems.append(f"tools[{i}] is not an object")
                continue
            name = tool.get("name")
            if not _nonempty_str(name):
                problems.append(f"tools[{i}]: name is missing")
            elif name in names:
                problems.append(f"tools[{i}]: duplicate tool name {name!r}")
            else:
                names.add(name)
            if tool.get("type", "custom") == "custom":  # server tools (web_search_...) carry no schema
                problem = _schema_problem(tool.get("input_schema"))
                if problem:
                    problems.append(f"tools[{i}] ({name}): input_schema {problem}")

    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return problems + ["'messages' must be a non-empty list"]
    pending: list[str] = []  # tool_use ids of the previous assistant message
    seen_uses: set[str] = set()
    prev_role: str | None = None
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            problems.append(f"{where} is not an object")
            continue
        role = msg.get("role")
        if role == "system":
            problems.append(f"{where}: 'system' is not a message role; use the top-level 'system' field")
            continue
        if role not in ("user", "assistant"):
            problems.append(f"{where} has invalid role {role!r}")
            continue
        if prev_role is None and role != "user":
            problems.append(f"{where}: the first message must be a user message")
        if prev_role == role:
            problems.append(f"{where}: two consecutive {role} messages (roles must alternate)")
        prev_role = role

        content = msg.get("content")
        blocks: list[Any] = []
        if isinstance(content, str):
            if not content:
                problems.append(f"{where}: content is empty")
        elif isinstance(content, list):
            if not content:
                problems.append(f"{where}: content is empty")
            blocks = content
        else:
            problems.append(f"{where}: content must be a string or a list of blocks")

        uses: list[str] = []
        results: list[str] = []
        after_other = False
        for j, block in enumerate(blocks):
            at = f"{where}.content[{j}]"
            if not isinstance(block, dict):
                problems.append(f"{at} is not an object")
                continue
            kind = block.get("type")
            if kind == "text" and not block.get("text"):
                problems.append(f"{at}: text block is empty")
            if kind == "tool_use":
                if role != "assistant":
                    problems.append(f"{at}: tool_use block in a {role} message")
                if not _nonempty_str(block.get("name")):
                    problems.append(f"{at}: tool_use name is missing")
                if not isinstance(block.get("input"), dict):
                    problems.append(f"{at}: tool_use input is not an object")
                uid = block.get("id")
                if not _nonempty_str(uid):
                    problems.append(f"{at}: tool_use id is missing")
                elif uid in seen_uses:
                    problems.append(f"{at}: duplicate tool_use id {uid!r}")
                else:
                    seen_uses.add(uid)
                    uses.append(uid)
            elif kind == "tool_result":
                if role != "user":
                    problems.append(f"{at}: tool_result block in a {role} message")
                if after_other:
                    problems.append(f"{at}: tool_result blocks must come before other content")
                rid = block.get("tool_use_id")
                if not _nonempty_str(rid):
                    problems.append(f"{at}: tool_result without tool_use_id")
                elif rid in results:
                    problems.append(f"{at}: duplicate tool_result for {rid!r}")
                else:
                    results.append(rid)
            else:
                after_other = True

        if role == "user":
            missing = [uid for uid in pending if uid not in results]
            if missing:
                problems.append(f"{where}: tool_use ids {missing} are not answered by a tool_result")
            for rid in results:
                if rid not in pending:
                    problems.append(f"{where}: tool_result for {rid!r} does not match a tool_use "
                                    "in the preceding assistant message")
            pending = []
        else:
            if pending:
                problems.append(f"{where}: tool_use ids {pending} were not answered by a user message")
            pending = uses
    if pending:
        problems.append(f"request ends with unanswered tool_use ids {pending}")
    if prev_role is not None and prev_role != "user":
        problems.append("the last message must be a user message")
    return problems


_CHECKS = {"openai": check_openai_request, "anthropic": check_anthropic_request}
_BUILDERS = {"openai": _openai_response, "anthropic": _anthropic_response}


# --------------------------------------------------------------------------- server


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 64

    def __init__(self, owner: ModelServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), which can stall on hosts without DNS.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            self.owner._internal_error(exc)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.owner._track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _dispatch(self) -> None:
        try:
            self.server.owner._handle(self)
        except OSError:  # client went away (broken pipe, reset) or the server is closing
            self.close_connection = True
        except Exception as exc:
            self.close_connection = True
            self.server.owner._internal_error(exc)

    do_POST = do_GET = do_PUT = do_DELETE = do_PATCH = _dispatch


class ModelServer:
    """Scripted OpenAI/Anthropic-compatible model server on 127.0.0.1 (use as a context manager).

    ``framing`` selects how streams are delimited: ``"chunked"`` (keep-alive) or ``"close"``.
    ``stream`` and ``usage_at`` are the defaults for replies that do not set their own (see
    :meth:`Reply.text`): ``stream=False`` makes a server that answers every request with one whole
    JSON answer, whatever the request asked.
    """

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        framing: Literal["chunked", "close"] = "chunked",
        stream: bool | None = None,
        usage_at: UsageAt = "standard",
    ) -> None:
        if framing not in ("chunked", "close"):
            raise ValueError(f"unknown framing {framing!r}")
        if usage_at not in ("standard", "end"):
            raise ValueError(f"unknown usage_at {usage_at!r}")
        self.framing = framing
        self.stream = stream
        self.usage_at: UsageAt = usage_at
        self._script: collections.deque[Reply] = collections.deque(replies)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._closed = threading.Event()
        self._requests: list[RecordedRequest] = []
        self._violations: list[str] = []
        self._errors: list[str] = []
        self._count = 0
        self._ids: collections.Counter[str] = collections.Counter()
        self._generation = 0
        self._held = 0
        self._sockets: set[socket.socket] = set()
        self._accepted = 0
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle -----------------------------------------------------------------

    def start(self) -> ModelServer:
        if self._httpd is None:
            self._httpd = _HTTPServer(self)
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                name=f"model-server-{self.port}", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; held and delayed replies wake up and open connections are shut down."""
        httpd = self._httpd
        if httpd is None or self._closed.is_set():
            return
        with self._cond:
            self._closed.set()
            self._cond.notify_all()
        httpd.shutdown()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # public API ------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("ModelServer is not started")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (for clients that append ``/v1/...`` themselves)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(replies)

    @property
    def remaining(self) -> int:
        """Number of scripted replies not yet used."""
        with self._lock:
            return len(self._script)

    @property
    def request_count(self) -> int:
        with self._lock:
            return self._count

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def violations(self) -> list[str]:
        with self._lock:
            return list(self._violations)

    @property
    def errors(self) -> list[str]:
        """Unexpected exceptions inside the server (bugs in the fixture itself)."""
        with self._lock:
            return list(self._errors)

    @property
    def open_connections(self) -> int:
        """Number of client connections currently open."""
        with self._lock:
            return len(self._sockets)

    @property
    def accepted_connections(self) -> int:
        """Number of client connections accepted since the start (reused connections count once)."""
        with self._lock:
            return self._accepted

    @property
    def held(self) -> int:
        """Number of streams currently blocked in a ``Reply.hold``."""
        with self._lock:
            return self._held

    def assert_clean(self) -> None:
        """Raise AssertionError listing protocol violations and server errors (unused replies are fine)."""
        problems = self.violations + [f"server error: {e}" for e in self.errors]
        if problems:
            raise AssertionError("model server saw problems:\n" + "\n".join(f"  - {p}" for p in problems))

    def release(self) -> None:
        """Let every stream that is held (or was started before this call and will hold) continue."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def wait_held(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Wait until at least ``count`` streams are held; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._held >= count, timeout)

    def wait_requests(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until at least ``count`` model requests arrived; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count >= count, timeout)

    # internals -------------------------------------------------------------------

    def _track(self, sock: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._sockets.add(sock)
                self._accepted += 1
            else:
                self._sockets.discard(sock)

    def _violate(self, message: str) -> None:
        with self._lock:
            self._violations.append(message)

    def _internal_error(self, exc: BaseException | None) -> None:
        text = "".join(traceback.format_exception(exc)) if exc else "unknown error"
        with self._lock:
            self._errors.append(text.strip())

    def _new_id(self, prefix: str) -> str:
        with self._lock:
            self._ids[prefix] += 1
            return f"{prefix}_{self._ids[prefix]}"

    def _handle(self, h: _Handler) -> None:
        raw = self._read_body(h)
        path = urlsplit(h.path).path
        dialect = _PATHS.get(path.rstrip("/"))
        if dialect is None or h.command != "POST":
            self._violate(f"unexpected request {h.command} {h.path}")
            message = f"model server: no route for {h.command} {path}"
            self._send(h, _json_response(404, _error_body(dialect or "openai", 404, message)))
            return
        headers = {k.lower(): v for k, v in h.headers.items()}
        try:
            body, valid = json.loads(raw), True
        except ValueError:
            body, valid = None, False
        with self._cond:
            self._count += 1
            n = self._count
            self._requests.append(RecordedRequest(path, headers, body, h.command, dialect))
            generation = self._generation
            reply = self._script.popleft() if valid and self._script else None
            self._cond.notify_all()
        if not valid:
            self._violate(f"request {n} ({dialect}): body is not valid JSON")
            self._send(h, _json_response(400, _error_body(dialect, 400, "body is not valid JSON")))
            return
        for problem in _CHECKS[dialect](body, headers):
            self._violate(f"request {n} ({dialect}): {problem}")
        if reply is None:
            self._violate(f"request {n} arrived after the script was exhausted")
            message = f"model server script exhausted: no scripted reply for request {n}"
            self._send(h, _json_response(500, _error_body(dialect, 500, message)))
            return

        plan = _resolve(reply)
        if plan.delay > 0:
            self._closed.wait(plan.delay)
        base = plan.base
        if base.kind == "error":
            response = _error_response(dialect, base)
        elif base.kind == "garbage":
            response = _garbage_response(dialect)
        else:
            req = body if isinstance(body, dict) else {}
            stream = next(s for s in (base.stream, self.stream, req.get("stream") is True) if s is not None)
            response = _BUILDERS[dialect](base, req, n, self._new_id, stream, base.usage_at or self.usage_at)
        if base.content_type is not None:
            kept = [(k, v) for k, v in response.headers if k.lower() != "content-type"]
            response.headers = kept + ([("Content-Type", base.content_type)] if base.content_type else [])
        self._send(h, response, plan, generation)

    @staticmethod
    def _read_body(h: _Handler) -> bytes:
        if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(h.rfile.read(size))
                h.rfile.readline()
        length = int(h.headers.get("Content-Length") or 0)
        return h.rfile.read(length) if length > 0 else b""

    def _send(self, h: _Handler, response: _Response, plan: _Plan | None = None, generation: int = 0) -> None:
        hold_at, cut_at = (plan.hold_at, plan.cut_at) if plan else (None, None)
        chunked = response.streaming and self.framing == "chunked"
        if not response.streaming:  # a JSON body is a single piece: hold / cut right after the headers
            hold_at = None if hold_at is None else 0
            cut_at = None if cut_at is None else 0
        if hold_at is not None:
            hold_at = min(hold_at, len(response.chunks))
        if cut_at is not None:
            cut_at = min(cut_at, len(response.chunks))
        h.send_response(response.status)
        for name, value in response.headers:
            h.send_header(name, value)
        if not response.streaming:
            h.send_header("Content-Length", str(sum(len(c) for c in response.chunks)))
        else:
            h.send_header("Cache-Control", "no-cache")
            if chunked:
                h.send_header("Transfer-Encoding", "chunked")
            else:
                h.send_header("Connection", "close")
                h.close_connection = True
        h.end_headers()
        h.wfile.flush()

        for i in range(len(response.chunks) + 1):
            if i == hold_at:
                self._hold(generation)
            if i == cut_at:
                h.close_connection = True
                h.connection.shutdown(socket.SHUT_RDWR)
                return
            if i == len(response.chunks):
                break
            data = response.chunks[i]
            h.wfile.write(b"%X\r\n%s\r\n" % (len(data), data) if chunked else data)
        if chunked:
            h.wfile.write(b"0\r\n\r\n")

    def _hold(self, generation: int) -> None:
        with self._cond:
            self._held += 1
            self._cond.notify_all()
            try:
                while self._generation == generation and not self._closed.is_set():
                    self._cond.wait()
            finally:
                self._held -= 1
                self._cond.notify_all()
