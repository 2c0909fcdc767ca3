"""OpenAI-compatible chat completions (OpenAI, OpenRouter, vLLM, llama.cpp server, Ollama)."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import httpx

from ..errors import ProviderError
from ..messages import NOT_SHOWN, AssistantMessage, Message, ModelRequest, ModelTurn, ToolCall, ToolResultMessage, Usage, UserMessage, held_images
from .base import TextSink, error_of, loads, merge_usage, model_answer, name_problem, parse_json, reported_error, wire_tool_name

# Model families that take `reasoning_effort`.
REASONING_MODELS = re.compile(r"(^|/)(o\d|gpt-5|gpt-oss)", re.IGNORECASE)


def supports_effort(model: str) -> bool:
    return bool(REASONING_MODELS.search(model))


def to_wire_message(m: Message, images: bool = True) -> dict[str, Any] | None:
    """One message of the conversation in the chat-completions format. A tool message carries
    text only: a result's images follow the turn's results in a user message (`_with_images`),
    or, when the model takes no images (`images` False), stand as notes in its text."""
    if isinstance(m, UserMessage):
        return {"role": "user", "content": m.content}
    if isinstance(m, AssistantMessage):
        msg: dict[str, Any] = {"role": "assistant", "content": m.text or None}
        if m.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": wire_tool_name(c.name), "arguments": json.dumps(c.arguments)}}
                for c in m.tool_calls
            ]
        return msg
    if isinstance(m, ToolResultMessage):
        content = m.content if images or not m.images else m.content + m.image_notes(NOT_SHOWN)
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": content}
    return None


def to_wire_messages(request: ModelRequest, images: bool = True) -> list[dict[str, Any]]:
    """The chat-completions messages of a request."""
    wired = [to_wire_message(m, images) for m in request.messages]
    if images and any(isinstance(m, ToolResultMessage) and m.images for m in request.messages):
        wired = _with_images(request.messages, wired)
    return _with_system(request.system, wired)


def _with_images(messages: list[Message], wired: list[dict[str, Any] | None]) -> list[dict[str, Any] | None]:
    """The wire messages with, after each run of tool messages that returned images, one user
    message holding those images (a tool message cannot carry them). Only the most recent images
    are sent (`messages.held_images`); each older one stands as a note in its place."""
    held = held_images(messages)
    out: list[dict[str, Any] | None] = []
    waiting: list[tuple[int, ToolResultMessage]] = []
    for at, (m, w) in enumerate(zip(messages, wired, strict=True)):
        if waiting and not isinstance(m, ToolResultMessage):
            out.append(_images_message(waiting, held))
            waiting = []
        out.append(w)
        if isinstance(m, ToolResultMessage) and m.images:
            waiting.append((at, m))
    if waiting:
        out.append(_images_message(waiting, held))
    return out


def _images_message(results: list[tuple[int, ToolResultMessage]], held: dict[tuple[int, int], str]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for at, r in results:
        parts.append({"type": "text", "text": f"Images returned by tool call {r.tool_call_id}:"})
        parts += [{"type": "text", "text": i.note(held[at, j])} if (at, j) in held else
                  {"type": "image_url", "image_url": {"url": f"data:{i.media_type};base64,{i.data}"}}
                  for j, i in enumerate(r.images)]
    return {"role": "user", "content": parts}


def _with_system(system: str, wired: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """The system message (when there is one), then the messages that have a wire form."""
    head = [{"role": "system", "content": system}] if system else []
    return head + [w for w in wired if w is not None]


def parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """A tool call's arguments, or an explanation of why they are unusable."""
    if not raw.strip():
        return {}, None
    try:
        value = loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"the arguments are not valid JSON ({exc.msg}): {raw[:200]!r}"
    if not isinstance(value, dict):
        return {}, f"the arguments must be a JSON object, got {type(value).__name__}"
    return value, None


class OpenAIProvider:
    name = "openai"

    def __init__(self, client: httpx.AsyncClient, model: str, base_url: str, api_key: str | None, effort: str | None = None,
                 images: bool = True) -> None:
        self.client = client
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.effort = effort if effort and supports_effort(model) else None
        # Whether the model takes images (tool results' images are sent as notes when not).
        self.images = images
        # The last request's messages and their wire forms: the conversation is resent every
        # turn with a few messages added, and converting all of it again grows with it. Messages
        # are never changed once in the conversation, and the wire forms are only read.
        self._sent: list[Message] = []
        self._sent_wire: list[dict[str, Any] | None] = []
        self._sent_images = False  # some tool result of the conversation returned images

    def body(self, request: ModelRequest) -> dict[str, Any]:
        sent, now = self._sent, request.messages
        n = len(sent)
        if len(now) >= n and all(a is b for a, b in zip(sent, now[:n], strict=True)):
            new, wired, with_images = now[n:], self._sent_wire + [to_wire_message(m, self.images) for m in now[n:]], self._sent_images
        else:  # compacted or rebuilt: start again
            new, wired, with_images = now, [to_wire_message(m, self.images) for m in now], False
        with_images = with_images or any(isinstance(m, ToolResultMessage) and m.images for m in new)
        self._sent, self._sent_wire, self._sent_images = list(now), wired, with_images
        messages = _with_system(request.system, _with_images(now, wired) if with_images and self.images else wired)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
                for t in request.tools
            ]
        if self.effort:
            body["reasoning_effort"] = self.effort
        return body

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelTurn:
        headers = {"Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        turn = _Turn()
        done = False
        url = f"{self.base_url}/chat/completions"
        # The stream's end marker ends the turn; model_answer reads what follows it so that the
        # connection can carry the next request.
        async with model_answer(self.client, LABEL, url, headers, self.body(request)) as answer:
            if answer.events is None:
                return _whole_turn(answer.document, on_text)
            async for event in answer.events:
                if event.data.strip() == "[DONE]":
                    done = True
                    break
                chunk = parse_json(event.data, "a stream event")
                if not isinstance(chunk, dict):
                    raise ProviderError(f"the model server sent an unexpected stream event: {event.data[:200]!r}")
                err = error_of(chunk)
                if err is not None:
                    raise reported_error(LABEL, err, " mid-stream")
                try:
                    shown = turn.add(chunk)
                except (AttributeError, KeyError, TypeError, ValueError) as exc:
                    raise ProviderError(f"the model server sent a stream event of an unexpected shape ({exc}): {event.data[:200]!r}") from None
                if shown and on_text:
                    on_text(shown)
        if not done and not turn.finish:
            raise ProviderError("the model server closed the stream before the turn finished", retryable=True)
        return turn.result()


LABEL = "the OpenAI-compatible server"


class _Turn:
    """A turn put together from chat-completion chunks (or from one whole completion, read as a
    single chunk whose delta is the message)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish = ""
        self.usage = Usage()

    def add(self, chunk: dict[str, Any]) -> str:
        """Take one chunk in; the text it adds."""
        if chunk.get("usage"):
            self.usage = merge_usage(self.usage, _usage(chunk["usage"]))
        shown: list[str] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                if not isinstance(delta["content"], str):
                    raise TypeError("content is not a string")
                shown.append(delta["content"])
            for piece in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(int(piece.get("index", len(self.calls))), {"id": "", "name": "", "arguments": ""})
                if piece.get("id"):
                    slot["id"] = piece["id"]
                fn = piece.get("function") or {}
                if fn.get("name"):
                    slot["name"] += fn["name"]
                arguments = fn.get("arguments")
                if isinstance(arguments, dict):  # some servers send the object itself
                    arguments = json.dumps(arguments)
                if arguments:
                    slot["arguments"] += arguments
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        self.text += shown
        return "".join(shown)

    def result(self) -> ModelTurn:
        tool_calls = []
        for index in sorted(self.calls):
            slot = self.calls[index]
            args, problem = parse_arguments(slot["arguments"])
            problem = name_problem(slot["name"]) or problem
            # Some servers send no id; a made-up one must not repeat across turns.
            tool_calls.append(ToolCall(id=slot["id"] or f"call_{uuid.uuid4().hex[:24]}", name=slot["name"], arguments=args, arguments_error=problem))
        return ModelTurn(message=AssistantMessage(text="".join(self.text), tool_calls=tool_calls), usage=self.usage, stop_reason=self.finish)


def _whole_turn(document: Any, on_text: TextSink | None) -> ModelTurn:
    """The turn in a whole chat completion (from a server that ignored `stream: true`)."""
    turn = _Turn()
    try:
        choices = document.get("choices") if isinstance(document, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ValueError("it holds no choices")
        choice = choices[0]
        shown = turn.add({"usage": document.get("usage"),
                          "choices": [{"delta": choice.get("message"), "finish_reason": choice.get("finish_reason")}]})
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        excerpt = json.dumps(document)[:200]
        raise ProviderError(f"the model server sent a whole answer of an unexpected shape ({exc}): {excerpt!r}. "
                                "Check that --base-url points at an API of the chosen --provider.") from None
    if shown and on_text:
        on_text(shown)
    return turn.result()


def _usage(raw: dict[str, Any]) -> Usage:
    prompt_details = raw.get("prompt_tokens_details") or {}
    completion_details = raw.get("completion_tokens_details") or {}
    return Usage(
        input_tokens=int(raw.get("prompt_tokens") or 0),
        output_tokens=int(raw.get("completion_tokens") or 0),
        cache_read_tokens=int(prompt_details.get("cached_tokens") or 0),
        reasoning_tokens=int(completion_details.get("reasoning_tokens") or 0),
    )
