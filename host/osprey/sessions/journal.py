"""The session journal: every event of every session, in order, in `$OSPREY_HOME/sessions.db`.

One SQLite database in WAL mode, so readers (`osprey sessions`, another session) never block the
writer. `synchronous=NORMAL`: in WAL mode a commit is in the write-ahead log as soon as it returns,
so a killed process (SIGKILL, a crash) loses nothing that was committed; only a power cut or an OS
crash can lose the last commits, and never corrupts the database. FULL would add an fsync to every
commit, several a second while a model streams tool calls, for that rarer case.

A `Journal` is an event sink. `record()` serialises the event on the caller's thread and queues it;
a writer thread commits whatever is queued at once, so emitting never waits on the disk and an event
is committed within milliseconds. `close()` drains the queue, commits and checkpoints the log.
A database that cannot be opened or written (corrupt, locked by another process, an unwritable
home) never stops a session: the journal warns once through `warn` (called from the writer thread)
and drops events from then on.
"""

from __future__ import annotations

import json
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..errors import OspreyError
from ..messages import scrub
from ..session.events import Event

DB_NAME = "sessions.db"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 2000
# A single event larger than this is stored with its long strings cut, and marked.
MAX_EVENT_BYTES = 16 * 1024 * 1024
TRUNCATED_KEY = "journal_truncated"
TITLE_CHARS = 80
BATCH = 512  # events per transaction at most
CLOSE_TIMEOUT = 30.0  # seconds close() waits for the writer (a locked database waits BUSY_TIMEOUT_MS per try)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    cwd TEXT NOT NULL,
    workspace TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    provider TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL,
    outcome TEXT
);
CREATE INDEX IF NOT EXISTS sessions_by_cwd ON sessions (cwd, updated);
CREATE INDEX IF NOT EXISTS sessions_by_update ON sessions (updated);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    ts REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"""


class JournalError(OspreyError):
    """The journal cannot be read, or holds no such session."""


class SessionRow(BaseModel):
    """One journaled session, as `osprey sessions list --json` shows it."""

    id: str
    cwd: str
    workspace: str
    title: str
    provider: str
    model: str
    created: float
    updated: float
    outcome: str | None = None


def journal_path(home: Path) -> Path:
    return home / DB_NAME


def make_title(text: str) -> str:
    """A session's title: its first prompt on one line, cut to about TITLE_CHARS characters."""
    line = " ".join(text[: TITLE_CHARS * 8].split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def event_json(event: Event, limit: int = MAX_EVENT_BYTES) -> str:
    """The event as JSON, bounded by `limit` bytes: an event over it keeps its shape with its long
    strings cut, and `journal_truncated` set to its original size."""
    try:
        text = event.model_dump_json()
    except ValueError:  # a lone surrogate no encoder accepts
        text = json.dumps(scrub(event.model_dump(mode="json")), ensure_ascii=False)
    size = len(text.encode("utf-8", "replace"))
    if size <= limit:
        return text
    data = json.loads(text)
    cap = limit // 4
    while True:
        cut = _cut_strings(data, cap)
        cut[TRUNCATED_KEY] = size
        shrunk = json.dumps(cut, ensure_ascii=False)
        if len(shrunk.encode("utf-8", "replace")) <= limit or cap < 64:
            return shrunk
        cap //= 2


def _cut_strings(value: Any, cap: int) -> Any:
    if isinstance(value, str) and len(value) > cap:
        return value[:cap] + f"\n[... {len(value) - cap} characters not kept in the session journal]"
    if isinstance(value, dict):
        return {k: _cut_strings(v, cap) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v, cap) for v in value]
    return value


def _connect(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) the journal for writing: home 0700, file 0600, WAL, schema."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"could not switch to WAL mode (journal_mode is {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(_SCHEMA)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        conn.close()
        raise
    return conn


class Journal:
    """Records the events of one or more sessions into the journal at `path`."""

    def __init__(self, path: Path, *, warn: Callable[[str], None] = lambda _: None, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.path = path
        self.warn = warn
        self.max_event_bytes = max_event_bytes
        self.failed = False
        self._warned = False
        self._closed = False
        self._queue: queue.SimpleQueue[tuple[str, str, str, float, str] | None] = queue.SimpleQueue()
        self._next_seq: dict[str, int] = {}
        self._titled: set[str] = set()
        self._committed = threading.Condition()
        self._pending = 0
        self._thread = threading.Thread(target=self._run, name="osprey-journal", daemon=True)
        self._thread.start()

    def record(self, event: Event, session_id: str, workspace: str = "") -> None:
        """Queue `event` of session `session_id` (`workspace` is kept when the session is new)."""
        if self.failed or self._closed:
            return
        item = (session_id, workspace, event.type, float(event.ts), event_json(event, self.max_event_bytes))
        with self._committed:
            self._pending += 1
        self._queue.put(item)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued event is committed (or dropped after a failure)."""
        with self._committed:
            return self._committed.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        """Commit what is queued, checkpoint the log into the database and stop the writer."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(CLOSE_TIMEOUT)

    # ------------------------------------------------------------------ the writer thread

    def _fail(self, what: str, exc: BaseException) -> None:
        self.failed = True
        if not self._warned:
            self._warned = True
            self.warn(f"the session journal {self.path} {what} ({type(exc).__name__}: {exc}); this session goes on without "
                      "being saved, so it cannot be resumed. A corrupt file can be moved aside to start a new journal")

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = _connect(self.path)
        except (OSError, sqlite3.Error) as exc:
            self._fail("cannot be opened", exc)
        try:
            while True:
                batch = [self._queue.get()]
                while batch[-1] is not None and len(batch) < BATCH:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                items = [item for item in batch if item is not None]
                if conn is not None and items:
                    try:
                        self._write(conn, items)
                    except (OSError, sqlite3.Error) as exc:
                        self._fail("cannot be written", exc)
                        conn.close()
                        conn = None
                with self._committed:
                    self._pending -= len(items)
                    self._committed.notify_all()
                if batch[-1] is None:
                    return
        finally:
            if conn is not None:
                try:
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error:
                    pass  # a reader holds the log: the next writer checkpoints it
                conn.close()

    def _write(self, conn: sqlite3.Connection, items: list[tuple[str, str, str, float, str]]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for session_id, workspace, kind, ts, data in items:
                seq = self._next_seq.get(session_id)
                if seq is None:
                    row = conn.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM events WHERE session_id = ?", (session_id,)).fetchone()
                    seq = int(row[0])
                conn.execute("INSERT INTO events (session_id, seq, type, ts, data) VALUES (?, ?, ?, ?, ?)", (session_id, seq, kind, ts, data))
                self._next_seq[session_id] = seq + 1
                self._update_session(conn, session_id, workspace, kind, ts, data)
            conn.execute("COMMIT")
        except BaseException:
            self._next_seq.clear()  # re-read from the database next time
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise

    def _update_session(self, conn: sqlite3.Connection, session_id: str, workspace: str, kind: str, ts: float, data: str) -> None:
        if kind == "session_start":
            event = json.loads(data)
            conn.execute(
                "INSERT INTO sessions (id, cwd, workspace, provider, model, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET provider = excluded.provider, model = excluded.model, updated = excluded.updated",
                (session_id, event.get("cwd", ""), workspace or event.get("cwd", ""), event.get("provider", ""), event.get("model", ""), ts, ts),
            )
            return
        if kind == "user_message" and session_id not in self._titled:
            event = json.loads(data)
            if event.get("origin") == "user":
                self._titled.add(session_id)
                conn.execute("UPDATE sessions SET title = ? WHERE id = ? AND title = ''", (make_title(str(event.get("text", ""))), session_id))
        if kind in ("task_end", "session_end"):
            outcome = json.loads(data).get("outcome")
            conn.execute("UPDATE sessions SET updated = ?, outcome = ? WHERE id = ?", (ts, outcome, session_id))
        else:
            conn.execute("UPDATE sessions SET updated = ? WHERE id = ?", (ts, session_id))


# ---------------------------------------------------------------------- reading


def _read(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise JournalError(f"no session journal at {path} yet: sessions are saved there as they run")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as exc:
        raise JournalError(f"cannot read the session journal {path}: {exc}") from None
    if not {"sessions", "events"} <= tables:
        conn.close()
        raise _Empty(f"the session journal {path} holds no sessions yet")
    return conn


class _Empty(JournalError):
    """The journal's file exists but its tables are not made yet (a session is opening it)."""


def _rows(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[SessionRow]:
    fields = list(SessionRow.model_fields)
    return [SessionRow(**dict(zip(fields, row, strict=True))) for row in conn.execute(sql, args)]


_COLUMNS = "id, cwd, workspace, title, provider, model, created, updated, outcome"


def list_sessions(path: Path, cwd: str | None = None, limit: int = 1000) -> list[SessionRow]:
    """Journaled sessions, newest first; only those run in `cwd` when it is given."""
    try:
        conn = _read(path)
    except _Empty:
        return []
    try:
        if cwd is None:
            return _rows(conn, f"SELECT {_COLUMNS} FROM sessions ORDER BY updated DESC LIMIT ?", (limit,))
        return _rows(conn, f"SELECT {_COLUMNS} FROM sessions WHERE cwd = ? ORDER BY updated DESC LIMIT ?", (cwd, limit))
    except sqlite3.Error as exc:
        raise JournalError(f"cannot read the session journal {path}: {exc}") from None
    finally:
        conn.close()


def find_session(path: Path, session_id: str) -> SessionRow:
    """The session whose id is `session_id`, or starts with it when only one does."""
    conn = _read(path)
    try:
        escaped = session_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = _rows(conn, f"SELECT {_COLUMNS} FROM sessions WHERE id = ? OR id LIKE ? ESCAPE '\\' ORDER BY updated DESC LIMIT 10",
                     (session_id, escaped + "%"))
    except sqlite3.Error as exc:
        raise JournalError(f"cannot read the session journal {path}: {exc}") from None
    finally:
        conn.close()
    exact = [row for row in rows if row.id == session_id]
    if exact:
        return exact[0]
    if not rows:
        raise JournalError(f"no session {session_id!r} in the journal; `osprey sessions list --all` shows the saved ones")
    if len(rows) > 1:
        raise JournalError(f"{session_id!r} is the start of several session ids ({', '.join(r.id for r in rows)}); give more of it")
    return rows[0]


def load_events(path: Path, session_id: str) -> list[dict[str, Any]]:
    """The events of one session as recorded, in order."""
    conn = _read(path)
    try:
        return [json.loads(data) for (data,) in conn.execute("SELECT data FROM events WHERE session_id = ? ORDER BY seq", (session_id,))]
    except (sqlite3.Error, ValueError) as exc:
        raise JournalError(f"cannot read session {session_id} from the journal {path}: {exc}") from None
    finally:
        conn.close()
