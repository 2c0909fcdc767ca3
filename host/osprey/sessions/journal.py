"""The session journal: every event of every session, in order, in `$OSPREY_HOME/sessions.db`.

One SQLite database in WAL mode, so readers (`osprey sessions`, another session) never block the
writer. `synchronous=NORMAL`: in WAL mode a commit is in the write-ahead log as soon as it returns,
so a killed process (SIGKILL, a crash) loses nothing that was committed; only a power cut or an OS
crash can lose the last commits, and never corrupts the database. FULL would add an fsync to every
commit, several a second while a model streams tool calls, for that rarer case.

A `Journal` is an event sink. `record()` serialises the event on the caller's thread and queues it;
a writer thread commits whatever is queued at once, so emitting never waits on the disk and an event
is committed within milliseconds. `close()` drains the queue, commits and checkpoints the log.

A database that cannot be opened or written (locked by another process past the busy timeout, a
full disk, an unwritable home, a corrupt file) never stops a session, and a passing failure loses
nothing: the writer keeps the unsaved events in memory, in order, and retries (opening too) after
RETRY_FIRST seconds, doubling up to RETRY_MAX. It warns through `warn` (from the writer thread;
close()'s report from the thread calling close) once when a failure begins and once when the database can be written again, with the number
of events saved late. Seqs are given at commit, so they stay gap-free and in emission order.

Memory is bounded: when MAX_UNSAVED_EVENTS events or MAX_UNSAVED_BYTES of their JSON wait, the
session of the next event is sealed: that event and all its later ones are not kept (dropping the
oldest instead would cut the middle out of the record). A marker takes their place in the queue;
once the database can be written, it is saved after the session's last kept event as a `notice`
event (level warning) with `journal_incomplete` set to that event's seq. The saved record is thus
always a prefix of the session, and says where it stops: `osprey sessions show` prints the notice,
and when a resumed session is journaled, the journal warns that the saved record is incomplete and
the resumed conversation lacks what came after event N. (If the database never comes back before
the process ends, the record just stops at its last saved event, as after a crash.)

`close()` makes one last attempt, waits at most CLOSE_TIMEOUT for the writer, never raises, and
warns with the number of events that were not saved and where each session's saved record stops.

A session with no prompt (started and closed without a `user_message`) is not kept: once its
events are all saved, `close()` deletes it, unless it started a child session. A session killed
before its first prompt leaves such a record behind (as older journals hold them); `list_sessions`,
and so `--continue` and the terminal UI's /sessions, pass over every session without a prompt. A
session killed after its first prompt is kept: the prompt was committed within milliseconds.
"""

from __future__ import annotations

import json
import os
import queue
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from ..errors import OspreyError
from ..events import Event, parse_event
from ..messages import recorded_image_notes, scrub

DB_NAME = "sessions.db"
SCHEMA_VERSION = 2  # 2: sessions.parent_id, the session that started a child session
BUSY_TIMEOUT_MS = 2000
# A single event larger than this is stored with its long strings cut, and marked.
MAX_EVENT_BYTES = 16 * 1024 * 1024
TRUNCATED_KEY = "journal_truncated"
TITLE_CHARS = 80
BATCH = 512  # events per transaction at most
GATHER_S = 0.004  # how long the writer waits for more events before it commits
CLOSE_TIMEOUT = 30.0  # seconds close() waits for the writer (a locked database waits BUSY_TIMEOUT_MS per try)
# While the database cannot be written, at most this many events (or bytes of their JSON) wait in memory.
MAX_UNSAVED_EVENTS = 20_000
MAX_UNSAVED_BYTES = 64 * 1024 * 1024
RETRY_FIRST = 0.5  # seconds before the first retry after a failure; doubled after each failed retry
RETRY_MAX = 15.0  # up to this
# Set, in the notice that closes a session's record cut short, to the seq of its last saved event.
INCOMPLETE_KEY = "journal_incomplete"

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
    outcome TEXT,
    parent_id TEXT
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

    model_config = ConfigDict(defer_build=True)  # built at first use: most sessions never make one

    id: str
    cwd: str
    workspace: str
    title: str
    provider: str
    model: str
    created: float
    updated: float
    outcome: str | None = None
    # The session that started this one (a child session); left out for a lead session.
    parent_id: str | None = Field(None, exclude_if=lambda value: value is None)


def journal_path(home: Path) -> Path:
    return home / DB_NAME


# Where the context interceptors add for the model (hooks, --output-schema) starts in a prompt's
# user_message text (the session's `with_context`); a title leaves it out.
CONTEXT_MARK = "\n\n[context] "


def make_title(text: str) -> str:
    """A session's title: its first prompt as typed, without the context added for the model, on
    one line, cut to about TITLE_CHARS characters."""
    typed = text[: TITLE_CHARS * 8 + len(CONTEXT_MARK)].split(CONTEXT_MARK, 1)[0]
    line = " ".join(typed[: TITLE_CHARS * 8].split())
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
    if isinstance(data.get("images"), list) and data["images"]:
        text, size = _fewer_images(data, size, limit)
        if size <= limit:
            return text
    cap = limit // 4
    while True:
        cut = _cut_strings(data, cap)
        cut[TRUNCATED_KEY] = size
        shrunk = json.dumps(cut, ensure_ascii=False)
        if len(shrunk.encode("utf-8", "replace")) <= limit or cap < 64:
            return shrunk
        cap //= 2


def _fewer_images(data: dict[str, Any], size: int, limit: int) -> tuple[str, int]:
    """An event over `limit` with the images it carries (a tool result's) dropped, from the last,
    until it fits, and a note in its output for each: the images whole or not at all."""
    images: list[Any] = data["images"]
    dropped: list[Any] = []
    while images and size > limit:
        dropped.insert(0, images.pop())
        text = json.dumps(data, ensure_ascii=False)
        size = len(text.encode("utf-8", "replace"))
    if not images:
        del data["images"]
    notes = recorded_image_notes(dropped, "not kept in the session journal")
    if isinstance(data.get("output"), str) and notes:
        data["output"] += "".join(f"\n{note}" for note in notes)
    text = json.dumps(data, ensure_ascii=False)
    return text, len(text.encode("utf-8", "replace"))


def _cut_strings(value: Any, cap: int) -> Any:
    if isinstance(value, str) and len(value) > cap:
        return value[:cap] + f"\n[... {len(value) - cap} characters not kept in the session journal]"
    if isinstance(value, dict):
        return {k: _cut_strings(v, cap) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v, cap) for v in value]
    return value


def _connect(path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    """Open (creating if needed) the journal for writing: home 0700, file 0600, WAL, schema."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"could not switch to WAL mode (journal_mode is {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(_SCHEMA)
        columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
        if "parent_id" not in columns:  # a journal written by an Osprey before child sessions
            conn.execute("ALTER TABLE sessions ADD COLUMN parent_id TEXT")
        conn.execute("CREATE INDEX IF NOT EXISTS sessions_by_parent ON sessions (parent_id)")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        ensure_index(conn)
    except BaseException:
        conn.close()
        raise
    return conn


# ---------------------------------------------------------------------- the search index

# The full-text index of prompts, answers, tool calls and tool results (`osprey sessions search`).
#
# SQL triggers keep it, so whoever writes the events (this journal, another process, plain SQL that
# deletes or copies a session) keeps it in step, in the same transaction, at no extra commit: an
# event saved gets its row of text in `search_rows`, an event deleted takes its row (and its
# entries in the FTS5 table) with it. The FTS5 table `search_index` reads its text from
# `search_rows`; rows are put into it in batches (`index_pending`: by the journal's writer every
# INDEX_EVERY indexed events and when it closes, and by a search before it looks), since an FTS5
# insert costs far more per transaction than per row, and a session commits a few events at a time.
# `search_meta` holds the highest `search_rows.id` in the FTS5 table ("indexed"; ids are never
# reused), and how far the events saved before the index existed have been read into `search_rows`
# ("backfill": "done", or the last (session_id, seq) read; `backfill_index`).
INDEX_VERSION = "2"  # a journal whose index has another version has it made again
INDEXED_TYPES = ("user_message", "assistant_text", "tool_call", "tool_result")
RESULT_HEAD, RESULT_TAIL = 8 * 1024, 2 * 1024  # characters of a tool result indexed: its start and its end
TEXT_HEAD, TEXT_TAIL = 48 * 1024, 16 * 1024  # of a prompt, an answer, a call's name and arguments
BACKFILL_BATCH = 400  # events read per backfill transaction
INDEX_BATCH = 1000  # rows put into the FTS5 table per transaction at most
INDEX_EVERY = 200  # indexed events a journal saves between two batches


def _without_nul(data: str) -> str:
    """SQL for the JSON `data` with each escaped NUL made a space: SQLite's text functions stop at a NUL."""
    return f"(CASE WHEN instr({data}, '\\u0000') > 0 THEN replace({data}, '\\u0000', ' ') ELSE {data} END)"


def _bounded(expr: str, head: int, tail: int) -> str:
    return (f"(SELECT CASE WHEN length(x) <= {head + tail} THEN x ELSE substr(x, 1, {head}) || ' … ' || substr(x, -{tail}) END "
            f"FROM (SELECT {expr} AS x))")


def _index_text(kind: str, data: str) -> str:
    """SQL for the indexed text of an event of type `kind` whose JSON is `data` (SQL expressions): a
    prompt as typed (without the context added for the model; not a correction the loop sent), an
    answer, a call's tool name and argument values, a result's output; each bounded. NULL for
    anything else."""
    mark = "char(10, 10) || '[context] '"
    typed = (f"(SELECT CASE WHEN json_extract({data}, '$.origin') IS 'loop' THEN NULL WHEN instr(t, {mark}) > 0 "
             f"THEN substr(t, 1, instr(t, {mark}) - 1) ELSE t END FROM (SELECT json_extract({data}, '$.text') AS t))")
    values = (f"(SELECT group_concat(substr(value, 1, {TEXT_HEAD}), ' ') FROM json_tree({data}, '$.arguments') "
              "WHERE type IN ('text', 'integer', 'real'))")
    answer = f"json_extract({data}, '$.text')"
    call = f"json_extract({data}, '$.name') || ' ' || coalesce({values}, '')"
    output = f"json_extract({data}, '$.output')"
    return (f"CASE {kind} WHEN 'user_message' THEN {_bounded(typed, TEXT_HEAD, TEXT_TAIL)} "
            f"WHEN 'assistant_text' THEN {_bounded(answer, TEXT_HEAD, TEXT_TAIL)} "
            f"WHEN 'tool_call' THEN {_bounded(call, TEXT_HEAD, TEXT_TAIL)} "
            f"WHEN 'tool_result' THEN {_bounded(output, RESULT_HEAD, RESULT_TAIL)} END")


_INDEXED = "(" + ", ".join(f"'{kind}'" for kind in INDEXED_TYPES) + ")"
_INDEX_OBJECTS = (("TRIGGER", "search_event_added"), ("TRIGGER", "search_event_deleted"), ("TRIGGER", "search_event_changed"),
                  ("TRIGGER", "search_rows_deleted"), ("TABLE", "search_index"), ("TABLE", "search_rows"), ("TABLE", "search_meta"))
_INDEXED_ID = "(SELECT CAST(value AS INTEGER) FROM search_meta WHERE key = 'indexed')"
_INDEX_SCHEMA = (
    "CREATE TABLE search_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE search_rows (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "type TEXT NOT NULL, ts REAL NOT NULL, text TEXT NOT NULL)",
    "CREATE UNIQUE INDEX search_rows_by_event ON search_rows (session_id, seq)",
    "CREATE VIRTUAL TABLE search_index USING fts5 (text, content = 'search_rows', content_rowid = 'id', "
    "tokenize = 'unicode61 remove_diacritics 2')",
    # A row in the FTS5 table leaves it with the same text it went in with (a row not put in yet just goes).
    "CREATE TRIGGER search_rows_deleted AFTER DELETE ON search_rows BEGIN "
    f"INSERT INTO search_index (search_index, rowid, text) SELECT 'delete', old.id, old.text WHERE old.id <= {_INDEXED_ID}; END",
    f"CREATE TRIGGER search_event_added AFTER INSERT ON events WHEN new.type IN {_INDEXED} AND json_valid(new.data) BEGIN "
    "DELETE FROM search_rows WHERE session_id = new.session_id AND seq = new.seq; "
    "INSERT INTO search_rows (session_id, seq, type, ts, text) SELECT new.session_id, new.seq, new.type, new.ts, t "
    f"FROM (SELECT {_index_text('new.type', 'd')} AS t FROM (SELECT {_without_nul('new.data')} AS d)) WHERE t != ''; END",
    f"CREATE TRIGGER search_event_deleted AFTER DELETE ON events WHEN old.type IN {_INDEXED} BEGIN "
    "DELETE FROM search_rows WHERE session_id = old.session_id AND seq = old.seq; END",
    "CREATE TRIGGER search_event_changed AFTER UPDATE OF session_id, seq, type, ts, data ON events BEGIN "
    "DELETE FROM search_rows WHERE session_id = old.session_id AND seq = old.seq; "
    "INSERT INTO search_rows (session_id, seq, type, ts, text) SELECT new.session_id, new.seq, new.type, new.ts, t "
    f"FROM (SELECT {_index_text('new.type', 'd')} AS t FROM (SELECT {_without_nul('new.data')} AS d)) "
    f"WHERE new.type IN {_INDEXED} AND json_valid(new.data) AND t != ''; END",
)


def ensure_index(conn: sqlite3.Connection) -> bool:
    """Make the search index of the journal open on `conn` when it has none (or one of another
    version): its tables and triggers, with the events already saved left to `backfill_index`.
    False when it cannot be made (an SQLite without FTS5): the journal works without it."""
    try:
        if _index_version(conn) == INDEX_VERSION:
            return True
        conn.execute("BEGIN IMMEDIATE")
        try:
            if _index_version(conn) != INDEX_VERSION:  # another process may have made it meanwhile
                for kind, name in _INDEX_OBJECTS:
                    conn.execute(f"DROP {kind} IF EXISTS {name}")
                for statement in _INDEX_SCHEMA:
                    conn.execute(statement)
                pending = conn.execute("SELECT EXISTS (SELECT 1 FROM events)").fetchone()[0]
                conn.executemany("INSERT INTO search_meta (key, value) VALUES (?, ?)",
                                 [("version", INDEX_VERSION), ("indexed", "0"), ("backfill", "" if pending else "done")])
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
    except sqlite3.Error:
        return False
    return True


def _index_version(conn: sqlite3.Connection) -> str | None:
    try:
        row = conn.execute("SELECT value FROM search_meta WHERE key = 'version'").fetchone()
    except sqlite3.OperationalError:  # no such table: a journal from before the index
        return None
    return str(row[0]) if row is not None else None


def index_state(conn: sqlite3.Connection) -> tuple[bool, bool]:
    """Whether the journal open on `conn` has the search index (of this version), and whether every
    event is in it. Reads only."""
    if _index_version(conn) != INDEX_VERSION:
        return False, False
    return True, unindexed_events(conn) == 0


def index_pending(conn: sqlite3.Connection, batch: int = INDEX_BATCH) -> bool:
    """Put the next `batch` rows of text not in the FTS5 table yet into it, in one transaction; True
    when none is left."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        last = conn.execute(f"SELECT max(id) FROM (SELECT id FROM search_rows WHERE id > {_INDEXED_ID} ORDER BY id LIMIT ?)",
                            (batch,)).fetchone()[0]
        if last is not None:
            conn.execute(f"INSERT INTO search_index (rowid, text) SELECT id, text FROM search_rows WHERE id > {_INDEXED_ID} AND id <= ? "
                         "ORDER BY id", (last,))
            conn.execute("UPDATE search_meta SET value = ? WHERE key = 'indexed'", (str(last),))
        left = conn.execute(f"SELECT EXISTS (SELECT 1 FROM search_rows WHERE id > {_INDEXED_ID})").fetchone()[0]
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise
    return not left


def backfill_index(conn: sqlite3.Connection, batch: int = BACKFILL_BATCH) -> bool:
    """Read the text of the next `batch` events (in key order) saved before the index existed into
    `search_rows`, in one transaction, and note how far it got; True once all are read (then
    `index_pending` puts them into the FTS5 table). Events the triggers read already are left as
    they are."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT value FROM search_meta WHERE key = 'backfill'").fetchone()
        if row is None or row[0] == "done":
            conn.execute("COMMIT")
            return True
        after = tuple(json.loads(row[0])) if row[0] else ()
        start = "(session_id, seq) > (?, ?)" if after else "1"
        last = conn.execute(f"SELECT session_id, seq FROM events WHERE {start} ORDER BY session_id, seq LIMIT 1 OFFSET ?",
                            (*after, batch - 1)).fetchone()
        end = " AND (session_id, seq) <= (?, ?)" if last is not None else ""
        conn.execute("INSERT OR IGNORE INTO search_rows (session_id, seq, type, ts, text) SELECT session_id, seq, type, ts, t FROM "
                     f"(SELECT session_id, seq, kind AS type, ts, {_index_text('kind', 'd')} AS t FROM "
                     f"(SELECT session_id, seq, type AS kind, ts, {_without_nul('data')} AS d FROM events WHERE {start}{end} "
                     f"AND type IN {_INDEXED} AND json_valid(data))) WHERE t != ''", (*after, *(last or ())))
        conn.execute("UPDATE search_meta SET value = ? WHERE key = 'backfill'", (json.dumps(list(last)) if last is not None else "done",))
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise
    return last is None


def unindexed_events(conn: sqlite3.Connection) -> int:
    """How many events are not in the FTS5 table yet: those saved before the index existed that
    `backfill_index` has yet to read, and the rows of text `index_pending` has yet to put in."""
    pending = int(conn.execute(f"SELECT count(*) FROM search_rows WHERE id > {_INDEXED_ID}").fetchone()[0])
    row = conn.execute("SELECT value FROM search_meta WHERE key = 'backfill'").fetchone()
    if row is None or row[0] == "done":
        return pending
    if not row[0]:
        return pending + int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    return pending + int(conn.execute("SELECT count(*) FROM events WHERE (session_id, seq) > (?, ?)", tuple(json.loads(row[0]))).fetchone()[0])


def catch_up_index(conn: sqlite3.Connection, budget: float) -> bool:
    """Read older events and put pending rows into the FTS5 table, batch by batch, for up to
    `budget` seconds; True once everything is in."""
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        read = backfill_index(conn)
        if index_pending(conn) and read:
            return True
    return False


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


def open_index(path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    """The journal at `path` opened for writing its index, the index made if it had none; a
    JournalError when there is no journal, or it cannot be opened or indexed."""
    if not path.is_file():
        raise JournalError(f"no session journal at {path} yet: sessions are saved there as they run")
    try:
        conn = _connect(path, busy_timeout_ms)
    except sqlite3.Error as exc:
        raise JournalError(f"cannot open the session journal {path}: {exc}") from None
    if _index_version(conn) != INDEX_VERSION:
        conn.close()
        raise JournalError(f"the session journal {path} cannot be searched: this Python's SQLite has no FTS5 full-text index, "
                           "or the journal is locked by another process (try again)")
    return conn


class _Item(NamedTuple):
    """One event waiting to be saved: `data` is its JSON; a `marker` item stands for the events
    of its session that were not kept (its notice is made when its seq is known)."""

    session_id: str
    workspace: str
    kind: str
    ts: float
    data: str
    size: int = 0  # bytes of `data`
    marker: bool = False


class Journal:
    """Records the events of one or more sessions into the journal at `path`.

    The writer thread owns the database connection and `_buffer` (the events taken from the queue
    and not yet committed); `_lock` guards the counts that `record()` and `close()` read."""

    def __init__(self, path: Path, *, warn: Callable[[str], None] = lambda _: None, max_event_bytes: int = MAX_EVENT_BYTES,
                 busy_timeout_ms: int = BUSY_TIMEOUT_MS, max_unsaved_events: int = MAX_UNSAVED_EVENTS,
                 max_unsaved_bytes: int = MAX_UNSAVED_BYTES, retry_delays: tuple[float, float] = (RETRY_FIRST, RETRY_MAX)) -> None:
        self.path = path
        self.warn = warn
        self.max_event_bytes = max_event_bytes
        self.busy_timeout_ms = busy_timeout_ms
        self.max_unsaved_events = max_unsaved_events
        self.max_unsaved_bytes = max_unsaved_bytes
        self.retry_delays = retry_delays
        self.failing = False  # the latest attempt to open or write the database failed
        self._failure = ""  # what failed, for the warnings
        self._what = "cannot be opened"
        self._late = 0  # events committed since the failure began
        self._closed = False
        self._closing = False  # the writer has taken close()'s stop: no more retries
        self._reported = False  # the loss at close was reported
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._buffer: deque[_Item] = deque()
        self._next_seq: dict[str, int] = {}
        self._saved_seq: dict[str, int] = {}  # the last seq committed by this journal, per session
        self._titled: set[str] = set()
        self._started: set[str] = set()  # sessions whose `session_start` this journal saved (writer thread)
        self._checked: set[str] = set()  # sessions whose earlier record was looked at for an incomplete mark
        self._lock = threading.Condition()
        self._unsaved = 0  # items recorded and not committed (the markers among them too)
        self._unsaved_bytes = 0
        self._unsaved_markers = 0
        self._sealed: dict[str, int] = {}  # session -> events not kept after the bound was reached
        self._to_index = 0  # indexed events saved since the last batch put into the search index (writer thread)
        self._thread = threading.Thread(target=self._run, name="osprey-journal", daemon=True)
        self._thread.start()

    def record(self, event: Event, session_id: str, workspace: str = "") -> None:
        """Queue `event` of session `session_id` (`workspace` is kept when the session is new).

        Past the bound on unsaved events the session is sealed: this and every later event of it
        is not kept, so its saved record stays a prefix of the session, closed by a marker."""
        if self._closed:
            return
        with self._lock:
            if session_id in self._sealed:
                self._sealed[session_id] += 1
                return
        data = event_json(event, self.max_event_bytes)
        size = len(data.encode("utf-8", "replace"))
        with self._lock:
            if self._unsaved >= self.max_unsaved_events or self._unsaved_bytes + size > self.max_unsaved_bytes:
                self._sealed[session_id] = 1
                self._unsaved += 1
                self._unsaved_markers += 1
                item = _Item(session_id, workspace, "notice", float(event.ts), "", marker=True)
            else:
                self._unsaved += 1
                self._unsaved_bytes += size
                item = _Item(session_id, workspace, event.type, float(event.ts), data, size)
            self._queue.put(item)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued event is committed; False when `timeout` passes first (say, the
        database cannot be written: its events wait in memory)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._unsaved == 0, timeout)

    def close(self) -> None:
        """Commit what is queued (one last attempt when the database was failing), checkpoint the
        log into the database and stop the writer. Waits at most CLOSE_TIMEOUT; never raises, and
        warns with the number of events that were not saved."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)  # the writer stops after one last attempt
        self._thread.join(CLOSE_TIMEOUT)
        with self._lock:
            if self._reported:
                return
            self._reported = True
            unsaved = self._unsaved - self._unsaved_markers
            lost = unsaved + sum(self._sealed.values())
            sessions = sorted({item.session_id for item in self._buffer} | set(self._sealed)) if not self._thread.is_alive() else []
        if lost == 0:
            return
        if self._thread.is_alive():
            why = f"{self.path} was still being written {CLOSE_TIMEOUT:g} s after the end"
        else:
            why = f"{self.path} could not be written ({self._failure})" if self._failure else f"{self.path} could not be written"
        stops = "".join(f"; the saved record of session {sid} " + (f"stops at event {self._saved_seq[sid]}" if sid in self._saved_seq
                                                                   else "holds none of this run's events") for sid in sessions)
        self._say(f"{lost:,} events of this session were not saved: {why}{stops}")

    # ------------------------------------------------------------------ the writer thread

    def _say(self, message: str) -> None:
        try:
            self.warn(message)
        except Exception:  # noqa: BLE001 - a front end's failure to show a warning never stops the journal
            pass

    def _take(self, timeout: float | None) -> bool:
        """Move queued items into the buffer: wait up to `timeout` (None: until one comes) for the
        first, then take what else is there. True when close() asked to stop."""
        try:
            item = self._queue.get(timeout=timeout) if timeout is None or timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return False
        gather_until = time.monotonic() + (GATHER_S if not self.failing else 0.0)
        while True:
            if item is None:
                return True
            self._buffer.append(item)
            if item.marker:
                why = f" could not be written ({self._failure})" if self.failing else " was slow to write"
                self._say(f"the session journal {self.path}{why} and holds "
                          f"{self.max_unsaved_events:,} events or {self.max_unsaved_bytes / 2**20:g} MiB unsaved, the most it keeps: "
                          f"later events of session {item.session_id} are not kept, so its saved record will stop before them "
                          "(a resume says so)")
            try:
                # What else comes within GATHER goes in the same transaction: a turn's few events
                # cost one commit, and the writer wakes the GIL once, not once per event.
                wait = gather_until - time.monotonic()
                item = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                return False

    def _run(self) -> None:
        first, most = self.retry_delays
        delay, next_try = first, 0.0
        conn: sqlite3.Connection | None = None
        try:
            conn = self._attempt(None)
        except (OSError, sqlite3.Error) as exc:
            self._fail(exc)
            next_try, delay = time.monotonic() + delay, min(delay * 2, most)
        try:
            while True:
                if self.failing:
                    stop = self._take(max(0.0, next_try - time.monotonic()))
                    if not stop and time.monotonic() < next_try:
                        continue  # more events to keep; not yet time to retry
                else:
                    stop = self._take(None)
                if stop:
                    self._closing = True
                try:
                    conn = self._attempt(conn)
                except (OSError, sqlite3.Error) as exc:
                    conn = None  # closed by _attempt; the next attempt opens the database again
                    self._fail(exc)
                    next_try, delay = time.monotonic() + delay, min(delay * 2, most)
                else:
                    if self.failing:
                        self._recovered()
                        delay = first
                    if stop:
                        conn = self._forget_unprompted(conn)
                    if conn is not None and (self._to_index >= INDEX_EVERY or (stop and self._to_index)):
                        self._index(conn)
                if stop:
                    return
        finally:
            if conn is not None:
                try:
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error:
                    pass  # a reader holds the log: the next writer checkpoints it
                conn.close()

    def _attempt(self, conn: sqlite3.Connection | None) -> sqlite3.Connection:
        """Open the database if needed and commit the buffer, BATCH events per transaction."""
        if conn is None:
            self._what = "cannot be opened"
            conn = _connect(self.path, self.busy_timeout_ms)
        self._what = "cannot be written"
        try:
            while self._buffer:
                batch = list(islice(self._buffer, BATCH))
                notes = self._write(conn, batch)
                for _ in batch:
                    self._buffer.popleft()
                if self.failing:
                    self._late += sum(1 for item in batch if not item.marker)
                with self._lock:
                    self._unsaved -= len(batch)
                    self._unsaved_bytes -= sum(item.size for item in batch)
                    self._unsaved_markers -= sum(1 for item in batch if item.marker)
                    self._lock.notify_all()
                for note in notes:
                    self._say(note)
        except BaseException:
            conn.close()
            raise
        return conn

    def _index(self, conn: sqlite3.Connection) -> None:
        """Put a batch of the text saved into the search index: the writer does it between commits,
        so a session's few events a commit do not each pay for an FTS5 transaction. Best effort: what
        is left is put in by the next batch or the next search."""
        self._to_index = 0
        try:
            index_pending(conn)
        except sqlite3.Error:
            pass

    def _forget_unprompted(self, conn: sqlite3.Connection) -> sqlite3.Connection | None:
        """Delete each session this journal started (saved a `session_start` of) that has no prompt
        and started no child (the check and the delete in one transaction, so a prompt another
        process adds keeps it). Best effort: a session left behind is passed over by `list_sessions`."""
        if not self._started:
            return conn
        sessions = sorted(self._started)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for session_id in sessions:
                    if conn.execute(f"SELECT {_PROMPTED} OR EXISTS (SELECT 1 FROM sessions WHERE parent_id = ?)",
                                    (session_id, session_id)).fetchone()[0]:
                        continue
                    conn.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
                    conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
                conn.execute("COMMIT")
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
        except sqlite3.Error:
            conn.close()
            return None
        return conn

    def _fail(self, exc: BaseException) -> None:
        self._failure = f"{type(exc).__name__}: {exc}"
        if self.failing:
            return  # warned when the failure began; the retries go on quietly
        self.failing = True
        self._late = 0
        if self._closing:
            return  # close() reports what was not saved
        hint = ". A corrupt file can be moved aside to start a new journal" if self._what == "cannot be opened" else ""
        self._say(f"the session journal {self.path} {self._what} ({self._failure}); the session goes on without being saved for now: "
                  f"its events are kept in memory (up to {self.max_unsaved_events:,} events or {self.max_unsaved_bytes / 2**20:g} MiB) "
                  f"and saving them is retried every {self.retry_delays[1]:g} s at most{hint}")

    def _recovered(self) -> None:
        self.failing = False
        with self._lock:
            sealed = sorted(self._sealed)
        lost = f"; later events of session {', '.join(sealed)} were not kept (its saved record stops before them)" if sealed else ", none lost"
        self._say(f"the session journal {self.path} can be written again: {self._late:,} events were saved late{lost}")

    def _write(self, conn: sqlite3.Connection, items: list[_Item]) -> list[str]:
        """Commit `items` in one transaction; the warnings about earlier incomplete records found."""
        notes: list[str] = []
        written: dict[str, int] = {}
        started: set[str] = set()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for item in items:
                session_id = item.session_id
                seq = self._next_seq.get(session_id)
                if seq is None:
                    row = conn.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM events WHERE session_id = ?", (session_id,)).fetchone()
                    seq = int(row[0])
                    if seq > 0 and session_id not in self._checked:
                        notes += self._incomplete_record(conn, session_id)
                    self._checked.add(session_id)
                data = _marker_json(item.ts, seq - 1) if item.marker else item.data
                conn.execute("INSERT INTO events (session_id, seq, type, ts, data) VALUES (?, ?, ?, ?, ?)",
                             (session_id, seq, item.kind, item.ts, data))
                self._next_seq[session_id] = seq + 1
                if not item.marker:
                    written[session_id] = seq
                if item.kind == "session_start":
                    started.add(session_id)
                self._update_session(conn, session_id, item.workspace, item.kind, item.ts, data)
            conn.execute("COMMIT")
        except BaseException:
            self._next_seq.clear()  # re-read from the database next time
            self._titled.clear()  # a title set in the rolled back transaction is set again
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
        self._saved_seq.update(written)
        self._started.update(started)
        self._to_index += sum(1 for item in items if item.kind in INDEXED_TYPES)
        return notes

    def _incomplete_record(self, conn: sqlite3.Connection, session_id: str) -> list[str]:
        """A warning for each mark of events not saved in the earlier record of `session_id`."""
        rows = conn.execute(f"SELECT seq, data FROM events WHERE session_id = ? AND type = 'notice' AND data LIKE '%\"{INCOMPLETE_KEY}\"%' "
                            "ORDER BY seq", (session_id,)).fetchall()
        notes = []
        for seq, data in rows:
            try:
                if INCOMPLETE_KEY not in json.loads(data):
                    continue
            except ValueError:
                continue
            notes.append(f"the saved record of session {session_id} is incomplete: events after event {seq - 1} of an earlier run "
                         f"were not saved (the session journal {self.path} could not be written then), so the conversation "
                         "resumed from it lacks them")
        return notes

    def _update_session(self, conn: sqlite3.Connection, session_id: str, workspace: str, kind: str, ts: float, data: str) -> None:
        if kind == "session_start":
            event = json.loads(data)
            parent = event.get("parent_id")
            conn.execute(
                "INSERT INTO sessions (id, cwd, workspace, provider, model, created, updated, parent_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET provider = excluded.provider, model = excluded.model, updated = excluded.updated",
                (session_id, event.get("cwd", ""), workspace or event.get("cwd", ""), event.get("provider", ""), event.get("model", ""), ts, ts,
                 parent if isinstance(parent, str) else None),
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


def _marker_json(ts: float, last_seq: int) -> str:
    """The notice that closes a sealed session's record: the events after `last_seq` were not kept."""
    message = (f"the session journal could not save this session's events after event {last_seq}: the database could not be "
               "written and too many events waited; the saved record stops here")
    return json.dumps({"type": "notice", "ts": ts, "level": "warning", "message": message, INCOMPLETE_KEY: last_seq})


# ---------------------------------------------------------------------- reading


def reader(path: Path) -> sqlite3.Connection:
    """The journal at `path` opened read-only (never blocking its writers); a JournalError when
    there is none or it cannot be read."""
    return _read(path)


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


def _columns(conn: sqlite3.Connection) -> str:
    """The columns of a session row; a journal from before child sessions has no parent_id."""
    present = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    return _COLUMNS if "parent_id" in present else _COLUMNS.replace(", parent_id", ", NULL")


_COLUMNS = "id, cwd, workspace, title, provider, model, created, updated, outcome, parent_id"
# True for a session (bound as the one parameter) that has a prompt: a `user_message` event.
_PROMPTED = "EXISTS (SELECT 1 FROM events WHERE events.session_id = ? AND events.type = 'user_message')"
# The same in a query over `sessions`: a title comes from the person's first prompt.
_HAS_PROMPT = "(title != '' OR EXISTS (SELECT 1 FROM events WHERE events.session_id = sessions.id AND events.type = 'user_message'))"


def list_sessions(path: Path, cwd: str | None = None, limit: int = 1000) -> list[SessionRow]:
    """Journaled sessions that have a prompt, newest first; only those run in `cwd` when it is given.
    A session without a prompt (one killed before its first, or saved by an older Osprey) is left out."""
    try:
        conn = _read(path)
    except _Empty:
        return []
    try:
        if cwd is None:
            return _rows(conn, f"SELECT {_columns(conn)} FROM sessions WHERE {_HAS_PROMPT} ORDER BY updated DESC LIMIT ?", (limit,))
        return _rows(conn, f"SELECT {_columns(conn)} FROM sessions WHERE cwd = ? AND {_HAS_PROMPT} ORDER BY updated DESC LIMIT ?",
                     (cwd, limit))
    except sqlite3.Error as exc:
        raise JournalError(f"cannot read the session journal {path}: {exc}") from None
    finally:
        conn.close()


def find_session(path: Path, session_id: str) -> SessionRow:
    """The session whose id is `session_id`, or starts with it when only one does."""
    conn = _read(path)
    try:
        escaped = session_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = _rows(conn, f"SELECT {_columns(conn)} FROM sessions WHERE id = ? OR id LIKE ? ESCAPE '\\' ORDER BY updated DESC LIMIT 10",
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


def session_tree(path: Path, session_id: str, limit: int = 10_000) -> list[tuple[int, SessionRow]]:
    """A session and every session it started, depth first in the order they were made, each with
    its depth (0 for `session_id` itself)."""
    root = find_session(path, session_id)
    conn = _read(path)
    try:
        columns = _columns(conn)
        if columns != _COLUMNS:
            return [(0, root)]  # written before child sessions: none has a parent
        tree: list[tuple[int, SessionRow]] = []
        stack: list[tuple[int, SessionRow]] = [(0, root)]
        seen: set[str] = set()
        while stack and len(tree) < limit:
            depth, row = stack.pop()
            if row.id in seen:
                continue
            seen.add(row.id)
            tree.append((depth, row))
            children = _rows(conn, f"SELECT {columns} FROM sessions WHERE parent_id = ? ORDER BY created DESC", (row.id,))
            stack.extend((depth + 1, child) for child in children)
        return tree
    except sqlite3.Error as exc:
        raise JournalError(f"cannot read the session journal {path}: {exc}") from None
    finally:
        conn.close()


def has_prompt(path: Path, session_id: str) -> bool:
    """Whether the journal holds session `session_id` (its full id) with a prompt; False when the
    journal cannot be read."""
    try:
        conn = _read(path)
    except JournalError:
        return False
    try:
        return bool(conn.execute(f"SELECT {_PROMPTED}", (session_id,)).fetchone()[0])
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def read_events(path: Path, session_id: str) -> list[Event]:
    """The events of one session as recorded, in order, as typed events (`events.AnyEvent`)."""
    return [parse_event(data) for data in _event_texts(path, session_id)]


def _event_texts(path: Path, session_id: str) -> list[str]:
    conn = _read(path)
    try:
        return [data for (data,) in conn.execute("SELECT data FROM events WHERE session_id = ? ORDER BY seq", (session_id,))]
    except sqlite3.Error as exc:
        raise JournalError(f"cannot read session {session_id} from the journal {path}: {exc}") from None
    finally:
        conn.close()


def load_events(path: Path, session_id: str) -> list[dict[str, Any]]:
    """The events of one session as recorded, in order, as plain JSON objects; the images a tool
    result carries are shown by a note each (`[image: image/png, 12 KB]`), not their data."""
    conn = _read(path)
    try:
        return [_image_notes(json.loads(data)) for (data,) in conn.execute("SELECT data FROM events WHERE session_id = ? ORDER BY seq", (session_id,))]
    except (sqlite3.Error, ValueError) as exc:
        raise JournalError(f"cannot read session {session_id} from the journal {path}: {exc}") from None
    finally:
        conn.close()


def _image_notes(data: Any) -> Any:
    if isinstance(data, dict) and data.get("images"):
        data["images"] = recorded_image_notes(data["images"])
    return data
