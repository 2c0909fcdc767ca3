"""Anthropic messages with tool use, streamed (or, from a server that does not stream, whole)."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import httpx

from ..errors import ProviderError
from ..messages import NOT_SHOWN, AssistantMessage, ModelRequest, ModelTurn, ToolCall, ToolResultMessage, Usage, UserMessage, held_images
from .base import TextSink, loads, merge_usage, model_answer, name_problem, parse_json, reported_error, wire_tool_name

API_VERSION = "2023-06-01"
# Models with extended thinking.
THINKING_MODELS = re.compile(r"claude-(3-7|sonnet-4|opus-4|haiku-4|[a-z]+-[5-9])", re.IGNORECASE)
THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}


LABEL = "the Anthropic API"


def supports_effort(model: str) -> bool:
    return bool(THINKING_MODELS.search(model))


def tool_result_block(m: ToolResultMessage, images: bool = True, held: dict[int, str] | None = None) -> dict[str, Any]:
    """A tool result as a `tool_result` block: its text, then its images as image blocks when
    there are any (or, when the model takes no images, notes in its text). `held`: the images
    (by index) not sent again, with why; each stands as a note in its place."""
    content: str | list[dict[str, Any]]
    if m.images and images:
        held = held or {}
        content = [{"type": "text", "text": m.content}] if m.content else []
        content += [{"type": "text", "text": i.note(held[n])} if n in held else
                    {"type": "image", "source": {"type": "base64", "media_type": i.media_type, "data": i.data}}
                    for n, i in enumerate(m.images)]
    else:
        content = (m.content or "(no output)") + m.image_notes(NOT_SHOWN)
    return {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": content, "is_error": m.is_error}


def to_wire_messages(request: ModelRequest, images: bool = True) -> list[dict[str, Any]]:
    """Messages with tool results folded into user turns, consecutive same-role turns merged.
    `images`: whether the model takes the images of tool results (the most recent are sent,
    within the bounds of `messages.held_images`)."""
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    held = held_images(request.messages) if images else {}
    for at, m in enumerate(request.messages):
        if isinstance(m, UserMessage):
            add("user", [{"type": "text", "text": m.content or " "}])
        elif isinstance(m, ToolResultMessage):
            add("user", [tool_result_block(m, images, {j: held[at, j] for j in range(len(m.images)) if (at, j) in held})])
        elif isinstance(m, AssistantMessage):
            blocks: list[dict[str, Any]] = list(m.reasoning)
            if m.text:
                blocks.append({"type": "text", "text": m.text})
            blocks += [{"type": "tool_use", "id": c.id, "name": wire_tool_name(c.name), "input": c.arguments} for c in m.tool_calls]
            add("assistant", blocks or [{"type": "text", "text": " "}])
    return out


class AnthropicProvider:
    name = "anthropic"

    def __init__(self, client: httpx.AsyncClient, model: str, base_url: str, api_key: str | None, effort: str | None = None, max_tokens: int = 16_384,
                 images: bool = True) -> None:
        self.client = client
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.effort = effort if effort and supports_effort(model) else None
        self.max_tokens = max_tokens
        # Whether the model takes images (tool results' images are sent as notes when not).
        self.images = images

    def body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": to_wire_messages(request, self.images),
            "stream": True,
        }
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools]
        if self.effort:
            budget = THINKING_BUDGETS[self.effort]
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            body["max_tokens"] = max(self.max_tokens, budget + 4096)
        return body

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelTurn:
        headers = {"anthropic-version": API_VERSION, "Accept": "text/event-stream"}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        blocks: dict[int, dict[str, Any]] = {}
        usage = Usage()
        stop_reason = ""
        finished = False
        url = f"{self.base_url}/messages"
        async with model_answer(self.client, LABEL, url, headers, self.body(request)) as answer:
            if answer.events is None:
                return self._whole_turn(answer.document, on_text)
            async for event in answer.events:
                payload = parse_json(event.data, "a stream event")
                shown = ""
                try:
                    kind = payload.get("type", event.event) if isinstance(payload, dict) else event.event
                    if kind == "message_start":
                        usage = merge_usage(usage, _usage((payload.get("message") or {}).get("usage")))
                    elif kind == "content_block_start":
                        block = dict(payload.get("content_block") or {})
                        block["_json"] = ""
                        blocks[int(payload.get("index", len(blocks)))] = block
                    elif kind == "content_block_delta":
                        block = blocks.setdefault(int(payload.get("index", 0)), {"type": "text", "text": "", "_json": ""})
                        delta = payload.get("delta") or {}
                        dtype = delta.get("type")
                        if dtype == "text_delta":
                            shown = delta.get("text", "")
                            block["text"] = block.get("text", "") + shown
                        elif dtype == "input_json_delta":
                            block["_json"] += delta.get("partial_json", "")
                        elif dtype == "thinking_delta":
                            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
                        elif dtype == "signature_delta":
                            block["signature"] = block.get("signature", "") + delta.get("signature", "")
                    elif kind == "message_delta":
                        stop_reason = (payload.get("delta") or {}).get("stop_reason") or stop_reason
                        usage = merge_usage(usage, _usage(payload.get("usage")))
                    elif kind == "message_stop":
                        finished = True
                        break  # model_answer reads the rest so that the connection can be reused
                    elif kind == "error":
                        raise reported_error(LABEL, payload.get("error") or {}, " mid-stream")
                except (AttributeError, KeyError, TypeError, ValueError) as exc:
                    raise ProviderError(f"the Anthropic API sent a stream event of an unexpected shape ({exc}): {event.data[:200]!r}") from None
                if shown and on_text:
                    on_text(shown)
        if not finished:
            raise ProviderError("the Anthropic API closed the stream before the turn finished", retryable=True)
        return self._turn(blocks, usage, stop_reason)

    def _whole_turn(self, document: Any, on_text: TextSink | None) -> ModelTurn:
        """The turn in a whole `message` object (from a server that ignored `stream: true`)."""
        try:
            if not isinstance(document, dict) or document.get("type", "message") != "message":
                raise ValueError("it is not a message object")
            content = document.get("content")
            if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
                raise ValueError("its content is not a list of blocks")
            usage = _usage(document.get("usage"))
            turn = self._turn(dict(enumerate(content)), usage, document.get("stop_reason") or "")
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            excerpt = json.dumps(document)[:200]
            raise ProviderError(f"the Anthropic API sent a whole answer of an unexpected shape ({exc}): {excerpt!r}. "
                                "Check that --base-url points at an API of the chosen --provider.") from None
        if turn.message.text and on_text:
            on_text(turn.message.text)
        return turn

    @staticmethod
    def _turn(blocks: dict[int, dict[str, Any]], usage: Usage, stop_reason: str) -> ModelTurn:
        text: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[dict[str, Any]] = []
        for index in sorted(blocks):
            block = blocks[index]
            btype = block.get("type")
            if btype == "text":
                text.append(block.get("text", ""))
            elif btype == "tool_use":
                raw = block.get("_json", "")
                args: Any = block.get("input") or {}
                problem = None
                if raw.strip():
                    try:
                        args = loads(raw)
                    except json.JSONDecodeError as exc:
                        args, problem = {}, f"the arguments are not valid JSON ({exc.msg}): {raw[:200]!r}"
                if not isinstance(args, dict):
                    args, problem = {}, "the arguments must be a JSON object"
                problem = name_problem(block.get("name", "")) or problem
                calls.append(ToolCall(id=block.get("id") or f"toolu_{uuid.uuid4().hex[:24]}", name=block.get("name", ""), arguments=args, arguments_error=problem))
            elif btype in ("thinking", "redacted_thinking"):
                reasoning.append({k: v for k, v in block.items() if k != "_json"})
        return ModelTurn(message=AssistantMessage(text="".join(text), tool_calls=calls, reasoning=reasoning), usage=usage, stop_reason=stop_reason)


def _usage(raw: Any) -> Usage:
    """The counts an event (or a whole message) carries; absent fields are 0."""
    raw = raw or {}
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=int(raw.get("cache_read_input_tokens") or 0),
        cache_write_tokens=int(raw.get("cache_creation_input_tokens") or 0),
    )
