"""The outputs kept for `retrieve`: one file per cut tool result under
`$OSPREY_HOME/results/<session_id>/<handle>` (the directory 0700, each file 0600, written
atomically), bounded per output and per session. `results_dir` is the one place a session's
directory is named, beneath `sessions.manage.results_root`, which deleting a session removes."""

from __future__ import annotations

import os
import re
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..sessions.manage import results_root

HANDLE = re.compile(r"r([1-9][0-9]{0,8})")
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
ENCODING = "utf-8"
# A results directory whose session is not in the journal is removed at a start once it is this
# old (a live session in another process may not have committed its first event yet).
ORPHAN_AGE_SECONDS = 24 * 3600
ORPHAN_SWEEP_MAX = 200  # directories looked at per start


class RetrieveError(Exception):
    """A handle that does not name a kept output of this session; the message says why."""


def results_dir(home: Path, session_id: str) -> Path:
    """The directory of session `session_id`'s kept outputs: `$OSPREY_HOME/results/<session_id>`."""
    if not SESSION_ID.fullmatch(session_id):
        raise ValueError(f"not a session id: {session_id!r}")
    return results_root(home) / session_id


def cut_to(data: bytes, limit: int) -> bytes:
    """`data` within `limit` bytes: its head and tail around a line saying how much was left out."""
    if len(data) <= limit:
        return data
    note = f"\n[... {len(data) - limit:,} bytes of this output were not kept: it was longer than the per-output limit ...]\n".encode()
    room = max(0, limit - len(note))
    head = room // 2
    tail = room - head
    # Whole characters only: a cut inside a UTF-8 sequence is moved to its start.
    head_part = data[:head].decode(ENCODING, errors="ignore").encode(ENCODING)
    tail_part = data[len(data) - tail:].decode(ENCODING, errors="ignore").encode(ENCODING) if tail else b""
    return head_part + note + tail_part


@dataclass
class Kept:
    handle: str
    tool: str
    size: int


class OutputStore:
    """The kept outputs of one session. Handles are `r1`, `r2`, ... in the order kept; a handle
    resolves only to a file of this session's directory, never to a path from the model."""

    def __init__(self, home: Path, session_id: str, *, max_output_bytes: int, max_session_bytes: int) -> None:
        self.directory = results_dir(home, session_id)
        self.max_output_bytes = max_output_bytes
        self.max_session_bytes = max_session_bytes
        self._lock = threading.Lock()
        self._next = 1
        self._sizes: dict[int, int] = {}  # number -> bytes on disk, oldest first
        self._scanned = False

    def _scan(self) -> None:
        """Take up the outputs a resumed session kept before (their handles stay valid)."""
        if self._scanned:
            return
        self._scanned = True
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return
        for entry in entries:
            m = HANDLE.fullmatch(entry.name)
            if m and entry.is_file(follow_symlinks=False):
                self._sizes[int(m.group(1))] = entry.stat(follow_symlinks=False).st_size
        self._sizes = dict(sorted(self._sizes.items()))
        if self._sizes:
            self._next = max(self._sizes) + 1

    def keep(self, tool: str, text: str) -> str:
        """Keep `text` (cut to the per-output limit) and return its handle; the oldest outputs are
        dropped while the session's total would pass its limit. Raises OSError when it cannot be written."""
        data = cut_to(text.encode(ENCODING, errors="replace"), min(self.max_output_bytes, self.max_session_bytes))
        with self._lock:
            self._scan()
            while self._sizes and sum(self._sizes.values()) + len(data) > self.max_session_bytes:
                oldest = next(iter(self._sizes))
                self._sizes.pop(oldest)
                try:
                    (self.directory / f"r{oldest}").unlink()
                except FileNotFoundError:
                    pass
            number = self._next
            self._next += 1
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.directory, 0o700)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".keep-")  # made 0600
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, self.directory / f"r{number}")
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
            self._sizes[number] = len(data)
            return f"r{number}"

    def path_of(self, handle: str) -> Path:
        """The file of `handle`; RetrieveError says why when there is none."""
        handle = handle.strip()
        m = HANDLE.fullmatch(handle)
        if m is None:
            raise RetrieveError(f"{handle[:80]!r} is not a retrieve handle: use the `retrieve handle: ID` named under a cut tool result of this session (such as r1)")
        number = int(m.group(1))
        with self._lock:
            self._scan()
            known = number in self._sizes
            issued = number < self._next
        path = self.directory / f"r{number}"
        if known and path.is_file() and not path.is_symlink():
            return path
        if issued:
            raise RetrieveError(f"the output of handle {handle} is no longer kept: older outputs are dropped when the session's kept outputs "
                                f"pass {self.max_session_bytes:,} bytes; run the command again to see it")
        raise RetrieveError(f"no output of this session has the handle {handle}: handles are named under cut tool results (`retrieve handle: ID`)")

    def read(self, handle: str) -> str:
        return self.path_of(handle).read_bytes().decode(ENCODING, errors="replace")

    def remove_if_empty(self) -> None:
        try:
            self.directory.rmdir()
        except OSError:
            pass


def sweep_orphans(home: Path, journal: Path, *, now: float | None = None, max_entries: int = ORPHAN_SWEEP_MAX,
                  min_age: float = ORPHAN_AGE_SECONDS) -> list[str]:
    """Remove results directories whose session the journal does not hold (deleted elsewhere, or
    forgotten because it never had a prompt) and that are at least `min_age` seconds old; at most
    `max_entries` directories are looked at. Returns the session ids removed. Nothing is removed
    when the journal cannot be read."""
    import shutil

    root = results_root(home)
    if not journal.is_file():
        return []
    try:
        names: list[tuple[str, float]] = []
        with os.scandir(root) as it:
            for entry in it:
                if len(names) >= max_entries:
                    break
                if SESSION_ID.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                    names.append((entry.name, entry.stat(follow_symlinks=False).st_mtime))
    except OSError:
        return []
    now = time.time() if now is None else now
    old = [name for name, mtime in names if now - mtime >= min_age]
    if not old:
        return []
    try:
        conn = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=1.0)
        try:
            known = {row[0] for row in conn.execute(f"SELECT id FROM sessions WHERE id IN ({','.join('?' * len(old))})", old)}
        finally:
            conn.close()
    except sqlite3.Error:
        return []
    removed = []
    for name in old:
        if name not in known:
            shutil.rmtree(root / name, ignore_errors=True)
            removed.append(name)
    return removed
