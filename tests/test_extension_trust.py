"""Executable extension artifacts (custom tools, hooks): resolution by layer and trust, pins written
by `osprey extensions trust`, what a pin covers, failing closed, provenance of the user's files,
and the model calling a trusted project tool in a real `osprey agent` run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from osprey.config import load_settings
from osprey.extensions.discovery import discover
from osprey.testing.model_server import ModelServer, Reply
from osprey.trust import USER_SCOPE, pin_artifact

BUILTIN = {"read_file", "write_file", "edit_file", "bash", "find_files", "grep", "list_directory", "tree"}
SCRIPT = "#!/bin/sh\nread line\necho \"counted: $line\"\n"


def manifest(name: str, command: str = "./count.sh") -> str:
    return f'name = "{name}"\ndescription = "Counts."\ncommand = ["{command}"]\n[parameters.text]\ntype = "string"\nrequired = true\n'


class Project:
    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "repo"
        self.cwd = self.root / "pkg"
        self.cwd.mkdir(parents=True)
        (self.root / ".git").mkdir()
        self.home = tmp / "home"
        self.home.mkdir()
        self.outside = tmp / "outside"
        self.outside.mkdir()

    def tool(self, layer: Path, name: str, script: str = SCRIPT, command: str = "./count.sh") -> Path:
        tools = layer / "tools"
        tools.mkdir(parents=True, exist_ok=True)
        program = tools / command.removeprefix("./")
        if command.startswith("./"):
            program.write_text(script)
            program.chmod(0o755)
        (tools / f"{name}.toml").write_text(manifest(name, command))
        return tools / f"{name}.toml"

    def env(self) -> dict[str, str]:
        return {"OSPREY_HOME": str(self.home), "OPENAI_API_KEY": "x", "PATH": os.environ.get("PATH", "")}

    def discover(self) -> Any:
        return discover(load_settings(self.cwd, {}, self.env()), BUILTIN)

    def trust(self, name: str) -> subprocess.CompletedProcess[str]:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}, "OSPREY_HOME": str(self.home)}
        return subprocess.run([sys.executable, "-m", "osprey", "extensions", "-C", str(self.cwd), "trust", name, "--yes"], env=env,
                              capture_output=True, text=True, timeout=60)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def tool_states(found: Any) -> list[tuple[str, str, str, str]]:
    return [(a.name, a.layer, a.trust, a.status) for a in found.artifacts if a.kind == "tool"]


def test_a_project_tool_is_inactive_until_trusted_and_modified_when_its_program_changes(project: Project) -> None:
    project.tool(project.root / ".osprey", "word_count")
    found = project.discover()
    assert tool_states(found) == [("word_count", "project", "untrusted", "inactive")]
    assert found.tools == []
    trusted = project.trust("word_count")
    assert trusted.returncode == 0, trusted.stderr
    assert "runs:   ./count.sh" in trusted.stdout and "digest: sha256:" in trusted.stdout
    found = project.discover()
    assert tool_states(found) == [("word_count", "project", "trusted", "active")]
    assert [t.manifest.name for t in found.tools] == ["word_count"]
    # The local program's bytes are pinned.
    (project.root / ".osprey" / "tools" / "count.sh").write_text(SCRIPT + "curl evil.invalid\n")
    assert tool_states(project.discover()) == [("word_count", "project", "modified", "inactive")]
    (project.root / ".osprey" / "tools" / "count.sh").write_text(SCRIPT)
    assert tool_states(project.discover())[0][3] == "active"
    # So are the manifest's.
    path = project.root / ".osprey" / "tools" / "word_count.toml"
    path.write_text(path.read_text().replace("Counts.", "Counts words."))
    assert tool_states(project.discover()) == [("word_count", "project", "modified", "inactive")]


def test_an_external_program_counts_by_its_path_not_its_bytes(project: Project) -> None:
    external = project.outside / "ext.sh"
    external.write_text(SCRIPT)
    external.chmod(0o755)
    project.tool(project.root / ".osprey", "ext", command=str(external))
    assert project.trust("ext").returncode == 0
    external.write_text(SCRIPT + "# changed outside the workspace\n")
    assert tool_states(project.discover()) == [("ext", "project", "trusted", "active")]
    moved = project.outside / "moved.sh"
    external.rename(moved)
    path = project.root / ".osprey" / "tools" / "ext.toml"
    path.write_text(path.read_text().replace(str(external), str(moved)))
    assert tool_states(project.discover()) == [("ext", "project", "modified", "inactive")]


def test_a_malformed_trust_file_keeps_every_project_executable_inactive(project: Project) -> None:
    project.tool(project.root / ".osprey", "word_count")
    assert project.trust("word_count").returncode == 0
    (project.home / "trust.toml").write_text("this is [ not toml")
    found = project.discover()
    [(name, layer, trust, status)] = tool_states(found)
    assert (trust, status) == ("untrusted", "inactive")
    [item] = [a for a in found.artifacts if a.kind == "tool"]
    assert "trust file is broken" in (item.reason or "")


def test_the_first_valid_and_trusted_tool_of_a_name_wins(project: Project) -> None:
    project.tool(project.root / ".osprey", "word_count")  # farther, trusted below
    assert project.trust("word_count").returncode == 0
    project.tool(project.cwd / ".osprey", "word_count", script=SCRIPT + "# nearer\n")  # nearer, untrusted
    (project.cwd / ".osprey" / "tools" / "broken.toml").write_text('name = "Bad Name"\n')
    found = project.discover()
    states = tool_states(found)
    assert ("word_count", "project", "untrusted", "inactive") in states and ("word_count", "project", "trusted", "active") in states
    [active] = found.tools
    assert active.path == project.root / ".osprey" / "tools" / "word_count.toml"
    [broken] = [a for a in found.artifacts if a.path.endswith("broken.toml")]
    assert broken.status == "skipped" and broken.reason


def test_a_tool_may_not_shadow_a_builtin(project: Project) -> None:
    project.tool(project.home, "bash")
    [item] = [a for a in project.discover().artifacts if a.kind == "tool"]
    assert item.status == "skipped" and "built-in" in (item.reason or "")


def test_user_tools_are_trusted_unless_the_agent_wrote_them(project: Project) -> None:
    path = project.tool(project.home, "mine")
    assert tool_states(project.discover()) == [("mine", "user", "trusted", "active")]
    sidecar = path.with_name(path.name + ".provenance.json")
    sidecar.write_text(json.dumps({"origin": "agent", "operation_id": "op-1", "digest": "sha256:" + "0" * 64, "kind": "tool"}))
    found = project.discover()
    assert tool_states(found) == [("mine", "user", "untrusted", "inactive")]
    [item] = [a for a in found.artifacts if a.kind == "tool"]
    assert item.provenance == "agent"
    pin_artifact(project.home, USER_SCOPE, "tools/mine.toml", item.digest or "")
    assert tool_states(project.discover()) == [("mine", "user", "trusted", "active")]
    sidecar.write_text("{not json")
    assert tool_states(project.discover()) == [("mine", "user", "untrusted", "inactive")]


HOOKS = '[[hooks.PreToolUse]]\nmatcher = "bash"\n[[hooks.PreToolUse.hooks]]\ncommand = "./guard.sh"\n'


def test_the_nearest_hooks_file_wins_and_an_untrusted_one_means_no_hooks(project: Project) -> None:
    for layer in (project.cwd / ".osprey", project.root / ".osprey"):
        layer.mkdir(parents=True, exist_ok=True)
        (layer / "hooks.toml").write_text(HOOKS)
    (project.cwd / "guard.sh").write_text("#!/bin/sh\nexit 0\n")
    found = project.discover()
    hooks = [(a.layer, a.status) for a in found.artifacts if a.kind == "hooks"]
    assert hooks == [("project", "inactive"), ("project", "shadowed")]
    assert found.hooks is None
    assert project.trust(str(project.cwd / ".osprey" / "hooks.toml")).returncode == 0
    found = project.discover()
    assert found.hooks is not None and found.hooks_path == project.cwd / ".osprey" / "hooks.toml"
    # The script a hook command names (relative to the working directory) is pinned too.
    (project.cwd / "guard.sh").write_text("#!/bin/sh\nexit 2\n")
    assert [a.trust for a in project.discover().artifacts if a.kind == "hooks"][0] == "modified"


def test_a_malformed_project_hooks_file_is_skipped_and_the_users_hooks_still_run(project: Project) -> None:
    (project.home / "hooks.toml").write_text(HOOKS)
    (project.root / ".osprey").mkdir()
    bad = project.root / ".osprey" / "hooks.toml"
    bad.write_text('[[hooks.PreToolUse]]\nmatcher = "("\n')
    found = project.discover()
    assert [(a.layer, a.status) for a in found.artifacts if a.kind == "hooks"] == [("project", "skipped"), ("user", "active")]
    assert found.hooks_paths == [project.home.resolve() / "hooks.toml"]
    # It is announced once: by its notice (the session's), not also as a discovery warning.
    assert not [w for w in found.warnings if "hooks.toml" in w]
    [notice] = [found.notice(a) for a in found.inactive()]
    assert notice.count(str(bad)) == 1 and "do not run" in notice, notice


def test_trusting_something_that_is_not_there_says_what_is(project: Project) -> None:
    project.tool(project.root / ".osprey", "word_count")
    missing = project.trust("nothing")
    assert missing.returncode == 1 and "found: word_count" in missing.stderr


def test_the_model_calls_a_trusted_project_tool_and_a_hook_guards_bash(project: Project) -> None:
    layer = project.root / ".osprey"
    project.tool(layer, "word_count")
    (layer / "hooks.toml").write_text('[[hooks.PreToolUse]]\nmatcher = "bash"\n[[hooks.PreToolUse.hooks]]\n'
                                      'command = "echo no shell today >&2; exit 2"\n')
    assert project.trust("word_count").returncode == 0
    assert project.trust("hooks").returncode == 0
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}, "OSPREY_HOME": str(project.home), "OPENAI_API_KEY": "k"}
    with ModelServer([Reply.tool_call("word_count", {"text": "a b c"}), Reply.tool_call("bash", {"command": "echo hi"}),
                      Reply.text("done")]) as server:
        proc = subprocess.run([sys.executable, "-m", "osprey", "agent", "-C", str(project.cwd), "--provider", "openai", "--model", "m",
                               "--base-url", server.base_url, "--yolo", "Count."], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert "word_count" in events[0]["tools"]
    counted, guarded = [e for e in events if e["type"] == "tool_result"]
    assert counted["ok"] and counted["output"].startswith('counted: {"text":"a b c"}')
    assert not guarded["ok"] and "no shell today" in guarded["output"]
