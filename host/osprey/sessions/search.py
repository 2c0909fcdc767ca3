"""Full-text search over every journaled session: `osprey sessions search` and the `session_search` tool.

The journal's FTS5 index (see `journal.ensure_index`) holds the prompts, answers, tool calls and
tool results of every session. A query is the person's words, each quoted, so FTS5 syntax in it is
read as words (`--raw` passes FTS5 syntax through, bounded in length); hits are ranked by bm25,
newest first among equal ranks. Every search is bounded: in hits, in snippet length, and in time
(an SQLite progress handler stops a query past QUERY_TIMEOUT). What is not in the index yet (text
saved since the journal's writer last put a batch in, events of a journal from before the index)
is put in first, in short transactions, for at most BACKFILL_BUDGET seconds a search; the results
then say how much is left for the next one. The search itself reads over a read-only connection.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import OspreyError
from ..terminal_text import clean
from .journal import JournalError, catch_up_index, index_state, open_index, reader, unindexed_events

DEFAULT_LIMIT = 20
MAX_LIMIT = 200
MAX_QUERY_CHARS = 1000
MAX_RAW_CHARS = 500  # of a query in FTS5 syntax (`--raw`)
MAX_TERMS = 32
SNIPPET_TOKENS = 24  # around the match, as FTS5 counts them
SNIPPET_CHARS = 320  # a snippet is cut to this many characters around its first match
QUERY_TIMEOUT = 3.0  # seconds
BACKFILL_BUDGET = 2.0  # seconds a search spends putting what is not in the index yet into it, at most
# Where snippet() marks a match: characters of the private use area, which the text shown keeps
# apart from the control characters it drops.
MARK_START, MARK_END = "\ue000", "\ue001"

Kind = Literal["prompt", "answer", "tool_call", "tool_result"]
KINDS: dict[str, Kind] = {"user_message": "prompt", "assistant_text": "answer", "tool_call": "tool_call", "tool_result": "tool_result"}
KIND_LABELS: dict[str, str] = {"prompt": "prompt", "answer": "answer", "tool_call": "tool call", "tool_result": "tool result"}


class SearchError(OspreyError):
    """A search that cannot be made: no journal, a query past its time limit, a bad query."""


class QueryError(SearchError):
    """The query itself cannot be searched for: empty, too long, invalid FTS5 syntax."""


class SearchHit(BaseModel):
    """One event of a journaled session that matches the query."""

    model_config = ConfigDict(defer_build=True)

    session_id: str
    # The session that started this one (a child session); left out for a lead session.
    parent_id: str | None = Field(None, exclude_if=lambda value: value is None)
    workspace: str
    cwd: str
    title: str
    ts: float  # when the event was saved
    seq: int  # the event's number in its session
    kind: Kind
    # The text around the match, on one line, without control characters; each match between
    # MARK_START and MARK_END (`marked` puts other marks in their place).
    snippet: str


class SearchResults(BaseModel):
    model_config = ConfigDict(defer_build=True)

    hits: list[SearchHit]
    # Saved events not in the index yet, so not searched: those of a journal from before the index
    # that the searches have not reached, or more new ones than one search had time to put in.
    unindexed: int = 0


def fts_query(text: str) -> str:
    """The person's words as an FTS5 query: every word that has a letter or digit, quoted (so
    `AND`, `NEAR`, `*`, `:` and quotes are words like any other), all of them required."""
    terms = [word for word in text.split() if any(ch.isalnum() for ch in word)]
    if not terms:
        raise QueryError("the query has no words to search for (only spaces or punctuation): give one or more words")
    if len(terms) > MAX_TERMS:
        raise QueryError(f"the query has {len(terms)} words; give at most {MAX_TERMS}")
    return " ".join('"' + term.replace('"', '""') + '"' for term in terms)


def search(path: Path, query: str, *, workspace: str | Path | None = None, limit: int = DEFAULT_LIMIT, raw: bool = False,
           exclude_tree: str | None = None, timeout: float = QUERY_TIMEOUT, backfill_budget: float = BACKFILL_BUDGET) -> SearchResults:
    """The events of the journal at `path` that match `query`, best first (bm25), newest first
    among equal ranks: at most `limit` of them, of sessions run in `workspace` or below it when it
    is given, leaving out the session `exclude_tree` and every session it started."""
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"the query is {len(query):,} characters long; give at most {MAX_QUERY_CHARS:,}")
    if raw:
        if len(query) > MAX_RAW_CHARS:
            raise QueryError(f"a raw FTS5 query is at most {MAX_RAW_CHARS} characters long")
        if not query.strip():
            raise QueryError("the query is empty: give one or more words")
        match = query
    else:
        match = fts_query(query)
    if not 1 <= limit <= MAX_LIMIT:
        raise QueryError(f"the limit is {limit}; give one from 1 to {MAX_LIMIT}")
    try:
        conn = reader(path)
        try:
            made, complete = index_state(conn)
            if not complete:
                # What is not in the index yet goes in first, over a connection that writes; the
                # search reads over one that only reads, which never holds up a session's writer.
                conn.close()
                _catch_up(path, backfill_budget, made)
                conn = reader(path)
            unindexed = unindexed_events(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise SearchError(f"cannot read the session journal {path}: {exc}") from None
    except JournalError as exc:
        raise SearchError(str(exc)) from None
    try:
        return SearchResults(hits=_query(conn, match, workspace, limit, exclude_tree, timeout, raw), unindexed=unindexed)
    finally:
        conn.close()


def _catch_up(path: Path, budget: float, made: bool) -> None:
    """Make the index if the journal has none, then put what is not in it yet into it for up to
    `budget` seconds. A journal another process holds locked is searched as it is, if it has the index."""
    try:
        conn = open_index(path)
    except JournalError:
        if made:
            return
        raise
    try:
        catch_up_index(conn, budget)
    except sqlite3.OperationalError:
        pass
    finally:
        conn.close()


def _query(conn: sqlite3.Connection, match: str, workspace: str | Path | None, limit: int, exclude_tree: str | None,
           timeout: float, raw: bool) -> list[SearchHit]:
    where: list[str] = ["search_index MATCH ?"]
    args: list[object] = [match]
    prefix = ""
    if exclude_tree is not None:
        prefix = ("WITH RECURSIVE tree(id) AS (SELECT ? UNION SELECT s.id FROM sessions s JOIN tree ON s.parent_id = tree.id) ")
        where.append("r.session_id NOT IN (SELECT id FROM tree)")
    if workspace is not None:
        root = str(Path(workspace).expanduser().resolve())
        below = root if root.endswith("/") else root + "/"
        where.append("(s.cwd = ? OR substr(s.cwd, 1, ?) = ?)")
        args += [root, len(below), below]
    ranked = (f"{prefix}SELECT r.id, r.session_id, s.parent_id, s.workspace, s.cwd, s.title, r.ts, r.seq, r.type "
              "FROM search_index JOIN search_rows r ON r.id = search_index.rowid JOIN sessions s ON s.id = r.session_id "
              f"WHERE {' AND '.join(where)} ORDER BY bm25(search_index), r.ts DESC, r.session_id, r.seq LIMIT ?")
    deadline = time.monotonic() + timeout
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 2000)
    try:
        rows = conn.execute(ranked, [*([exclude_tree] if exclude_tree is not None else []), *args, limit]).fetchall()
        # The snippets of the hits alone: in the ranking query they would be made for every match.
        snippets = {}
        for row in rows:
            found = conn.execute("SELECT snippet(search_index, 0, ?, ?, '…', ?) FROM search_index WHERE search_index MATCH ? AND rowid = ?",
                                 (MARK_START, MARK_END, SNIPPET_TOKENS, match, row[0])).fetchone()
            snippets[row[0]] = found[0] if found is not None else ""
    except sqlite3.OperationalError as exc:
        if time.monotonic() > deadline:
            raise SearchError(f"the search took longer than {timeout:g} s and was stopped: give more or rarer words") from None
        if raw:
            raise QueryError(f"the FTS5 query {match!r} is not valid: {exc}") from None
        raise SearchError(f"cannot search the session journal: {exc}") from None
    except sqlite3.Error as exc:
        raise SearchError(f"cannot search the session journal: {exc}") from None
    finally:
        conn.set_progress_handler(None, 0)
    return [SearchHit(session_id=sid, parent_id=parent, workspace=ws, cwd=cwd, title=_line(title), ts=ts, seq=seq,
                      kind=KINDS.get(kind, "prompt"), snippet=_snippet(snippets[rowid]))
            for rowid, sid, parent, ws, cwd, title, ts, seq, kind in rows]


def _line(text: str) -> str:
    """`text` on one line, without control characters."""
    return " ".join(clean(text).split())


def _snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """A snippet on one line, without control characters, at most about `limit` characters around
    its first match (a single long token, such as a line of base64, is cut)."""
    text = _line(text)
    if len(text) <= limit:
        return text
    first = max(text.find(MARK_START), 0)
    start = max(0, min(first - limit // 3, len(text) - limit))
    cut = text[start:start + limit]
    marks = [ch for ch in cut if ch in (MARK_START, MARK_END)]
    if marks and marks[0] == MARK_END:
        cut = MARK_START + cut  # a match cut at either end stays marked
    if marks and marks[-1] == MARK_START:
        cut += MARK_END
    return ("…" if start > 0 else "") + cut + ("…" if start + limit < len(text) else "")


def marked(snippet: str, start: str = "«", end: str = "»") -> str:
    """A snippet with its matches between `start` and `end`."""
    return snippet.replace(MARK_START, start).replace(MARK_END, end)

