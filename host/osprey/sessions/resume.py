"""The conversation of a journaled session, rebuilt from its events, to go on with it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..choices import EFFORTS, MODEL_PROVIDERS
from ..events import (
    AssistantText,
    Compaction,
    Event,
    ModelSwitch,
    SessionStart,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
    UserMessageEvent,
    Verification,
    parse_event,
)
from ..messages import AssistantMessage, Message, ToolCall, ToolResultMessage, Usage, UserMessage, compacted, kept_images

# A recorded model name longer than this is not one a launch flag could give.
MAX_MODEL_NAME = 200

ENDED_TEXT = "Error (cancelled): the session ended before this call finished; its effects, if any, are unknown."


class ResumePoint(BaseModel):
    """Where a resumed session starts: its conversation, the turns it has had and its usage."""

    model_config = ConfigDict(defer_build=True)  # built when a session is resumed

    messages: list[Message] = Field(default_factory=list)
    turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    # The last `verification` event: the completion checkpoint to go on with.
    verification: Verification | None = None


def typed(events: Iterable[Event | Mapping[str, Any]]) -> list[Event]:
    """A record's events as typed events (a recorded dict is parsed; one that does not validate
    is an `UnknownEvent`, which every reader passes over)."""
    return [e if isinstance(e, Event) else parse_event(dict(e)) for e in events]


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

    def add(self, e: Event) -> None:
        if isinstance(e, Compaction):
            # The conversation before it was replaced by its summary.
            self.assistant, self.turn, self.results = None, None, []
            self.messages = compacted(e.summary)
        elif isinstance(e, UserMessageEvent):
            self.flush()
            self.messages.append(UserMessage(content=e.text))
        elif isinstance(e, AssistantText):
            self.open_turn(e.turn, e.text, e.reasoning)
        elif isinstance(e, ToolCallEvent) and e.requested_by is None:  # a call the person ran is not the model's
            assistant = self.assistant if self.assistant is not None and self.turn == e.turn else self.open_turn(e.turn)
            assistant.tool_calls.append(ToolCall(id=e.id, name=e.name, arguments=dict(e.arguments)))
        elif isinstance(e, ToolResultEvent) and e.requested_by is None:
            if self.assistant is None or self.turn != e.turn:
                return  # a result without its call cannot be sent to a model
            # The images it returned, checked again (a record is read from disk); any that are not
            # whole any more are noted in the text.
            recorded = e.images
            images, dropped = kept_images(recorded) if isinstance(recorded, list) else ([], "")
            self.results.append(ToolResultMessage(tool_call_id=e.id, name=e.name, content=e.output + dropped, is_error=not e.ok, images=images))


def rebuild_conversation(events: Iterable[Event | Mapping[str, Any]]) -> list[Message]:
    """The conversation the model saw, from a session's `user_message`, `assistant_text`,
    `tool_call`, `tool_result` and `compaction` events. A call without a result (the session was
    killed while it ran) gets an error result saying so, so the conversation is valid for any
    provider. Recorded dicts are read as typed events."""
    builder = _Builder()
    for event in typed(events):
        builder.add(event)
    builder.flush()
    return builder.messages


def resume_point(events: Iterable[Event | Mapping[str, Any]]) -> ResumePoint:
    """The conversation, the number of turns (the highest turn number recorded) and the usage so far."""
    listed = typed(events)
    turns = 0
    usage = Usage()
    verification: Verification | None = None
    for e in listed:
        turn = getattr(e, "turn", None)
        if isinstance(turn, int) and not isinstance(turn, bool):
            turns = max(turns, turn)
        if isinstance(e, UsageEvent):
            usage = e.total.model_copy()
        elif isinstance(e, Verification):
            verification = e
    return ResumePoint(messages=rebuild_conversation(listed), turns=turns, usage=usage, verification=verification)


def recorded_model(events: Iterable[Event | Mapping[str, Any]]) -> dict[str, str]:
    """The provider, model and effort a journaled session last ran with (its `session_start` and
    `model_switch` events), as launch flags; what the record does not say is left out, and so is a
    value no launch flag could have given (the replay provider, a model name that is not plain)."""
    found: dict[str, str] = {}
    for event in typed(events):
        if not isinstance(event, (SessionStart, ModelSwitch)):
            continue
        if event.provider not in MODEL_PROVIDERS or not _plain(event.model):
            continue  # the replay provider, or a model name no flag could give: nothing to go on with
        found = {"provider": event.provider, "model": event.model}
        if event.effort in EFFORTS:
            found["effort"] = event.effort
    return found


def recorded_persona(events: Iterable[Event | Mapping[str, Any]]) -> str | None:
    """The persona a journaled session last ran as (its `session_start` and `persona_switch`
    events), or None when it ran with none."""
    from ..events import PersonaSwitch

    found: str | None = None
    for event in typed(events):
        if isinstance(event, SessionStart):
            found = event.persona
        elif isinstance(event, PersonaSwitch):
            found = event.persona
    return found


def _plain(name: str) -> bool:
    return 0 < len(name) <= MAX_MODEL_NAME and name.isprintable() and not name.isspace()
