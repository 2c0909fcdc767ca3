"""Full-text search over the saved sessions: the journal's FTS5 index kept by the database itself
(written, deleted, made later for an older journal), the search (words, workspaces, ranking,
unicode, snippets), `osprey sessions search`, and the lead session's `session_search` tool."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from session_harness import FAST_RETRY, FakeProvider, Harness, calls, text

from osprey.events import AssistantText, Event, SessionStart, ToolCallEvent, ToolResultEvent, UserMessageEvent
from osprey.session.core import Session
from osprey.sessions import journal as journal_module
from osprey.sessions.journal import CONTEXT_MARK, Journal, backfill_index, index_pending, journal_path, unindexed_events
from osprey.sessions.search import MARK_END, MARK_START, SNIPPET_CHARS, QueryError, SearchError, SearchHit, marked, search
from osprey.tools.base import ChildAgent, ChildRequest, Invocation, Tool, ToolContext, ToolSource

# ------------------------------------------------------------------ writing sessions through the real journal


@dataclass
class Saved:
    """One session to journal: a prompt, an answer, and tool calls with their results."""

    id: str
    cwd: str
    prompt: str
    answer: str = "done"
    calls: tuple[tuple[str, dict[str, Any], str], ...] = ()  # (tool, arguments, output)
    parent: str | None = None
    ts: float = 1_700_000_000.0  # of its first event; each later event one second on


def events_of(s: Saved) -> list[Event]:
    ts = s.ts
    stamp: dict[str, Any] = {"agent_id": s.id, "parent_id": s.parent} if s.parent else {}
    out: list[Event] = [SessionStart(session_id=s.id, provider="openai", model="m-1", cwd=s.cwd, tool_service="local", tools=["bash"],
                                     approval_policy="never", max_turns=9, ts=ts, **stamp),
                        UserMessageEvent(text=s.prompt, ts=ts + 1, **stamp)]
    for n, (name, arguments, output) in enumerate(s.calls):
        out += [ToolCallEvent(turn=n + 1, id=f"c{n}", name=name, arguments=arguments, ts=ts + 2 + 2 * n, **stamp),
                ToolResultEvent(turn=n + 1, id=f"c{n}", name=name, ok=True, output=output, ts=ts + 3 + 2 * n, **stamp)]
    out.append(AssistantText(turn=len(s.calls) + 1, text=s.answer, ts=ts + 2 + 2 * len(s.calls), **stamp))
    return out


def write(path: Path, *sessions: Saved) -> None:
    journal = Journal(path)
    for s in sessions:
        for event in events_of(s):
            journal.record(event, s.id, s.cwd)
    journal.close()


def found(path: Path, query: str, **kw: Any) -> list[SearchHit]:
    return search(path, query, **kw).hits


def where(hits: list[SearchHit]) -> list[tuple[str, str]]:
    return [(hit.session_id, hit.kind) for hit in hits]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return journal_path(tmp_path / "home")


def index_rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO search_index (search_index) VALUES ('integrity-check')")  # raises when the index is off
        return int(conn.execute("SELECT count(*) FROM search_rows").fetchone()[0])


# ------------------------------------------------------------------ what is indexed


def test_a_word_is_found_in_each_kind_of_event(db: Path) -> None:
    write(db, Saved("s1", "/w/one", "Please fix the wombat parser", answer="The parser now handles the quokka case.",
                    calls=(("bash", {"command": "pytest tests/test_numbat.py", "timeout": 4242}, "1 passed: platypus ok"),)),
          Saved("s2", "/w/two", "Something else entirely"))
    assert where(found(db, "wombat")) == [("s1", "prompt")]
    assert where(found(db, "quokka")) == [("s1", "answer")]
    assert where(found(db, "numbat")) == [("s1", "tool_call")]
    assert where(found(db, "4242")) == [("s1", "tool_call")]  # argument values of every kind
    assert where(found(db, "platypus")) == [("s1", "tool_result")]
    [hit] = found(db, "platypus")
    assert (hit.cwd, hit.workspace, hit.title, hit.seq, hit.ts) == ("/w/one", "/w/one", "Please fix the wombat parser", 3, 1_700_000_003.0)
    assert marked(hit.snippet) == "1 passed: «platypus» ok"
    assert found(db, "nothing-like-it") == []


def test_context_added_for_the_model_and_corrections_from_the_loop_are_not_indexed(db: Path) -> None:
    journal = Journal(db)
    for event in events_of(Saved("s1", "/w", f"typed by the person{CONTEXT_MARK}hook context gremlin")):
        journal.record(event, "s1", "/w")
    journal.record(UserMessageEvent(text="the loop says gremlin", origin="loop"), "s1", "/w")
    journal.close()
    assert found(db, "gremlin") == []
    assert where(found(db, "typed person")) == [("s1", "prompt")]


def test_a_tool_result_is_indexed_by_its_start_and_its_end(db: Path) -> None:
    output = "headword " + "filler " * 3000 + "middleword " + "filler " * 3000 + "tailword"
    write(db, Saved("s1", "/w", "go", calls=(("bash", {"command": "make"}, output),)))
    assert where(found(db, "headword")) == [("s1", "tool_result")]
    assert where(found(db, "tailword")) == [("s1", "tool_result")]
    assert found(db, "middleword") == []  # past the first 8 KiB and before the last 2 KiB


# ------------------------------------------------------------------ the search


def test_workspace_limits_the_search_to_sessions_run_in_that_directory_or_below(db: Path, tmp_path: Path) -> None:
    base = tmp_path / "w"
    dirs = {"top": base / "app", "below": base / "app" / "pkg", "sibling": base / "application", "other": base / "lib"}
    write(db, *(Saved(name, str(d), f"walrus in {name}") for name, d in dirs.items()))
    assert sorted(h.session_id for h in found(db, "walrus")) == ["below", "other", "sibling", "top"]
    assert sorted(h.session_id for h in found(db, "walrus", workspace=dirs["top"])) == ["below", "top"]
    assert [h.session_id for h in found(db, "walrus", workspace=dirs["below"])] == ["below"]
    assert [h.session_id for h in found(db, "walrus", workspace=str(dirs["top"]) + "/pkg/../../lib")] == ["other"]
    assert found(db, "walrus", workspace=base / "nowhere") == []


def test_hits_are_ranked_by_bm25_and_the_newest_comes_first_among_equals(db: Path) -> None:
    write(db, Saved("once", "/w", "a long prompt that names the lemur only once among many other words here", ts=1_700_000_500.0),
          Saved("thrice", "/w", "lemur lemur lemur", ts=1_700_000_000.0),
          *(Saved(f"same-{n}", "/w", "the lemur again", ts=1_700_000_000.0 + 100 * n) for n in (2, 0, 1)))
    assert [h.session_id for h in found(db, "lemur")] == ["thrice", "same-2", "same-1", "same-0", "once"]
    assert [h.session_id for h in found(db, "lemur", limit=2)] == ["thrice", "same-2"]


def test_fts5_syntax_in_the_query_is_read_as_words(db: Path) -> None:
    write(db, Saved("and", "/w", "salt and pepper"), Saved("plain", "/w", "salt pepper"),
          Saved("code", "/w", "call foo.bar(x) then text:col and NEAR(it)"))
    assert sorted(h.session_id for h in found(db, "salt pepper")) == ["and", "plain"]
    assert [h.session_id for h in found(db, "salt AND pepper")] == ["and"]  # AND is a word here
    assert found(db, "salt OR pepper") == []
    assert found(db, "salt NOT pepper") == []
    for query in ['"salt', "salt*", "^salt", "-salt", "salt)", "{salt}", "salt +", "'salt'"]:
        assert sorted(h.session_id for h in found(db, query)) == ["and", "plain"], query
    for query in ["text:col", "NEAR(it)", "near it", "NEAR(salt", "text:salt"]:  # an operator's parts are words in a row
        assert [h.session_id for h in found(db, query)] == (["code"] if "salt" not in query else []), query
    assert [h.session_id for h in found(db, "foo.bar(x)")] == ["code"]  # one word: its parts in a row
    assert found(db, "bar.foo") == []
    # --raw passes FTS5 syntax through.
    assert sorted(h.session_id for h in found(db, "salt AND pepper", raw=True)) == ["and", "plain"]
    assert sorted(h.session_id for h in found(db, "pepper NOT and", raw=True)) == ["plain"]
    assert sorted(h.session_id for h in found(db, "sal*", raw=True)) == ["and", "plain"]
    with pytest.raises(QueryError, match="is not valid"):
        search(db, "salt AND (", raw=True)
    with pytest.raises(QueryError, match="at most 500 characters"):
        search(db, "salt " * 200, raw=True)


@pytest.mark.parametrize("query", ["", "   ", "-- !! ()", '"" **', "🦜 🐍"])
def test_an_empty_or_punctuation_only_query_is_an_error(db: Path, query: str) -> None:
    write(db, Saved("s1", "/w", "anything"))
    with pytest.raises(QueryError, match="no words to search for"):
        search(db, query)


def test_bounds_on_the_query_and_the_limit(db: Path) -> None:
    write(db, Saved("s1", "/w", "anything"))
    with pytest.raises(QueryError, match="at most 32"):
        search(db, " ".join(f"w{n}" for n in range(33)))
    with pytest.raises(QueryError, match="at most 1,000"):
        search(db, "x" * 1001)
    with pytest.raises(QueryError, match="from 1 to 200"):
        search(db, "anything", limit=201)


def test_a_query_past_its_time_limit_is_stopped(db: Path) -> None:
    write(db, *(Saved(f"s{n}", "/w", f"common words number {n}") for n in range(200)))
    with pytest.raises(SearchError, match="took longer than 0 s"):
        search(db, "common", timeout=0)


def test_unicode_words_are_found_whatever_their_case_and_accents(db: Path) -> None:
    write(db, Saved("fr", "/w", "Le café était naïve"), Saved("ru", "/w", "Привет, мир"), Saved("el", "/w", "Καλημέρα κόσμε"),
          Saved("ja", "/w", "設定 ファイル を 読む"), Saved("de", "/w", "Straße über Äpfel"))
    assert [h.session_id for h in found(db, "CAFE")] == ["fr"]
    assert [h.session_id for h in found(db, "naive etait")] == ["fr"]
    assert [h.session_id for h in found(db, "мир")] == ["ru"]
    assert [h.session_id for h in found(db, "ПРИВЕТ")] == ["ru"]
    assert [h.session_id for h in found(db, "ΚΑΛΗΜΈΡΑ")] == ["el"]
    assert [h.session_id for h in found(db, "ファイル")] == ["ja"]
    assert [h.session_id for h in found(db, "uber apfel")] == ["de"]
    [hit] = found(db, "cafe")
    assert marked(hit.snippet) == "Le «café» était naïve"


def test_snippets_are_one_line_without_control_characters_and_bounded(db: Path) -> None:
    hostile = "line one\n\x1b]0;set the title\x07colour \x1b[31mred\x1b[0m\ttab\rback \u202eevil\x00nul yak"
    write(db, Saved("s1", "/w", hostile), Saved("s2", "/w", "go", calls=(("bash", {"command": "dump"}, "A" * 5_000 + " ibex " + "B" * 3_000),)))
    [hit] = found(db, "yak")
    assert all(ch.isprintable() or ch in (MARK_START, MARK_END) for ch in hit.snippet), hit.snippet
    assert "\n" not in hit.snippet and "set the title" not in hit.snippet and marked(hit.snippet).endswith("«yak»")
    [long] = found(db, "ibex")
    assert len(long.snippet) <= SNIPPET_CHARS + 2 and "ibex" in long.snippet
    assert long.snippet.count(MARK_START) == long.snippet.count(MARK_END) >= 1


def test_child_sessions_are_found_and_labelled_with_their_parent(db: Path) -> None:
    write(db, Saved("lead", "/w", "start the heron work"), Saved("kid", "/w", "child heron task", parent="lead", ts=1_700_000_100.0))
    hits = {h.session_id: h for h in found(db, "heron")}
    assert hits["kid"].parent_id == "lead" and hits["lead"].parent_id is None
    assert "parent_id" not in hits["lead"].model_dump() and hits["kid"].model_dump()["parent_id"] == "lead"


def test_a_search_with_no_journal_says_so(tmp_path: Path) -> None:
    with pytest.raises(SearchError, match="no session journal at"):
        search(journal_path(tmp_path / "nohome"), "anything")


# ------------------------------------------------------------------ keeping the index


def test_deleting_a_sessions_events_removes_its_hits(db: Path) -> None:
    write(db, Saved("gone", "/w", "the otter note", calls=(("bash", {"command": "echo otter"}, "otter"),)), Saved("kept", "/w", "otter too"))
    assert sorted(h.session_id for h in found(db, "otter")) == ["gone", "gone", "gone", "kept"]
    rows = index_rows(db)
    with sqlite3.connect(db) as conn:  # as any other code deletes a session: plain SQL
        conn.execute("DELETE FROM events WHERE session_id = 'gone'")
        conn.execute("DELETE FROM sessions WHERE id = 'gone'")
    assert [h.session_id for h in found(db, "otter")] == ["kept"]
    assert index_rows(db) == rows - 4  # its prompt, call, result and answer


def test_events_copied_or_changed_with_plain_sql_are_indexed(db: Path) -> None:
    write(db, Saved("orig", "/w", "the badger plan"))
    with sqlite3.connect(db) as conn:  # a copy of a session (a fork), then an event changed in place
        conn.execute("INSERT INTO sessions (id, cwd, workspace, title, created, updated) SELECT 'copy', cwd, workspace, title, created, updated "
                     "FROM sessions WHERE id = 'orig'")
        conn.execute("INSERT INTO events (session_id, seq, type, ts, data) SELECT 'copy', seq, type, ts, data FROM events WHERE session_id = 'orig'")
        conn.execute("UPDATE events SET data = json_set(data, '$.text', 'the ferret plan') WHERE session_id = 'copy' AND type = 'user_message'")
    assert [h.session_id for h in found(db, "badger")] == ["orig"]
    assert [h.session_id for h in found(db, "ferret")] == ["copy"]
    index_rows(db)


def test_a_prompt_just_journaled_is_found_while_the_session_runs(db: Path) -> None:
    journal = Journal(db)
    try:
        journal.record(events_of(Saved("live", "/w", "x"))[0], "live", "/w")
        journal.record(UserMessageEvent(text="find the pangolin"), "live", "/w")
        assert journal.flush()
        assert where(found(db, "pangolin")) == [("live", "prompt")]
        journal.record(ToolResultEvent(turn=1, id="c", name="bash", ok=True, output="pangolin output"), "live", "/w")
        assert journal.flush()
        assert sorted(where(found(db, "pangolin"))) == [("live", "prompt"), ("live", "tool_result")]
    finally:
        journal.close()


def drop_index(path: Path) -> None:
    """Make the journal as an Osprey before the index wrote it: no index tables, no triggers."""
    with sqlite3.connect(path) as conn:
        for kind, name in journal_module._INDEX_OBJECTS:
            conn.execute(f"DROP {kind} IF EXISTS {name}")
        assert not conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'search%'").fetchall()


def test_a_journal_from_before_the_index_is_indexed_at_its_first_search(db: Path) -> None:
    write(db, *(Saved(f"old{n}", f"/w/{n}", f"legacy yeti number {n}", calls=(("bash", {"command": f"ls {n}"}, f"yeti output {n}"),))
                for n in range(30)))
    drop_index(db)
    # A session opening the journal makes the (empty) index at once; the old events wait.
    journal = Journal(db)
    for event in events_of(Saved("new", "/w/new", "fresh yeti")):
        journal.record(event, "new", "/w/new")
    assert journal.flush()
    journal.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM search_meta WHERE key = 'backfill'").fetchone() == ("",)
        assert unindexed_events(conn) == 30 * 5 + 3
    # A search with no time to index finds the new session alone and says how much is left.
    first = search(db, "yeti", backfill_budget=0, limit=200)
    assert {h.session_id for h in first.hits} <= {"new"} | {f"old{n}" for n in range(3)} and first.unindexed > 0
    done = search(db, "yeti", limit=200)
    assert done.unindexed == 0
    assert sorted({h.session_id for h in done.hits}) == sorted(["new", *(f"old{n}" for n in range(30))])
    assert len(done.hits) == 30 * 2 + 1  # each old prompt and result once: no event indexed twice
    assert index_rows(db) == 30 * 4 + 2  # prompt, call, result and answer of each old one


def test_the_backfill_goes_in_bounded_steps_and_resumes_where_it_stopped(db: Path) -> None:
    write(db, *(Saved(f"s{n}", "/w", f"moose {n}") for n in range(10)))  # 3 events each: 2 with text
    drop_index(db)
    conn = journal_module._connect(db)
    try:
        assert unindexed_events(conn) == 30
        # Read 12 events (4 sessions): their 8 rows of text wait to go into the FTS5 table.
        assert (backfill_index(conn, batch=12), unindexed_events(conn)) == (False, 18 + 8)
        assert found(db, "moose", backfill_budget=0) == []
        assert (index_pending(conn), unindexed_events(conn)) == (True, 18)
        assert len(found(db, "moose", backfill_budget=0)) == 4
        conn.close()
        conn = journal_module._connect(db)  # another process, later, goes on
        assert (backfill_index(conn, batch=12), unindexed_events(conn)) == (False, 6 + 8)
        assert (backfill_index(conn, batch=12), unindexed_events(conn)) == (True, 12)
        assert (index_pending(conn, batch=5), unindexed_events(conn)) == (False, 7)
        assert (index_pending(conn, batch=5), index_pending(conn, batch=5), unindexed_events(conn)) == (False, True, 0)
        assert backfill_index(conn, batch=12) and index_pending(conn)
    finally:
        conn.close()
    assert len(found(db, "moose", backfill_budget=0)) == 10
    assert index_rows(db) == 20


def test_the_journal_puts_text_into_the_index_in_batches(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "INDEX_EVERY", 10)
    journal = Journal(db)
    try:
        for n in range(4):  # 4 indexed events a session
            for event in events_of(Saved(f"s{n}", "/w", f"elk {n}", calls=(("bash", {"command": "ls"}, "elk"),))):
                journal.record(event, f"s{n}", "/w")
            assert journal.flush()
        with sqlite3.connect(db) as conn:
            in_fts = int(conn.execute("SELECT value FROM search_meta WHERE key = 'indexed'").fetchone()[0])
            assert conn.execute("SELECT count(*) FROM search_rows").fetchone()[0] == 16
            assert 12 <= in_fts < 16  # a batch went in after the third session; the fourth's rows wait
            assert unindexed_events(conn) == 16 - in_fts
        # A search with no time to index sees the batches (each session's prompt and result match) ...
        assert len(found(db, "elk", limit=50, backfill_budget=0)) == in_fts // 4 * 2 < 8
        assert len(found(db, "elk", limit=50)) == 8  # ... and one with time puts the rest in first
    finally:
        journal.close()
    with sqlite3.connect(db) as conn:
        assert unindexed_events(conn) == 0


def test_an_index_of_another_version_is_made_again(db: Path) -> None:
    write(db, Saved("s1", "/w", "the tapir"))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE search_meta SET value = '0' WHERE key = 'version'")
        conn.execute("DELETE FROM search_rows")  # as if it had indexed otherwise
    assert [h.session_id for h in found(db, "tapir")] == ["s1"]


# ------------------------------------------------------------------ osprey sessions search


def run_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}
    return subprocess.run([sys.executable, "-m", "osprey", "sessions", "search", *args], env={**env, "OSPREY_HOME": str(home)},
                          capture_output=True, text=True, timeout=60)


def test_the_command_prints_hits_and_json(db: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    write(db, Saved("aaa111", str(one), "fix the \x1b[2J flaky gecko test", calls=(("bash", {"command": "pytest -k gecko"}, "1 passed"),)),
          Saved("bbb222", str(two), "gecko docs"), Saved("ccc333", str(one / "sub"), "child gecko", parent="aaa111"))
    home = db.parent
    out = run_cli(home, "gecko", "--limit", "3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 6 and "\x1b" not in out.stdout
    assert any(line.startswith("ccc333 (child of aaa111)") and line.rstrip().endswith("child gecko") for line in lines)
    assert "«gecko»" in out.stdout and "3 hits" in out.stderr
    data = json.loads(run_cli(home, "gecko", "--json", "--workspace", str(one)).stdout)
    assert data["unindexed"] == 0
    assert sorted((h["session_id"], h["kind"]) for h in data["hits"]) == [("aaa111", "prompt"), ("aaa111", "tool_call"), ("ccc333", "prompt")]
    assert {h["cwd"] for h in data["hits"]} == {str(one), str(one / "sub")}
    assert all("«gecko»" in h["snippet"] for h in data["hits"])
    words = run_cli(home, "flaky", "gecko")  # several words, all required
    assert words.returncode == 0 and words.stdout.startswith("aaa111 ")
    none = run_cli(home, "nothing-here")
    assert none.returncode == 0 and none.stdout.startswith("no hits for 'nothing-here'")
    empty = run_cli(home, "--", "!!")
    assert empty.returncode == 1 and "no words to search for" in empty.stderr
    assert run_cli(home, "gecko", "--limit", "201").returncode == 2
    raw = run_cli(home, "--raw", "gecko NOT docs", "--json")
    assert raw.returncode == 0 and "bbb222" not in raw.stdout and "aaa111" in raw.stdout


# ------------------------------------------------------------------ the session_search tool


class Spawner(ToolSource):
    """A tool that starts one child on `task` and waits for it."""

    name = "spawner"

    def __init__(self, task: str) -> None:
        self.task = task
        self.children: list[ChildAgent] = []

    def tools(self) -> list[Tool]:
        async def run(call: Invocation, ctx: ToolContext) -> str:
            assert ctx.spawn is not None
            child = await ctx.spawn(ChildRequest(task=self.task, name="kid"))
            self.children.append(child)
            end = await child.wait()
            return end.final_text

        return [Tool("spawn_child", "Start a child.", {"type": "object", "properties": {}}, run=run)]


def lead(harness: Harness, script: list[Any], journal: Journal | None, sources: tuple[ToolSource, ...] = ()) -> tuple[Session, FakeProvider]:
    provider = FakeProvider(script)
    options = harness.options("never", None, FAST_RETRY, ())
    return Session(options, emit=harness.events.append, provider=provider, journal=journal, tool_sources=sources), provider


async def test_the_tool_searches_other_sessions_and_leaves_out_its_own_tree(tmp_path: Path) -> None:
    harness = Harness.under(tmp_path)
    path = journal_path(harness.home)
    write(path, Saved("before", str(tmp_path / "elsewhere"), "the narwhal migration"),
          Saved("before-kid", str(tmp_path / "elsewhere"), "narwhal child work", parent="before"))
    spawner = Spawner("narwhal subtask for the child")
    session, provider = lead(harness, [calls(("spawn_child", {})), text("child narwhal answer"),
                                       calls(("session_search", {"query": "narwhal", "limit": 20})),
                                       calls(("session_search", {"query": "narwhal", "workspace": "."})),
                                       calls(("session_search", {"query": "?!"})), text("done")],
                             Journal(path), (spawner,))
    async with session:
        assert "session_search" in session.tool_names()
        assert session.registry is not None
        tool = session.registry.get("session_search")
        assert tool is not None and tool.read_only
        end = await session.submit("Find the narwhal notes.")
        [child] = spawner.children
        assert "session_search" not in child.session.tool_names()  # a lead-agent tool only
    assert end.outcome == "Completed"
    results = [e for e in harness.events if isinstance(e, ToolResultEvent) and e.name == "session_search"]
    assert [r.ok for r in results] == [True, True, False]
    everywhere = results[0].output
    assert "session before " in everywhere and "session before-kid (a child of session before)" in everywhere
    assert session.session_id not in everywhere and child.agent_id not in everywhere
    assert "«narwhal»" in everywhere and "2 hits" in everywhere
    assert results[1].output.startswith("No hits for 'narwhal' in sessions run in")  # the others ran elsewhere
    assert "no words to search for" in results[2].output and results[2].error_category == "invalid_arguments"
    # The lead's own session is found from another session.
    assert session.session_id in {h.session_id for h in found(path, "narwhal")}


async def test_the_tool_is_offered_only_where_there_is_a_journal(tmp_path: Path) -> None:
    harness = Harness.under(tmp_path)
    session, _ = lead(harness, [], None)
    async with session:
        assert "session_search" not in session.tool_names()
    write(journal_path(harness.home), Saved("s1", "/w", "x"))
    session, _ = lead(harness, [], None)  # a run that is not saved still searches the saved ones
    async with session:
        assert "session_search" in session.tool_names()
