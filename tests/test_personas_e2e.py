"""Personas end to end: `osprey agent --persona` against the loopback model server, the terminal
tool's contract (a valid plan ends TerminalToolSucceeded with its JSON as the final text, an
invalid one goes back to the model, no call at all ends TerminalToolFailed), `[agent].default_persona`,
the persona's prompt and tool allowlist, switch_persona, and resume restoring the persona."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_judgement_e2e import Dirs, Run, assert_ended, git_dirs, run_agent, told

from osprey.session.loop import TERMINAL_REMINDERS, terminal_reminder
from osprey.testing.model_server import ModelServer, Reply

pytestmark = pytest.mark.e2e

PLAN = {
    "summary": "Add a --json flag to the report command.",
    "steps": [{"title": "Parse the flag", "detail": "Add --json to the click command in report.py.", "files": ["report.py"]}],
    "risks": [],
    "verification": ["python3 -m pytest -q tests/test_report.py"],
}


@pytest.fixture
def dirs(tmp_path: Path) -> Dirs:
    return git_dirs(tmp_path)


def agent(server: ModelServer, dirs: Dirs, *flags: str, prompt: str = "Plan the --json flag.") -> Run:
    return run_agent(server, dirs, "--events-jsonl", *flags, prompt=prompt, timeout=90)


def tools_offered(request: Any) -> list[str]:
    return [tool["function"]["name"] for tool in request.body.get("tools", [])]


def system_of(request: Any) -> str:
    return str(request.body["messages"][0]["content"])


def test_architect_ends_with_a_valid_plan_as_the_final_text(dirs: Dirs) -> None:
    with ModelServer([Reply.tool_call("submit_plan", PLAN)]) as server:
        run = agent(server, dirs, "--persona", "architect")
        [request] = server.requests
        server.assert_clean()
    assert_ended(run, "TerminalToolSucceeded", 0, final_text=json.dumps(PLAN, ensure_ascii=False))
    assert json.loads(run.end["final_text"]) == PLAN
    assert "submit_plan" in tools_offered(request)
    assert "# Persona: architect" in system_of(request)
    [start] = run.of("session_start")
    assert start["persona"] == "architect"


def test_an_invalid_plan_goes_back_to_the_model_and_the_corrected_one_ends_the_task(dirs: Dirs) -> None:
    broken = {"summary": "no steps"}
    with ModelServer([Reply.tool_call("submit_plan", broken), Reply.tool_call("submit_plan", PLAN)]) as server:
        run = agent(server, dirs, "--persona", "architect")
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "TerminalToolSucceeded", 0, final_text=json.dumps(PLAN, ensure_ascii=False))
    [result] = told(requests[1])
    assert result["role"] == "tool" and "steps" in result["content"] and "required" in result["content"], result
    first, second = run.of("tool_result")
    assert not first["ok"] and second["ok"]


def test_a_plan_in_text_is_reminded_and_no_call_at_all_ends_terminal_tool_failed(dirs: Dirs) -> None:
    replies = [Reply.text(json.dumps(PLAN)) for _ in range(TERMINAL_REMINDERS + 1)]
    with ModelServer(replies) as server:
        run = agent(server, dirs, "--persona", "architect")
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "TerminalToolFailed", 1, error="did not call submit_plan")
    assert len(requests) == TERMINAL_REMINDERS + 1
    [reminder] = told(requests[1])
    assert reminder == {"role": "user", "content": terminal_reminder("submit_plan")}


def test_default_persona_from_the_config_and_a_persona_allowlist(dirs: Dirs) -> None:
    personas = dirs.workspace / ".osprey" / "personas"
    personas.mkdir(parents=True)
    (personas / "reviewer.md").write_text("---\nname: reviewer\ndescription: Reviews without editing\ntools: [read_file, grep]\n---\n\n"
                                          "Review the requested changes. Report findings with file locations.\n")
    (dirs.home / "config.toml").write_text('[agent]\ndefault_persona = "reviewer"\n')
    with ModelServer([Reply.text("Looks fine.")]) as server:
        run = agent(server, dirs, prompt="Review it.")
        [request] = server.requests
    assert_ended(run, "Completed", 0, final_text="Looks fine.")
    offered = set(tools_offered(request))
    assert {"read_file", "grep", "switch_persona"} <= offered
    assert not offered & {"write_file", "edit_file", "bash"}, offered
    assert "Report findings with file locations." in system_of(request)
    assert run.of("session_start")[0]["persona"] == "reviewer"


def test_an_unknown_persona_stops_the_run_naming_the_available_ones(dirs: Dirs) -> None:
    with ModelServer([]) as server:
        run = agent(server, dirs, "--persona", "nobody")
    assert run.rc == 1 and "nobody" in run.stderr and "architect" in run.stderr, run


def test_switch_persona_changes_the_prompt_from_the_next_turn_and_refuses_a_contract(dirs: Dirs) -> None:
    replies = [Reply.tool_call("switch_persona", {"name": "architect"}), Reply.tool_call("switch_persona", {"name": "coding"}),
               Reply.text("done")]
    with ModelServer(replies) as server:
        run = agent(server, dirs, "--persona", "default", "--yolo", prompt="Switch roles.")
        requests = server.requests
    assert_ended(run, "Completed", 0, final_text="done")
    refused, switched = run.of("tool_result")
    assert not refused["ok"] and "output contract" in refused["output"] and "stays active" in refused["output"]
    assert switched["ok"]
    assert "# Persona: default" in system_of(requests[1]) and "# Persona: coding" in system_of(requests[2])
    assert [e["persona"] for e in run.of("persona_switch")] == ["coding"]


def test_resume_goes_on_as_the_persona_the_session_last_had(dirs: Dirs) -> None:
    with ModelServer([Reply.tool_call("switch_persona", {"name": "coding"}), Reply.text("first")]) as server:
        first = agent(server, dirs, "--persona", "default", prompt="Switch.")
    session_id = first.of("session_start")[0]["session_id"]
    with ModelServer([Reply.text("second")]) as server:
        again = agent(server, dirs, "--resume", session_id, prompt="Go on.")
        [request] = server.requests
    assert_ended(again, "Completed", 0, final_text="second")
    assert again.of("session_start")[0]["persona"] == "coding"
    assert "# Persona: coding" in system_of(request)


def test_coding_has_the_projects_markers_and_toolchains_in_its_prompt(dirs: Dirs) -> None:
    (dirs.workspace / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (dirs.workspace / "Makefile").write_text("test:\n\ttrue\n")
    with ModelServer([Reply.text("ok")]) as server:
        run = agent(server, dirs, "--persona", "coding", prompt="Look around.")
        [request] = server.requests
    assert_ended(run, "Completed", 0, final_text="ok")
    system = system_of(request)
    assert "# Persona: coding" in system
    assert "pyproject.toml" in system and "Makefile" in system and "python3" in system, system[-1500:]
