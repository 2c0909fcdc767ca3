"""Every event type is one member of the typed union: written to the journal and read back, it is
the same event."""

from __future__ import annotations

import typing
from pathlib import Path

from osprey.events import (
    EVENT_TYPES,
    Advisory,
    AnyEvent,
    AssistantText,
    Compaction,
    Event,
    McpServerState,
    ModelSwitch,
    Notice,
    PersonaSwitch,
    Question,
    SessionEnd,
    SessionStart,
    TaskEnd,
    TaskStatus,
    TodoList,
    ToolCallEvent,
    ToolResultEvent,
    UnknownEvent,
    UsageEvent,
    UserMessageEvent,
    Verification,
    WorkflowEnd,
    WorkflowProgress,
    WorkflowStart,
    parse_event,
)
from osprey.messages import Usage
from osprey.sessions.journal import Journal, read_events

USAGE = Usage(input_tokens=12, output_tokens=5, cache_read_tokens=2)


def one_of_each() -> list[Event]:
    return [
        SessionStart(session_id="s1", provider="openai", model="m", cwd="/w", tool_service="local", tools=["read_file"],
                     approval_policy="never", max_turns=150, effort="low"),
        UserMessageEvent(text="Do it, ünïcode ✓"),
        UserMessageEvent(text="again", origin="loop"),
        AssistantText(turn=1, text="Looking.", reasoning=[{"type": "thinking", "thinking": "hm", "signature": "x"}]),
        ToolCallEvent(turn=1, id="c1", name="read_file", arguments={"path": "a.txt", "nested": {"n": [1, 2]}}),
        ToolResultEvent(turn=1, id="c1", name="read_file", ok=False, error_category="not_found", output="no", truncated_chars=3, duration_ms=7),
        ToolCallEvent(turn=1, id="u1", name="bash", arguments={"command": "git diff"}, requested_by="user"),
        ToolResultEvent(turn=1, id="u1", name="bash", ok=True, output="", requested_by="user"),
        Compaction(turn=2, reason="auto", summary="so far", messages_before=9, input_tokens_before=1000),
        ModelSwitch(provider="anthropic", model="c", effort=None),
        PersonaSwitch(persona="coding"),
        Advisory(turn=2, detector="doom_loop", message="stop", call_id="c9"),
        TodoList(turn=2, items=[{"content": "x", "status": "pending"}]),
        TaskStatus(turn=2, status="blocked", summary="needs a key"),
        Verification(turn=2, armed=True, claims=["a"], evidence=["b"], objections=["c"]),
        Question(turn=2, question="which?", answer=None),
        UsageEvent(turn=2, usage=USAGE, total=USAGE + USAGE),
        Notice(level="warning", message="careful"),
        TaskEnd(session_id="s1", outcome="Completed", exit_status=0, turns=2, usage=USAGE, final_text="done"),
        SessionEnd(session_id="s1", outcome="Completed", exit_status=0, turns=2, usage=USAGE, final_text="done", error=None,
                   agent_id="s1", parent_id="p0"),
        WorkflowStart(run_id="r1", name="fan", path="/h/workflows/fan.js", scope="user", args="3"),
        WorkflowProgress(run_id="r1", message="starting"),
        WorkflowProgress(run_id="r1", label="agent #1", status="running", agent_session_id="c1"),
        WorkflowEnd(run_id="r1", name="fan", status="done", result="{}", agents=1, usage=USAGE),
        McpServerState(server="srv", state="ready", tools=3),
        McpServerState(server="srv", state="failed", tools=0, error="it exited with code 1"),
    ]


def test_the_union_names_every_event_type() -> None:
    members = typing.get_args(typing.get_args(AnyEvent)[0])
    assert set(members) == set(EVENT_TYPES)
    assert {type(e) for e in one_of_each()} == set(EVENT_TYPES)
    assert len({t.model_fields["type"].default for t in EVENT_TYPES}) == len(EVENT_TYPES)


def test_every_event_type_round_trips_through_the_journal(tmp_path: Path) -> None:
    events = one_of_each()
    journal = Journal(tmp_path / "sessions.db")
    for event in events:
        journal.record(event, "s1", "/w")
    journal.close()
    back = read_events(tmp_path / "sessions.db", "s1")
    assert back == events
    assert [type(e) for e in back] == [type(e) for e in events]
    for event in events:
        assert parse_event(event.model_dump_json()) == event
        assert parse_event(event.model_dump(mode="json")) == event


def test_a_lead_sessions_events_leave_the_agent_ids_out() -> None:
    text = Notice(message="x").model_dump_json()
    assert "agent_id" not in text and "parent_id" not in text
    child = Notice(message="x", agent_id="c", parent_id="p").model_dump_json()
    assert '"agent_id":"c"' in child and '"parent_id":"p"' in child


def test_unknown_or_broken_records_are_read_as_unknown_events() -> None:
    assert isinstance(parse_event({"type": "from_the_future", "ts": 1.0, "x": 1}), UnknownEvent)
    broken = parse_event({"type": "tool_call", "ts": 1.0, "turn": "not a number"})
    assert isinstance(broken, UnknownEvent) and broken.type == "tool_call"
    assert isinstance(parse_event("not json"), UnknownEvent)
    assert isinstance(parse_event("[1, 2]"), UnknownEvent)
    # The journal's own marker on a notice is kept.
    marked = parse_event({"type": "notice", "ts": 1.0, "level": "warning", "message": "cut", "journal_incomplete": 41})
    assert isinstance(marked, Notice) and marked.model_extra == {"journal_incomplete": 41}
