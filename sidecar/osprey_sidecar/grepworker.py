"""grep's pure-Python engine, run in a worker process so that a search can always be stopped.

Python's `re` backtracks, and a catastrophic pattern holds the GIL for as long as it runs:
in a thread it would freeze the whole server. `search.py` starts this module with the
server's own interpreter, writes one JSON request to its stdin and reads JSON lines back:

    {"file": REL, "hits": [[LINE, TEXT], ...], "count": N}   a file with N matching lines, in path order
    {"end": true}                                           the search is complete
    {"error": [CATEGORY, MESSAGE]}                          it cannot be completed

and kills it when its time budget runs out. Files are read in bounded chunks, never whole; a
line longer than MAX_LINE_BYTES is searched in its first MAX_LINE_BYTES only.

The files are those of the descriptor walk below `top`, each opened below `root` without
following symlinks (paths.py), or the one file the request's `fd` is, open in this process.
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import stat
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .ignore import compile_glob, walk
from .paths import open_under

if TYPE_CHECKING:  # typing costs the worker's start-up a few ms
    from typing import IO, Any

MAX_MATCH_CHARS = 500
READ_CHUNK = 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024
# The worker's address space: far above what a search needs, so only a runaway one meets it.
WORKER_MEMORY_BYTES = 256 * 1024 * 1024
# A listed file is opened without following a symlink, without blocking (a FIFO swapped in)
# and without becoming a controlling terminal (a tty swapped in).
_LISTED_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class _Binary(Exception):
    """The file holds a NUL byte: binary files are not searched."""


def line_text(raw: bytes) -> str:
    """A matching line as shown: CR dropped, invalid UTF-8 replaced, cut to MAX_MATCH_CHARS."""
    text = raw.rstrip(b"\r").decode("utf-8", "replace")
    if len(text) > MAX_MATCH_CHARS:
        text = text[:MAX_MATCH_CHARS] + " [...]"
    return text


def _blocks(fh: IO[bytes]) -> Iterator[bytes]:
    """The file as blocks of whole lines, each ending with a newline (the last line gets one);
    a line over MAX_LINE_BYTES is cut to that. Raises _Binary at a NUL byte."""
    carry = b""
    skipping = False  # inside an over-long line, past the part that is searched
    while chunk := fh.read(READ_CHUNK):
        if b"\x00" in chunk:
            raise _Binary
        if skipping:
            newline = chunk.find(b"\n")
            if newline == -1:
                continue
            chunk, skipping = chunk[newline + 1 :], False
        data = carry + chunk if carry else chunk
        # Only the first line can be over-long: any other fits in one chunk.
        newline = data.find(b"\n")
        if newline == -1 or newline > MAX_LINE_BYTES:
            if len(data) <= MAX_LINE_BYTES:
                carry = data
                continue
            yield data[:MAX_LINE_BYTES] + b"\n"
            if newline == -1:
                carry, skipping = b"", True
                continue
            data = data[newline + 1 :]
        end = data.rfind(b"\n") + 1
        if end:
            yield data[:end]
        carry = data[end:]
    if carry:
        yield carry + b"\n"


def _rest_has_nul(fh: IO[bytes]) -> bool:
    return any(b"\x00" in chunk for chunk in iter(lambda: fh.read(READ_CHUNK), b""))


def search_file(fd: int, search: Any, precheck: Any, keep: int, stop_after: int) -> tuple[list[tuple[int, str]], int] | None:
    """Up to `keep` matching (line number, text) pairs in the open file `fd` (closed here) and
    how many lines match, counting no further than `stop_after`; None for a binary or unreadable file."""
    hits: list[tuple[int, str]] = []
    count = number = 0
    try:
        with open(fd, "rb") as fh:
            for block in _blocks(fh):
                text = block.decode("utf-8", "surrogateescape")
                if precheck is not None and not precheck(text):
                    number += block.count(b"\n")
                    continue
                lines = text.split("\n")
                lines.pop()  # after the block's final newline
                for offset, line in enumerate(lines, 1):
                    if search(line):
                        count += 1
                        if len(hits) < keep:
                            hits.append((number + offset, line_text(line.encode("utf-8", "surrogateescape"))))
                        if count >= stop_after:
                            break
                number += len(lines)
                if count >= stop_after:
                    # A NUL further on still makes the file binary.
                    return None if _rest_has_nul(fh) else (hits, count)
    except _Binary:
        return None
    except OSError:
        return None
    return hits, count


def run(request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The files with matches, in path order, until the count reaches request["count_limit"]."""
    flags = re.IGNORECASE if request["ignore_case"] else 0
    regex = re.compile(request["pattern"], flags)
    # One search over a whole block skips most of it cheaply. With MULTILINE it can only
    # over-report (a match spanning lines), except for \A, \Z and lookarounds, which see
    # the newline a line on its own does not have.
    precheck = None
    if not any(s in regex.pattern for s in ("\\A", "\\Z", "(?=", "(?!", "(?<")):
        precheck = re.compile(regex.pattern, regex.flags | re.MULTILINE).search
    keep, count_limit = request["keep"], request["count_limit"]
    if request["fd"] is not None:
        os.lseek(request["fd"], 0, os.SEEK_SET)
        candidates: Iterator[tuple[int, str]] = iter([(request["fd"], request["name"])])
    else:
        candidates = _files(request["top"], request["root"], compile_glob(request["glob"]) if request["glob"] else None)
    total = 0
    for fd, rel in candidates:
        found = search_file(fd, regex.search, precheck, keep, count_limit - total)
        if found is None or not found[1]:
            continue
        hits, count = found
        keep -= len(hits)
        total += count
        yield {"file": rel, "hits": hits, "count": count}
        if total >= count_limit:
            break


class FileOpener:
    """Opens the regular files at resolved paths below `root` (ones a walk yielded) for reading,
    following no symlink (paths.py); the last directory stays open for the files beside it."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._dir: str | None = None
        self._fd = -1

    def open(self, real: str) -> tuple[int, os.stat_result]:
        """Open `real`, which the walk has just listed as a regular file. That listing stands in
        for open_regular's stat before the open (the window for a swap is the same), which saves
        a system call per searched file; OSError for anything but a regular file now."""
        head, name = os.path.split(real)
        if head != self._dir:
            self.close()
            self._fd = open_under(self.root, head, os.O_PATH | os.O_DIRECTORY)
            self._dir = head
        fd = os.open(name, _LISTED_FLAGS, dir_fd=self._fd)
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(errno.EAGAIN, "the file changed since it was listed", name)
        return fd, st

    def is_regular(self, real: str) -> bool:
        """Whether `real` is a regular file reached below the root through no symlink."""
        head, name = os.path.split(real)
        try:
            if head != self._dir:
                self.close()
                self._fd = open_under(self.root, head, os.O_PATH | os.O_DIRECTORY)
                self._dir = head
            return stat.S_ISREG(os.stat(name, dir_fd=self._fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._dir, self._fd = None, -1


def _files(top: str, root: str, file_filter: re.Pattern[str] | None) -> Iterator[tuple[int, str]]:
    """The files below `top` in path order, each open (search_file closes it) with its relative path."""
    opener = FileOpener(root)
    try:
        for entry in walk(top, root, files_only=True):
            if file_filter is not None and not file_filter.fullmatch(entry.rel):
                continue
            try:
                fd, _ = opener.open(entry.path)
            except OSError:
                continue  # gone, or swapped for a symlink or something else since the walk listed it
            yield fd, entry.rel
    finally:
        opener.close()


def _limit_memory() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = WORKER_MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(hard, WORKER_MEMORY_BYTES)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def main() -> int:
    _limit_memory()
    request = json.loads(sys.stdin.buffer.read())
    out = sys.stdout
    try:
        for item in run(request):
            out.write(json.dumps(item) + "\n")
        out.write('{"end": true}\n')
    except MemoryError:
        message = f"the search needed more than {WORKER_MEMORY_BYTES >> 20} MiB of memory and was stopped; narrow the path or the glob"
        out.write(json.dumps({"error": ["io_error", message]}) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
