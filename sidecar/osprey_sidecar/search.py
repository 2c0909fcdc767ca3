"""find_files and grep: ripgrep when it is on PATH, pure Python otherwise, same results.

Both are read-only and run without approval, so each is bounded: a time budget
(SEARCH_BUDGET_S, then a `timeout` failure), memory that does not grow with the
searched data (only the returned matches are held; ripgrep's output is parsed as it
streams, files are read in chunks), and counting that stops at COUNT_LIMIT. The
Python engine runs in a worker process (grepworker.py) that is killed at the budget,
since a catastrophic `re` pattern cannot be interrupted inside this process.
"""

from __future__ import annotations

import json
import os
import re
import resource
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import errors as E
from .errors import ToolFailure
from .grepworker import MAX_MATCH_CHARS, READ_CHUNK, line_text  # noqa: F401 - MAX_MATCH_CHARS is this module's too
from .ignore import ancestor_patterns, compile_glob, walk
from .paths import Roots

DEFAULT_FIND_LIMIT = 1000
DEFAULT_MAX_MATCHES = 500
SEARCH_BUDGET_S = 30.0
# Matching lines (grep) or paths (find_files) are counted this far and no further, so a
# broad search stops early; a truncated result's total is then a lower bound.
COUNT_LIMIT = 10_000
MAX_PATTERN_CHARS = 4096
ECHO_CHARS = 200
# ripgrep's address space: twice what a heavy pattern needs (about 100 MB resident), so only a
# runaway read (a `.gitignore` that is /dev/zero) meets it; ripgrep then fails and Python takes over.
RG_MEMORY_BYTES = 256 * 1024 * 1024
# How much of one line of ripgrep's output is kept: the file name (at most PATH_MAX), the line
# number, and more text than MAX_MATCH_CHARS characters can take.
_RG_LINE_KEEP = 16 * 1024
_PIPE_CHUNK = 256 * 1024
_STDERR_KEEP = 4096
# What ripgrep prints instead of (or after) matches in a file with a NUL byte: in a
# directory it stops at the NUL; a file named explicitly is searched on regardless.
_RG_BINARY_MESSAGES = (b": WARNING: stopped searching binary file", b": binary file matches (")
# Runs the worker; sys.path gets the sidecar's own directory, since a lane puts it there by hand.
_WORKER = "import sys; sys.path.insert(0, sys.argv[1]); from osprey_sidecar.grepworker import main; sys.exit(main())"


@dataclass
class FindResult:
    """`total` counts matching paths: exact unless truncated, then at least that many
    (counting stops at COUNT_LIMIT)."""

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
    """`total` counts matching lines: exact unless truncated, then at least that many
    (counting stops at COUNT_LIMIT)."""

    matches: list[Match] = field(default_factory=list)
    truncated: bool = False
    total: int = 0
    engine: str = "python"


class _Expired(Exception):
    """The time budget ran out; the process doing the work was killed."""


def _cut(text: str) -> str:
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "..."


def _check_text(what: str, value: str) -> None:
    if len(value) > MAX_PATTERN_CHARS:
        raise ToolFailure(E.INVALID_ARGUMENT, f"the {what} is {len(value)} characters long; the limit is {MAX_PATTERN_CHARS}. Use a shorter one")
    if "\x00" in value:
        raise ToolFailure(E.INVALID_ARGUMENT, f"the {what} contains a NUL character, which cannot match (files holding NUL bytes are not searched); remove it")


def _timeout(what: str, budget_s: float, advice: str) -> ToolFailure:
    return ToolFailure(E.TIMEOUT, f"{what} took longer than {budget_s:g} s and was stopped; {advice}")


def _search_dir(roots: Roots, path: str) -> str:
    real = roots.resolve(path)
    if not os.path.exists(real):
        raise ToolFailure(E.NOT_FOUND, f"{path or '.'}: no such file or directory")
    return real


def _shown(roots: Roots, top: str, rel: str) -> str:
    return roots.show(os.path.join(top, rel) if rel else top)


def _count_limit(limit: int) -> int:
    return max(COUNT_LIMIT, limit + 1)


def find_files(roots: Roots, pattern: str, path: str = "", limit: int = 0, *, budget_s: float = SEARCH_BUDGET_S) -> FindResult:
    """Files under `path` whose relative path matches the glob, sorted by path."""
    if not pattern.strip():
        raise ToolFailure(E.INVALID_ARGUMENT, "pattern is empty; give a glob such as '**/*.py' or '*.md'")
    _check_text("pattern", pattern)
    if limit < 0:
        raise ToolFailure(E.INVALID_ARGUMENT, "limit must not be negative")
    deadline = time.monotonic() + budget_s
    limit = limit or DEFAULT_FIND_LIMIT
    count_limit = _count_limit(limit)
    top = _search_dir(roots, path)
    if not os.path.isdir(top):
        raise ToolFailure(E.NOT_A_DIRECTORY, f"{path} is a file; find_files searches a directory")
    regex = compile_glob(pattern)
    found = []
    total = 0
    for entry in walk(top, roots.root_of(top), files_only=True):
        if time.monotonic() > deadline:
            raise _timeout("find_files", budget_s, "narrow the path or the pattern")
        if regex.fullmatch(entry.rel):
            total += 1
            if len(found) < limit:
                found.append(_shown(roots, top, entry.rel))
            elif total >= count_limit:
                break
    return FindResult(found, total > limit, total)


def _compile(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    # A str pattern, searched over text decoded with surrogateescape: like ripgrep's,
    # its classes, `\w` and case folding are Unicode-aware (a bytes pattern's are ASCII).
    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolFailure(E.INVALID_ARGUMENT, f"invalid regular expression {_cut(pattern)!r}: {exc}") from None
    except RecursionError:
        raise ToolFailure(E.INVALID_ARGUMENT, f"the regular expression {_cut(pattern)!r} is nested too deeply; simplify it") from None


def grep(
    roots: Roots, pattern: str, path: str = "", glob: str = "", ignore_case: bool = False, max_matches: int = 0,
    *, engine: str | None = None, budget_s: float = SEARCH_BUDGET_S,
) -> GrepResult:
    """Lines matching a regex in the files under `path` (or in one file), sorted by path and line."""
    if pattern == "":
        raise ToolFailure(E.INVALID_ARGUMENT, "pattern is empty; give a regular expression")
    _check_text("pattern", pattern)
    _check_text("glob", glob)
    if max_matches < 0:
        raise ToolFailure(E.INVALID_ARGUMENT, "max_matches must not be negative")
    deadline = time.monotonic() + budget_s
    _compile(pattern, ignore_case)
    limit = max_matches or DEFAULT_MAX_MATCHES
    top = _search_dir(roots, path)
    base = os.path.dirname(top) if os.path.isfile(top) else top
    search = _Search(roots, pattern, top, glob.strip(), ignore_case, limit, deadline)
    rg = shutil.which("rg") if engine in (None, "ripgrep") else None
    try:
        found = search.ripgrep(rg) if rg else None
        used = "ripgrep"
        if found is None:
            found, used = search.python(), "python"
    except _Expired:
        raise _timeout("the search", budget_s, "simplify the pattern (avoid nested quantifiers and lookarounds) or narrow the path") from None
    kept, total = found
    matches = [Match(_shown(roots, base, rel), number, text) for rel, number, text in kept]
    return GrepResult(matches, total > limit, total, used)


Found = tuple[list[tuple[str, int, str]], int]


class _Search:
    """One grep call: the first `limit` matches in path order, and a count up to the limit."""

    def __init__(self, roots: Roots, pattern: str, top: str, glob: str, ignore_case: bool, limit: int, deadline: float) -> None:
        self.pattern, self.top, self.glob = pattern, top, glob
        self.ignore_case, self.limit, self.deadline = ignore_case, limit, deadline
        self.is_file = os.path.isfile(top)
        self.base = os.path.dirname(top) if self.is_file else top
        self.root = roots.root_of(top)

    def python(self) -> Found:
        request = {
            "pattern": self.pattern, "ignore_case": self.ignore_case, "top": self.top, "root": self.root,
            "is_file": self.is_file, "name": os.path.basename(self.top), "glob": self.glob,
            "keep": self.limit, "count_limit": _count_limit(self.limit),
        }
        out = _WorkerOutput()
        package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        # -I: neither the environment nor the working directory (the workspace) changes what it
        # imports; -S: it needs nothing from site-packages, and starts faster without.
        cmd = [sys.executable, "-I", "-S", "-c", _WORKER, package_dir]
        ran = _stream(cmd, cwd="/", stdin=json.dumps(request).encode(), deadline=self.deadline, feed=out.feed)
        if ran is None:
            raise ToolFailure(E.IO_ERROR, f"the search could not start {_cut(sys.executable)}")
        returncode, stderr = ran
        out.feed(b"\n")
        if out.error is not None:
            raise ToolFailure(*out.error)
        if not out.ended:
            last = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {returncode}"]
            raise ToolFailure(E.IO_ERROR, f"the search failed: {_cut(last[0])}")
        return out.kept, out.total

    def ripgrep(self, rg: str) -> Found | None:
        """None when ripgrep cannot run this search (Python takes over)."""
        if self.is_file and _has_nul(self.top, self.deadline):
            return [], 0  # ripgrep searches a file it is given by name even when it is binary
        cmd = [
            rg, "--no-config", "--line-number", "--with-filename", "--null", "--no-heading",
            "--color", "never", "--hidden", "--no-require-git", "--no-ignore-parent",
            "--no-ignore-global", "--no-ignore-exclude", "--no-ignore-dot", "--encoding", "none",
            # In path order, so the first matches are final as they arrive and ripgrep can be
            # stopped; sorting makes it single-threaded, which also keeps it streaming.
            "--sort", "path", "--no-mmap", "--glob", "!.git",
        ]
        if self.ignore_case:
            cmd.append("--ignore-case")
        ancestors = [] if self.is_file else ancestor_patterns(self.top, self.root)
        if ancestors:
            # .gitignore rules between the allowed root and the searched directory, rewritten
            # relative to it; ripgrep reads them from stdin and anchors them at its cwd.
            cmd += ["--ignore-file", "/dev/stdin"]
        file_filter = None
        if not self.is_file and self.glob:
            if "/" in self.glob:
                file_filter = compile_glob(self.glob)
            else:
                # A file type filters after ignore rules; --glob would re-include ignored files.
                cmd += ["--type-add", f"osprey:{self.glob}", "--type", "osprey"]
        cmd += ["--regexp", self.pattern, "--", os.path.basename(self.top) if self.is_file else "."]
        rules = "".join(line + "\n" for line in ancestors).encode("utf-8", "surrogateescape")
        # The prlimit tool caps the address space before ripgrep starts; without it, _stream caps
        # the running process (a moment later). preexec_fn is unsafe in a threaded server.
        cap = _memory_cap(RG_MEMORY_BYTES)
        prlimit = shutil.which("prlimit")
        if prlimit:
            cmd = [prlimit, f"--as={cap}", "--", *cmd]
        out = _RgOutput(self.base, file_filter, self.limit, _count_limit(self.limit), self.deadline, checked=self.is_file)
        ran = _stream(cmd, cwd=self.base, stdin=rules, deadline=self.deadline, feed=out.feed, memory_bytes=None if prlimit else cap)
        if ran is None or out.unparsable:
            return None  # not started, or a file name with a newline in it
        returncode, stderr = ran
        if returncode is not None:
            out.finish()
            if stderr.startswith(b"prlimit:"):
                return None  # the memory cap could not be set, so ripgrep never ran
            if returncode < 0:
                return None  # killed (its memory cap): what it printed may be incomplete
            if returncode not in (0, 1) and not out.seen:
                return None  # e.g. a pattern ripgrep's regex engine does not support
            if ancestors and b"/dev/stdin" in stderr:
                return None  # the rules could not be read, and ripgrep searched on without them
        return out.kept, out.total


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
    """ripgrep's `--null --line-number` output, parsed as it streams.

    Each file's lines arrive together, in path order; a file's matches count only once the
    file is complete, since a NUL byte further on makes it binary and drops them."""

    def __init__(self, base: str, file_filter: re.Pattern[str] | None, keep: int, count_limit: int, deadline: float, *, checked: bool = False) -> None:
        self.base, self.file_filter, self.keep, self.count_limit, self.deadline = base, file_filter, keep, count_limit, deadline
        self.checked = checked  # the one file searched is known to hold no NUL byte
        self.kept: list[tuple[str, int, str]] = []
        self.total = 0
        self.seen = False
        self.unparsable = False
        self._partial = b""  # the start of an unfinished line, at most _RG_LINE_KEEP bytes
        self._name: bytes | None = None
        self._rel = ""
        self._skip = False  # the current file is filtered out or binary
        self._hits: list[tuple[int, str]] = []
        self._count = 0

    def feed(self, data: bytes) -> bool:
        """Take more output; True once nothing more is needed."""
        self.seen = True
        start = 0
        while True:
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

    def _line(self, line: bytes) -> bool:
        name, sep, rest = line.partition(b"\x00")
        if not sep:
            message = next((m for m in _RG_BINARY_MESSAGES if m in line), None)
            if message is None:
                self.unparsable = True  # a file name with a newline in it
                return True
            if _rel(line.split(message, 1)[0]) == self._rel:
                self._skip = True
            return False
        if name != self._name:
            self.finish()
            self._name, self._rel = name, _rel(name)
            self._skip = self.file_filter is not None and not self.file_filter.fullmatch(self._rel)
        if self._skip:
            return False
        self._count += 1
        if len(self.kept) + len(self._hits) < self.keep:
            number, _, text = rest.partition(b":")
            self._hits.append((int(number), line_text(text)))
        if self.total + self._count < self.count_limit:
            return False
        # Enough counted. ripgrep would say whether this file is binary only after all its
        # lines, so look for a NUL directly.
        if not self.checked and _has_nul(os.path.join(self.base, self._rel), self.deadline):
            self._skip = True
            return False
        self.finish()
        return True

    def finish(self) -> None:
        """The current file is complete."""
        if self._name is not None and not self._skip:
            self.kept += [(self._rel, number, text) for number, text in self._hits]
            self.total += self._count
        self._name, self._rel, self._skip, self._hits, self._count = None, "", False, [], 0


def _memory_cap(wanted: int) -> int:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)


def _stream(
    cmd: list[str], *, cwd: str, stdin: bytes, deadline: float, feed: Callable[[bytes], bool], memory_bytes: int | None = None,
) -> tuple[int | None, bytes] | None:
    """Run `cmd`, handing its output to `feed` as it arrives, until it exits or `feed` returns
    True (it is then killed: return code None). Returns the return code and the start of its
    stderr, or None when it cannot be started; raises _Expired (it is killed) at the deadline."""
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError:
        return None
    assert proc.stdin and proc.stdout and proc.stderr
    if memory_bytes is not None:
        try:
            resource.prlimit(proc.pid, resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        except OSError:
            pass  # already gone
    stderr = bytearray()
    pending = memoryview(stdin)
    try:
        with selectors.DefaultSelector() as selector:
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                os.set_blocking(pipe.fileno(), False)
            if pending:
                selector.register(proc.stdin, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
            selector.register(proc.stdout, selectors.EVENT_READ)
            selector.register(proc.stderr, selectors.EVENT_READ)
            while selector.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _Expired
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
                    data = os.read(pipe.fileno(), _PIPE_CHUNK)  # type: ignore[union-attr]
                    if not data:
                        selector.unregister(pipe)
                    elif pipe is proc.stderr:
                        stderr += data[: _STDERR_KEEP - len(stderr)]
                    elif feed(data):
                        return None, bytes(stderr)
        try:
            return proc.wait(max(deadline - time.monotonic(), 0)), bytes(stderr)
        except subprocess.TimeoutExpired:
            raise _Expired from None
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            try:
                pipe.close()
            except OSError:
                pass


def _has_nul(real: str, deadline: float) -> bool:
    try:
        with open(real, "rb") as fh:
            while chunk := fh.read(READ_CHUNK):
                if b"\x00" in chunk:
                    return True
                if time.monotonic() > deadline:
                    raise _Expired
    except OSError:
        pass
    return False


def _rel(name: bytes) -> str:
    return os.fsdecode(name[2:] if name.startswith(b"./") else name)
