"""`osprey approvals`: list, add, revoke and check, with a private OSPREY_HOME."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from osprey.cli import main

Run = Callable[..., Result]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "osprey-home"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git workspace with a subdirectory."""
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    return root


@pytest.fixture
def other(tmp_path: Path) -> Path:
    root = tmp_path / "other"
    root.mkdir()
    return root


@pytest.fixture
def run(home: Path, tmp_path: Path) -> Run:
    def invoke(*args: str) -> Result:
        env = {"OSPREY_HOME": str(home), "HOME": str(tmp_path)}
        return CliRunner().invoke(main, ["approvals", *args], env=env, catch_exceptions=False)

    return invoke


def _file(home: Path) -> Path:
    return home / "approvals.toml"


def test_add_saves_for_this_project_by_default_and_list_shows_it(run: Run, project: Path, home: Path) -> None:
    result = run("add", "bash(git  diff *)", "-C", str(project / "src"))
    assert result.exit_code == 0, result.output
    assert "Saved bash(git diff *)" in result.stdout and f"for {project}" in result.stdout  # the workspace root
    rule_id = result.stdout.split("(id ")[1].split(";")[0]
    listed = run("list", "-C", str(project))
    assert listed.exit_code == 0
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["ID", "SCOPE", "RULE", "CREATED"]
    assert lines[1].startswith(rule_id) and "this project" in lines[1] and "bash(git diff *)" in lines[1]
    assert lines[1].rstrip().endswith("Z")
    again = run("add", "bash(git diff *)", "-C", str(project))
    assert again.exit_code == 0 and again.stdout.startswith("Already saved") and rule_id in again.stdout


def test_project_rules_are_listed_only_in_their_project_unless_all(run: Run, project: Path, other: Path) -> None:
    assert run("add", "write_file(src/**)", "-C", str(project)).exit_code == 0
    assert run("add", "--global", "read_file", "-C", str(project)).exit_code == 0
    elsewhere = run("list", "-C", str(other))
    assert "read_file" in elsewhere.stdout and "global" in elsewhere.stdout
    assert "write_file" not in elsewhere.stdout
    assert "1 more saved for other projects; --all lists them" in elsewhere.stdout
    everything = run("list", "--all", "-C", str(other))
    assert "write_file(src/**)" in everything.stdout and str(project) in everything.stdout
    data = json.loads(run("list", "--json", "--all", "-C", str(other)).stdout)
    assert [sorted(d) for d in data] == [["applies", "created", "id", "pattern", "project", "rule", "tool"]] * 2
    by_rule = {d["rule"]: d for d in data}
    assert by_rule["write_file(src/**)"] | {"id": "", "created": ""} == {
        "id": "", "rule": "write_file(src/**)", "tool": "write_file", "pattern": "src/**",
        "project": str(project), "created": "", "applies": False,
    }
    assert by_rule["read_file"]["pattern"] is None and by_rule["read_file"]["project"] is None
    assert by_rule["read_file"]["applies"] is True
    assert [d["rule"] for d in json.loads(run("list", "--json", "-C", str(other)).stdout)] == ["read_file"]


def test_list_with_nothing_saved(run: Run, other: Path) -> None:
    result = run("list", "-C", str(other))
    assert result.exit_code == 0 and f"No saved approvals apply to {other}." in result.stdout
    assert json.loads(run("list", "--json", "-C", str(other)).stdout) == []


def test_an_invalid_rule_exits_1_and_shows_the_syntax(run: Run, project: Path, home: Path) -> None:
    result = run("add", "Bash(git status)", "-C", str(project))
    assert result.exit_code == 1
    assert "osprey: error: invalid rule 'Bash(git status)'" in result.stderr
    assert "bash(git diff *)" in result.stderr
    outside = run("add", "read_file(/etc/**)", "-C", str(project))
    assert outside.exit_code == 1 and "outside the workspace" in outside.stderr
    assert not _file(home).exists()


def test_revoke_removes_a_rule_and_an_unknown_id_exits_1(run: Run, project: Path) -> None:
    added = run("add", "tree", "-C", str(project))
    rule_id = added.stdout.split("(id ")[1].split(";")[0]
    missing = run("revoke", "r-nope")
    assert missing.exit_code == 1
    assert "no saved rule has the id 'r-nope'" in missing.stderr and "list --all" in missing.stderr
    gone = run("revoke", rule_id)
    assert gone.exit_code == 0 and f"Revoked {rule_id}: tree." in gone.stdout
    assert "No saved approvals" in run("list", "-C", str(project)).stdout


def test_a_malformed_store_fails_list_and_revoke_and_add_moves_it_aside(run: Run, project: Path, home: Path) -> None:
    home.mkdir()
    _file(home).write_text("[[rules]\nbroken")
    listed = run("list", "-C", str(project))
    assert listed.exit_code == 1
    assert str(_file(home)) in listed.stderr and "not valid TOML" in listed.stderr and "moves it aside" in listed.stderr
    assert run("revoke", "r-1").exit_code == 1
    added = run("add", "tree", "-C", str(project))
    assert added.exit_code == 0
    assert "osprey: warning:" in added.stderr and "Moved it to" in added.stderr
    assert [p.read_text() for p in home.iterdir() if "malformed" in p.name] == ["[[rules]\nbroken"]
    assert "tree" in run("list", "-C", str(project)).stdout


def test_control_characters_in_rules_are_not_printed_raw(run: Run, project: Path) -> None:
    assert run("add", "read_file(a\x1b[31mred/b)", "-C", str(project)).exit_code == 0
    listed = run("list", "-C", str(project)).stdout
    assert "\x1b" not in listed and "\\x1b[31mred" in listed
    data = json.loads(run("list", "--json", "-C", str(project)).stdout)
    assert data[0]["rule"] == "read_file(a\x1b[31mred/b)"


def test_check_says_what_the_floor_and_the_saved_rules_decide(run: Run, project: Path) -> None:
    refused = run("check", "-C", str(project), "--", "rm", "-rf", "/")
    assert refused.exit_code == 1
    assert refused.stdout.startswith("refused by the hardline floor (rule ")
    assert "no saved rule overrides it" in refused.stdout and "pre-approve" not in refused.stdout
    allowed = run("check", "-C", str(project), "git status")
    assert allowed.exit_code == 0
    assert "allowed by the hardline floor" in allowed.stdout and "no saved rule pre-approves it" in allowed.stdout
    added = run("add", "bash(git status)", "-C", str(project))
    rule_id = added.stdout.split("(id ")[1].split(";")[0]
    approved = run("check", "-C", str(project / "src"), "git", "status")
    assert approved.exit_code == 0 and f"by saved rule {rule_id}: bash(git status)" in approved.stdout
    chained = json.loads(run("check", "--json", "-C", str(project), "git status && curl x | sh").stdout)
    assert chained["approved_by"] is None and chained["command"] == "git status && curl x | sh"
    run("add", "bash(rm *)", "-C", str(project))
    floor_first = run("check", "-C", str(project), "--", "rm", "-rf", "/")
    assert floor_first.exit_code == 1 and "would pre-approve it otherwise" in floor_first.stdout


def test_check_json(run: Run, project: Path) -> None:
    from osprey.policy import hardline as floor

    result = run("check", "--json", "-C", str(project), "--", "rm", "-rf", "/")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["refused"] is True and data["command"] == "rm -rf /"
    assert data["rule"] in floor.RULES and isinstance(data["reason"], str) and data["reason"]
    assert data["approved_by"] is None
    ok = json.loads(run("check", "--json", "-C", str(project), "ls", "-la").stdout)
    assert ok == {"command": "ls -la", "refused": False, "rule": None, "reason": "no hardline rule matches", "refused_command": None,
                  "approved_by": None, "approved_rule": None}
    chained = json.loads(run("check", "--json", "-C", str(project), "git status && rm -rf /").stdout)
    assert chained["refused"] is True and "rm" in chained["refused_command"] and "git" not in chained["refused_command"]


def test_check_needs_a_command(run: Run) -> None:
    result = run("check")
    assert result.exit_code == 2 and "Missing argument" in result.stderr


def test_the_osprey_command_lists_and_runs_approvals(project: Path, osprey_env: dict[str, str]) -> None:
    osprey = [sys.executable, "-m", "osprey"]
    top = subprocess.run([*osprey, "--help"], env=osprey_env, capture_output=True, text=True, timeout=60, check=False)
    assert "approvals" in top.stdout and "List, add, revoke and check saved approval rules." in top.stdout
    added = subprocess.run([*osprey, "approvals", "add", "--global", "bash(npm run test:*)"], cwd=project,
                           env=osprey_env, capture_output=True, text=True, timeout=60, check=False)
    assert added.returncode == 0, added.stderr
    assert "Saved bash(npm run test *) for every workspace" in added.stdout
    listed = subprocess.run([*osprey, "approvals", "list", "--json"], cwd=project, env=osprey_env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert [d["rule"] for d in json.loads(listed.stdout)] == ["bash(npm run test *)"]
    assert (Path(osprey_env["OSPREY_HOME"]) / "approvals.toml").is_file()
