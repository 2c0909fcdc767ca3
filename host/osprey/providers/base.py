"""The provider interface, server-sent-event parsing and the httpx error boundary."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from ..errors import ProviderError
from ..messages import ModelRequest, ModelTurn, scrub

TextSink = Callable[[str], None]

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}


class Provider(Protocol):
    """Turns a conversation into the model's next turn. Knows nothing of tools' effects."""

    name: str
    model: str

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelTurn: ...


@dataclass
class SSEvent:
    event: str
    data: str


async def iter_sse(response: httpx.Response) -> AsyncIterator[SSEvent]:
    """Server-sent events from a streaming response, one per blank-line-terminated block."""
    event, data = "", []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield SSEvent(event or "message", "\n".join(data))
            event, data = "", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
    if data:
        yield SSEvent(event or "message", "\n".join(data))


# What tool names look like to the APIs that will see them again in the conversation.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
UNNAMED_TOOL = "unnamed_tool"


def loads(data: str | bytes) -> Any:
    """json.loads for anything a model or its server wrote: lone surrogates scrubbed."""
    return scrub(json.loads(data))


def name_problem(name: str) -> str | None:
    """Why a tool name from the model cannot be a tool's name, or None."""
    if not name:
        return "the call has no tool name"
    if not _TOOL_NAME.fullmatch(name):
        return f"the name {name[:60]!r} is not a tool name"
    return None


def wire_tool_name(name: str) -> str:
    """The name to send back for a call in the conversation: an invalid one is replaced, since
    APIs reject a conversation that holds it."""
    return name if name_problem(name) is None else UNNAMED_TOOL


def parse_json(data: str, what: str) -> Any:
    try:
        return loads(data)
    except json.JSONDecodeError:
        excerpt = data[:200].replace("\n", " ")
        raise ProviderError(
            f"the model server sent {what} that is not JSON: {excerpt!r}. "
            "Check that --base-url points at an API of the chosen --provider."
        ) from None


def _error_detail(body: bytes) -> str:
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return body[:300].decode("utf-8", "replace").strip()
    err = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err.get("type") or err)
    if isinstance(err, str):
        return err
    return json.dumps(payload)[:300]


@asynccontextmanager
async def streamed_post(client: httpx.AsyncClient, label: str, url: str, headers: dict[str, str], body: dict[str, Any]) -> AsyncIterator[httpx.Response]:
    """POST and yield the streaming response; httpx failures and HTTP errors become ProviderError."""
    try:
        async with client.stream("POST", url, headers=headers, json=body) as response:
            if response.status_code >= 400:
                raw = await response.aread()
                status = response.status_code
                hint = ""
                if status in (401, 403):
                    hint = " Check the API key."
                elif status == 404:
                    hint = " Check --base-url and --model."
                raise ProviderError(
                    f"{label} answered HTTP {status}: {_error_detail(raw)}.{hint}",
                    retryable=status in RETRYABLE_STATUS,
                    status=status,
                )
            yield response
    except httpx.TimeoutException as exc:
        raise ProviderError(f"{label} did not answer in time ({type(exc).__name__} at {url})", retryable=True) from None
    except httpx.HTTPError as exc:
        raise ProviderError(f"{label} could not be reached at {url}: {exc or type(exc).__name__}", retryable=True) from None
