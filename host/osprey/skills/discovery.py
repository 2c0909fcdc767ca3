"""Skill discovery: the skill roots in order, each skill's frontmatter checked, into a registry.

Roots, first to last:

1. the project `.agents/skills` directories, from the working directory up to the workspace
   boundary (the working directory's first);
2. each `--skill-dir` (and `OSPREY_SKILL_DIR`), in order;
3. the user's skill root (`$OSPREY_HOME/skills`).

The first valid skill with a given name wins; a later one with that name is skipped quietly (it is
kept in `SkillRegistry.shadowed`). The bundled skills are put before all of them, so a skill on
disk cannot replace `about-osprey` or `bug-report`: one that tries is skipped with a warning. A
root that cannot be read, or a skill that is not valid, is a warning; discovery goes on.

A skill is a directory holding `SKILL.md`, found at most MAX_DEPTH directories below its root
(`ROOT/NAME/SKILL.md`, or grouped: `ROOT/GROUP/NAME/SKILL.md`); a directory that holds a
`SKILL.md` is not searched further, and directories whose names start with `.` are not searched.
A root that holds a `SKILL.md` itself is that one skill. Symbolic links to directories are
followed, a link back to a directory above (a loop) is not. Only the frontmatter of each SKILL.md is read here; the body is read by `SkillRegistry.load`. In
project roots, a skill whose real path leaves the workspace (through a symbolic link) is skipped,
so a repository cannot have a file of the user's sent to the model.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..errors import OspreyError
from ..files import FileRefused, read_file
from .cache import FrontmatterCache, Reading
from .frontmatter import FrontmatterError, parse, read_head, skill_fields, split

Scope = Literal["bundled", "project", "dir", "user"]
SkillErrorCategory = Literal["unknown_skill", "unreadable_skill"]

BUNDLED = Path(__file__).resolve().parent / "bundled"
PROJECT_SKILLS = (".agents", "skills")  # below each project directory
SKILL_FILE = "SKILL.md"
MAX_DEPTH = 3  # directories below a root a SKILL.md may be found in
MAX_SKILLS_PER_ROOT = 500
MAX_ENTRIES_PER_ROOT = 10_000  # directory entries looked at in one root
MAX_SKILLS = 1_000  # in the whole registry
MAX_SKILL_FILE_BYTES = 256 * 1024  # a SKILL.md, read whole by load
MAX_LISTED_FILES = 100  # a skill's other files listed by load
MAX_LISTED_ENTRIES = 2_000  # directory entries looked at to list them
MAX_LISTED_DEPTH = 4
MAX_NAMES_IN_ERRORS = 100

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]+")


class Skill(BaseModel):
    """A discovered skill: what the registry, the system prompt and `/skill NAME` show."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built at the first skill found

    name: str
    description: str
    scope: Scope
    path: str  # the SKILL.md
    directory: str  # the skill's directory (the SKILL.md's parent)


class SkillError(OspreyError):
    """A skill that cannot be loaded: `category` is unknown_skill or unreadable_skill. Not worth
    retrying with the same name: the message says what to do instead."""

    retryable = False

    def __init__(self, category: SkillErrorCategory, message: str) -> None:
        super().__init__(message)
        self.category: SkillErrorCategory = category
        self.message = message


def one_line(text: str, limit: int = 1000) -> str:
    """`text` on one line without control characters, cut to `limit` characters."""
    text = _CONTROL.sub(" ", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clean(text: str) -> str:
    """A description as the prompt shows it: one line, whitespace runs made single spaces."""
    return " ".join(_CONTROL.sub(" ", text).split())


@dataclass(frozen=True)
class _Root:
    path: Path
    scope: Scope
    boundary: str | None = None  # the real workspace root, for project roots
    explicit: bool = False  # named by the person (--skill-dir): missing is worth a warning


@dataclass
class SkillRegistry:
    """The skills of a session, bundled ones first; `load` reads a skill's body by name."""

    skills: list[Skill] = field(default_factory=list)
    # Valid skills left out because an earlier one had their name (first wins).
    shadowed: list[Skill] = field(default_factory=list)
    # Bytes read from SKILL.md files by discovery: their frontmatter, never their bodies.
    bytes_read: int = 0
    _by_name: dict[str, Skill] = field(default_factory=dict, repr=False)
    _boundaries: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for skill in self.skills:
            self._by_name.setdefault(skill.name, skill)

    def find(self, name: str) -> Skill | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return [skill.name for skill in self.skills]

    def prompt_block(self) -> str:
        """The system prompt's skills section ("" when there are none)."""
        if not self.skills:
            return ""
        lines = [
            "# Skills",
            "",
            "Skills are instructions for particular kinds of task, kept in files. When the task at hand matches a skill's "
            "description, call `load_skill` with the skill's name before doing the task, then follow what it says; it lists "
            "the skill's other files (scripts, references), which you read or run from the skill's directory when it tells you "
            "to. Only the names below can be loaded.",
            "",
        ]
        lines.extend(f"- {skill.name}: {_clean(skill.description)}" for skill in self.skills)
        return "\n".join(lines)

    def _names_text(self) -> str:
        names = self.names()
        shown = ", ".join(names[:MAX_NAMES_IN_ERRORS])
        if len(names) > MAX_NAMES_IN_ERRORS:
            shown += f", and {len(names) - MAX_NAMES_IN_ERRORS} more"
        return shown or "none"

    def load(self, name: str) -> str:
        """The skill's instructions: its body (without the frontmatter), then the list of its other
        files. Raises SkillError unknown_skill (no skill has that name) or unreadable_skill (its
        SKILL.md cannot be read now); both list the available names."""
        skill = self.find(name)
        if skill is None:
            raise SkillError("unknown_skill", one_line(
                f"there is no skill named {name!r}. Available skills: {self._names_text()}. "
                "Use one of these names exactly; the same name again will fail the same way.", 4000))
        data = self._read(skill)
        try:
            _, body_at = split(data)
        except FrontmatterError as exc:
            raise self._unreadable(skill, f"{exc} (it changed since the skills were discovered)") from None
        body = data[body_at:].decode("utf-8", errors="replace").strip("\n")
        files, more = _other_files(Path(skill.directory))
        parts = [f"Skill {skill.name} ({skill.scope} skill, {skill.path})", "", body, ""]
        if files:
            parts.append(f"Other files of this skill, relative to its directory {skill.directory} "
                         f"(read one with load_skill name={skill.name!r} and file set to its path below, which works wherever "
                         "the skill is; run scripts from that directory):")
            parts.extend(f"- {rel}" for rel in files)
            if more:
                parts.append(f"- (more files; only the first {MAX_LISTED_FILES} are listed)")
        else:
            parts.append(f"This skill has no other files (its directory: {skill.directory}).")
        return "\n".join(parts)

    def read_other(self, name: str, relative: str) -> str:
        """One of a skill's other files, by its path relative to the skill's directory (as `load`
        lists it): a regular file inside that directory, its first MAX_SKILL_FILE_BYTES bytes as
        text. Raises SkillError unknown_skill, or unreadable_skill for a path outside the skill,
        missing, or not a regular file."""
        skill = self.find(name)
        if skill is None:
            self.load(name)  # raises unknown_skill with the names
            raise AssertionError("unreachable")
        directory = os.path.realpath(skill.directory)
        if not relative or "\x00" in relative or os.path.isabs(relative) or len(relative) > 4096:
            raise self._unreadable(skill, f"{relative[:200]!r} is not a path relative to the skill's directory")
        real = os.path.realpath(os.path.join(directory, relative))
        boundary = self._boundaries.get(skill.name)
        if not _inside(real, directory) or real == directory or (boundary is not None and not _inside(real, boundary)):
            raise self._unreadable(skill, f"{relative[:200]!r} is not inside the skill's directory, so it is not read")
        try:
            data = read_file(real, MAX_SKILL_FILE_BYTES, follow_symlinks=True, cut=True)
        except FileRefused as exc:
            raise self._unreadable(skill, f"{relative[:200]}: {_refusal(exc, MAX_SKILL_FILE_BYTES)}") from None
        if data is None:
            raise self._unreadable(skill, f"{relative[:200]!r} is not a file of this skill")
        text = data.decode("utf-8", errors="replace")
        cut = f"\n[cut at {MAX_SKILL_FILE_BYTES // 1024} KiB]" if len(data) >= MAX_SKILL_FILE_BYTES else ""
        return f"{skill.name}/{relative} ({real}):\n{text}{cut}"

    def _unreadable(self, skill: Skill, why: str) -> SkillError:
        return SkillError("unreadable_skill", one_line(
            f"the skill {skill.name!r} cannot be loaded: {skill.path}: {why}. Retrying will not help; tell the user, "
            f"or use another skill. Available skills: {self._names_text()}.", 4000))

    def _read(self, skill: Skill) -> bytes:
        boundary = self._boundaries.get(skill.name)
        if boundary is not None and not _inside(os.path.realpath(skill.path), boundary):
            raise self._unreadable(skill, "it now leads outside the workspace (a symbolic link), so it is not read")
        try:
            data = read_file(skill.path, MAX_SKILL_FILE_BYTES, follow_symlinks=True)
        except FileRefused as exc:
            raise self._unreadable(skill, _refusal(exc, MAX_SKILL_FILE_BYTES)) from None
        if data is None:
            raise self._unreadable(skill, "the file is gone (removed since the skills were discovered)")
        return data


def _refusal(exc: FileRefused, limit: int) -> str:
    if exc.reason == "not_regular":
        return "not a regular file (a FIFO, device or socket), so it is not read"
    if exc.reason == "too_large":
        return f"larger than {limit // 1024} KiB, the most Osprey reads of a SKILL.md"
    if exc.reason == "symlink":
        return "a symbolic link, not followed"
    return f"cannot be read: {exc.strerror}"


def _inside(real: str, boundary: str) -> bool:
    return real == boundary or real.startswith(boundary.rstrip(os.sep) + os.sep)


def _other_files(directory: Path) -> tuple[list[str], bool]:
    """A skill's files other than its SKILL.md, relative to its directory, sorted, at most
    MAX_LISTED_FILES (and whether there were more). Hidden entries and symbolic links to
    directories are left out."""
    found: list[str] = []
    scanned = 0
    more = False

    def walk(path: str, rel: str, depth: int) -> None:
        nonlocal scanned, more
        try:
            with os.scandir(path) as entries:
                items = []
                for entry in entries:
                    scanned += 1
                    if scanned > MAX_LISTED_ENTRIES:
                        more = True
                        break
                    if not entry.name.startswith("."):
                        items.append(entry)
        except OSError:
            return
        for entry in sorted(items, key=lambda e: e.name):
            if len(found) >= MAX_LISTED_FILES:
                more = True
                return
            name = f"{rel}{entry.name}"
            try:
                linked, is_dir = entry.is_symlink(), entry.is_dir()
            except OSError:
                continue
            if linked and is_dir:
                continue  # a link to a directory: not followed
            if is_dir:
                if depth < MAX_LISTED_DEPTH:
                    walk(entry.path, name + "/", depth + 1)
                else:
                    more = True
            elif name != SKILL_FILE:
                found.append(name)

    walk(os.fspath(directory), "", 1)
    return found, more


_REFUSED = Reading(error="")  # a SKILL.md that cannot be read: warned about, skipped


class _Scan:
    """The state of one discovery: the warnings' sink, the frontmatter cache and what has been found."""

    def __init__(self, warn: Callable[[str], None], cache: FrontmatterCache) -> None:
        self.warn = warn
        self.cache = cache
        self.found: list[tuple[Skill, str | None]] = []
        self.bytes_read = 0
        self.roots: set[str] = set()

    def root(self, root: _Root) -> None:
        try:
            st = os.stat(root.path)
        except FileNotFoundError:
            if root.explicit:
                self.warn(one_line(f"skills directory {root.path}: it does not exist; no skills are read from it"))
            return
        except OSError as exc:
            self.warn(one_line(f"skills directory {root.path}: cannot be read ({exc.strerror}); its skills are skipped"))
            return
        if not stat.S_ISDIR(st.st_mode):
            self.warn(one_line(f"skills directory {root.path}: not a directory; no skills are read from it"))
            return
        real = os.path.realpath(root.path)
        if root.boundary is not None and not _inside(real, root.boundary):
            self.warn(one_line(f"skills directory {root.path}: it leads outside the workspace (a symbolic link); its skills are skipped"))
            return
        if real in self.roots:
            return  # the same directory named twice: its skills are there already
        self.roots.add(real)
        budget = _Budget()
        if not self.candidate(root, os.fspath(root.path), os.path.basename(real), budget):
            self.directory(root, os.fspath(root.path), real, 1, budget)
        if budget.entries > MAX_ENTRIES_PER_ROOT:
            self.warn(one_line(f"skills directory {root.path}: more than {MAX_ENTRIES_PER_ROOT} entries; the rest are not searched for skills"))
        if budget.skills >= MAX_SKILLS_PER_ROOT and budget.more:
            self.warn(one_line(f"skills directory {root.path}: more than {MAX_SKILLS_PER_ROOT} skills; only the first {MAX_SKILLS_PER_ROOT} by name are read"))

    def directory(self, root: _Root, path: str, real: str, depth: int, budget: _Budget) -> None:
        """The skills below `path` (whose real path is `real`), `depth` levels below the root."""
        names: list[tuple[str, bool]] = []
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    budget.entries += 1
                    if budget.entries > MAX_ENTRIES_PER_ROOT:
                        break
                    if entry.name.startswith("."):
                        continue
                    try:
                        if entry.is_dir():  # follows a symbolic link
                            names.append((entry.name, entry.is_symlink()))
                    except OSError:
                        continue
        except OSError as exc:
            self.warn(one_line(f"skills directory {path}: cannot be read ({exc.strerror}); its skills are skipped"))
            return
        names.sort()
        for name, linked in names:
            if budget.skills >= MAX_SKILLS_PER_ROOT:
                budget.more = True
                return
            child = os.path.join(path, name)
            child_real = os.path.realpath(child) if linked else os.path.join(real, name)
            if child_real in budget.visited:
                continue  # reached already through a symbolic link
            if linked:
                if child_real == real or _inside(real, child_real):
                    continue  # a loop: a link to this directory or one above it
                if root.boundary is not None and not _inside(child_real, root.boundary):
                    self.warn(one_line(f"skill directory {child}: it leads outside the workspace (a symbolic link); it is skipped"))
                    continue
            budget.visited.add(child_real)
            if not self.candidate(root, child, name, budget) and depth < MAX_DEPTH:
                self.directory(root, child, child_real, depth + 1, budget)

    def candidate(self, root: _Root, directory: str, name: str, budget: _Budget) -> bool:
        """Whether `directory` holds a SKILL.md (then it is a skill, valid or not, and is not
        searched further); a valid one is added to what was found."""
        path = os.path.join(directory, SKILL_FILE)
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if stat.S_ISLNK(st.st_mode) and root.boundary is not None and not _inside(os.path.realpath(path), root.boundary):
            self.warn(one_line(f"skill {path}: it leads outside the workspace (a symbolic link); it is skipped"))
            return True
        budget.skills += 1
        reading = self.read(path, st)
        if reading is None:
            return False  # a directory named SKILL.md, or gone since
        if reading is _REFUSED:
            return True  # warned already
        try:
            if reading.error is not None:
                raise FrontmatterError(reading.error)
            skill_name, description = skill_fields(reading.fields or {}, name)
        except FrontmatterError as exc:
            self.warn(one_line(f"skill {path}: {exc}; it is skipped"))
            return True
        skill = Skill(name=skill_name, description=description, scope=root.scope, path=path, directory=directory)
        self.found.append((skill, root.boundary))
        return True


    def read(self, path: str, st: os.stat_result) -> Reading | None:
        """What the frontmatter of the SKILL.md at `path` (whose lstat is `st`) gives, from the
        cache when the file is as it was read before; None when no file is there. A file that
        cannot be read is a warning, and `_REFUSED`."""
        target: os.stat_result | None = st
        try:
            if stat.S_ISLNK(st.st_mode):
                target = os.stat(path)
        except OSError:
            target = None  # read_head says why
        regular = target if target is not None and stat.S_ISREG(target.st_mode) else None
        if regular is not None:
            cached = self.cache.lookup(path, regular)
            if cached is not None:
                return cached
        try:
            head = read_head(path)
        except FileRefused as exc:
            self.warn(one_line(f"skill {path}: {_refusal(exc, MAX_SKILL_FILE_BYTES)}; it is skipped"))
            return _REFUSED
        if head is None:
            return None
        self.bytes_read += len(head.data)
        try:
            fields, _ = parse(head)
        except FrontmatterError as exc:
            reading = Reading(error=str(exc))
        else:
            reading = Reading(fields=fields)
        if regular is not None:
            self.cache.store(path, regular, reading)
        return reading


@dataclass
class _Budget:
    entries: int = 0
    skills: int = 0
    more: bool = False
    visited: set[str] = field(default_factory=set)


def project_roots(cwd: Path, workspace_root: Path) -> list[Path]:
    """The project skill roots: `.agents/skills` of the working directory and of each directory
    above it up to the workspace root (nearest first). A working directory outside the workspace
    root has only its own."""
    directory = Path(os.path.realpath(cwd))
    top = Path(os.path.realpath(workspace_root))
    chain: list[Path] = []
    while True:
        chain.append(directory)
        if directory == top or directory.parent == directory:
            break
        directory = directory.parent
    if top not in chain:
        chain = [Path(os.path.realpath(cwd))]
    return [d.joinpath(*PROJECT_SKILLS) for d in chain]


def discover_skills(*, cwd: Path, workspace_root: Path, skill_dirs: Sequence[Path] = (), user_root: Path | None,
                    warn: Callable[[str], None], bundled_root: Path = BUNDLED, cache: Path | None = None) -> SkillRegistry:
    """The skills of a session working in `cwd`: bundled first, then the project roots (nearest
    first, up to `workspace_root`), `skill_dirs` in order, and `user_root`; the first with a name
    wins. Problems go to `warn`, one line each. With `cache` (a file), frontmatter read by an
    earlier discovery is not read again while its file is unchanged (`cache.FrontmatterCache`)."""
    boundary = os.path.realpath(workspace_root)
    if not _inside(os.path.realpath(cwd), boundary):
        boundary = os.path.realpath(cwd)  # a working directory outside its workspace: only its own skills
    scan = _Scan(warn, FrontmatterCache(cache))
    scan.root(_Root(bundled_root, "bundled"))
    bundled = {skill.name for skill, _ in scan.found}
    for path in project_roots(cwd, workspace_root):
        scan.root(_Root(path, "project", boundary))
    for path in skill_dirs:
        scan.root(_Root(Path(path), "dir", explicit=True))
    if user_root is not None:
        scan.root(_Root(Path(user_root), "user"))
    scan.cache.save()
    registry = SkillRegistry(bytes_read=scan.bytes_read)
    for skill, skill_boundary in scan.found:
        if skill.scope != "bundled" and skill.name in bundled:
            warn(one_line(f"skill {skill.path}: {skill.name} is the name of a bundled skill, which a skill on disk cannot replace; "
                          "it is skipped (give it another name and directory)"))
            continue
        if skill.name in registry._by_name:
            registry.shadowed.append(skill)
            continue
        if len(registry.skills) >= MAX_SKILLS:
            warn(f"more than {MAX_SKILLS} skills: only the first {MAX_SKILLS} are used")
            break
        registry.skills.append(skill)
        registry._by_name[skill.name] = skill
        if skill_boundary is not None:
            registry._boundaries[skill.name] = skill_boundary
    return registry
