"""Extension layers and the resolution rules of the non-executable kinds, on real directory trees:
SYSTEM.md, APPEND_SYSTEM.md, AGENTS.md / CLAUDE.md, tool-descriptions.toml, toolsets.toml, with
their environment overrides and read-failure fallbacks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from osprey.config import load_settings
from osprey.extensions.discovery import discover
from osprey.extensions.layers import layers
from osprey.extensions.prompts import INSTRUCTIONS_BUDGET, TRUNCATED
from osprey.extensions.toolsets import ToolsetError, parse_toolsets, select

BUILTIN = {"read_file", "write_file", "edit_file", "bash", "find_files", "grep", "list_directory", "tree"}


class Tree:
    """A workspace (a git root) with a nested working directory, and a home."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "repo"
        self.cwd = self.root / "pkg" / "sub"
        self.cwd.mkdir(parents=True)
        (self.root / ".git").mkdir()
        self.home = tmp / "home"
        self.home.mkdir()
        self.outside = tmp / "outside"
        self.outside.mkdir()

    def put(self, where: Path, name: str, text: str | bytes) -> Path:
        path = where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        return path

    @property
    def near(self) -> Path:
        return self.cwd / ".osprey"

    @property
    def far(self) -> Path:
        return self.root / ".osprey"

    def discover(self, env: dict[str, str] | None = None) -> Any:
        environ = {"OSPREY_HOME": str(self.home), "HOME": str(self.home.parent), "OPENAI_API_KEY": "x", **(env or {})}
        settings = load_settings(self.cwd, {}, environ)
        return discover(settings, BUILTIN)


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


def statuses(found: Any, kind: str) -> list[tuple[str, str]]:
    return [(a.layer, a.status) for a in found.artifacts if a.kind == kind]


def test_layers_are_nearest_first_and_stop_at_the_workspace_boundary(tree: Tree) -> None:
    (tree.root.parent / ".osprey").mkdir()  # above the boundary: never a layer
    tree.near.mkdir()
    (tree.root / "pkg" / ".osprey").mkdir()
    tree.far.mkdir()
    found = layers(tree.cwd, tree.root, tree.home)
    assert [(layer.kind, layer.root) for layer in found] == [
        ("project", tree.near), ("project", tree.root / "pkg" / ".osprey"), ("project", tree.far), ("user", tree.home)]
    assert [layer.rank for layer in found] == [0, 1, 2, 3]


def test_a_symlinked_osprey_directory_is_not_a_layer(tree: Tree) -> None:
    os.symlink(tree.outside, tree.far)
    assert [layer.kind for layer in layers(tree.cwd, tree.root, tree.home)] == ["user"]


def test_the_home_is_not_also_a_project_layer(tree: Tree) -> None:
    home = tree.far
    home.mkdir()
    assert [layer.kind for layer in layers(tree.cwd, tree.root, home)] == ["user"]


@pytest.mark.parametrize(("files", "env", "expected_base", "expected"), [
    # nearest SYSTEM.md wins over farther and user ones
    ({"near": "NEAR", "far": "FAR", "home": "HOME"}, False, "NEAR", [("project", "active"), ("project", "shadowed"), ("user", "shadowed")]),
    ({"far": "FAR", "home": "HOME"}, False, "FAR", [("project", "active"), ("user", "shadowed")]),
    ({"home": "HOME"}, False, "HOME", [("user", "active")]),
    ({}, False, None, []),
    # the environment file wins over every layer
    ({"near": "NEAR"}, True, "ENV", [("environment", "active"), ("project", "shadowed")]),
])
def test_system_prompt_resolution(tree: Tree, files: dict[str, str], env: bool, expected_base: str | None, expected: list[tuple[str, str]]) -> None:
    places = {"near": tree.near, "far": tree.far, "home": tree.home}
    for where, text in files.items():
        tree.put(places[where], "SYSTEM.md", text)
    environ = {}
    if env:
        environ["OSPREY_SYSTEM_PROMPT_FILE"] = str(tree.put(tree.outside, "prompt.md", "ENV"))
    found = tree.discover(environ)
    assert found.prompt.base == expected_base
    assert statuses(found, "system_prompt") == expected
    composed = found.prompt.compose("BUILTIN")
    assert composed == (expected_base or "BUILTIN")


def test_an_unreadable_environment_prompt_falls_back_to_the_layered_file(tree: Tree) -> None:
    tree.put(tree.far, "SYSTEM.md", "FAR")
    found = tree.discover({"OSPREY_SYSTEM_PROMPT_FILE": str(tree.outside / "missing.md")})
    assert found.prompt.base == "FAR"
    assert statuses(found, "system_prompt") == [("environment", "skipped"), ("project", "active")]
    assert any("OSPREY_SYSTEM_PROMPT_FILE" in w for w in found.warnings)


def test_an_unreadable_nearest_system_prompt_gives_the_builtin_base_not_a_farther_one(tree: Tree) -> None:
    tree.put(tree.near, "SYSTEM.md", b"\xff\xfe not utf-8")
    tree.put(tree.far, "SYSTEM.md", "FAR")
    found = tree.discover()
    assert found.prompt.base is None
    assert statuses(found, "system_prompt") == [("project", "skipped"), ("project", "shadowed")]
    assert found.prompt.compose("BUILTIN") == "BUILTIN"


def test_a_project_prompt_that_leads_outside_the_workspace_is_not_read(tree: Tree) -> None:
    secret = tree.put(tree.outside, "credentials", "aws_secret_access_key = abc")
    tree.near.mkdir()
    os.symlink(secret, tree.near / "APPEND_SYSTEM.md")
    found = tree.discover()
    assert found.prompt.appends == []
    [item] = [a for a in found.artifacts if a.kind == "append_system"]
    assert item.status == "skipped" and "outside" in (item.reason or "")
    assert "abc" not in found.prompt.compose("BUILTIN")


def test_every_readable_append_is_added_projects_before_the_user(tree: Tree) -> None:
    tree.put(tree.near, "APPEND_SYSTEM.md", "near append")
    tree.put(tree.far, "APPEND_SYSTEM.md", "far append")
    tree.put(tree.home, "APPEND_SYSTEM.md", "user append")
    tree.put(tree.near, "SYSTEM.md", "BASE")
    found = tree.discover()
    assert found.prompt.compose("BUILTIN") == "BASE\n\nnear append\n\nfar append\n\nuser append"


def test_project_instructions_from_the_root_down_with_claude_md_only_where_agents_md_is_absent(tree: Tree) -> None:
    tree.put(tree.root, "AGENTS.md", "root agents")
    tree.put(tree.root, "CLAUDE.md", "root claude (not used)")
    tree.put(tree.root / "pkg", "CLAUDE.md", "pkg claude")
    tree.put(tree.cwd, "AGENTS.md", "sub agents")
    tree.put(tree.home, "APPEND_SYSTEM.md", "user append")
    found = tree.discover()
    text = found.prompt.compose("BUILTIN")
    assert text.index("user append") < text.index("root agents") < text.index("pkg claude") < text.index("sub agents")
    assert "root claude" not in text
    assert [a.name for a in found.artifacts if a.kind == "project_instructions"] == ["AGENTS.md", "CLAUDE.md", "AGENTS.md"]


def test_project_instructions_keep_the_budget_and_mark_the_cut(tree: Tree) -> None:
    tree.put(tree.root, "AGENTS.md", "head\n" + "x" * (INSTRUCTIONS_BUDGET + 5000) + "\nTAIL")
    found = tree.discover()
    text = found.prompt.instructions
    assert len(text.encode()) <= INSTRUCTIONS_BUDGET and text.endswith(TRUNCATED)
    assert "head" in text and "TAIL" not in text


DESCRIPTIONS = 'read_file = "Read with care."\n'


@pytest.mark.parametrize(("near", "far", "env", "expected", "states"), [
    (DESCRIPTIONS, 'read_file = "far"\n', None, {"read_file": "Read with care."}, [("project", "active"), ("project", "shadowed")]),
    (None, 'bash = "far bash"\n', None, {"bash": "far bash"}, [("project", "active")]),
    # a broken nearest file: the built-in descriptions, never the farther file
    ("read_file = 3\n", 'bash = "far"\n', None, {}, [("project", "skipped"), ("project", "shadowed")]),
    # the environment file wins; a broken one gives way to the layered file
    (DESCRIPTIONS, None, 'grep = "env grep"\n', {"grep": "env grep"}, [("environment", "active"), ("project", "shadowed")]),
    (DESCRIPTIONS, None, "not toml [", {"read_file": "Read with care."}, [("environment", "skipped"), ("project", "active")]),
])
def test_tool_description_resolution(tree: Tree, near: str | None, far: str | None, env: str | None, expected: dict[str, str],
                                     states: list[tuple[str, str]]) -> None:
    if near is not None:
        tree.put(tree.near, "tool-descriptions.toml", near)
    if far is not None:
        tree.put(tree.far, "tool-descriptions.toml", far)
    environ = {}
    if env is not None:
        environ["OSPREY_TOOL_DESCRIPTIONS_FILE"] = str(tree.put(tree.outside, "d.toml", env))
    found = tree.discover(environ)
    assert found.descriptions == expected
    assert statuses(found, "tool_descriptions") == states


TOOLSETS = """
[toolsets.readonly]
tools = ["read_file", "grep", "find_files", "list_directory", "tree"]

[toolsets.review]
includes = ["readonly"]
tools = ["word_count"]
exclude = ["tree"]

[toolsets.loop_a]
includes = ["loop_b"]
tools = ["bash"]

[toolsets.loop_b]
includes = ["loop_a"]
tools = ["grep"]

[toolsets.broken]
includes = ["nowhere"]
"""


def test_toolsets_union_includes_and_remove_excludes() -> None:
    file = parse_toolsets(TOOLSETS.encode())
    assert select(file, "readonly") == {"read_file", "grep", "find_files", "list_directory", "tree"}
    assert select(file, "review") == {"read_file", "grep", "find_files", "list_directory", "word_count"}
    assert select(file, "loop_a") == {"bash", "grep"}  # the cycle stops at the first set seen again


def test_toolset_errors_name_what_exists() -> None:
    file = parse_toolsets(TOOLSETS.encode())
    with pytest.raises(ToolsetError, match="unknown toolset 'nope'; the toolsets defined are: broken, loop_a, loop_b, readonly, review"):
        select(file, "nope")
    with pytest.raises(ToolsetError, match="the toolset 'broken' includes 'nowhere', which is not defined"):
        select(file, "broken")
    with pytest.raises(ToolsetError, match="there is no toolsets.toml"):
        select(None, "readonly")


def test_a_malformed_nearest_toolsets_file_is_skipped_without_a_farther_one(tree: Tree) -> None:
    tree.put(tree.near, "toolsets.toml", "[toolsets.x]\ntools = 3\n")
    tree.put(tree.far, "toolsets.toml", TOOLSETS)
    found = tree.discover()
    assert found.toolsets is None and found.toolsets_problem
    assert statuses(found, "toolsets") == [("project", "skipped"), ("project", "shadowed")]
    with pytest.raises(ToolsetError, match="skipped"):
        select(found.toolsets, "readonly", problem=found.toolsets_problem)


def test_the_nearest_toolsets_file_wins(tree: Tree) -> None:
    tree.put(tree.far, "toolsets.toml", "[toolsets.far]\ntools = [\"bash\"]\n")
    tree.put(tree.home, "toolsets.toml", TOOLSETS)
    found = tree.discover()
    assert set(found.toolsets.toolsets) == {"far"}
    assert statuses(found, "toolsets") == [("project", "active"), ("user", "shadowed")]
