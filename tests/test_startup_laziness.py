"""Start-up does no work a run does not need: `osprey --help` loads no library beyond click, and a
real one-turn session builds the validators of only the models it uses (the settings it loads,
the events it emits, the messages it sends) and compiles no pattern of the extension pins, which
only hooks and custom tools use. Each runs the real CLI in a subprocess and reports its state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from osprey.testing.model_server import ModelServer, Reply

# Runs the real CLI entry point, then writes to stderr, as one JSON line each: the loaded modules,
# whether each model of Osprey's loaded modules has built its validator, and which of the
# extension pins' patterns are compiled.
RUNNER = """
import json, sys
from osprey.cli import main
try:
    main(sys.argv[1:], prog_name="osprey")
except SystemExit as exc:
    status = exc.code
modules = {name: module for name, module in list(sys.modules.items()) if module is not None}
sys.stderr.write("MODULES " + json.dumps(sorted(modules)) + "\\n")
built = {}
if "pydantic.main" in modules:
    from pydantic import BaseModel
    for name, module in modules.items():
        if name.startswith("osprey."):
            for attr, value in list(vars(module).items()):
                if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == name:
                    built[f"{name}.{attr}"] = bool(value.__pydantic_complete__)
sys.stderr.write("MODELS " + json.dumps(built) + "\\n")
compiled = {}
pins = modules.get("osprey.extensions.pins")
if pins is not None:
    patterns = [pins._INTERPRETER, pins._FIND_EXEC, pins._CODE_VARIABLES, *(p for pair in pins._INLINE for p in pair)]
    compiled = {p.pattern: getattr(p, "_compiled", p) is not None for p in patterns}
sys.stderr.write("PATTERNS " + json.dumps(compiled) + "\\n")
sys.exit(status)
"""


def report(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    proc = subprocess.run([sys.executable, "-c", RUNNER, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
    found: dict[str, object] = {}
    for line in proc.stderr.splitlines():
        key, _, rest = line.partition(" ")
        if key in ("MODULES", "MODELS", "PATTERNS"):
            found[key] = json.loads(rest)
    assert set(found) == {"MODULES", "MODELS", "PATTERNS"}, proc.stderr
    return proc, found


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return dict(os.environ, OSPREY_HOME=str(home), OPENAI_API_KEY="test-key")


@pytest.fixture
def one_turn(env: dict[str, str], tmp_path: Path) -> dict[str, object]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with ModelServer([Reply.text("done")]) as server:
        proc, found = report(env, "agent", "-C", str(workspace), "--provider", "openai", "--model", "test-model",
                             "--base-url", server.base_url, "Say done.")
        server.assert_clean()
    assert proc.returncode == 0, proc.stderr
    end = json.loads(proc.stdout.splitlines()[-1])
    assert end["type"] == "session_end" and end["final_text"] == "done"
    return found


def loaded_of(modules: object, names: tuple[str, ...]) -> list[str]:
    assert isinstance(modules, list)
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_help_loads_click_and_the_command_table_only(env: dict[str, str]) -> None:
    proc, found = report(env, "--help")
    assert proc.returncode == 0 and "agent" in proc.stdout and "Commands" in proc.stdout
    heavy = ("pydantic", "pydantic_core", "httpx", "asyncio", "sqlite3", "yaml", "grpc", "ctypes", "osprey.config", "osprey.session",
             "osprey.events", "osprey.headless", "osprey.process_privacy", "osprey.cli.agent", "osprey.cli.sessions",
             "osprey.cli.approvals")
    assert loaded_of(found["MODULES"], heavy) == []
    assert found["MODELS"] == {}


def test_a_one_turn_session_builds_the_models_it_uses_and_no_other(one_turn: dict[str, object]) -> None:
    built = one_turn["MODELS"]
    assert isinstance(built, dict)
    # What the run used has its validator (the run validated or dumped it)...
    used = ("osprey.config.schema.Settings", "osprey.config.schema.TopLevelConfig", "osprey.events.SessionStart",
            "osprey.events.AssistantText", "osprey.events.TaskEnd", "osprey.events.SessionEnd", "osprey.messages.AssistantMessage",
            "osprey.messages.ModelTurn", "osprey.messages.ToolSpec", "osprey.session.core.SessionOptions")
    assert {name: built.get(name) for name in used} == dict.fromkeys(used, True)
    # ...and what it never made has none: events it did not emit, a tool call and its result,
    # approvals nobody was asked, hooks and saved rules it has no file of, a search service it has not,
    # a session it did not resume, projects it trusts none of.
    unused = ("osprey.events.Compaction", "osprey.events.Advisory", "osprey.events.PersonaSwitch", "osprey.events.ModelSwitch",
              "osprey.events.Question", "osprey.events.TodoList", "osprey.events.ToolCallEvent", "osprey.events.ToolResultEvent",
              "osprey.messages.ToolResultMessage", "osprey.policy.approvals.ApprovalRequest", "osprey.policy.approvals.ApprovalAnswer",
              "osprey.policy.store.SavedRule", "osprey.extensions.hooks.HookVerdict", "osprey.extensions.hooks.HookEntry",
              "osprey.config.schema.ResolvedWebSearch", "osprey.sessions.resume.ResumePoint", "osprey.trust.ProjectTrust",
              # flags and variables are checked key by key (`checked_config`): the whole file schema is not built
              "osprey.config.schema.FileConfig")
    # (The hooks machinery is not even loaded without a hooks file.)
    assert {name: built.get(name, False) for name in unused} == dict.fromkeys(unused, False)


def test_a_one_turn_session_scans_no_installed_package_for_pydantic_plugins(one_turn: dict[str, object]) -> None:
    modules = one_turn["MODULES"]
    assert isinstance(modules, list) and "osprey.session.core" in modules and "pydantic.plugin._loader" in modules
    # pydantic asked for its plugins (it does at the first validator it builds), and was given
    # none without importing importlib.metadata to scan every package's entry points.
    assert loaded_of(modules, ("importlib.metadata",)) == []


def test_a_one_turn_session_compiles_no_pattern_of_the_extension_pins(one_turn: dict[str, object]) -> None:
    # Without a tool manifest or a hooks file the pins module is not even loaded, so none of its
    # patterns is compiled (that they compile at their first use is the next test's).
    assert one_turn["PATTERNS"] == {}
    modules = one_turn["MODULES"]
    assert isinstance(modules, list) and "osprey.extensions.discovery" in modules  # extension discovery ran
    assert "osprey.extensions.pins" not in modules


def test_a_pin_pattern_compiles_at_its_first_use_and_matches_as_before() -> None:
    from osprey.extensions import pins
    from osprey.lazy import Pattern

    pattern = Pattern(r"(?:python|pypy)[0-9.]*[a-z]?")
    assert pattern.compiled is pattern.compiled  # compiled once
    assert pattern.fullmatch("python3.12") and not pattern.fullmatch("pythonic3") and pattern.search("run python3 -c")
    assert pattern.sub("X", "a python b") == "a X b" and [m.group() for m in pattern.finditer("pypy python3")] == ["pypy", "python3"]
    assert pins._INTERPRETER.fullmatch("bash") and not pins._INTERPRETER.fullmatch("cat")
