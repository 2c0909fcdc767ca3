"""Globs, `.gitignore` rules and the directory walk every search tool shares.

Semantics (the ripgrep path in `search.py` is configured to agree with them):
- `.git` is never entered; hidden files are searched; symlinks are not followed.
- `.gitignore` files in the searched directory and below apply as git applies
  them (last match wins, deeper files win, `!` re-includes, a trailing `/`
  matches directories only). Those in directories between the allowed root and
  the searched directory apply too, with lower precedence than any file inside
  it; their anchored patterns keep their own base, as in git (they are
  rewritten relative to the searched directory, see `ancestor_patterns`).

Bounds (the workspace is untrusted): every directory is opened from its parent's
descriptor without following symlinks; an ignore file is read only when it is a
regular file, and only its first MAX_IGNORE_BYTES; globs are matched in about
linear time (see `glob_to_regex`); the walk is iterative and stops descending
where paths would outgrow PATH_MAX.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from . import errors as E
from .errors import ToolFailure
from .paths import PATH_MAX, open_regular, open_root, open_subdir, open_under

# Bounds on what the workspace or an argument can make the matcher do.
MAX_PATTERN_CHARS = 4096
MAX_BRACE_ALTERNATIVES = 64
MAX_IGNORE_BYTES = 1024 * 1024  # of one ignore file; lines beyond are not read
MAX_IGNORE_RULES = 10_000  # of one ignore file; rules beyond are dropped

_GLOBSTAR = None
# Zero or more whole segments, each with its `/`; possessive inside, so a segment is taken whole.
_SEGMENTS = "(?:[^/]*+/)*?"


def glob_to_regex(pattern: str, *, braces: bool = False) -> str:
    """Translate a glob to a regex body: `*`/`?` stay in one segment, `**` spans segments.

    The regex cannot backtrack catastrophically: every segment is matched by an atomic
    group that takes the leftmost occurrence of each piece between its stars (which
    finds a match whenever there is one, since the pieces have fixed lengths), and
    every `**` but the last does the same with whole segments. Matching is about
    linear in the path times the pattern.
    """
    if braces:
        alternatives = _expand_braces(pattern)
        if len(alternatives) > 1:
            return "(?:" + "|".join(_translate(a) for a in alternatives) + ")"
    return _translate(pattern)


def _expand_braces(pattern: str) -> list[str]:
    """`{a,b}` alternatives spelled out (not nested: a brace group ends at the first `}`).

    The number of results is checked before any is built, so no pattern can make it big."""
    parts: list[list[str]] = []  # each a literal piece (one choice) or a brace group's alternatives
    count = 1
    start, i, n = 0, 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            end = _class_end(pattern, i)
            if end is not None:
                i = end + 1
                continue
        if c == "{":
            j = pattern.find("}", i)
            if j != -1:
                alternatives = pattern[i + 1 : j].split(",")
                count *= len(alternatives)
                if count > MAX_BRACE_ALTERNATIVES:
                    raise ToolFailure(E.INVALID_ARGUMENT, f"the glob's braces spell out over {MAX_BRACE_ALTERNATIVES} alternatives; use fewer or a broader glob")
                parts += [[pattern[start:i]], alternatives]
                start = i = j + 1
                continue
        i += 1
    parts.append([pattern[start:]])
    out = [""]
    for choices in parts:
        out = [head + choice for head in out for choice in choices]
    return out


def _class_end(pattern: str, i: int) -> int | None:
    """The index of the `]` closing the class opened at `pattern[i]`, if any."""
    j = i + 1
    n = len(pattern)
    if j < n and pattern[j] in "!^":
        j += 1
    if j < n and pattern[j] == "]":
        j += 1
    while j < n and pattern[j] != "]":
        j += 1
    return j if j < n else None


def _class(body: str) -> str:
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    inner = "".join("-" if ch == "-" and 0 < k < len(body) - 1 else re.escape(ch) for k, ch in enumerate(body))
    regex = f"[^/{inner}]" if negate else f"(?!/)[{inner}]"
    try:
        re.compile(regex)
    except re.error:  # e.g. a reversed range: no character is in it
        return "(?!)"
    return regex


def _segments(pattern: str) -> list[list[str] | None]:
    """The pattern's segments: None for a `**` segment, else its tokens (regex pieces, "*" for a star run)."""
    segments: list[list[str] | None] = []
    tokens: list[str] = []
    raw = ""  # the segment's text, to tell `**` from `\*\*` and `***`
    i, n = 0, len(pattern)
    while i <= n:
        c = pattern[i] if i < n else "/"
        if c == "/":
            segments.append(_GLOBSTAR if raw == "**" else tokens)
            tokens, raw = [], ""
            i += 1
            if i > n:
                break
            continue
        raw += c
        if c == "*":
            if not tokens or tokens[-1] != "*":
                tokens.append("*")
        elif c == "?":
            tokens.append("[^/]")
        elif c == "[" and (end := _class_end(pattern, i)) is not None:
            tokens.append(_class(pattern[i + 1 : end]))
            raw += pattern[i + 1 : end + 1]
            i = end
        elif c == "\\" and i + 1 < n:
            i += 1
            raw += pattern[i]
            tokens.append(re.escape(pattern[i]))
        else:
            tokens.append(re.escape(c))
        i += 1
    return segments


def _segment_regex(tokens: list[str]) -> str:
    """One segment, as an atomic group that matches it whole in at most one way."""
    pieces = _pieces(tokens)
    if len(pieces) == 1:
        return pieces[0]
    middle = "".join(f"(?>[^/]*?{p})" for p in pieces[1:-1])
    last = f"[^/]*{pieces[-1]}(?![^/])" if pieces[-1] else "[^/]*+"
    return f"(?>{pieces[0]}{middle}{last})"


def _pieces(tokens: list[str]) -> list[str]:
    pieces = [""]
    for token in tokens:
        if token == "*":
            pieces.append("")
        else:
            pieces[-1] += token
    return pieces


def _translate(pattern: str) -> str:
    segments = _segments(pattern)
    out: list[str] = []
    gap: list[str] | None = None  # what follows an open `**`, up to the next one
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment is _GLOBSTAR:
            if gap is not None:
                out.append(f"(?>{_SEGMENTS}{''.join(gap)})")  # the leftmost place where it fits
            gap = None
            if last:
                out.append(".*")
            else:
                gap = []
            continue
        piece = _segment_regex(segment) + ("" if last else "/")
        (out if gap is None else gap).append(piece)
    if gap is not None:
        out.append(_SEGMENTS + "".join(gap))  # the last `**` must end where the path does
    return "".join(out)


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """A user glob (find_files, grep's file filter) as a regex over a relative posix path.

    A pattern without `/` matches a file name at any depth; with `/` it matches the
    path relative to the searched directory.
    """
    pattern = pattern.strip()
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolFailure(E.INVALID_ARGUMENT, f"the glob is {len(pattern)} characters long; a glob is at most {MAX_PATTERN_CHARS}")
    anchored = "/" in pattern  # before dropping `./`, which anchors too
    if pattern.startswith("./"):
        pattern = pattern[2:]
    pattern = pattern.lstrip("/")
    alternatives = _expand_braces(pattern)
    if not anchored:
        alternatives = ["**/" + a for a in alternatives]
    body = "|".join(_translate(a) for a in alternatives)
    return re.compile(body if len(alternatives) == 1 else f"(?:{body})", re.DOTALL)


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
    """One ignore file's rules; a pattern over MAX_PATTERN_CHARS and rules past MAX_IGNORE_RULES are dropped."""
    rules: list[Rule] = []
    # Lines end at `\n` only, as git reads them (str.splitlines would also split at \f, \x85, ...).
    for raw in text.split("\n"):
        split = _split_line(raw)
        if split is None or len(split[2]) > MAX_PATTERN_CHARS:
            continue
        negate, dir_only, line = split
        pattern = line.lstrip("/") if "/" in line else "**/" + line
        rules.append(Rule(re.compile(_translate(pattern), re.DOTALL), negate, dir_only))
        if len(rules) >= MAX_IGNORE_RULES:
            break
    return rules


def read_ignore_file(dir_fd: int, name: str = ".gitignore") -> str:
    """The text of the ignore file `name` in the directory `dir_fd`, "" unless it is a regular file.

    A symlink is not followed (git does not follow one either), a FIFO or device is not
    opened, and only the whole lines within the first MAX_IGNORE_BYTES are read.
    """
    try:
        fd, _ = open_regular(dir_fd, name)
    except OSError:
        return ""
    try:
        data = os.read(fd, MAX_IGNORE_BYTES + 1)
        while len(data) <= MAX_IGNORE_BYTES:
            more = os.read(fd, MAX_IGNORE_BYTES + 1 - len(data))
            if not more:
                break
            data += more
    except OSError:
        return ""
    finally:
        os.close(fd)
    if len(data) > MAX_IGNORE_BYTES:
        data = data[: data.rfind(b"\n", 0, MAX_IGNORE_BYTES) + 1]
    return data.decode("utf-8", "surrogateescape")


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

    def pushed(self, base: str, rules: list[Rule]) -> IgnoreStack:
        return IgnoreStack(self.layers + [_Layer(base, rules)]) if rules else self


def _rebased(pattern: str, prefix: list[str]) -> list[str]:
    """What an anchored `pattern` can still match below `prefix` (the directories from its
    `.gitignore` down to the walk's top), as patterns anchored at the top."""
    segments = pattern.lstrip("/").split("/")
    rests: list[str] = []
    # A depth-first search over (segment, prefix part) pairs, each visited once.
    seen: set[tuple[int, int]] = set()
    todo = [(0, 0)]
    while todo:
        i, j = todo.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if j == len(prefix):
            # Nothing left means the pattern names the top or a directory above it: the
            # walk was asked for that directory explicitly, so the rule is dropped.
            rest = "/".join(segments[i:])
            if rest and rest not in rests:
                rests.append(rest)
        elif i < len(segments):
            if segments[i] == "**":
                todo += [(i, j + 1), (i + 1, j)]
            elif re.fullmatch(glob_to_regex(segments[i]), prefix[j], re.DOTALL):
                todo.append((i + 1, j + 1))
    return rests


def ancestor_patterns(top: str, root: str | None) -> list[str]:
    """The `.gitignore` lines of directories from `root` down to, not including, `top`
    (outermost first), rewritten to apply to paths relative to `top`.

    Unanchored patterns match at any depth and are kept as they are; anchored ones
    are re-anchored at `top`, or dropped when they cannot match below it. The
    directories are entered from `root` without following symlinks; where one is in
    the way the rules found so far are all there are.
    """
    if root is None or top == root or not top.startswith(root.rstrip(os.sep) + os.sep):
        return []
    parts = os.path.relpath(top, root).split(os.sep)
    lines: list[str] = []
    try:
        fd = open_root(root)
    except OSError:
        return []
    try:
        for depth in range(len(parts)):
            kept = 0
            for raw in read_ignore_file(fd).split("\n"):
                split = _split_line(raw)
                if split is None or len(split[2]) > MAX_PATTERN_CHARS or kept >= MAX_IGNORE_RULES:
                    continue
                kept += 1
                negate, dir_only, pattern = split
                rests = _rebased(pattern, parts[depth:]) if "/" in pattern else [pattern]
                lines += [("!" if negate else "") + ("/" if "/" in pattern else "") + rest + ("/" if dir_only else "") for rest in rests]
            if depth + 1 < len(parts):
                step = open_subdir(fd, parts[depth])
                os.close(fd)
                fd = step
    except OSError:
        pass
    finally:
        os.close(fd)
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


# A directory is entered only while its path stays a valid path (PATH_MAX), which also
# bounds the depth: what lies deeper could not be named in a call anyway.
MAX_WALK_DEPTH = PATH_MAX // 2
# Directories this deep in the walk keep their descriptor while their subdirectories are
# walked; deeper ones are opened again through `..` (checked to be the same directory).
_KEEP_OPEN_DEPTH = 32
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class _Frame:
    fd: int  # -1 while closed for a subdirectory's walk
    ident: tuple[int, int]  # st_dev, st_ino
    rel: str
    depth: int  # of its entries
    stack: IgnoreStack
    entries: list[tuple[str, bool]]  # (name, is_dir), sorted, ignored ones left out
    next: int = 0


def walk(top: str, root: str | None, *, max_depth: int | None = None, files_only: bool = False) -> Iterator[Entry]:
    """Walk `top` depth-first in sorted order, honouring the ignore rules above.

    Every directory is opened from its parent's descriptor without following symlinks
    (below `root` when given), so the walk never leaves the tree it started in.
    """
    base = IgnoreStack([_Layer("", ancestor_rules(top, root))] if root else [])
    try:
        if root is not None and (top == root or top.startswith(root.rstrip(os.sep) + os.sep)):
            fd = open_under(root, top, _DIR_FLAGS)
        else:
            fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    top_prefix = top.rstrip(os.sep) + os.sep
    frames: list[_Frame] = []
    try:
        frame = _enter(fd, "", base, 1)
        if frame is None:
            return
        frames.append(frame)
        while frames:
            frame = frames[-1]
            if frame.next >= len(frame.entries) or frame.fd < 0:
                frames.pop()
                _leave(frame, frames[-1] if frames else None)
                continue
            name, is_dir = frame.entries[frame.next]
            frame.next += 1
            rel = f"{frame.rel}/{name}" if frame.rel else name
            if not is_dir:
                yield Entry(top_prefix + rel, rel, False, frame.depth)
                continue
            if not files_only:
                yield Entry(top_prefix + rel, rel, True, frame.depth)
            if (max_depth is not None and frame.depth >= max_depth) or frame.depth >= MAX_WALK_DEPTH:
                continue
            if len(os.fsencode(top_prefix + rel)) >= PATH_MAX:
                continue
            try:
                child_fd = os.open(name, _DIR_FLAGS, dir_fd=frame.fd)
            except OSError:
                continue  # gone, unreadable, or swapped for a symlink since the listing
            child = _enter(child_fd, rel, frame.stack, frame.depth + 1)
            if child is None:
                continue
            if frame.depth > _KEEP_OPEN_DEPTH:
                os.close(frame.fd)
                frame.fd = -1
            frames.append(child)
    finally:
        for frame in frames:
            if frame.fd >= 0:
                os.close(frame.fd)


def _enter(fd: int, rel: str, stack: IgnoreStack, depth: int) -> _Frame | None:
    """A frame for the directory open as `fd` (taken over), its entries listed and filtered."""
    try:
        st = os.fstat(fd)
        with os.scandir(fd) as it:
            listed = sorted(it, key=lambda e: e.name)
    except OSError:
        os.close(fd)
        return None
    kinds: list[tuple[str, bool]] = []
    has_rules = False
    for entry in listed:
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
        has_rules = has_rules or (name == ".gitignore" and is_file)
        kinds.append((name, is_dir))
    if has_rules:
        stack = stack.pushed(rel, parse_gitignore(read_ignore_file(fd)))
    entries = [(name, is_dir) for name, is_dir in kinds if not stack.ignored(f"{rel}/{name}" if rel else name, is_dir)]
    return _Frame(fd, (st.st_dev, st.st_ino), rel, depth, stack, entries)


def _leave(child: _Frame, parent: _Frame | None) -> None:
    """Close a finished frame, first opening its parent again through `..` if the parent was closed."""
    if parent is not None and parent.fd < 0 and child.fd >= 0:
        try:
            fd = os.open("..", _DIR_FLAGS, dir_fd=child.fd)
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == parent.ident:
                parent.fd = fd
            else:
                os.close(fd)  # moved meanwhile: the rest of the parent is not walked
        except OSError:
            pass
    if child.fd >= 0:
        os.close(child.fd)


# `rg_ignore_lines` reads the tree's ignore files before any is searched: at most this many
# bytes of them in all, so that a search that stops early (its count limit) has not read far
# more than the walk it stands in for. A tree with more is searched by `walk` instead.
MAX_RG_RULE_BYTES = 1024 * 1024
# Characters a directory name must not have to stand in a ripgrep ignore line (escaped ones
# are escaped; these cannot be written at all).
_UNWRITABLE = ("\n", "\r")
_GLOB_SPECIAL = re.compile(r"([\\*?\[\]{}])")


def _rg_line(negate: bool, dir_only: bool, pattern: str, base: str) -> str:
    """One `.gitignore` rule of the directory `base` (relative to the walk's top, "" for the top)
    as a line of an ignore file ripgrep reads relative to the top."""
    if "/" in pattern:
        rule = "/" + (_GLOB_SPECIAL.sub(r"\\\1", base) + "/" if base else "") + pattern.lstrip("/")
    elif base:
        rule = "/" + _GLOB_SPECIAL.sub(r"\\\1", base) + "/**/" + pattern
    else:
        rule = pattern
    return ("!" if negate else "") + rule + ("/" if dir_only else "")


def rg_ignore_lines(top: str, root: str | None, deadline: float | None = None) -> list[str] | None:
    """Every ignore rule that applies below `top`, as the lines of one ignore file for ripgrep
    (matched relative to `top`, last match wins): the ancestors' rules, each `.gitignore` in the
    tree (outer before inner, each rebased to its directory), and `.git` last, so nothing
    re-includes it. Only directories are walked, by descriptors as `walk` does, and an ignore
    file is read with the same bounds, so ripgrep itself is told to read none.

    None when the rules cannot be written so (a directory holding a `.gitignore` whose name has
    a line break or is not UTF-8, ignore files over MAX_RG_RULE_BYTES in all) or the time ran out: the caller
    then walks with `walk`."""
    ancestors = ancestor_patterns(top, root) if root else []
    lines = list(ancestors)
    read = sum(len(line) + 1 for line in lines)
    base = IgnoreStack([_Layer("", parse_gitignore("\n".join(ancestors)))] if ancestors else [])
    top_prefix = top.rstrip(os.sep) + os.sep
    below_root = root is not None and (top == root or top.startswith(root.rstrip(os.sep) + os.sep))
    # Directories still to list (not held open, so a wide tree needs few descriptors).
    todo: list[tuple[str, IgnoreStack, int]] = [("", base, 1)]
    while todo:
        rel, stack, depth = todo.pop()
        path = top_prefix + rel if rel else top
        try:
            if below_root:
                assert root is not None
                fd = open_under(root, path, _DIR_FLAGS)
            else:
                fd = os.open(path, _DIR_FLAGS if rel else os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue  # gone, unreadable, or swapped for a symlink since its parent was listed
        try:
            subdirs: list[tuple[str, int]] = []  # name, link count
            has_rules = False
            if os.fstat(fd).st_nlink == 2:
                # No subdirectory links to it (filesystems that count links, as find's leaf
                # optimisation assumes; one that does not reports 1): it is not listed at all,
                # only its `.gitignore` looked up (listing a wide directory costs far more).
                try:
                    has_rules = stat.S_ISREG(os.stat(".gitignore", dir_fd=fd, follow_symlinks=False).st_mode)
                except FileNotFoundError:
                    pass
            else:
                with os.scandir(fd) as it:
                    for entry in it:
                        name = entry.name
                        if name == ".git":
                            continue
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                subdirs.append((name, entry.stat(follow_symlinks=False).st_nlink))
                            elif name == ".gitignore":
                                has_rules = entry.is_file(follow_symlinks=False)
                        except OSError:
                            continue
            if has_rules:
                if any(c in rel for c in _UNWRITABLE):
                    return None
                try:
                    rel.encode("utf-8")
                except UnicodeEncodeError:
                    return None
                read += os.stat(".gitignore", dir_fd=fd, follow_symlinks=False).st_size
                if read > MAX_RG_RULE_BYTES:
                    return None
                text = read_ignore_file(fd)
                kept = 0
                for raw in text.split("\n"):
                    split = _split_line(raw)
                    if split is None or len(split[2]) > MAX_PATTERN_CHARS:
                        continue
                    try:
                        split[2].encode("utf-8")
                    except UnicodeEncodeError:
                        return None
                    lines.append(_rg_line(*split, rel))
                    kept += 1
                    if kept >= MAX_IGNORE_RULES:
                        break
                stack = stack.pushed(rel, parse_gitignore(text))
            for name, links in subdirs if depth < MAX_WALK_DEPTH else ():
                child = f"{rel}/{name}" if rel else name
                if stack.ignored(child, True) or _too_long(top_prefix + child):
                    continue
                if links == 2 and not _may_hold_rules(fd, name):
                    continue  # no subdirectory and no `.gitignore`: nothing to collect there
                todo.append((child, stack, depth + 1))
        except OSError:
            continue
        finally:
            os.close(fd)
        if deadline is not None and time.monotonic() > deadline:
            return None
    lines.append(".git")
    return lines


def _may_hold_rules(dir_fd: int, name: str) -> bool:
    """Whether the subdirectory `name` of `dir_fd` may hold a `.gitignore`: one look-up (no
    exception raised for the usual answer), where opening it (below the root, as its walk does)
    costs several. It is only a filter: a directory that may is then opened that way. An error
    other than the name's absence also answers no: the walk would meet the same error there
    and collect no rule from it."""
    return os.access(f"{name}/.gitignore", os.F_OK, dir_fd=dir_fd, follow_symlinks=False)


def _too_long(path: str) -> bool:
    """Whether `path` is PATH_MAX bytes or more (encoded only when it could be: a character is at
    most 4 bytes)."""
    return len(path) * 4 >= PATH_MAX and len(os.fsencode(path)) >= PATH_MAX
