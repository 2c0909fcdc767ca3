"""find_files and grep: ripgrep when it is on PATH, pure Python otherwise, same results.

Both are read-only and run without approval, so each is bounded: a time budget
(SEARCH_BUDGET_S, then a `timeout` failure), memory that does not grow with the
searched data (only the returned matches are held; ripgrep's output is parsed as it
streams, files are read in chunks), and counting that stops at COUNT_LIMIT. The
Python engine runs in a worker process (grepworker.py) that is killed at the budget,
since a catastrophic `re` pattern cannot be interrupted inside this process. A call
that is cancelled (the `cancelled` event is set) stops as soon as it is noticed.

ripgrep walks a directory itself, so that a search costs this process (and its GIL) little
more than listing the directories: ignore.rg_ignore_lines walks the directories only, by
descriptors, reads each `.gitignore` with its bounds (a FIFO or a symlink is never opened), and
writes every rule into one memory file that ripgrep is given with `--no-ignore`, so it reads
no ignore file of its own. It runs in the searched directory, opened below its root. Since it
opens the paths below it by name, a directory or file swapped for a symlink while it runs could
show it a file elsewhere; so each match returned is read again from its file opened below the
root without following symlinks, and a file whose lines differ is left out with its count, and
each path find_files returns is checked to be a regular file reached the same way. (The count
of matches past the returned ones is not checked so.) A file swapped for a FIFO meanwhile can
hold ripgrep until the time budget.

Where the rules cannot be written so (a directory name with a line break, more than
ignore.MAX_RG_RULE_BYTES of ignore files) or the path is one file, the files are found by the
descriptor walk of ignore.py and each is opened below its root without following symlinks
(paths.py); ripgrep is handed those open files as /proc/self/fd/N, in batches. The Python
engine (no ripgrep, or a pattern it refuses) walks the same way.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import re
import resource
import select
import selectors
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from . import errors as E
from ._proto import tools_pb2 as pb
from .errors import ToolFailure, from_os_error
from .grepworker import MAX_MATCH_CHARS, READ_CHUNK, FileOpener, line_text  # noqa: F401 - MAX_MATCH_CHARS is this module's too
from .ignore import _expand_braces, compile_glob, rg_ignore_lines, walk
from .paths import NotARegularFile, Opened, Roots, cut, open_beneath, open_root, open_under, to_wire

DEFAULT_FIND_LIMIT = 1000
DEFAULT_MAX_MATCHES = 500
SEARCH_BUDGET_S = 30.0
# Matching lines (grep) or paths (find_files) are counted this far and no further, so a
# broad search stops early; a truncated result's total is then a lower bound.
COUNT_LIMIT = 10_000
MAX_PATTERN_CHARS = 4096
ECHO_CHARS = 200
# ripgrep's address space: twice what a heavy pattern needs (about 100 MB resident), so only
# a runaway one meets it; ripgrep then fails and Python takes over.
RG_MEMORY_BYTES = 256 * 1024 * 1024
# Files handed to one ripgrep run (each an open descriptor while it runs): RG_FIRST_BATCH, then
# twice as many each run up to RG_BATCH_FILES (fewer when this process may not open that many),
# so a small search starts one ripgrep and a large one starts a few.
RG_FIRST_BATCH = 64
RG_BATCH_FILES = 1024
# How often a running search looks at its `cancelled` event.
CANCEL_POLL_S = 0.1
# How much of one line of ripgrep's output is kept: the file name, the line number, and more
# text than MAX_MATCH_CHARS characters can take.
_RG_LINE_KEEP = 16 * 1024
_PIPE_CHUNK = 256 * 1024
# ripgrep's output pipe, where the system allows it: large enough to hold the whole output of a
# search that reaches the count limit with short lines, so that ripgrep never waits for this
# process to read while the output gathers (its own buffer is kernel memory, freed at the end).
_PIPE_BYTES = 1024 * 1024
# As the count nears its limit, the pipe is made to hold little more than the output still
# needed (at least this much), so that ripgrep does not run far past the limit meanwhile
# (wasted work when many searches share the processors).
_PIPE_LEAST = 64 * 1024
# How long output that is only counted is left to gather in ripgrep's pipe between reads:
# ripgrep writes a few KB at a time, and each piece read costs the parse a fixed amount, where a
# longer piece costs little more.
_GATHER_S = 0.001
# select() takes descriptors below FD_SETSIZE only.
_SELECT_FDS = 1024
_STDERR_KEEP = 4096
# What ripgrep prints after a file's matches (or instead of them) when the file holds a NUL
# byte: a file it is given is searched to the end regardless (a walked one would be stopped at it).
_RG_BINARY_MESSAGES = (b": binary file matches (", b": WARNING: stopped searching binary file")
_FD_DIR = "/proc/self/fd"
PATH_MAX_BYTES = 4096
_SNIFF_BYTES = 8192
# A file this small is read whole before it is handed to ripgrep when the pattern is a plain
# literal (or literals joined by `|`): one without any of them cannot match and is not handed
# over, which spares ripgrep's cost per file (a few system calls and a path to resolve).
_PREFILTER_BYTES = 64 * 1024
_REGEX_SYNTAX = frozenset("\\.^$*+?{}[]()|")
# How ripgrep walks a directory itself: hidden files searched, symlinks not followed (its
# default), and no ignore file of its own read: the rules come from one file that
# ignore.rg_ignore_lines writes (the tree's `.gitignore` files read with their bounds, `.git` last).
# (`--no-ignore` leaves the rules of `--ignore-file` in force, and covers `.rgignore` too).
_RG_WALK_FLAGS = ("--sort", "path", "--hidden", "--no-ignore")
_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_PATH = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# find_files checks the paths it returns from one directory by listing it once when it returns
# this many of them, else by looking each up.
_LIST_DIR_FROM = 8
# The check of grep's matches reads the matches of one file lying this close together at once.
_VERIFY_SPAN = 256 * 1024
# The characters a glob's last segment may hold to be handed to ripgrep as a file-name type
# (`--type-add`), which, unlike its `--glob`, never re-includes an ignored file.
_NAME_GLOB = re.compile(r"[A-Za-z0-9._*?+@%=~ -]+")
# What ripgrep's run in a directory returns when it cannot be used there, so the files are
# walked here and handed over instead.
_HAND_OVER = object()
# Runs the worker; sys.path gets the sidecar's own directory, since a lane puts it there by hand.
_WORKER = "import sys; sys.path.insert(0, sys.argv[1]); from osprey_sidecar.grepworker import main; sys.exit(main())"


def _literals(pattern: str, ignore_case: bool) -> tuple[bytes, ...] | None:
    """The strings one of which every matching line holds, when the pattern is nothing but
    literals joined by `|` (read the same way by ripgrep and Python); else None."""
    if ignore_case or any(c in _REGEX_SYNTAX for c in pattern.replace("|", "")):
        return None
    try:
        alternatives = tuple(a.encode("utf-8") for a in pattern.split("|"))
    except UnicodeEncodeError:  # a lone surrogate: the Python engine reads it as a raw byte
        return None
    return None if b"" in alternatives else alternatives


class _Expired(Exception):
    """The time budget ran out; the process doing the work was killed."""


class _Cancelled(Exception):
    """The call was cancelled; the process doing the work was killed."""


_found_rg: dict[str | None, str] = {}  # PATH: where ripgrep was last found on it


def _ripgrep() -> str | None:
    """ripgrep's path on PATH, or None. Where it was found before is looked up again only once
    it is no longer there or PATH changed (a PATH search looks in every directory, a few system
    calls each)."""
    path = os.environ.get("PATH")
    found = _found_rg.get(path)
    if found is not None and os.access(found, os.X_OK):
        return found
    rg = shutil.which("rg")
    _found_rg.clear()
    if rg is not None:
        _found_rg[path] = rg
    return rg


def _check_text(what: str, value: str) -> None:
    if len(value) > MAX_PATTERN_CHARS:
        raise ToolFailure(E.INVALID_ARGUMENT, f"the {what} is {len(value)} characters long; the limit is {MAX_PATTERN_CHARS}. Use a shorter one")
    if "\x00" in value:
        raise ToolFailure(E.INVALID_ARGUMENT, f"the {what} contains a NUL character, which cannot match (files holding NUL bytes are not searched); remove it")


def _timeout(what: str, budget_s: float, advice: str) -> ToolFailure:
    return ToolFailure(E.TIMEOUT, f"{what} took longer than {budget_s:g} s and was stopped; {advice}")


def _cancelled(what: str) -> ToolFailure:
    return ToolFailure(E.TIMEOUT, f"{what} was stopped: its call was cancelled")


def _check_time(deadline: float, cancelled: threading.Event | None) -> None:
    if time.monotonic() > deadline:
        raise _Expired
    if cancelled is not None and cancelled.is_set():
        raise _Cancelled


def _shown(roots: Roots, top: str, rel: str) -> str:
    return roots.show(os.path.join(top, rel) if rel else top)


def _shower(roots: Roots, top: str) -> Callable[[str], str]:
    """_shown for the paths below one `top`: what `top` shows as is worked out once."""
    if roots.cwd.startswith(top.rstrip(os.sep) + os.sep):
        return lambda rel: _shown(roots, top, rel)  # some paths below `top` are shown from the working directory
    base = roots.show(top)
    head = "" if base == "." else base.rstrip("/") + "/"

    def shown(rel: str) -> str:
        if not rel:
            return base
        return head + (rel if rel.isascii() else to_wire(rel))

    return shown


def _not_regular(root: str, top: str, rels: list[str]) -> set[str]:
    """Those of `rels` (paths below `top`) that are not regular files reached below the root
    through no symlink. A directory holding many of them is listed once (each entry's kind comes
    with the listing), the others are looked up one by one; every directory is opened from one
    descriptor of the root."""
    by_dir: dict[str, list[str]] = {}
    for rel in rels:
        head, _, name = rel.rpartition("/")
        names = by_dir.get(head)
        if names is None:
            by_dir[head] = [name]
        else:
            names.append(name)
    base = "" if top == root else top[len(root.rstrip(os.sep)) + 1 :] + "/"
    wrong: set[str] = set()
    try:
        root_fd = open_root(root)
    except OSError:
        return set(rels)
    try:
        for head, names in by_dir.items():
            listed = len(names) >= _LIST_DIR_FROM
            dir_prefix = head + "/" if head else ""
            try:
                fd = open_beneath(root_fd, base + head, _DIR_OPEN if listed else _DIR_PATH)
            except OSError:
                wrong.update(dir_prefix + name for name in names)
                continue
            try:
                if listed:
                    # Only the wanted names are held, whatever the directory's size.
                    wanted = set(names)
                    with os.scandir(fd) as entries:
                        for entry in entries:
                            if entry.name in wanted and entry.is_file(follow_symlinks=False):
                                wanted.discard(entry.name)
                                if not wanted:
                                    break
                    wrong.update(dir_prefix + name for name in wanted)
                else:
                    for name in names:
                        try:
                            if not stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                                wrong.add(dir_prefix + name)
                        except OSError:
                            wrong.add(dir_prefix + name)
            except OSError:
                wrong.update(dir_prefix + name for name in names)
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
    return wrong


def _count_limit(limit: int) -> int:
    return max(COUNT_LIMIT, limit + 1)


def _name_globs(glob: str) -> tuple[list[str], bool] | None:
    """File-name globs that every path the glob matches has a name matching (ripgrep's
    `--type-add`), and whether they are the whole glob (it has no `/`); None when its last
    segment cannot be written so."""
    pattern = glob.strip()
    anchored = "/" in pattern
    if pattern.startswith("./"):
        pattern = pattern[2:]
    names = [alternative.rsplit("/", 1)[-1] for alternative in _expand_braces(pattern.lstrip("/"))]
    if not names or any(not _NAME_GLOB.fullmatch(n) or "**" in n or n.strip() != n for n in names):
        return None
    return names, not anchored


def _type_flags(names: list[str]) -> list[str]:
    return [*(f"--type-add=osprey:{name}" for name in names), "--type=osprey"]


def _walk_setup(top: str, root: str | None, deadline: float) -> tuple[int, int] | None:
    """For ripgrep to walk `top` itself: the directory open (ripgrep runs in it, so the path is
    resolved only here, below its root) and a memory file holding the ignore rules; None when
    the rules cannot be written (the caller walks instead)."""
    if root is None or not os.path.isdir(_FD_DIR) or not hasattr(os, "memfd_create"):
        return None
    lines = rg_ignore_lines(top, root, deadline)
    if lines is None:
        return None
    try:
        top_fd = open_under(root, top, _DIR_OPEN)
    except OSError:
        return None
    rules_fd = os.memfd_create("osprey-ignore", os.MFD_CLOEXEC)
    data = ("\n".join(lines) + "\n").encode("utf-8")
    view = memoryview(data)
    while view:
        view = view[os.write(rules_fd, view) :]
    return top_fd, rules_fd


def _capped(cmd: list[str]) -> tuple[list[str], int]:
    """`cmd` and the cap on its address space, which _stream sets on the process as soon as it
    is started: preexec_fn is unsafe in a threaded server, and a wrapper such as the prlimit
    tool costs a second program start on every search."""
    return cmd, _memory_cap(RG_MEMORY_BYTES)


class _FilesOutput:
    """`rg --files --null` output, parsed as it streams: the first `keep` paths the glob matches,
    and how many it matches, counting no further than `count_limit`."""

    def __init__(self, keep: int, count_limit: int, regex: re.Pattern[str] | None) -> None:
        self.keep, self.count_limit, self.regex = keep, count_limit, regex
        self.kept: list[str] = []
        self.total = 0
        self.unparsable = False
        self._partial = b""

    def feed(self, data: bytes) -> bool:
        regex = self.regex
        if regex is None and len(self.kept) >= self.keep:
            # Only counted from here: no name needs splitting off or decoding.
            last = data.rfind(b"\x00")
            count = data.count(b"\x00")
            if self.total + count < self.count_limit and len(data) - last - 1 + (0 if count else len(self._partial)) <= 2 * PATH_MAX_BYTES:
                self.total += count
                self._partial = data[last + 1 :] if count else self._partial + data
                return False
        *names, self._partial = (self._partial + data).split(b"\x00")
        if len(self._partial) > 2 * PATH_MAX_BYTES:
            self.unparsable = True
            return True
        if regex is None:
            # The first names are kept, the rest counted up to the limit: they are checked (each
            # starts with `./`) and decoded together. No name can reach the limit while kept.
            if len(names) > self.count_limit - self.total:
                names = names[: self.count_limit - self.total]  # past the limit none is looked at
            joined = b"\x00".join(names)
            if names and not (joined.startswith(b"./") and joined.count(b"\x00./") == len(names) - 1):
                self.unparsable = True
                return True
            room = self.keep - len(self.kept)
            if room > 0 and names:
                kept = joined if room >= len(names) else b"\x00".join(names[:room])
                self.kept += os.fsdecode(kept).replace("\x00./", "\x00")[2:].split("\x00")
            self.total += len(names)
            return self.total >= self.count_limit
        for name in names:
            if not name.startswith(b"./"):
                self.unparsable = True
                return True
            rel = os.fsdecode(name[2:])
            if not regex.fullmatch(rel):
                continue
            self.total += 1
            if len(self.kept) < self.keep:
                self.kept.append(rel)
            elif self.total >= self.count_limit:
                return True
        return False


def _ripgrep_files(
    rg: str, roots: Roots, top: str, regex: re.Pattern[str], pattern: str, limit: int,
    deadline: float, cancelled: threading.Event | None,
) -> tuple[list[str], int] | None:
    """find_files by `rg --files`, which walks `top` itself; None where it cannot (the caller walks)."""
    root = roots.root_of(top)
    setup = _walk_setup(top, root, deadline)
    if setup is None:
        return None
    assert root is not None
    top_fd, rules_fd = setup
    try:
        names = _name_globs(pattern)
        cmd = [
            rg, "--no-config", "--files", "--null", *_RG_WALK_FLAGS, "--ignore-file", f"{_FD_DIR}/{rules_fd}",
            *(_type_flags(names[0]) if names else []), "--", ".",
        ]
        cmd, cap = _capped(cmd)
        out = _FilesOutput(limit, _count_limit(limit), None if names and names[1] else regex)
        ran = _stream(
            cmd, stdin=b"", deadline=deadline, feed=out.feed, memory_bytes=cap, pass_fds=(top_fd, rules_fd),
            cancelled=cancelled, cwd=f"{_FD_DIR}/{top_fd}", gather=lambda: len(out.kept) >= out.keep,
        )
    finally:
        os.close(top_fd)
        os.close(rules_fd)
    if ran is None or out.unparsable:
        return None
    returncode, stderr = ran
    if returncode is not None and (returncode < 0 or (returncode == 2 and not out.total and b"(os error" not in stderr)):
        return None
    # ripgrep walked by path: a directory swapped for a symlink meanwhile could have led it
    # elsewhere. Each path returned is checked here to be a regular file below the root.
    wrong = _not_regular(root, top, out.kept)
    shown = _shower(roots, top)
    return [shown(rel) for rel in out.kept if rel not in wrong], out.total - len(wrong)


def find_files(
    roots: Roots, pattern: str, path: str = "", limit: int = 0,
    *, budget_s: float = SEARCH_BUDGET_S, cancelled: threading.Event | None = None,
) -> pb.FindFilesResponse:
    """Files under `path` whose relative path matches the glob, sorted by path."""
    if not pattern.strip():
        raise ToolFailure(E.INVALID_ARGUMENT, "pattern is empty; give a glob such as '**/*.py' or '*.md'")
    _check_text("pattern", pattern)
    if limit < 0:
        raise ToolFailure(E.INVALID_ARGUMENT, "limit must not be negative")
    deadline = time.monotonic() + budget_s
    limit = limit or DEFAULT_FIND_LIMIT
    count_limit = _count_limit(limit)
    regex = compile_glob(pattern)
    target = _open_target(roots, path)
    target.close()
    if not target.is_dir:
        raise ToolFailure(E.NOT_A_DIRECTORY, f"{cut(path)} is a file; find_files searches a directory")
    top = target.real
    rg = _ripgrep()
    if rg is not None:
        try:
            listed = _ripgrep_files(rg, roots, top, regex, pattern, limit, deadline, cancelled)
        except _Expired:
            raise _timeout("find_files", budget_s, "narrow the path or the pattern") from None
        except _Cancelled:
            raise _cancelled("find_files") from None
        if listed is not None:
            return pb.FindFilesResponse(paths=listed[0], truncated=listed[1] > limit, total=listed[1])
    found: list[str] = []
    total = 0
    try:
        for entry in walk(top, roots.root_of(top), files_only=True):
            _check_time(deadline, cancelled)
            if regex.fullmatch(entry.rel):
                total += 1
                if len(found) < limit:
                    found.append(_shown(roots, top, entry.rel))
                elif total >= count_limit:
                    break
    except _Expired:
        raise _timeout("find_files", budget_s, "narrow the path or the pattern") from None
    except _Cancelled:
        raise _cancelled("find_files") from None
    return pb.FindFilesResponse(paths=found, truncated=total > limit, total=total)


@dataclass
class _Target:
    """What a search's path names: a directory (walked by descriptors below its root), a
    regular file (open for reading), or anything else, which holds nothing to search."""

    real: str
    file: Opened | None = None
    special: bool = False  # a FIFO, socket or device

    @property
    def is_dir(self) -> bool:
        return self.file is None and not self.special

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def _open_target(roots: Roots, path: str) -> _Target:
    """Open what `path` names below its root, following no symlink on the way."""
    try:
        file = roots.open_file(path, default_cwd=True)
    except IsADirectoryError:
        return _Target(roots.resolve(path))
    except NotARegularFile:
        return _Target(roots.resolve(path), special=True)
    except OSError as exc:
        raise from_os_error(exc, cut(path or ".")) from None
    return _Target(file.real, file)


def _compile(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    # A str pattern, searched over text decoded with surrogateescape: like ripgrep's,
    # its classes, `\w` and case folding are Unicode-aware (a bytes pattern's are ASCII).
    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolFailure(E.INVALID_ARGUMENT, f"invalid regular expression {cut(pattern, ECHO_CHARS)!r}: {cut(str(exc), 80)}") from None
    except RecursionError:
        raise ToolFailure(E.INVALID_ARGUMENT, f"the regular expression {cut(pattern, ECHO_CHARS)!r} is nested too deeply; simplify it") from None


def grep(
    roots: Roots, pattern: str, path: str = "", glob: str = "", ignore_case: bool = False, max_matches: int = 0,
    *, engine: str | None = None, budget_s: float = SEARCH_BUDGET_S, cancelled: threading.Event | None = None,
) -> pb.GrepResponse:
    """Lines matching a regex in the files under `path` (or in one file), sorted by path and line.

    When `cancelled` is set (the call was cancelled), the search stops and fails."""
    if pattern == "":
        raise ToolFailure(E.INVALID_ARGUMENT, "pattern is empty; give a regular expression")
    _check_text("pattern", pattern)
    _check_text("glob", glob)
    if max_matches < 0:
        raise ToolFailure(E.INVALID_ARGUMENT, "max_matches must not be negative")
    deadline = time.monotonic() + budget_s
    glob = glob.strip()
    file_filter = compile_glob(glob) if glob else None
    _compile(pattern, ignore_case)
    limit = max_matches or DEFAULT_MAX_MATCHES
    rg = _ripgrep() if engine in (None, "ripgrep") else None
    target = _open_target(roots, path)
    if target.special:
        return pb.GrepResponse(engine="ripgrep" if rg else "python")
    base = target.real if target.is_dir else os.path.dirname(target.real)
    try:
        search = _Search(roots, pattern, target, glob, file_filter, ignore_case, limit, deadline, cancelled)
        found = search.ripgrep(rg) if rg else None
        used = "ripgrep"
        if found is None:
            found, used = search.python(), "python"
    except _Expired:
        raise _timeout("the search", budget_s, "simplify the pattern (avoid nested quantifiers and lookarounds) or narrow the path") from None
    except _Cancelled:
        raise _cancelled("the search") from None
    finally:
        target.close()
    kept, total = found
    # The matches go as columns, each path once (the matches of a file come together).
    shower = _shower(roots, base)
    paths: list[str] = []
    match_paths: list[int] = []
    last = None
    for rel, _, _ in kept:
        if rel != last:
            paths.append(shower(rel))
            last = rel
        match_paths.append(len(paths) - 1)
    return pb.GrepResponse(
        paths=paths, match_paths=match_paths, match_lines=[k[1] for k in kept], match_texts=[k[2] for k in kept],
        truncated=total > limit, total=total, engine=used,
    )


Found = tuple[list[tuple[str, int, str]], int]
# A match as ripgrep printed it: line number, the line's bytes (without its newline), the byte
# offset where it starts in its file, and whether the output line was cut (at _RG_LINE_KEEP).
_Hit = tuple[int, bytes, int, bool]


class _Search:
    """One grep call: the first `limit` matches in path order, and a count up to the limit."""

    def __init__(
        self, roots: Roots, pattern: str, target: _Target, glob: str, file_filter: re.Pattern[str] | None,
        ignore_case: bool, limit: int, deadline: float, cancelled: threading.Event | None,
    ) -> None:
        self.pattern, self.top, self.file, self.glob, self.file_filter = pattern, target.real, target.file, glob, file_filter
        self.ignore_case, self.limit, self.deadline, self.cancelled = ignore_case, limit, deadline, cancelled
        self.root = roots.root_of(target.real)
        self.literals = _literals(pattern, ignore_case)

    def python(self) -> Found:
        request = {
            "pattern": self.pattern, "ignore_case": self.ignore_case, "top": self.top, "root": self.root,
            "fd": self.file.fd if self.file is not None else None,
            "name": os.path.basename(self.file.real) if self.file is not None else "",
            "glob": self.glob, "keep": self.limit, "count_limit": _count_limit(self.limit),
        }
        out = _WorkerOutput()
        package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        # -I: neither the environment nor the working directory (the workspace) changes what it
        # imports; -S: it needs nothing from site-packages, and starts faster without.
        cmd = [sys.executable, "-I", "-S", "-c", _WORKER, package_dir]
        ran = _stream(
            cmd, stdin=json.dumps(request).encode(), deadline=self.deadline, feed=out.feed,
            pass_fds=() if self.file is None else (self.file.fd,), cancelled=self.cancelled,
        )
        if ran is None:
            raise ToolFailure(E.IO_ERROR, f"the search could not start {cut(sys.executable, ECHO_CHARS)}")
        returncode, stderr = ran
        out.feed(b"\n")
        if out.error is not None:
            raise ToolFailure(*out.error)
        if not out.ended:
            last = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {returncode}"]
            raise ToolFailure(E.IO_ERROR, f"the search failed: {cut(last[0], ECHO_CHARS)}")
        return out.kept, out.total

    def _files(self) -> Generator[tuple[int, str], None, None]:
        """The files to search, in path order, each open (the caller closes it) with its path
        relative to the search's base."""
        if self.file is not None:
            yield os.dup(self.file.fd), os.path.basename(self.file.real)
            return
        assert self.root is not None
        opener = FileOpener(self.root)
        handed = False
        try:
            for entry in walk(self.top, self.root, files_only=True):
                _check_time(self.deadline, self.cancelled)
                if self.file_filter is not None and not self.file_filter.fullmatch(entry.rel):
                    continue
                while True:
                    try:
                        fd, st = opener.open(entry.path)
                        break
                    except OSError as exc:
                        if exc.errno not in (errno.EMFILE, errno.ENFILE):
                            fd = -1  # gone, or swapped for a symlink or something else since the walk listed it
                            break
                        # No descriptor is left: the files open so far are searched first, then this one is tried again.
                        yield _NO_DESCRIPTOR
                if fd < 0:
                    continue
                # ripgrep searches a file it is given to the end, past a NUL byte; one that is binary
                # from its start (most are) is not handed over, and the rest are dropped as it reports them.
                whole = self.literals is not None and st.st_size <= _PREFILTER_BYTES
                try:
                    head = os.pread(fd, _PREFILTER_BYTES + 1 if whole else _SNIFF_BYTES, 0) if st.st_size else b""
                except OSError:
                    head = b""
                skip = not head or b"\x00" in head
                if not skip and whole and len(head) <= _PREFILTER_BYTES and handed:
                    assert self.literals is not None
                    skip = not any(literal in head for literal in self.literals)
                if skip:
                    os.close(fd)
                    continue
                # The first file is handed over whatever it holds, so ripgrep runs (and can turn
                # down a pattern it does not support) whenever there is a text file to search.
                handed = True
                yield fd, entry.rel
        finally:
            opener.close()

    def ripgrep(self, rg: str) -> Found | None:
        """None when ripgrep cannot run this search (Python takes over)."""
        if not os.path.isdir(_FD_DIR):
            return None  # no /proc: the files cannot be handed over as descriptors
        flags = [
            rg, "--no-config", "--line-number", "--byte-offset", "--with-filename", "--null", "--no-heading",
            "--color", "never", "--encoding", "none", "--no-mmap",
            # One thread searches the files in path order, so the first matches are
            # final as they arrive and ripgrep can be stopped.
            "--threads", "1",
        ]
        if self.ignore_case:
            flags.append("--ignore-case")
        if self.file is None:
            found = self._ripgrep_walking(flags)
            if found is not _HAND_OVER:
                return found  # type: ignore[return-value]
        return self._ripgrep_handed(flags)

    def _ripgrep_walking(self, flags: list[str]) -> Found | None | object:
        """ripgrep walks the directory itself (the rules from ignore.rg_ignore_lines); _HAND_OVER
        where it cannot, so the files are walked here and handed to it."""
        setup = _walk_setup(self.top, self.root, self.deadline)
        if setup is None:
            _check_time(self.deadline, self.cancelled)
            return _HAND_OVER
        assert self.root is not None
        top_fd, rules_fd = setup
        names = _name_globs(self.glob) if self.glob else None
        cmd = [*flags, *_RG_WALK_FLAGS, "--ignore-file", f"{_FD_DIR}/{rules_fd}"]
        if names:
            cmd += _type_flags(names[0])
        cmd, cap = _capped([*cmd, "--regexp", self.pattern, "--", "."])
        out = _RgOutput(self.limit, _count_limit(self.limit), self.deadline)
        opener = FileOpener(self.root)
        prefix = self.top.rstrip(os.sep) + os.sep
        out.walked = lambda rel: _open_listed(opener, prefix + rel)
        if self.file_filter is not None and not (names and names[1]):
            out.accept = self.file_filter.fullmatch
        try:
            ran = _stream(
                cmd, stdin=b"", deadline=self.deadline, feed=out.feed, memory_bytes=cap, pass_fds=(top_fd, rules_fd),
                cancelled=self.cancelled, cwd=f"{_FD_DIR}/{top_fd}", gather=out.counting, needed=out.needed,
            )
            if ran is None:
                return None
            if out.unparsable:
                return _HAND_OVER  # e.g. a name with a line break in it
            returncode, stderr = ran
            if returncode is not None:
                out.finish()
                if returncode < 0:
                    return None  # killed (its memory cap): what it printed may be incomplete
                if returncode == 2 and not out.seen and b"(os error" not in stderr:
                    return None  # e.g. a pattern ripgrep's regex engine does not support
            return self._verified(out, opener, prefix)
        finally:
            opener.close()
            os.close(top_fd)
            os.close(rules_fd)

    def _verified(self, out: _RgOutput, opener: FileOpener, prefix: str) -> Found:
        """The matches to return, each checked against its file opened here below the root
        without following a symlink: ripgrep walked by path, so a directory or file swapped for
        a symlink while it ran could have shown it a file elsewhere. A file whose lines differ
        (it changed meanwhile, or was not the one ripgrep read) is left out, with its count."""
        wrong = set()
        for rel, hits in out.hits.items():
            fd = _open_listed(opener, prefix + rel)
            try:
                if fd < 0 or not _lines_at(fd, hits):
                    wrong.add(rel)
            finally:
                if fd >= 0:
                    os.close(fd)
        if not wrong:
            return out.kept, out.total
        return [k for k in out.kept if k[0] not in wrong], out.total - sum(out.counts[rel] for rel in wrong)

    def _ripgrep_handed(self, flags: list[str]) -> Found | None:
        """ripgrep searches the files walked here, handed to it as open descriptors in batches."""
        cmd = [*flags, "--no-ignore", "--regexp", self.pattern, "--"]
        cmd, cap = _capped(cmd)
        out = _RgOutput(self.limit, _count_limit(self.limit), self.deadline)
        searched = [0, 0, 0]  # files in the finished runs, the lines they counted, files in the current run

        def needed() -> int | None:
            """How many files the next run is likely to need, judged by the finished runs:
            twice what would reach the count limit, at least RG_FIRST_BATCH; None for no bound."""
            done, counted, current = searched
            if not counted:
                return None
            rate = counted / done  # matching lines per file
            left = out.count_limit - counted - rate * current
            return max(RG_FIRST_BATCH, math.ceil(2 * left / rate))

        batches = _Batches(self._files(), needed)
        first = True
        try:
            while batch := batches.take():
                searched[2] = len(batch)
                out.files = {os.fsencode(f"{_FD_DIR}/{fd}"): (rel, fd) for fd, rel in batch}
                try:
                    ran = _stream(
                        cmd + [os.fsdecode(name) for name in out.files], stdin=b"", deadline=self.deadline, feed=out.feed,
                        memory_bytes=cap, pass_fds=tuple(fd for fd, _ in batch), cancelled=self.cancelled,
                        idle=batches.step,
                    )
                finally:
                    for fd, _ in batch:
                        os.close(fd)
                if ran is None or out.unparsable:
                    return None  # not started, or output this parser does not follow
                returncode, stderr = ran
                if returncode is None:
                    return out.kept, out.total  # enough counted
                out.finish()
                if returncode < 0:
                    return None  # killed (its memory cap): what it printed may be incomplete
                if first and returncode not in (0, 1) and not out.seen:
                    return None  # e.g. a pattern ripgrep's regex engine does not support
                first = False
                searched[:] = [searched[0] + len(batch), out.total, 0]
        finally:
            batches.close()
        return out.kept, out.total


# What _Search._files yields when this process has no descriptor left to open the next file.
_NO_DESCRIPTOR = (-1, "")


class _Batches:
    """Open files for ripgrep, in runs of growing size; the next run is opened while ripgrep
    searches the current one (`step`, between reads of its output). `needed` bounds a run's
    size further, so that a search about to reach its count limit opens few files it will not search."""

    def __init__(self, files: Generator[tuple[int, str], None, None], needed: Callable[[], int | None] = lambda: None) -> None:
        self._files = files
        self._needed = needed
        self._size = RG_FIRST_BATCH
        self._next: list[tuple[int, str]] = []
        self._done = False
        self._blocked = False  # out of descriptors until the files open now are closed

    def step(self, count: int = 16) -> bool:
        """Open up to `count` more files for the next run; whether it wants more."""
        want = min(self._size, _most_open(), self._needed() or self._size)
        while count > 0 and not self._done and not self._blocked and len(self._next) < want:
            count -= 1
            item = next(self._files, None)
            if item is None:
                self._done = True
            elif item is _NO_DESCRIPTOR:
                self._blocked = True
            else:
                self._next.append(item)
        return not self._done and not self._blocked and len(self._next) < want

    def take(self) -> list[tuple[int, str]]:
        """The next run, empty once no file is left; the caller closes its files."""
        if not self._next:
            self._blocked = False  # the last run's files are closed now
        while self.step(RG_BATCH_FILES):
            pass
        if self._blocked and not self._next:
            raise ToolFailure(E.IO_ERROR, "the search could not open a file: too many files are open in the tool service; try again")
        batch, self._next = self._next, []
        self._blocked = False
        self._size *= 2
        return batch

    def close(self) -> None:
        for fd, _ in self._next:
            os.close(fd)
        self._next = []
        self._files.close()


def _most_open() -> int:
    """Files one ripgrep run may be handed: RG_BATCH_FILES, or a sixteenth of what this process may open."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return RG_BATCH_FILES
    return max(1, min(RG_BATCH_FILES, soft // 16))


class _WorkerOutput:
    """The Python engine's JSON lines, as they arrive."""

    def __init__(self) -> None:
        self.kept: list[tuple[str, int, str]] = []
        self.total = 0
        self.ended = False
        self.error: tuple[str, str] | None = None
        self._partial = b""

    def feed(self, data: bytes) -> bool:
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            if not line:
                continue
            try:
                item = json.loads(line)
            except ValueError:
                continue  # cut short: the worker died writing it, and never ends
            if "file" in item:
                self.kept += [(item["file"], number, text) for number, text in item["hits"]]
                self.total += item["count"]
            elif "error" in item:
                self.error = (str(item["error"][0]), str(item["error"][1]))
            elif item.get("end"):
                self.ended = True
        return False


class _RgOutput:
    """ripgrep's `--null --line-number` output over the files of `files` (the name ripgrep
    was given, /proc/self/fd/N, to the file's relative path and descriptor), or, where it
    walks a directory itself (`walked` set), over the files it names `./REL`, parsed as it streams.

    Each file's lines arrive together, in path order; a file's matches count only once
    the file is complete, since a NUL byte further on makes it binary and drops them."""

    # Where ripgrep walks: opens a file by its relative path below the root (-1 if it cannot).
    walked: Callable[[str], int] | None = None
    # Which relative paths are searched (the glob, where ripgrep could not be given it whole).
    accept: Callable[[str], object] | None = None

    def __init__(self, keep: int, count_limit: int, deadline: float) -> None:
        self.keep, self.count_limit, self.deadline = keep, count_limit, deadline
        self.files: dict[bytes, tuple[str, int]] = {}
        self.kept: list[tuple[str, int, str]] = []
        self.total = 0
        self.seen = False
        self.unparsable = False
        self._partial = b""  # the start of an unfinished line, at most _RG_LINE_KEEP bytes
        self._fed = 0  # bytes of output taken
        self._name: bytes | None = None
        self._rel = ""
        self._fd = -1
        self._skip = False  # the current file is binary
        self._hits: list[_Hit] = []
        self._count = 0
        self.counts: dict[str, int] = {}  # of the files with matches kept
        self.hits: dict[str, list[_Hit]] = {}  # the kept matches of each file, as ripgrep printed them

    def counting(self) -> bool:
        """Whether every match to return is held, so what follows is only counted."""
        return len(self.kept) + len(self._hits) >= self.keep

    def needed(self) -> int | None:
        """About how many more bytes of output reach the count limit, judged by the lines so far."""
        lines = self.total + self._count
        if lines < 100:
            return None
        return (self.count_limit - lines) * self._fed // lines

    def feed(self, data: bytes) -> bool:
        """Take more output; True once nothing more is needed."""
        self.seen = True
        self._fed += len(data)
        start = 0
        bulk = True
        while True:
            if not self._partial and bulk and len(self.kept) + len(self._hits) >= self.keep:
                moved = self._count_run(data, start)
                # Turned down with every match held: the rest of this output is parsed line by line.
                bulk = moved != start
                start = moved
            newline = data.find(b"\n", start)
            if newline == -1:
                room = _RG_LINE_KEEP - len(self._partial)
                if room > 0:
                    self._partial += data[start : start + room]
                return False
            line = data[start : start + _RG_LINE_KEEP] if newline - start > _RG_LINE_KEEP else data[start:newline]
            if self._partial:
                line = (self._partial + line)[:_RG_LINE_KEEP]
                self._partial = b""
            start = newline + 1
            if self._line(line):
                return True

    def _count_run(self, data: bytes, start: int) -> int:
        """Once every match to return is held, count the whole lines of `data` from `start` at
        once, where no binary-file message and no file past the glob lies among them and the
        count limit does not fall in them (else they are parsed line by line); where the next
        line is to be parsed. A file's lines arrive together, so of the files these lines name,
        all but the last are complete, and the last one goes on as the current file."""
        if self.accept is not None or self._skip or len(self.kept) + len(self._hits) < self.keep:
            return start
        end = data.rfind(b"\n", start)
        if end == -1:
            return start
        end += 1
        lines = data.count(b"\n", start, end)
        room = self.count_limit - 1 - self.total - self._count  # lines counted here without reaching the limit
        if room <= 0:
            return start
        if lines > room:
            # The count limit falls in these lines: those before the line that reaches it are
            # counted here, and that line is parsed (its file is checked for a NUL byte).
            end, lines = _after_lines(data, start, end, room), room
        # Each line of matches holds one NUL byte (after its path; a line's text holds none, since
        # ripgrep stops at a NUL or turns it into a line break), a binary-file message none: where
        # the counts differ, these lines are parsed one by one.
        if data.count(b"\x00", start, end) != lines:
            return start
        last = data.rfind(b"\n", start, end - 1) + 1 or start
        nul = data.find(b"\x00", last, end)
        if nul == -1:
            return start
        name = data[last:nul]
        run = _run_start(data, start, last, name + b"\x00")
        if name == self._name:
            if run != start:
                return start
            self._count += lines
            return end
        if self.walked is not None:
            if not name.startswith(b"./"):
                return start
            rel, fd = os.fsdecode(name[2:]), -1
        elif name in self.files:
            rel, fd = self.files[name]
        else:
            return start
        last_lines = data.count(b"\n", run, end)
        between = lines - last_lines  # of the current file and files complete here
        if self._name is not None and data.startswith(self._name + b"\x00", start):
            own_lines = data.count(b"\n", start, _run_end(data, start, run, self._name + b"\x00"))
            self._count += own_lines
            between -= own_lines
        self.finish()
        self.total += between
        self._name, self._rel, self._fd, self._count = name, rel, fd, last_lines
        return end

    def _line(self, line: bytes) -> bool:
        name, sep, rest = line.partition(b"\x00")
        if not sep:
            message = next((m for m in _RG_BINARY_MESSAGES if m in line), None)
            if message is None:
                self.unparsable = True
                return True
            if line.split(message, 1)[0] == self._name:
                self._skip = True
            return False
        if name != self._name:
            self.finish()
            if self.walked is not None:
                if not name.startswith(b"./"):
                    self.unparsable = True
                    return True
                self._name, self._rel = name, os.fsdecode(name[2:])
                self._skip = self.accept is not None and not self.accept(self._rel)
            else:
                if name not in self.files:
                    self.unparsable = True
                    return True
                self._name = name
                self._rel, self._fd = self.files[name]
        if self._skip:
            return False
        self._count += 1
        if len(self.kept) + len(self._hits) < self.keep:
            number, _, rest = rest.partition(b":")
            offset, _, text = rest.partition(b":")
            self._hits.append((int(number), text, int(offset), len(line) >= _RG_LINE_KEEP))
        if self.total + self._count < self.count_limit:
            return False
        # Enough counted. ripgrep would say whether this file is binary only after all its
        # lines, so look for a NUL directly.
        fd = self._fd if self.walked is None else self.walked(self._rel)
        try:
            binary = fd < 0 or _has_nul(fd, self.deadline)  # a walked file gone meanwhile is left out
        finally:
            if fd >= 0 and self.walked is not None:
                os.close(fd)
        if binary:
            self._skip = True
            return False
        self.finish()
        return True

    def finish(self) -> None:
        """The current file is complete."""
        if self._name is not None and not self._skip:
            self.total += self._count
            if self._hits:
                self.kept += [(self._rel, hit[0], line_text(hit[1])) for hit in self._hits]
                self.hits[self._rel] = self._hits
                self.counts[self._rel] = self._count
        self._name, self._rel, self._fd, self._skip, self._hits, self._count = None, "", -1, False, [], 0


def _run_start(data: bytes, start: int, last: int, head: bytes) -> int:
    """Where the run of lines that start with `head` and take in the line at `last` begins, no
    earlier than `start` (both `start` and `last` begin lines): found by halving, since the lines
    of one file come together, each step a look at one line."""
    if data.startswith(head, start):
        return start
    low, high = start, last  # the line at `low` is not in the run, the one at `high` is
    while True:
        between = data.find(b"\n", (low + high) // 2, high - 1) + 1 or data.find(b"\n", low, high - 1) + 1
        if not between:
            return high  # the line at `low` comes right before the one at `high`
        if data.startswith(head, between):
            high = between
        else:
            low = between


def _run_end(data: bytes, start: int, stop: int, head: bytes) -> int:
    """Where the run of lines that start with `head` from `start` ends: the start of the first
    line that does not, at most `stop` (a line start whose line does not): found by halving."""
    low, high = start, stop  # the line at `low` is in the run, the one at `high` is not
    while True:
        between = data.find(b"\n", (low + high) // 2, high - 1) + 1 or data.find(b"\n", low, high - 1) + 1
        if not between:
            return high
        if data.startswith(head, between):
            low = between
        else:
            high = between


def _after_lines(data: bytes, start: int, end: int, lines: int) -> int:
    """Where the `lines`-th line of `data` from `start` ends (a newline ends each line before
    `end`, more than `lines` of them): found by halving, each step one count of newlines."""
    low, high = start, end  # the `lines`-th newline lies in data[low:high]
    before = 0  # newlines in data[start:low]
    while high - low > 64:
        middle = (low + high) // 2
        found = data.count(b"\n", low, middle)
        if before + found >= lines:
            high = middle
        else:
            low, before = middle, before + found
    at = low - 1
    for _ in range(lines - before):
        at = data.find(b"\n", at + 1, high)
    return at + 1


def _cap_memory(pid: int, cap: int) -> bool:
    """Cap the started process's address space at `cap`; False when it cannot be capped or had
    already grown past the cap in the moment before (it is then to be killed)."""
    try:
        resource.prlimit(pid, resource.RLIMIT_AS, (cap, cap))
    except ProcessLookupError:
        return True  # already gone
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmPeak:"):
                    return int(line.split()[1]) * 1024 <= cap
    except (OSError, ValueError, IndexError):
        pass  # gone meanwhile (its status reads empty), or no /proc
    return True


def _memory_cap(wanted: int) -> int:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)


def _stream(
    cmd: list[str], *, stdin: bytes, deadline: float, feed: Callable[[bytes], bool], memory_bytes: int | None = None,
    pass_fds: tuple[int, ...] = (), cancelled: threading.Event | None = None, idle: Callable[[], bool] | None = None,
    cwd: str = "/", gather: Callable[[], bool] | None = None, needed: Callable[[], int | None] | None = None,
) -> tuple[int | None, bytes] | None:
    """Run `cmd` (in `cwd`, with `pass_fds` open in it), handing its output to `feed` as it
    arrives, until it exits or `feed` returns True (it is then killed: return code None, and it
    is reaped by _Reaper instead of waited for here). Meanwhile `idle` is called between reads
    until it returns False. While `gather` returns True, the output is left to gather in the
    pipe for _GATHER_S (less once it has exited) after a read that emptied it, so that it is fed
    in fewer, larger pieces; `needed` (bytes of output still wanted, or None if not known) then
    bounds the pipe's size.

    Returns the return code and the start of its stderr, or None when it cannot be started;
    raises _Expired at the deadline and _Cancelled once `cancelled` is set (it is killed)."""
    try:
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=pass_fds,
        )
    except OSError:
        return None
    assert proc.stdout and proc.stderr
    if memory_bytes is not None and not _cap_memory(proc.pid, memory_bytes):
        proc.kill()  # its output is then read to the end, and the return code says it was killed
    pidfd = _pidfd(proc.pid) if gather is not None else -1
    stderr = bytearray()
    pending = memoryview(stdin)
    chunk = _PIPE_CHUNK
    enough = False
    try:
        with selectors.DefaultSelector() as selector:
            pipes: tuple[Any, ...] = tuple(p for p in (proc.stdin, proc.stdout, proc.stderr) if p is not None)
            for pipe in pipes:
                os.set_blocking(pipe.fileno(), False)
            if gather is not None:
                chunk = _grow_pipe(proc.stdout.fileno())
            if proc.stdin is not None:
                selector.register(proc.stdin, selectors.EVENT_WRITE)
            selector.register(proc.stdout, selectors.EVENT_READ)
            selector.register(proc.stderr, selectors.EVENT_READ)
            busy = idle is not None
            while selector.get_map():
                _check_time(deadline, cancelled)
                remaining = deadline - time.monotonic()
                if busy:
                    remaining = 0
                elif cancelled is not None:
                    remaining = min(remaining, CANCEL_POLL_S)
                for key, _ in selector.select(remaining):
                    pipe = key.fileobj
                    if pipe is proc.stdin:
                        try:
                            pending = pending[os.write(proc.stdin.fileno(), pending[:_PIPE_CHUNK]) :]
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:
                            pending = pending[len(pending) :]
                        if not pending:
                            selector.unregister(proc.stdin)
                            proc.stdin.close()
                        continue
                    data = os.read(key.fd, chunk)
                    if not data:
                        selector.unregister(pipe)
                    elif pipe is proc.stderr:
                        stderr += data[: _STDERR_KEEP - len(stderr)]
                    elif feed(data):
                        enough = True
                        return None, bytes(stderr)
                    elif gather is not None and len(data) < chunk and gather():
                        if needed is not None:
                            chunk = _shrink_pipe(proc.stdout.fileno(), chunk, needed())
                        _gather(pidfd)
                if busy:
                    assert idle is not None
                    busy = idle()
        return _wait_exit(proc, deadline, cancelled, pidfd), bytes(stderr)
    finally:
        if pidfd >= 0:
            os.close(pidfd)
        if proc.returncode is None:
            proc.kill()
            if enough:
                _REAPER.reap(proc)  # killed for good: its exit need not hold up the answer
            else:
                proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is None:
                continue
            try:
                pipe.close()
            except OSError:
                pass


def _grow_pipe(fd: int) -> int:
    """Make the pipe `fd` hold _PIPE_BYTES where the system allows, else _PIPE_CHUNK; what it holds."""
    for size in (_PIPE_BYTES, _PIPE_CHUNK):
        try:
            return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
        except OSError:
            pass  # above what this system lets a pipe hold
    return _PIPE_CHUNK


def _shrink_pipe(fd: int, size: int, needed: int | None) -> int:
    """Make the pipe `fd` (of `size` bytes) hold little more than `needed` bytes, at least
    _PIPE_LEAST, where that is less than it holds; what it holds."""
    if needed is None or size <= _PIPE_LEAST or needed >= size // 2:
        return size
    try:
        return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, max(_PIPE_LEAST, needed))
    except OSError:
        return size  # it holds more than that just now


def _pidfd(pid: int) -> int:
    """A descriptor that becomes readable when the process `pid` exits; -1 where there is none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


def _gather(pidfd: int) -> None:
    """Leave output to gather in the pipe for _GATHER_S, no longer once the process has exited
    (all its output is then in the pipe): one wait either way, since each wake-up costs a turn
    of the scheduler on a loaded machine."""
    if pidfd < 0 or pidfd >= _SELECT_FDS:
        time.sleep(_GATHER_S)
    else:
        select.select((pidfd,), (), (), _GATHER_S)


def _wait_exit(proc: subprocess.Popen[bytes], deadline: float, cancelled: threading.Event | None, known: int = -1) -> int:
    """The exit status of `proc`, whose output has ended: woken by its exit (a pidfd: `known`, if
    the caller has one open, else one opened here) where the system has one, rather than by
    polling at growing intervals."""
    pidfd = known if known >= 0 else _pidfd(proc.pid)
    poller = select.poll()
    if pidfd >= 0:
        poller.register(pidfd, select.POLLIN)
    try:
        while True:
            _check_time(deadline, cancelled)
            timeout = min(max(deadline - time.monotonic(), 0), CANCEL_POLL_S)
            if pidfd >= 0:
                if not poller.poll(timeout * 1000):
                    continue
                returncode = proc.poll()
                if returncode is not None:
                    return returncode
                continue
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if pidfd >= 0 and pidfd != known:
            os.close(pidfd)


class _Reaper:
    """Waits, in one thread of its own, for the processes a search killed once it had what it
    needed, so that no call waits for its process to exit (and none is left a zombie)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def reap(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.append(proc)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="osprey-search-reaper", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._procs:
                    self._wake.wait()
                proc = self._procs.pop()
            proc.wait()


_REAPER = _Reaper()


def _open_listed(opener: FileOpener, real: str) -> int:
    """The regular file `real` open for reading below the root, following no symlink; -1 if it cannot be."""
    try:
        return opener.open(real)[0]
    except OSError:
        return -1


def _lines_at(fd: int, hits: list[_Hit]) -> bool:
    """Whether the open file holds each of `hits` (in file order) at its offset, each a line of
    its own (or, for a line ripgrep's output was cut in, starting with what was kept of it): one
    read for the matches lying within _VERIFY_SPAN of the first of them, wherever in the file they lie."""
    i = 0
    while i < len(hits):
        first = hits[i][2]
        j = i + 1
        while j < len(hits) and first <= hits[j][2] <= first + _VERIFY_SPAN:
            j += 1
        # The byte before each line is read too (a newline: it starts a line), and before the
        # file's first byte stands a newline that is not in the file.
        start = first - 1 if first else 0
        data = os.pread(fd, hits[j - 1][2] - start + _RG_LINE_KEEP + 1, start)
        if not first:
            data, start = b"\n" + data, -1
        for _, raw, offset, was_cut in hits[i:j]:
            at = offset - 1 - start
            if data[at : at + 1] != b"\n":
                return False  # not the start of a line
            end = at + 1 + len(raw)
            if data[at + 1 : end] != raw or not (was_cut or data[end : end + 1] in (b"\n", b"")):
                return False
        i = j
    return True


def _has_nul(fd: int, deadline: float) -> bool:
    """Whether the open file holds a NUL byte (read from its start; its offset is unchanged)."""
    offset = 0
    try:
        while chunk := os.pread(fd, READ_CHUNK, offset):
            if b"\x00" in chunk:
                return True
            offset += len(chunk)
            if time.monotonic() > deadline:
                raise _Expired
    except OSError:
        pass
    return False
