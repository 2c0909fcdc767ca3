"""The workspace carried to a lane on another machine, and the lane's changes carried back.

A lane on a remote engine cannot bind-mount the workspace. `pack` writes the workspace as a tar,
which the backend unpacks into a volume the lane mounts, and returns a `Manifest` of what it sent
(kept on this machine: the lane can write the volume, never the record). When the session ends,
on `/sync`, or with `osprey sandbox recover`, the backend reads the lane's workspace back as a tar
and `bring_back` applies what the lane changed, checked against the manifest:

- a file the lane changed, added or removed is changed, added or removed here when this side still
  has what was sent (for an addition: nothing at that path);
- when this side changed it too, differently, it is a conflict: your file is never overwritten;
  the lane's version is written beside it as `NAME.osprey-lane`, and a file the lane removed but
  you changed is kept; `SyncReport.conflicts` lists both kinds;
- protected paths (`.git`, `.gitmodules`, `.osprey` and the others the backend names) are never
  written back, nor a new path that the workspace's `.gitignore` files exclude (a lane's build
  output stays in the lane).

What is sent: the workspace's files, directories and symlinks, less what its `.gitignore` files
exclude (`.git`, `.gitmodules` and `.osprey` are always sent; the backend mounts them read-only);
symlinks as they are (one that leads outside the workspace leads nowhere of this machine's there,
and the lane's ToolService refuses to follow it as it does here; `escaping_symlinks` names those
an engine refuses to unpack, for the backend to make in the lane itself), FIFOs, names that are
not UTF-8; no device or socket. What comes back from the lane is checked: a symlink that leads
outside the workspace, a FIFO or a device is not made here. At most `SyncLimits.max_files` entries and `max_bytes` of
file content go either way: more is a `WorkspaceTooLarge` that says which limit and what to do.
Everything that comes back is untrusted: names are checked (relative, no `..`, not protected),
directories here are opened one component at a time without following symlinks, and files are
written to a staging directory first and renamed into place.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import os
import secrets
import shutil
import stat
import tarfile
import time
from collections import OrderedDict
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import SandboxError

ALWAYS_SENT = (".git", ".gitmodules", ".osprey")
CONFLICT_SUFFIX = ".osprey-lane"
STAGING_PREFIX = ".osprey-sync-"
MAX_GITIGNORE_BYTES = 1024 * 1024
MAX_GITIGNORE_LINES = 10_000
MAX_PATTERN_CHARS = 1024
MAX_PATTERN_WILDCARDS = 16  # a pattern with more is skipped: its regex could backtrack for long
MAX_NAME_BYTES = 4096
MAX_OPEN_DIRS = 128  # directories kept open while the lane's changes are applied
MAX_REFUSED = 1000  # refusals listed one by one; the rest are counted
_CHUNK = 1024 * 1024
# A file whose size and modification second are as sent, and which was last modified this long
# before the manifest was made, is taken as unchanged without being read again.
_SETTLED_S = 2


class WorkspaceTooLarge(SandboxError):
    """The workspace (or what a lane made of it) is over a sync limit."""


class SyncLimits(BaseModel):
    """How much of a workspace goes to a lane or comes back, at most."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_files: int = Field(100_000, ge=1, le=10_000_000, description="entries: files, directories and symlinks")
    max_bytes: int = Field(2 * 1024**3, ge=1, le=1024**4, description="the files' content, in bytes")


class Manifest(BaseModel):
    """What was sent to a lane: each path with what it was.

    An entry is `d` (a directory), `l TARGET` (a symlink) or `f MODE SIZE MTIME SHA256` (a file:
    MODE `x` when executable, else `-`; MTIME in whole seconds)."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    made_at: float = Field(description="when it was made (seconds since the epoch, this machine's clock)")
    entries: dict[str, str] = Field(default_factory=dict)
    skipped: list[str] = Field(default_factory=list, description="paths not sent, each with why")


class Conflict(BaseModel):
    """A path both sides changed: what happened to it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    reason: str
    beside: str | None = Field(None, description="where the lane's version was written, when it was")


class SyncReport(BaseModel):
    """What `bring_back` did."""

    model_config = ConfigDict(extra="forbid")

    written: list[str] = Field(default_factory=list, description="files and symlinks added or changed here")
    deleted: list[str] = Field(default_factory=list)
    conflicts: list[Conflict] = Field(default_factory=list)
    refused: list[str] = Field(default_factory=list, description="paths not applied, each with why (the first MAX_REFUSED)")
    refused_more: int = Field(0, description="refusals past the first MAX_REFUSED")
    kept_back: set[str] = Field(default_factory=set, exclude=True, description="refused paths the next push leaves alone in the lane")
    left_in_lane: int = Field(0, description="new paths the .gitignore files exclude, not brought back")
    sent: list[str] = Field(default_factory=list, description="with a two-way sync: what changed here and was sent to the lane")
    removed_in_lane: list[str] = Field(default_factory=list, description="with a two-way sync: what was removed here and so in the lane")
    complete: bool = Field(True, description="false when the lane's tar ended early or went over a limit: nothing was deleted")
    problem: str = ""
    manifest: Manifest = Field(description="the baseline for the next sync: the lane's workspace as it was read")

    @property
    def changed(self) -> bool:
        return bool(self.written or self.deleted or self.conflicts or self.sent or self.removed_in_lane)


# --- .gitignore -------------------------------------------------------------------------------

class _Ignores:
    """The `.gitignore` files met on a walk, deepest last; a path's fate is decided by the deepest
    file with a pattern that matches it (a negation keeps it)."""

    def __init__(self) -> None:
        self._specs: list[tuple[str, object]] = []  # (directory prefix "a/b/" or "", GitIgnoreSpec)

    def load(self, directory: Path, prefix: str) -> bool:
        """Read `directory/.gitignore` (bounded); True when it added rules."""
        spec = _gitignore_of(directory)
        if spec is None:
            return False
        self._specs.append((prefix, spec))
        return True

    def pop(self) -> None:
        self._specs.pop()

    def ignored(self, path: str, is_dir: bool) -> bool:
        for prefix, spec in reversed(self._specs):
            if prefix and not path.startswith(prefix):
                continue
            result = spec.check_file(path[len(prefix):] + ("/" if is_dir else ""))  # type: ignore[attr-defined]
            if result.include is not None:
                return bool(result.include)
        return False


def _gitignore_of(directory: Path) -> object | None:
    """The rules of `directory/.gitignore` (read bounded), or None when it has none."""
    from ..files import FileRefused, read_file

    try:
        data = read_file(directory / ".gitignore", MAX_GITIGNORE_BYTES, cut=True)
    except (FileRefused, OSError):
        return None
    return _spec(data) if data else None


def _spec(data: bytes) -> object | None:
    from pathspec import GitIgnoreSpec

    lines = []
    for line in data.decode("utf-8", "replace").splitlines()[:MAX_GITIGNORE_LINES]:
        if not line.strip() or line.startswith("#"):
            continue
        if len(line) > MAX_PATTERN_CHARS or sum(line.count(c) for c in "*?[") > MAX_PATTERN_WILDCARDS:
            continue
        try:
            GitIgnoreSpec.from_lines([line])
        except Exception:  # noqa: BLE001 - pathspec raises several types for a bad pattern; git skips such a line too
            continue
        lines.append(line)
    return GitIgnoreSpec.from_lines(lines) if lines else None


class _IgnoreLookup:
    """Whether the workspace's `.gitignore` files exclude a path, for paths in any order; each
    directory's file is read once."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._specs: dict[str, object | None] = {}

    def _spec_of(self, directory: str) -> object | None:
        if directory not in self._specs:
            self._specs[directory] = _gitignore_of(self._root / directory if directory else self._root)
        return self._specs[directory]

    def ignored(self, path: str, is_dir: bool) -> bool:
        parts = path.split("/")
        if parts[0] in ALWAYS_SENT:
            return False
        for depth in range(len(parts)):
            decided = None
            for base_depth in range(depth, -1, -1):  # the deepest file with a matching pattern decides
                spec = self._spec_of("/".join(parts[:base_depth]))
                if spec is None:
                    continue
                rest = "/".join(parts[base_depth:depth + 1])
                result = spec.check_file(rest + ("/" if depth < len(parts) - 1 or is_dir else ""))  # type: ignore[attr-defined]
                if result.include is not None:
                    decided = bool(result.include)
                    break
            if decided:
                return True  # an excluded directory excludes everything in it, as in git
        return False


# --- sending ----------------------------------------------------------------------------------

@dataclass
class _Budget:
    limits: SyncLimits
    what: str
    files: int = 0
    bytes: int = 0

    def count(self, size: int = 0) -> None:
        self.files += 1
        self.bytes += size
        if self.files > self.limits.max_files:
            raise WorkspaceTooLarge(
                f"{self.what} has more than {self.limits.max_files:,} files, directories and symlinks; exclude what the lane "
                "does not need in .gitignore (build output, dependencies), or raise [sandbox] sync_max_files")
        if self.bytes > self.limits.max_bytes:
            raise WorkspaceTooLarge(
                f"{self.what} holds more than {self.limits.max_bytes:,} bytes of files; exclude what the lane does not need "
                "in .gitignore (build output, dependencies, large data), or raise [sandbox] sync_max_bytes")


class _Exactly:
    """A file's next `size` bytes for tarfile, hashed as they pass: padded with NULs when the file
    shrank meanwhile, cut when it grew, so the tar stays well-formed and the hash is what was sent."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self._left = size
        self.digest = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = os.read(self._fd, n) if n else b""
        if len(data) < n:
            data += b"\0" * (n - len(data))
        self._left -= len(data)
        self.digest.update(data)
        return data


def _file_entry(executable: bool, size: int, mtime: float, sha256: str) -> str:
    return f"f {'x' if executable else '-'} {size} {int(mtime)} {sha256}"


def _symlink_inside(path: str, target: str) -> bool:
    """Whether a symlink at `path` to `target` stays inside the workspace, whatever the other
    symlinks on its way: `..` only as its leading parts, no more of them than the link is deep
    (`d/b -> ..` then `x -> d/b/../secret` would climb out through `d/b`)."""
    if not target or target.startswith("/") or "\0" in target:
        return False
    parts = [p for p in target.split("/") if p not in ("", ".")]
    leading = 0
    while leading < len(parts) and parts[leading] == "..":
        leading += 1
    return ".." not in parts[leading:] and leading <= path.count("/")


def _walk(root: Path, skipped: list[str]) -> Iterator[tuple[str, os.stat_result]]:
    """The workspace's entries to send, parents before children, as (relative path, lstat):
    what its `.gitignore` files exclude left out (with everything beneath an excluded
    directory), devices and sockets noted in `skipped`."""
    ignores = _Ignores()
    ignores.load(root, "")
    yield from _walk_dir(root, "", ignores, skipped)


def _walk_dir(directory: Path, prefix: str, ignores: _Ignores, skipped: list[str]) -> Iterator[tuple[str, os.stat_result]]:
    try:
        with os.scandir(directory) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as exc:
        skipped.append(f"{prefix or '.'}: cannot be listed ({exc.strerror})")
        return
    for entry in entries:
        name = entry.name
        path = prefix + name
        if not prefix and name.startswith(STAGING_PREFIX):
            continue
        always = path.split("/", 1)[0] in ALWAYS_SENT
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue  # gone meanwhile
        is_dir = stat.S_ISDIR(st.st_mode)
        if not always and ignores.ignored(path, is_dir):
            continue
        if not (is_dir or stat.S_ISLNK(st.st_mode) or stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            skipped.append(f"{path!r}: a device or socket, which a lane cannot be given")
            continue
        yield path, st
        if is_dir:
            loaded = not always and ignores.load(directory / name, path + "/")
            yield from _walk_dir(directory / name, path + "/", ignores, skipped)
            if loaded:
                ignores.pop()


def _add(tar: tarfile.TarFile, root: Path, path: str, st: os.stat_result, owner: tuple[int, int] | None, budget: _Budget,
         skipped: list[str], prefix: str = "") -> str | None:
    """Add one entry to the tar (named `prefix` + `path`); its manifest entry (None when it could
    not be read)."""
    info = tarfile.TarInfo(prefix + path)
    info.mtime = int(st.st_mtime)
    info.mode = stat.S_IMODE(st.st_mode) & 0o777
    if owner is not None:
        info.uid, info.gid = owner
    if stat.S_ISDIR(st.st_mode):
        budget.count()
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        return "d"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(root / path)
        except OSError:
            return None
        budget.count()
        info.type = tarfile.SYMTYPE
        info.linkname = target
        tar.addfile(info)
        return f"l {target}"
    if stat.S_ISFIFO(st.st_mode):
        budget.count()
        info.type = tarfile.FIFOTYPE
        tar.addfile(info)
        return "p"
    try:
        fd = os.open(root / path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        skipped.append(f"{path}: cannot be read ({exc.strerror})")
        return None
    try:
        size = os.fstat(fd).st_size
        budget.count(size)
        info.size = size
        body = _Exactly(fd, size)
        tar.addfile(info, body)  # type: ignore[arg-type, unused-ignore]  # typeshed wants a file; tarfile only calls read()
    finally:
        os.close(fd)
    return _file_entry(bool(info.mode & 0o111), size, st.st_mtime, body.digest.hexdigest())


def escaping_symlinks(entries: Mapping[str, str]) -> dict[str, str]:
    """The symlinks among manifest entries whose relative target climbs out of the workspace,
    path to target: an engine refuses to unpack those (it guards its own extraction), so the
    backend makes them in the lane itself."""
    return {path: entry[2:] for path, entry in entries.items()
            if entry.startswith("l ") and not entry[2:].startswith("/") and not _symlink_inside(path, entry[2:])}


def pack(workspace: str | Path, out: IO[bytes], *, limits: SyncLimits | None = None, owner: tuple[int, int] | None = None,
         prefix: str = "", extra: Collection[tuple[tarfile.TarInfo, bytes]] = ()) -> Manifest:
    """Write the workspace as a tar to `out` (entries relative to it, owned by `owner` when given);
    what was sent. With `prefix` ("srv/ws/"), the entries lie under it, the workspace's own
    directory first; `extra` entries (with their content) follow the workspace's. Raises
    `WorkspaceTooLarge` past a limit (`out` then holds part of a tar)."""
    root = Path(workspace)
    budget = _Budget(limits or SyncLimits(), "the workspace")
    manifest = Manifest(made_at=time.time())
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, errors="surrogateescape") as tar:
        if prefix:
            top = tarfile.TarInfo(prefix.rstrip("/"))
            top.type, top.mode, top.mtime = tarfile.DIRTYPE, stat.S_IMODE(os.stat(root).st_mode), int(os.stat(root).st_mtime)
            if owner is not None:
                top.uid, top.gid = owner
            tar.addfile(top)
        for path, st in _walk(root, manifest.skipped):
            if stat.S_ISLNK(st.st_mode):
                target = _readlink(root / path)
                if target is not None and not target.startswith("/") and not _symlink_inside(path, target):
                    budget.count()
                    manifest.entries[path] = f"l {target}"  # made in the lane by the backend (`escaping_symlinks`)
                    continue
            entry = _add(tar, root, path, st, owner, budget, manifest.skipped, prefix)
            if entry is not None:
                manifest.entries[path] = entry
        for info, data in extra:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return manifest


@dataclass
class LocalChanges:
    """What changed here since a baseline: the tar of what to send (`sent`: their new entries) and
    the paths gone here, to remove in the lane."""

    sent: dict[str, str]
    gone: list[str]


def pack_changes(workspace: str | Path, baseline: Manifest, out: IO[bytes], *, protected: Collection[str] = ALWAYS_SENT,
                 limits: SyncLimits | None = None, owner: tuple[int, int] | None = None, leave: Collection[str] = ()) -> LocalChanges:
    """Write to `out` a tar of what changed here since `baseline` (new and changed entries; a
    file whose size and modification second are as recorded, and settled, is not read again),
    and list what is gone here (absent, not merely unlisted or now ignored). Protected paths are
    left out (the lane has them read-only), and so are the paths in `leave` with what lies under
    them (what the last bring-back refused: the lane's side of them stays as it is)."""
    root = Path(workspace)
    budget = _Budget(limits or SyncLimits(), "the workspace's changes")
    skipped: list[str] = []
    changes = LocalChanges(sent={}, gone=[])
    seen: set[str] = set()
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, errors="surrogateescape") as tar:
        for path, st in _walk(root, skipped):
            if _is_protected(path, protected) or _is_protected(path, leave):
                continue
            seen.add(path)
            before = baseline.entries.get(path)
            if before is not None and _unchanged_here(before, st, root / path, baseline.made_at):
                continue
            if stat.S_ISLNK(st.st_mode):
                target = _readlink(root / path)
                if target is not None and not target.startswith("/") and not _symlink_inside(path, target):
                    if f"l {target}" != before:
                        changes.sent[path] = f"l {target}"  # made in the lane by the backend
                    continue
            entry = _add(tar, root, path, st, owner, budget, skipped)
            if entry is not None and not _same(entry, before):
                changes.sent[path] = entry
    changes.gone = [p for p in baseline.entries if p not in seen and not _is_protected(p, protected) and not _is_protected(p, leave)
                    and not os.path.lexists(root / p)]
    return changes


def _readlink(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _unchanged_here(before: str, st: os.stat_result, path: Path, made_at: float) -> bool:
    if before == "d":
        return stat.S_ISDIR(st.st_mode)
    if before == "p":
        return stat.S_ISFIFO(st.st_mode)
    if before.startswith("l "):
        return stat.S_ISLNK(st.st_mode) and f"l {_readlink(path)}" == before
    if not stat.S_ISREG(st.st_mode):
        return False
    _, mode, size, _, digest = before.split(" ")
    if int(size) != st.st_size or mode != ("x" if st.st_mode & 0o111 else "-"):
        return False
    if _settled(before, st.st_size, st.st_mtime, bool(st.st_mode & 0o111), made_at):
        return True
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return _digest_of(fd) == digest
    except OSError:
        return False
    finally:
        os.close(fd)


def _digest_of(fd: int) -> str:
    """The sha256 of what is left to read from `fd`."""
    digest = hashlib.sha256()
    while chunk := os.read(fd, _CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


# --- bringing back ----------------------------------------------------------------------------

def _checked_name(name: str, prefix: str) -> str | None:
    """The workspace-relative path of a tar member, or None for the root itself; ValueError when
    the name is not one a lane's workspace can hold."""
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES or "\0" in name:
        raise ValueError("the name is too long or holds a NUL")
    name = name.rstrip("/")
    if prefix:
        if name == prefix.rstrip("/"):
            return None
        if not name.startswith(prefix):
            raise ValueError("it lies outside the workspace")
        name = name[len(prefix):]
    if name in ("", "."):
        return None
    if name.startswith("./"):
        name = name[2:]
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError("it is not a plain relative path")
    return name


def _refuse(report: SyncReport, text: str, path: str | None = None) -> None:
    """Note a refusal (the first MAX_REFUSED in words, the rest counted); a refused `path` is left
    alone in the lane by the next push too."""
    if len(report.refused) < MAX_REFUSED:
        report.refused.append(text)
    else:
        report.refused_more += 1
    if path is not None:
        report.kept_back.add(path)


def _is_protected(path: str, protected: Collection[str]) -> bool:
    # Case-folded: on a case-insensitive file system here, `.GIT/hooks` is `.git/hooks`.
    folded = path.casefold()
    return any(folded == p.casefold() or folded.startswith(p.casefold() + "/") for p in protected)


@dataclass
class _Here:
    """This side of the workspace, reached beneath its root without following symlinks."""

    root_fd: int
    staging_fd: int
    _dirs: OrderedDict[str, int] = field(default_factory=OrderedDict)

    def forget(self, path: str) -> None:
        """Close the descriptor kept for the directory `path`, before it is removed."""
        fd = self._dirs.pop(path, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()

    def directory(self, path: str, *, create: bool) -> int | None:
        """A descriptor of the directory `path` ("" for the root); None when it does not exist (or
        `create` is false); OSError(ENOTDIR/ELOOP) when a component is not a directory here."""
        if not path:
            return self.root_fd
        if path in self._dirs:
            self._dirs.move_to_end(path)
            return self._dirs[path]
        parent_path, _, name = path.rpartition("/")
        parent = self.directory(parent_path, create=create)
        if parent is None:
            return None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
            os.mkdir(name, 0o755, dir_fd=parent)
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        self._dirs[path] = fd
        while len(self._dirs) > MAX_OPEN_DIRS:  # the least recently used (never the one just made, or its parent)
            os.close(self._dirs.popitem(last=False)[1])
        return fd

    def entry(self, path: str) -> str | None:
        """What is at `path` here, in the manifest's form (None: nothing)."""
        parent_path, _, name = path.rpartition("/")
        try:
            parent = self.directory(parent_path, create=False)
        except OSError:
            return None
        if parent is None:
            return None
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            return "d"
        if stat.S_ISLNK(st.st_mode):
            return f"l {os.readlink(name, dir_fd=parent)}"
        if stat.S_ISFIFO(st.st_mode):
            return "p"
        if not stat.S_ISREG(st.st_mode):
            return "?"
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
        try:
            digest = _digest_of(fd)
        finally:
            os.close(fd)
        return _file_entry(bool(st.st_mode & 0o111), st.st_size, st.st_mtime, digest)


def _same(a: str | None, b: str | None) -> bool:
    """Whether two entries hold the same thing (a file's modification time aside)."""
    if a is None or b is None:
        return a is b
    if a.startswith("f ") and b.startswith("f "):
        fa, fb = a.split(" "), b.split(" ")
        return fa[1] == fb[1] and fa[2] == fb[2] and fa[4] == fb[4]
    return a == b


def _settled(recorded: str | None, size: int, mtime: float, executable: bool, made_at: float) -> bool:
    """Whether a file is as recorded by its size, mode and modification second alone (which holds
    only for a file last changed well before the record was made)."""
    if recorded is None or not recorded.startswith("f "):
        return False
    _, mode, recorded_size, recorded_mtime, _ = recorded.split(" ")
    return (int(recorded_size) == size and int(recorded_mtime) == int(mtime) and int(recorded_mtime) < made_at - _SETTLED_S
            and mode == ("x" if executable else "-"))


def bring_back(workspace: str | Path, sent: Manifest, lane_tar: IO[bytes], *, prefix: str = "",
               protected: Collection[str] = ALWAYS_SENT, limits: SyncLimits | None = None) -> SyncReport:
    """Apply to the workspace what the lane changed, read from `lane_tar` (the lane's workspace,
    its members under `prefix`), checked against `sent`; what was done. Deletions happen only when
    the whole tar was read within the limits."""
    budget = _Budget(limits or SyncLimits(), "the lane's workspace")
    report = SyncReport(manifest=Manifest(made_at=time.time()))
    seen: set[str] = set()
    newest = 0.0
    ignores = _IgnoreLookup(Path(workspace))
    root_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    staging = STAGING_PREFIX + secrets.token_hex(6)
    os.mkdir(staging, 0o700, dir_fd=root_fd)
    staging_fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    here = _Here(root_fd, staging_fd)
    try:
        with _reading(lane_tar) as tar:
            try:
                for member in tar:
                    tar.members.clear()  # type: ignore[attr-defined]  # a stream's members are not needed again: keep memory flat
                    budget.count(member.size if member.isreg() else 0)  # every member counts, skipped or not
                    newest = max(newest, member.mtime)
                    try:
                        path = _checked_name(member.name, prefix)
                    except ValueError as why:
                        _refuse(report, f"{member.name[:200]!r}: {why}")
                        continue
                    if path is None or _is_protected(path, protected) or path.split("/", 1)[0].startswith(STAGING_PREFIX):
                        continue
                    seen.add(path)
                    _one(here, sent, tar, member, path, report, ignores)
            except (tarfile.TarError, EOFError, OSError, WorkspaceTooLarge) as exc:
                report.complete = False
                report.problem = f"the lane's workspace could not be read whole ({exc}); nothing was deleted"
        if report.complete:
            _deletions(here, sent, seen, protected, report)
        # The lane's clock stamped what came back: a file is "settled" at the next sync only when it
        # is older than the newest thing the lane wrote, whatever this machine's clock says.
        report.manifest.made_at = min(report.manifest.made_at, newest) if newest else report.manifest.made_at
        for path, entry in sent.entries.items():
            if _is_protected(path, protected):
                report.manifest.entries[path] = entry
    finally:
        here.close()
        os.close(staging_fd)
        shutil.rmtree(os.path.join(workspace, staging), ignore_errors=True)
        os.close(root_fd)
    return report


@contextmanager
def _reading(stream: IO[bytes]) -> Iterator[tarfile.TarFile]:
    with tarfile.open(fileobj=stream, mode="r|*", errors="surrogateescape") as tar:
        yield tar


def _one(here: _Here, sent: Manifest, tar: tarfile.TarFile, member: tarfile.TarInfo, path: str, report: SyncReport,
         ignores: _IgnoreLookup) -> None:
    before = sent.entries.get(path)
    if member.isfifo() and before == "p":
        report.manifest.entries[path] = "p"
        return
    if not (member.isdir() or member.issym() or member.isreg()):
        _refuse(report, f"{path}: not a file, directory or symlink", path)
        return
    if before is None and ignores.ignored(path, member.isdir()):
        report.left_in_lane += 1
        return
    if member.isdir():
        report.manifest.entries[path] = "d"
        if before is not None and before != "d":
            _refuse(report, f"{path}: a directory in the lane where a file was sent; the lane's directory is left there", path)
            return
        if before is None:
            try:
                here.directory(path, create=True)
            except OSError as exc:
                _refuse(report, f"{path}: the directory cannot be made here ({exc.strerror})", path)
        return
    staged = None
    if member.issym():
        lane = f"l {member.linkname}"
        if lane == before:
            report.manifest.entries[path] = lane
            return
        if not _symlink_inside(path, member.linkname):
            _refuse(report, f"{path}: a symlink that leads outside the workspace", path)
            return
    elif _settled(before, member.size, member.mtime, bool(member.mode & 0o111), sent.made_at):
        report.manifest.entries[path] = before  # type: ignore[assignment]
        return
    else:
        staged, lane = _stage(here, tar, member)
    try:
        report.manifest.entries[path] = lane
        if _same(lane, before):
            return
        try:
            current = here.entry(path)
        except OSError as exc:
            _refuse(report, f"{path}: cannot be read here ({exc.strerror})", path)
            return
        if _same(current, lane):
            return
        if _same(current, before):
            if _put(here, path, lane, staged, member, report, path):
                report.written.append(path)
        else:
            beside = path + CONFLICT_SUFFIX
            if _put(here, beside, lane, staged, member, report, path):
                reason = "added in the lane and here" if before is None else "changed in the lane and here"
                report.conflicts.append(Conflict(path=path, reason=reason, beside=beside))
    finally:
        if staged is not None:
            with suppress(FileNotFoundError):
                os.unlink(staged, dir_fd=here.staging_fd)


def _stage(here: _Here, tar: tarfile.TarFile, member: tarfile.TarInfo) -> tuple[str, str]:
    """Copy a lane's file into the staging directory, hashing it; its staged name and entry."""
    staging_fd = here.staging_fd
    name = secrets.token_hex(8)
    digest = hashlib.sha256()
    source = tar.extractfile(member)
    assert source is not None
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=staging_fd)
    try:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            _write_all(fd, chunk)
    finally:
        os.close(fd)
    return name, _file_entry(bool(member.mode & 0o111), member.size, member.mtime, digest.hexdigest())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _put(here: _Here, path: str, lane: str, staged: str | None, member: tarfile.TarInfo, report: SyncReport,
         original: str) -> bool:
    """Put the lane's version at `path` here (replacing what is there); False (and the path
    refused) when a directory on the way, or at the path, is in the way."""
    parent_path, _, name = path.rpartition("/")
    try:
        parent = here.directory(parent_path, create=True)
        assert parent is not None
        try:
            if stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                _refuse(report, f"{original}: a directory is in the way here", original)
                return False
        except FileNotFoundError:
            pass
        if staged is None:  # a symlink
            temporary = f".{name}.{secrets.token_hex(4)}{CONFLICT_SUFFIX}"[-255:]
            os.symlink(lane[2:], temporary, dir_fd=parent)
            os.replace(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
            return True
        staging_fd = here.staging_fd
        mode = _mode_here(parent, name, bool(member.mode & 0o111))
        os.chmod(staged, mode, dir_fd=staging_fd)
        try:
            os.replace(staged, name, src_dir_fd=staging_fd, dst_dir_fd=parent)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            _copy_across(staging_fd, staged, parent, name, mode)
        os.utime(name, (member.mtime, member.mtime), dir_fd=parent, follow_symlinks=False)
        return True
    except OSError as exc:
        _refuse(report, f"{original}: cannot be written here ({exc.strerror})", original)
        return False


def _mode_here(parent: int, name: str, executable: bool) -> int:
    """The mode a file from the lane gets here: the permissions of the file it replaces (a 0600
    file stays 0600), else the default ones under this process's umask; executable where the
    lane's is, for whoever may read it."""
    try:
        current = os.stat(name, dir_fd=parent, follow_symlinks=False)
        mode = stat.S_IMODE(current.st_mode) & 0o777 if stat.S_ISREG(current.st_mode) else 0o666 & ~_umask()
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    if not executable:
        return mode & ~0o111
    return mode if mode & 0o111 else mode | ((mode & 0o444) >> 2)


@functools.cache
def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _copy_across(src_dir: int, src: str, dst_dir: int, dst: str, mode: int) -> None:
    """A staged file put into a directory on another file system (a mount inside the workspace)."""
    temporary = f".{dst}.{secrets.token_hex(4)}"[-255:]
    with open(os.open(src, os.O_RDONLY | os.O_CLOEXEC, dir_fd=src_dir), "rb") as source, \
            open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dst_dir), "wb") as target:
        shutil.copyfileobj(source, target, _CHUNK)
    os.replace(temporary, dst, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)


def _deletions(here: _Here, sent: Manifest, seen: set[str], protected: Collection[str], report: SyncReport) -> None:
    """Remove here what the lane removed, where this side still has what was sent."""
    gone = [p for p in sent.entries if p not in seen and not _is_protected(p, protected)]
    for path in sorted(gone, key=lambda p: (-p.count("/"), p)):  # deepest first: files before their directories
        before = sent.entries[path]
        parent_path, _, name = path.rpartition("/")
        try:
            current = here.entry(path)
            if current is None:
                continue
            parent = here.directory(parent_path, create=False)
            if parent is None:
                continue
            if before == "d":
                if current == "d":
                    here.forget(path)
                    os.rmdir(name, dir_fd=parent)
                    report.deleted.append(path)
                continue
            if not _same(current, before):
                report.conflicts.append(Conflict(path=path, reason="removed in the lane, changed here (kept)"))
                continue
            os.unlink(name, dir_fd=parent)
            report.deleted.append(path)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                _refuse(report, f"{path}: cannot be removed here ({exc.strerror})")
