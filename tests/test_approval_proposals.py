"""The rule the approval dialog proposes for "allow always": a command prefix or a path glob that
parses, covers the call asked about and the sibling calls it is meant for, and nothing it should
not; the exact call (or the suggested rule) wherever a wider rule would trust too much."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from session_harness import Harness, calls, text

from osprey.messages import ToolCall
from osprey.policy.approvals import ApprovalAnswer, ApprovalRequest, proposed_rule, suggested_rule
from osprey.policy.rules import Rule
from osprey.policy.store import ApprovalStore


def _covers(rule: str, tool: str, arguments: dict[str, Any], ws: Path, cwd: Path | None = None) -> bool:
    return Rule.parse(rule).covers(tool, arguments, cwd=str(cwd or ws), workspace=str(ws))


# ------------------------------------------------------------------ commands

# command -> (proposed rule, sibling commands it covers, commands it does not cover)
COMMANDS: list[tuple[str, str, list[str], list[str]]] = [
    ("python3 -m unittest discover -v", "bash(python3 -m unittest *)",
     ["python3 -m unittest tests.test_x", "python3 -m unittest"], ["python3 -m pytest", "python3 -c 'import os'", "python3 x.py"]),
    ("python3.12 -m pytest -q tests", "bash(python3.12 -m pytest *)",
     ["python3.12 -m pytest -x"], ["python3.12 -m pytest -p evil", "python3 -m pytest -q tests"]),
    ("python -m mypy src", "bash(python -m mypy *)", ["python -m mypy --strict host"], ["python -m pip install x"]),
    ("PYTHONPATH=src python3 -m unittest -v", "bash(PYTHONPATH=src python3 -m unittest *)",
     ["PYTHONPATH=src python3 -m unittest tests"], ["python3 -m unittest -v", "PYTHONPATH=/tmp python3 -m unittest -v"]),
    ("python3 -m pip install requests", "bash(python3 -m pip install *)", ["python3 -m pip install -e ."], ["python3 -m pip uninstall -y requests"]),
    ("git diff --stat", "bash(git diff *)", ["git diff HEAD~1 -- src/a.py"], ["git status", "git diff --output=x"]),
    # --force is not among the options a trailing `*` leaves out (risky_option): the subcommand is proposed.
    ("git push --force", "bash(git push *)", ["git push origin main"], ["git pull"]),
    ("npm run test", "bash(npm run test *)", ["npm run test --silent"], ["npm run build", "npm run test -- --x"]),
    ("npm test", "bash(npm test *)", ["npm test --silent"], ["npm install"]),
    ("cargo test", "bash(cargo test *)", ["cargo test --release"], ["cargo build", "cargo test --config x"]),
    ("go test ./...", "bash(go test *)", ["go test -run TestX ./pkg"], ["go build ./...", "go test -exec x ./..."]),
    ("make test", "bash(make test *)", ["make test -j4"], ["make install", "make test CC=evil"]),
    ("uv run pytest -q", "bash(uv run pytest *)", ["uv run pytest tests"], ["uv run python x.py"]),
    ("pytest -q tests", "bash(pytest *)", ["pytest -x"], ["pytest --basetemp=/tmp/x"]),
    # Broad programs, options before what would be fixed, code on the command line, risky options: exactly the command.
    ("rm -rf build", "bash(rm -rf build)", [], ["rm -rf src"]),
    ("/usr/bin/rm build", "bash(/usr/bin/rm build)", [], ["/usr/bin/rm build /"]),
    ("curl -s http://127.0.0.1:9/x", "bash(curl -s http://127.0.0.1:9/x)", [], ["curl -s http://127.0.0.1:9/y"]),
    ("python3 x.py", "bash(python3 x.py)", [], ["python3 y.py"]),
    ("python3 -c 'print(1)'", "bash(python3 -c 'print(1)')", [], ["python3 -c 'print(2)'"]),
    ("python3 -B -m unittest", "bash(python3 -B -m unittest)", [], ["python3 -B -m unittest -v"]),
    ("python3 -m pytest -c x.ini", "bash(python3 -m pytest -c x.ini)", [], ["python3 -m pytest -c y.ini"]),
    ("python3 -m timeit 'x = 1'", "bash(python3 -m timeit 'x = 1')", [], ["python3 -m timeit 'x = 2'"]),
    ("git diff --output=x", "bash(git diff --output=x)", [], ["git diff --output=y"]),
    ("git -c core.pager=cat log", "bash(git -c core.pager=cat log)", [], ["git -c core.pager=cat log -p"]),
    ("git config user.name x", "bash(git config user.name x)", [], ["git config core.hooksPath /tmp"]),
    ("npm run test -- --watch", "bash(npm run test -- --watch)", [], ["npm run test"]),
    ("make CC=cc test", "bash(make CC=cc test)", [], ["make CC=cc install"]),
    ("ls -a .", "bash(ls -a .)", [], ["ls -a /"]),
]


@pytest.mark.parametrize("command,expected,covered,uncovered", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_command_gets_its_program_and_subcommand_or_exactly_itself(
        command: str, expected: str, covered: list[str], uncovered: list[str], tmp_path: Path) -> None:
    ws = str(tmp_path)
    proposed = proposed_rule("bash", {"command": command}, cwd=ws, workspace=ws)
    assert proposed == expected
    rule = Rule.parse(proposed)
    assert str(rule) == proposed and rule.pattern not in (None, "*")  # never bare `bash` nor `bash(*)`
    assert _covers(proposed, "bash", {"command": command}, tmp_path)
    for sibling in covered:
        assert _covers(proposed, "bash", {"command": sibling}, tmp_path), sibling
    for other in uncovered:
        assert not _covers(proposed, "bash", {"command": other}, tmp_path), other


def test_a_background_process_gets_the_same_prefix(tmp_path: Path) -> None:
    arguments = {"action": "start", "command": "npm run dev"}
    proposed = proposed_rule("process", arguments, cwd=str(tmp_path), workspace=str(tmp_path))
    assert proposed == "process(npm run dev *)"
    assert _covers(proposed, "process", arguments, tmp_path)
    assert proposed_rule("process", {"action": "list"}, cwd=str(tmp_path), workspace=str(tmp_path)) == "process"


@pytest.mark.parametrize("command", ["make && make install", "git status > out.txt", "make && ./configure"])
def test_a_line_a_prefix_rule_cannot_cover_gets_the_suggested_rule(command: str, tmp_path: Path) -> None:
    ws = str(tmp_path)
    assert proposed_rule("bash", {"command": command}, cwd=ws, workspace=ws) == suggested_rule("bash", {"command": command}, cwd=ws, workspace=ws)


def test_a_prefix_that_would_not_cover_the_call_falls_back(tmp_path: Path) -> None:
    ws = str(tmp_path)
    # A line writing a file through a redirection: no command pattern covers it, so not the prefix.
    arguments = {"command": "python3 -m unittest > log.txt"}
    assert not _covers("bash(python3 -m unittest *)", "bash", arguments, tmp_path)
    assert proposed_rule("bash", arguments, cwd=ws, workspace=ws) == suggested_rule("bash", arguments, cwd=ws, workspace=ws) == "bash(python3 -m unittest)"
    # In another directory a relative program is another file: neither the prefix nor the exact
    # command covers the call, so the suggested rule is what is left.
    (tmp_path / "other").mkdir()
    arguments = {"command": "./scripts/test unit", "workdir": "other"}
    assert proposed_rule("bash", arguments, cwd=ws, workspace=ws) == suggested_rule("bash", arguments, cwd=ws, workspace=ws)
    # With the same workdir as the call's own directory, the prefix covers it.
    assert proposed_rule("bash", {"command": "./scripts/test unit", "workdir": "."}, cwd=ws, workspace=ws) == "bash(./scripts/test unit *)"


def test_a_command_too_long_for_a_rule_gets_the_suggested_rule(tmp_path: Path) -> None:
    ws = str(tmp_path)
    long_command = "echo " + "x" * 70_000
    assert proposed_rule("bash", {"command": long_command}, cwd=ws, workspace=ws) == suggested_rule("bash", {"command": long_command}, cwd=ws, workspace=ws)
    exact_too_long = "ls " + "y" * 2000  # a rule pattern holds at most 1 KiB
    assert proposed_rule("bash", {"command": exact_too_long}, cwd=ws, workspace=ws) == suggested_rule("bash", {"command": exact_too_long}, cwd=ws, workspace=ws)


# ------------------------------------------------------------------ paths


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with a package, a library directory and git's directory."""
    root = tmp_path / "ws"
    for d in ("src/pkg", "lib", ".git", "config"):
        (root / d).mkdir(parents=True)
    (root / "src/pkg/a.py").write_text("a\n")
    (root / "lib/real.py").write_text("r\n")
    (root / ".git/config").write_text("[core]\n")
    return root


@pytest.mark.parametrize("tool", ["write_file", "edit_file", "read_file"])
def test_a_file_in_a_directory_gets_its_parent_directory(tool: str, ws: Path) -> None:
    proposed = proposed_rule(tool, {"path": "src/pkg/a.py"}, cwd=str(ws), workspace=str(ws))
    assert proposed == f"{tool}(src/pkg/**)"
    assert _covers(proposed, tool, {"path": "src/pkg/a.py"}, ws)
    assert _covers(proposed, tool, {"path": "src/pkg/b.py"}, ws)
    assert _covers(proposed, tool, {"path": "src/pkg/sub/c.py"}, ws)
    assert not _covers(proposed, tool, {"path": "src/other.py"}, ws)
    assert not _covers(proposed, tool, {"path": "src/pkg/.env"}, ws)


def test_the_path_is_the_one_the_service_opens(ws: Path) -> None:
    # From a subdirectory, and by an absolute path: the pattern is relative to the workspace root.
    assert proposed_rule("write_file", {"path": "pkg/new.py"}, cwd=str(ws / "src"), workspace=str(ws)) == "write_file(src/pkg/**)"
    assert proposed_rule("write_file", {"path": str(ws / "src/pkg/a.py")}, cwd=str(ws), workspace=str(ws)) == "write_file(src/pkg/**)"
    # A symlinked file and a symlinked directory: the target's directory.
    (ws / "alias.py").symlink_to("lib/real.py")
    (ws / "src/link").symlink_to("../lib")
    for path in ("alias.py", "src/link/new.py"):
        proposed = proposed_rule("write_file", {"path": path}, cwd=str(ws), workspace=str(ws))
        assert proposed == "write_file(lib/**)", path
        assert _covers(proposed, "write_file", {"path": path}, ws)
        assert _covers(proposed, "write_file", {"path": "lib/other.py"}, ws)
        assert not _covers(proposed, "write_file", {"path": "src/pkg/a.py"}, ws)


def test_a_directory_that_covers_only_one_reading_of_an_escaped_path_is_not_proposed(ws: Path) -> None:
    # Read literally, the path is under lib/ (no file there is named `\x2e\x2e`); with its escapes
    # decoded it is src/pkg/a.py. The service may open either, and src/pkg/** covers only one.
    path = "lib/\\x2e\\x2e/src/pkg/a.py"
    assert not _covers("write_file(src/pkg/**)", "write_file", {"path": path}, ws)
    proposed = proposed_rule("write_file", {"path": path}, cwd=str(ws), workspace=str(ws))
    assert proposed == suggested_rule("write_file", {"path": path}, cwd=str(ws), workspace=str(ws)) == "write_file(src/pkg/a.py)"


def test_a_top_level_file_gets_its_extension_or_its_name(ws: Path) -> None:
    proposed = proposed_rule("write_file", {"path": "c.txt"}, cwd=str(ws), workspace=str(ws))
    assert proposed == "write_file(*.txt)"
    assert _covers(proposed, "write_file", {"path": "c.txt"}, ws)
    assert _covers(proposed, "write_file", {"path": "d.txt"}, ws)
    assert not _covers(proposed, "write_file", {"path": "src/d.txt"}, ws)
    assert not _covers(proposed, "write_file", {"path": "c.md"}, ws)
    assert not _covers(proposed, "write_file", {"path": ".env.txt"}, ws)
    assert proposed_rule("write_file", {"path": "Makefile"}, cwd=str(ws), workspace=str(ws)) == "write_file(Makefile)"
    assert proposed_rule("write_file", {"path": ".bashrc"}, cwd=str(ws), workspace=str(ws)) == "write_file(.bashrc)"


@pytest.mark.parametrize("path", [".env", ".env.local", "config/.env", "config/.ENV.production", ".git/config", "src/.git/x",
                                  ".gitmodules", ".osprey/hooks.toml", "src/cfg/config"])
def test_a_protected_name_gets_exactly_the_file(path: str, ws: Path) -> None:
    (ws / "src/cfg").symlink_to("../.git")  # src/cfg/config is .git/config
    proposed = proposed_rule("write_file", {"path": path}, cwd=str(ws), workspace=str(ws))
    assert proposed == suggested_rule("write_file", {"path": path}, cwd=str(ws), workspace=str(ws))
    assert Rule.parse(proposed).pattern is not None and "*" not in proposed
    assert _covers(proposed, "write_file", {"path": path}, ws)


@pytest.mark.parametrize("tool,path", [("write_file", "../outside.py"), ("read_file", "/etc/hostname"), ("edit_file", "/tmp/x.py")])
def test_a_path_outside_the_workspace_gets_the_suggested_rule(tool: str, path: str, ws: Path) -> None:
    assert proposed_rule(tool, {"path": path}, cwd=str(ws), workspace=str(ws)) == suggested_rule(tool, {"path": path}, cwd=str(ws), workspace=str(ws)) == tool


def test_glob_characters_are_never_spelled_in_a_pattern(ws: Path) -> None:
    (ws / "src/pkg[1]").mkdir()
    (ws / "src/pkg[1]/a.py").write_text("")
    # The directory holds glob characters: the suggested rule (a pattern cannot name it).
    path = "src/pkg[1]/a.py"
    assert proposed_rule("write_file", {"path": path}, cwd=str(ws), workspace=str(ws)) == suggested_rule("write_file", {"path": path}, cwd=str(ws), workspace=str(ws))
    # Only the file name does: its directory is proposed, which spells no glob character.
    proposed = proposed_rule("write_file", {"path": "src/pkg/a*.py"}, cwd=str(ws), workspace=str(ws))
    assert proposed == "write_file(src/pkg/**)"
    assert _covers(proposed, "write_file", {"path": "src/pkg/a*.py"}, ws)
    # A top-level name whose extension holds one: nothing narrower than the suggested rule.
    assert proposed_rule("write_file", {"path": "notes.t?t"}, cwd=str(ws), workspace=str(ws)) == "write_file"


def test_other_tools_get_the_suggested_rule(ws: Path) -> None:
    for tool, arguments in (("grep", {"pattern": "x", "path": "src"}), ("list_directory", {"path": "src"}), ("deploy_preview", {})):
        assert proposed_rule(tool, arguments, cwd=str(ws), workspace=str(ws)) == suggested_rule(tool, arguments, cwd=str(ws), workspace=str(ws)) == tool


def test_always_rule_is_the_proposal_else_the_suggestion() -> None:
    base: dict[str, Any] = {"call_id": "c", "tool": "write_file", "arguments": {"path": "c.txt"}, "policy": "on-request", "reason": "r",
                            "suggested_rule": "write_file(c.txt)"}
    assert ApprovalRequest(**base).always_rule == "write_file(c.txt)"
    assert ApprovalRequest(**base, proposed_rule="write_file(*.txt)").always_rule == "write_file(*.txt)"


# ------------------------------------------------------------------ through a session


class Scripted:
    """An approver that answers from a script and records what it was asked."""

    def __init__(self, *answers: ApprovalAnswer) -> None:
        self.answers = list(answers)
        self.asked: list[ApprovalRequest] = []

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request)
        return self.answers.pop(0)


async def test_the_approver_is_offered_the_proposal_and_saving_it_covers_the_next_file(tmp_path: Path) -> None:
    h = Harness.under(tmp_path, git=True)
    (h.workspace / "src/pkg").mkdir(parents=True)
    approver = Scripted(ApprovalAnswer(decision="deny", reason="not now"), ApprovalAnswer(decision="allow_always", rule="write_file(src/pkg/**)"))
    await h.run([calls(ToolCall(id="t", name="bash", arguments={"command": "python3 -m unittest discover -v"})),
                 calls(ToolCall(id="w1", name="write_file", arguments={"path": "src/pkg/a.py", "content": "a\n"})),
                 calls(ToolCall(id="w2", name="write_file", arguments={"path": "src/pkg/b.py", "content": "b\n"})), text("ok")],
                policy="on-request", approver=approver)
    first, second = approver.asked
    assert (first.suggested_rule, first.proposed_rule) == ("bash(python3 -m unittest discover -v)", "bash(python3 -m unittest *)")
    assert (second.suggested_rule, second.proposed_rule) == ("write_file(src/pkg/a.py)", "write_file(src/pkg/**)")
    assert second.always_rule == "write_file(src/pkg/**)"
    assert h.result("t").error_category == "denied"
    # The saved proposal covered the sibling file: it was written without asking.
    assert h.result("w1").ok and h.result("w2").ok
    assert (h.workspace / "src/pkg/b.py").read_text() == "b\n"
    saved = ApprovalStore(h.home / "approvals.toml").load()
    assert [(s.rule, s.project) for s in saved] == [("write_file(src/pkg/**)", os.path.realpath(h.workspace))]
