"""Personas: resolution across the project, user and bundled layers, and every validation rule of
a persona file, on real directory trees."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from osprey.errors import ConfigError
from osprey.personas import BUNDLED_DIR, Persona, PersonaError, check_tools, list_personas, parse_persona, resolve_persona

BASE_TOOLS = ("read_file", "write_file", "edit_file", "bash", "process", "find_files", "grep", "list_directory", "tree", "todo_write",
              "switch_persona", "web_fetch")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "osprey-home"
    path.mkdir()
    return path


def project_dir(ws: Path) -> Path:
    folder = ws / ".osprey" / "personas"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def user_dir(home: Path) -> Path:
    folder = home / "personas"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write(folder: Path, stem: str, front: str, body: str = "Do the work.\n") -> Path:
    path = folder / f"{stem}.md"
    path.write_text(f"---\n{front}\n---\n\n{body}", encoding="utf-8")
    return path


def resolve(name: str, ws: Path, home: Path) -> Persona:
    return resolve_persona(name, workspace_root=ws, home=home)


# --- the bundled personas ---------------------------------------------------------------------

def test_the_four_bundled_personas_load_with_their_purposes(ws: Path, home: Path) -> None:
    default = resolve("default", ws, home)
    assert (default.source, default.tools, default.spawnable, default.dev_tooling, default.terminal) == ("bundled", BASE_TOOLS, True, False, False)
    assert default.path == str(BUNDLED_DIR / "default.md") and default.prompt and default.description

    coding = resolve("coding", ws, home)
    assert (coding.tools, coding.spawnable, coding.dev_tooling, coding.terminal) == (BASE_TOOLS, True, True, False)
    assert "verif" in coding.prompt.lower() and "test" in coding.prompt.lower()

    for name, tool, schema_file in (("architect", "submit_plan", "plan.schema.json"), ("verifier", "submit_verification", "verification.schema.json")):
        persona = resolve(name, ws, home)
        assert persona.terminal and persona.terminal_tool == tool
        assert persona.tools is None and not persona.spawnable and not persona.dev_tooling and persona.toolset is None
        assert persona.schema_path == str(BUNDLED_DIR / schema_file)
        assert persona.schema == json.loads((BUNDLED_DIR / schema_file).read_text())
        assert persona.schema["type"] == "object" and persona.schema["additionalProperties"] is False
        assert "do not write" in persona.prompt and tool in persona.prompt


def test_bundled_schemas_accept_a_good_answer_and_refuse_a_bad_one(ws: Path, home: Path) -> None:
    from jsonschema import Draft202012Validator

    plan = Draft202012Validator(resolve("architect", ws, home).schema or {})
    good_plan = {"summary": "Add a flag.", "steps": [{"title": "Parse it", "detail": "In cli/options.py.", "files": ["cli/options.py"]}],
                 "risks": [{"risk": "Name clash", "mitigation": "Grep first"}], "verification": ["pytest tests/test_cli.py"]}
    assert list(plan.iter_errors(good_plan)) == []
    assert list(plan.iter_errors({**good_plan, "steps": []}))  # at least one step
    assert list(plan.iter_errors({**good_plan, "extra": 1}))  # no other fields
    assert list(plan.iter_errors({k: v for k, v in good_plan.items() if k != "verification"}))

    report = Draft202012Validator(resolve("verifier", ws, home).schema or {})
    good_report = {"verdict": "pass", "summary": "All good.", "criteria": [{"criterion": "tests pass", "status": "pass", "evidence": "pytest: 12 passed"}]}
    assert list(report.iter_errors(good_report)) == []
    assert list(report.iter_errors({**good_report, "verdict": "maybe"}))
    assert list(report.iter_errors({**good_report, "criteria": [{"criterion": "x", "status": "pass"}]}))  # evidence required


# --- precedence -------------------------------------------------------------------------------

@pytest.mark.parametrize(("in_project", "in_user", "expected"), [
    (True, True, "project"),
    (False, True, "user"),
    (True, False, "project"),
    (False, False, "bundled"),
])
def test_the_nearest_layer_wins(ws: Path, home: Path, in_project: bool, in_user: bool, expected: str) -> None:
    if in_project:
        write(project_dir(ws), "coding", "name: coding\ndescription: the project's", "Project prompt.")
    if in_user:
        write(user_dir(home), "coding", "name: coding\ndescription: the user's", "User prompt.")
    persona = resolve("coding", ws, home)
    assert persona.source == expected
    assert persona.prompt == {"project": "Project prompt.", "user": "User prompt."}.get(expected, persona.prompt)
    if expected == "bundled":
        assert persona.dev_tooling


def test_a_custom_persona_resolves_from_the_user_layer(ws: Path, home: Path) -> None:
    path = write(user_dir(home), "reviewer", "name: reviewer\ndescription: Reviews changes without editing files\nspawnable: true\n"
                 "tools: [read_file, grep, find_files, list_directory, tree]",
                 "Review the requested changes. Report concrete findings with file locations.\n")
    persona = resolve("reviewer", ws, home)
    assert persona == Persona(name="reviewer", description="Reviews changes without editing files", source="user", path=str(path),
                              prompt="Review the requested changes. Report concrete findings with file locations.", spawnable=True,
                              tools=("read_file", "grep", "find_files", "list_directory", "tree"))


def test_a_broken_nearest_file_fails_rather_than_falling_through(ws: Path, home: Path) -> None:
    write(project_dir(ws), "default", "name: other")
    with pytest.raises(PersonaError, match="differs from the file name"):
        resolve("default", ws, home)


def test_a_folder_named_like_a_persona_file_is_not_a_persona(ws: Path, home: Path) -> None:
    (project_dir(ws) / "coding.md").mkdir()
    assert resolve("coding", ws, home).source == "bundled"


@pytest.mark.parametrize("name", ["../default", "a/b", "/etc/passwd", "", "Default", "-x", "_x", ".hidden", "x" * 65, "a b", "default.md", "..", "a\nb"])
def test_a_name_that_is_not_a_plain_name_is_refused(ws: Path, home: Path, name: str) -> None:
    write(user_dir(home), "x", "name: x")
    with pytest.raises(PersonaError, match="is not a persona name"):
        resolve(name, ws, home)


@pytest.mark.parametrize("name", ["a", "a-b_c9", "9lives", "x" * 64])
def test_plain_names_resolve(ws: Path, home: Path, name: str) -> None:
    write(user_dir(home), name, f"name: {name}")
    assert resolve(name, ws, home).name == name


def test_an_unknown_name_lists_the_available_ones(ws: Path, home: Path) -> None:
    write(project_dir(ws), "alpha", "name: alpha")
    write(user_dir(home), "beta", "name: beta")
    (user_dir(home) / "Not A Name.md").write_text("---\nname: x\n---\n")
    with pytest.raises(PersonaError) as caught:
        resolve("gamma", ws, home)
    message = str(caught.value)
    assert "unknown persona 'gamma'" in message
    assert "available: alpha, architect, beta, coding, default, verifier (" in message
    assert isinstance(caught.value, ConfigError)


# --- validation -------------------------------------------------------------------------------

BAD_FRONTMATTER = [
    pytest.param("name: p\ntools: read_file", "'tools' must be a list", id="tools-not-a-list"),
    pytest.param("name: p\ntools: [read_file, '']", "'tools' entry 2 is empty", id="tools-empty-entry"),
    pytest.param("name: p\ntools: [read_file, '  ']", "'tools' entry 2 is empty", id="tools-blank-entry"),
    pytest.param("name: p\ntools:\n  - read_file\n  -", "'tools' entry 2 is NoneType", id="tools-null-entry"),
    pytest.param("name: p\ntools: [read_file, 3]", "'tools' entry 2 is int", id="tools-number-entry"),
    pytest.param("name: p\ntools: [[read_file]]", "'tools' entry 1 is list", id="tools-nested-list"),
    pytest.param("name: p\nspawnable: true", "a spawnable persona must declare a tools list", id="spawnable-without-tools"),
    pytest.param("name: p\nspawnable: true\ntools:", "a spawnable persona must declare a tools list", id="spawnable-with-null-tools"),
    pytest.param("name: p\nspawnable: 'true'", "'spawnable' must be true or false", id="spawnable-string"),
    pytest.param("name: p\ndev_tooling: 1", "'dev_tooling' must be true or false", id="dev-tooling-number"),
    pytest.param("name: p\nterminal_tool: 5", "'terminal_tool' must be a tool name", id="terminal-tool-number"),
    pytest.param("name: p\nterminal_tool: submit plan", "is not a tool name", id="terminal-tool-with-space"),
    pytest.param("name: p\ntoolset: [a, b]", "'toolset' must be the name of a toolset", id="toolset-list"),
    pytest.param("name: p\ntoolset: ''", "'toolset' is empty", id="toolset-empty"),
    pytest.param("name: p\ndescription: [a]", "'description' must be text", id="description-list"),
    pytest.param("name: p\nschema_path: ''", "'schema_path' is empty", id="schema-path-empty"),
    pytest.param("name: p\nschema_path: 3", "'schema_path' must be a path", id="schema-path-number"),
    pytest.param('name: p\nschema_path: "a\\0b.json"', "'schema_path' holds a NUL character", id="schema-path-nul"),
    pytest.param("description: no name", "has no name; add 'name: p'", id="missing-name"),
    pytest.param("name:", "has no name", id="null-name"),
    pytest.param("name: ''", "has no name", id="empty-name"),
    pytest.param("name: other", "the name 'other' differs from the file name", id="name-mismatch"),
    pytest.param("name: P", "differs from the file name", id="name-case-mismatch"),
    pytest.param("name: [p]", "'name' must be text", id="name-list"),
    pytest.param("- name\n- p", "not a set of 'field: value' lines", id="frontmatter-a-list"),
    pytest.param("name: p\ntools: [read_file", "not valid YAML at line", id="invalid-yaml"),
    pytest.param("name: !!python/object/apply:os.system ['true']", "not valid YAML", id="unsafe-yaml-tag"),
]


@pytest.mark.parametrize(("front", "problem"), BAD_FRONTMATTER)
def test_invalid_frontmatter_fails_resolution_naming_the_file(ws: Path, home: Path, front: str, problem: str) -> None:
    path = write(user_dir(home), "p", front)
    with pytest.raises(PersonaError) as caught:
        resolve("p", ws, home)
    assert problem in str(caught.value)
    assert str(caught.value).startswith(str(path))


GOOD_FRONTMATTER = [
    pytest.param("name: p", {}, id="name-only"),
    pytest.param("name: p\ntools: []\nspawnable: true", {"tools": (), "spawnable": True}, id="spawnable-with-empty-tools"),
    pytest.param("name: p\ntools:\n  - read_file\n  - grep\n  - read_file", {"tools": ("read_file", "grep")}, id="block-list-deduplicated"),
    pytest.param("name: p\ndescription: >\n  Folded\n  text.\n", {"description": "Folded text."}, id="folded-description"),
    pytest.param("name: 'p'\nspawnable: false\ndev_tooling: yes", {"dev_tooling": True}, id="yaml-booleans"),
    pytest.param("name: p\ntoolset: readonly\nterminal_tool: submit_report", {"toolset": "readonly", "terminal_tool": "submit_report"}, id="toolset-and-terminal-tool"),
    pytest.param("name: p\nmodel: x\nmetadata:\n  owner: me\nlicense: MIT", {}, id="unknown-fields-ignored"),
    pytest.param("name: p\ndescription:\nterminal_tool:\ntoolset:", {"description": ""}, id="empty-optional-fields"),
]


@pytest.mark.parametrize(("front", "fields"), GOOD_FRONTMATTER)
def test_valid_frontmatter_resolves(ws: Path, home: Path, front: str, fields: dict[str, object]) -> None:
    write(user_dir(home), "p", front, "\n\nThe prompt.\n\n")
    persona = resolve("p", ws, home)
    assert persona.prompt == "The prompt."
    for key, value in fields.items():
        assert getattr(persona, key) == value
    assert persona.terminal == (persona.terminal_tool is not None)


@pytest.mark.parametrize(("text", "problem"), [
    ("Just a prompt, no frontmatter.\n", "no frontmatter"),
    ("", "no frontmatter"),
    ("\n---\nname: p\n---\nbody", "no frontmatter"),
    ("---\nname: p\nbody without a closing line\n", "the frontmatter is not closed"),
])
def test_missing_frontmatter_fails(ws: Path, home: Path, text: str, problem: str) -> None:
    (user_dir(home) / "p.md").write_text(text)
    with pytest.raises(PersonaError, match=problem):
        resolve("p", ws, home)


def test_crlf_line_endings_a_bom_and_a_dots_terminator_are_accepted(ws: Path, home: Path) -> None:
    (user_dir(home) / "p.md").write_bytes(b"\xef\xbb\xbf---\r\nname: p\r\ndescription: d\r\n...\r\nLine one.\r\nLine two.\r\n")
    persona = resolve("p", ws, home)
    assert (persona.description, persona.prompt) == ("d", "Line one.\nLine two.")


def test_yaml_errors_do_not_quote_the_file(ws: Path, home: Path) -> None:
    write(user_dir(home), "p", "name: p\nsecret: sk-THE-SECRET-VALUE: [unclosed")
    with pytest.raises(PersonaError) as caught:
        resolve("p", ws, home)
    assert "THE-SECRET" not in str(caught.value)


def test_deeply_nested_yaml_is_an_error_not_a_crash(ws: Path, home: Path) -> None:
    depth = 20_000
    write(user_dir(home), "p", "name: p\nx: " + "[" * depth + "]" * depth)
    with pytest.raises(PersonaError, match="not valid YAML"):
        resolve("p", ws, home)


def test_file_bounds(ws: Path, home: Path) -> None:
    folder = user_dir(home)
    write(folder, "big", "name: big", "x" * (64 * 1024))
    with pytest.raises(PersonaError, match="larger than 64 KiB"):
        resolve("big", ws, home)
    write(folder, "fits", "name: fits", "x" * (64 * 1024 - 40))
    assert len(resolve("fits", ws, home).prompt) == 64 * 1024 - 40
    (folder / "latin.md").write_bytes(b"---\nname: latin\n---\ncaf\xe9\n")
    with pytest.raises(PersonaError, match="not UTF-8 text"):
        resolve("latin", ws, home)
    os.mkfifo(folder / "fifo.md")  # never opened, so never blocks
    with pytest.raises(PersonaError, match="not a regular file"):
        resolve("fifo", ws, home)


def test_a_project_persona_may_not_lead_out_of_the_workspace(ws: Path, home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("---\nname: linked\n---\nOutside.\n")
    (project_dir(ws) / "linked.md").symlink_to(outside)
    with pytest.raises(PersonaError, match="leads outside the workspace"):
        resolve("linked", ws, home)
    # Inside the workspace a link is fine, and so is a user persona linked from anywhere.
    (ws / "shared.md").write_text("---\nname: inner\n---\nInside.\n")
    (project_dir(ws) / "inner.md").symlink_to(ws / "shared.md")
    assert resolve("inner", ws, home).prompt == "Inside."
    outside.write_text("---\nname: dotfile\n---\nMine.\n")
    (user_dir(home) / "dotfile.md").symlink_to(outside)
    assert resolve("dotfile", ws, home).prompt == "Mine."


# --- schemas ----------------------------------------------------------------------------------

OBJECT_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"], "additionalProperties": False}


def test_schema_path_is_relative_to_the_persona_folder(ws: Path, home: Path) -> None:
    folder = user_dir(home)
    (folder / "schemas").mkdir()
    (folder / "schemas" / "answer.json").write_text(json.dumps(OBJECT_SCHEMA))
    write(folder, "p", "name: p\nterminal_tool: submit_answer\nschema_path: schemas/answer.json")
    persona = resolve("p", ws, home)
    assert (persona.schema, persona.schema_path, persona.terminal) == (OBJECT_SCHEMA, str(folder / "schemas" / "answer.json"), True)


def test_an_absolute_schema_path_is_used_as_is(ws: Path, home: Path, tmp_path: Path) -> None:
    schema = tmp_path / "elsewhere.json"
    schema.write_text(json.dumps(OBJECT_SCHEMA))
    write(user_dir(home), "p", f"name: p\nschema_path: {schema}")
    persona = resolve("p", ws, home)
    assert (persona.schema_path, persona.terminal, persona.terminal_tool) == (str(schema), True, None)


@pytest.mark.parametrize("raw", ["plan.schema.json", "schemas/plan.schema.json", "verification.schema.json"])
def test_a_missing_bundled_schema_name_falls_back_to_the_bundled_copy(ws: Path, home: Path, raw: str) -> None:
    write(project_dir(ws), "planner", f"name: planner\nterminal_tool: submit_plan\nschema_path: {raw}")
    persona = resolve("planner", ws, home)
    bundled = BUNDLED_DIR / Path(raw).name
    assert (persona.source, persona.schema_path, persona.schema) == ("project", str(bundled), json.loads(bundled.read_text()))


def test_a_present_schema_with_a_bundled_name_is_used_over_the_bundled_copy(ws: Path, home: Path) -> None:
    folder = project_dir(ws)
    (folder / "plan.schema.json").write_text(json.dumps(OBJECT_SCHEMA))
    write(folder, "architect", "name: architect\nterminal_tool: submit_plan\nschema_path: plan.schema.json")
    persona = resolve("architect", ws, home)
    assert (persona.source, persona.schema, persona.schema_path) == ("project", OBJECT_SCHEMA, str(folder / "plan.schema.json"))


@pytest.mark.parametrize(("content", "problem"), [
    (None, "does not exist; create that file or fix schema_path"),
    ("{not json", "not valid JSON at line 1, column 2"),
    (b"\xff\xfe{}", "not valid JSON"),
    ("[1, 2]", "a JSON Schema must be a JSON object"),
    ('{"type": 5}', "not a valid JSON Schema (Draft 2020-12) at type"),
    ('{"type": "object", "properties": {"a": {"minLength": -1}}}', "not a valid JSON Schema (Draft 2020-12) at properties/a/minLength"),
    ('{"type": "array"}', "needs \"type\": \"object\""),
    ("{}", "needs \"type\": \"object\""),
    ("[" * 50_000 + "]" * 50_000, "not valid JSON"),
])
def test_an_unusable_schema_fails_resolution(ws: Path, home: Path, content: str | bytes | None, problem: str) -> None:
    folder = user_dir(home)
    if isinstance(content, str):
        (folder / "out.json").write_text(content)
    elif isinstance(content, bytes):
        (folder / "out.json").write_bytes(content)
    write(folder, "p", "name: p\nterminal_tool: submit_out\nschema_path: out.json")
    with pytest.raises(PersonaError) as caught:
        resolve("p", ws, home)
    assert problem in str(caught.value)


def test_an_unreadable_schema_fails_resolution(ws: Path, home: Path) -> None:
    folder = user_dir(home)
    (folder / "out.json").symlink_to("out.json")  # a link to itself: ELOOP, even for root
    write(folder, "p", "name: p\nschema_path: out.json")
    with pytest.raises(PersonaError, match="out.json: cannot be read as a JSON Schema: Too many levels of symbolic links"):
        resolve("p", ws, home)


def test_an_oversized_schema_fails_resolution(ws: Path, home: Path) -> None:
    folder = user_dir(home)
    (folder / "out.json").write_text(json.dumps({**OBJECT_SCHEMA, "description": "x" * (256 * 1024)}))
    write(folder, "p", "name: p\nschema_path: out.json")
    with pytest.raises(PersonaError, match="larger than 256 KiB"):
        resolve("p", ws, home)


def test_a_project_schema_may_not_lead_out_of_the_workspace(ws: Path, home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.json"
    outside.write_text(json.dumps(OBJECT_SCHEMA))
    write(project_dir(ws), "p", f"name: p\nschema_path: {outside}")
    with pytest.raises(PersonaError, match="leads outside the workspace"):
        resolve("p", ws, home)
    write(project_dir(ws), "q", "name: q\nschema_path: ../../../secret.json")
    with pytest.raises(PersonaError, match="leads outside the workspace"):
        resolve("q", ws, home)
    (ws / "schemas").mkdir()
    (ws / "schemas" / "out.json").write_text(json.dumps(OBJECT_SCHEMA))
    write(project_dir(ws), "r", "name: r\nschema_path: ../../schemas/out.json")
    assert resolve("r", ws, home).schema == OBJECT_SCHEMA


# --- listing ----------------------------------------------------------------------------------

def test_list_personas_orders_layers_and_shows_each_name_once(ws: Path, home: Path) -> None:
    project, user = project_dir(ws), user_dir(home)
    write(project, "zeta", "name: zeta")
    write(project, "alpha", "name: alpha")
    write(project, "default", "name: default\ndescription: the project's default")
    write(project, "broken", "name: not-broken")
    write(project, "planner", "name: planner\nterminal_tool: submit_plan\nschema_path: plan.schema.json")
    (project / "Bad Name.md").write_text("---\nname: x\n---\n")
    (project / ".draft.md").write_text("not a persona")
    (project / "folder.md").mkdir()
    (project / "notes.txt").write_text("not a persona")
    write(user, "alpha", "name: alpha\ndescription: shadowed by the project")
    write(user, "mine", "name: mine")
    write(user, "coding", "name: coding\nspawnable: true")  # broken: hides the bundled coding too
    write(user, "broken", "name: broken")  # shadowed by the broken project file
    warnings: list[str] = []
    personas = list_personas(workspace_root=ws, home=home, warn=warnings.append)
    assert [(p.name, p.source) for p in personas] == [
        ("alpha", "project"), ("default", "project"), ("planner", "project"), ("zeta", "project"), ("mine", "user"),
    ]
    assert personas[1].description == "the project's default"
    assert len(warnings) == 3, warnings
    assert any("'broken' left out" in w and "differs from the file name" in w for w in warnings)
    assert any("'coding' left out" in w and "spawnable" in w for w in warnings)
    assert any("'Bad Name' is not a persona name" in w for w in warnings)


def test_list_personas_without_files_offers_default_and_coding(ws: Path, home: Path) -> None:
    warnings: list[str] = []
    personas = list_personas(workspace_root=ws, home=home, warn=warnings.append)
    assert [(p.name, p.source) for p in personas] == [("default", "bundled"), ("coding", "bundled")]
    assert warnings == []


# --- the model --------------------------------------------------------------------------------

def test_check_tools_returns_the_unknown_names_in_order(ws: Path, home: Path) -> None:
    write(user_dir(home), "p", "name: p\ntools: [read_file, nope, grep, later]")
    persona = resolve("p", ws, home)
    assert check_tools(persona, {"read_file", "grep", "bash"}) == ["nope", "later"]
    assert check_tools(persona, ["read_file", "nope", "grep", "later"]) == []
    assert check_tools(resolve("architect", ws, home), set()) == []
    assert check_tools(resolve("default", ws, home), set(BASE_TOOLS)) == []


def test_a_persona_is_frozen_and_parse_persona_reads_any_path(ws: Path, home: Path, tmp_path: Path) -> None:
    path = write(tmp_path, "solo", "name: solo")
    persona = parse_persona(path, "user")
    with pytest.raises(dataclasses.FrozenInstanceError):
        persona.name = "other"  # type: ignore[misc]
    with pytest.raises(PersonaError, match="no such persona file"):
        parse_persona(tmp_path / "missing.md", "user")
