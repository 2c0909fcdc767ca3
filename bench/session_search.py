"""Session search over 1,000 journaled sessions: query time against its floor, the journal's write
cost with and without the index, and the time to index an older journal.

The corpus: SESSIONS sessions written through the real Journal, each with a prompt, an answer and
three tool calls whose results are a few KB of words (about 9 events and 7 KB a session).

1. Query time. Each query runs through `search()` as `osprey sessions search` runs it (it opens the
   journal, checks the index, ranks by bm25, makes the snippets of the hits) and beside it on its
   floor: the same FTS5 query (the same MATCH, ranked by bm25, LIMIT, snippets of the hits) on a
   bare FTS5 table holding the same rows, over a connection kept open. The two alternate query by
   query. Median and p90 per kind of query (with the median number of hits): a word of one
   session, a word of 100 sessions, a frequent word, two frequent words, and a frequent word limited
   to one workspace of four.
   Goal: a query under 50 ms.
2. Write cost. ROUNDS rounds, each writing WRITE_SESSIONS sessions through a Journal into a journal
   with the index (its triggers save each event's text in the same transaction, the writer puts
   the text into the FTS5 table in batches) and into one without (the index never made), in
   alternating order: wall time from the first event to the flush, and the process CPU time, per
   1,000 events; the paired ratios (index / none) beside.
3. Indexing an older journal: the index dropped and made again from the 1,000 sessions' events,
   batch by batch as searches do it; the whole time and the longest batch (the longest a session's
   writer can wait for the database lock because of it).

    .venv/bin/python bench/session_search.py [--sessions 1000] [--rounds 5] [--queries 100]
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import figure, median, percentile  # noqa: E402

from osprey.events import AssistantText, Event, SessionStart, ToolCallEvent, ToolResultEvent, UserMessageEvent  # noqa: E402
from osprey.sessions import journal as journal_module  # noqa: E402
from osprey.sessions.journal import Journal, backfill_index, journal_path  # noqa: E402
from osprey.sessions.search import MARK_END, MARK_START, SNIPPET_TOKENS, fts_query, search  # noqa: E402

WORKSPACES = 4
WRITE_SESSIONS = 100
LIMIT = 20


def words(rng: random.Random, count: int) -> str:
    return " ".join(f"{rng.choice('bcdfgklmnprstvz')}{rng.choice('aeiou')}{rng.choice('nrstl')}{rng.randrange(100)}" for _ in range(count))


def session_events(rng: random.Random, n: int, root: Path, start: float) -> tuple[str, str, list[Event]]:
    """Session n: `uniq<n>` in its prompt, `decile` in every 10th, `bash` in its first call."""
    sid, cwd = f"s{n:05d}", str(root / f"ws{n % WORKSPACES}" / f"d{n}")
    ts = start + 60 * n
    events: list[Event] = [
        SessionStart(session_id=sid, provider="openai", model="m", cwd=cwd, tool_service="local", tools=["bash"], approval_policy="never",
                     max_turns=9, ts=ts),
        UserMessageEvent(text=f"{words(rng, 20)} uniq{n:05d}" + (" decile" if n % 10 == 0 else ""), ts=ts + 1)]
    for i, name in enumerate(("bash", "grep", "read_file")):
        events += [ToolCallEvent(turn=i + 1, id=f"c{i}", name=name, arguments={"command": f"{name} {words(rng, 4)}"}, ts=ts + 2 + i),
                   ToolResultEvent(turn=i + 1, id=f"c{i}", name=name, ok=True, output=words(rng, 350), ts=ts + 2.5 + i)]
    events.append(AssistantText(turn=4, text=words(rng, 60), ts=ts + 9))
    return sid, cwd, events


def write_sessions(path: Path, first: int, count: int, root: Path, seed: int) -> tuple[float, float, int]:
    """Journal `count` sessions; (wall seconds, CPU seconds, events) from the first record to the flush."""
    rng = random.Random(seed)
    made = [session_events(rng, n, root, 1_700_000_000.0) for n in range(first, first + count)]
    journal = Journal(path)
    try:
        journal.record(made[0][2][0], made[0][0], made[0][1])  # the database opened before the clock starts
        assert journal.flush()
        wall, cpu = time.perf_counter(), time.process_time()
        total = 0
        for sid, cwd, events in made:
            for event in events[1:] if sid == made[0][0] else events:
                journal.record(event, sid, cwd)
                total += 1
        assert journal.flush(60)
        return time.perf_counter() - wall, time.process_time() - cpu, total
    finally:
        journal.close()


def bare_floor(path: Path, floor_path: Path) -> sqlite3.Connection:
    """A bare FTS5 table (same tokenizer) holding the indexed rows of the journal at `path`."""
    conn = sqlite3.connect(floor_path)
    conn.execute("CREATE VIRTUAL TABLE bare USING fts5 (text, tokenize = 'unicode61 remove_diacritics 2')")
    conn.execute("ATTACH DATABASE ? AS j", (str(path),))
    conn.execute("INSERT INTO bare (rowid, text) SELECT id, text FROM j.search_rows")
    conn.commit()
    conn.execute("DETACH DATABASE j")
    return conn


def floor_query(conn: sqlite3.Connection, match: str) -> int:
    rows = conn.execute("SELECT rowid FROM bare WHERE bare MATCH ? ORDER BY bm25(bare) LIMIT ?", (match, LIMIT)).fetchall()
    for (rowid,) in rows:
        conn.execute("SELECT snippet(bare, 0, ?, ?, '…', ?) FROM bare WHERE bare MATCH ? AND rowid = ?",
                     (MARK_START, MARK_END, SNIPPET_TOKENS, match, rowid)).fetchone()
    return len(rows)


def timed(run: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    hits = run()
    return (time.perf_counter() - start) * 1e3, hits


def query_time(path: Path, root: Path, sessions: int, queries: int, tmp: Path) -> None:
    conn = bare_floor(path, tmp / "floor.db")
    rng = random.Random(7)
    conn.execute("CREATE VIRTUAL TABLE bare_v USING fts5vocab(bare, 'row')")
    frequent = conn.execute("SELECT term FROM bare_v ORDER BY doc DESC LIMIT 50").fetchall()
    kinds: dict[str, Callable[[int], tuple[str, Path | None]]] = {
        "one session's word": lambda i: (f"uniq{rng.randrange(sessions):05d}", None),
        "a word of 10% of sessions": lambda i: ("decile", None),
        "a frequent word": lambda i: (frequent[i % len(frequent)][0], None),
        "two words": lambda i: (f"{frequent[i % len(frequent)][0]} {frequent[(i * 7 + 3) % len(frequent)][0]}", None),
        "one word, one workspace": lambda i: (frequent[i % len(frequent)][0], root / f"ws{i % WORKSPACES}"),
    }
    print(f"\nquery time over {sessions:,} sessions ({conn.execute('SELECT count(*) FROM bare').fetchone()[0]:,} indexed events), "
          f"limit {LIMIT}, {queries} queries of each kind; load {os.getloadavg()[0]:.2f}")
    print(f"  {'query':<28} {'hits':>5} {'search() median':>16} {'p90':>7} {'floor median':>13} {'p90':>7} {'paired x':>9}")
    everything: list[float] = []
    floors: list[float] = []
    for name, make in kinds.items():
        subject, floor, ratios, hits = [], [], [], []
        for i in range(queries):
            query, workspace = make(i)
            def subject_run(query: str = query, workspace: Path | None = workspace) -> int:
                return len(search(path, query, workspace=workspace, limit=LIMIT).hits)

            def floor_run(query: str = query) -> int:
                return floor_query(conn, fts_query(query))

            if i % 2:
                f, _ = timed(floor_run)
                s, found = timed(subject_run)
            else:
                s, found = timed(subject_run)
                f, _ = timed(floor_run)
            hits.append(found)
            subject.append(s)
            floor.append(f)
            ratios.append(s / f)
        everything += subject
        floors += floor
        print(f"  {name:<28} {median(hits):>5g} {median(subject):13.2f} ms {percentile(subject, 90):7.2f} {median(floor):10.2f} ms "
              f"{percentile(floor, 90):7.2f} {median(ratios):8.2f}x")
    print(f"  all queries: median {median(everything):.2f} ms, p90 {percentile(everything, 90):.2f} ms, max {max(everything):.2f} ms "
          f"(floor median {median(floors):.2f} ms, p90 {percentile(floors, 90):.2f} ms); goal: under 50 ms")
    figure(f"session search over {sessions} sessions: median query", median(everything), "ms", floor=median(floors))
    figure(f"session search over {sessions} sessions: p90 query", percentile(everything, 90), "ms", floor=percentile(floors, 90))
    conn.close()


def write_cost(rounds: int, tmp: Path) -> None:
    paths = {"index": journal_path(tmp / "w-index"), "none": journal_path(tmp / "w-none")}
    made = journal_module.ensure_index
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    per: dict[str, float] = {}
    for r in range(rounds):
        order = list(paths) if r % 2 == 0 else list(reversed(paths))
        for name in order:
            journal_module.ensure_index = made if name == "index" else (lambda conn: False)
            try:
                wall, cpu, events = write_sessions(paths[name], r * WRITE_SESSIONS, WRITE_SESSIONS, tmp, seed=r)
            finally:
                journal_module.ensure_index = made
            per[name] = 1000 / events
            results[name].append((wall * 1e3 * per[name], cpu * 1e3 * per[name]))
    with sqlite3.connect(paths["none"]) as conn:
        assert not conn.execute("SELECT name FROM sqlite_master WHERE name = 'search_index'").fetchall()
    print(f"\njournal write cost: {rounds} rounds of {WRITE_SESSIONS} sessions ({WRITE_SESSIONS * 9} events, ~7 KB a session), "
          f"ms per 1,000 events; load {os.getloadavg()[0]:.2f}")
    for name, runs in results.items():
        print(f"  {name:<6} wall median {median([w for w, _ in runs]):7.1f} (min {min(w for w, _ in runs):6.1f}, max {max(w for w, _ in runs):6.1f})"
              f"   cpu median {median([c for _, c in runs]):7.1f}")
    wall_ratios = [a[0] / b[0] for a, b in zip(results["index"], results["none"], strict=True)]
    cpu_ratios = [a[1] / b[1] for a, b in zip(results["index"], results["none"], strict=True)]
    print(f"  index / none, paired by round: wall {median(wall_ratios):.2f}x ({min(wall_ratios):.2f}-{max(wall_ratios):.2f}), "
          f"cpu {median(cpu_ratios):.2f}x ({min(cpu_ratios):.2f}-{max(cpu_ratios):.2f})")
    figure("journal write with the search index: wall per 1000 events", median([w for w, _ in results["index"]]), "ms",
           floor=median([w for w, _ in results["none"]]))


def backfill_time(path: Path) -> None:
    conn = sqlite3.connect(path)
    for kind, name in journal_module._INDEX_OBJECTS:
        conn.execute(f"DROP {kind} IF EXISTS {name}")
    conn.commit()
    conn.close()
    conn = journal_module._connect(path)
    batches: list[float] = []
    start = time.perf_counter()
    while True:
        began = time.perf_counter()
        done = backfill_index(conn)
        batches.append(time.perf_counter() - began)
        if done:
            break
    total = time.perf_counter() - start
    rows = conn.execute("SELECT count(*) FROM search_rows").fetchone()[0]
    conn.close()
    print(f"\nindexing an older journal: {rows:,} events indexed in {total * 1e3:.0f} ms, {len(batches)} batches of "
          f"{journal_module.BACKFILL_BATCH} events, longest batch {max(batches) * 1e3:.1f} ms (median {median(batches) * 1e3:.1f} ms); "
          f"load {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="osprey-search-bench-") as name:
        tmp = Path(name)
        path = journal_path(tmp / "home")
        started = time.perf_counter()
        write_sessions(path, 0, args.sessions, tmp, seed=23)
        print(f"wrote {args.sessions:,} sessions through the journal in {time.perf_counter() - started:.1f} s; "
              f"journal {path.stat().st_size / 2**20:.1f} MiB")
        search(path, "warm", limit=1)
        query_time(path, tmp, args.sessions, args.queries, tmp)
        write_cost(args.rounds, tmp)
        backfill_time(path)


if __name__ == "__main__":
    main()
