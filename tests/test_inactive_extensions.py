"""Extensions that are present but do not run (untrusted, modified, malformed) are announced: a
warning notice at session start naming the file and the command that trusts it, another when a
reload stops a hooks file that ran; `osprey extensions`, `/extensions` and `osprey agent` show them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from session_harness import FAST_RETRY, FakeProvider, Harness, text
from test_e2e_agent import run_on_pty
from test_tui import SIZE, TuiRig, notices, started, type_prompt

from osprey.events import Notice, SessionStart
from osprey.session.core import Session
from osprey.testing.model_server import ModelServer, Reply
from osprey.tui.widgets import NoticeRow

BLOCK_RM = '[[hooks.PreToolUse]]\nmatcher = "bash"\n[[hooks.PreToolUse.hooks]]\ncommand = "echo no rm here >&2; exit 2"\n'
TOOL = 'name = "word_count"\ndescription = "Counts."\ncommand = ["./count.sh"]\n[parameters.text]\ntype = "string"\nrequired = true\n'
HOOKS_COMMAND = "`osprey extensions trust hooks`"


def put(path: Path, content: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


def project_tool(workspace: Path) -> Path:
    script = put(workspace / ".osprey" / "tools" / "count.sh", "#!/bin/sh\ncat\n")
    script.chmod(0o755)
    return put(workspace / ".osprey" / "tools" / "word_count.toml", TOOL)


def trust(workspace: Path, home: Path, name: str) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}, "OSPREY_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "osprey", "extensions", "-C", str(workspace), "trust", name, "--yes"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def warnings_of(harness: Harness) -> list[str]:
    return [event.message for event in harness.of(Notice) if event.level == "warning"]


def naming(lines: list[str], path: Path) -> list[str]:
    return [line for line in lines if str(path) in line]


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, git=True)


async def test_untrusted_hooks_and_an_untrusted_tool_each_get_one_notice_at_start(harness: Harness) -> None:
    hooks = put(harness.workspace / ".osprey" / "hooks.toml", BLOCK_RM)
    tool = project_tool(harness.workspace)
    await harness.run([text("ok")])
    warnings = warnings_of(harness)
    [about_hooks] = naming(warnings, hooks)
    assert HOOKS_COMMAND in about_hooks and "not trusted" in about_hooks and "nothing they would block is blocked" in about_hooks
    [about_tool] = naming(warnings, tool)
    assert "`osprey extensions trust word_count`" in about_tool and "'word_count'" in about_tool
    # Announced once the session has started, before any prompt's events.
    kinds = [type(event).__name__ for event in harness.events]
    assert kinds.index("SessionStart") < kinds.index("Notice") < kinds.index("UserMessageEvent")


async def test_trusted_extensions_are_quiet_and_a_hooks_file_changed_since_is_announced_as_modified(harness: Harness) -> None:
    hooks = put(harness.workspace / ".osprey" / "hooks.toml", BLOCK_RM)
    project_tool(harness.workspace)
    trust(harness.workspace, harness.home, "hooks")
    trust(harness.workspace, harness.home, "word_count")
    await harness.run([text("ok")])
    assert warnings_of(harness) == []
    hooks.write_text(BLOCK_RM + "# one more line\n")
    harness.events.clear()
    await harness.run([text("ok")])
    [about_hooks] = warnings_of(harness)
    assert str(hooks) in about_hooks and "changed since it was trusted" in about_hooks and HOOKS_COMMAND in about_hooks


async def test_a_malformed_hooks_file_is_announced_once(harness: Harness) -> None:
    hooks = put(harness.workspace / ".osprey" / "hooks.toml", '[[hooks.PreToolUse]]\nmatcher = "("\n')
    await harness.run([text("ok")])
    [about_hooks] = naming(warnings_of(harness), hooks)
    assert "fix it, then run " + HOOKS_COMMAND in about_hooks


async def test_a_reload_that_stops_a_trusted_hooks_file_says_so(harness: Harness) -> None:
    hooks = put(harness.workspace / ".osprey" / "hooks.toml", BLOCK_RM)
    trust(harness.workspace, harness.home, "hooks")
    provider = FakeProvider([text("first"), text("second")])
    options = harness.options("never", None, FAST_RETRY, ())
    async with Session(options, emit=harness.events.append, provider=provider) as session:
        await session.submit("one")
        assert session.extensions is not None and session.extensions.found is not None
        assert session.extensions.found.hooks_paths == [hooks]
        assert warnings_of(harness) == []
        hooks.write_text(BLOCK_RM + "# edited\n")
        session.request_reload()
        await session.submit("two")
    [stopped] = naming(warnings_of(harness), hooks)
    assert stopped.startswith("since the reload, the hooks in") and "changed since it was trusted" in stopped
    assert HOOKS_COMMAND in stopped


def test_osprey_extensions_lists_inactive_hooks_with_the_trust_command(tmp_path: Path) -> None:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".git").mkdir(parents=True)
    home.mkdir()
    hooks = put(workspace / ".osprey" / "hooks.toml", BLOCK_RM)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}, "OSPREY_HOME": str(home)}
    shown = subprocess.run([sys.executable, "-m", "osprey", "extensions", "-C", str(workspace)], env=env,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = lines.index(f"          {hooks}")
    assert lines[at - 1].startswith("INACTIVE  hooks") and "trust untrusted" in lines[at - 1]
    after = [line.strip() for line in lines[at + 1:at + 4]]
    assert "to trust it once reviewed: osprey extensions trust hooks" in after
    assert any(line.startswith("why: ") for line in after)


@pytest.mark.e2e
def test_a_headless_run_emits_the_notice_in_its_json_lines(workspace: Path, osprey_env: dict[str, str],
                                                           model_server: ModelServer) -> None:
    (workspace / ".git").mkdir()
    hooks = put(workspace / ".osprey" / "hooks.toml", BLOCK_RM)
    model_server.add(Reply.text("Nothing to do."))
    run = subprocess.run([str(Path(sys.executable).with_name("osprey")), "agent", "-C", str(workspace), "--provider", "openai",
                          "--base-url", model_server.base_url, "Say hello."],
                         env=osprey_env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    types = [event["type"] for event in events]
    [notice] = [event for event in events if event["type"] == "notice" and str(hooks) in event["message"]]
    assert notice["level"] == "warning" and HOOKS_COMMAND in notice["message"]
    assert types.index("session_start") < events.index(notice) < types.index("user_message")
    # The events are for programs; the person reading a CI log sees the warning on stderr, once.
    [line] = [line for line in run.stderr.splitlines() if str(hooks) in line]
    assert line.startswith("osprey: warning: the hooks in ") and HOOKS_COMMAND in line


@pytest.mark.e2e
def test_a_headless_run_on_a_terminal_prints_the_warning_on_stderr(workspace: Path, osprey_env: dict[str, str],
                                                                    model_server: ModelServer) -> None:
    (workspace / ".git").mkdir()
    hooks = put(workspace / ".osprey" / "hooks.toml", BLOCK_RM)
    model_server.add(Reply.text("Nothing to do."))
    status, shown, stderr = run_on_pty(osprey_env, [str(Path(sys.executable).with_name("osprey")), "agent", "-C", str(workspace),
                                                    "--provider", "openai", "--base-url", model_server.base_url, "Say hello."])
    assert status == 0, stderr
    [line] = [line for line in stderr.splitlines() if str(hooks) in line]
    assert f"osprey: the hooks in {hooks} do not run (it is not trusted)" in line and HOOKS_COMMAND in line


@pytest.fixture
def rig(tmp_path: Path) -> TuiRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".git").mkdir(parents=True)
    home.mkdir()
    return TuiRig(workspace, home, [])


async def test_the_tui_shows_the_notice_row_and_extensions_lists_the_inactive_hooks(rig: TuiRig) -> None:
    hooks = put(rig.workspace / ".osprey" / "hooks.toml", BLOCK_RM)
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.pause()
        shown = notices(app)
        assert f"the hooks in {hooks} do not run" in shown and HOOKS_COMMAND in shown
        assert any(isinstance(event, SessionStart) for event in rig.events)
        await type_prompt(pilot, app, "/extensions")
        await app.workers.wait_for_complete()
        await pilot.pause()
        listed = notices(app)
        assert f"hooks not running: {hooks} (inactive, untrusted)" in listed
        assert "to trust it once reviewed: osprey extensions trust hooks" in listed


async def test_the_tui_announces_a_malformed_hooks_file_once(rig: TuiRig) -> None:
    hooks = put(rig.workspace / ".osprey" / "hooks.toml", '[[hooks.PreToolUse]]\nmatcher = "("\n')
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.pause()
        rows = [str(row.render()) for row in app.query(NoticeRow)]
        [row] = [row for row in rows if str(hooks) in row]
        assert "do not run" in row and "fix it, then run " + HOOKS_COMMAND in row
