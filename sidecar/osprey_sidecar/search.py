"""find_files and grep: ripgrep when it is on PATH, pure Python otherwise, same results."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from . import errors as E
from .errors import ToolFailure
from .ignore import ancestor_ignore_files, compile_glob, walk
from .paths import Roots, to_wire

DEFAULT_FIND_LIMIT = 1000
DEFAULT_MAX_MATCHES = 500
MAX_MATCH_CHARS = 500
_RG_BINARY_WARNING = b": WARNING: stopped searching binary file"


@dataclass
class FindResult:
    paths: list[str] = field(default_factory=list)
    truncated: bool = False
    total: int = 0


@dataclass
class Match:
    path: str
    line: int
    text: str


@dataclass
class GrepResult:
    matches: list[Match] = field(default_factory=list)
    truncated: bool = False
    total: int = 0
    engine: str = "python"


def _search_dir(roots: Roots, path: str) -> str:
    real = roots.resolve(path)
    if not os.path.exists(real):
        raise ToolFailure(E.NOT_FOUND, f"{path or '.'}: no such file or directory")
    return real


def _shown(roots: Roots, top: str, rel: str) -> str:
    return roots.show(os.path.join(top, rel) if rel else top)


def find_files(roots: Roots, pattern: str, path: str = "", limit: int = 0) -> FindResult:
    """Files under `path` whose relative path matches the glob, sorted by path."""
    if not pattern.strip():
        raise ToolFailure(E.INVALID_ARGUMENT, "pattern is empty; give a glob such as '**/*.py' or '*.md'")
    if limit < 0:
        raise ToolFailure(E.INVALID_ARGUMENT, "limit must not be negative")
    limit = limit or DEFAULT_FIND_LIMIT
    top = _search_dir(roots, path)
    if not os.path.isdir(top):
        raise ToolFailure(E.NOT_A_DIRECTORY, f"{path} is a file; find_files searches a directory")
    regex = compile_glob(pattern)
    found = []
    total = 0
    for entry in walk(top, roots.root_of(top), files_only=True):
        if regex.fullmatch(entry.rel):
            total += 1
            if len(found) < limit:
                found.append(_shown(roots, top, entry.rel))
    return FindResult(found, total > limit, total)


def _compile(pattern: str, ignore_case: bool) -> re.Pattern[bytes]:
    try:
        return re.compile(pattern.encode("utf-8"), re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolFailure(E.INVALID_ARGUMENT, f"invalid regular expression {pattern!r}: {exc}") from None


def _line_text(raw: bytes) -> str:
    text = raw.rstrip(b"\r").decode("utf-8", "replace")
    if len(text) > MAX_MATCH_CHARS:
        text = text[:MAX_MATCH_CHARS] + " [...]"
    return text


def _sort_key(m: Match) -> tuple:
    return (m.path.split("/"), m.line)


def grep(roots: Roots, pattern: str, path: str = "", glob: str = "", ignore_case: bool = False, max_matches: int = 0, *, engine: str | None = None) -> GrepResult:
    """Lines matching a regex in the files under `path` (or in one file), sorted by path and line."""
    if pattern == "":
        raise ToolFailure(E.INVALID_ARGUMENT, "pattern is empty; give a regular expression")
    if max_matches < 0:
        raise ToolFailure(E.INVALID_ARGUMENT, "max_matches must not be negative")
    regex = _compile(pattern, ignore_case)
    limit = max_matches or DEFAULT_MAX_MATCHES
    top = _search_dir(roots, path)
    file_filter = compile_glob(glob) if glob.strip() else None
    use_rg = engine == "ripgrep" or (engine is None and shutil.which("rg") is not None)
    matches: list[Match] | None = None
    used = "python"
    if use_rg:
        matches = _grep_rg(roots, pattern, top, file_filter, glob, ignore_case)
        used = "ripgrep"
    if matches is None:
        matches = _grep_python(roots, regex, top, file_filter)
        used = "python"
    matches.sort(key=_sort_key)
    return GrepResult(matches[:limit], len(matches) > limit, len(matches), used)


def _grep_python(roots: Roots, regex: re.Pattern[bytes], top: str, file_filter: re.Pattern[str] | None) -> list[Match]:
    if os.path.isfile(top):
        base, candidates = os.path.dirname(top), [(top, os.path.basename(top))]
    else:
        base = top
        candidates = [
            (entry.path, entry.rel)
            for entry in walk(top, roots.root_of(top), files_only=True)
            if file_filter is None or file_filter.fullmatch(entry.rel)
        ]
    # One search over the whole file skips most files cheaply. With MULTILINE it
    # can only over-report (a match spanning lines), except for \A and \Z.
    precheck = None
    if b"\\A" not in regex.pattern and b"\\Z" not in regex.pattern:
        precheck = re.compile(regex.pattern, regex.flags | re.MULTILINE).search
    search = regex.search
    out: list[Match] = []
    for real, rel in candidates:
        try:
            with open(real, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        if b"\x00" in data or (precheck is not None and not precheck(data)):
            continue
        lines = data.split(b"\n")
        if data.endswith(b"\n"):
            lines.pop()
        shown = None
        for number, line in enumerate(lines, 1):
            if search(line):
                shown = shown or _shown(roots, base, rel)
                out.append(Match(shown, number, _line_text(line)))
    return out


def _grep_rg(roots: Roots, pattern: str, top: str, file_filter: re.Pattern[str] | None, glob: str, ignore_case: bool) -> list[Match] | None:
    """Search with ripgrep; None when ripgrep cannot run this pattern (Python takes over)."""
    is_file = os.path.isfile(top)
    base = os.path.dirname(top) if is_file else top
    cmd = [
        "rg", "--no-config", "--line-number", "--with-filename", "--null", "--no-heading",
        "--color", "never", "--hidden", "--no-require-git", "--no-ignore-parent",
        "--no-ignore-global", "--no-ignore-exclude", "--no-ignore-dot", "--encoding", "none",
        "--glob", "!.git",
    ]
    if ignore_case:
        cmd.append("--ignore-case")
    if not is_file:
        # .gitignore files between the allowed root and the searched directory.
        for ignore_file in ancestor_ignore_files(top, roots.root_of(top)):
            cmd += ["--ignore-file", ignore_file]
        if glob.strip() and "/" not in glob.strip():
            # A file type filters after ignore rules; --glob would re-include ignored files.
            cmd += ["--type-add", f"osprey:{glob.strip()}", "--type", "osprey"]
    cmd += ["--regexp", pattern, "--", os.path.basename(top) if is_file else "."]
    try:
        proc = subprocess.run(cmd, cwd=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, check=False)
    except OSError:
        return None
    if proc.returncode not in (0, 1) and not proc.stdout:
        return None  # e.g. a pattern ripgrep's regex engine does not support
    out: list[Match] = []
    binary: set[str] = set()
    for line in proc.stdout.split(b"\n"):
        if not line:
            continue
        name, sep, rest = line.partition(b"\x00")
        if not sep:
            if _RG_BINARY_WARNING in line:
                binary.add(_rel(line.split(_RG_BINARY_WARNING, 1)[0]))
            continue
        number, _, text = rest.partition(b":")
        rel = _rel(name)
        if file_filter is not None and not is_file and not file_filter.fullmatch(rel):
            continue
        out.append(Match(rel, int(number), _line_text(text)))
    shown: dict[str, str] = {}
    result = []
    for m in out:
        if m.path in binary:
            continue
        if m.path not in shown:
            shown[m.path] = _shown(roots, base, m.path)
        m.path = shown[m.path]
        result.append(m)
    return result


def _rel(name: bytes) -> str:
    return os.fsdecode(name[2:] if name.startswith(b"./") else name)
