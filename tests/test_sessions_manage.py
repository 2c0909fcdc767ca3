"""Renaming, forking and deleting journaled sessions: the functions over a real sessions.db written
by the journal, and `osprey sessions rename|fork|delete` as a real subprocess."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
from test_e2e_agent import OSPREY, RUN_TIMEOUT

from osprey.events import AssistantText, Event, SessionEnd, SessionStart, ToolCallEvent, ToolResultEvent, UserMessageEvent
from osprey.messages import Usage
from osprey.sessions.journal import Journal, JournalError, find_session, journal_path, list_sessions, load_events, read_events
from osprey.sessions.manage import MAX_TITLE_CHARS, check_title, delete_session, fork_session, rename_session, session_and_children
from osprey.sessions.resume import resume_point


def _start(session_id: str, parent: str | None = None) -> SessionStart:
    return SessionStart(session_id=session_id, provider="openai", model="gpt-test", cwd="/ws", tool_service="local", tools=["bash"],
                        approval_policy="never", max_turns=10, parent_id=parent, agent_id=session_id if parent else None)


def _end(session_id: str, turns: int) -> SessionEnd:
    return SessionEnd(session_id=session_id, outcome="Completed", exit_status=0, turns=turns, usage=Usage())


def _conversation(session_id: str, prompt: str) -> list[Event]:
    return [_start(session_id), UserMessageEvent(text=prompt),
            ToolCallEvent(turn=1, id="c1", name="bash", arguments={"command": "echo hi"}),
            ToolResultEvent(turn=1, id="c1", name="bash", ok=True, output="hi\n[exit code 0]"),
            AssistantText(turn=2, text=f"done with {prompt}"),
            _end(session_id, 2)]


def _journal(home: Path, sessions: dict[str, list[Event]]) -> Path:
    path = journal_path(home)
    journal = Journal(path)
    for session_id, events in sessions.items():
        for event in events:
            journal.record(event, session_id, "/ws")
    assert journal.flush()
    journal.close()
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def journal(home: Path) -> Path:
    child = [_start("child0000001", parent="lead00000001"), UserMessageEvent(text="the child's task"), _end("child0000001", 1)]
    grandchild = [_start("grand0000001", parent="child0000001"), UserMessageEvent(text="deeper"), _end("grand0000001", 1)]
    return _journal(home, {"lead00000001": _conversation("lead00000001", "first task"), "child0000001": child,
                           "grand0000001": grandchild, "other0000001": _conversation("other0000001", "other task")})


def _count(path: Path, sql: str, *args: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(sql, args).fetchone()[0])


def test_rename_sets_the_title_and_refuses_bad_titles(journal: Path) -> None:
    row = rename_session(journal, "lead0000", "  Fix   the flaky test  ")
    assert row.id == "lead00000001" and row.title == "Fix the flaky test"
    assert find_session(journal, "lead00000001").title == "Fix the flaky test"
    assert find_session(journal, "other0000001").title == "other task"
    for bad, said in (("   ", "cannot be empty"), ("one\ntwo", "one line"), ("x" * (MAX_TITLE_CHARS + 1), "at most"),
                      ("bell\x07", "control characters")):
        with pytest.raises(JournalError, match=said):
            rename_session(journal, "lead00000001", bad)
    with pytest.raises(JournalError, match="no session 'nope'"):
        rename_session(journal, "nope", "a title")
    assert check_title("a\tb") == "a b"


def test_fork_copies_the_record_and_leaves_the_source_as_it_was(journal: Path) -> None:
    before = load_events(journal, "lead00000001")
    row = fork_session(journal, "lead00000001", new_id="fork00000001")
    assert row.id == "fork00000001" and row.title == "first task (fork)" and row.parent_id is None
    assert load_events(journal, "lead00000001") == before
    forked = load_events(journal, "fork00000001")
    assert len(forked) == len(before) + 1
    # The copy is the source's record, but for the new id (and its origin) in its session_start.
    assert forked[0]["session_id"] == "fork00000001" and forked[0]["forked_from"] == "lead00000001"
    assert [{k: v for k, v in e.items() if k not in ("session_id", "forked_from")} for e in forked[:-1]] == \
           [{k: v for k, v in e.items() if k != "session_id"} for e in before]
    assert forked[-1]["type"] == "notice" and forked[-1]["forked_from"] == "lead00000001" and forked[-1]["forked_at"] == len(before) - 1
    # It resumes to the same conversation, is listed, and is no child of the source.
    assert resume_point(read_events(journal, "fork00000001")).messages == resume_point(read_events(journal, "lead00000001")).messages
    assert "fork00000001" in {r.id for r in list_sessions(journal)}
    assert session_and_children(journal, "lead00000001") == ["lead00000001", "child0000001", "grand0000001"]
    with pytest.raises(JournalError, match="in the journal already"):
        fork_session(journal, "lead00000001", new_id="fork00000001")
    with pytest.raises(JournalError, match="no session"):
        fork_session(journal, "missing")


def test_delete_removes_the_session_its_children_their_events_and_results(journal: Path, home: Path) -> None:
    results = home / "results"
    for sid in ("lead00000001", "grand0000001", "other0000001"):
        (results / sid / "deep").mkdir(parents=True)
        (results / sid / "deep" / "out.txt").write_text("kept output")
    outside = home / "precious"
    outside.mkdir()
    (results / "child0000001").symlink_to(outside)  # a link is removed, never followed
    fork_session(journal, "lead00000001", new_id="fork00000001")
    gone = delete_session(journal, "lead00000001", results=results)
    assert gone == ["lead00000001", "child0000001", "grand0000001"]
    for sid in gone:
        assert _count(journal, "SELECT COUNT(*) FROM events WHERE session_id = ?", sid) == 0
        assert _count(journal, "SELECT COUNT(*) FROM sessions WHERE id = ?", sid) == 0
        assert not (results / sid).exists() and not (results / sid).is_symlink()
    assert outside.is_dir()
    assert (results / "other0000001" / "deep" / "out.txt").read_text() == "kept output"
    assert {r.id for r in list_sessions(journal)} == {"other0000001", "fork00000001"}
    with pytest.raises(JournalError, match="no session"):
        delete_session(journal, "lead00000001", results=results)
    # A session the journal no longer holds: with missing_ok its results go, and nothing else.
    (results / "lead00000001").mkdir()
    assert delete_session(journal, "lead00000001", results=results, missing_ok=True) == []
    assert not (results / "lead00000001").exists()
    assert delete_session(journal, "../home", results=results, missing_ok=True) == [] and home.is_dir()


def test_a_missing_or_busy_journal_is_an_error_that_says_so(tmp_path: Path, journal: Path) -> None:
    with pytest.raises(JournalError, match="no session journal"):
        rename_session(tmp_path / "none.db", "x", "title")
    holder = sqlite3.connect(journal, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(JournalError, match="busy"):
            rename_session(journal, "lead00000001", "while another process writes")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert find_session(journal, "lead00000001").title == "first task"


# ---------------------------------------------------------------------------------------------- the CLI


def _cli(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {"OSPREY_HOME": str(home), "HOME": str(home.parent), "PATH": "/usr/bin:/bin"}
    return subprocess.run([OSPREY, "sessions", *args], env=env, input=stdin, capture_output=True, text=True, timeout=RUN_TIMEOUT)


def test_cli_rename_fork_and_delete(journal: Path, home: Path) -> None:
    run = _cli(home, "rename", "lead0000", "Tidy the parser")
    assert run.returncode == 0, run.stderr
    assert "lead00000001 is now titled: Tidy the parser" in run.stdout
    assert find_session(journal, "lead00000001").title == "Tidy the parser"

    run = _cli(home, "fork", "lead00000001")
    assert run.returncode == 0, run.stderr
    new_id = run.stdout.split("as session ", 1)[1].split(";", 1)[0]
    assert f"osprey --resume {new_id}" in run.stdout
    assert json.loads(json.dumps(load_events(journal, new_id)[0]))["forked_from"] == "lead00000001"

    (home / "results" / "lead00000001").mkdir(parents=True)
    run = _cli(home, "delete", "lead00000001")  # stdin is not a terminal: it refuses
    assert run.returncode == 1 and "not on a terminal to confirm; add --yes" in run.stderr
    assert find_session(journal, "lead00000001").id == "lead00000001" and (home / "results" / "lead00000001").is_dir()
    run = _cli(home, "delete", "lead00000001", "--yes")
    assert run.returncode == 0, run.stderr
    assert "deleted 3 sessions: lead00000001, child0000001, grand0000001" in run.stdout
    assert not (home / "results" / "lead00000001").exists()
    assert {r.id for r in list_sessions(journal)} == {"other0000001", new_id}


def test_cli_bad_input(journal: Path, home: Path) -> None:
    for args, said in ((("rename", "nope", "title"), "no session 'nope'"), (("rename", "lead00000001", "  "), "cannot be empty"),
                       (("fork", "nope"), "no session 'nope'"), (("delete", "nope", "--yes"), "no session 'nope'"),
                       (("rename", "lead00000001"), "Missing argument 'TITLE'")):
        run = _cli(home, *args)
        assert run.returncode != 0 and said in run.stderr, (args, run.stderr)
    assert find_session(journal, "lead00000001").title == "first task"
    empty = home.parent / "empty-home"
    empty.mkdir()
    run = _cli(empty, "delete", "x", "--yes")
    assert run.returncode == 1 and "no session journal" in run.stderr
