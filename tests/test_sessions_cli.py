"""`osprey sessions` and `osprey agent --resume` end to end: the real command in subprocesses, the
loopback model server, the journal in a private OSPREY_HOME; a run killed with SIGKILL mid-session
keeps every committed event and can be resumed."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from test_e2e_agent import OSPREY, RUN_TIMEOUT, Run, check_stream, osprey

from osprey.sessions.resume import ENDED_TEXT
from osprey.testing.model_server import ModelServer, Reply
from osprey.testing.model_server import ToolCall as Call

pytestmark = pytest.mark.e2e


def agent(env: dict[str, str], workspace: Path, server: ModelServer, *extra: str) -> Run:
    return osprey(env, "agent", "-C", str(workspace), "--provider", "openai", "--base-url", server.base_url, *extra)


def db(env: dict[str, str]) -> Path:
    return Path(env["OSPREY_HOME"]) / "sessions.db"


def stored(env: dict[str, str]) -> list[tuple[str, int, dict[str, Any]]]:
    """(session id, seq, event) of every journaled event, as another process sees them now."""
    path = db(env)
    if not path.exists():
        return []
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            rows = conn.execute("SELECT session_id, seq, data FROM events ORDER BY session_id, seq").fetchall()
    except sqlite3.Error:
        return []  # the file exists but its tables are not made yet
    return [(sid, seq, json.loads(data)) for sid, seq, data in rows]


def texts_of(request_body: dict[str, Any]) -> str:
    return json.dumps(request_body.get("messages", []))


def test_a_killed_session_keeps_its_events_and_resumes(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    (workspace / "notes.txt").write_text("the secret word is heron\n")
    model_server.add(Reply.tool_call("read_file", {"path": "notes.txt"}, text="Reading the notes."),
                     Reply.hold(after_chunks=1, then=Reply.text("never finished")))
    args = [OSPREY, "agent", "-C", str(workspace), "--provider", "openai", "--base-url", model_server.base_url, "What is the secret word?"]
    proc = subprocess.Popen(args, env=osprey_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not any(e["type"] == "tool_result" for _, _, e in stored(osprey_env)):
            assert proc.poll() is None, f"osprey ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "the tool result never reached the journal"
            time.sleep(0.02)
        assert model_server.wait_held(1, timeout=RUN_TIMEOUT), "the second turn never reached the model"
        proc.send_signal(signal.SIGKILL)
        stdout, _ = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        model_server.release()
    assert proc.returncode == -signal.SIGKILL

    rows = stored(osprey_env)
    [session_id] = {sid for sid, _, _ in rows}
    assert [seq for _, seq, _ in rows] == list(range(len(rows)))
    journaled = [e for _, _, e in rows]
    printed = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    # Events are journaled before they are printed: what was printed is all in the journal, in order.
    assert journaled[: len(printed)] == printed and len(journaled) >= len(printed), (journaled, printed)
    assert [e["type"] for e in journaled][:2] == ["session_start", "user_message"]
    assert [e["type"] for e in journaled if e["type"] in ("tool_call", "tool_result")] == ["tool_call", "tool_result"]
    assert journaled[0]["session_id"] == session_id and "session_end" not in {e["type"] for e in journaled}

    model_server.add(Reply.text("The word is heron."))
    run = agent(osprey_env, workspace, model_server, "--resume", session_id[:8], "go on")
    assert run.rc == 0, run
    events = run.events
    assert [events[0]["type"], events[-1]["type"]] == ["session_start", "session_end"]
    assert events[0]["session_id"] == session_id and events[-1]["final_text"] == "The word is heron."
    before = [e["total"] for e in journaled if e["type"] == "usage"][-1]
    [usage] = [e for e in events if e["type"] == "usage"]
    assert usage["turn"] == 2, "turn numbers go on from the last one journaled (the killed turn left no event)"
    assert usage["total"] == {k: before[k] + usage["usage"][k] for k in before} == events[-1]["usage"], "usage goes on too"
    last = model_server.requests[-1].body
    messages = last["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[1]["content"] == "What is the secret word?"
    assert messages[2]["content"] == "Reading the notes." and messages[2]["tool_calls"][0]["function"]["name"] == "read_file"
    assert "heron" in messages[3]["content"] and messages[4]["content"] == "go on"
    assert ENDED_TEXT not in texts_of(last), "the finished call kept its result"
    after = [e for _, _, e in stored(osprey_env)]
    assert after[: len(journaled)] == journaled and after[len(journaled):] == events

    shown = osprey(osprey_env, "sessions", "show", session_id, "--json")
    assert shown.rc == 0, shown
    assert [json.loads(line) for line in shown.stdout.splitlines()] == after


def test_a_call_killed_while_running_gets_an_ended_result_on_resume(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    model_server.add(Reply.tool_call("bash", {"command": "echo started > started && exec sleep 300"}))
    args = [OSPREY, "agent", "-C", str(workspace), "--provider", "openai", "--base-url", model_server.base_url, "--yolo", "Run it."]
    proc = subprocess.Popen(args, env=osprey_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not ((workspace / "started").exists() and any(e["type"] == "tool_call" for _, _, e in stored(osprey_env))):
            assert proc.poll() is None, f"osprey ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "the bash call never started"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    [session_id] = {sid for sid, _, _ in stored(osprey_env)}
    model_server.add(Reply.text("It was cut short."))
    run = agent(osprey_env, workspace, model_server, "--resume", session_id, "What happened?")
    assert run.rc == 0, run
    messages = model_server.requests[-1].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[3]["content"] == ENDED_TEXT


def test_sessions_list_and_show(workspace: Path, tmp_path: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    other = tmp_path / "other"
    other.mkdir()
    model_server.add(Reply.text("First answer."), Reply.text("Second answer."), Reply.text("Unsaved answer."))
    assert agent(osprey_env, workspace, model_server, "First\x1b[31m   question " + "long " * 30).rc == 0
    assert agent(osprey_env, other, model_server, "Second question").rc == 0
    assert agent(osprey_env, workspace, model_server, "--no-journal", "Unsaved question").rc == 0

    listed = osprey(osprey_env, "sessions", "list", "--json", cwd=workspace)
    assert listed.rc == 0, listed
    [first] = json.loads(listed.stdout)
    assert set(first) == {"id", "cwd", "workspace", "title", "provider", "model", "created", "updated", "outcome"}
    assert first["cwd"] == str(workspace.resolve()) and first["outcome"] == "Completed" and first["provider"] == "openai"
    assert first["title"].startswith("First\x1b[31m question long") and len(first["title"]) <= 80

    every = json.loads(osprey(osprey_env, "sessions", "list", "--all", "--json").stdout)
    assert [row["title"] for row in every] == ["Second question", first["title"]], "newest first, the --no-journal run not saved"
    assert json.loads(osprey(osprey_env, "sessions", "list", "--json", "-C", str(other)).stdout)[0]["id"] == every[0]["id"]

    table = osprey(osprey_env, "sessions", "list", cwd=workspace)
    assert table.rc == 0 and first["id"] in table.stdout and every[0]["id"] not in table.stdout
    assert table.stdout.splitlines()[0].split() == ["ID", "UPDATED", "DIRECTORY", "OUTCOME", "TITLE"]
    assert "Completed" in table.stdout and "First" in table.stdout and str(workspace.name) in table.stdout
    both = osprey(osprey_env, "sessions", "list", "--all")
    assert first["id"] in both.stdout and every[0]["id"] in both.stdout and "other" in both.stdout
    assert "\x1b" not in table.stdout, "control characters from a prompt never reach the terminal"

    shown = osprey(osprey_env, "sessions", "show", first["id"])
    assert shown.rc == 0, shown
    assert "First answer." in shown.stdout and "task ended: Completed" in shown.stdout and "\x1b" not in shown.stdout

    missing = osprey(osprey_env, "sessions", "show", "nosuchsession")
    assert missing.rc == 1 and "osprey sessions list --all" in missing.stderr, missing
    resumed = agent(osprey_env, workspace, model_server, "--resume", "nosuchsession", "go on")
    assert resumed.rc == 1 and "no session 'nosuchsession'" in resumed.stderr, resumed


def test_an_unusable_journal_warns_and_the_run_goes_on(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    db(osprey_env).write_bytes(b"not a database at all\n" * 100)
    model_server.add(Reply.text("Fine."))
    run = agent(osprey_env, workspace, model_server, "Hello")
    assert run.rc == 0, run
    # One warning when the failure begins, one at the end saying what was lost; nothing in between.
    assert run.stderr.count("the session journal") == 1 and "goes on without being saved for now" in run.stderr, run
    assert run.stderr.count("events of this session were not saved") == 1, run
    assert "can be written again" not in run.stderr, run
    assert check_stream(run)[-1]["final_text"] == "Fine."


def test_sessions_show_names_the_call_of_a_result_that_does_not_follow_it(workspace: Path, model_server: ModelServer,
                                                                           osprey_env: dict[str, str]) -> None:
    (workspace / "a.txt").write_text("alpha-content\n")
    (workspace / "b.txt").write_text("beta-content\n")
    (workspace / "c.txt").write_text("".join(f"c-line-{i}\n" for i in range(1, 11)))
    model_server.add(Reply.tool_calls([Call("read_file", {"path": "a.txt"}), Call("read_file", {"path": "b.txt"})]),
                     Reply.tool_calls([Call("read_file", {"path": "c.txt"})]), Reply.text("All read."))
    run = agent(osprey_env, workspace, model_server, "Read the files.")
    assert run.rc == 0, run
    session_id = run.events[0]["session_id"]

    shown = osprey(osprey_env, "sessions", "show", session_id)
    assert shown.rc == 0, shown
    lines = shown.stdout.splitlines()
    at = lines.index('  -> read_file {"path": "a.txt"}')
    assert lines[at + 1] == '  -> read_file {"path": "b.txt"}', shown
    assert lines[at + 2] == '  <- read_file {"path": "a.txt"}: ok' and "alpha-content" in lines[at + 3], shown
    assert lines[at + 4] == '  <- read_file {"path": "b.txt"}: ok' and "beta-content" in lines[at + 5], shown
    # A result right under its call names only its tool, as before; its output is cut to 6 lines.
    lone = lines.index('  -> read_file {"path": "c.txt"}')
    assert lines[lone + 1] == "  <- read_file: ok", shown
    assert "c-line-6" in lines[lone + 7] and lines[lone + 8] == "    ...", shown

    whole = osprey(osprey_env, "sessions", "show", "--full", session_id)
    assert whole.rc == 0, whole
    assert '  <- read_file {"path": "a.txt"}: ok' in whole.stdout and '  <- read_file {"path": "b.txt"}: ok' in whole.stdout
    assert "c-line-10" in whole.stdout and "\n    ...\n" not in whole.stdout, whole
