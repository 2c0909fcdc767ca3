"""Path rules match the file the ToolService will open: `\\xNN` escapes, `..` and symlinks resolved,
and `.git`, `.gitmodules`, `.osprey`, `.env` covered only by a pattern that names them.

The rule's view is checked against what each home's service really opens, and end to end: under
`--allow 'write_file(src/**)'` an escaped `..` or a symlink into `.git` is not pre-approved, in a
plain host run and in a `--sandbox` lane."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import require_docker

from osprey.policy.approvals import ApprovalPolicy, suggested_rule
from osprey.policy.rules import Rule, decode_escapes, opened_paths, protected
from osprey.policy.store import ApprovalStore
from osprey.testing.model_server import ModelServer, Reply
from osprey.testing.model_server import ToolCall as Call
from osprey.toolservice.client import ToolClient

OSPREY = str(Path(sys.executable).with_name("osprey"))
SECRET = "API_KEY=secret-in-dotenv\n"
GIT_CONFIG = "[core]\n\trepositoryformatversion = 0\n"
ESCAPED_UP = "\\x2e\\x2e"  # `..` written with escapes the tool service decodes


@pytest.fixture
def ws(workspace: Path) -> Path:
    """A workspace with a `.git`, a `.env`, `src/` and `docs/`, and links a cloned repository can ship."""
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text(GIT_CONFIG)
    (workspace / ".env").write_text(SECRET)
    for name in ("src", "docs", "lib"):
        (workspace / name).mkdir()
    (workspace / "docs" / "a.md").write_text("# docs\n")
    (workspace / "lib" / "l.py").write_text("lib = 1\n")
    os.symlink("../.git", workspace / "src" / "link")
    os.symlink("../.env", workspace / "docs" / "env.md")
    os.symlink("..", workspace / "docs" / "up")
    os.symlink("../lib", workspace / "src" / "lib")
    os.symlink("/proc/self/cwd", workspace / "src" / "here")  # names another place in each process
    return workspace


def covers(rule: str, path: str, ws: Path, cwd: Path | None = None) -> bool:
    parsed = Rule.parse(rule)
    return parsed.covers(parsed.tool, {"path": path}, cwd=str(cwd or ws), workspace=str(ws))


# -- the rule's view


@pytest.mark.parametrize(("rule", "path"), [
    ("write_file(src/**)", f"src/{ESCAPED_UP}/.git/config"),
    ("write_file(src/**)", "src/\\x2E\\x2e/.git/config"),  # either letter case, as the service reads it
    ("write_file(src/**)", f"src/{ESCAPED_UP}/{ESCAPED_UP}/etc/passwd"),
    ("write_file(src/**)", "src/link/config"),  # src/link -> ../.git
    ("write_file(src/**)", "src/link/hooks/pre-commit"),
    ("write_file(src/**)", "src/lib/l.py"),  # src/lib -> ../lib: it opens lib/l.py
    ("read_file(docs/**)", f"docs/{ESCAPED_UP}/.env"),
    ("read_file(docs/**)", "docs/env.md"),  # docs/env.md -> ../.env
    ("read_file(docs/**)", "docs/up/.env"),  # docs/up -> ..
    ("read_file(docs/*.md)", "docs/env.md"),
    ("write_file(src/**)", "src/here/src/a.py"),
    ("read_file(docs/**)", "docs/\\x00"),  # a NUL the service refuses
    ("read_file(docs/**)", "docs/\udc80\ud800"),  # a lone surrogate the client cannot send
])
def test_a_path_is_matched_as_the_service_opens_it(ws: Path, rule: str, path: str) -> None:
    assert not covers(rule, path, ws)


@pytest.mark.parametrize(("rule", "path"), [
    ("write_file(src/**)", "src/new/file.py"),  # a file to create, in directories to create
    ("write_file(src/**)", "src/../src/a.py"),
    ("write_file(src/**)", "src/caf\\xc3\\xa9.py"),  # escapes that stay inside src/ either way
    ("write_file(lib/**)", "src/lib/l.py"),  # the link's target is what the rule must name
    ("read_file(docs/*.md)", "docs/a.md"),
    ("read_file(docs/**)", "docs/up/docs/a.md"),
    ("read_file(.env)", "docs/env.md"),  # a pattern that names .env covers it, through a link too
    ("write_file(.git/**)", "src/link/config"),
])
def test_paths_that_open_what_the_rule_names_are_covered(ws: Path, rule: str, path: str) -> None:
    assert covers(rule, path, ws)


@pytest.mark.parametrize(("rule", "path", "covered"), [
    ("write_file(**)", ".git/config", False),
    ("write_file(**)", "sub/.git/hooks/pre-commit", False),
    ("write_file(**)", ".gitmodules", False),
    ("write_file(**)", ".osprey/config.toml", False),
    ("write_file(**)", ".osprey/tools/t.toml", False),
    ("read_file(**)", ".env", False),
    ("read_file(**)", "config/.env", False),
    ("read_file(**)", ".env.local", False),
    ("read_file(**)", ".GIT/config", False),  # a file system that ignores case opens .git
    ("read_file(*)", ".env", False),
    ("read_file(.e*)", ".env", False),
    ("read_file(.en?)", ".env", False),
    ("read_file(*/**)", ".git/HEAD", False),
    ("write_file(src/**)", "src/.git/config", False),
    ("read_file(**)", ".envrc", True),  # only .env and .env.*
    ("read_file(**)", ".github/workflows/ci.yml", True),
    ("read_file(**)", "src/env", True),
    ("read_file(.env)", ".env", True),
    ("read_file(**/.env)", "config/.env", True),
    ("read_file(config/.env.local)", "config/.env.local", True),
    ("write_file(.osprey/**)", ".osprey/config.toml", True),
    ("write_file(.osprey/**)", ".osprey/.git/config", False),  # .git is not named
    ("write_file(**/.git/**)", "sub/.git/config", True),
    ("write_file(.git/**)", ".git/config", True),
    ("write_file(.gitmodules)", ".gitmodules", True),
])
def test_protected_names_are_covered_only_when_the_pattern_names_them(tmp_path: Path, rule: str, path: str, covered: bool) -> None:
    ws = tmp_path / "w"
    ws.mkdir()
    assert covers(rule, path, ws) is covered


def test_protected_names() -> None:
    assert all(protected(n) for n in (".git", ".gitmodules", ".osprey", ".env", ".env.production", ".Git", ".ENV"))
    assert not any(protected(n) for n in ("git", ".github", ".gitignore", ".envrc", "env", ".osprey-notes"))


def test_a_path_through_proc_is_never_covered(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`/proc/self/cwd` names the broker's directory here and the service's own in the service."""
    monkeypatch.chdir(ws / "src")
    assert os.path.realpath(ws / "src" / "here" / "a.py") == str(ws / "src" / "a.py")
    assert not covers("write_file(src/**)", "src/here/a.py", ws)
    assert not covers("write_file(src/**)", "/proc/self/cwd/a.py", ws)
    assert covers("write_file(src/**)", "src/a.py", ws)


def test_a_file_with_other_hard_links_is_never_covered(ws: Path) -> None:
    os.link(ws / ".env", ws / "docs" / "notes.md")
    assert not covers("read_file(docs/**)", "docs/notes.md", ws)
    assert covers("read_file(docs/**)", "docs/a.md", ws)


def test_escape_decoding_is_the_services(tmp_path: Path) -> None:
    """The broker's reading of `\\xNN` is the sidecar's (which it does not import)."""
    from osprey_sidecar.paths import from_wire

    for path in ["a\\x2e\\x2e/b", "\\x2E\\x2e", "caf\\xc3\\xa9", "bad\\xff\\xfe", "\\x5cx41", "no-escape", "x\\x4", "\\\\x41", "\\x00"]:
        assert decode_escapes(path) == from_wire(path, str(tmp_path)), path


def test_both_readings_of_an_escaped_path_must_be_covered(ws: Path) -> None:
    literal = ws / "src" / "\\x2e\\x2e"
    literal.mkdir()  # now the service reads the path literally...
    assert opened_paths(f"src/{ESCAPED_UP}/.git/config", str(ws)) == [str(literal / ".git" / "config"), str(ws / ".git" / "config")]
    assert not covers("write_file(src/**)", f"src/{ESCAPED_UP}/.git/config", ws)  # ...until it is removed


def test_saved_rules_match_the_opened_path_too(ws: Path, tmp_path: Path) -> None:
    store = ApprovalStore.for_home(tmp_path / "home")
    store.add("write_file(src/**)", project=str(ws))
    store.add("read_file(docs/**)", project=None)
    for tool, path in [("write_file", f"src/{ESCAPED_UP}/.git/config"), ("write_file", "src/link/config"),
                       ("read_file", "docs/env.md"), ("read_file", f"docs/{ESCAPED_UP}/.env")]:
        assert store.covering(tool, {"path": path}, cwd=str(ws), workspace=str(ws)) is None, path
    assert store.covering("write_file", {"path": "src/a.py"}, cwd=str(ws), workspace=str(ws)) is not None


def test_allow_rules_match_the_opened_path_too(ws: Path) -> None:
    from osprey.interception import PendingCall

    policy = ApprovalPolicy("deny-untrusted", allow=[Rule.parse("write_file(src/**)")], workspace=str(ws))

    def call(path: str) -> PendingCall:
        return PendingCall(id="c", name="write_file", arguments={"path": path, "content": "x"}, tool=None, turn=1, cwd=str(ws), workspace=str(ws))

    assert policy.covering_rule(call("src/a.py")) == "write_file(src/**)"
    assert policy.covering_rule(call("src/link/config")) is None
    assert policy.covering_rule(call(f"src/{ESCAPED_UP}/.git/config")) is None


def test_the_suggested_rule_names_the_file_the_service_opens(ws: Path) -> None:
    assert suggested_rule("write_file", {"path": "src/link/config"}, cwd=str(ws), workspace=str(ws)) == "write_file(.git/config)"
    assert suggested_rule("read_file", {"path": f"docs/{ESCAPED_UP}/.env"}, cwd=str(ws), workspace=str(ws)) == "read_file(.env)"
    assert suggested_rule("write_file", {"path": "src/a.py"}, cwd=str(ws), workspace=str(ws)) == "write_file(src/a.py)"


# -- what each home's service really opens


async def test_a_covered_path_opens_a_file_the_rule_names_in_each_home(tools: ToolClient, ws: Path) -> None:
    """For every path tried, the service reads what it reads; the rule covers the path only when
    that is not the secret. The sneaky paths do reach the secret: the rule's view is the service's."""
    rule = Rule.parse("read_file(docs/**)")
    paths = ["docs/a.md", "docs/env.md", f"docs/{ESCAPED_UP}/.env", "docs/up/.env", "docs/up/docs/a.md", "docs/./a.md"]
    reached_secret = []
    for path in paths:
        result = await tools.read_file(path)
        covered = rule.covers("read_file", {"path": path}, cwd=str(ws), workspace=str(ws))
        if "secret-in-dotenv" in result.content:
            reached_secret.append(path)
            assert not covered, path
        else:
            assert covered, path
    assert reached_secret == ["docs/env.md", f"docs/{ESCAPED_UP}/.env", "docs/up/.env"]


# -- end to end: `osprey agent --allow 'write_file(src/**)'`, headless default policy


@pytest.fixture
def runtime() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="osprt-"))  # short: unix socket paths are limited to 107 bytes
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=False)


@pytest.mark.e2e
@pytest.mark.parametrize("home", ["local", "lane"])
def test_agent_allow_rule_does_not_pre_approve_a_way_into_git(home: str, ws: Path, model_server: ModelServer,
                                                              osprey_env: dict[str, str], runtime: Path) -> None:
    if home == "lane":
        require_docker()
    model_server.add(
        Reply.tool_calls([
            Call("write_file", {"path": "src/ok.py", "content": "ok = 1\n"}),
            Call("write_file", {"path": f"src/{ESCAPED_UP}/.git/config", "content": "[core]\n\tfsmonitor = touch pwned\n"}),
            Call("write_file", {"path": "src/link/config", "content": "[core]\n\tfsmonitor = touch pwned\n"}),
            Call("read_file", {"path": "docs/env.md"}),  # trusted read-only: runs without a rule
        ]),
        Reply.text("done"),
    )
    args = [OSPREY, "agent", "-C", str(ws), "--provider", "openai", "--base-url", model_server.base_url,
            "--allow", "write_file(src/**)", *(["--sandbox"] if home == "lane" else []), "change the code"]
    run = subprocess.run(args, env={**osprey_env, "XDG_RUNTIME_DIR": str(runtime)}, capture_output=True, text=True,
                         timeout=180, check=False)
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    assert events[0]["tool_service"] == home and events[0]["approval_policy"] == "deny-untrusted"
    ok, escaped, linked, read = [e for e in events if e["type"] == "tool_result"]
    assert ok["ok"], ok
    for result in (escaped, linked):
        assert (result["ok"], result["error_category"]) == (False, "denied"), result
    assert read["ok"]  # reading stays the read-only tools' business; only rules changed
    assert (ws / "src" / "ok.py").read_text() == "ok = 1\n"
    assert (ws / ".git" / "config").read_text() == GIT_CONFIG
    assert not (ws / "pwned").exists()
