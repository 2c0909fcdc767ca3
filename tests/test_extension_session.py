"""Extensions in a running session: the composed system prompt, description overrides, a toolset
narrowing the catalogue, and a reload at the next turn boundary; `osprey agent --toolset` and
`osprey extensions` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from session_harness import FAST_RETRY, FakeProvider, Harness, calls, text

from osprey.config import load_settings
from osprey.errors import ConfigError
from osprey.events import Notice
from osprey.session.core import Session
from osprey.testing.model_server import ModelServer, Reply


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, git=True)


def session_for(harness: Harness, script: list[Any], **options: Any) -> tuple[Session, FakeProvider]:
    provider = FakeProvider(script)
    base = harness.options("never", None, FAST_RETRY, ())
    return Session(base.model_copy(update=options), emit=harness.events.append, provider=provider), provider


def put(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


async def test_the_model_gets_the_composed_prompt_and_the_overridden_descriptions(harness: Harness) -> None:
    put(harness.workspace / ".osprey" / "APPEND_SYSTEM.md", "Always run ./check before answering.")
    put(harness.workspace / "AGENTS.md", "This repository uses tabs.")
    put(harness.workspace / ".osprey" / "tool-descriptions.toml", 'grep = "Search the code (project wording)."\n')
    end, provider = await harness.run([text("ok")])
    request = provider.requests[0]
    assert request.system.startswith("You are Osprey")
    assert request.system.index("Always run ./check") < request.system.index("This repository uses tabs.")
    [grep] = [spec for spec in request.tools if spec.name == "grep"]
    assert grep.description == "Search the code (project wording)."
    assert end.outcome == "Completed"


async def test_a_toolset_narrows_the_catalogue(harness: Harness) -> None:
    put(harness.workspace / ".osprey" / "toolsets.toml", '[toolsets.look]\ntools = ["read_file", "grep", "nonexistent"]\n')
    warnings: list[str] = []
    session, provider = session_for(harness, [calls(("bash", {"command": "echo hi"})), text("ok")], toolset="look")
    session.warn = warnings.append
    async with session:
        assert sorted(session.tool_names()) == ["grep", "read_file"]
        end = await session.submit("go")
    assert end.outcome == "Completed"
    assert [spec.name for spec in provider.requests[0].tools] == ["read_file", "grep"]
    assert any("nonexistent" in w for w in warnings)
    # bash is not in the catalogue: the call is refused as an unknown tool.
    assert "there is no tool named 'bash'" in str(provider.requests[1].messages[-1])


async def test_an_unknown_toolset_stops_the_session_start(harness: Harness) -> None:
    put(harness.workspace / ".osprey" / "toolsets.toml", '[toolsets.look]\ntools = ["read_file"]\n')
    session, _ = session_for(harness, [], toolset="nope")
    with pytest.raises(ConfigError, match="unknown toolset 'nope'; the toolsets defined are: look"):
        await session.start()


async def test_a_reload_takes_effect_at_the_next_turn_boundary(harness: Harness) -> None:
    session, provider = session_for(harness, [calls(("read_file", {"path": "x"})), text("first"), text("second")])
    async with session:
        await session.submit("one")
        put(harness.workspace / ".osprey" / "APPEND_SYSTEM.md", "A rule added later.")
        assert "A rule added later." not in session.system_prompt()
        session.request_reload()
        await session.submit("two")
    assert "A rule added later." not in provider.requests[1].system
    assert "A rule added later." in provider.requests[2].system
    assert any(isinstance(e, Notice) and e.message.startswith("extensions reloaded") for e in harness.events)


async def test_a_session_without_extensions_reloads_its_skills_only(harness: Harness) -> None:
    put(harness.workspace / ".osprey" / "SYSTEM.md", "REPLACED")
    session, provider = session_for(harness, [text("ok")], extensions=False)
    async with session:
        put(harness.workspace / ".agents" / "skills" / "late" / "SKILL.md", "---\nname: late\ndescription: Came after the start.\n---\n\nBody.\n")
        session.request_reload()  # the skills are found again at the next turn; the extensions stay unused
        await session.submit("go")
    system = provider.requests[0].system
    assert system.startswith("You are Osprey") and "REPLACED" not in system
    assert "- late: Came after the start." in system


def _osprey_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}
    return {**env, "OSPREY_HOME": str(home), "OPENAI_API_KEY": "test-key"}


def test_osprey_agent_toolset_flag(tmp_path: Path) -> None:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".git").mkdir(parents=True)
    home.mkdir()
    put(workspace / ".osprey" / "toolsets.toml", '[toolsets.look]\ntools = ["read_file"]\n')
    with ModelServer([Reply.text("done")]) as server:
        base = [sys.executable, "-m", "osprey", "agent", "-C", str(workspace), "--provider", "openai", "--model", "m",
                "--base-url", server.base_url]
        ok = subprocess.run([*base, "--toolset", "look", "Say done."], env=_osprey_env(home), capture_output=True, text=True, timeout=120)
        bad = subprocess.run([*base, "--toolset", "nope", "Say done."], env=_osprey_env(home), capture_output=True, text=True, timeout=120)
        [request] = server.requests
    assert ok.returncode == 0, ok.stderr
    start = json.loads(ok.stdout.splitlines()[0])
    assert start["tools"] == ["read_file"]
    assert [t["function"]["name"] for t in request.body["tools"]] == ["read_file"]
    assert bad.returncode == 1
    assert "unknown toolset 'nope'; the toolsets defined are: look" in bad.stderr


def test_osprey_extensions_reports_every_artifact(tmp_path: Path) -> None:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".git").mkdir(parents=True)
    home.mkdir()
    put(workspace / ".osprey" / "SYSTEM.md", "project base")
    put(home / "SYSTEM.md", "user base")
    put(workspace / ".osprey" / "toolsets.toml", "not toml [")
    env = _osprey_env(home)
    table = subprocess.run([sys.executable, "-m", "osprey", "extensions", "-C", str(workspace)], env=env, capture_output=True, text=True, timeout=60)
    as_json = subprocess.run([sys.executable, "-m", "osprey", "extensions", "-C", str(workspace), "--json"], env=env, capture_output=True,
                             text=True, timeout=60)
    assert table.returncode == 0 and as_json.returncode == 0, table.stderr + as_json.stderr
    report = json.loads(as_json.stdout)
    assert report["schema_version"] == 1 and report["workspace_root"] == str(workspace.resolve())
    kinds = {(a["kind"], a["layer"], a["status"]) for a in report["artifacts"]}
    assert ("system_prompt", "project", "active") in kinds and ("system_prompt", "user", "shadowed") in kinds
    [toolsets] = [a for a in report["artifacts"] if a["kind"] == "toolsets"]
    assert toolsets["status"] == "skipped" and "TOML" in toolsets["reason"]
    assert "SKIPPED" in table.stdout and "project base" not in table.stdout
    assert str(home / "SYSTEM.md") in table.stdout


def test_settings_read_the_prompt_overrides_from_the_real_environment_only(tmp_path: Path) -> None:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    (workspace / ".env").write_text("OSPREY_SYSTEM_PROMPT_FILE=/etc/passwd\n")
    settings = load_settings(workspace, {}, {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "x"})
    assert settings.system_prompt_file is None
    settings = load_settings(workspace, {}, {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "x", "OSPREY_SYSTEM_PROMPT_FILE": "p.md",
                                             "OSPREY_TOOL_DESCRIPTIONS_FILE": "/abs/d.toml"})
    assert settings.system_prompt_file == workspace.resolve() / "p.md"
    assert settings.tool_descriptions_file == Path("/abs/d.toml")


async def test_the_agent_adds_to_its_prompt_and_the_next_turn_has_it(harness: Harness) -> None:
    create = calls(("extension_manage", {"operation": "create", "kind": "append_system", "content": "Prefer small commits."}))
    end, provider = await harness.run([create, text("done")])
    assert end.outcome == "Completed"
    assert "Prefer small commits." not in provider.requests[0].system
    assert "Prefer small commits." in provider.requests[1].system
    assert (harness.home / "APPEND_SYSTEM.md").read_text() == "Prefer small commits."
    assert (harness.home / "APPEND_SYSTEM.md.provenance.json").exists()
