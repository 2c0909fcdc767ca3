"""The one internal model of a conversation that every provider maps to and from."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Each model builds its validator at its first use, not at import.
_LAZY = ConfigDict(defer_build=True)


class Usage(BaseModel):
    """Tokens used by one model turn (or summed over a session)."""

    model_config = _LAZY

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields})


class ToolCall(BaseModel):
    model_config = _LAZY

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Set when the model's arguments were not a JSON object; the call then fails cleanly.
    arguments_error: str | None = None


class UserMessage(BaseModel):
    model_config = _LAZY

    role: Literal["user"] = "user"
    content: str


class AssistantMessage(BaseModel):
    model_config = _LAZY

    role: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    # Provider-specific blocks that must be sent back verbatim (e.g. Anthropic thinking).
    reasoning: list[dict[str, Any]] = Field(default_factory=list)


class ToolResultMessage(BaseModel):
    model_config = _LAZY

    role: Literal["tool"] = "tool"
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False


Message = Annotated[UserMessage | AssistantMessage | ToolResultMessage, Field(discriminator="role")]


class ToolSpec(BaseModel):
    """A tool as a model sees it."""

    model_config = _LAZY

    name: str
    description: str
    parameters: dict[str, Any]


class ModelRequest(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    system: str
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)


class ModelTurn(BaseModel):
    """What one model call produced."""

    model_config = _LAZY

    message: AssistantMessage
    usage: Usage = Field(default_factory=Usage)
    stop_reason: str = ""


COMPACTED_PREFIX = "[The conversation so far was compacted. Summary of it:]\n\n"
COMPACTED_ACK = "Understood. I will go on from this summary."


def compacted(summary: str) -> list[Message]:
    """The conversation that replaces a compacted one: the summary as the user's, and the
    assistant's acknowledgement."""
    return [UserMessage(content=COMPACTED_PREFIX + summary), AssistantMessage(text=COMPACTED_ACK)]


# A JSON string may escape half a surrogate pair ("\\ud83d", half an emoji), which models do
# send; such a str cannot be encoded as UTF-8, so nothing downstream could write it.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(value: Any) -> Any:
    """`value` (parsed JSON) with every lone surrogate replaced by U+FFFD."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value
