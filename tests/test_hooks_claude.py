"""The claude dialect of lifecycle hooks: scripts written for Claude Code (Python, sh with jq,
node) run unchanged through the real session core, and `osprey hooks import-claude`."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import executable
from session_harness import Harness, calls, text

from osprey.cli import main
from osprey.events import Notice, ToolResultEvent, UserMessageEvent
from osprey.extensions.hooks import HookGroup, HooksInterceptor, claude_tool_input, osprey_tool_input, parse_hooks

PY = sys.executable


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, {"a.txt": "alpha\nbeta\n"})


def claude_hooks(harness: Harness, toml: str, **kw: Any) -> HooksInterceptor:
    parsed = parse_hooks(textwrap.dedent(toml).encode(), source="hooks.toml")
    return HooksInterceptor(
        parsed, cwd=str(harness.workspace), session_id="sess-9", env={"PATH": os.environ["PATH"]}, emit=harness.events.append,
        messages=lambda: harness.session.messages if harness.session else [], transcript_dir=harness.home / "transcripts",
        permission_mode="default", project_dir=str(harness.workspace), **kw,
    )


# A Claude Code-style hook in Python that records its event and environment.
RECORD = f"""\
#!{PY}
import json, os, sys
event = json.load(sys.stdin)
event["env_project_dir"] = os.environ.get("CLAUDE_PROJECT_DIR")
event["transcript"] = open(event["transcript_path"]).read().splitlines() if event.get("transcript_path") else None
with open(os.path.join(os.environ["CLAUDE_PROJECT_DIR"], "seen.jsonl"), "a") as f:
    f.write(json.dumps(event) + "\\n")
"""


def seen(harness: Harness) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (harness.workspace / "seen.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------ matchers and names


@pytest.mark.parametrize(("matcher", "names", "expected"), [
    ("Edit|Write", ["Edit", "Write", "MultiEdit", "Read"], [True, True, False, False]),
    ("Bash", ["Bash", "BashOutput", "bash"], [True, False, False]),
    ("Notebook.*", ["NotebookEdit", "Notebook", "ANotebook"], [True, True, True]),  # a regex, unanchored
    ("^Bash$", ["Bash", "BashOutput"], [True, False]),
    ("mcp__memory__.*", ["mcp__memory__create", "mcp__github__x"], [True, False]),
    ("*", ["Bash", "anything"], [True, True]),
    ("", ["Bash"], [True]),
    (None, ["Bash"], [True]),
])
def test_claude_matcher_rules(matcher: str | None, names: list[str], expected: list[bool]) -> None:
    group = HookGroup.model_validate({"matcher": matcher, "dialect": "claude", "hooks": [{"command": "x"}]})
    assert [group.matches(n) for n in names] == expected


def test_inputs_map_both_ways() -> None:
    cwd = "/work/project"
    assert claude_tool_input("write_file", {"path": "src/a.py", "content": "x"}, cwd) == {"file_path": "/work/project/src/a.py", "content": "x"}
    assert claude_tool_input("edit_file", {"path": "/abs/b.py", "old_string": "a", "new_string": "b"}, cwd) == \
        {"file_path": "/abs/b.py", "old_string": "a", "new_string": "b"}
    assert claude_tool_input("grep", {"pattern": "x", "path": "", "ignore_case": True, "max_matches": 5}, cwd) == \
        {"pattern": "x", "-i": True, "head_limit": 5}
    assert claude_tool_input("list_directory", {}, cwd) == {"path": "/work/project"}
    assert claude_tool_input("bash", {"command": "ls", "timeout_ms": 5000}, cwd) == {"command": "ls", "timeout": 5000}
    assert claude_tool_input("custom", {"path": "x"}, cwd) == {"path": "x"}
    assert osprey_tool_input("write_file", {"file_path": "/w/a.py", "content": "y"}) == {"path": "/w/a.py", "content": "y"}
    assert osprey_tool_input("grep", {"pattern": "x", "-i": False, "head_limit": 3}) == {"pattern": "x", "ignore_case": False, "max_matches": 3}


# ------------------------------------------------------------------ events


async def test_a_claude_hook_sees_claude_names_inputs_fields_and_a_transcript(harness: Harness) -> None:
    executable(harness.workspace, "record.py", RECORD)
    interceptor = claude_hooks(harness, """
        [[hooks.PreToolUse]]
        matcher = "Write|Edit"
        dialect = "claude"
        [[hooks.PreToolUse.hooks]]
        command = "$CLAUDE_PROJECT_DIR/record.py"
        [[hooks.PostToolUse]]
        matcher = "Write"
        dialect = "claude"
        [[hooks.PostToolUse.hooks]]
        command = "./record.py"
        [[hooks.Stop]]
        dialect = "claude"
        [[hooks.Stop.hooks]]
        command = "./record.py"
    """)
    turns = [calls(("read_file", {"path": "a.txt"})), calls(("write_file", {"path": "sub/b.txt", "content": "new"})),
             calls(("edit_file", {"path": "a.txt", "old_string": "beta", "new_string": "gamma"})), text("done")]
    end, _ = await harness.run(turns, prompt="write b", interceptors=(interceptor,))
    assert end.outcome == "Completed"
    pre_write, post_write, pre_edit, stop = seen(harness)
    ws = str(harness.workspace)
    transcript = str(harness.home / "transcripts" / "sess-9.jsonl")
    write_id = next(r.id for r in harness.of(ToolResultEvent) if r.name == "write_file")
    common = {"session_id": "sess-9", "cwd": ws, "transcript_path": transcript, "permission_mode": "default", "env_project_dir": ws}
    assert pre_write.items() >= {**common, "hook_event_name": "PreToolUse", "tool_name": "Write", "tool_use_id": write_id,
                                 "tool_input": {"file_path": f"{ws}/sub/b.txt", "content": "new"}}.items()
    assert post_write["hook_event_name"] == "PostToolUse" and post_write["tool_name"] == "Write"
    assert post_write["tool_response"]["success"] is True and post_write["tool_response"]["filePath"] == f"{ws}/sub/b.txt"
    assert pre_edit["tool_name"] == "Edit"
    assert pre_edit["tool_input"] == {"file_path": f"{ws}/a.txt", "old_string": "beta", "new_string": "gamma"}
    assert stop["hook_event_name"] == "Stop" and stop["stop_hook_active"] is False and stop["stop_count"] == 0
    # The transcript is Claude Code-style JSONL of the conversation so far, rewritten for each hook.
    lines = [json.loads(line) for line in stop["transcript"]]
    assert lines[0]["type"] == "user" and lines[0]["message"]["content"] == "write b"
    uses = [c for line in lines if line["type"] == "assistant" for c in line["message"]["content"] if c["type"] == "tool_use"]
    assert [u["name"] for u in uses] == ["Read", "Write", "Edit"]
    assert uses[1]["input"] == {"file_path": f"{ws}/sub/b.txt", "content": "new"}
    results = [c for line in lines if line["type"] == "user" and isinstance(line["message"]["content"], list) for c in line["message"]["content"]]
    assert [r["tool_use_id"] for r in results] == [u["id"] for u in uses]
    assert lines[-1]["type"] == "assistant" and lines[-1]["message"]["content"] == [{"type": "text", "text": "done"}]
    assert len(pre_write["transcript"]) < len(stop["transcript"])
    assert oct((harness.home / "transcripts" / "sess-9.jsonl").stat().st_mode & 0o777) == "0o600"


async def test_jq_hook_denies_a_dangerous_bash_command(harness: Harness) -> None:
    # The shape of the guard scripts in Claude Code's documentation.
    executable(harness.workspace, "guard.sh", """
        #!/bin/sh
        cmd=$(jq -r '.tool_input.command')
        case "$cmd" in
          *"rm -rf"*)
            jq -n --arg r "refusing: $cmd" '{hookSpecificOutput: {hookEventName: "PreToolUse", permissionDecision: "deny", permissionDecisionReason: $r}}'
            ;;
        esac
        exit 0
    """)
    interceptor = claude_hooks(harness, """
        [[hooks.PreToolUse]]
        matcher = "Bash"
        dialect = "claude"
        [[hooks.PreToolUse.hooks]]
        command = "./guard.sh"
    """)
    await harness.run([calls(("bash", {"command": "rm -rf build"}), ("bash", {"command": "echo fine"})), text("done")], interceptors=(interceptor,))
    denied, fine = harness.of(ToolResultEvent)
    assert not denied.ok and denied.output == "Error (denied): refusing: rm -rf build"
    assert fine.ok and "fine" in fine.output


async def test_jq_hook_blocks_with_exit_2(harness: Harness) -> None:
    executable(harness.workspace, "protect.sh", """
        #!/bin/sh
        file=$(jq -r '.tool_input.file_path // empty')
        case "$file" in
          *.lock) echo "$file is generated; do not edit it" >&2; exit 2 ;;
        esac
    """)
    interceptor = claude_hooks(harness, '[[hooks.PreToolUse]]\nmatcher = "Edit|Write"\ndialect = "claude"\n'
                                        '[[hooks.PreToolUse.hooks]]\ncommand = "./protect.sh"\n')
    await harness.run([calls(("write_file", {"path": "poetry.lock", "content": "x"})), text("done")], interceptors=(interceptor,))
    [result] = harness.of(ToolResultEvent)
    assert result.output == f"Error (denied): {harness.workspace}/poetry.lock is generated; do not edit it"
    assert not (harness.workspace / "poetry.lock").exists()


async def test_node_hook_updated_input_is_mapped_back(harness: Harness) -> None:
    # Redirect writes into out/: Claude's file_path comes back as Osprey's path.
    executable(harness.workspace, "redirect.js", """
        #!/usr/bin/env node
        const chunks = [];
        process.stdin.on("data", (c) => chunks.push(c));
        process.stdin.on("end", () => {
          const event = JSON.parse(Buffer.concat(chunks).toString());
          const input = event.tool_input;
          const target = event.cwd + "/out/" + input.file_path.split("/").pop();
          console.log(JSON.stringify({
            hookSpecificOutput: {
              hookEventName: "PreToolUse",
              permissionDecision: "allow",
              permissionDecisionReason: "redirected into out/",
              updatedInput: { ...input, file_path: target },
              additionalContext: "writes go to out/",
            },
          }));
        });
    """)
    interceptor = claude_hooks(harness, '[[hooks.PreToolUse]]\nmatcher = "Write"\ndialect = "claude"\n'
                                        '[[hooks.PreToolUse.hooks]]\ncommand = "node redirect.js"\n')
    await harness.run([calls(("write_file", {"path": "c.txt", "content": "see"})), text("done")], interceptors=(interceptor,))
    assert (harness.workspace / "out" / "c.txt").read_text() == "see"
    assert not (harness.workspace / "c.txt").exists()
    [result] = harness.of(ToolResultEvent)
    assert result.ok and result.output.endswith("[context] writes go to out/")


@pytest.mark.parametrize(("decision", "ok"), [("approve", True), ("block", False)])
async def test_the_older_top_level_decision(harness: Harness, decision: str, ok: bool) -> None:
    executable(harness.workspace, "old.py", f"""
        #!{PY}
        import json, sys
        json.load(sys.stdin)
        print(json.dumps({{"decision": "{decision}", "reason": "old style {decision}"}}))
    """)
    interceptor = claude_hooks(harness, '[[hooks.PreToolUse]]\nmatcher = "Read"\ndialect = "claude"\n[[hooks.PreToolUse.hooks]]\ncommand = "./old.py"\n')
    await harness.run([calls(("read_file", {"path": "a.txt"})), text("done")], interceptors=(interceptor,))
    [result] = harness.of(ToolResultEvent)
    assert result.ok == ok
    if not ok:
        assert result.output == "Error (denied): old style block"


async def test_a_claude_matcher_sees_claude_names_only(harness: Harness) -> None:
    executable(harness.workspace, "no.sh", "#!/bin/sh\necho no >&2\nexit 2\n")
    interceptor = claude_hooks(harness, '[[hooks.PreToolUse]]\nmatcher = "read_file"\ndialect = "claude"\n[[hooks.PreToolUse.hooks]]\ncommand = "./no.sh"\n')
    await harness.run([calls(("read_file", {"path": "a.txt"})), text("done")], interceptors=(interceptor,))
    assert harness.of(ToolResultEvent)[0].ok


async def test_plain_stdout_of_a_prompt_hook_is_context(harness: Harness) -> None:
    executable(harness.workspace, "ctx.sh", "#!/bin/sh\necho \"Current branch: release-2\"\n")
    interceptor = claude_hooks(harness, '[[hooks.UserPromptSubmit]]\ndialect = "claude"\n[[hooks.UserPromptSubmit.hooks]]\ncommand = "./ctx.sh"\n')
    end, provider = await harness.run([text("ok")], prompt="which branch?", interceptors=(interceptor,))
    assert provider.requests[0].messages[0].content == "which branch?\n\n[context] Current branch: release-2"  # type: ignore[union-attr]


async def test_a_stop_hook_that_checks_stop_hook_active_continues_once(harness: Harness) -> None:
    executable(harness.workspace, "stop.sh", """
        #!/bin/sh
        if [ "$(jq -r .stop_hook_active)" = "false" ]; then
          echo '{"decision": "block", "reason": "run the tests before you stop"}'
        fi
    """)
    interceptor = claude_hooks(harness, '[[hooks.Stop]]\ndialect = "claude"\n[[hooks.Stop.hooks]]\ncommand = "./stop.sh"\n')
    end, _ = await harness.run([text("done"), text("tests pass")], interceptors=(interceptor,))
    assert end.final_text == "tests pass"
    assert [e.text for e in harness.of(UserMessageEvent) if e.origin == "loop"] == ["run the tests before you stop"]
    assert any("a Stop hook (continuation 1 of at most 5) asked for another turn" in e.message for e in harness.of(Notice))


async def test_post_tool_use_block_in_claude_dialect(harness: Harness) -> None:
    executable(harness.workspace, "post.sh", """
        #!/bin/sh
        if [ "$(jq -r .tool_response.success)" = "true" ]; then
          jq -n '{decision: "block", reason: "lint failed on the written file"}'
        fi
    """)
    interceptor = claude_hooks(harness, '[[hooks.PostToolUse]]\nmatcher = "Write"\ndialect = "claude"\n[[hooks.PostToolUse.hooks]]\ncommand = "./post.sh"\n')
    await harness.run([calls(("write_file", {"path": "d.txt", "content": "x"})), text("done")], interceptors=(interceptor,))
    [result] = harness.of(ToolResultEvent)
    assert not result.ok and result.output == "Error (hook): lint failed on the written file"


# ------------------------------------------------------------------ import-claude


SETTINGS = {
    "permissions": {"allow": ["Bash(git status)"]},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/guard.sh", "timeout": 30}]},
            {"matcher": "Edit|Write", "hooks": [
                {"type": "command", "command": "jq -r .tool_input.file_path >> edits.log"},
                {"type": "prompt", "prompt": "Is this edit safe?"},
            ]},
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "./verify.sh", "timeout": 2.5}]}],
        "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "prompt", "prompt": "x"}]}],
    },
}


def test_import_claude_prints_hooks_toml(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps(SETTINGS))
    run = CliRunner().invoke(main, ["hooks", "import-claude", "-C", str(tmp_path)])
    assert run.exit_code == 0, run.output
    parsed = parse_hooks(run.stdout.encode(), source="out")
    bash, edits = parsed.groups("PreToolUse")
    assert (bash.matcher, bash.dialect, bash.hooks[0].command, bash.hooks[0].timeout_secs) == \
        ("Bash", "claude", "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/guard.sh", 30)
    assert edits.matcher == "Edit|Write" and [h.command for h in edits.hooks] == ["jq -r .tool_input.file_path >> edits.log"]
    assert edits.hooks[0].timeout_secs == 600
    [stop] = parsed.groups("Stop")
    assert stop.matcher is None and stop.hooks[0].timeout_secs == 3
    assert parsed.groups("UserPromptSubmit") == ()
    assert "Notification" in run.stderr and "'prompt'" in run.stderr and "became 3 s" in run.stderr
    assert tomllib.loads(run.stdout)["hooks"]["PreToolUse"][0]["dialect"] == "claude"


def test_import_claude_writes_and_refuses_to_overwrite(tmp_path: Path) -> None:
    settings = tmp_path / "elsewhere.json"
    settings.write_text(json.dumps(SETTINGS))
    runner = CliRunner()
    first = runner.invoke(main, ["hooks", "import-claude", "elsewhere.json", "-C", str(tmp_path), "--write"])
    assert first.exit_code == 0, first.output
    target = tmp_path / ".osprey" / "hooks.toml"
    written = target.read_text()
    parse_hooks(written.encode(), source="hooks.toml")
    target.write_text("# mine\n")
    again = runner.invoke(main, ["hooks", "import-claude", "elsewhere.json", "-C", str(tmp_path), "--write"])
    assert again.exit_code == 1 and "already exists" in again.stderr and target.read_text() == "# mine\n"
    forced = runner.invoke(main, ["hooks", "import-claude", "elsewhere.json", "-C", str(tmp_path), "--write", "--force"])
    assert forced.exit_code == 0 and target.read_text() == written


@pytest.mark.parametrize(("content", "message"), [
    (None, "does not exist"),
    ("{not json", "is not JSON"),
    ("[]", "does not hold a JSON object"),
    ('{"permissions": {}}', "has no \"hooks\" block"),
    ('{"hooks": {"Notification": []}}', "holds no hooks Osprey can run"),
    ('{"hooks": {"PreToolUse": [{"matcher": "(", "hooks": [{"type": "command", "command": "x"}]}]}}', "not a valid regular expression"),
])
def test_import_claude_failures(tmp_path: Path, content: str | None, message: str) -> None:
    if content is not None:
        (tmp_path / ".claude").mkdir()
        (tmp_path / ".claude" / "settings.json").write_text(content)
    run = CliRunner().invoke(main, ["hooks", "import-claude", "-C", str(tmp_path)])
    assert run.exit_code == 1 and message in run.stderr


def test_import_claude_refuses_a_planted_fifo_without_blocking(tmp_path: Path) -> None:
    import os

    (tmp_path / ".claude").mkdir()
    os.mkfifo(tmp_path / ".claude" / "settings.json")
    run = CliRunner().invoke(main, ["hooks", "import-claude", "-C", str(tmp_path)])
    assert run.exit_code == 1 and "is not a regular file" in run.stderr


async def test_imported_hooks_run_the_original_scripts(harness: Harness) -> None:
    hooks_dir = harness.workspace / ".claude" / "hooks"
    hooks_dir.mkdir(parents=True)
    executable(hooks_dir, "guard.sh", """
        #!/bin/sh
        jq -e '.tool_input.command | test("curl")' > /dev/null && { echo "no network from the agent" >&2; exit 2; }
        exit 0
    """)
    (harness.workspace / ".claude" / "settings.json").write_text(json.dumps({"hooks": {"PreToolUse": [SETTINGS["hooks"]["PreToolUse"][0]]}}))  # type: ignore[index]
    run = CliRunner().invoke(main, ["hooks", "import-claude", "-C", str(harness.workspace)])
    assert run.exit_code == 0, run.output
    parsed = parse_hooks(run.stdout.encode(), source="imported")
    interceptor = HooksInterceptor(parsed, cwd=str(harness.workspace), session_id="s", env={"PATH": os.environ["PATH"]},
                                   emit=harness.events.append, project_dir=str(harness.workspace))
    await harness.run([calls(("bash", {"command": "curl example.com"})), text("done")], interceptors=(interceptor,))
    [result] = harness.of(ToolResultEvent)
    assert result.output == "Error (denied): no network from the agent"
