"""Extension layers, nearest first, and bounded reads of the files in them.

1. the nearest project `.osprey` directory (the working directory's, or its nearest ancestor's);
2. farther project `.osprey` directories, up to the workspace boundary;
3. the user's `$OSPREY_HOME`;
4. the artifacts bundled with Osprey (`osprey/extensions/bundled`).

Files of a layer are read only when they are regular files whose real path stays inside the layer's
boundary (the workspace for project layers, `$OSPREY_HOME` for the user's), so a repository cannot
point `.osprey/APPEND_SYSTEM.md` at a file of the user's and have it sent to a model.
"""

from __future__ import annotations

import functools
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..files import FileRefused, read_file

LayerKind = Literal["project", "user", "bundled"]
BUNDLED = Path(__file__).resolve().parent / "bundled"
PROJECT_DIR = ".osprey"
# The largest tool-descriptions.toml and toolsets.toml read (their parsers load only when one exists).
MAX_DESCRIPTIONS_BYTES = 128 * 1024
MAX_TOOLSETS_BYTES = 64 * 1024


class ArtifactError(Exception):
    """An artifact that cannot be used; the message is a short reason for the report."""


@dataclass(frozen=True)
class Layer:
    """One place artifacts are found: `root` holds them (a `.osprey` directory, `$OSPREY_HOME`, or
    the bundled directory); `boundary` is where their real paths must stay."""

    kind: LayerKind
    root: Path
    boundary: Path
    rank: int  # 0 is the nearest

    def scope(self, workspace_root: Path) -> str:
        """The trust-pin scope of this layer's executable artifacts."""
        from ..trust import USER_SCOPE

        return str(workspace_root) if self.kind == "project" else USER_SCOPE

    def key(self, path: Path, workspace_root: Path) -> str:
        """An artifact's name in trust pins and reports: project-relative for project layers,
        relative to the layer for the others."""
        base = workspace_root if self.kind == "project" else self.root
        try:
            return path.relative_to(base).as_posix()
        except ValueError:
            return path.as_posix()


def _real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)  # a symlinked .osprey is not a layer
    except OSError:
        return False


def layers(cwd: Path, workspace_root: Path, home: Path) -> list[Layer]:
    """The extension layers of a session working in `cwd`, nearest first."""
    found: list[Layer] = []
    home_real = _real_directory(os.fspath(home))
    root = Path(_real_directory(os.fspath(workspace_root)))
    directory = Path(_real_directory(os.fspath(cwd)))
    chain: list[Path] = []
    while True:
        chain.append(directory)
        if directory == root or directory.parent == directory:
            break
        directory = directory.parent
    if root not in chain:
        chain = [Path(_real_directory(os.fspath(cwd)))]  # a cwd outside its own boundary: only its own .osprey
    for directory in chain:
        candidate = directory / PROJECT_DIR
        if _real_dir(candidate) and _real_directory(os.fspath(candidate)) != home_real:
            found.append(Layer("project", candidate, root, len(found)))
    if os.path.isdir(home):
        found.append(Layer("user", Path(home_real), Path(home_real), len(found)))
    if BUNDLED.is_dir():
        found.append(Layer("bundled", BUNDLED, BUNDLED, len(found)))
    return found


@functools.lru_cache(maxsize=4096)
def _real_directory(path: str) -> str:
    """The real path of a directory, built from its parent's (cached) so a deep tree costs one
    stat per directory, not one per component of every path."""
    path = os.path.abspath(path)
    head, tail = os.path.split(path)
    if not tail or head == path:
        return path
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            return os.path.realpath(path)
    except OSError:
        return os.path.realpath(path)
    return os.path.join(_real_directory(head), tail)


def forget_real_paths() -> None:
    """Drop the cached real paths of directories (each discovery starts afresh)."""
    _real_directory.cache_clear()


def real_path(path: Path | str) -> str:
    """`os.path.realpath`, with the real paths of directories cached for one discovery: a deep
    tree would otherwise cost a stat of every component of every file's path."""
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except OSError:
        return os.path.realpath(path)
    if stat.S_ISLNK(st.st_mode):
        return os.path.realpath(path)
    head, tail = os.path.split(os.path.abspath(path))
    return os.path.join(_real_directory(head), tail)


def inside(real: str, boundary: Path | str) -> bool:
    """Whether the real path `real` is `boundary` or lies under it."""
    top = _real_directory(os.fspath(boundary))
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def read_inside(path: Path, boundary: Path, limit: int) -> bytes | None:
    """The bytes of the regular file at `path`, or None when nothing is there. Refused (an
    ArtifactError with the reason) when its real path leaves `boundary`, when it is not a regular
    file, or when it is larger than `limit` bytes; never reads past `limit`."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise ArtifactError(f"cannot be read: {exc.strerror}") from None
    real = real_path(path)
    if not inside(real, boundary):
        top = _real_directory(os.fspath(boundary))
        raise ArtifactError(f"it leads outside {top} (a symbolic link), so it is not read")
    try:
        return read_file(real, limit)
    except FileRefused as exc:
        if exc.reason == "not_regular":
            raise ArtifactError("not a regular file, so it is not read") from None
        if exc.reason == "too_large":
            raise ArtifactError(f"{exc.size} bytes, over the {limit}-byte limit" if exc.size is not None
                                else f"over the {limit}-byte limit") from None
        raise ArtifactError(f"cannot be read: {exc.strerror}") from None


def list_dir(path: Path, suffix: str, limit: int) -> tuple[list[Path], bool]:
    """The entries of `path` ending in `suffix`, sorted by name, at most `limit` (and whether
    there were more). A missing directory, or one that is a symbolic link, has none."""
    if not _real_dir(path):
        return [], False
    names: list[str] = []
    more = False
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name.endswith(suffix) and not entry.name.startswith("."):
                    names.append(entry.name)
                    if len(names) > limit * 4:  # enough to sort a fair first `limit`
                        more = True
                        break
    except OSError:
        return [], False
    names.sort()
    if len(names) > limit:
        more = True
        names = names[:limit]
    return [path / name for name in names], more
