"""Small frictions of the command line, end to end: `sessions show --full`, one `osprey: error: `
prefix on every error, `approvals check` of a call written as a rule, session titles from the
prompt as typed, and counts that agree with their nouns."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_e2e_agent import Run, osprey

from osprey.numbers import counted, grouped
from osprey.sessions.journal import make_title
from osprey.testing.model_server import ModelServer, Reply

PREFIX = "osprey: error: "


def agent(env: dict[str, str], workspace: Path, server: ModelServer, *extra: str) -> Run:
    return osprey(env, "agent", "-C", str(workspace), "--provider", "openai", "--base-url", server.base_url, *extra)


def one_error_line(run: Run) -> str:
    """The stderr line with the error, checked to carry the prefix once and no click `Error: `."""
    lines = [line for line in run.stderr.splitlines() if "error" in line.lower()]
    assert len(lines) == 1, run
    [line] = lines
    assert line.startswith(PREFIX) and "Error:" not in line and line.count("error:") == 1, run
    return line[len(PREFIX):]


# --------------------------------------------------------------------------- sessions show --full


@pytest.mark.e2e
def test_sessions_show_cuts_results_and_full_prints_them_whole(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    (workspace / "long.txt").write_text("".join(f"line number {n}\n" for n in range(1, 41)))
    model_server.add(Reply.tool_call("read_file", {"path": "long.txt"}), Reply.text("Read it."))
    run = agent(osprey_env, workspace, model_server, "Read long.txt.")
    assert run.rc == 0, run
    session_id = run.events[0]["session_id"]

    cut = osprey(osprey_env, "sessions", "show", session_id)
    assert cut.rc == 0, cut
    assert "line number 6" in cut.stdout and "line number 7\n" not in cut.stdout and "\n    ...\n" in cut.stdout

    full = osprey(osprey_env, "sessions", "show", session_id, "--full")
    assert full.rc == 0, full
    shown = [n for n in range(1, 41) if f"line number {n}\n" in full.stdout]
    assert shown == list(range(1, 41)) and "\n    ...\n" not in full.stdout
    assert "--- session ended: Completed after 2 turns" in full.stdout


@pytest.mark.e2e
def test_a_one_turn_session_says_one_turn(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    model_server.add(Reply.text("Hello."))
    run = agent(osprey_env, workspace, model_server, "Say hello.")
    assert run.rc == 0, run
    shown = osprey(osprey_env, "sessions", "show", run.events[0]["session_id"])
    assert "--- session ended: Completed after 1 turn\n" in shown.stdout and "1 turns" not in shown.stdout, shown


def test_counts_group_thousands_and_agree_with_their_noun() -> None:
    assert [counted(n, "turn") for n in (0, 1, 2, 3000)] == ["0 turns", "1 turn", "2 turns", "3,000 turns"]
    assert counted(1, "entry", "entries") == "1 entry" and counted(1234567, "entry", "entries") == "1,234,567 entries"
    assert grouped(3000) == "3,000" and grouped(999) == "999"


# --------------------------------------------------------------------------- one error prefix


def test_a_bad_flag_value_prints_one_prefix(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    run = osprey(osprey_env, "agent", "--max-turns", "many", "hi")
    assert run.rc == 2, run
    assert "Invalid value for '--max-turns'" in one_error_line(run)
    assert "Try 'osprey agent --help' for help." in run.stderr  # the usage lines stay


def test_an_unknown_option_of_the_root_command_prints_one_prefix(osprey_env: dict[str, str]) -> None:
    run = osprey(osprey_env, "--no-such-option")
    assert run.rc == 2 and "No such option '--no-such-option'" in one_error_line(run)


def test_a_missing_api_key_prints_one_prefix(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    env = {k: v for k, v in osprey_env.items() if k != "OPENAI_API_KEY"}
    run = osprey(env, "agent", "-C", str(tmp_path), "--provider", "openai", "hi")
    assert run.rc == 1 and one_error_line(run).startswith("OPENAI_API_KEY is not set"), run


def test_a_config_error_prints_one_prefix(tmp_path: Path, osprey_env: dict[str, str]) -> None:
    (Path(osprey_env["OSPREY_HOME"]) / "config.toml").write_text("no_such_key = 1\n")
    run = osprey(osprey_env, "agent", "-C", str(tmp_path), "hi")
    assert run.rc == 1 and "unknown key 'no_such_key'" in one_error_line(run), run


def test_a_command_error_prints_one_prefix(osprey_env: dict[str, str]) -> None:
    run = osprey(osprey_env, "sessions", "show", "nosuchsession")
    assert run.rc == 1 and "no session journal" in one_error_line(run), run


def test_a_group_without_its_command_still_prints_its_help(osprey_env: dict[str, str]) -> None:
    run = osprey(osprey_env, "sessions")
    assert run.rc == 2 and run.stderr.startswith("Usage: osprey sessions") and "show" in run.stderr and PREFIX not in run.stderr, run


@pytest.mark.e2e
def test_a_provider_error_in_a_headless_run_prints_one_prefix(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    model_server.add(Reply.error(400, "the model name is unknown"))
    run = agent(osprey_env, workspace, model_server, "--no-journal", "hi")
    assert run.rc == 1 and run.events[-1]["outcome"] == "Error", run
    assert "the model name is unknown" in one_error_line(run)


# --------------------------------------------------------------------------- approvals check TOOL(ARGS)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    return root


def check(env: dict[str, str], project: Path, *args: str) -> Run:
    return osprey(env, "approvals", "check", "-C", str(project), *args)


def test_check_judges_a_path_call_under_the_policy_and_the_saved_rules(project: Path, osprey_env: dict[str, str]) -> None:
    asked = check(osprey_env, project, "--", "write_file(c.txt)")
    assert asked.rc == 0, asked
    assert asked.stdout.splitlines()[1] == f"ask: no saved rule pre-approves it in {project}; the policy on-request asks before write_file runs"
    assert "hardline" not in asked.stdout  # not judged as a shell command

    added = osprey(osprey_env, "approvals", "add", "-C", str(project), "write_file(*.txt)")
    assert added.rc == 0, added
    allowed = check(osprey_env, project, "--json", "write_file(c.txt)")
    assert allowed.rc == 0, allowed
    said = json.loads(allowed.stdout)
    assert {k: said[k] for k in ("tool", "arguments", "policy", "decision", "decided_by", "rule")} == {
        "tool": "write_file", "arguments": {"path": "c.txt"}, "policy": "on-request",
        "decision": "allow", "decided_by": "saved rule", "rule": "write_file(*.txt)"}
    other = json.loads(check(osprey_env, project, "--json", "write_file(c.py)").stdout)
    assert other["decision"] == "ask" and other["rule"] is None

    denied = check(osprey_env, project, "--policy", "deny-untrusted", "write_file(c.txt)")
    assert denied.rc == 1 and denied.stdout.splitlines()[1].startswith("deny: the policy deny-untrusted runs only"), denied
    read = check(osprey_env, project, "read_file(c.txt)")
    assert read.rc == 0 and read.stdout.splitlines()[1] == "allow: the policy on-request runs read_file without asking", read


def test_check_judges_a_bash_call_by_the_floor_first(project: Path, osprey_env: dict[str, str]) -> None:
    refused = check(osprey_env, project, "--json", "--policy", "never", "bash(rm -rf /)")
    assert refused.rc == 1, refused
    said = json.loads(refused.stdout)
    assert said["decision"] == "deny" and said["decided_by"] == "hardline floor" and "--yolo included" in said["reason"]
    started = json.loads(check(osprey_env, project, "--json", "process(git status)").stdout)
    assert started["arguments"] == {"action": "start", "command": "git status"} and started["decision"] == "ask"


def test_check_of_a_plain_command_is_unchanged(project: Path, osprey_env: dict[str, str]) -> None:
    run = check(osprey_env, project, "--", "git", "status")
    assert run.rc == 0 and run.stdout.startswith("allowed by the hardline floor"), run
    called = check(osprey_env, project, "--json", "echo(hi)")  # not a tool a rule names: a command line
    assert json.loads(called.stdout)["command"] == "echo(hi)"


def test_check_of_an_empty_call_says_what_to_write(project: Path, osprey_env: dict[str, str]) -> None:
    run = check(osprey_env, project, "write_file()")
    assert run.rc == 1 and one_error_line(run) == "write_file() names no path: write the call as write_file(...)"


# --------------------------------------------------------------------------- titles


def test_a_title_leaves_out_the_context_added_for_the_model() -> None:
    text = "Summarise the notes.\n\n[context] Your final answer must be one JSON value that validates against this JSON Schema"
    assert make_title(text) == "Summarise the notes."
    assert make_title("Fix  the\nbug.") == "Fix the bug."


@pytest.mark.e2e
def test_an_output_schema_run_is_titled_with_the_prompt_as_typed(workspace: Path, model_server: ModelServer, osprey_env: dict[str, str],
                                                                 tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}))
    model_server.add(Reply.text('{"answer": 42}'))
    run = agent(osprey_env, workspace, model_server, "--output-schema", str(schema), "What is the answer?")
    assert run.rc == 0, run
    listed = osprey(osprey_env, "sessions", "list", "--json", "-C", str(workspace))
    assert [row["title"] for row in json.loads(listed.stdout)] == ["What is the answer?"], listed
    table = osprey(osprey_env, "sessions", "list", "-C", str(workspace))
    assert re.search(r"What is the answer\?\s*$", table.stdout) and "JSON Schema" not in table.stdout, table
