"""Globs, `.gitignore` rules and the directory walk every search tool shares.

Semantics (the ripgrep path in `search.py` is configured to agree with them):
- `.git` is never entered; hidden files are searched; symlinks are not followed.
- `.gitignore` files in the searched directory and below apply as git applies
  them (last match wins, deeper files win, `!` re-includes, a trailing `/`
  matches directories only). Those in directories between the allowed root and
  the searched directory apply too, with lower precedence than any file inside
  it; their anchored patterns keep their own base, as in git (they are
  rewritten relative to the searched directory, see `ancestor_patterns`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache


def glob_to_regex(pattern: str, *, braces: bool = False) -> str:
    """Translate a glob to a regex body: `*`/`?` stay in one segment, `**` spans segments."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i) and (i == 0 or pattern[i - 1] == "/") and (i + 2 == n or pattern[i + 2] == "/"):
                if i + 2 == n:
                    out.append(".*")
                    i += 2
                else:
                    out.append("(?:.*/)?")
                    i += 3
                continue
            while i < n and pattern[i] == "*":
                i += 1
            out.append("[^/]*")
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                body = body.replace("\\", "\\\\")
                out.append(f"[{'^/' if negate else ''}{body}]")
                i = j
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        elif braces and c == "{":
            j = pattern.find("}", i)
            if j == -1:
                out.append(re.escape(c))
            else:
                alts = pattern[i + 1 : j].split(",")
                out.append("(?:" + "|".join(glob_to_regex(a) for a in alts) + ")")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """A user glob (find_files, grep's file filter) as a regex over a relative posix path.

    A pattern without `/` matches a file name at any depth; with `/` it matches the
    path relative to the searched directory.
    """
    pattern = pattern.strip()
    anchored = "/" in pattern  # before dropping `./`, which anchors too
    if pattern.startswith("./"):
        pattern = pattern[2:]
    body = glob_to_regex(pattern.lstrip("/"), braces=True)
    if not anchored:
        body = "(?:.*/)?" + body
    return re.compile(body, re.DOTALL)


@dataclass(frozen=True)
class Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def _split_line(raw: str) -> tuple[bool, bool, str] | None:
    """One `.gitignore` line as (negate, dir_only, pattern); None for blanks and comments."""
    line = raw.rstrip("\r")
    if not line or line.startswith("#"):
        return None
    # Trailing spaces are dropped unless escaped with a backslash.
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        stripped += " "
    line = stripped
    negate = line.startswith("!")
    if negate:
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    return (negate, dir_only, line) if line else None


def parse_gitignore(text: str) -> list[Rule]:
    rules: list[Rule] = []
    # Lines end at `\n` only, as git reads them (str.splitlines would also split at \f, \x85, ...).
    for raw in text.split("\n"):
        split = _split_line(raw)
        if split is None:
            continue
        negate, dir_only, line = split
        anchored = "/" in line
        body = glob_to_regex(line.lstrip("/"))
        if not anchored:
            body = "(?:.*/)?" + body
        rules.append(Rule(re.compile(body, re.DOTALL), negate, dir_only))
    return rules


def _read_rules(directory: str) -> list[Rule]:
    try:
        with open(os.path.join(directory, ".gitignore"), "rb") as fh:
            return parse_gitignore(fh.read().decode("utf-8", "surrogateescape"))
    except OSError:
        return []


@dataclass
class _Layer:
    base: str  # relative posix path of the directory holding the rules ("" = top)
    rules: list[Rule] = field(default_factory=list)


class IgnoreStack:
    """The rules in force for one directory of the walk, deepest layer last."""

    def __init__(self, layers: list[_Layer]) -> None:
        self.layers = layers

    def ignored(self, rel: str, is_dir: bool) -> bool:
        for layer in reversed(self.layers):
            sub = rel if not layer.base else rel[len(layer.base) + 1 :]
            for rule in reversed(layer.rules):
                if rule.dir_only and not is_dir:
                    continue
                if rule.regex.fullmatch(sub):
                    return not rule.negate
        return False

    def pushed(self, base: str, rules: list[Rule]) -> "IgnoreStack":
        return IgnoreStack(self.layers + [_Layer(base, rules)]) if rules else self


def _rebased(pattern: str, prefix: list[str]) -> list[str]:
    """What an anchored `pattern` can still match below `prefix` (the directories from its
    `.gitignore` down to the walk's top), as patterns anchored at the top."""
    segments = pattern.lstrip("/").split("/")
    rests: list[str] = []

    def consume(i: int, j: int) -> None:
        if j == len(prefix):
            # Nothing left means the pattern names the top or a directory above it: the
            # walk was asked for that directory explicitly, so the rule is dropped.
            rest = "/".join(segments[i:])
            if rest and rest not in rests:
                rests.append(rest)
        elif i < len(segments):
            if segments[i] == "**":
                consume(i + 1, j)
                consume(i, j + 1)
            elif re.fullmatch(glob_to_regex(segments[i]), prefix[j], re.DOTALL):
                consume(i + 1, j + 1)

    consume(0, 0)
    return rests


def ancestor_patterns(top: str, root: str | None) -> list[str]:
    """The `.gitignore` lines of directories from `root` down to, not including, `top`
    (outermost first), rewritten to apply to paths relative to `top`.

    Unanchored patterns match at any depth and are kept as they are; anchored ones
    are re-anchored at `top`, or dropped when they cannot match below it.
    """
    if root is None or top == root or not top.startswith(root.rstrip(os.sep) + os.sep):
        return []
    parts = os.path.relpath(top, root).split(os.sep)
    lines: list[str] = []
    for depth in range(len(parts)):
        directory = os.path.join(root, *parts[:depth])
        try:
            with open(os.path.join(directory, ".gitignore"), "rb") as fh:
                text = fh.read().decode("utf-8", "surrogateescape")
        except OSError:
            continue
        for raw in text.split("\n"):
            split = _split_line(raw)
            if split is None:
                continue
            negate, dir_only, pattern = split
            rests = _rebased(pattern, parts[depth:]) if "/" in pattern else [pattern]
            lines += [("!" if negate else "") + ("/" if "/" in pattern else "") + rest + ("/" if dir_only else "") for rest in rests]
    return lines


def ancestor_rules(top: str, root: str | None) -> list[Rule]:
    """Rules of `.gitignore` files strictly between `root` and `top`, relative to `top`."""
    return parse_gitignore("\n".join(ancestor_patterns(top, root)))


@dataclass(frozen=True)
class Entry:
    path: str  # absolute filesystem path
    rel: str  # posix path relative to the walk's top
    is_dir: bool
    depth: int


def walk(top: str, root: str | None, *, max_depth: int | None = None, files_only: bool = False) -> Iterator[Entry]:
    """Walk `top` depth-first in sorted order, honouring the ignore rules above."""
    base = IgnoreStack([_Layer("", ancestor_rules(top, root))] if root else [])
    yield from _walk_dir(top, "", base, 1, max_depth, files_only)


def _walk_dir(path: str, rel: str, stack: IgnoreStack, depth: int, max_depth: int | None, files_only: bool) -> Iterator[Entry]:
    stack = stack.pushed(rel, _read_rules(path))
    try:
        with os.scandir(path) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if name == ".git":
            continue
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            is_file = entry.is_file(follow_symlinks=False)
        except OSError:
            continue
        if not (is_dir or is_file):
            continue  # symlinks, sockets, fifos: not followed, not searched
        child_rel = f"{rel}/{name}" if rel else name
        if stack.ignored(child_rel, is_dir):
            continue
        if is_dir:
            if not files_only:
                yield Entry(entry.path, child_rel, True, depth)
            if max_depth is None or depth < max_depth:
                yield from _walk_dir(entry.path, child_rel, stack, depth + 1, max_depth, files_only)
        else:
            yield Entry(entry.path, child_rel, False, depth)
