"""A session with no prompt is not kept: the journal deletes it when it closes, `list_sessions`
(so `osprey sessions list`, `--continue` and the TUI's /sessions) passes over any left behind (a
killed session, an older journal), and quitting the TUI says how to go on with a kept session."""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_tui import SIZE, started, type_prompt, until
from test_tui_launch import Seen, _exchange, _plan

from osprey.cli import main
from osprey.events import AssistantText, Notice, SessionEnd, SessionStart, TaskEnd, UserMessageEvent
from osprey.messages import Usage
from osprey.sessions.journal import Journal, find_session, has_prompt, journal_path, list_sessions, load_events
from osprey.testing.model_server import ModelServer, Reply
from osprey.tui.app import OspreyApp
from osprey.tui.launch import launch


def start(session_id: str, cwd: str = "/w", parent_id: str | None = None) -> SessionStart:
    event = SessionStart(session_id=session_id, provider="openai", model="m-1", cwd=cwd, tool_service="local", tools=["read_file"],
                         approval_policy="never", max_turns=5)
    if parent_id is not None:
        event.agent_id, event.parent_id = session_id, parent_id
    return event


def end(kind: type[TaskEnd] | type[SessionEnd], turns: int) -> TaskEnd | SessionEnd:
    return kind(session_id="", outcome="Completed", exit_status=0, turns=turns, usage=Usage())


def stored_rows(path: Path, session_id: str) -> tuple[int, int]:
    """How many rows of `sessions` and of `events` the database holds for `session_id`."""
    with sqlite3.connect(path) as conn:
        sessions = conn.execute("SELECT COUNT(*) FROM sessions WHERE id = ?", (session_id,)).fetchone()[0]
        events = conn.execute("SELECT COUNT(*) FROM events WHERE session_id = ?", (session_id,)).fetchone()[0]
    return sessions, events


def test_a_session_closed_without_a_prompt_is_not_kept_and_the_others_are(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    earlier = Journal(path)
    for event in (start("resumed"), UserMessageEvent(text="an earlier prompt"), AssistantText(turn=1, text="done"),
                  end(TaskEnd, 1), end(SessionEnd, 1)):
        earlier.record(event, "resumed", "/w")
    earlier.close()

    journal = Journal(path)
    # Opened and closed with no prompt: a notice, a session_end, nothing the person said.
    for event in (start("empty"), Notice(message="hello"), end(SessionEnd, 0)):
        journal.record(event, "empty", "/w")
    # A prompt: kept.
    for event in (start("talked"), UserMessageEvent(text="fix the bug"), end(SessionEnd, 1)):
        journal.record(event, "talked", "/w")
    # Resumed and closed again without a new prompt: its earlier prompt keeps it, with the new events.
    for event in (start("resumed"), end(SessionEnd, 1)):
        journal.record(event, "resumed", "/w")
    # A child session (its task is its prompt) of a lead that never had one: the lead is kept for it.
    journal.record(start("lead"), "lead", "/w")
    for event in (start("child", parent_id="lead"), UserMessageEvent(text="look around"), end(SessionEnd, 1)):
        journal.record(event, "child", "/w")
    journal.record(end(SessionEnd, 0), "lead", "/w")
    journal.close()

    assert stored_rows(path, "empty") == (0, 0), "the empty session is deleted, its events with it"
    assert {row.id for row in list_sessions(path)} == {"talked", "resumed", "child"}
    assert find_session(path, "child").parent_id == "lead" and stored_rows(path, "lead") == (1, 2)
    assert [e["type"] for e in load_events(path, "resumed")] == [
        "session_start", "user_message", "assistant_text", "task_end", "session_end", "session_start", "session_end"]
    assert has_prompt(path, "talked") and has_prompt(path, "resumed") and not has_prompt(path, "empty") and not has_prompt(path, "lead")


KILLED = """
import os, signal, sys
from pathlib import Path
from osprey.events import SessionStart, UserMessageEvent
from osprey.messages import Usage
from osprey.sessions.journal import Journal

journal = Journal(Path(sys.argv[1]))
for sid in ("before", "after"):
    journal.record(SessionStart(session_id=sid, provider="openai", model="m-1", cwd="/w", tool_service="local", tools=[],
                                approval_policy="never", max_turns=5), sid, "/w")
journal.record(UserMessageEvent(text="the first prompt"), "after", "/w")
assert journal.flush(10)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_session_killed_after_its_first_prompt_is_kept_and_one_killed_before_it_is_passed_over(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    done = subprocess.run([sys.executable, "-c", KILLED, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    assert [row.id for row in list_sessions(path)] == ["after"]
    assert find_session(path, "after").title == "the first prompt"
    assert stored_rows(path, "before") == (1, 1), "a killed process deletes nothing: the listing passes over it"


def old_empty_session(path: Path, session_id: str, cwd: str, when: float) -> None:
    """What an older Osprey left of a TUI opened and closed without a prompt: a `Completed` session with no title."""
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO sessions (id, cwd, workspace, title, provider, model, created, updated, outcome) "
                     "VALUES (?, ?, ?, '', 'openai', 'm-1', ?, ?, 'Completed')", (session_id, cwd, cwd, when, when))
        for seq, event in enumerate((start(session_id, cwd), end(SessionEnd, 0))):
            conn.execute("INSERT INTO events (session_id, seq, type, ts, data) VALUES (?, ?, ?, ?, ?)",
                         (session_id, seq, event.type, when, event.model_dump_json()))


def test_continue_opens_the_newest_session_with_a_prompt_past_newer_empty_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from osprey.cli.agent import agent
    from osprey.cli.tui import plan_for, resolve_options
    from osprey.headless import resolve_options as headless_resolve

    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    for name in [n for n in os.environ if n.startswith(("OSPREY_", "OPENAI_", "ANTHROPIC_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OSPREY_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.chdir(workspace)
    cwd = str(workspace.resolve())
    path = journal_path(home)
    journal = Journal(path)
    for sid, prompt in (("older", "the older task"), ("real", "the last real task")):
        for event in (start(sid, cwd), UserMessageEvent(text=prompt), AssistantText(turn=1, text="done"),
                      end(SessionEnd, 1)):
            journal.record(event, sid, cwd)
        journal.flush()
        time.sleep(0.01)  # "real" is the newer
    journal.close()
    now = time.time()
    old_empty_session(path, "empty1", cwd, now + 60)
    old_empty_session(path, "empty2", cwd, now + 120)

    assert [row.id for row in list_sessions(path, cwd)] == ["real", "older"]
    plan = plan_for(resolve_options(main.make_context("osprey", ["--continue"]).params))
    assert plan.resume is not None and plan.resume.row.id == "real"
    params = agent.make_context("agent", ["--continue", "go on"]).params
    params.pop("prompt")
    assert headless_resolve(params).session_options().session_id == "real"
    listed = subprocess.run([sys.executable, "-m", "osprey", "sessions", "list"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "OSPREY_HOME": str(home)}, cwd=workspace)
    assert listed.returncode == 0, listed.stderr
    assert "real" in listed.stdout and "older" in listed.stdout and "empty" not in listed.stdout


async def test_quitting_the_tui_says_how_to_go_on_with_a_session_that_had_a_prompt(tmp_path: Path, model_server: ModelServer) -> None:
    model_server.add(Reply.text("hi there"))
    plan = _plan(tmp_path, model_server)
    seen = Seen()
    err = io.StringIO()
    assert await launch(plan, run=_exchange(seen), stderr=err) == 0
    assert seen.session_id
    assert f"osprey --resume {seen.session_id}" in err.getvalue() and "osprey --continue" in err.getvalue(), err.getvalue()
    assert [row.id for row in list_sessions(plan.journal)] == [seen.session_id]


async def test_quitting_the_tui_without_a_prompt_keeps_no_session_and_prints_no_way_back(tmp_path: Path, model_server: ModelServer) -> None:
    plan = _plan(tmp_path, model_server)
    opened: list[str] = []

    async def run(app: OspreyApp) -> Any:
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot, app)
            assert app.session is not None
            opened.append(app.session.session_id)
            await type_prompt(pilot, app, "/quit")
            await until(pilot, lambda: not app.is_running)
        return app.return_value

    err = io.StringIO()
    assert await launch(plan, run=run, stderr=err) == 0
    [session_id] = opened
    assert "--resume" not in err.getvalue(), err.getvalue()
    assert list_sessions(plan.journal) == []
    assert stored_rows(plan.journal, session_id) == (0, 0)
