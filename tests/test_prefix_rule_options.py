"""A command prefix rule's trailing `*` does not cover options that write elsewhere, run code or
delete (git, pytest, npm, make, cargo, go), nor words the shell may expand into one; saving such a
rule says so, the docs list the options, and the README's example rules are safe as written."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import require_docker

from osprey.cli import main
from osprey.policy.approvals import ApprovalRequest, suggested_rule
from osprey.policy.rules import RISKY_OPTIONS, Rule, describe
from osprey.policy.store import ApprovalStore
from osprey.testing.model_server import ModelServer, Reply

ROOT = Path(__file__).resolve().parent.parent
OSPREY = str(Path(sys.executable).with_name("osprey"))
WS = "/work/ws"


def covers(rule: str, command: str) -> bool:
    parsed = Rule.parse(rule)
    return parsed.covers(parsed.tool, {"command": command}, cwd=WS, workspace=WS)


NOT_COVERED = [
    # subcommands that write configuration or run what they are given, under a rule naming none
    ("bash(git *)", "git config --global core.pager 'sh -c id'"),
    ("bash(git *)", "git config core.fsmonitor 'touch x'"),
    ("bash(git *)", "git submodule foreach id"),
    ("bash(git *)", "git -C . bisect run id"),
    ("bash(git diff *)", "git diff --no-index /etc/passwd x"),
    ("bash(npm *)", "npm config set script-shell /tmp/sh"),
    ("bash(npm *)", "npm exec cowsay"),
    ("bash(go *)", "go env -w GOFLAGS=-toolexec=/tmp/x"),
    ("bash(go vet *)", "go vet -vettool=/tmp/x"),
    ("bash(go test *)", "go test -vettool=/tmp/x ./..."),
    # git
    ("bash(git diff *)", "git diff --output=/home/me/.bashrc --line-prefix='x'"),
    ("bash(git diff *)", "git diff --output /home/me/.bashrc"),
    ("bash(git diff *)", "git diff --outp=x"),  # git takes an unambiguous abbreviation
    ("bash(git diff *)", "git diff --ext-diff"),
    ("bash(git diff *)", "git diff HEAD --ext-diff -- a.py"),
    ("bash(git log *)", "git log -p --output=../x"),
    ("bash(git *)", "git -c core.fsmonitor='touch x' status"),
    ("bash(git *)", "git -ccore.pager=sh log"),
    ("bash(git *)", "git -C /elsewhere status"),
    ("bash(git *)", "git --exec-path=/tmp/bin status"),
    ("bash(git *)", "git --config-env=core.pager=X log"),
    ("bash(git fetch *)", "git fetch --upload-pack='touch x' origin"),
    ("bash(git push *)", "git push --receive-pack=x origin"),
    ("bash(git clone *)", "git clone -u 'touch x' a b"),
    ("bash(git clone *)", "git clone --config core.hooksPath=/x a b"),
    ("bash(git clone *)", "git clone --template=/x a b"),
    ("bash(git format-patch *)", "git format-patch -o /tmp/out HEAD~1"),
    ("bash(git format-patch *)", "git format-patch --output-directory=/tmp/out HEAD~1"),
    ("bash(git rebase *)", "git rebase -x 'make' main"),
    ("bash(git rebase *)", "git rebase --exec='make' main"),
    ("bash(git grep *)", "git grep -Ovim x"),
    ("bash(git filter-branch *)", "git filter-branch --tree-filter 'rm -rf x' HEAD"),
    # pytest
    ("bash(pytest *)", "pytest --basetemp=/home/me/project"),
    ("bash(pytest *)", "pytest --basetemp /home/me/project"),
    ("bash(pytest *)", "pytest -p evil_plugin"),
    ("bash(pytest *)", "pytest -pevil_plugin"),
    ("bash(pytest *)", "pytest -xpevil"),  # a cluster: -x, then -p evil
    ("bash(pytest *)", "pytest -c /tmp/pytest.ini"),
    ("bash(pytest *)", "pytest -c/tmp/pytest.ini"),
    ("bash(pytest *)", "pytest --rootdir=/"),
    ("bash(pytest *)", "pytest --confcutdir=/tmp"),
    ("bash(pytest *)", "pytest -o cache_dir=/tmp/x"),
    ("bash(pytest *)", "pytest --override-ini=cache_dir=/tmp/x"),
    ("bash(pytest *)", "pytest --junitxml=/home/me/.bashrc"),
    ("bash(pytest *)", "pytest --pdbcls=evil:Debugger"),
    ("bash(python -m pytest *)", "python -m pytest --basetemp=/x"),
    ("bash(python3 -m pytest *)", "python3 -m pytest -p x"),
    ("bash(uv run pytest *)", "uv run pytest --basetemp=/x"),
    ("bash(uv run --with git pytest *)", "uv run --with git pytest --basetemp=/x"),  # every program named
    # npm and friends
    ("bash(npm run test *)", "npm run test --script-shell=/tmp/evil"),
    ("bash(npm run test *)", "npm run test -- --basetemp=/x"),  # the rest goes to the script
    ("bash(npm *)", "npm install -g something"),
    ("bash(npm *)", "npm --prefix /elsewhere install"),
    ("bash(npm *)", "npm install --node-options='--require /tmp/x.js'"),
    ("bash(npx prettier *)", "npx prettier --package=evil"),
    ("bash(pnpm *)", "pnpm --dir /elsewhere install"),
    ("bash(yarn *)", "yarn --cwd /elsewhere install"),
    # make
    ("bash(make *)", "make -f /tmp/Makefile"),
    ("bash(make *)", "make -f/tmp/Makefile"),
    ("bash(make *)", "make -C /elsewhere"),
    ("bash(make *)", "make --eval='all: ; touch x'"),
    ("bash(make *)", "make --directory=/elsewhere"),
    ("bash(make test *)", "make test SHELL=/tmp/evil"),
    ("bash(make test *)", "make test PYTEST='rm -rf ~'"),
    # cargo
    ("bash(cargo build *)", "cargo build --manifest-path /elsewhere/Cargo.toml"),
    ("bash(cargo build *)", "cargo build --config 'build.rustc-wrapper=\"/tmp/x\"'"),
    ("bash(cargo build *)", "cargo build --target-dir=/elsewhere"),
    ("bash(cargo build *)", "cargo build -Zunstable-options"),
    ("bash(cargo *)", "cargo -C /elsewhere build"),
    # go
    ("bash(go test *)", "go test -exec /tmp/x ./..."),
    ("bash(go test *)", "go test -exec=/tmp/x ./..."),
    ("bash(go test *)", "go test -toolexec=/tmp/x ./..."),
    ("bash(go test *)", "go test --toolexec /tmp/x ./..."),
    ("bash(go build *)", "go build -o /home/me/bin/ls ."),
    ("bash(go *)", "go -C /elsewhere build"),
    ("bash(go test *)", "go test -coverprofile=/home/me/.bashrc ./..."),
    ("bash(go test *)", "go test -ldflags=-extld=/tmp/x ./..."),
    # words the shell may expand into an option
    ("bash(pytest *)", "pytest *"),  # a file named --basetemp=.. in the directory
    ("bash(pytest *)", "pytest [-]-basetemp=x"),
    ("bash(pytest *)", "pytest {--basetemp=/x,}"),
    ("bash(git diff *)", "git diff $OPTS"),
    ("bash(git diff *)", 'git diff "$o"'),
    ("bash(git diff *)", "git diff --out$x=/home/me/.bashrc"),
    ("bash(git diff *)", "git diff ${x:-'--output=/home/me/.bashrc'}"),
    ("bash(make *)", "make $TARGET"),
    ("bash(git diff *)", "git diff src/$f"),  # f='a --output=/home/me/.bashrc' splits into two words
    ("bash(*)", "git diff --output=x"),
    ("bash(*)", "pytest --basetemp=/x"),
]

COVERED = [
    ("bash(git *)", "git status"),
    ("bash(git config *)", "git config user.name"),
    ("bash(npm *)", "npm test"),
    ("bash(go *)", "go env GOPATH"),
    ("bash(git diff *)", "git diff"),
    ("bash(git diff *)", "git diff HEAD~1 -- src/a.py"),
    ("bash(git diff *)", "git diff --stat --cached"),
    ("bash(git diff *)", "git diff -c"),  # after diff, -c is the combined format
    ("bash(git diff *)", "git diff --cc"),
    ("bash(git diff *)", "git diff --no-ext-diff"),
    ("bash(git diff *)", "git diff --output-indicator-new=+"),
    ("bash(git diff *)", "git diff HEAD@{1}"),
    ("bash(git diff *)", "git diff -- '*.py'"),  # after --, paths
    ("bash(git log *)", "git log --oneline -n 5"),
    ("bash(git *)", "git --no-pager log"),
    ("bash(git -c core.pager=cat log *)", "git -c core.pager=cat log -n 1"),  # the rule names -c
    ("bash(pytest *)", "pytest"),
    ("bash(pytest *)", "pytest -q -x tests/test_a.py -k 'a and not b'"),
    ("bash(pytest *)", "pytest --co -q"),
    ("bash(pytest *)", "pytest -vv --tb=short --maxfail=1"),
    ("bash(pytest *)", "pytest --cov=src"),
    ("bash(npm run test *)", "npm run test"),
    ("bash(npm run test *)", "npm run test --silent"),
    ("bash(npm *)", "npm install --save-dev prettier"),
    ("bash(make *)", "make -j4 test"),
    ("bash(make *)", "make -k check"),
    ("bash(make *)", "make --jobs=4 --output-sync=target all"),
    ("bash(cargo test *)", "cargo test --target x86_64-unknown-linux-gnu --release"),
    ("bash(cargo test *)", "cargo test -- --nocapture"),
    ("bash(go test *)", "go test -v -run TestA -count=1 ./..."),
    ("bash(ls *)", "ls --color=always -la"),  # no list for ls: every option
    ("bash(sed *)", "sed -n 1p a.txt"),
]


@pytest.mark.parametrize(("rule", "command", "covered"), [(*c, False) for c in NOT_COVERED] + [(*c, True) for c in COVERED])
def test_what_a_trailing_star_covers(rule: str, command: str, covered: bool) -> None:
    assert covers(rule, command) is covered
    assert covers(rule.replace("bash(", "process(", 1), command) is covered


def test_saved_rules_leave_the_options_out_too(tmp_path: Path) -> None:
    store = ApprovalStore.for_home(tmp_path / "home")
    store.add("bash(pytest *)", project=None)
    store.add("bash(git diff *)", project=WS)
    assert store.covering("bash", {"command": "pytest -q"}, cwd=WS, workspace=WS) is not None
    assert store.covering("bash", {"command": "pytest --basetemp=/home/me"}, cwd=WS, workspace=WS) is None
    assert store.covering("bash", {"command": "git diff --output=/home/me/.bashrc"}, cwd=WS, workspace=WS) is None


def test_the_suggested_rule_for_a_risky_call_is_the_exact_command() -> None:
    """"allow always" for a risky call saves the exact command, which covers that call and no other."""
    for command in ("git diff --output=x.txt", "pytest tests -p xdist"):
        rule = suggested_rule("bash", {"command": command})
        assert rule == f"bash({command})"
        assert covers(rule, command) and not covers(rule, command.replace("x", "y"))
    assert suggested_rule("bash", {"command": "git diff HEAD"}) == "bash(git diff *)"


def test_describe_says_what_a_trailing_star_covers_and_what_it_does_not() -> None:
    git = describe(Rule.parse("bash(git diff *)"))
    assert "`git diff` followed by any further arguments" in git and "but not" in git
    assert "--output" in git and "--ext-diff" in git and "docs/approvals.md" in git
    pytest_ = describe(Rule.parse("bash(pytest *)"))
    assert "--basetemp" in pytest_ and "--rootdir" in pytest_
    make = describe(Rule.parse("bash(make *)"))
    assert "NAME=value" in make and "-f" in make
    assert "options included" in describe(Rule.parse("bash(ls *)"))
    assert "exactly" in describe(Rule.parse("bash(git status)"))
    assert ".git" in describe(Rule.parse("write_file(src/**)"))


def test_osprey_approvals_add_says_what_the_rule_covers(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    env = {"OSPREY_HOME": str(tmp_path / "home"), "HOME": str(tmp_path)}
    result = CliRunner().invoke(main, ["approvals", "add", "bash(pytest *)", "-C", str(project)], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "Saved bash(pytest *)" in result.stdout
    assert "but not the pytest options" in result.stdout and "--basetemp" in result.stdout


async def test_the_approval_screen_says_what_always_allow_covers() -> None:
    from textual.app import App
    from textual.widgets import Static

    from osprey.tui.approval_screen import ApprovalScreen

    request = ApprovalRequest(call_id="c1", tool="bash", arguments={"command": "git diff HEAD"}, policy="on-request",
                              reason="", suggested_rule="bash(git diff *)")
    app: App[None] = App()
    async with app.run_test() as pilot:
        screen = ApprovalScreen(request)
        await app.push_screen(screen)
        await pilot.pause()
        await pilot.press("a")
        await pilot.pause()
        assert not screen.query_one("#scope").has_class("hidden")
        shown = str(screen.query_one("#covers", Static).render())
        assert "--output" in shown and "but not" in shown


def test_docs_list_every_option() -> None:
    text = (ROOT / "docs" / "approvals.md").read_text()
    section = text.split("#### Options a trailing `*` does not cover", 1)[1].split("\n#### ", 1)[0].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in section.splitlines() if line.startswith("| `")}
    for name, options in RISKY_OPTIONS.items():
        [row] = [line for program, line in rows.items() if f"`{name}`" in program]
        for option in options.shown():
            assert f"`{option}`" in row or f"{option}`" in row, (name, option)


def test_the_readme_example_rules_are_safe_as_written() -> None:
    readme = (ROOT / "README.md").read_text()
    rules = set(re.findall(r"`((?:bash|process)\([^`]*\*\))`", readme)) | set(re.findall(r"--allow '((?:bash|process)\([^']*\*\))'", readme))
    assert {"bash(git diff *)", "bash(pytest *)"} <= rules
    risky = {"git": "--output=/home/me/.bashrc", "pytest": "--basetemp=/home/me", "npm": "--script-shell=/tmp/x",
             "make": "-f/tmp/M", "cargo": "--target-dir=/tmp", "go": "-toolexec=/tmp/x"}
    for rule in rules:
        words = Rule.parse(rule).pattern.removesuffix("*").strip()  # type: ignore[union-attr]
        program = words.split()[0]
        if program in risky:
            assert not covers(rule, f"{words} {risky[program]}"), rule
            assert covers(rule, words), rule


# -- end to end: `osprey agent --allow 'bash(git diff *)'` in each home


@pytest.fixture
def runtime() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="osprt-"))  # short: unix socket paths are limited to 107 bytes
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.e2e
@pytest.mark.parametrize("home", ["local", "lane"])
def test_agent_allow_git_diff_star_does_not_run_git_diff_output(home: str, workspace: Path, model_server: ModelServer,
                                                                osprey_env: dict[str, str], runtime: Path) -> None:
    if home == "lane":
        require_docker()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True, capture_output=True)
    (workspace / "a.txt").write_text("a\n")
    outside = workspace.parent / "escaped.txt"
    model_server.add(
        Reply.tool_call("bash", {"command": "git diff --stat"}),
        Reply.tool_call("bash", {"command": f"git diff --output={outside} --line-prefix=x"}),
        Reply.text("done"),
    )
    args = [OSPREY, "agent", "-C", str(workspace), "--provider", "openai", "--base-url", model_server.base_url,
            "--allow", "bash(git diff *)", *(["--sandbox"] if home == "lane" else []), "look at the diff"]
    run = subprocess.run(args, env={**osprey_env, "XDG_RUNTIME_DIR": str(runtime)}, capture_output=True, text=True,
                         timeout=180, check=False)
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    assert events[0]["tool_service"] == home
    plain, output = [e for e in events if e["type"] == "tool_result"]
    assert plain["ok"], plain
    assert (output["ok"], output["error_category"]) == (False, "denied"), output
    assert not outside.exists()
