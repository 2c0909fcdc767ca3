"""find_files and grep: ripgrep when it is on PATH, pure Python otherwise, same results."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import errors as E
from .errors import ToolFailure
from .ignore import ancestor_patterns, compile_glob, walk
from .paths import Roots, to_wire

DEFAULT_FIND_LIMIT = 1000
DEFAULT_MAX_MATCHES = 500
MAX_MATCH_CHARS = 500
READ_CHUNK = 1024 * 1024
# What ripgrep prints instead of (or after) matches in a file with a NUL byte: in a
# directory it stops at the NUL; a file named explicitly is searched on regardless.
_RG_BINARY_MESSAGES = (b": WARNING: stopped searching binary file", b": binary file matches (")


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


def _compile(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    # A str pattern, searched over text decoded with surrogateescape: like ripgrep's,
    # its classes, `\w` and case folding are Unicode-aware (a bytes pattern's are ASCII).
    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolFailure(E.INVALID_ARGUMENT, f"invalid regular expression {pattern!r}: {exc}") from None


def _line_text(raw: bytes) -> str:
    text = raw.rstrip(b"\r").decode("utf-8", "replace")
    if len(text) > MAX_MATCH_CHARS:
        text = text[:MAX_MATCH_CHARS] + " [...]"
    return text


def grep(roots: Roots, pattern: str, path: str = "", glob: str = "", ignore_case: bool = False, max_matches: int = 0, *, engine: str | None = None) -> GrepResult:
    """Lines matching a regex in the files under `path` (or in one file), sorted by path and line."""
    if pattern == "":
        raise ToolFailure(E.INVALID_ARGUMENT, "pattern is empty; give a regular expression")
    if max_matches < 0:
        raise ToolFailure(E.INVALID_ARGUMENT, "max_matches must not be negative")
    regex = _compile(pattern, ignore_case)
    limit = max_matches or DEFAULT_MAX_MATCHES
    top = _search_dir(roots, path)
    base = os.path.dirname(top) if os.path.isfile(top) else top
    file_filter = compile_glob(glob) if glob.strip() else None
    use_rg = engine == "ripgrep" or (engine is None and shutil.which("rg") is not None)
    if use_rg:
        found = _grep_rg(roots, pattern, top, file_filter, glob, ignore_case)
        if found is not None:
            matches, total = _collect(roots, base, found, _parse_rg_line, limit)
            return GrepResult(matches, total > limit, total, "ripgrep")
    matches, total = _collect(roots, base, _grep_python(roots, regex, top, file_filter), _parse_python_line, limit)
    return GrepResult(matches, total > limit, total, "python")


def _collect(roots: Roots, base: str, found: dict[str, list[Any]], parse: Callable[[Any], tuple[int, str]], limit: int) -> tuple[list[Match], int]:
    """The first `limit` matches in path order, and the total. Lines are parsed only when kept,
    since a broad pattern can match far more lines than are returned."""
    total = sum(map(len, found.values()))
    out: list[Match] = []
    for rel in sorted(found, key=lambda r: r.split("/")):
        if len(out) >= limit:
            break
        shown = _shown(roots, base, rel)
        for item in found[rel][: limit - len(out)]:
            number, text = parse(item)
            out.append(Match(shown, number, text))
    return out, total


def _parse_rg_line(item: bytes) -> tuple[int, str]:
    number, _, text = item.partition(b":")
    return int(number), _line_text(text)


def _parse_python_line(item: tuple[int, str]) -> tuple[int, str]:
    return item[0], _line_text(item[1].encode("utf-8", "surrogateescape"))


def _grep_python(roots: Roots, regex: re.Pattern[str], top: str, file_filter: re.Pattern[str] | None) -> dict[str, list[tuple[int, str]]]:
    """Matching (line number, line) pairs by file, relative to the searched directory."""
    if os.path.isfile(top):
        candidates = [(top, os.path.basename(top))]
    else:
        candidates = [
            (entry.path, entry.rel)
            for entry in walk(top, roots.root_of(top), files_only=True)
            if file_filter is None or file_filter.fullmatch(entry.rel)
        ]
    # One search over the whole file skips most files cheaply. With MULTILINE it
    # can only over-report (a match spanning lines), except for \A, \Z and
    # lookarounds, which see the newline a line on its own does not have.
    precheck = None
    if not any(s in regex.pattern for s in ("\\A", "\\Z", "(?=", "(?!", "(?<")):
        precheck = re.compile(regex.pattern, regex.flags | re.MULTILINE).search
    search = regex.search
    out: dict[str, list[tuple[int, str]]] = {}
    for real, rel in candidates:
        try:
            with open(real, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        if b"\x00" in data:
            continue
        text = data.decode("utf-8", "surrogateescape")
        if precheck is not None and not precheck(text):
            continue
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        hits = [(number, line) for number, line in enumerate(lines, 1) if search(line)]
        if hits:
            out[rel] = hits
    return out


def _grep_rg(roots: Roots, pattern: str, top: str, file_filter: re.Pattern[str] | None, glob: str, ignore_case: bool) -> dict[str, list[bytes]] | None:
    """Search with ripgrep: raw `line:text` results by file, relative to the searched directory.

    None when ripgrep cannot run this search (Python takes over)."""
    is_file = os.path.isfile(top)
    base = os.path.dirname(top) if is_file else top
    if is_file and _has_nul(top):
        return {}  # ripgrep searches a file it is given by name even when it is binary
    cmd = [
        "rg", "--no-config", "--line-number", "--with-filename", "--null", "--no-heading",
        "--color", "never", "--hidden", "--no-require-git", "--no-ignore-parent",
        "--no-ignore-global", "--no-ignore-exclude", "--no-ignore-dot", "--encoding", "none",
        "--glob", "!.git",
    ]
    if ignore_case:
        cmd.append("--ignore-case")
    ancestors = [] if is_file else ancestor_patterns(top, roots.root_of(top))
    if ancestors:
        # .gitignore rules between the allowed root and the searched directory, rewritten
        # relative to it; ripgrep reads them from stdin and anchors them at its cwd.
        cmd += ["--ignore-file", "/dev/stdin"]
    if not is_file:
        if glob.strip() and "/" not in glob.strip():
            # A file type filters after ignore rules; --glob would re-include ignored files.
            cmd += ["--type-add", f"osprey:{glob.strip()}", "--type", "osprey"]
    cmd += ["--regexp", pattern, "--", os.path.basename(top) if is_file else "."]
    rules = "".join(line + "\n" for line in ancestors).encode("utf-8", "surrogateescape")
    try:
        proc = subprocess.run(cmd, cwd=base, input=rules, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    except OSError:
        return None
    if proc.returncode not in (0, 1) and not proc.stdout:
        return None  # e.g. a pattern ripgrep's regex engine does not support
    if ancestors and b"/dev/stdin" in proc.stderr:
        return None  # the rules could not be read, and ripgrep searched on without them
    found: dict[str, list[bytes]] = {}
    binary: set[str] = set()
    last_name, bucket = None, None
    for line in proc.stdout.split(b"\n"):
        if not line:
            continue
        name, sep, rest = line.partition(b"\x00")
        if not sep:
            message = next((m for m in _RG_BINARY_MESSAGES if m in line), None)
            if message is None:
                return None  # a file name with a newline in it: the output cannot be parsed
            binary.add(_rel(line.split(message, 1)[0]))
            continue
        if name != last_name:
            # ripgrep prints each file's matches together, in line order.
            last_name = name
            bucket = found.setdefault(_rel(name), [])
        bucket.append(rest)  # type: ignore[union-attr]
    for rel in binary:
        found.pop(rel, None)
    if file_filter is not None and not is_file:
        found = {rel: hits for rel, hits in found.items() if file_filter.fullmatch(rel)}
    return found


def _has_nul(real: str) -> bool:
    try:
        with open(real, "rb") as fh:
            return any(b"\x00" in chunk for chunk in iter(lambda: fh.read(READ_CHUNK), b""))
    except OSError:
        return False


def _rel(name: bytes) -> str:
    return os.fsdecode(name[2:] if name.startswith(b"./") else name)
