"""Skill discovery on real directory trees: the roots' order (project `.agents/skills` nearest first
up to the workspace root, `--skill-dir` in order, the user root last), bundled skills that nothing
on disk can replace, every frontmatter rule, roots and files that cannot be read, the bounds of the
walk, bodies left unread, and skills copied from other agents' public collections."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from osprey.skills import BUNDLED, Skill, SkillError, SkillRegistry, discover_skills, project_roots
from osprey.skills import discovery as discovery_module
from osprey.skills import frontmatter as frontmatter_module
from osprey.skills.frontmatter import HEAD_CHUNK_BYTES, MAX_FRONTMATTER_BYTES

PUBLIC = Path(__file__).parent / "data" / "skills" / "public"
RETURNS_WITHIN_S = 10.0


def write_skill(root: Path, directory: str, front: str | None = None, body: str = "Do the thing.\n", *,
                description: str = "Does a thing.") -> Path:
    """`root/directory/SKILL.md` with `front` as its frontmatter (default: the directory's name and
    `description`); the SKILL.md's path."""
    folder = root / directory
    folder.mkdir(parents=True, exist_ok=True)
    if front is None:
        front = f"name: {folder.name}\ndescription: {description}\n"
    path = folder / "SKILL.md"
    path.write_text(f"---\n{front}---\n{body}")
    return path


class Found:
    """One discovery's registry and warnings."""

    def __init__(self, registry: SkillRegistry, warnings: list[str]) -> None:
        self.registry = registry
        self.warnings = warnings

    def scope(self, name: str) -> str:
        skill = self.registry.find(name)
        assert skill is not None, (name, self.registry.names(), self.warnings)
        return skill.scope

    def path(self, name: str) -> str:
        skill = self.registry.find(name)
        assert skill is not None, (name, self.registry.names(), self.warnings)
        return skill.path

    def filesystem(self) -> list[str]:
        return [s.name for s in self.registry.skills if s.scope != "bundled"]

    def warned(self, *fragments: str) -> str:
        for warning in self.warnings:
            if all(fragment in warning for fragment in fragments):
                return warning
        raise AssertionError(f"no warning with {fragments}: {self.warnings}")


def discover(cwd: Path, workspace: Path | None = None, *, skill_dirs: tuple[Path, ...] = (), user_root: Path | None = None,
             **kwargs: Any) -> Found:
    warnings: list[str] = []
    registry = discover_skills(cwd=cwd, workspace_root=workspace or cwd, skill_dirs=skill_dirs, user_root=user_root,
                               warn=warnings.append, **kwargs)
    return Found(registry, warnings)


def returns(call: Callable[[], Any]) -> Any:
    """`call()`, run in a thread that must come back within RETURNS_WITHIN_S (a read that blocks fails)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(RETURNS_WITHIN_S)
    assert not thread.is_alive(), "discovery blocked"
    return out[0]


# ------------------------------------------------------------------ precedence


def test_project_roots_run_from_the_working_directory_up_to_the_workspace_root_and_not_above(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    workspace = outer / "ws"
    cwd = workspace / "a" / "b"
    cwd.mkdir(parents=True)
    write_skill(outer / ".agents" / "skills", "above-workspace")
    write_skill(workspace / ".agents" / "skills", "shared", description="from the workspace root")
    write_skill(workspace / ".agents" / "skills", "top-only")
    write_skill(workspace / "a" / ".agents" / "skills", "shared", description="from a")
    write_skill(cwd / ".agents" / "skills", "shared", description="from b")
    write_skill(cwd / ".agents" / "skills", "near-only")

    found = discover(cwd, workspace)

    assert found.warnings == []
    assert found.filesystem() == ["near-only", "shared", "top-only"]  # nearest root first, by name within a root
    shared = found.registry.find("shared")
    assert shared is not None and shared.description == "from b" and shared.scope == "project"
    assert shared.path == str(cwd.resolve() / ".agents" / "skills" / "shared" / "SKILL.md")
    assert shared.directory == str(cwd.resolve() / ".agents" / "skills" / "shared")
    assert found.registry.find("above-workspace") is None
    assert [s.description for s in found.registry.shadowed] == ["from a", "from the workspace root"]
    assert project_roots(cwd, workspace) == [d.resolve() / ".agents" / "skills" for d in (cwd, workspace / "a", workspace)]


def test_a_working_directory_outside_its_workspace_root_has_only_its_own_project_skills(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    cwd = tmp_path / "elsewhere" / "deep"
    write_skill(workspace / ".agents" / "skills", "in-workspace")
    write_skill(tmp_path / "elsewhere" / ".agents" / "skills", "parent-of-cwd")
    write_skill(cwd / ".agents" / "skills", "own")
    found = discover(cwd, workspace)
    assert found.filesystem() == ["own"]


def test_skill_dirs_come_after_the_project_in_their_order_and_the_user_root_last(tmp_path: Path) -> None:
    cwd, first, second, user = (tmp_path / n for n in ("ws", "first", "second", "user"))
    for root in (cwd / ".agents" / "skills", first, second, user):
        write_skill(root, "everywhere", description=f"from {root.name if root.name != 'skills' else 'project'}")
    for root in (first, second, user):
        write_skill(root, "not-in-project", description=f"from {root.name}")
    for root in (second, user):
        write_skill(root, "last-two", description=f"from {root.name}")
    write_skill(user, "user-only")

    found = discover(cwd, skill_dirs=(first, second), user_root=user)

    assert found.warnings == []
    described = {s.name: (s.scope, s.description) for s in found.registry.skills}
    assert described["everywhere"] == ("project", "from project")
    assert described["not-in-project"] == ("dir", "from first")
    assert described["last-two"] == ("dir", "from second")
    assert described["user-only"][0] == "user"
    assert found.filesystem() == ["everywhere", "not-in-project", "last-two", "user-only"]
    assert found.registry.names()[:2] == ["about-osprey", "bug-report"]


def test_the_same_directory_named_twice_is_read_once(tmp_path: Path) -> None:
    root = tmp_path / "team"
    write_skill(root, "one")
    (tmp_path / "alias").symlink_to(root)
    found = discover(tmp_path / "ws", skill_dirs=(root, tmp_path / "alias"), user_root=root)
    assert found.filesystem() == ["one"] and found.registry.shadowed == []


def test_bundled_skills_come_first_and_nothing_on_disk_replaces_them(tmp_path: Path) -> None:
    cwd, user = tmp_path / "ws", tmp_path / "user"
    project_copy = write_skill(cwd / ".agents" / "skills", "about-osprey", description="a project's own about-osprey")
    user_copy = write_skill(user, "bug-report", description="files bugs elsewhere")
    write_skill(user, "mine")

    found = discover(cwd, user_root=user)

    assert [(s.name, s.scope) for s in found.registry.skills] == [("about-osprey", "bundled"), ("bug-report", "bundled"), ("mine", "user")]
    assert found.path("about-osprey") == str(BUNDLED / "about-osprey" / "SKILL.md")
    found.warned(str(project_copy.parent), "bundled skill", "cannot replace")
    found.warned(str(user_copy), "bug-report", "bundled skill")
    assert "Osprey" in found.registry.load("about-osprey")


def test_the_bundled_skills_are_valid_and_say_what_they_must() -> None:
    found = discover(Path(tempfile.gettempdir()))
    assert found.warnings == []
    assert found.registry.names() == ["about-osprey", "bug-report"]
    about = found.registry.load("about-osprey")
    for fact in ("osprey agent", "--sandbox", "deny-untrusted", "osprey extensions trust", "hooks.toml", "--resume", "memory", "/debug"):
        assert fact in about, fact
    report = found.registry.load("bug-report")
    for step in ("osprey --version", "/debug", "gh auth status", "gh issue create", "issues/new?title=", "confirm"):
        assert step in report, step
    # It files nothing before the user says yes, and names no repository it was not given.
    assert report.index("Ask for confirmation") < report.index("gh issue create")
    assert "OWNER/REPO" in report and "Do not guess" in report


def test_the_prompt_block_lists_each_skill_on_one_line_and_is_empty_without_skills(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_skill(root, "folded", "name: folded\ndescription: >\n  Spans\n  two lines.\n")
    write_skill(root, "controls", 'name: controls\ndescription: "bell\\a and\\ttab\\e[2J"\n')
    found = discover(tmp_path / "ws", skill_dirs=(root,))
    block = found.registry.prompt_block()
    assert block.startswith("# Skills\n") and "load_skill" in block
    assert "\n- folded: Spans two lines.\n" in block + "\n"
    controls = next(line for line in block.splitlines() if line.startswith("- controls:"))
    assert controls == "- controls: bell and tab [2J"
    for name in ("about-osprey", "bug-report"):
        assert f"\n- {name}: " in block

    empty = tmp_path / "no-bundled"
    empty.mkdir()
    assert discover(tmp_path / "ws", bundled_root=empty).registry.prompt_block() == ""


def test_a_skill_is_frozen() -> None:
    skill = Skill(name="a", description="b", scope="user", path="/x/a/SKILL.md", directory="/x/a")
    with pytest.raises(ValidationError):
        skill.name = "c"  # type: ignore[misc]
    assert not SkillError("unknown_skill", "m").retryable


# ------------------------------------------------------------------ validation

LONG = "d" * 1024


@pytest.fixture(params=["libyaml", "pure-python"])
def yaml_parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The frontmatter parsed with PyYAML's libyaml parser, then with its pure-Python one (what an
    install without libyaml has)."""
    if request.param == "libyaml" and not yaml.__with_libyaml__:
        pytest.skip("this PyYAML was built without libyaml")
    if request.param == "pure-python":
        monkeypatch.setattr(yaml, "__with_libyaml__", False)
        monkeypatch.setattr(yaml, "CSafeLoader", None, raising=False)
    frontmatter_module._composer.cache_clear()
    yield request.param
    frontmatter_module._composer.cache_clear()

VALID: list[tuple[str, str, str]] = [
    # (directory, frontmatter, the name it gets)
    ("abc", "name: abc\ndescription: ok\n", "abc"),
    ("a-b-c", "name: a-b-c\ndescription: ok\n", "a-b-c"),
    ("1st-skill2", "name: 1st-skill2\ndescription: ok\n", "1st-skill2"),
    ("x" * 64, f"name: {'x' * 64}\ndescription: ok\n", "x" * 64),
    ("review", "name: team:review\ndescription: ok\n", "team:review"),
    ("review", "name: 'team-2:review'\ndescription: ok\n", "team-2:review"),
    ("quoted", "name: \"quoted\"\ndescription: 'single quoted'\n", "quoted"),
    ("123", "name: '123'\ndescription: a quoted number is text\n", "123"),
    ("long", f"name: long\ndescription: {LONG}\n", "long"),
    ("folded", "name: folded\ndescription: >\n  over\n  lines\n", "folded"),
    ("literal", "name: literal\ndescription: |\n  line one\n  line two\n", "literal"),
    ("unknown-fields", "name: unknown-fields\ndescription: ok\nlicense: MIT\ncompatibility: any\nallowed-tools:\n  - Bash\n  - Read\n"
                       "metadata:\n  version: 2\n  nested: {a: [1, 2]}\nuser-invocable: true\nmodel: something\n", "unknown-fields"),
    ("comments", "# a comment\nname: comments  # trailing\ndescription: ok\n", "comments"),
    ("123", "name: !!str 123\ndescription: an explicit tag\n", "123"),
    ("dates", "name: dates\ndescription: '2024-01-01'\n", "dates"),
    ("twice", "name: twice\ndescription: first\ndescription: the last one counts\n", "twice"),
    ("merged", "base: &base {name: merged, description: from a merge key}\n<<: *base\n", "merged"),
    ("flow", "{name: flow, description: a flow mapping}\n", "flow"),
]


@pytest.mark.parametrize(("directory", "front", "name"), VALID, ids=[f"{d[:20]}-{i}" for i, (d, _, _) in enumerate(VALID)])
def test_valid_skills(tmp_path: Path, directory: str, front: str, name: str, yaml_parser: str) -> None:
    write_skill(tmp_path / "root", directory, front)
    found = discover(tmp_path / "ws", skill_dirs=(tmp_path / "root",))
    assert found.warnings == []
    assert found.filesystem() == [name]
    skill = found.registry.find(name)
    assert skill is not None
    expected = yaml.safe_load(front)
    assert skill.description == str(expected.get("description") or expected["base"]["description"]).strip()


INVALID: list[tuple[str, str, str]] = [
    # (directory, frontmatter, a fragment of the warning)
    ("abc", "description: ok\n", "has no name"),
    ("abc", "name: ''\ndescription: ok\n", "has no name"),
    ("abc", "name: abc\n", "has no description"),
    ("abc", "name: abc\ndescription: '   '\n", "description is empty"),
    ("abc", "name: abc\ndescription: ''\n", "description is empty"),
    ("long", f"name: long\ndescription: {LONG}d\n", "1025 characters; at most 1024"),
    ("folded", "name: folded\ndescription: >\n  " + "w " * 513 + "\n", "1025 characters"),
    ("Abc", "name: Abc\ndescription: ok\n", "is not valid"),
    ("a--b", "name: a--b\ndescription: ok\n", "is not valid"),
    ("-ab", "name: -ab\ndescription: ok\n", "is not valid"),
    ("ab-", "name: ab-\ndescription: ok\n", "is not valid"),
    ("a_b", "name: a_b\ndescription: ok\n", "is not valid"),
    ("a.b", "name: a.b\ndescription: ok\n", "is not valid"),
    ("x" * 65, f"name: {'x' * 65}\ndescription: ok\n", "is not valid"),
    ("abc", "name: abd\ndescription: ok\n", "does not match its directory"),
    ("c", "name: a:b:c\ndescription: ok\n", "more than one colon"),
    ("b", "name: ':b'\ndescription: ok\n", "is not valid"),
    ("team", "name: 'team:'\ndescription: ok\n", "is not valid"),
    ("review", "name: Team:review\ndescription: ok\n", "is not valid"),
    ("review", "name: review:team\ndescription: ok\n", "does not match its directory"),
    ("123", "name: 123\ndescription: ok\n", "name is a number, not text"),
    ("abc", "name: true\ndescription: ok\n", "name is a true/false value"),
    ("abc", "name: [abc]\ndescription: ok\n", "name is a list"),
    ("abc", "name: abc\ndescription: [one, two]\n", "description is a list"),
    ("abc", "name: abc\ndescription: 2024-01-01\n", "description is a date"),
    ("abc", "name: abc\ndescription: {a: 1}\n", "description is a mapping"),
    ("abc", "name: abc\ndescription: yes\n", "description is a true/false value"),
    ("abc", "name: abc\ndescription: 1.5\n", "description is a number"),
    ("abc", "name: abc\ndescription: null\n", "has no description"),
    ("abc", "name: abc\ndescription: 2024-02-30\n", "not valid YAML"),
    ("abc", "name: abc\ndescription: !!binary aGVsbG8=\n", "description is a bytes"),
    ("abc", "name: abc\ndescription: ok\n...\nname: second-document\n", "not valid YAML"),
    ("abc", "name: [abc\ndescription: ok\n", "not valid YAML"),
    ("abc", "name: abc\ndescription: ok\n\tbad: tab\n", "not valid YAML"),
    ("abc", "name: abc\ndescription: *nowhere\n", "not valid YAML"),
    ("abc", "- name\n- description\n", "a YAML list, not a mapping"),
    ("abc", "just words\n", "a YAML string, not a mapping"),
    ("abc", "", "has no name"),
]


@pytest.mark.parametrize(("directory", "front", "fragment"), INVALID, ids=[f"{f[:24]}-{i}" for i, (_, _, f) in enumerate(INVALID)])
def test_invalid_skills_are_warned_about_and_skipped(tmp_path: Path, directory: str, front: str, fragment: str, yaml_parser: str) -> None:
    root = tmp_path / "root"
    path = write_skill(root, directory, front)
    write_skill(root, "zz-good")
    found = discover(tmp_path / "ws", skill_dirs=(root,))
    assert found.filesystem() == ["zz-good"]  # discovery goes on
    warning = found.warned(str(path), fragment)
    assert "skipped" in warning and "\n" not in warning


@pytest.mark.parametrize(("content", "fragment"), [
    (b"# Title\n\nNo frontmatter at all.\n", "no frontmatter"),
    (b"", "no frontmatter"),
    (b"\n---\nname: abc\ndescription: ok\n---\n", "no frontmatter"),
    (b"--- x\nname: abc\ndescription: ok\n---\n", "no frontmatter"),
    (b"---\nname: abc\ndescription: ok\n", "no closing `---` line"),
    (b"---\nname: abc\ndescription: ok\n--- not a delimiter\nbody\n", "no closing `---` line"),
    (b"---\nname: abc\ndescription: ok\n  ---\nbody\n", "no closing `---` line"),
    (b"---\n# " + b"x" * MAX_FRONTMATTER_BYTES + b"\nname: abc\ndescription: ok\n---\nbody\n", "within its first 16 KiB"),
    (b"---\nname: abc\ndescription: caf\xe9\n---\n", "not UTF-8"),
], ids=["markdown", "empty", "blank-first-line", "text-after-dashes", "unclosed", "closing-with-text", "indented-closing", "over-16-KiB",
        "latin-1"])
def test_files_without_a_frontmatter_block_are_skipped(tmp_path: Path, content: bytes, fragment: str) -> None:
    folder = tmp_path / "root" / "abc"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_bytes(content)
    found = discover(tmp_path / "ws", skill_dirs=(tmp_path / "root",))
    assert found.filesystem() == []
    found.warned(str(folder / "SKILL.md"), fragment)


@pytest.mark.parametrize("content", [
    b"---\r\nname: abc\r\ndescription: ok\r\n---\r\nbody\r\n",
    b"\xef\xbb\xbf---\nname: abc\ndescription: ok\n---\nbody\n",
    b"---\nname: abc\ndescription: ok\n---",
    b"---  \nname: abc\ndescription: ok\n---\t\nbody\n",
    b"---\nname: abc\ndescription: ok\n---\n---\nmore dashes in the body\n",
    b"---\nname: abc\ndescription: |\n  ---\n  dashes, indented, are text\n---\nbody\n",
    b"---\n# " + b"x" * (MAX_FRONTMATTER_BYTES - 100) + b"\nname: abc\ndescription: ok\n---\nbody\n",
], ids=["crlf", "bom", "closing-at-end-of-file", "trailing-blanks", "dashes-in-body", "dashes-in-a-literal", "just-under-16-KiB"])
def test_frontmatter_variants_that_are_valid(tmp_path: Path, content: bytes) -> None:
    folder = tmp_path / "root" / "abc"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_bytes(content)
    found = discover(tmp_path / "ws", skill_dirs=(tmp_path / "root",))
    assert found.warnings == [] and found.filesystem() == ["abc"]


def test_the_yaml_is_parsed_with_the_safe_loader(tmp_path: Path) -> None:
    front = "name: abc\ndescription: !!python/object/apply:os.system ['touch pwned']\n"
    path = write_skill(tmp_path / "root", "abc", front)
    found = discover(tmp_path / "ws", skill_dirs=(tmp_path / "root",))
    found.warned(str(path), "not valid YAML")
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_aliases_and_deep_nesting_stay_bounded(tmp_path: Path) -> None:
    root = tmp_path / "root"
    laughs = "name: laughs\ndescription: ok\na: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))
    write_skill(root, "laughs", laughs)
    deep = write_skill(root, "deep", "name: deep\ndescription: ok\nx: " + "[" * 5000 + "]" * 5000 + "\n")
    found = returns(lambda: discover(tmp_path / "ws", skill_dirs=(root,)))
    assert "laughs" in found.filesystem()  # aliases share one object: nothing is expanded
    if "deep" not in found.filesystem():
        found.warned(str(deep), "not valid YAML")


# ------------------------------------------------------------------ roots and files that cannot be read


def test_a_skill_dir_that_is_a_file_or_missing_is_a_warning_and_the_rest_goes_on(tmp_path: Path) -> None:
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    good = tmp_path / "good"
    write_skill(good, "fine")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)  # stat fails with ELOOP
    found = discover(tmp_path / "ws", skill_dirs=(a_file, tmp_path / "missing", loop, good), user_root=tmp_path / "no-user-root")
    assert found.filesystem() == ["fine"]
    found.warned(str(a_file), "not a directory")
    found.warned(str(tmp_path / "missing"), "does not exist")
    found.warned(str(loop), "cannot be read")
    assert not any("no-user-root" in w for w in found.warnings)  # an absent user root is normal
    assert len(found.warnings) == 3


def test_a_project_skills_path_that_is_a_file_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "ws" / ".agents").mkdir(parents=True)
    (tmp_path / "ws" / ".agents" / "skills").write_text("not a directory")
    found = discover(tmp_path / "ws")
    found.warned(".agents/skills", "not a directory")


def discover_as_another_user(cwd: Path, skill_dirs: tuple[Path, ...]) -> tuple[list[str], list[str]]:
    """The names and warnings of a discovery run where permissions apply: as this process when it
    is not root, else in a forked child that has become `nobody` (root reads any directory)."""
    def run() -> tuple[list[str], list[str]]:
        found = discover(cwd, skill_dirs=skill_dirs)
        return found.registry.names(), found.warnings

    if os.geteuid() != 0:
        return run()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, discover, report, and leave without running pytest's exit code
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            names, warnings = run()
            os.write(write_end, json.dumps([names, warnings]).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0 and data, "the child failed"
    names, warnings = json.loads(data)
    return names, warnings


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temporary directory another user can reach (pytest's own is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="osprey-skills-"))
    path.chmod(0o755)
    yield path
    for folder, dirs, _ in os.walk(path):
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o755)
    shutil.rmtree(path)


def test_directories_without_permission_are_warnings_and_the_rest_goes_on(shared_tmp: Path) -> None:
    good, closed, partly = shared_tmp / "good", shared_tmp / "closed", shared_tmp / "partly"
    write_skill(good, "fine")
    write_skill(closed, "hidden-from-me")
    write_skill(partly, "open-one")
    write_skill(partly, "shut")
    for path in shared_tmp.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    closed.chmod(0)
    (partly / "shut").chmod(0)
    names, warnings = discover_as_another_user(shared_tmp, (closed, partly, good))
    assert names == ["about-osprey", "bug-report", "open-one", "fine"]
    assert any(str(closed) in w and "Permission denied" in w for w in warnings), warnings
    assert any(str(partly / "shut") in w and "Permission denied" in w for w in warnings), warnings


def test_a_fifo_or_a_device_as_skill_md_is_refused_without_blocking(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "piped").mkdir(parents=True)
    os.mkfifo(root / "piped" / "SKILL.md")  # opening it would block with no writer
    (root / "zeros").mkdir()
    (root / "zeros" / "SKILL.md").symlink_to("/dev/zero")  # reading it would never end
    write_skill(root, "fine")
    found = returns(lambda: discover(tmp_path / "ws", skill_dirs=(root,)))
    assert found.filesystem() == ["fine"]
    found.warned(str(root / "piped" / "SKILL.md"), "not a regular file")
    found.warned(str(root / "zeros" / "SKILL.md"), "not a regular file")


def rchar() -> int:
    """Bytes this process has read through read(2) and its kin, as the kernel counts them."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counting a process's reads needs /proc/self/io (Linux)")
def test_discovery_reads_the_frontmatter_and_not_the_body(tmp_path: Path) -> None:
    root = tmp_path / "root"
    body_bytes = 64 * 1024 * 1024
    paths = []
    for n in range(5):
        path = write_skill(root, f"huge-{n}", body="")
        with path.open("r+b") as f:
            f.truncate(body_bytes)  # a 64 MiB body (sparse: no disk used)
        paths.append(path)
    registry = discover(tmp_path / "ws", skill_dirs=(root,), bundled_root=tmp_path / "none").registry  # warm the imports
    before = rchar()
    registry = returns(lambda: discover(tmp_path / "ws", skill_dirs=(root,), bundled_root=tmp_path / "none").registry)
    read = rchar() - before
    assert registry.names() == [f"huge-{n}" for n in range(5)]
    frontmatter = len("---\nname: huge-0\ndescription: Does a thing.\n---\n")
    assert read < 5 * (frontmatter + HEAD_CHUNK_BYTES), read  # the kernel's count: no body was read
    assert registry.bytes_read <= 5 * HEAD_CHUNK_BYTES
    # Loading is where a body is read, and only up to its bound.
    with pytest.raises(SkillError) as info:
        registry.load("huge-0")
    assert info.value.category == "unreadable_skill" and "256 KiB" in info.value.message


def test_a_long_frontmatter_is_read_in_chunks_up_to_its_end_only(tmp_path: Path) -> None:
    description = "word " * 200
    path = write_skill(tmp_path / "root", "chunked", f"name: chunked\ndescription: {description}\nnotes: '{'n' * 3000}'\n", body="b" * 100_000)
    found = discover(tmp_path / "ws", skill_dirs=(tmp_path / "root",), bundled_root=tmp_path / "none")
    assert found.registry.names() == ["chunked"]
    head = path.read_bytes().index(b"\n---\n") + 5
    assert head < found.registry.bytes_read <= head + HEAD_CHUNK_BYTES


# ------------------------------------------------------------------ the walk


def test_skills_are_found_up_to_three_directories_deep_and_hidden_ones_are_not_searched(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_skill(root, "top")
    write_skill(root / "group", "grouped")
    write_skill(root / "group" / "sub", "deepest")
    write_skill(root / "a" / "b" / "c", "too-deep")
    write_skill(root / ".hidden", "in-hidden")
    write_skill(root, ".dot-skill", "name: dot-skill\ndescription: x\n")
    write_skill(root / "top" / "scripts", "inside-a-skill")  # a skill's directory is not searched
    found = discover(tmp_path / "ws", skill_dirs=(root,))
    assert sorted(found.filesystem()) == ["deepest", "grouped", "top"]
    assert found.warnings == []


def test_a_root_that_is_itself_a_skill_directory_is_that_skill(tmp_path: Path) -> None:
    write_skill(tmp_path, "solo")
    found = discover(tmp_path / "ws", skill_dirs=(tmp_path / "solo",))
    assert found.filesystem() == ["solo"]


def test_symbolic_link_loops_end_and_each_skill_is_found_once(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_skill(root / "group", "one")
    (root / "group" / "back-to-root").symlink_to(root)
    (root / "group" / "self").symlink_to(root / "group")
    (root / "again").symlink_to(root / "group")
    (root / "dangling").symlink_to(tmp_path / "nothing")
    found = returns(lambda: discover(tmp_path / "ws", skill_dirs=(root,)))
    assert found.filesystem() == ["one"]
    assert found.registry.shadowed == []
    assert found.warnings == []


def test_project_skills_may_not_lead_outside_the_workspace_but_user_skills_may(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write_skill(outside, "linked-dir")
    write_skill(outside, "linked-file")
    workspace = tmp_path / "ws"
    skills = workspace / ".agents" / "skills"
    skills.mkdir(parents=True)
    (skills / "linked-dir").symlink_to(outside / "linked-dir")
    (skills / "linked-file").mkdir()
    (skills / "linked-file" / "SKILL.md").symlink_to(outside / "linked-file" / "SKILL.md")
    write_skill(workspace / "shared-skills", "inside-link")
    (skills / "inside-link").symlink_to(workspace / "shared-skills" / "inside-link")
    found = discover(workspace)
    assert found.filesystem() == ["inside-link"]
    found.warned(str(skills / "linked-dir"), "outside the workspace")
    found.warned(str(skills / "linked-file" / "SKILL.md"), "outside the workspace")

    user = tmp_path / "user"
    user.mkdir()
    (user / "linked-dir").symlink_to(outside / "linked-dir")
    found = discover(tmp_path / "elsewhere", user_root=user)
    assert found.filesystem() == ["linked-dir"] and found.warnings == []


def test_each_root_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discovery_module, "MAX_SKILLS_PER_ROOT", 3)
    root, other = tmp_path / "root", tmp_path / "other"
    for n in range(5):
        write_skill(root, f"s{n}")
    write_skill(other, "next-root")
    found = discover(tmp_path / "ws", skill_dirs=(root, other))
    assert found.filesystem() == ["s0", "s1", "s2", "next-root"]
    found.warned(str(root), "more than 3 skills")

    monkeypatch.setattr(discovery_module, "MAX_ENTRIES_PER_ROOT", 10)
    many = tmp_path / "many"
    for n in range(30):
        (many / f"d{n:02}").mkdir(parents=True)
    found = discover(tmp_path / "ws", skill_dirs=(many,))
    found.warned(str(many), "more than 10 entries")


def test_two_hundred_skills_are_discovered_quickly(tmp_path: Path) -> None:
    roots = [tmp_path / f"root{n}" for n in range(4)]
    for n in range(200):
        write_skill(roots[n % 4], f"skill-{n}", description=f"Skill number {n}. " * 10, body="body\n" * 2000)
    discover(tmp_path / "ws", skill_dirs=tuple(roots))
    start = time.perf_counter()
    found = discover(tmp_path / "ws", skill_dirs=tuple(roots))
    elapsed = time.perf_counter() - start
    assert len(found.filesystem()) == 200 and found.warnings == []
    assert elapsed < 1.0, elapsed  # about 15 ms on a 2-core machine (bench/skills_startup.py); generous for a loaded one


# ------------------------------------------------------------------ skills from other agents' collections


def frontmatter_and_body(path: Path) -> tuple[dict[str, Any], str]:
    text = path.read_text(encoding="utf-8")
    _, front, body = text.split("---\n", 2)
    return yaml.safe_load(front), body


PUBLIC_SKILLS = {
    "webapp-testing": ("dir", PUBLIC / "anthropics" / "webapp-testing"),
    "gh-address-comments": ("dir", PUBLIC / "openai" / "gh-address-comments"),
    "differential-review": ("dir", PUBLIC / "trailofbits" / "differential-review"),
    "trailmark-review-gate": ("dir", PUBLIC / "trailofbits" / "trailmark-review-gate"),
}


def test_skills_from_public_collections_load_unchanged() -> None:
    roots = (PUBLIC / "anthropics", PUBLIC / "openai", PUBLIC / "trailofbits")
    found = discover(PUBLIC, skill_dirs=roots)
    assert found.warnings == []
    assert found.filesystem() == list(PUBLIC_SKILLS)
    for name, (scope, directory) in PUBLIC_SKILLS.items():
        skill = found.registry.find(name)
        assert skill is not None and skill.scope == scope
        assert skill.path == str(directory / "SKILL.md")
        fields, body = frontmatter_and_body(directory / "SKILL.md")
        assert skill.description == fields["description"].strip()
        loaded = found.registry.load(name)
        assert body.strip("\n") in loaded
        assert "---\nname:" not in loaded
    # The YAML they use: a folded description, allowed-tools as a list, nested metadata, a license.
    differential = found.registry.find("differential-review")
    assert differential is not None and "\n" not in differential.description and differential.description.startswith("Performs security-focused")
    assert frontmatter_and_body(PUBLIC_SKILLS["trailmark-review-gate"][1] / "SKILL.md")[0]["allowed-tools"][0] == "Bash"
    assert "short-description" in frontmatter_and_body(PUBLIC_SKILLS["gh-address-comments"][1] / "SKILL.md")[0]["metadata"]
    # Their own files are listed for the model to read.
    assert "- scripts/with_server.py" in found.registry.load("webapp-testing")
    assert "- examples/element_discovery.py" in found.registry.load("webapp-testing")
    assert "- references/gate-rules.md" in found.registry.load("trailmark-review-gate")
    assert "- scripts/fetch_comments.py" in found.registry.load("gh-address-comments")
    assert "- LICENSE.txt" in found.registry.load("webapp-testing")


def test_the_public_collections_as_one_grouped_root_and_their_licences_are_kept() -> None:
    found = discover(PUBLIC, skill_dirs=(PUBLIC,))
    assert found.warnings == []
    assert sorted(found.filesystem()) == sorted(PUBLIC_SKILLS)
    for licence in (PUBLIC / "anthropics" / "webapp-testing" / "LICENSE.txt", PUBLIC / "openai" / "gh-address-comments" / "LICENSE.txt"):
        assert "Apache License" in licence.read_text()
    assert "Attribution-ShareAlike 4.0" in (PUBLIC / "trailofbits" / "LICENSE").read_text()
