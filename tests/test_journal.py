"""The session journal: events stored in order, concurrent sessions in one database, the
conversation rebuilt from it, resuming, and a journal that cannot be used never stopping a session."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from session_harness import FAST_RETRY, FakeProvider, Harness, calls, check_stream, text

from osprey.events import AssistantText, Event, Notice, SessionEnd, SessionStart, TaskEnd, ToolCallEvent, ToolResultEvent, UsageEvent, UserMessageEvent
from osprey.messages import AssistantMessage, ToolCall, ToolResultMessage, Usage, UserMessage
from osprey.session.core import Session
from osprey.sessions import journal as journal_module
from osprey.sessions.journal import (
    INCOMPLETE_KEY,
    TRUNCATED_KEY,
    Journal,
    JournalError,
    event_json,
    find_session,
    journal_path,
    list_sessions,
    load_events,
    make_title,
)
from osprey.sessions.resume import ENDED_TEXT, rebuild_conversation, resume_point


@pytest.fixture
def harness(workspace: Path, tmp_path: Path) -> Harness:
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    return Harness(workspace=workspace, home=tmp_path / "home")


def dumped(events: list[Event]) -> list[dict[str, Any]]:
    return [json.loads(e.model_dump_json()) for e in events]


def start_event(session_id: str, cwd: str = "/w") -> SessionStart:
    return SessionStart(session_id=session_id, provider="openai", model="m-1", cwd=cwd, tool_service="local",
                        tools=["read_file"], approval_policy="never", max_turns=5)


def new_session(h: Harness, script: list[Any], journal: Journal | None, *, session_id: str | None = None,
                resume: Any = None, warn: Any = None) -> tuple[Session, FakeProvider, list[Event]]:
    options = h.options("never", None, FAST_RETRY, ())
    update: dict[str, Any] = {"resume": resume}
    if session_id is not None:
        update["session_id"] = session_id
    events: list[Event] = []
    provider = FakeProvider(script)
    session = Session(options.model_copy(update=update), emit=events.append, provider=provider, journal=journal,
                      warn=warn or (lambda _: None))
    return session, provider, events


# ------------------------------------------------------------------ storing events


def test_events_round_trip_in_order_with_the_session_row(tmp_path: Path) -> None:
    path = journal_path(tmp_path / "home")
    journal = Journal(path)
    events: list[Event] = [start_event("s1"), UserMessageEvent(text="  Fix   the\nbug " + "x" * 200)]
    for turn in range(1, 60):
        events += [UsageEvent(turn=turn, usage=Usage(input_tokens=1), total=Usage(input_tokens=turn)),
                   ToolCallEvent(turn=turn, id=f"c{turn}", name="read_file", arguments={"path": f"f{turn}", "é": "\u2603"}),
                   ToolResultEvent(turn=turn, id=f"c{turn}", name="read_file", ok=turn % 2 == 0,
                                   error_category=None if turn % 2 == 0 else "not_found", output=f"out {turn}")]
    events += [TaskEnd(session_id="s1", outcome="Completed", exit_status=0, turns=59, usage=Usage()),
               SessionEnd(session_id="s1", outcome="Completed", exit_status=0, turns=59, usage=Usage())]
    for event in events:
        journal.record(event, "s1", workspace="/ws")
    journal.close()
    assert load_events(path, "s1") == dumped(events)
    [row] = list_sessions(path)
    assert (row.id, row.cwd, row.workspace, row.provider, row.model, row.outcome) == ("s1", "/w", "/ws", "openai", "m-1", "Completed")
    assert row.title == make_title(events[1].text) and row.title.startswith("Fix the bug xxx") and len(row.title) <= 80
    assert row.created == events[0].ts and row.updated == events[-1].ts
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0, "close checkpoints the log"
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        seqs = [seq for (seq,) in conn.execute("SELECT seq FROM events WHERE session_id = 's1' ORDER BY seq")]
    assert seqs == list(range(len(events)))


def test_each_event_is_committed_promptly_without_close(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    journal = Journal(path)
    try:
        journal.record(start_event("s2"), "s2")
        journal.record(UserMessageEvent(text="hello"), "s2")
        deadline = time.monotonic() + 5
        seen: list[dict[str, Any]] = []
        while time.monotonic() < deadline and len(seen) < 2:
            try:
                seen = load_events(path, "s2")
            except JournalError:
                pass  # the writer has not made the file or its tables yet
            time.sleep(0.01)
        assert [e["type"] for e in seen] == ["session_start", "user_message"], "another process sees committed events before close"
    finally:
        journal.close()


def test_a_huge_event_is_stored_truncated_and_marked(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    journal = Journal(path, max_event_bytes=64 * 1024)
    big = ToolResultEvent(turn=1, id="c1", name="bash", ok=True, output="y" * 500_000)
    journal.record(big, "s3")
    journal.record(Notice(message="after"), "s3")
    journal.close()
    [stored, after] = load_events(path, "s3")
    assert stored[TRUNCATED_KEY] > 500_000
    assert len(json.dumps(stored)) <= 64 * 1024
    assert stored["type"] == "tool_result" and stored["output"].startswith("yyy") and "not kept in the session journal" in stored["output"]
    assert after["message"] == "after"


def test_a_resumed_session_continues_the_sequence(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    for text_ in ("first", "second"):
        journal = Journal(path)
        journal.record(start_event("s4"), "s4")
        journal.record(UserMessageEvent(text=text_), "s4")
        journal.close()
    assert [e.get("text") for e in load_events(path, "s4")] == [None, "first", None, "second"]
    row = find_session(path, "s4")
    assert row.title == "first", "the title stays the first prompt"
    assert find_session(path, "s").id == "s4", "a unique prefix finds the session"


# ------------------------------------------------------------------ real sessions


async def test_concurrent_sessions_share_one_database(harness: Harness) -> None:
    path = journal_path(harness.home)

    async def one(n: int) -> tuple[str, list[Event]]:
        script = [calls(("read_file", {"path": "notes.txt"}), ("grep", {"pattern": "beta"})) for _ in range(3)] + [text(f"done {n}")]
        session, _, events = new_session(harness, script, Journal(path))
        async with session:
            await session.submit(f"task {n}")
        return session.session_id, events

    results = await asyncio.gather(*(one(n) for n in range(3)))
    assert len({sid for sid, _ in results}) == 3
    for session_id, events in results:
        check_stream(events)
        assert load_events(path, session_id) == dumped(events)
    assert {row.id for row in list_sessions(path, str(harness.workspace.resolve()))} == {sid for sid, _ in results}


async def test_the_rebuilt_conversation_is_the_sessions_and_resuming_goes_on_with_it(harness: Harness) -> None:
    path = journal_path(harness.home)
    script = [
        calls(("read_file", {"path": "notes.txt"}), ("find_files", {"pattern": "*.txt"}), say="Looking."),
        calls(("bash", {"command": "echo hi"})),
        text("First done."),
        text(""),  # an empty reply: the loop sends a correction as the user's
        calls(("write_file", {"path": "out.txt", "content": "x"}), ("read_file", {"path": "missing.txt"})),
        text("Second done."),
    ]
    session, _, events = new_session(harness, script, Journal(path))
    async with session:
        await session.submit("First task.")
        await session.submit("Second task.")
        messages = list(session.messages)
        turns = session.loop.turns if session.loop else 0
    assert any(isinstance(e, AssistantText) and e.text == "Looking." for e in events)
    stored = load_events(path, session.session_id)
    assert stored == dumped(events)
    assert rebuild_conversation(stored) == messages
    assert rebuild_conversation(events) == messages
    point = resume_point(stored)
    assert point.turns == turns == 6 and point.usage == session.usage

    resumed, provider, new_events = new_session(harness, [text("Third done.")], Journal(path), session_id=session.session_id, resume=point)
    async with resumed:
        await resumed.submit("Go on.")
    assert provider.requests[0].messages == [*messages, UserMessage(content="Go on.")]
    assert isinstance(new_events[0], SessionStart) and new_events[0].session_id == session.session_id
    usage_events = [e for e in new_events if isinstance(e, UsageEvent)]
    assert usage_events[0].turn == 7, "turn numbers continue"
    assert usage_events[0].total == point.usage + usage_events[0].usage
    all_events = load_events(path, session.session_id)
    assert all_events == dumped(events) + dumped(new_events)
    assert rebuild_conversation(all_events) == resumed.messages
    assert len(list_sessions(path)) == 1


def test_a_call_killed_mid_run_gets_a_result_saying_so() -> None:
    events = [
        UserMessageEvent(text="go"),
        AssistantText(turn=1, text="reading", reasoning=[{"type": "thinking", "thinking": "hm", "signature": "s"}]),
        ToolCallEvent(turn=1, id="a", name="read_file", arguments={"path": "x"}),
        ToolCallEvent(turn=1, id="b", name="grep", arguments={"pattern": "y"}),
        ToolResultEvent(turn=1, id="a", name="read_file", ok=True, output="X"),
        ToolCallEvent(turn=2, id="c", name="bash", arguments={"command": "sleep 9"}),
    ]
    assert rebuild_conversation(events) == [
        UserMessage(content="go"),
        AssistantMessage(text="reading", reasoning=[{"type": "thinking", "thinking": "hm", "signature": "s"}], tool_calls=[
            ToolCall(id="a", name="read_file", arguments={"path": "x"}), ToolCall(id="b", name="grep", arguments={"pattern": "y"})]),
        ToolResultMessage(tool_call_id="a", name="read_file", content="X"),
        ToolResultMessage(tool_call_id="b", name="grep", content=ENDED_TEXT, is_error=True),
        AssistantMessage(tool_calls=[ToolCall(id="c", name="bash", arguments={"command": "sleep 9"})]),
        ToolResultMessage(tool_call_id="c", name="bash", content=ENDED_TEXT, is_error=True),
    ]


# ------------------------------------------------------------------ a journal that cannot be used


async def run_warned(harness: Harness, path: Path) -> tuple[list[Event], list[str]]:
    """A session whose journal at `path` warns into the returned list (the session's own warnings are not in it)."""
    warnings: list[str] = []
    script = [calls(("read_file", {"path": "notes.txt"})), text("ok")]
    session, _, events = new_session(harness, script, Journal(path, warn=warnings.append))
    async with session:
        end = await asyncio.wait_for(session.submit("Read the notes."), 60)
    assert end.outcome == "Completed"
    check_stream(events)
    return events, warnings


def reported_loss(warnings: list[str], events: list[Event]) -> None:
    """One warning when the failure began, one at the end counting every event of the session as not saved."""
    assert len(warnings) == 2, warnings
    assert "goes on without being saved for now" in warnings[0] and "kept in memory" in warnings[0] and "retried" in warnings[0], warnings
    assert warnings[1].startswith(f"{len(events)} events of this session were not saved:"), warnings
    assert "holds none of this run's events" in warnings[1], warnings


async def test_a_corrupt_database_warns_once_and_the_session_runs(harness: Harness) -> None:
    path = journal_path(harness.home)
    path.parent.mkdir(parents=True)
    garbage = b"this is not a database\n" * 400
    path.write_bytes(garbage)
    events, warnings = await run_warned(harness, path)
    reported_loss(warnings, events)
    assert str(path) in warnings[0] and "cannot be opened" in warnings[0] and "moved aside" in warnings[0], warnings
    assert path.read_bytes() == garbage, "the journal leaves a file it cannot read alone"


LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("CREATE TABLE IF NOT EXISTS other (x)")
conn.execute("BEGIN EXCLUSIVE")
conn.execute("INSERT INTO other VALUES (1)")
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def locked_journal(harness: Harness) -> Iterator[Path]:
    """The journal's path, its database held under an exclusive lock by another process."""
    path = journal_path(harness.home)
    path.parent.mkdir(parents=True)
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        yield path
    finally:
        locker.communicate("", timeout=30)


async def test_a_database_locked_by_another_process_warns_and_the_session_runs(harness: Harness, locked_journal: Path) -> None:
    events, warnings = await run_warned(harness, locked_journal)
    reported_loss(warnings, events)
    assert "locked" in warnings[0] and "locked" in warnings[1], warnings


async def test_a_home_that_cannot_be_created_warns_and_the_session_runs(harness: Harness, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    path = journal_path(blocker / "home")
    events, warnings = await run_warned(harness, path)
    reported_loss(warnings, events)
    assert "cannot be opened" in warnings[0], warnings


# ------------------------------------------------------------------ recovering from a failure


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def numbered(count: int) -> list[Event]:
    return [Notice(message=f"event {n:04d}") for n in range(count)]


def stored_seqs(path: Path, session_id: str) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [seq for (seq,) in conn.execute("SELECT seq FROM events WHERE session_id = ? ORDER BY seq", (session_id,))]


def test_a_lock_held_past_the_busy_timeout_then_released_loses_nothing(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    warnings: list[str] = []
    journal = Journal(path, warn=warnings.append, busy_timeout_ms=100)
    events = [start_event("s5"), UserMessageEvent(text="go"), *numbered(29)]  # a prompt: the session is kept
    for event in events[:5]:
        journal.record(event, "s5")
    assert journal.flush()
    locker = sqlite3.connect(path, isolation_level=None)
    try:
        locker.execute("BEGIN IMMEDIATE")
        for event in events[5:20]:
            journal.record(event, "s5")
        wait_until(lambda: len(warnings) == 1)
        time.sleep(1.0)  # ten busy timeouts, and past the first retry: the lock is still held
        for event in events[20:]:
            journal.record(event, "s5")
        assert not journal.flush(0.1)
        assert load_events(path, "s5") == dumped(events[:5]), "readers go on; nothing more is committed while locked"
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert journal.flush(10), "the kept events are written once the lock is gone"
    journal.record(Notice(message="after"), "s5")
    journal.close()
    stored = load_events(path, "s5")
    assert stored[:-1] == dumped(events) and stored[-1]["message"] == "after"
    assert stored_seqs(path, "s5") == list(range(len(events) + 1)), "gap-free, in emission order"
    assert len(warnings) == 2, warnings
    assert "cannot be written" in warnings[0] and "locked" in warnings[0] and "kept in memory" in warnings[0], warnings
    assert warnings[1] == f"the session journal {path} can be written again: 26 events were saved late, none lost"


@pytest.mark.parametrize("blocker", ["a directory", "not SQLite"])
def test_a_journal_that_cannot_be_opened_retries_quietly_until_it_can(tmp_path: Path, blocker: str) -> None:
    """As root chmod stops no writes: the database's path is a directory, or a file that is not SQLite, then fixed."""
    path = journal_path(tmp_path / "home")
    path.parent.mkdir()
    garbage = b"this is not a database\n" * 400
    if blocker == "a directory":
        path.mkdir()
    else:
        path.write_bytes(garbage)
    warnings: list[str] = []
    journal = Journal(path, warn=warnings.append, retry_delays=(0.01, 0.02))
    events = [start_event("s6"), UserMessageEvent(text="go"), *numbered(19)]  # a prompt: the session is kept
    for event in events:
        journal.record(event, "s6")
    time.sleep(0.5)  # some twenty retries of opening it
    assert len(warnings) == 1 and "cannot be opened" in warnings[0] and str(path) in warnings[0], warnings
    assert not journal.flush(0.01)
    if blocker == "a directory":
        path.rmdir()
    else:
        path.rename(path.with_name("sessions.db.corrupt"))
    assert journal.flush(10)
    journal.close()
    assert load_events(path, "s6") == dumped(events)
    assert stored_seqs(path, "s6") == list(range(len(events)))
    assert len(warnings) == 2 and warnings[1].endswith("can be written again: 21 events were saved late, none lost"), warnings
    if blocker != "a directory":
        assert path.with_name("sessions.db.corrupt").read_bytes() == garbage


@pytest.mark.parametrize("bound", ["events", "bytes"])
def test_past_the_bound_the_session_is_sealed_and_its_record_says_where_it_stops(tmp_path: Path, bound: str) -> None:
    path = journal_path(tmp_path / "home")
    path.parent.mkdir()
    path.mkdir()
    events = [start_event("s7"), UserMessageEvent(text="go"), *numbered(28)]  # a prompt: the session is kept
    kept = 10
    if bound == "events":
        limits: dict[str, Any] = {"max_unsaved_events": kept}
    else:
        limits = {"max_unsaved_bytes": sum(len(event_json(e).encode()) for e in events[:kept]) + 5}
    warnings: list[str] = []
    journal = Journal(path, warn=warnings.append, retry_delays=(0.01, 0.02), **limits)
    for event in events:
        journal.record(event, "s7")
    wait_until(lambda: len(warnings) == 2)
    assert "cannot be opened" in warnings[0] and "not kept" in warnings[1] and "s7" in warnings[1], warnings
    path.rmdir()
    wait_until(lambda: len(warnings) == 3)
    assert warnings[2].endswith("can be written again: 10 events were saved late; later events of session s7 were not kept "
                                "(its saved record stops before them)"), warnings
    journal.record(Notice(message="after the database came back"), "s7")  # not kept either: the record stays a prefix
    journal.close()
    assert len(warnings) == 4 and warnings[3].startswith("21 events of this session were not saved:"), warnings
    assert "the saved record of session s7 stops at event 9" in warnings[3], warnings

    stored = load_events(path, "s7")
    assert stored[:kept] == dumped(events[:kept]) and len(stored) == kept + 1
    marker = stored[kept]
    assert marker["type"] == "notice" and marker["level"] == "warning" and marker[INCOMPLETE_KEY] == kept - 1
    assert "after event 9" in marker["message"] and "stops here" in marker["message"]
    assert stored_seqs(path, "s7") == list(range(kept + 1))
    assert resume_point(stored) == resume_point(events[:kept]), "the marker is no part of the conversation"

    # Going on with it: the journal says the record is incomplete, and appends after the marker.
    again: list[str] = []
    resumed = Journal(path, warn=again.append)
    resumed.record(start_event("s7"), "s7")
    resumed.close()
    assert len(again) == 1 and "record of session s7 is incomplete" in again[0] and "after event 9" in again[0], again
    assert [e["type"] for e in load_events(path, "s7")[kept:]] == ["notice", "session_start"]
    assert stored_seqs(path, "s7") == list(range(kept + 2))


async def test_a_resumed_session_with_an_incomplete_record_is_warned(harness: Harness) -> None:
    path = journal_path(harness.home)
    path.parent.mkdir(parents=True)
    path.mkdir()
    first = Journal(path, retry_delays=(0.01, 0.02), max_unsaved_events=3)
    events = [start_event("s9"), UserMessageEvent(text="First task."), AssistantText(turn=1, text="Done."), *numbered(5)]
    for event in events:
        first.record(event, "s9")
    path.rmdir()
    assert first.flush()
    first.close()
    point = resume_point(load_events(path, "s9"))
    assert point.messages == [UserMessage(content="First task."), AssistantMessage(text="Done.")]
    warnings: list[str] = []
    session, provider, new_events = new_session(harness, [text("Going on.")], Journal(path, warn=warnings.append), session_id="s9", resume=point)
    async with session:
        await session.submit("Go on.")
    assert provider.requests[0].messages == [*point.messages, UserMessage(content="Go on.")]
    assert len(warnings) == 1 and "record of session s9 is incomplete: events after event 2" in warnings[0], warnings
    assert load_events(path, "s9")[4:] == dumped(new_events)


def test_close_while_the_database_stays_locked_returns_and_reports_the_loss(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    Journal(path).close()
    locker = sqlite3.connect(path, isolation_level=None)
    try:
        locker.execute("BEGIN IMMEDIATE")
        warnings: list[str] = []
        journal = Journal(path, warn=warnings.append, busy_timeout_ms=200)
        for event in [start_event("s8"), *numbered(6)]:
            journal.record(event, "s8")
        wait_until(lambda: len(warnings) == 1)
        started = time.monotonic()
        journal.close()
        elapsed = time.monotonic() - started
        assert elapsed < 2.0, f"one last attempt, bounded by the busy timeout: {elapsed:.2f} s"
        assert len(warnings) == 2, warnings
        assert warnings[1] == (f"7 events of this session were not saved: {path} could not be written "
                               "(OperationalError: database is locked); the saved record of session s8 holds none of this run's events")
        journal.close()  # a second close does nothing
        assert len(warnings) == 2
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert load_events(path, "s8") == []


def test_close_never_waits_past_its_timeout_nor_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = journal_path(tmp_path)
    Journal(path).close()
    monkeypatch.setattr(journal_module, "CLOSE_TIMEOUT", 0.3)
    locker = sqlite3.connect(path, isolation_level=None)
    try:
        locker.execute("BEGIN IMMEDIATE")
        warnings: list[str] = []

        def warn(message: str) -> None:
            warnings.append(message)
            raise RuntimeError("the front end is gone")

        journal = Journal(path, warn=warn, busy_timeout_ms=3000)
        for event in [start_event("s10"), *numbered(3)]:
            journal.record(event, "s10")
        time.sleep(0.1)  # the writer is waiting for the lock
        started = time.monotonic()
        journal.close()
        elapsed = time.monotonic() - started
        assert elapsed < 1.0, f"close waited {elapsed:.2f} s"
        assert warnings == [f"4 events of this session were not saved: {path} was still being written 0.3 s after the end"]
    finally:
        locker.execute("ROLLBACK")
        locker.close()


def test_a_journal_from_before_child_sessions_is_read_and_then_gains_its_parent_column(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE sessions (id TEXT PRIMARY KEY, cwd TEXT NOT NULL, workspace TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
            provider TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '', created REAL NOT NULL, updated REAL NOT NULL, outcome TEXT);
        CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, ts REAL NOT NULL, data TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
        INSERT INTO sessions VALUES ('old1', '/w', '/w', 'an old one', 'openai', 'm', 1.0, 2.0, 'Completed');
    """)
    conn.commit()
    conn.close()
    [row] = list_sessions(path)
    assert row.id == "old1" and row.parent_id is None and "parent_id" not in row.model_dump()
    assert [(depth, r.id) for depth, r in journal_module.session_tree(path, "old1")] == [(0, "old1")]
    journal = Journal(path)
    journal.record(SessionStart(session_id="child1", provider="openai", model="m", cwd="/w", tool_service="local", tools=[],
                                approval_policy="never", max_turns=1, agent_id="child1", parent_id="old1"), "child1", "/w")
    journal.record(UserMessageEvent(text="the child's task"), "child1", "/w")  # a child always has its task as its prompt
    journal.close()
    assert [(depth, r.id) for depth, r in journal_module.session_tree(path, "old1")] == [(0, "old1"), (1, "child1")]
