"""The conversation of a journaled session, rebuilt from its events, to go on with it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field

from ..events import Event
from ..messages import AssistantMessage, Message, ToolCall, ToolResultMessage, Usage, UserMessage, compacted

# The providers and efforts a resumed session may go back to (not the replay provider).
RESUMABLE_PROVIDERS = ("openai", "anthropic")
EFFORTS = ("minimal", "low", "medium", "high")
MAX_MODEL_NAME = 200

ENDED_TEXT = "Error (cancelled): the session ended before this call finished; its effects, if any, are unknown."


class ResumePoint(BaseModel):
    """Where a resumed session starts: its conversation, the turns it has had and its usage."""

    messages: list[Message] = Field(default_factory=list)
    turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    # The last `verification` event: the completion checkpoint to go on with.
    verification: dict[str, Any] | None = None


def _as_dict(event: Event | Mapping[str, Any]) -> Mapping[str, Any]:
    return event.model_dump() if isinstance(event, Event) else event


class _Builder:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.turn: int | None = None
        self.assistant: AssistantMessage | None = None
        self.results: list[ToolResultMessage] = []

    def flush(self) -> None:
        """Close the open turn: its assistant message, then a result for each of its calls."""
        if self.assistant is None:
            return
        self.messages.append(self.assistant)
        waiting = list(self.results)
        for call in self.assistant.tool_calls:
            match = next((r for r in waiting if r.tool_call_id == call.id), None)
            if match is not None:
                waiting.remove(match)
                self.messages.append(match)
            else:
                self.messages.append(ToolResultMessage(tool_call_id=call.id, name=call.name, content=ENDED_TEXT, is_error=True))
        self.assistant, self.turn, self.results = None, None, []

    def open_turn(self, turn: int, text: str = "", reasoning: list[dict[str, Any]] | None = None) -> AssistantMessage:
        self.flush()
        self.turn = turn
        self.assistant = AssistantMessage(text=text, reasoning=list(reasoning or []))
        return self.assistant

    def add(self, e: Mapping[str, Any]) -> None:
        kind = e.get("type")
        if e.get("requested_by") == "user":
            return  # a call the person ran from a front end: never part of the conversation
        if kind == "compaction":
            # The conversation before it was replaced by its summary.
            self.assistant, self.turn, self.results = None, None, []
            self.messages = compacted(str(e.get("summary", "")))
        elif kind == "user_message":
            self.flush()
            self.messages.append(UserMessage(content=str(e.get("text", ""))))
        elif kind == "assistant_text":
            self.open_turn(int(e.get("turn", 0)), str(e.get("text", "")), e.get("reasoning") or [])
        elif kind == "tool_call":
            turn = int(e.get("turn", 0))
            assistant = self.assistant if self.assistant is not None and self.turn == turn else self.open_turn(turn)
            arguments = e.get("arguments")
            assistant.tool_calls.append(ToolCall(id=str(e.get("id", "")), name=str(e.get("name", "")),
                                                 arguments=dict(arguments) if isinstance(arguments, Mapping) else {}))
        elif kind == "tool_result":
            if self.assistant is None or self.turn != int(e.get("turn", 0)):
                return  # a result without its call cannot be sent to a model
            self.results.append(ToolResultMessage(tool_call_id=str(e.get("id", "")), name=str(e.get("name", "")),
                                                  content=str(e.get("output", "")), is_error=not e.get("ok", False)))


def rebuild_conversation(events: Iterable[Event | Mapping[str, Any]]) -> list[Message]:
    """The conversation the model saw, from a session's `user_message`, `assistant_text`,
    `tool_call` and `tool_result` events. A call without a result (the session was killed while it
    ran) gets an error result saying so, so the conversation is valid for any provider."""
    builder = _Builder()
    for event in events:
        builder.add(_as_dict(event))
    builder.flush()
    return builder.messages


def resume_point(events: Iterable[Event | Mapping[str, Any]]) -> ResumePoint:
    """The conversation, the number of turns (the highest turn number recorded) and the usage so far."""
    listed = [_as_dict(e) for e in events]
    turns = 0
    usage = Usage()
    verification: dict[str, Any] | None = None
    for e in listed:
        turn = e.get("turn")
        if isinstance(turn, int):
            turns = max(turns, turn)
        if e.get("type") == "usage" and isinstance(e.get("total"), Mapping):
            usage = Usage.model_validate(e["total"])
        if e.get("type") == "verification":
            verification = dict(e)
    return ResumePoint(messages=rebuild_conversation(listed), turns=turns, usage=usage, verification=verification)


def recorded_model(events: Iterable[Event | Mapping[str, Any]]) -> dict[str, str]:
    """The provider, model and effort a journaled session last ran with (its `session_start` and
    `model_switch` events), as launch flags; what the record does not say is left out, and so is a
    value no launch flag could have given (the replay provider, a model name that is not plain)."""
    found: dict[str, str] = {}
    for event in events:
        data = _as_dict(event)
        if data.get("type") not in ("session_start", "model_switch"):
            continue
        provider, model, effort = data.get("provider"), data.get("model"), data.get("effort")
        if provider not in RESUMABLE_PROVIDERS or not isinstance(model, str) or not _plain(model):
            continue  # the replay provider, or a record cut short: nothing to go on with
        found = {"provider": str(provider), "model": model}
        if isinstance(effort, str) and effort in EFFORTS:
            found["effort"] = effort
    return found


def _plain(name: str) -> bool:
    return 0 < len(name) <= MAX_MODEL_NAME and name.isprintable() and not name.isspace()
