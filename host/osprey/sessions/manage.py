"""Renaming, forking and deleting journaled sessions: plain functions over `sessions.db`.

Each change runs in one `BEGIN IMMEDIATE` transaction under the journal's busy timeout, so it
never interleaves with a journal writer's commit. A live session's writer may still hold events of
its own session in memory: the caller flushes that journal (`Journal.flush`) before forking it,
and closes the session before deleting it.

A fork is a new session whose record starts as a copy of the source's events up to now (its
`session_start` events name the new id and carry `forked_from`), followed by a notice saying which
session and event it was forked from. Deleting a session deletes the sessions it started (child
sessions, to any depth), their events, and the directory of each under `results` when it exists.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .journal import BUSY_TIMEOUT_MS, TITLE_CHARS, JournalError, SessionRow, find_session

MAX_TITLE_CHARS = 200  # a title set by hand
MAX_TREE = 10_000  # sessions deleted together at most (a session and its children)
FORKED_FROM_KEY = "forked_from"  # in a fork's session_start events and its notice: the source's id


def results_root(home: Path) -> Path:
    """Where every session's kept tool outputs live (`retrieve`'s): `$OSPREY_HOME/results`, one
    directory a session, removed with the session."""
    return home / "results"
FORK_TITLE_SUFFIX = " (fork)"


def check_title(title: str) -> str:
    """The title as it is saved (spaces collapsed); raises JournalError for an empty, multi-line
    or over-long one."""
    if any(not c.isprintable() and not c.isspace() for c in title):
        raise JournalError("a session's title cannot hold control characters: give plain text")
    if "\n" in title.strip() or "\r" in title.strip():
        raise JournalError("a session's title is one line: give it without line breaks")
    shown = " ".join(title.split())
    if not shown:
        raise JournalError("a session's title cannot be empty: give a few words")
    if len(shown) > MAX_TITLE_CHARS:
        raise JournalError(f"a session's title is at most {MAX_TITLE_CHARS} characters; this one has {len(shown)}")
    return shown


@contextmanager
def _writing(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection to an existing journal, inside a write transaction committed on success."""
    if not path.is_file():
        raise JournalError(f"no session journal at {path} yet: sessions are saved there as they run")
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except sqlite3.Error as exc:
        raise JournalError(f"cannot open the session journal {path}: {exc}") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise JournalError(f"the session journal {path} is busy (another process is writing it); try again in a moment") from None
        raise JournalError(f"cannot change the session journal {path}: {exc}") from None
    except sqlite3.Error as exc:
        raise JournalError(f"cannot change the session journal {path}: {exc}") from None
    finally:
        conn.close()


def _gone(path: Path, session_id: str) -> JournalError:
    return JournalError(f"no session {session_id!r} in the journal {path} any more; `osprey sessions list --all` shows the saved ones")


def rename_session(path: Path, session_id: str, title: str) -> SessionRow:
    """Set the title of session `session_id` (its full id or a unique start of it); the row renamed."""
    shown = check_title(title)
    row = find_session(path, session_id)
    with _writing(path) as conn:
        if conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (shown, row.id)).rowcount != 1:
            raise _gone(path, row.id)
    return row.model_copy(update={"title": shown})


def _fork_title(title: str) -> str:
    base = title if len(title) + len(FORK_TITLE_SUFFIX) <= TITLE_CHARS else title[: TITLE_CHARS - len(FORK_TITLE_SUFFIX) - 1].rstrip() + "…"
    return base + FORK_TITLE_SUFFIX if title else ""


def fork_session(path: Path, session_id: str, *, new_id: str | None = None) -> SessionRow:
    """A new session whose record is session `session_id`'s as saved now, then a notice naming
    where it was forked; the source is left as it was. Returns the new session's row."""
    row = find_session(path, session_id)
    new_id = new_id or uuid.uuid4().hex[:12]
    now = time.time()
    with _writing(path) as conn:
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (new_id,)).fetchone() is not None:
            raise JournalError(f"a session {new_id!r} is in the journal already; give another id")
        source = conn.execute("SELECT cwd, workspace, title, provider, model FROM sessions WHERE id = ?", (row.id,)).fetchone()
        if source is None:
            raise _gone(path, row.id)
        cwd, workspace, title, provider, model = source
        conn.execute("INSERT INTO sessions (id, cwd, workspace, title, provider, model, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (new_id, cwd, workspace, _fork_title(title), provider, model, now, now))
        # One statement: SQLite copies the rows without holding them in this process.
        conn.execute("INSERT INTO events (session_id, seq, type, ts, data) SELECT ?, seq, type, ts, data FROM events WHERE session_id = ?",
                     (new_id, row.id))
        conn.execute("UPDATE events SET data = json_set(data, '$.session_id', ?, '$." + FORKED_FROM_KEY + "', ?) "
                     "WHERE session_id = ? AND type = 'session_start' AND json_valid(data)", (new_id, row.id, new_id))
        last = conn.execute("SELECT MAX(seq) FROM events WHERE session_id = ?", (new_id,)).fetchone()[0]
        last = -1 if last is None else int(last)
        notice = {"type": "notice", "ts": now, "level": "info", "message": f"forked from session {row.id} after its event {last}",
                  FORKED_FROM_KEY: row.id, "forked_at": last}
        conn.execute("INSERT INTO events (session_id, seq, type, ts, data) VALUES (?, ?, 'notice', ?, ?)",
                     (new_id, last + 1, now, json.dumps(notice, ensure_ascii=False)))
    return SessionRow(id=new_id, cwd=cwd, workspace=workspace, title=_fork_title(title), provider=provider, model=model,
                      created=now, updated=now)


def session_and_children(path: Path, session_id: str) -> list[str]:
    """The ids of session `session_id` (full id or unique start) and of every session it started,
    to any depth (at most MAX_TREE)."""
    row = find_session(path, session_id)
    with _writing(path) as conn:
        return _tree(conn, row.id)


def _tree(conn: sqlite3.Connection, session_id: str) -> list[str]:
    columns = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
    if "parent_id" not in columns:
        return [session_id]
    rows = conn.execute("WITH RECURSIVE tree(id) AS (SELECT ? UNION SELECT sessions.id FROM sessions JOIN tree ON sessions.parent_id = tree.id) "
                        "SELECT id FROM tree LIMIT ?", (session_id, MAX_TREE + 1)).fetchall()
    if len(rows) > MAX_TREE:
        raise JournalError(f"session {session_id} has more than {MAX_TREE:,} child sessions; nothing was deleted")
    return [r[0] for r in rows]


def delete_session(path: Path, session_id: str, *, results: Path | None = None, missing_ok: bool = False) -> list[str]:
    """Delete session `session_id` (full id or unique start) and the sessions it started, with their
    events, and `results/<id>` of each when it exists. Returns the ids deleted. With `missing_ok`,
    a session the journal does not hold (an exact id) is not an error: its results are removed."""
    try:
        row_id = find_session(path, session_id).id
    except JournalError:
        if not missing_ok:
            raise
        row_id = None
    ids = [session_id]
    if row_id is not None:
        with _writing(path) as conn:
            ids = _tree(conn, row_id)
            for sid in ids:
                conn.execute("DELETE FROM events WHERE session_id = ?", (sid,))
                conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))
    if results is not None:
        for sid in ids:
            remove_results(results, sid)
    return ids if row_id is not None else []


def remove_results(results: Path, session_id: str) -> bool:
    """Remove `results/<session_id>` when it is a directory there (a link is removed, not followed);
    False when there was none. A session id that is not a plain name removes nothing."""
    if not session_id or session_id in (".", "..") or "/" in session_id or "\\" in session_id or "\x00" in session_id:
        return False
    target = results / session_id
    try:
        if target.is_symlink():
            target.unlink()
            return True
        if not target.is_dir():
            return False
        shutil.rmtree(target)
    except OSError as exc:
        raise JournalError(f"cannot remove {target}: {exc.strerror or exc}; remove it yourself") from None
    return not os.path.lexists(target)
