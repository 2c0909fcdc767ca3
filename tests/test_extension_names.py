"""Built-in tool names are reserved: a custom tool manifest or an `extension_manage` tool taking one
is refused, saying why, whether or not that tool is on in the session (web search unconfigured,
memory off, no skills, no persona); and every tool a session can build, with every option on, is
in the one list (`osprey.tools.names`), so a new built-in tool cannot be forgotten there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from session_harness import FAST_RETRY, FakeProvider

from osprey.config import load_settings
from osprey.extensions.discovery import discover
from osprey.extensions.manage import ManageInput, manage
from osprey.personas.resolve import resolve_persona
from osprey.session.core import Session, SessionOptions
from osprey.sessions.journal import Journal, journal_path
from osprey.tools.names import BUILTIN_TOOLS, RESERVED, reserved_reason

# The conditional tools a plain session (no search service, memory off, no skills, no persona,
# no language server, no subagents or workflows) does not offer.
CONDITIONAL = ["web_search", "lsp", "retrieve", "memory", "load_skill", "switch_persona", "submit_plan", "spawn_subagent",
               "send_input", "wait_agent", "cancel_agent", "run_workflow", "propose_workflow", "session_search", "dev_tooling"]


def manifest(name: str) -> str:
    return f'name = "{name}"\ndescription = "A tool."\ncommand = ["/bin/cat"]\n'


def dirs(tmp: Path) -> tuple[Path, Path, dict[str, str]]:
    workspace, home = tmp / "ws", tmp / "home"
    (workspace / ".git").mkdir(parents=True)
    home.mkdir()
    return workspace, home, {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "unused", "HOME": str(tmp)}


def test_the_list_names_the_tools_the_spec_and_the_code_know() -> None:
    for name in ("read_file", "write_file", "edit_file", "bash", "process", "find_files", "grep", "list_directory", "tree",
                 "todo_write", "switch_persona", "task_status", "question", "web_fetch", "extension_manage", *CONDITIONAL):
        assert name in RESERVED, name
    assert reserved_reason("word_count") is None
    why = reserved_reason("web_search")
    assert why is not None and "when a search service is configured" in why and "whether or not that tool is on" in why


def test_a_custom_tool_cannot_take_any_builtin_name_even_when_that_tool_is_off(tmp_path: Path) -> None:
    workspace, home, environ = dirs(tmp_path)
    tools = home / "tools"
    tools.mkdir()
    for name in sorted(RESERVED):
        (tools / f"{name}.toml").write_text(manifest(name))
    (tools / "word_count.toml").write_text(manifest("word_count"))
    settings = load_settings(workspace, {}, environ)
    assert settings.web_search is None  # web_search is off here, as are lsp, retrieve's peers, subagents...
    found = discover(settings, builtin_tools=())  # a session that offers none of them
    states = {a.name: a for a in found.artifacts if a.kind == "tool"}
    assert [tool.manifest.name for tool in found.tools] == ["word_count"]
    for name in RESERVED:
        entry = states[name]
        assert entry.status == "skipped", name
        assert entry.reason is not None and "is the name of a built-in tool" in entry.reason, entry.reason
        assert "whether or not that tool is on in this session" in entry.reason
        assert BUILTIN_TOOLS[name] in entry.reason or BUILTIN_TOOLS[name] == "always"


def test_a_project_tool_named_for_a_conditional_tool_is_refused_before_any_trust(tmp_path: Path) -> None:
    workspace, home, environ = dirs(tmp_path)
    (workspace / ".osprey" / "tools").mkdir(parents=True)
    (workspace / ".osprey" / "tools" / "lsp.toml").write_text(manifest("lsp"))
    found = discover(load_settings(workspace, {}, environ), builtin_tools=())
    [entry] = [a for a in found.artifacts if a.kind == "tool"]
    assert entry.status == "skipped" and "'lsp' is the name of a built-in tool" in (entry.reason or "")
    assert found.tools == []


@pytest.mark.parametrize("name", sorted(RESERVED))
def test_extension_manage_refuses_every_builtin_name(tmp_path: Path, name: str) -> None:
    workspace, home, environ = dirs(tmp_path)
    settings = load_settings(workspace, {}, environ)
    outcome, changed = manage(settings, ManageInput(operation="create", kind="tool", name=name, content=manifest(name)), builtin=())
    assert outcome.is_error and outcome.category == "invalid_name" and not changed
    assert f"{name!r} is the name of a built-in tool" in outcome.text and "whether or not that tool is on" in outcome.text
    assert not (home / "tools" / f"{name}.toml").exists()


async def test_in_a_session_with_the_conditional_tools_off_their_names_stay_reserved(tmp_path: Path) -> None:
    workspace, home, environ = dirs(tmp_path)
    (home / "config.toml").write_text('[memory]\nprovider = "none"\n[workflows]\nenabled = false\n')
    tools = home / "tools"
    tools.mkdir()
    for name in CONDITIONAL:
        (tools / f"{name}.toml").write_text(manifest(name))
    settings = load_settings(workspace, {"approval_policy": "never"}, environ)
    session = Session(SessionOptions(settings=settings.model_copy(update={"retry": FAST_RETRY})), emit=lambda _: None,
                      provider=FakeProvider([]))
    async with session:
        offered = set(session.tool_names())
        for name in ("web_search", "memory", "switch_persona", "submit_plan", "lsp", "run_workflow"):
            assert name not in offered, name
        assert session.extensions is not None and session.extensions.found is not None
        skipped = {a.name for a in session.extensions.found.artifacts if a.kind == "tool" and a.status == "skipped"}
        assert skipped == set(CONDITIONAL)
        # extension_manage, as the model calls it in this session
        registry_tool = session.registry.tools["extension_manage"] if session.registry is not None else None
        assert registry_tool is not None
        for name in CONDITIONAL:
            outcome, changed = manage(settings, ManageInput(operation="replace", kind="tool", name=name, content=manifest(name)),
                                      builtin=session.tool_names())
            assert outcome.category == "invalid_name" and "is the name of a built-in tool" in outcome.text, name


def _every_option_on(tmp: Path) -> tuple[Path, Path, dict[str, str]]:
    workspace, home, environ = dirs(tmp)
    config = '[web_search]\nprovider = "searxng"\nsearxng_url = "http://127.0.0.1:9"\n[memory]\nprovider = "builtin"\n'
    config += '[lsp.servers.shell]\ncommand = ["/bin/sh"]\nextensions = [".sh"]\n'
    (home / "config.toml").write_text(config)
    skill = home / "skills" / "review"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: review\ndescription: Review a change.\n---\n\nRead the diff.\n")
    personas = home / "personas"
    personas.mkdir()
    (personas / "schema.json").write_text(json.dumps({"type": "object", "properties": {"answer": {"type": "string"}}}))
    (personas / "contract.md").write_text("---\nname: contract\ndescription: Answers with an object.\nschema_path: schema.json\n---\n\nAnswer.\n")
    return workspace, home, environ


@pytest.mark.parametrize("persona", ["architect", "verifier", "contract", "default"])
async def test_every_tool_a_session_can_build_is_in_the_list(tmp_path: Path, persona: str) -> None:
    workspace, home, environ = _every_option_on(tmp_path)
    settings = load_settings(workspace, {"approval_policy": "never"}, environ)
    assert settings.web_search is not None and settings.memory.provider == "builtin"
    chosen: Any = resolve_persona(persona, workspace_root=workspace, home=home)
    journal = Journal(journal_path(home))  # saved sessions: session_search is offered
    session = Session(SessionOptions(settings=settings.model_copy(update={"retry": FAST_RETRY}), persona=chosen),
                      emit=lambda _: None, provider=FakeProvider([]), journal=journal)
    async with session:
        assert session.extensions is not None
        built = {tool.name for tool in session.extensions.builtin} | set(session.tool_names())
        built |= set(session._person_tools.names()) if session._person_tools is not None else set()
    expected = {"web_search", "memory", "load_skill", "switch_persona", "process", "extension_manage", "session_search", "retrieve"}
    if persona != "default":  # the default persona's allowlist leaves the language servers unstarted
        expected.add("lsp")
    assert expected <= built, sorted(expected - built)  # the options above really are on
    assert built - RESERVED == set(), f"built-in tools missing from osprey.tools.names: {sorted(built - RESERVED)}"
