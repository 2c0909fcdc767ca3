"""`extension_manage`: the model tool that creates, replaces, deletes and lists the artifacts of
the user layer (`$OSPREY_HOME`), validated like discovery validates them, with a provenance sidecar
that marks them agent-written.

| kind | file in `$OSPREY_HOME` |
| --- | --- |
| `system_prompt` | `SYSTEM.md` |
| `append_system` | `APPEND_SYSTEM.md` |
| `hooks` | `hooks.toml` |
| `tool` NAME | `tools/NAME.toml` |
| `skill` NAME | `skills/NAME/SKILL.md` |

Rules: content is complete, at most 256 KiB of UTF-8, without NUL bytes or anything that looks
like a credential, and must pass the production parser of its kind. `expected_digest` guards
replace and delete. Symbolic links and non-regular files are never written through. Project
layers that would shadow the user's tool or `SYSTEM.md` refuse the write (a project's `hooks.toml`
runs beside the user's, so it shadows nothing). A change to the user's `hooks.toml` runs only after
the person approved it, under every policy (`guard.UserHooksGuard`). One lock
file in the home serialises operations, across threads and processes.

Write order: the sidecar first, then the artifact, each staged beside its target, fsynced and
renamed over it. Between the two renames the old artifact carries the new "agent" sidecar, which
makes an executable artifact untrusted (fail closed); writing the artifact first would leave an
agent-written tool, for a moment or after a crash, without a sidecar, which discovery trusts as
the person's own file. A failed artifact write restores the previous sidecar. A delete moves the
artifact aside first, then removes the sidecar, for the same reason.

The manager never writes trust pins: an agent-written tool or hooks file stays inactive until the
person runs `osprey extensions trust NAME`.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import stat
import time
import uuid
from collections import Counter
from collections.abc import Collection, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..files import FileRefused, read_file
from ..tools.base import ToolOutcome
from .layers import ArtifactError, layers, list_dir, read_inside
from .manage_tool import DIGEST, KINDS, OPERATIONS, TOOL_NAME, ManageInput, manage_tool  # noqa: F401 - part of this module's API
from .provenance import MAX_SIDECAR_BYTES, ProvenanceRecord, read_provenance, sidecar
from .report import sanitize, sha256

if TYPE_CHECKING:
    from ..config import Settings

CATEGORIES = ("invalid_name", "invalid_content", "name_collision", "already_exists", "not_found",
              "stale_revision", "unsupported_operation", "storage_unavailable")
MAX_CONTENT_BYTES = 256 * 1024
MAX_EXISTING_BYTES = 1024 * 1024  # an existing artifact is read (to digest it) up to this size
MAX_LISTED = 200  # tools, and skills, listed per kind
MAX_SCANNED_MANIFESTS = 200  # per layer, when looking for a tool name
MAX_SKILL_DESCRIPTION = 1024
MAX_FRONTMATTER_BYTES = 16 * 1024
LOCK_FILE = ".extension-manage.lock"
LOCK_WAIT_S = 10.0
SINGLE_FILES = {"system_prompt": "SYSTEM.md", "append_system": "APPEND_SYSTEM.md", "hooks": "hooks.toml"}
SKILL_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


class ManageError(Exception):
    """A refused operation: one of the eight categories, and what to do about it."""

    def __init__(self, category: str, message: str) -> None:
        assert category in CATEGORIES
        super().__init__(message)
        self.category = category
        self.message = message








@dataclass(frozen=True)
class Target:
    kind: str
    name: str  # the tool or skill name, else the file name
    path: Path
    directories: tuple[Path, ...]  # between the home and the file, outermost first

    @property
    def label(self) -> str:
        return f"the {self.kind} {self.name!r}" if self.kind in ("tool", "skill") else f"{self.name} ({self.kind})"


# ---------------------------------------------------------------------------------------------
# Names and content


def _builtin_names(extra: Collection[str]) -> set[str]:
    """Every built-in tool's name (`tools.names.RESERVED`), and the session's other tools."""
    from ..tools.names import RESERVED

    return set(RESERVED) | {TOOL_NAME} | set(extra)


def target(home: Path, kind: str, name: str | None, builtin: Collection[str]) -> Target:
    """Where an artifact of `kind` (and `name`) lives in `home`; ManageError invalid_name when
    the name is missing, malformed, or not wanted."""
    if kind in SINGLE_FILES:
        if name:
            raise ManageError("invalid_name", f"{kind} is the single file {SINGLE_FILES[kind]} of the user layer: leave name out")
        return Target(kind, SINGLE_FILES[kind], home / SINGLE_FILES[kind], ())
    if not name:
        raise ManageError("invalid_name", f"a {kind} needs a name")
    shown = sanitize(repr(name[:80]))
    if kind == "tool":
        from .custom_tools import NAME_PATTERN

        if not re.fullmatch(NAME_PATTERN, name):
            raise ManageError("invalid_name", f"the tool name {shown} is not valid: use 1 to 64 lowercase letters, digits or underscores")
        if name in builtin:
            from ..tools.names import reserved_reason

            why = reserved_reason(name) or f"{shown} is the name of a built-in tool of this session, which a custom tool cannot take"
            raise ManageError("invalid_name", sanitize(f"{why}; choose another name"))
        return Target(kind, name, home / "tools" / f"{name}.toml", (home / "tools",))
    if len(name) > 64 or not SKILL_NAME.fullmatch(name):
        raise ManageError("invalid_name", f"the skill name {shown} is not valid: use 1 to 64 lowercase letters, digits and single hyphens "
                                          "(a namespace, `ns:{name}`, goes in the frontmatter only)")
    return Target(kind, name, home / "skills" / name / "SKILL.md", (home / "skills", home / "skills" / name))


_PLACEHOLDER = re.compile(r"^(?:\$|%|<|\{|\[|\*)|example|placeholder|changeme|change_me|your[-_]|xxxx|\.\.\.", re.IGNORECASE)
_PAIR = re.compile(r"""(?<![A-Za-z0-9_.\-])(?P<name>[A-Za-z_][A-Za-z0-9_.\-]{0,127})["']?[ \t]*(?::=|=|:)[ \t]*["']?(?P<value>[^\s"'`,;)}\]]{1,4096})""")
_WORD_SPLIT = re.compile(r"""[\s"'`,;()<>\[\]{}]+""")
_BEARER = re.compile(r"\bbearer[ \t]+(?P<value>[A-Za-z0-9._~+/=-]{20,})", re.IGNORECASE)
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_VENDOR_PREFIX = re.compile(r"^(?:OSPREY|OPENAI|ANTHROPIC)_(?=.)", re.IGNORECASE)


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _looks_secret(value: str) -> bool:
    """A value that is a credential by its form (a token format, a URL with a password), or an
    opaque string that only a credential would be: letters and digits mixed, or long and random."""
    from ..config import is_secret_value

    if is_secret_value(value):
        return True
    if len(value) < 8 or _PLACEHOLDER.search(value):
        return False
    alpha, digit = any(c.isalpha() for c in value), any(c.isdigit() for c in value)
    if alpha and digit and re.fullmatch(r"[A-Za-z0-9_\-]+", value):
        return True
    return len(value) >= 20 and digit and bool(re.fullmatch(r"[A-Za-z0-9+/=_\-.~]+", value)) and _entropy(value) >= 3.5


def _secret_name(name: str) -> bool:
    """Whether a key names a credential. config's detection also counts every OSPREY_/OPENAI_/
    ANTHROPIC_ variable (it filters environments); here only the rest of the name decides, so
    `OSPREY_MODEL = ...` is not a secret and `OPENAI_API_KEY = ...` is."""
    from ..config import is_secret_name

    return is_secret_name(_VENDOR_PREFIX.sub("", name).replace("-", "_").replace(".", "_").upper())


def find_secret(text: str) -> str | None:
    """Where `text` (at most MAX_CONTENT_BYTES, checked before) seems to hold a credential, without
    repeating it; None when nothing does."""

    def line(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    match = _PRIVATE_KEY.search(text)
    if match:
        return f"line {line(match.start())}: a private key block"
    for match in _BEARER.finditer(text):
        if not _PLACEHOLDER.search(match["value"]):
            return f"line {line(match.start())}: a bearer token"
    for match in _PAIR.finditer(text):
        if _secret_name(match["name"]) and _looks_secret(match["value"]):
            return f"line {line(match.start())}: {sanitize(match['name'][:60])} is given a value that looks like a credential"
    from ..config import is_secret_value

    pos = 0
    for word in _WORD_SPLIT.split(text):
        pos = text.find(word, pos)
        if not word or len(word) < 8:
            continue
        parts = [word, *word.split("=")[1:]] if "://" not in word else [word]
        if any(is_secret_value(part) for part in parts):
            return f"line {line(pos)}: a token in a known credential format"
    return None


def validate_skill(text: str, directory: str) -> None:
    """A SKILL.md as skill discovery reads it (its YAML frontmatter, the name and description
    rules), so what the agent writes is a skill that loads."""
    from ..skills.frontmatter import FrontmatterError, skill_fields, skill_yaml, split

    try:
        fields = skill_yaml(split(text.encode("utf-8"))[0])
        skill_fields(fields, directory)
    except FrontmatterError as exc:
        raise ManageError("invalid_content", sanitize(f"{exc}; a SKILL.md starts with a frontmatter block: a line `---`, "
                                                      f"`name: {directory}`, `description: ...` (when the skill applies), a line `---`")) from None


def validate(kind: str, name: str, content: str | None) -> bytes:
    """The bytes to write, or ManageError invalid_content: size, NUL, secrets, then the parser of
    the kind."""
    if content is None:
        raise ManageError("invalid_content", "create and replace take the complete new content of the file in `content`")
    if "\x00" in content:
        raise ManageError("invalid_content", f"the content holds a NUL character (at offset {content.index(chr(0))}); artifacts are text")
    if len(content) > MAX_CONTENT_BYTES:
        raise ManageError("invalid_content", f"the content is over {MAX_CONTENT_BYTES} bytes (256 KiB), the largest artifact allowed")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ManageError("invalid_content", f"the content is not valid Unicode text (at offset {exc.start})") from None
    if len(data) > MAX_CONTENT_BYTES:
        raise ManageError("invalid_content", f"the content is {len(data)} bytes of UTF-8, over the {MAX_CONTENT_BYTES}-byte (256 KiB) limit")
    where = find_secret(content)
    if where is not None:
        raise ManageError("invalid_content", f"the content seems to hold a credential ({where}); artifacts are not the place for "
                                             "secrets: read them from the environment at run time instead")
    if kind == "tool":
        from .custom_tools import ManifestError, parse_manifest

        try:
            manifest = parse_manifest(data, source=f"tools/{name}.toml")
        except ManifestError as exc:
            raise ManageError("invalid_content", f"the tool manifest is not valid: {exc}") from None
        if manifest.name != name:
            raise ManageError("invalid_content", sanitize(f"the manifest declares name = {manifest.name!r} but the tool is {name!r}: "
                                                          "tools/NAME.toml holds the tool NAME"))
    elif kind == "hooks":
        from .hooks import HooksError, parse_hooks

        try:
            parse_hooks(data, source="hooks.toml")
        except HooksError as exc:
            raise ManageError("invalid_content", sanitize(f"the hooks file is not valid: {exc}")) from None
    elif kind == "skill":
        validate_skill(content, name)
    elif not content.strip():
        raise ManageError("invalid_content", f"the {kind} content is empty; delete the file instead")
    return data


# ---------------------------------------------------------------------------------------------
# Storage


def _storage(message: str, exc: OSError | None = None) -> ManageError:
    why = f": {exc.strerror or exc}" if exc is not None else ""
    return ManageError("storage_unavailable", sanitize(f"{message}{why}"))


def _ensure_directory(path: Path, create: bool) -> bool:
    """Whether `path` is a real directory (made when `create`); a symbolic link or anything else
    there is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return False
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise _storage(f"cannot create {path}", exc) from None
        try:
            st = os.lstat(path)
        except OSError as exc:
            raise _storage(f"cannot use {path}", exc) from None
    except OSError as exc:
        raise _storage(f"cannot use {path}", exc) from None
    if stat.S_ISLNK(st.st_mode):
        raise _storage(f"{path} is a symbolic link; extension_manage does not write through links (the person can replace it with a directory)")
    if not stat.S_ISDIR(st.st_mode):
        raise _storage(f"{path} is not a directory")
    return True


def _home(settings: Settings, create: bool) -> Path:
    home = Path(settings.home)
    if create:
        try:
            home.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise _storage(f"the home {home} cannot be created", exc) from None
    real = Path(os.path.realpath(home))
    if os.path.lexists(real) and not os.path.isdir(real):
        raise _storage(f"the home {home} is not a directory")
    return real


def read_existing(path: Path, what: str, limit: int = MAX_EXISTING_BYTES) -> bytes | None:
    """The bytes of the regular file at `path` (None when there is nothing), never through a link;
    ManageError storage_unavailable for a link, a non-regular file or one too large."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _storage(f"cannot inspect {path}", exc) from None
    if stat.S_ISLNK(st.st_mode):
        raise _storage(f"{what} {path} is a symbolic link; extension_manage never writes through links (the person can replace it with a regular file)")
    if not stat.S_ISREG(st.st_mode):
        raise _storage(f"{what} {path} is not a regular file; extension_manage manages regular files only")
    try:
        return read_file(path, limit)
    except FileRefused as exc:
        if exc.reason == "not_regular":  # swapped in after the lstat above
            raise _storage(f"{what} {path} is not a regular file") from None
        if exc.reason == "too_large":
            if exc.size is not None:
                raise _storage(f"{what} {path} is {exc.size} bytes, more than extension_manage handles ({limit}); the person can edit it") from None
            raise _storage(f"{what} {path} grew past {limit} bytes while read") from None
        raise _storage(f"cannot read {path}", exc.error) from None


def _put(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` with `data`: a staged file beside it, fsync, rename. Raises OSError."""
    from ..tomlfile import replace_file

    replace_file(path, data, mode)


def _sync_directory(path: Path) -> None:
    with suppress(OSError):  # the renames are done; a directory that cannot be fsynced changes nothing
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextmanager
def _locked(home: Path) -> Iterator[None]:
    """One operation at a time in this home, across threads and processes (flock on a lock file)."""
    try:
        fd = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise _storage(f"cannot open the lock file {home / LOCK_FILE}", exc) from None
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise _storage(f"another extension_manage operation has held {home / LOCK_FILE} for over {LOCK_WAIT_S:g} s") from None
                time.sleep(0.01)
            except OSError as exc:
                raise _storage(f"cannot lock {home / LOCK_FILE}", exc) from None
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


# ---------------------------------------------------------------------------------------------
# Collisions


def _project_layers(settings: Settings) -> list[Any]:
    return [layer for layer in layers(settings.cwd, settings.workspace_root, settings.home) if layer.kind == "project"]


def _tool_files_named(directory: Path, boundary: Path, name: str, skip: Path | None = None) -> Path | None:
    """A manifest in `directory` that names the tool `name` (by its file name, or by its `name`)."""
    from .custom_tools import ManifestError, parse_manifest

    paths, _ = list_dir(directory, ".toml", MAX_SCANNED_MANIFESTS)
    for path in paths:
        if skip is not None and path == skip:
            continue
        if path.stem == name:
            return path
        try:
            data = read_inside(path, boundary, 64 * 1024)
            if data is not None and parse_manifest(data, source=str(path)).name == name:
                return path
        except (ArtifactError, ManifestError):
            continue
    return None


def _check_collisions(settings: Settings, home: Path, where: Target) -> None:
    for layer in _project_layers(settings):
        if where.kind == "system_prompt":
            path = layer.root / where.name
            if os.path.lexists(path):
                raise ManageError("name_collision", f"the project layer already has {path}, which comes before the user's {where.name} "
                                                    "and would hide it; change the project's file instead, or ask the person")
        elif where.kind == "tool":
            found = _tool_files_named(layer.root / "tools", layer.boundary, where.name)
            if found is not None:
                raise ManageError("name_collision", f"the project layer already has a tool named {where.name!r} ({found}), which would shadow "
                                                    "the user's; choose another name")
    if where.kind == "tool":
        found = _tool_files_named(home / "tools", home, where.name, skip=where.path)
        if found is not None:
            raise ManageError("already_exists", f"the user layer's {found} already defines the tool {where.name!r}; replace or delete that file's "
                                                "tool, or choose another name")


# ---------------------------------------------------------------------------------------------
# Operations


def _normal_digest(value: str) -> str:
    return value if value.startswith("sha256:") else "sha256:" + value


def _inactive_note(where: Target) -> str:
    if where.kind == "tool":
        return (f" The tool stays inactive until the person reviews it and runs `osprey extensions trust {where.name}`: "
                "extension_manage never grants trust to what it writes.")
    if where.kind == "hooks":
        return (" The hooks stay inactive until the person reviews them and runs `osprey extensions trust hooks`: "
                "extension_manage never grants trust to what it writes.")
    return ""


def _write(settings: Settings, where: Target, operation: str, content: str | None, expected: str | None, builtin: Collection[str]) -> str:
    data = validate(where.kind, where.name, content)
    home = _home(settings, create=True)
    where = target(home, where.kind, where.name if where.kind in ("tool", "skill") else None, builtin)
    _check_collisions(settings, home, where)
    with _locked(home):
        for directory in where.directories:
            _ensure_directory(directory, create=operation == "create")
        old = read_existing(where.path, "the artifact")
        side = sidecar(where.path)
        old_side = read_existing(side, "its provenance file", MAX_SIDECAR_BYTES * 4)
        if operation == "create" and old is not None:
            raise ManageError("already_exists", f"{where.label} already exists at {where.path} (digest {sha256(old)}); "
                                                "use replace with that expected_digest")
        if operation == "replace":
            if old is None:
                raise ManageError("not_found", f"{where.label} does not exist at {where.path}; use create")
            if expected is not None and sha256(old) != expected:
                raise ManageError("stale_revision", f"{where.path} changed: its digest is {sha256(old)}, not {expected}. Nothing was written; "
                                                    "list it again, then replace it with the new digest if you still mean to")
        before = read_provenance(where.path, home)[0] if old is not None else None
        mode = stat.S_IMODE(os.lstat(where.path).st_mode) if old is not None else 0o600
        record = ProvenanceRecord(origin="agent", operation_id=uuid.uuid4().hex, digest=sha256(data), kind=where.kind)
        try:
            _put(side, (record.model_dump_json(indent=2) + "\n").encode(), 0o600)
        except OSError as exc:
            raise _storage(f"cannot write the provenance file {side}; nothing changed", exc) from None
        try:
            _put(where.path, data, mode)
        except OSError as exc:
            problem = _restore_sidecar(side, old_side)
            raise _storage(f"cannot write {where.path}; the previous file and its provenance are kept{problem}", exc) from None
        _sync_directory(where.path.parent)
    verb = "Created" if operation == "create" else "Replaced"
    text = (f"{verb} {where.label}: {where.path}, {len(data)} bytes, digest {record.digest} (pass it as expected_digest to replace or "
            f"delete it later). The change takes effect at the next turn boundary, when the session reloads its extensions.")
    text += _inactive_note(where)
    if before == "legacy" and where.kind in ("tool", "hooks"):
        text += " It was the person's own file, trusted as such; now that the agent wrote it, it needs their trust again."
    if where.kind == "system_prompt" and settings.system_prompt_file is not None:
        text += " Note: OSPREY_SYSTEM_PROMPT_FILE is set, and takes the place of SYSTEM.md while it is."
    return text


def _restore_sidecar(side: Path, old: bytes | None) -> str:
    """Put the previous provenance file back; '' when that worked, else what is left."""
    try:
        if old is None:
            os.unlink(side)
        else:
            _put(side, old, 0o600)
        return ""
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return (f" (but restoring the provenance file {side} failed: {exc.strerror}; it now marks the previous file agent-written, "
                "so an executable one is untrusted until the person checks it)")


def _delete(settings: Settings, where: Target, expected: str | None, builtin: Collection[str]) -> str:
    home = _home(settings, create=False)
    if not os.path.isdir(home):
        raise ManageError("not_found", f"{where.label} does not exist: there is no home directory {settings.home}")
    where = target(home, where.kind, where.name if where.kind in ("tool", "skill") else None, builtin)
    from ..tomlfile import temporary_name

    with _locked(home):
        for directory in where.directories:
            if not _ensure_directory(directory, create=False):
                raise ManageError("not_found", f"{where.label} does not exist at {where.path}")
        old = read_existing(where.path, "the artifact")
        if old is None:
            raise ManageError("not_found", f"{where.label} does not exist at {where.path}")
        if expected is not None and sha256(old) != expected:
            raise ManageError("stale_revision", f"{where.path} changed: its digest is {sha256(old)}, not {expected}. Nothing was deleted; "
                                                "list it again, then delete it with the new digest if you still mean to")
        side = sidecar(where.path)
        old_side = read_existing(side, "its provenance file", MAX_SIDECAR_BYTES * 4)
        aside = temporary_name(where.path)
        try:
            os.rename(where.path, aside)  # the artifact goes first: it never stands without its sidecar
        except OSError as exc:
            raise _storage(f"cannot remove {where.path}; nothing changed", exc) from None
        if old_side is not None:
            try:
                os.unlink(side)
            except OSError as exc:
                try:
                    os.rename(aside, where.path)
                    kept = "the file and its provenance are kept"
                except OSError:
                    kept = f"the file is at {aside}, its provenance kept"
                raise _storage(f"cannot remove the provenance file {side}; {kept}", exc) from None
        with suppress(OSError):
            os.unlink(aside)
        _sync_directory(where.path.parent)
        if where.kind == "skill":
            with suppress(OSError):  # only when nothing else is in it
                os.rmdir(where.path.parent)
    return (f"Deleted {where.label} ({where.path}, digest {sha256(old)}) and its provenance file. The change takes effect at the "
            "next turn boundary, when the session reloads its extensions.")


def _entry(home: Path, kind: str, name: str, path: Path) -> dict[str, Any]:
    item: dict[str, Any] = {"kind": kind, "name": name, "path": str(path)}
    try:
        data = read_existing(path, "the artifact")
    except ManageError as exc:
        item["problem"] = exc.message
        return item
    if data is None:
        return {}
    item["digest"] = sha256(data)
    item["size"] = len(data)
    item["provenance"] = read_provenance(path, home)[0]
    return item


def _list(settings: Settings, kind: str | None, name: str | None, builtin: Collection[str]) -> str:
    home = Path(os.path.realpath(settings.home))
    items: list[dict[str, Any]] = []
    notes: list[str] = []
    if os.path.isdir(home):
        for single, file_name in SINGLE_FILES.items():
            if kind in (None, single):
                items.append(_entry(home, single, file_name, home / file_name))
        if kind in (None, "tool"):
            paths, more = list_dir(home / "tools", ".toml", MAX_LISTED)
            items.extend(_entry(home, "tool", path.stem, path) for path in paths)
            if more:
                notes.append(f"more than {MAX_LISTED} tool manifests: only the first {MAX_LISTED} by name are listed")
        if kind in (None, "skill"):
            items.extend(_skills(home, notes))
    items = [item for item in items if item and (name is None or item["name"] == name)]
    if any(item["kind"] in ("tool", "hooks", "system_prompt", "append_system") for item in items):
        _add_status(settings, items, builtin, notes)
    notes.append("Digests are what expected_digest compares with; narrow a long listing with kind and name. "
                 "Changes take effect at the next turn boundary. "
                 "Agent-written tools and hooks are inactive until the person runs `osprey extensions trust NAME`.")
    return json.dumps({"home": str(home), "artifacts": items, "notes": notes}, ensure_ascii=False)


def _skills(home: Path, notes: list[str]) -> list[dict[str, Any]]:
    root = home / "skills"
    try:
        if not stat.S_ISDIR(os.lstat(root).st_mode):
            return []
        names: list[str] = []
        with os.scandir(root) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                    names.append(entry.name)
                    if len(names) > MAX_LISTED * 4:
                        break
    except OSError:
        return []
    names.sort()
    if len(names) > MAX_LISTED:
        notes.append(f"more than {MAX_LISTED} skill directories: only the first {MAX_LISTED} by name are listed")
    return [_entry(home, "skill", skill, root / skill / "SKILL.md") for skill in names[:MAX_LISTED]]


def _add_status(settings: Settings, items: list[dict[str, Any]], builtin: Collection[str], notes: list[str]) -> None:
    """Trust and status from discovery, as the session would see the files now."""
    from .discovery import discover

    try:
        found = discover(settings, builtin)
    except Exception as exc:  # noqa: BLE001 - a broken layer must not hide the listing
        notes.append(sanitize(f"trust and status are unknown: discovery failed ({exc})"))
        return
    by_path = {artifact.path: artifact for artifact in found.artifacts if artifact.layer == "user"}
    for item in items:
        artifact = by_path.get(item["path"])
        if artifact is None:
            continue
        if item["kind"] in ("tool", "hooks"):
            item["trust"] = artifact.trust
        item["status"] = artifact.status
        if artifact.reason:
            item["reason"] = artifact.reason


def manage(settings: Settings, request: ManageInput, *, builtin: Collection[str] = ()) -> tuple[ToolOutcome, bool]:
    """Run one request; the outcome, and whether the user layer changed."""
    names = _builtin_names(builtin)
    operation = request.operation
    try:
        if operation not in OPERATIONS:
            raise ManageError("unsupported_operation", sanitize(f"{operation[:40]!r} is not an operation of extension_manage: use "
                                                                "create, replace, delete or list (list never shows bodies)"))
        if request.kind is not None and request.kind not in KINDS:
            raise ManageError("unsupported_operation", sanitize(f"extension_manage does not manage the kind {request.kind[:40]!r}: it manages "
                                                                f"{', '.join(KINDS)}; the person edits other extension files"))
        if operation == "list":
            if request.content is not None or request.expected_digest is not None:
                raise ManageError("unsupported_operation", "list takes no content and no expected_digest")
            return ToolOutcome(_list(settings, request.kind, request.name or None, names)), False
        if request.kind is None:
            raise ManageError("unsupported_operation", f"{operation} needs a kind: one of {', '.join(KINDS)}")
        where = target(Path(settings.home), request.kind, request.name or None, names)
        expected = _normal_digest(request.expected_digest) if request.expected_digest else None
        if operation == "delete":
            if request.content is not None:
                raise ManageError("unsupported_operation", "delete takes no content")
            return ToolOutcome(_delete(settings, where, expected, names)), True
        if operation == "create" and expected is not None:
            raise ManageError("unsupported_operation", "create takes no expected_digest (the artifact must not exist yet); use replace")
        return ToolOutcome(_write(settings, where, operation, request.content, expected, names)), True
    except ManageError as exc:
        return ToolOutcome(f"Error ({exc.category}): {exc.message}", True, exc.category), False
