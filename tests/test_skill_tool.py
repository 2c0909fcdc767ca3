"""`load_skill` and `SkillRegistry.load` on real skill directories: the body without its
frontmatter, the skill's other files listed, and the non-retryable errors for unknown and
unreadable skills, each listing the available names."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from osprey.skills import SkillError, SkillRegistry, discover_skills
from osprey.skills import discovery as discovery_module
from osprey.tools.base import ToolContext, ToolRegistry
from osprey.tools.skill_tool import load_skill_tool

BODY = "# Review\n\nRead the changed files.\n\n---\n\nThen report findings with exact locations.\n"
FRONT = "---\nname: review\ndescription: >\n  Review changes\n  carefully.\nlicense: MIT\nmetadata:\n  version: 1\n---\n"


def registry_for(root: Path, **kwargs: object) -> tuple[SkillRegistry, list[str]]:
    warnings: list[str] = []
    registry = discover_skills(cwd=root.parent / "ws", workspace_root=root.parent / "ws", skill_dirs=(root,), user_root=None,
                               warn=warnings.append, **kwargs)  # type: ignore[arg-type]
    return registry, warnings


@pytest.fixture
def skill_root(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    review = root / "review"
    for rel in ("scripts/check.py", "scripts/lib/helper.sh", "references/api.md", "assets/template.txt", "notes.md", ".hidden", "scripts/.cache"):
        (review / rel).parent.mkdir(parents=True, exist_ok=True)
        (review / rel).write_text("x\n")
    (review / "SKILL.md").write_text(FRONT + BODY)
    (review / "linked-dir").symlink_to(root.parent)  # not followed, not listed
    (review / "linked-file.md").symlink_to(review / "notes.md")  # listed, as a file of the skill
    (root / "bare").mkdir(parents=True)
    (root / "bare" / "SKILL.md").write_text("---\nname: bare\ndescription: Nothing else.\n---\nJust this.")
    return root


def context(tmp_path: Path) -> ToolContext:
    return ToolContext(client=None, cwd=str(tmp_path), roots=[str(tmp_path)], bash_max_output_bytes=1 << 20)  # type: ignore[arg-type]


def call(registry: SkillRegistry, tmp_path: Path, arguments: dict[str, object]):  # type: ignore[no-untyped-def]
    tools = ToolRegistry()
    tools.add(load_skill_tool(registry))
    return asyncio.run(tools.call("load_skill", arguments, context(tmp_path)))


def test_load_gives_the_body_without_the_frontmatter_and_lists_the_other_files(skill_root: Path) -> None:
    registry, warnings = registry_for(skill_root)
    assert warnings == []
    text = registry.load("review")
    directory = skill_root / "review"
    assert text.startswith(f"Skill review (dir skill, {directory / 'SKILL.md'})\n\n")
    assert BODY.strip("\n") in text  # whole, the `---` inside the body included
    assert "name: review" not in text and "license: MIT" not in text
    listing = text[text.index("Other files of this skill"):]
    assert str(directory) in listing
    files = [line[2:] for line in listing.splitlines()[1:]]
    assert files == ["assets/template.txt", "linked-file.md", "notes.md", "references/api.md", "scripts/check.py", "scripts/lib/helper.sh"]
    assert "This skill has no other files" in registry.load("bare") and "Just this." in registry.load("bare")


def test_the_listing_is_bounded(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = root / "many"
    (folder / "references").mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: many\ndescription: Many files.\n---\nbody\n")
    for n in range(150):
        (folder / "references" / f"r{n:03}.md").write_text("x")
    deep = folder / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    (deep / "too-deep.md").write_text("x")
    registry, _ = registry_for(root)
    text = registry.load("many")
    listed = [line for line in text.splitlines() if line.startswith("- references/")]
    assert len(listed) == discovery_module.MAX_LISTED_FILES
    assert "only the first 100 are listed" in text
    assert "too-deep.md" not in text


def test_the_tool_returns_the_body(skill_root: Path, tmp_path: Path) -> None:
    registry, _ = registry_for(skill_root)
    outcome = call(registry, tmp_path, {"name": "review"})
    assert not outcome.is_error
    assert outcome.text == registry.load("review")


def test_the_tool_takes_a_name_never_a_skill_path_and_is_trusted_read_only(skill_root: Path, tmp_path: Path) -> None:
    registry, _ = registry_for(skill_root)
    tool = load_skill_tool(registry)
    assert tool.name == "load_skill" and tool.read_only and tool.trusted
    # The skill is chosen by name; `file` only picks one of that skill's own files.
    assert list(tool.parameters["properties"]) == ["name", "file"] and tool.parameters["required"] == ["name"]
    outcome = call(registry, tmp_path, {"path": str(skill_root / "review" / "SKILL.md")})
    assert outcome.is_error and outcome.category == "invalid_arguments"
    outcome = call(registry, tmp_path, {"name": "review", "path": "/etc/passwd"})
    assert outcome.is_error and outcome.category == "invalid_arguments"
    outcome = call(registry, tmp_path, {"name": ""})
    assert outcome.is_error and outcome.category == "invalid_arguments"


@pytest.mark.parametrize("name", ["nope", "../review", str(Path("/etc/passwd")), "review/SKILL.md", "REVIEW"])
def test_an_unknown_name_is_a_non_retryable_error_listing_the_names(skill_root: Path, tmp_path: Path, name: str) -> None:
    registry, _ = registry_for(skill_root)
    with pytest.raises(SkillError) as info:
        registry.load(name)
    assert info.value.category == "unknown_skill" and not info.value.retryable
    outcome = call(registry, tmp_path, {"name": name})
    assert outcome.is_error and outcome.category == "unknown_skill"
    assert "not retryable" in outcome.text
    assert "Available skills: about-osprey, bug-report, bare, review." in outcome.text


def test_unknown_names_in_a_large_registry_are_listed_within_a_bound(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    for n in range(150):
        (root / f"s{n:03}").mkdir(parents=True)
        (root / f"s{n:03}" / "SKILL.md").write_text(f"---\nname: s{n:03}\ndescription: d\n---\n")
    registry, _ = registry_for(root)
    with pytest.raises(SkillError) as info:
        registry.load("missing")
    assert "and 52 more" in info.value.message  # 152 skills with the bundled ones, 100 named


def replace_with_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def replace_with_large(path: Path) -> None:
    path.write_text("---\nname: review\ndescription: d\n---\n" + "x" * (256 * 1024))


def replace_without_frontmatter(path: Path) -> None:
    path.write_text("# Review\nno frontmatter any more\n")


@pytest.mark.parametrize(("change", "why"), [
    (Path.unlink, "the file is gone"),
    (replace_with_fifo, "not a regular file"),
    (replace_with_large, "larger than 256 KiB"),
    (replace_without_frontmatter, "no frontmatter"),
], ids=["removed", "fifo", "too-large", "frontmatter-gone"])
def test_a_skill_md_that_cannot_be_read_at_load_is_a_non_retryable_error(skill_root: Path, tmp_path: Path, change, why: str) -> None:  # type: ignore[no-untyped-def]
    registry, _ = registry_for(skill_root)
    path = skill_root / "review" / "SKILL.md"
    change(path)
    start = time.monotonic()
    outcome = call(registry, tmp_path, {"name": "review"})
    assert time.monotonic() - start < 10  # a FIFO is never opened
    assert outcome.is_error and outcome.category == "unreadable_skill", outcome.text
    assert why in outcome.text and str(path) in outcome.text
    assert "not retryable" in outcome.text and "Retrying will not help" in outcome.text
    assert "Available skills: about-osprey, bug-report, bare, review." in outcome.text


def test_a_project_skill_swapped_for_a_link_outside_the_workspace_is_not_read(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    folder = workspace / ".agents" / "skills" / "review"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(FRONT + BODY)
    secret = tmp_path / "secret.md"
    secret.write_text("---\nname: review\ndescription: d\n---\nthe user's private notes\n")
    registry = discover_skills(cwd=workspace, workspace_root=workspace, user_root=None, warn=lambda _: None)
    (folder / "SKILL.md").unlink()
    (folder / "SKILL.md").symlink_to(secret)
    with pytest.raises(SkillError) as info:
        registry.load("review")
    assert info.value.category == "unreadable_skill" and "outside the workspace" in info.value.message
    assert "private notes" not in info.value.message


def test_the_tool_can_follow_a_registry_that_is_discovered_again(skill_root: Path, tmp_path: Path) -> None:
    first, _ = registry_for(skill_root)
    (skill_root / "later").mkdir()
    (skill_root / "later" / "SKILL.md").write_text("---\nname: later\ndescription: Added later.\n---\nLater body.\n")
    current = {"registry": first}
    tools = ToolRegistry()
    tools.add(load_skill_tool(lambda: current["registry"]))
    assert asyncio.run(tools.call("load_skill", {"name": "later"}, context(tmp_path))).category == "unknown_skill"
    current["registry"], _ = registry_for(skill_root)
    outcome = asyncio.run(tools.call("load_skill", {"name": "later"}, context(tmp_path)))
    assert not outcome.is_error and "Later body." in outcome.text


# ------------------------------------------------------------------ a skill's other files, by load_skill


def test_a_skills_other_file_is_read_through_load_skill_wherever_the_skill_is(tmp_path: Path) -> None:
    import asyncio

    from osprey.skills import discover_skills
    from osprey.tools.base import Invocation
    from osprey.tools.skill_tool import load_skill_tool

    user = tmp_path / "home" / "skills"
    folder = user / "release-notes"
    (folder / "references").mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: release-notes\ndescription: Write release notes.\n---\n\nRead references/style.md first.\n")
    (folder / "references" / "style.md").write_text("Use the past tense.\n")
    (tmp_path / "secret.txt").write_text("not for the model\n")
    (folder / "references" / "escape").symlink_to(tmp_path / "secret.txt")
    workspace = tmp_path / "ws"
    (workspace / ".git").mkdir(parents=True)
    registry = discover_skills(cwd=workspace, workspace_root=workspace, user_root=user, warn=lambda _: None)
    tool = load_skill_tool(registry)

    def call(**arguments: str) -> object:
        valid, error = tool.validate(arguments)
        assert error is None, error
        return asyncio.run(tool.run(Invocation(id="c", name="load_skill", arguments=arguments, input=valid), None))  # type: ignore[arg-type]

    listed = call(name="release-notes")
    assert "references/style.md" in listed.text and "file set to its path" in listed.text  # type: ignore[attr-defined]
    read = call(name="release-notes", file="references/style.md")
    assert not read.is_error and "Use the past tense." in read.text  # type: ignore[attr-defined]
    for bad in ("../../secret.txt", str(tmp_path / "secret.txt"), "references/escape", "references", "missing.md"):
        refused = call(name="release-notes", file=bad)
        assert refused.is_error and refused.category == "unreadable_skill", (bad, refused.text)  # type: ignore[attr-defined]
        assert "not for the model" not in refused.text  # type: ignore[attr-defined]
