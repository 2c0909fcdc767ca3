"""The events a session emits: the JSON Lines schema of `osprey agent` (see docs/events.md).

`AnyEvent` is the discriminated union of every event type: the journal writes events and
`parse_event` reads them back (resume, `osprey sessions`, the TUI's replay), so a recorded event
is the same typed object as the live one. A child session's events (a subagent's) carry its
`agent_id` and its parent's session id as `parent_id`; a lead session's leave both out.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .messages import Usage


def _now() -> float:
    return round(time.time(), 3)


def _absent(value: object) -> bool:
    return value is None


class Event(BaseModel):
    # A recorded event may carry keys the journal added (a cut string's marker, an incomplete
    # record's notice); they are kept, never an error.
    # Each event type builds its validator at its first use: a run emits a few of them.
    model_config = ConfigDict(extra="allow", defer_build=True)

    type: str
    ts: float = Field(default_factory=_now)
    # Set on the events of a child session: its own id, and the session that started it.
    agent_id: str | None = Field(None, exclude_if=_absent)
    parent_id: str | None = Field(None, exclude_if=_absent)


class SessionStart(Event):
    type: Literal["session_start"] = "session_start"
    session_id: str
    provider: str
    model: str
    cwd: str
    tool_service: str
    tools: list[str]
    approval_policy: str
    max_turns: int
    effort: str | None = None
    # The persona the session starts as (`--persona`, `[agent].default_persona`); absent: none.
    persona: str | None = Field(None, exclude_if=_absent)


class UserMessageEvent(Event):
    """A message added to the conversation as the user's: the prompt, or a correction the loop sent."""

    type: Literal["user_message"] = "user_message"
    text: str
    origin: Literal["user", "loop"] = "user"


class AssistantText(Event):
    type: Literal["assistant_text"] = "assistant_text"
    turn: int
    text: str
    # Reasoning blocks as the provider sent them (Anthropic thinking), sent back with the conversation.
    reasoning: list[dict[str, Any]] = Field(default_factory=list)


class ToolCallEvent(Event):
    type: Literal["tool_call"] = "tool_call"
    turn: int
    id: str
    name: str
    arguments: dict[str, Any]
    # "user": the person ran this call from a front end (`/diff`), not the model; it is not part of
    # the conversation.
    requested_by: Literal["user"] | None = Field(None, exclude_if=_absent)


class ToolResultEvent(Event):
    type: Literal["tool_result"] = "tool_result"
    turn: int
    id: str
    name: str
    ok: bool
    error_category: str | None = None
    output: str
    truncated_chars: int = 0
    duration_ms: int = 0
    requested_by: Literal["user"] | None = Field(None, exclude_if=_absent)
    # The images the tool returned, as the result message carries them ({media_type, data: base64});
    # checked when the result was made, and again when a journal is resumed.
    images: list[dict[str, Any]] = Field(default_factory=list, exclude_if=lambda v: not v)


class Compaction(Event):
    """The conversation so far was replaced by a summary the model wrote (`/compact`, or near the
    context limit). The conversation after it is: a user message with `summary`, the assistant's
    acknowledgement, and what follows."""

    type: Literal["compaction"] = "compaction"
    turn: int
    reason: Literal["manual", "auto"]
    summary: str
    messages_before: int
    # The size of the conversation that was summarised: the input tokens of the last model turn.
    input_tokens_before: int = 0


class PersonaSwitch(Event):
    """From the next turn on, the session's system prompt is this persona's (`switch_persona`, `/agents`)."""

    type: Literal["persona_switch"] = "persona_switch"
    persona: str


class ModelSwitch(Event):
    """From the next turn on, the session talks to this provider and model."""

    type: Literal["model_switch"] = "model_switch"
    provider: str
    model: str
    effort: str | None = None


class Advisory(Event):
    """A stall detector saw the model going round in circles and told it so (and, for some, raised
    an objection to completing the task)."""

    type: Literal["advisory"] = "advisory"
    turn: int
    detector: Literal["doom_loop", "identical_failure", "no_progress", "artifact_stasis"]
    message: str  # what the model was told
    call_id: str | None = None  # the call it is about, if one


class TodoList(Event):
    """The model's task list as it stands (`todo_write`)."""

    type: Literal["todo"] = "todo"
    turn: int
    items: list[dict[str, Any]]  # each: content, status (pending | in_progress | completed)


class TaskStatus(Event):
    """The model declared the task `done` or `blocked` (`task_status`), with its summary."""

    type: Literal["task_status"] = "task_status"
    turn: int
    status: Literal["done", "blocked"]
    summary: str


class Verification(Event):
    """The verification checkpoint as it stands: what was claimed, the evidence, and the objections
    still open. The last one in a session's record is its checkpoint (restored on resume)."""

    type: Literal["verification"] = "verification"
    turn: int
    armed: bool
    claims: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    objections: list[str] = Field(default_factory=list)


class Question(Event):
    """The model asked the person something (`question`), and what came back."""

    type: Literal["question"] = "question"
    turn: int
    question: str
    answer: str | None = None  # None: nobody could be asked (headless)


class UsageEvent(Event):
    type: Literal["usage"] = "usage"
    turn: int
    usage: Usage
    total: Usage


class Notice(Event):
    """Something the loop did on its own: a retry, a correction, a warning."""

    type: Literal["notice"] = "notice"
    level: Literal["info", "warning"] = "info"
    message: str


class McpServerState(Event):
    """An MCP server changed state: `starting`, `ready` (with its tool count), `failed` (`error`
    says why; its tools are left out), `restarting` (it stopped; its calls fail until it is back)
    or `stopped`."""

    type: Literal["mcp_server"] = "mcp_server"
    server: str
    state: str
    tools: int = 0
    error: str | None = Field(None, exclude_if=_absent)


class _Ending(Event):
    session_id: str
    outcome: str
    exit_status: int
    turns: int
    usage: Usage
    final_text: str = ""
    error: str | None = None


class TaskEnd(_Ending):
    """One submitted prompt has been worked to an outcome (`turns` of this task; usage so far)."""

    type: Literal["task_end"] = "task_end"


class SessionEnd(_Ending):
    """The session is over: the last task's outcome and exit status, the session's turns and usage."""

    type: Literal["session_end"] = "session_end"


class WorkflowStart(Event):
    """A workflow run started (`/run`, a workflow's command, `run_workflow`)."""

    type: Literal["workflow_start"] = "workflow_start"
    run_id: str
    name: str
    path: str
    scope: str
    args: str = ""


class WorkflowProgress(Event):
    """A workflow run's progress: a line its script logged (`osprey.log`), or one of its agents
    starting or ending (`label`, `status`, `agent_session_id`)."""

    type: Literal["workflow_progress"] = "workflow_progress"
    run_id: str
    message: str = ""
    label: str | None = Field(None, exclude_if=_absent)
    status: str | None = Field(None, exclude_if=_absent)
    agent_session_id: str | None = Field(None, exclude_if=_absent)


class WorkflowEnd(Event):
    """A workflow run ended: done (its result, cut to a preview), failed (the error, as
    FILE:LINE: message for a script's error), or interrupted (a cancel, or the session closing)."""

    type: Literal["workflow_end"] = "workflow_end"
    run_id: str
    name: str
    status: Literal["done", "failed", "interrupted"]
    result: str = ""
    error: str | None = None
    agents: int = 0
    usage: Usage = Field(default_factory=Usage)


class UnknownEvent(Event):
    """A recorded event of a type this version does not know, or one that no longer validates (a
    record cut short, a newer Osprey's): read back as it is, and shown as nothing."""


AnyEvent = Annotated[
    SessionStart | UserMessageEvent | AssistantText | ToolCallEvent | ToolResultEvent | Compaction | ModelSwitch | PersonaSwitch
    | Advisory | TodoList | TaskStatus | Verification | Question | UsageEvent | Notice | TaskEnd | SessionEnd
    | WorkflowStart | WorkflowProgress | WorkflowEnd | McpServerState,
    Field(discriminator="type"),
]
EVENT_TYPES: tuple[type[Event], ...] = (
    SessionStart, UserMessageEvent, AssistantText, ToolCallEvent, ToolResultEvent, Compaction, ModelSwitch, PersonaSwitch,
    Advisory, TodoList, TaskStatus, Verification, Question, UsageEvent, Notice, TaskEnd, SessionEnd,
    WorkflowStart, WorkflowProgress, WorkflowEnd, McpServerState,
)
_adapter: TypeAdapter[Any] | None = None  # built at the first read: a session that reads no record never pays for it


def _events() -> TypeAdapter[Any]:
    global _adapter
    if _adapter is None:
        _adapter = TypeAdapter(AnyEvent)
    return _adapter


def parse_event(data: dict[str, Any] | str | bytes) -> Event:
    """One recorded event (its JSON, or the dict of it) as its typed model; an `UnknownEvent` when
    its type is unknown or it does not validate."""
    try:
        if isinstance(data, (str, bytes)):
            return _events().validate_json(data)
        return _events().validate_python(data)
    except ValidationError:
        if isinstance(data, (str, bytes)):
            import json

            try:
                data = json.loads(data)
            except ValueError:
                return UnknownEvent(type="unreadable")
        if not isinstance(data, dict):
            return UnknownEvent(type="unreadable")
        kind = data.get("type")
        try:
            return UnknownEvent(**{**data, "type": kind if isinstance(kind, str) else "unknown"})
        except (ValidationError, TypeError):
            return UnknownEvent(type=kind if isinstance(kind, str) else "unknown")
